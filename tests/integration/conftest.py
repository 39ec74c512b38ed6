"""Fixtures that run the real daemon in a namespace against the API stand-in."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.driverproc import DriverProcess
from tests.support.fakeapi import FakeApi

pytestmark = pytest.mark.root


@pytest.fixture
def api(ns: str) -> Iterator[tuple[FakeApi, str]]:
    """The API stand-in, listening on 127.0.0.1 inside the test namespace."""
    fake = FakeApi()
    fake.add_node("node-a")
    with fake.serving(ns) as url:
        yield fake, url


@pytest.fixture
def droot() -> Iterator[Path]:
    """A short directory for kubelet and CDI paths (unix socket paths are limited)."""
    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_driver(
    ns: str, api: tuple[FakeApi, str], droot: Path
) -> Iterator[Callable[..., DriverProcess]]:
    """Start `dra-driver run` processes; all are stopped at teardown."""
    fake, url = api
    tmp_path = droot
    kubeconfig = fake.kubeconfig(url, tmp_path / "kubeconfig")
    started: list[DriverProcess] = []

    def start(*args: str, pod_uid: str | None = None, wait: bool = True) -> DriverProcess:
        proc = DriverProcess(tmp_path, ns, kubeconfig, pod_uid=pod_uid, args=args)
        started.append(proc)
        return proc.start(wait=wait)

    yield start
    for proc in started:
        if proc.proc is not None:
            proc.stop()
