"""A claim's life on this node: commit, undo, release, and repair from its record.

Order of a commit, which makes it crash-safe: each handler journals what it is about to
create or change (a record in phase "preparing", written before any kernel change), does
its kernel work, then the device metadata files and the CDI specs (which mount those
files) are written, then the record in phase "prepared":
the commit point. A failure before the commit undoes what the claim created; a crash
before it leaves a journal that start-up reconciliation rolls back. None of these writes
is fsynced: they must survive a crash of this process, and what they describe does not
survive a crash of the machine. Only the removal of a record at unprepare is durable
(docs/crash-safety.md, "What is fsynced").

A committed record is kept true: `is_intact` says when it no longer is (the machine
rebooted, a spec file or a host interface it names is gone), `restore_specs` writes
missing specs again from the record, `prepare_again` makes the kernel objects anew from
the record (after a reboot), `renew` does it after a pod sandbox used them up (NRI
mode), and `release` is unprepare.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dradriver.base.errors import ConfigError, DeviceError, DriverError
from dradriver.base.log import event
from dradriver.base.timing import phase
from dradriver.claims import attach, devicemeta
from dradriver.claims.plan import Plan, Planner, recorded_config
from dradriver.contract import naming
from dradriver.contract.hookspecs import (
    CDI,
    NRI,
    ClaimRef,
    Device,
    Handler,
    HandlerContext,
    Prepared,
)
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel import linkreaper, netlink
from dradriver.state import cdi, injection, metadata
from dradriver.state.moves import moves_of
from dradriver.state.records import PREPARED, PREPARING, ClaimRecord, DeviceRecord, Encoded
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_REPLACING = "replacing"  # in a journal of prepare_again: the record it replaces


def _device_record(
    plan: Plan, undo: Mapping[str, Any], prepared: Prepared | None = None
) -> DeviceRecord:
    """A planned device's record: a journal entry (undo only), or prepared (all of it)."""
    cdi_id = plan.cdi_device_id if prepared is not None else None
    return DeviceRecord.build(plan.req, plan.type, plan.validated, undo, prepared, cdi_id)


def current_boot_id() -> str | None:
    """This kernel boot's ID (kernel objects do not survive a reboot; records do)."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


class ClaimLifecycle:
    """The effects of preparing and unpreparing one claim; no claim state in memory."""

    def __init__(
        self,
        context: HandlerContext,
        cdi_dir: Path,
        records: RecordStore,
        registry: HandlerRegistry,
        planner: Planner,
        boot_id: str | None,
        reaper: linkreaper.LinkReaper,
        metadata_root: Path | None = None,
    ) -> None:
        """Wire the collaborators; `planner` plans a claim again from its record,
        `reaper` deletes the links of released claims; `metadata_root` (the driver's
        plugin directory) holds the device metadata files (None: none are written)."""
        self.context = context
        self.cdi_dir = cdi_dir
        self.records = records
        self.registry = registry
        self.planner = planner
        self.boot_id = boot_id
        self.reaper = reaper
        self.metadata_root = metadata_root

    # -- commit -------------------------------------------------------------------------

    def commit(
        self,
        ref: ClaimRef,
        plans: Sequence[Plan],
        pod_uids: Sequence[str],
        replacing: ClaimRecord | None = None,
        pod_claim: str | None = None,
    ) -> ClaimRecord:
        """Prepare every planned device, write the specs, commit the record; all or nothing.

        The plans' requests say the injection mode (all the same); in NRI mode the specs
        carry no netDevices and the record says what moves into the pod's namespace.
        `replacing`: the committed record this one replaces (prepare_again); should this
        commit be rolled back, that record is put back, so the repair is tried again.
        `pod_claim`: the pod's name for a claim made from a template (metadata files).
        """
        mode = plans[0].req.injection if plans else CDI
        record = ClaimRecord(
            ref, PREPARING, pod_uids=list(pod_uids), boot_id=self.boot_id, injection=mode
        )
        record.pod_claim_name = replacing.pod_claim_name if replacing else pod_claim
        if replacing is not None:
            # Encoded once: each device's journal write repeats it (a large claim's
            # record is hundreds of kB).
            record.extra[_REPLACING] = Encoded(replacing.to_json().decode().strip())
        done: list[tuple[Plan, Prepared]] = []
        try:
            for plan in plans:
                req = replace(plan.req, journal=self._journaller(record, plan))
                try:
                    with phase("kernel"):
                        prepared = plan.handler.prepare(req)
                except DriverError as exc:
                    raise DriverError(f"request {req.request}: {exc}") from exc
                done.append((plan, prepared))
                record.devices.append(_device_record(plan, prepared.undo, prepared))
                record.configs[plan.req.key] = dict(plan.req.config)
                if plan.req.consumed:
                    record.consumed[plan.req.key] = dict(plan.req.consumed)
                if mode == NRI:
                    record.moves[plan.req.key] = moves_of(prepared)
            mounts = {}
            if self.metadata_root is not None:
                with phase("metadata"):
                    mounts = devicemeta.mounts(self.metadata_root, self._driver, record)
                    devicemeta.write(self.metadata_root, self._driver, record, self._lookup)
            with phase("specs"):
                record.specs = self._specs(ref, done, mounts)
                record.cdi_specs = sorted(record.specs)
                for name, spec in sorted(record.specs.items()):
                    cdi.write_spec(cdi.spec_file(self.cdi_dir, name), spec)
            with phase("index"):
                self.records.index(record)
            record.extra.pop(_REPLACING, None)
            record.phase = PREPARED
            with phase("commit"):
                # The commit point. Not fsynced, like the journal: what it describes
                # does not outlive the machine (docs/crash-safety.md, "What is fsynced").
                self.records.save(record, durable=False)
        except BaseException:
            self.undo(ref, [(p.handler, pr.undo) for p, pr in done])
            self.records.unindex(record)
            if replacing is not None:
                self._put_back(replacing)
            raise
        return record

    def _journaller(self, record: ClaimRecord, plan: Plan) -> Callable[[Mapping[str, Any]], None]:
        """A journal callback persisting a device's undo data before it changes the host."""

        def journal(undo: Mapping[str, Any]) -> None:
            devices = [*record.devices, _device_record(plan, undo)]
            # Only what a rollback needs: the devices' undo (and the record a repair
            # replaces); the configs, moves and specs come with the commit. Each device
            # writes the journal again, so a claim's cost would grow with its square.
            journal = replace(
                record, phase=PREPARING, devices=devices, configs={}, specs={}, moves={}
            )
            with phase("journal"):
                self.records.save(journal, durable=False)
            # (a journal of prepare_again keeps the record it replaces under _REPLACING)

        return journal

    @property
    def _driver(self) -> str:
        return self.context.driver_name

    def _lookup(self, name: str) -> Device | None:
        return self.planner.inventory.lookup(name)

    def _specs(
        self,
        ref: ClaimRef,
        done: list[tuple[Plan, Prepared]],
        mounts: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, Any]:
        """One CDI spec per device type of the claim, each device under its plan's CDI ID
        with its edits as the injection mode has them, plus the metadata file's mount on
        the first device of each request (`mounts`, by device key)."""
        driver = self.context.driver_name
        by_type: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for plan, prepared in done:
            name = cdi.device_name(plan.cdi_device_id)
            marker = injection.claim_env(ref.uid, str(ref)) if plan.validated.into_pod else ""
            edits = injection.spec_edits(
                plan.req.injection, plan.req.request, prepared.edits, marker
            )
            if plan.req.key in mounts:
                edits["mounts"] = [*edits.get("mounts", ()), dict(mounts[plan.req.key])]
            by_type.setdefault(plan.type, []).append((name, edits))
        return {
            naming.cdi_spec_filename(driver, type_, ref.uid): cdi.build_spec(driver, type_, devices)
            for type_, devices in sorted(by_type.items())
        }

    # -- undo ---------------------------------------------------------------------------

    def undo(self, ref: ClaimRef, steps: Sequence[tuple[Handler, Mapping[str, Any]]]) -> None:
        """Undo a failed or interrupted prepare: handlers newest first, specs, record."""
        for handler, undo in reversed(steps):
            try:
                handler.unprepare(undo)
            except Exception as exc:  # keep going: start-up reconciliation retries leaks
                event(log, logging.ERROR, "rollback of a device failed", claim=ref.uid, error=exc)
        cdi.remove_claim_specs(self.cdi_dir, self.context.driver_name, ref.uid)
        if self.metadata_root is not None:
            metadata.remove_claim(self.metadata_root, ref)
        self.records.delete(ref.uid)

    def roll_back(self, record: ClaimRecord) -> ClaimRecord | None:
        """Undo a prepare that was interrupted (its record never reached 'prepared');
        the committed record an interrupted repair replaced is put back and returned."""
        event(log, logging.WARNING, "rolling back interrupted prepare", claim=record.claim.uid)
        steps = []
        for device in record.devices:
            try:
                steps.append((self.registry.get(device.type, device.kind), device.undo))
            except ConfigError as exc:
                event(
                    log,
                    logging.ERROR,
                    "cannot roll back device: no handler",
                    claim=record.claim.uid,
                    device=device.device,
                    error=exc,
                )
        self.undo(record.claim, steps)
        self.records.unindex(record)
        previous = record.extra.get(_REPLACING)
        if previous is None:
            return None
        # An interrupted prepare_again: the claim stays prepared.
        restored = ClaimRecord.from_json(json.dumps(previous).encode())
        self._put_back(restored)
        return restored

    def _put_back(self, record: ClaimRecord) -> None:
        """The committed record a failed repair replaced, with its specs, metadata files
        and pod index entries (undoing the repair removed them)."""
        self.records.save(record)
        self.restore_specs(record)
        self.restore_metadata(record)
        self.records.index(record)

    def release(self, record: ClaimRecord) -> None:
        """Unprepare: handlers newest first, then the specs, then the record. Links the
        driver made are deleted a moment later (dradriver.kernel.linkreaper).

        A handler that cannot finish yet (a host NIC still in a pod's namespace) fails
        it, keeping the record, and the kubelet retries.
        """
        with linkreaper.collecting() as doomed:
            self._release(record)
        self.reaper.delete_later(record.claim.uid, doomed)

    def _release(self, record: ClaimRecord) -> None:
        failures = self._detach(record)
        for device in reversed(record.devices):
            try:
                with phase("kernel"):
                    self.registry.get(device.type, device.kind).unprepare(device.undo)
            except DriverError as exc:
                failures.append(f"request {device.request} device {device.device}: {exc}")
        if failures:
            raise DeviceError("; ".join(failures) + " (will retry)")
        # The record's removal is the durable step; a spec whose removal a crash loses
        # has no record left, and start-up reconciliation deletes it. A prepared record
        # names its specs and requests: those files go without a look at the directories.
        uid, prepared = record.claim.uid, record.phase == PREPARED
        with phase("specs"):
            if prepared and record.cdi_specs:
                cdi.remove_named_specs(
                    self.cdi_dir, self.context.driver_name, uid, record.cdi_specs
                )
            else:
                cdi.remove_claim_specs(self.cdi_dir, self.context.driver_name, uid, False)
            if self.metadata_root is not None:
                requests = [d.request for d in record.devices] if prepared else None
                metadata.remove_claim(self.metadata_root, record.claim, requests)
        with phase("commit"):
            self.records.delete(record.claim.uid)
        with phase("index"):
            self.records.unindex(record)

    def delete_tagged(self, claim_uid: str) -> list[str]:
        """Delete every interface this instance tagged for `claim_uid` (its record is lost)."""
        deleted = []
        for link in netlink.links():
            tag = naming.parse_ifalias(link.alias)
            mine = (
                tag and tag.claim_uid == claim_uid and tag.owned_by(self.context.owner, {claim_uid})
            )
            if mine and netlink.delete(link.name):
                deleted.append(link.name)
        return deleted

    # -- keeping a committed record true ------------------------------------------------

    def is_intact(self, record: ClaimRecord, present: set[str] | None = None) -> str | None:
        """Why a prepared record's answer is no longer true (None if it is).

        The interfaces a record lists as staying on the host while it is prepared (a
        veth's host end) are the witnesses: the one that goes to the container may be in
        the pod already, which is how it should be, so its absence proves nothing. A
        witness gone means the claim's objects were destroyed (the pod's namespace went,
        an unprepare was interrupted, someone deleted it). Cheap: a netlink lookup per
        witness (or `present`, the host's interface names, when the caller has them).
        """
        if (
            record.boot_id is not None
            and self.boot_id is not None
            and record.boot_id != self.boot_id
        ):
            return f"the node rebooted since it was prepared (boot {record.boot_id})"
        for device in record.devices:
            for name in device.host_interfaces:
                gone = name not in present if present is not None else netlink.find(name) is None
                if gone:
                    return f"interface {name}, which stays on the host, is gone"
        return None

    def restore_specs(self, record: ClaimRecord) -> tuple[list[str], list[str]]:
        """Write again the spec files of a record that are missing (or not regular files):
        the ones written, and the ones it could not write."""
        written: list[str] = []
        lost: list[str] = []
        for name in record.cdi_specs:
            path = cdi.spec_file(self.cdi_dir, name)
            if os.path.isfile(path) and not os.path.islink(path):  # noqa: PTH113, PTH114
                continue
            spec = record.specs.get(name)
            if spec is None:
                lost.append(name)  # a record of a driver that did not keep its specs
                continue
            cdi.write_spec(path, spec)
            written.append(name)
            event(
                log,
                logging.WARNING,
                "CDI spec was gone: written again",
                claim=record.claim.uid,
                file=path,
            )
        return written, lost

    def restore_metadata(self, record: ClaimRecord, changed: bool = False) -> bool:
        """Write again the metadata files of a prepared record if one is missing, or
        all of them when its network data `changed` (an attach made it known; the pod's
        containers start after). Never raises: the files inform the pod, the claim stays
        prepared without them (a failure is logged, and tried again at the next prepare
        of the claim)."""
        root = self.metadata_root
        try:
            if root is None or not record.devices:
                return False
            if not changed and not devicemeta.missing(root, record):
                return False
            devicemeta.write(root, self._driver, record, self._lookup)
        except (DriverError, OSError) as exc:
            event(
                log,
                logging.ERROR,
                "cannot write device metadata",
                claim=record.claim.uid,
                error=exc,
            )
            return False
        if not changed:
            event(
                log,
                logging.WARNING,
                "device metadata was gone: written again",
                claim=record.claim.uid,
            )
        return True

    def renew(self, record: ClaimRecord) -> ClaimRecord:
        """Make a prepared claim's kernel objects anew after a pod sandbox used them up
        (NRI mode: a virtual link died with the sandbox's namespace, a physical one was
        given back): what is left of them is undone first (a physical interface the
        kernel returned is found by MAC and restored), then the claim is prepared again
        from its record, with nothing placed in any sandbox."""
        for device in record.devices:
            recorded_config(record, device)  # before undoing anything
        failures = self._detach(record)
        if failures:
            raise DriverError("; ".join(failures))
        for device in reversed(record.devices):
            try:
                self.registry.get(device.type, device.kind).unprepare(device.undo)
            except DriverError as exc:
                raise DriverError(f"request {device.request}: {exc}") from exc
        return self.prepare_again(record)

    def _detach(self, record: ClaimRecord) -> list[str]:
        """Detach what the claim's devices made in pod sandboxes (attach.py), saving
        the record when something was; the failures."""
        failures = attach.detach_all(self.registry, record)
        if failures is None:
            return []
        self.records.save(record)
        return failures

    def prepare_again(self, record: ClaimRecord) -> ClaimRecord:
        """Make a prepared claim's kernel objects anew from its record (after a reboot);
        what its devices made in pod sandboxes is detached first (a CNI network's lease
        outlives a reboot; a failure is logged: the sandboxes are gone)."""
        for failure in self._detach(record):
            event(log, logging.ERROR, "cannot detach", claim=record.claim.uid, error=failure)
        return self.commit(record.claim, self.planner.replan(record), record.pod_uids, record)
