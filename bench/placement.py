"""The NRI mode's RunPodSandbox for a claim of N devices, on the real kernel, by step.

In process, in throw-away namespaces (one for the node, one per pod sandbox): a claim
of N veth devices is prepared in NRI mode, placed into a first sandbox, and, after that
sandbox is stopped, removed and its namespace deleted, placed into a second one (what
the runtime asks when a pod's sandbox is made anew: the claim is renewed, then placed).
Each event's time is split by step with the phase clock of dradriver.base.timing: the
facade's kernel calls (move, sysctls, addresses, routes, ...), the record writes, and a
renew's undo and prepare again.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dradriver.apiserver.inventory import Inventory
from dradriver.base import timing
from dradriver.claims.lifecycle import ClaimLifecycle
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import NRI, ClaimRef
from dradriver.kernel import netlink
from dradriver.nri import PodSandbox
from dradriver.nrimode.sandboxes import PodSandboxes
from dradriver.state.recordstore import RecordStore
from tests.support import netns
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.handlers import context
from tests.support.statenode import REGISTRY, SCHEMA, Claims

ROUTES = 32
SYSCTLS = 32
POD_UID = "5a0c6f5e-0000-4000-8000-0000000000bb"
# The facade's functions a placement (and a renew) calls, timed as steps of their own.
KERNEL_STEPS = {
    "move": "move",
    "inside": "enter/leave netns",
    "set_sysctl": "sysctls",
    "add_address": "addresses",
    "set_link": "link set",
    "add_route": "routes",
    "find": "lookups",
    "links": "link dumps",
    "routes": "route dumps",
    "create": "create",
    "delete": "delete",
}


def sysctl_keys(n: int) -> list[tuple[str, str, str]]:
    """(family, key, value) of `n` writable numeric per-interface settings, each with the
    node's default value (so writing it changes nothing a test could mind)."""
    out = []
    for family in ("ipv4", "ipv6"):
        base = Path(f"/proc/sys/net/{family}/conf/default")
        for path in sorted(base.iterdir()):
            if path.name in ("stable_secret", "disable_ipv6", "forwarding", "mc_forwarding"):
                continue
            if not netlink.has_sysctl(f"net/{family}/conf/default/{path.name}"):
                continue
            value = path.read_text().strip()
            if value.lstrip("-").isdigit():
                out.append((family, path.name, value))
    return out[:n]


def netdev(k: int, routes: int, sysctls: int) -> dict[str, Any]:
    """Device k's veth config: one address, `routes` routes via a gateway, `sysctls`."""
    name = f"net{k}"
    cfg: dict[str, Any] = {
        "kind": "veth",
        "interfaceName": name,
        "ipAddresses": [f"10.200.{k}.2/24"],
    }
    if routes:
        cfg["routes"] = [
            {"destination": f"10.{k + 1}.{j}.0/24", "gateway": f"10.200.{k}.1", "metric": 10}
            for j in range(routes)
        ]
    if sysctls:
        cfg["sysctls"] = {
            f"net.{family}.conf.{name}.{key}": value for family, key, value in sysctl_keys(sysctls)
        }
    return cfg


def claim(uid: str, devices: int, routes: int, sysctls: int) -> dict[str, Any]:
    """A claim of `devices` veth devices, one request each, reserved for the pod."""
    results = [
        {
            "request": f"nic{k}",
            "pool": "node-a",
            "device": "netdev-virtual",
            "shareID": str(uuid.uuid4()),
        }
        for k in range(devices)
    ]
    config = [
        opaque({"type": "netdev", "netdev": netdev(k, routes, sysctls)}, requests=[f"nic{k}"])
        for k in range(devices)
    ]
    return allocated_claim("big", results, uid=uid, config=config, pods=[POD_UID])


def _timed(name: str, fn: Callable[..., Any], quiet: tuple[str, ...] = ()) -> Callable[..., Any]:
    """`fn`, its time charged to step `name` (unless a `quiet` step is open: it counts there)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        clock = timing._clock.get()
        if clock is not None and clock._stack[-1] in quiet:
            return fn(*args, **kwargs)
        with timing.phase(name):
            return fn(*args, **kwargs)

    return wrapped


@contextmanager
def _instrumented(lifecycle: ClaimLifecycle) -> Iterator[None]:
    """Charge the facade's calls, record writes and a renew's parts to named steps."""
    renewing = ("renew: undo", "renew: prepare again")
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, new: Any) -> None:
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, new)

    for fn, step in KERNEL_STEPS.items():
        original = getattr(netlink, fn)
        if fn == "inside":
            patch(netlink, fn, _timed_context(step, original))
        else:
            patch(netlink, fn, _timed(step, original, renewing))
    patch(lifecycle.records, "save", _timed("records", lifecycle.records.save, renewing))
    patch(lifecycle, "prepare_again", _timed(renewing[1], lifecycle.prepare_again))
    registry = lifecycle.registry
    patch(registry, "get", _undo_timed(registry.get, renewing[0]))
    try:
        yield
    finally:
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)


def _timed_context(step: str, original: Callable[[str], Any]) -> Callable[[str], Any]:
    """netlink.inside with its entering and leaving (not its block) charged to `step`."""

    @contextmanager
    def inside(path: str) -> Iterator[None]:
        cm = original(path)
        with timing.phase(step):
            cm.__enter__()
        try:
            yield
        except BaseException as exc:
            with timing.phase(step):
                if not cm.__exit__(type(exc), exc, exc.__traceback__):
                    raise
        else:
            with timing.phase(step):
                cm.__exit__(None, None, None)

    return inside


def _undo_timed(get: Callable[..., Any], step: str) -> Callable[..., Any]:
    """registry.get whose handlers' unprepare is charged to `step` (a renew's undo)."""

    class Handler:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def unprepare(self, undo: Any) -> Any:
            with timing.phase(step):
                return self._inner.unprepare(undo)

    return lambda *args: Handler(get(*args))


def _event(fn: Callable[[], None]) -> dict[str, float]:
    """Run one event; its milliseconds in all and by step."""
    with timing.timed_call() as clock:
        fn()
    out = {name: round(s * 1e3, 2) for name, s in clock.seconds.items() if s * 1e3 >= 0.005}
    out["total"] = round(clock.total * 1e3, 2)
    return out


def one(root: Path, devices: int, routes: int, sysctls: int) -> dict[str, Any]:
    """Prepare a claim of `devices` devices, place it in a sandbox, then in a new one."""
    ctx = context(sysfs_root=root / "sys", claim_address_ranges=("10.0.0.0/8",))
    api = Claims()
    uid = str(uuid.uuid4())
    api.fake.add_claim(claim(uid, devices, routes, sysctls))
    preparer = Preparer(
        context=ctx,
        cdi_dir=root / "cdi",
        records=RecordStore(root / "state"),
        registry=REGISTRY,
        schema=SCHEMA,
        inventory=Inventory(REGISTRY, ctx),
        api=api,
        link_deletion_delay=0,
    )
    preparer.injection = NRI
    ref = ClaimRef("default", "big", uid)
    start = time.perf_counter()
    outcome = preparer.prepare([ref])[uid]
    prepare_ms = (time.perf_counter() - start) * 1e3
    if outcome.error is not None:
        raise RuntimeError(outcome.error)
    sandboxes = PodSandboxes(preparer.lifecycle, preparer.gate)
    out: dict[str, Any] = {"devices": devices, "routes": routes, "sysctls": sysctls}
    out["prepare_ms"] = round(prepare_ms, 2)
    pods = []
    try:
        with _instrumented(preparer.lifecycle):
            for i, label in enumerate(("first_sandbox", "new_sandbox")):
                pod_ns = netns.create("place")
                pods.append(pod_ns)
                pod = PodSandbox(f"s{i}", POD_UID, "p", "default", f"/run/netns/{pod_ns}")
                out[label] = _event(lambda pod=pod: sandboxes.run_pod_sandbox(pod))
                sandboxes.stop_pod_sandbox(pod)
                netns.delete(pod_ns)
                gone = PodSandbox(pod.id, pod.uid, pod.name, pod.namespace, "")
                sandboxes.remove_pod_sandbox(gone)
        preparer.unprepare([ref])
    finally:
        for pod_ns in pods:
            netns.delete(pod_ns)
        preparer.reaper.drain(5)
    return out


def placement(sizes: tuple[int, ...], rounds: int) -> list[dict[str, Any]]:
    """Per size and variant (32 routes and 32 sysctls per device, or none): the median
    round's figures (by the new sandbox's total)."""
    out = []
    node = netns.create("bench-place")
    try:
        with netns.inside(node):
            netlink.close()  # this thread's socket reopens in the node's namespace
            for devices in sizes:
                for routes, sysctls in ((ROUTES, SYSCTLS), (0, 0)):
                    runs = []
                    for _ in range(rounds):
                        with tempfile.TemporaryDirectory(prefix="drab-place-") as tmp:
                            root = Path(tmp)
                            (root / "cdi").mkdir()
                            runs.append(one(root, devices, routes, sysctls))
                    runs.sort(key=lambda r: r["new_sandbox"]["total"])
                    median = runs[len(runs) // 2]
                    median["new_sandbox_all_ms"] = [r["new_sandbox"]["total"] for r in runs]
                    median["new_sandbox_p50_ms"] = statistics.median(
                        r["new_sandbox"]["total"] for r in runs
                    )
                    out.append(median)
            netlink.close()
    finally:
        netns.delete(node)
    return out


def rows(figures: list[dict[str, Any]]) -> list[str]:
    """The table's rows: per size and variant, both events in all and their main steps."""
    lines = []
    for f in figures:
        what = f"{f['routes']} routes, {f['sysctls']} sysctls each" if f["routes"] else "plain"
        new = f["new_sandbox"]
        steps = ", ".join(
            f"{name} {ms:.0f}"
            for name, ms in sorted(new.items(), key=lambda item: -item[1])
            if name != "total" and ms >= 1
        )
        lines.append(
            f"| NRI RunPodSandbox, claim of {f['devices']} veth ({what}): first sandbox / "
            f"new sandbox (ms); new by step | {f['first_sandbox']['total']:.0f} / "
            f"{new['total']:.0f} ({steps}) | | | budget 1500 |"
        )
    return lines
