"""The fault-injection and fuzzing suite (make test-faults; part of make test).

What a node really does to the driver: SIGKILL at any moment, broken disks, a slow or
failing API server, a second instance, hostile claim configs. Each test states the
invariant it checks; docs/crash-safety.md ("What the fault suite proves") lists them.
The real daemon runs in a throw-away network namespace against the API stand-in, with
the fixtures of the integration tier; `proxy` and `start_proxied` put a fault-injecting
HTTP proxy (tests/support/apiproxy.py) between the daemon and the stand-in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import api, droot, start_driver
from tests.support.apiproxy import ApiProxy
from tests.support.driverproc import DriverProcess
from tests.support.fakeapi import FakeApi

__all__ = ["BUDGET", "api", "droot", "proxy", "start_driver", "start_proxied"]

# The call budget (--call-budget, given as DRA_CALL_BUDGET) of the daemons these tests
# start: short, so that a call against a hanging API server ends quickly.
BUDGET = 3.0


@pytest.fixture
def proxy(ns: str, api: tuple[FakeApi, str]) -> Iterator[ApiProxy]:
    """The fault-injecting proxy in front of the API stand-in, inside the test namespace."""
    _, url = api
    p = ApiProxy(url, ns)
    with p.serving():
        yield p


@pytest.fixture
def start_proxied(
    ns: str, api: tuple[FakeApi, str], proxy: ApiProxy, droot: Path
) -> Iterator[Callable[..., DriverProcess]]:
    """Start `dra-driver run` processes that reach the API through `proxy`."""
    fake, _ = api
    kubeconfig = fake.kubeconfig(proxy.url, droot / "kubeconfig-proxy")
    started: list[DriverProcess] = []

    def start(
        *args: str, pod_uid: str | None = None, wait: bool = True, budget: float = BUDGET
    ) -> DriverProcess:
        proc = DriverProcess(
            droot,
            ns,
            kubeconfig,
            pod_uid=pod_uid,
            args=args,
            env={"DRA_CALL_BUDGET": f"{budget:g}"},
        )
        started.append(proc)
        return proc.start(wait=wait)

    yield start
    for proc in started:
        if proc.proc is not None:
            proc.stop(timeout=30)
