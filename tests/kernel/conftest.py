"""Fixtures of the kernel tests."""

from collections.abc import Iterator

import pytest

from tests.support import netns


@pytest.fixture
def pod() -> Iterator[str]:
    """A namespace standing for a pod's sandbox; deleted after the test."""
    name = netns.create("pod")
    yield name
    netns.delete(name)
