"""Running CNI plugins (CNI spec 1.0): one call, and a list's ADD, DEL and CHECK.

A plugin is an executable in the operator's `--cni-bin-dir`, found by its `type` there
only (never on PATH). It reads its configuration on stdin and the runtime's arguments
from `CNI_*` variables, and answers on stdout: a result for ADD, nothing for DEL and
CHECK, or an error object `{code, msg, details}` with a non-zero exit. Every call is
bounded in time: a plugin still running at its deadline is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dradriver.base.errors import DriverError

from .network import Network

ADD, DEL, CHECK, VERSION = "ADD", "DEL", "CHECK", "VERSION"
MAX_OUTPUT = 1 << 20  # a result beyond this is not a result


class PluginError(DriverError):
    """A plugin failed: names the plugin, the command and the plugin's own error text."""


@dataclass(frozen=True)
class Runtime:
    """What the runtime tells every plugin of one attachment."""

    container_id: str  # the pod sandbox's ID, as runtimes pass it
    netns: str
    ifname: str
    args: tuple[tuple[str, str], ...] = ()  # CNI_ARGS: K8S_POD_NAMESPACE, ...
    capabilities: Mapping[str, Any] = field(default_factory=dict)  # runtimeConfig values


def _budget(seconds: float) -> Callable[[], float]:
    """The seconds left of `seconds` from now, at each call (a sliver at least, so a
    call past the end fails by its own timeout)."""
    end = time.monotonic() + seconds
    return lambda: max(end - time.monotonic(), 0.001)


def binary(bin_dir: Path, plugin: str) -> Path:
    """The plugin's executable; PluginError when it is not there."""
    path = bin_dir / plugin
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise PluginError(f"plugin {plugin} is not installed on this node (no {path})")
    return path


def call(
    bin_dir: Path,
    plugin: str,
    command: str,
    rt: Runtime | None,
    conf: Mapping[str, Any],
    timeout: float,
) -> dict[str, Any] | None:
    """Run one plugin command; its JSON answer (None when it printed nothing)."""
    env = {
        "CNI_COMMAND": command,
        "CNI_PATH": str(bin_dir),
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    }
    if rt is not None:
        env |= {
            "CNI_CONTAINERID": rt.container_id,
            "CNI_NETNS": rt.netns,
            "CNI_IFNAME": rt.ifname,
            "CNI_ARGS": ";".join(f"{k}={v}" for k, v in rt.args),
        }
    what = f"plugin {plugin} (CNI {command})"
    try:
        done = _run([str(binary(bin_dir, plugin))], json.dumps(conf).encode(), env, timeout)
    except subprocess.TimeoutExpired:
        raise PluginError(f"{what} did not finish within {timeout:.2f} s and was killed") from None
    except OSError as exc:
        raise PluginError(f"{what} could not be run: {exc}") from None
    out = done.stdout[:MAX_OUTPUT].strip()
    if done.returncode != 0:
        raise PluginError(f"{what} failed: {_error_text(out, done.stderr, done.returncode)}")
    if not out:
        return None
    try:
        doc = json.loads(out)
    except ValueError:
        raise PluginError(f"{what} printed something that is not JSON: {_brief(out)}") from None
    if not isinstance(doc, dict):
        raise PluginError(f"{what} printed something that is not a JSON object: {_brief(out)}")
    return doc


def _run(
    argv: list[str], stdin: bytes, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run a plugin in a process group of its own; at the timeout the whole group is
    killed (an IPAM plugin the plugin started included), then TimeoutExpired."""
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _error_text(out: bytes, err: bytes, code: int) -> str:
    """A failed plugin's own words: its error object, else its stderr, else its exit code."""
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("msg"):
        text = str(doc["msg"])
        if doc.get("details"):
            text += f": {doc['details']}"
        return f"{text} (CNI error code {doc.get('code')})"
    tail = (err.strip() or out).decode(errors="replace")[-400:]
    return tail or f"exit status {code}, no message"


def _brief(out: bytes) -> str:
    return out[:200].decode(errors="replace")


def add(bin_dir: Path, network: Network, rt: Runtime, timeout: float) -> dict[str, Any]:
    """ADD every plugin in order, each with the previous one's result; the last result.
    On a failure the whole list is deleted again (DEL is told the last result) before
    the error is raised."""
    left = _budget(timeout)
    prev: dict[str, Any] | None = None
    for i, plugin in enumerate(network.types):
        try:
            result = call(
                bin_dir, plugin, ADD, rt, network.plugin_config(i, prev, rt.capabilities),
                left(),
            )  # fmt: skip
            if result is None:
                raise PluginError(f"plugin {plugin} (CNI ADD) printed no result")
        except PluginError as exc:
            leftovers = delete(bin_dir, network, rt, prev, timeout)
            if leftovers:
                raise PluginError(f"{exc}; deleting again: {leftovers}") from None
            raise
        prev = result
    assert prev is not None
    return prev


def delete(
    bin_dir: Path, network: Network, rt: Runtime, prev: Mapping[str, Any] | None, timeout: float
) -> str:
    """DEL every plugin in reverse order, each told the ADD's result if there was one
    and each given `timeout` (the first plugin, whose IPAM holds the address, is never
    left a sliver); every plugin is called even after a failure. The failures ("" none)."""
    failures = []
    for i in reversed(range(len(network.plugins))):
        plugin = network.types[i]
        try:
            call(bin_dir, plugin, DEL, rt, network.plugin_config(i, prev, rt.capabilities),
                 timeout)  # fmt: skip
        except PluginError as exc:
            failures.append(str(exc))
    return "; ".join(failures)


def check(
    bin_dir: Path, network: Network, rt: Runtime, prev: Mapping[str, Any], timeout: float
) -> None:
    """CHECK every plugin in order against the ADD's result; nothing for a network that
    does not allow it (spec before 0.4.0, or `disableCheck`)."""
    if not network.check:
        return
    left = _budget(timeout)
    for i, plugin in enumerate(network.types):
        call(bin_dir, plugin, CHECK, rt, network.plugin_config(i, prev, rt.capabilities),
             left())  # fmt: skip


_VERSIONS: dict[tuple[str, int, int], tuple[str, ...]] = {}


def versions(bin_dir: Path, plugin: str, timeout: float = 2.0) -> tuple[str, ...]:
    """The spec versions a plugin speaks (its VERSION answer), cached per binary."""
    path = binary(bin_dir, plugin)
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _VERSIONS:
        doc = call(bin_dir, plugin, VERSION, None, {"cniVersion": "1.0.0"}, timeout) or {}
        found = doc.get("supportedVersions")
        if not isinstance(found, list):
            raise PluginError(f"plugin {plugin} (CNI VERSION) did not list supportedVersions")
        _VERSIONS[key] = tuple(str(v) for v in found)
    return _VERSIONS[key]
