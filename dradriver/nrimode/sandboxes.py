"""The NRI mode's pod sandbox events: interfaces into a sandbox's namespace, and back.

Implements the NRI layer's SandboxHandler (dradriver.nri; this module does not import
it). A pod's claims come from the pod index (`RecordStore.claims_of_pod`, built from the
claims' `status.reservedFor` at prepare) and their records; only claims prepared in NRI
mode with something to move are touched. All state is in the records (`placement`), so
another instance (a rolling update: the runtime calls both plugins for every event) and
a restarted one see what was done.

* RunPodSandbox: under the cross-instance lock (waited for within the event's budget;
  busy: an error, the runtime fails the sandbox and the kubelet retries), journal the
  move (placement MOVING), move and configure (placing.py), record IN. Already IN this
  sandbox: nothing. Used up by an earlier sandbox of the pod (a virtual link died with
  its namespace, a physical one was given back): prepared again from the record
  (`ClaimLifecycle.renew`), then moved.
* StopPodSandbox (the namespace still exists): physical interfaces and RDMA devices
  move back to the host and are restored as unprepare restores them; everything of the
  sandbox is then SPENT (virtual links die with the namespace).
* RemovePodSandbox (no namespace path any more): what the records say of the sandbox
  is SPENT (a physical interface still inside came back with the namespace's end;
  unprepare or the next renew finds it by MAC).
* CreateContainer: a container using a claim that serves another pod is refused
  (containers.py).
* Synchronize (every connection, so also at start-up): answered at once; a background
  pass then marks SPENT what is placed in sandboxes the runtime no longer has, finishes
  journaled moves, and moves in what running sandboxes never got (the driver was down,
  or crashed, while they were created: the runtime does not wait for a plugin that is
  not connected).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dradriver.apiserver.networkstatus import NetworkStatusWriter
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.claims import attach
from dradriver.claims.budget import CallGate, Deadline
from dradriver.claims.failures import SANDBOX_REASON, FailureEvents
from dradriver.claims.lifecycle import ClaimLifecycle
from dradriver.contract.hookspecs import NRI, PodSandbox
from dradriver.kernel import netlink
from dradriver.nrimode import gone, placing
from dradriver.nrimode.containers import ContainerCheck, NewContainer
from dradriver.nrimode.reports import Sandbox, SandboxReports
from dradriver.state.moves import (
    IN,
    LEAVING,
    MOVING,
    SPENT,
    is_in,
    leaving_in,
    other_pod,
    placed_in,
    placement,
)
from dradriver.state.records import PREPARED, ClaimRecord, CorruptRecord, UnreadableRecord

if TYPE_CHECKING:
    from dradriver.claims.prepare import StatusSink

log = logging.getLogger(__name__)

EVENT_LOCK_WAIT = 0.6  # of the runtime's 1.5 s per event (dradriver.nri answers by then)
SYNC_LOCK_WAIT = 10.0  # the background pass waits longer for each pod


def _claim(record: ClaimRecord) -> str:
    return f"claim {record.claim} ({record.claim.uid})"


class PodSandboxes:
    """What the driver does on pod sandbox events (see the module docstring)."""

    def __init__(
        self,
        lifecycle: ClaimLifecycle,
        gate: CallGate,
        metrics: Metrics | None = None,
        lock_wait: float = EVENT_LOCK_WAIT,
        sync_lock_wait: float = SYNC_LOCK_WAIT,
        status: StatusSink | None = None,
        failures: FailureEvents | None = None,
        network_status: NetworkStatusWriter | None = None,
    ) -> None:
        """Wire the collaborators; `gate` holds the cross-instance lock prepare takes;
        `status` gets a claim prepared again (its interfaces, and MACs, are new);
        `failures` posts a Warning Event on a pod whose sandbox did not get its devices,
        or whose network no longer checks out; `network_status` writes the pod's
        network-status annotation after its networks are made (off: None)."""
        self.lifecycle = lifecycle
        self.records = lifecycle.records
        self.gate = gate
        self.metrics = metrics
        self.status = status
        self.reports = SandboxReports(lifecycle.registry, failures)
        self.network_status = network_status
        self.lock_wait = lock_wait
        self.sync_lock_wait = sync_lock_wait
        self._guard = threading.Lock()
        # While a background pass works on a snapshot (and only then: a node's pods come
        # and go for months between two Synchronizes), the sandboxes the runtime
        # stopped or removed, and ran, since that snapshot.
        self._ended: set[str] = set()
        self._started: set[str] = set()
        self._pending: list[Sandbox] | None = None  # the newest sync snapshot, not done yet
        self._pending_at = 0.0  # when the runtime sent it (wall clock)
        self._worker: threading.Thread | None = None
        self.synced = threading.Event()  # a background pass finished (tests, start-up)
        self.containers = ContainerCheck(self.records)

    # -- the runtime's events -----------------------------------------------------------

    def run_pod_sandbox(self, pod: Sandbox) -> None:
        """Move the pod's interfaces into its sandbox's namespace."""
        self._note(self._started, pod.id)
        try:
            self._event("RunPodSandbox", pod, self._run, self.lock_wait)
        except DriverError as exc:
            self.reports.failed(pod, SANDBOX_REASON, str(exc))
            raise

    def stop_pod_sandbox(self, pod: Sandbox) -> None:
        """Give physical interfaces back to the host; the sandbox's placements are spent."""
        self._note(self._ended, pod.id)
        self._event("StopPodSandbox", pod, self._stop, self.lock_wait)

    def remove_pod_sandbox(self, pod: Sandbox) -> None:
        """Forget the sandbox: its placements are spent."""
        self._note(self._ended, pod.id)
        self._event("RemovePodSandbox", pod, self._remove, self.lock_wait)

    def create_container(self, pod: Sandbox, container: NewContainer) -> None:
        """Refuse a container that uses a network claim another pod holds."""
        self.containers.create_container(pod.uid, pod.namespace, pod.name, container)

    def synchronize(self, pods: Sequence[Sandbox]) -> None:
        """Reconcile the records with the runtime's sandboxes, in the background."""
        with self._guard:
            self._pending, self._pending_at = list(pods), time.time()
            self._ended.clear()
            self._started.clear()
            if self._worker is not None and self._worker.is_alive():
                return  # it takes the new snapshot when it is done with this one
            self.synced.clear()
            self._worker = threading.Thread(target=self._sync_loop, name="nri-sync", daemon=True)
            self._worker.start()

    def _note(self, seen: set[str], sandbox: str) -> None:
        """Remember a sandbox's event for the background pass, if one is under way."""
        with self._guard:
            if self._worker is not None and self._worker.is_alive():
                seen.add(sandbox)

    # -- one event ----------------------------------------------------------------------

    def _event(
        self,
        name: str,
        pod: Sandbox,
        fn: Callable[[Sandbox, list[ClaimRecord]], None],
        wait: float,
    ) -> None:
        """Run `fn` for the pod's NRI claims under the lock; count and time it."""
        if not self.records.claims_of_pod(pod.uid):
            return  # nothing of ours: no lock, no disk beyond one directory lookup
        started = time.perf_counter()
        ok = False
        try:
            with self.gate.call():
                refusal = self.gate.acquire(Deadline.after(wait))
                if refusal is not None:
                    raise DriverError(refusal)
                try:
                    records = self._records(pod.uid)
                    if records:
                        fn(pod, records)
                finally:
                    self.gate.release()
            ok = True
        finally:
            seconds = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.observe_sandbox(name, seconds, ok)
            event(
                log,
                logging.DEBUG,
                "sandbox event",
                event=name,
                pod_uid=pod.uid,
                sandbox=pod.id,
                ok=ok,
                ms=round(seconds * 1000, 1),
            )

    def _records(self, pod_uid: str) -> list[ClaimRecord]:
        """The pod's claims prepared in NRI mode with something to move (read now,
        under the lock: another instance may have changed them)."""
        out = []
        for uid in self.records.claims_of_pod(pod_uid):
            try:
                record = self.records.load(uid)
            except UnreadableRecord as exc:  # a newer instance's: that one handles it
                event(log, logging.WARNING, "record left to a newer driver", claim=uid, error=exc)
                continue
            except CorruptRecord as exc:
                event(log, logging.ERROR, "record unusable", claim=uid, error=exc)
                continue
            if (
                record is not None
                and record.phase == PREPARED
                and record.injection == NRI
                and any(record.moves.values())
            ):
                out.append(record)
        return out

    # -- RunPodSandbox --------------------------------------------------------------------

    def _run(self, pod: Sandbox, records: list[ClaimRecord]) -> None:
        if not pod.netns:
            raise DriverError(
                f"{_claim(records[0])}: the pod uses the node's network namespace "
                "(hostNetwork): its interfaces cannot be moved into the pod"
            )
        placed = [self._place(record, pod) for record in records]
        if self.network_status is not None and any(placed):
            entries = attach.network_status(records, pod.id)
            if entries:
                self.network_status.submit(pod.namespace, pod.name, pod.uid, entries)

    def _place(self, record: ClaimRecord, pod: Sandbox) -> bool:
        """Move every device of the claim into the pod's sandbox (see the module doc);
        whether there was anything to move."""
        keys = [k for k, moves in record.moves.items() if moves]
        todo = [k for k in keys if not is_in(record.placement.get(k), pod.id)]
        if not todo:
            return False
        holder = other_pod(record.placement, todo, pod.id, pod.uid, record.pod_uids)
        if holder is not None:
            raise DriverError(
                f"{_claim(record)}: its interfaces are in the sandbox of pod {holder}, and "
                f"pod {pod.namespace}/{pod.name} ({pod.uid}) asks for them too: a claim with "
                "a network interface serves one pod; this sandbox is refused and that pod "
                "keeps them"
            )
        if not all(self._ready(record, k, pod.id) for k in todo):
            try:
                record = self.lifecycle.renew(record)
            except DriverError as exc:
                raise DriverError(
                    f"{_claim(record)}: prepare again for this sandbox: {exc}"
                ) from exc
            event(
                log,
                logging.INFO,
                "claim prepared again for a new sandbox",
                claim=record.claim.uid,
                sandbox=pod.id,
            )
            if self.status is not None:
                self.status.submit(record)
            todo = keys
        # Only what a CNI network attached is fsynced: where a device is does not outlive
        # the machine (after a reboot the claim is prepared anew).
        made = [k for k in todo if k in record.attached]
        now = time.time()  # a Synchronize snapshot older than this cannot know the sandbox
        try:
            attach.prepare_for(self.lifecycle.registry, record, made)  # cut short before
            for key in todo:
                record.placement[key] = placement(MOVING, pod.id, pod.netns, pod.uid, now)
            self.records.save(record, durable=False)  # the journal: finished at sync
            for key in todo:
                request = key.split("/", 1)[0]
                if key in made:
                    sandbox = PodSandbox(pod.id, pod.netns, pod.uid, pod.namespace, pod.name)
                    attach.attach(self.lifecycle.registry, record, key, sandbox, now, made)
                    continue
                try:
                    placing.move_in(record.moves[key], pod.netns)
                except DriverError as exc:
                    raise DriverError(f"request {request}: {exc}") from exc
                record.placement[key] = placement(IN, pod.id, pod.netns, pod.uid, now)
        except DriverError as exc:
            self.records.save(record, durable=bool(made))
            raise DriverError(f"{_claim(record)}: {exc}") from exc
        self.records.save(record, durable=bool(made))
        if made:  # what the pod got is known only now
            self.lifecycle.restore_metadata(record, changed=True)
            if self.status is not None:
                self.status.submit(record)
        event(
            log,
            logging.INFO,
            "interfaces moved into the pod",
            claim=record.claim.uid,
            pod_uid=pod.uid,
            sandbox=pod.id,
            interfaces=",".join(m.container or m.rdma for k in todo for m in record.moves[k]),
        )
        return True

    def _ready(self, record: ClaimRecord, key: str, sandbox: str) -> bool:
        """Whether a device can move into `sandbox` as it is: on the host as prepared,
        or part-way into this very sandbox (a journal to finish); one made in the
        sandbox always can (what an earlier sandbox has of it is detached first)."""
        if key in record.attached:
            return True
        where = record.placement.get(key)
        if where is None:
            return all(netlink.find(m.host) is not None for m in record.moves[key] if not m.rdma)
        return where.get("sandbox") == sandbox and where.get("state") in (MOVING, IN)

    # -- StopPodSandbox / RemovePodSandbox --------------------------------------------------

    def _stop(self, pod: Sandbox, records: list[ClaimRecord]) -> None:
        failures = []
        for record in records:
            failures += self._detach(record, pod.id)
            keys = [k for k in placed_in(record.placement, pod.id) if k not in record.attached]
            back = [k for k in keys if any(m.returns for m in record.moves[k])]
            if back and netlink.netns_exists(pod.netns):
                for key in back:
                    record.placement[key] = placement(LEAVING, pod.id, pod.netns, pod.uid)
                self.records.save(record, durable=False)
                failures += self._give_back(record, back, pod.netns)
            self._spend(record, keys)
        if failures:
            raise DriverError("; ".join(failures))

    def _spend(self, record: ClaimRecord, keys: list[str]) -> None:
        """Mark the devices `keys` spent in their sandbox and save the record if any were
        (not fsynced: where a device is does not outlive the machine)."""
        for key in keys:
            record.placement[key] = {**record.placement[key], "state": SPENT}
        if keys:
            self.records.save(record, durable=False)

    def _give_back(self, record: ClaimRecord, keys: list[str], netns: str) -> list[str]:
        """Move the devices' physical interfaces home and restore them; the failures."""
        failures = []
        devices = {d.key: d for d in record.devices}
        for key in keys:
            try:
                placing.move_out(record.moves[key], netns)
                device = devices[key]
                self.lifecycle.registry.get(device.type, device.kind).unprepare(device.undo)
            except DriverError as exc:
                # The kernel returns it when the namespace goes; unprepare restores it.
                failures.append(f"{_claim(record)}: request {key.split('/', 1)[0]}: {exc}")
        return failures

    def _remove(self, pod: Sandbox, records: list[ClaimRecord]) -> None:
        failures = []
        for record in records:
            failures += self._detach(record, pod.id)
            keys = [k for k in placed_in(record.placement, pod.id) if k not in record.attached]
            self._spend(record, keys)
        if failures:
            raise DriverError("; ".join(failures))

    def _detach(self, record: ClaimRecord, sandbox: str) -> list[str]:
        """Detach what the claim's devices made in `sandbox`; the failures (each stays
        placed there: unprepare, or the next Synchronize, tries again)."""
        failures = attach.detach_all(self.lifecycle.registry, record, sandbox)
        if failures is not None:
            self.records.save(record)
        return [f"{_claim(record)}: {f}" for f in failures or ()]

    # -- Synchronize ------------------------------------------------------------------------

    def _sync_loop(self) -> None:
        while True:
            with self._guard:
                pods, taken_at, self._pending = self._pending, self._pending_at, None
                if pods is None:  # done: nothing needs the sandboxes seen meanwhile
                    self._ended.clear()
                    self._started.clear()
                    self._worker = None
                    self.synced.set()
                    return
            try:
                self.reconcile(pods, taken_at)
            except Exception:  # a bug must not end the thread silently
                log.exception("reconciling the records with the runtime's sandboxes failed")

    def reconcile(self, pods: Sequence[Sandbox], taken_at: float | None = None) -> None:
        """The pass a Synchronize starts (see the module docstring); per pod under the lock.
        `taken_at`: when the runtime listed `pods` (default: now)."""
        live = {p.id: p for p in pods}
        self._forget_gone(live, time.time() if taken_at is None else taken_at)
        for pod in pods:
            if self.gate.draining:
                return  # shutting down: the next instance's Synchronize does the rest
            with self._guard:
                ended = pod.id in self._ended
            if ended or not pod.netns or not self.records.claims_of_pod(pod.uid):
                continue
            try:
                self._event("Synchronize", pod, self._converge, self.sync_lock_wait)
            except DriverError as exc:
                event(
                    log,
                    logging.ERROR,
                    "cannot give a running sandbox its interfaces",
                    pod=f"{pod.namespace}/{pod.name}",
                    pod_uid=pod.uid,
                    sandbox=pod.id,
                    error=exc,
                )

    def _converge(self, pod: Sandbox, records: list[ClaimRecord]) -> None:
        """A running sandbox: finish what a crash interrupted, move in what it lacks."""
        if not netlink.netns_exists(pod.netns):
            return  # a stopped sandbox the runtime still lists
        leaving = [r for r in records if leaving_in(r.placement, pod.id)]
        if leaving:  # a crash during its stop: finish the stop
            self._stop(pod, leaving)
            return
        for record in records:
            self.reports.check(pod, record)
        self._run(pod, records)

    def _forget_gone(self, live: dict[str, Sandbox], taken_at: float) -> None:
        """Placements in sandboxes the runtime no longer has are spent: not those made
        after its snapshot (by another instance, in a rolling update: the runtime calls
        each plugin in turn, so this one may not have seen that sandbox's event yet)."""

        def known() -> set[str]:
            with self._guard:
                return set(live) | self._started

        gone.spend_gone(
            self.records, self.gate, known, self.sync_lock_wait, taken_at, self.lifecycle.registry
        )
