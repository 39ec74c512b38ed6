"""Real TCP traffic between two network namespaces, measured by iperf3 (Debian's iperf3)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import hosttools


@contextmanager
def server(ns: str, port: int) -> Iterator[None]:
    """An iperf3 server in namespace `ns` for the block; stopped even when it fails."""
    iperf3 = hosttools.require("iperf3")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, iperf3, "--server", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)  # listening (the client retries a refused connection anyway)
        yield
    finally:
        proc.kill()
        proc.wait(5)


def client(ns: str, address: str, port: int, seconds: int, reverse: bool) -> subprocess.Popen[str]:
    """Start a client in `ns` sending to `address` (`reverse`: receiving from it)."""
    argv = ["ip", "netns", "exec", ns, hosttools.require("iperf3"), "--client", address]
    argv += ["--port", str(port), "--time", str(seconds), "--json", "--connect-timeout", "3000"]
    if reverse:
        argv.append("--reverse")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def received(proc: subprocess.Popen[str]) -> float:
    """What a client's run delivered, in bits per second, as its receiver counted it."""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"iperf3 failed: {out[-500:]} {err[-500:]}"
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])


def rate(ns: str, address: str, port: int, seconds: int = 10, reverse: bool = False) -> float:
    """Bits per second from `ns` to `address` (`reverse`: from `address` to `ns`)."""
    return received(client(ns, address, port, seconds, reverse))
