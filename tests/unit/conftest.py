"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.statenode import Node, make_node


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    """An in-process node for the prepare state machine (tests.support.statenode)."""
    yield from make_node(tmp_path, monkeypatch)
