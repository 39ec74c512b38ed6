"""Claims of type cni in the NRI mode, without root: the real Preparer, records, sandbox
events and cni handler, with a CNI plugin stand-in that speaks the exec protocol
(tests/support/fakecni.py) and keeps what it makes as files. The real plugins run in
tests/kernel/test_cni.py and the node tier.

A plugin call is a step like a file write: the driver is made to crash before each, and
after its restart and the runtime's next move nothing the plugins made is left but what
the running sandbox holds.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from dradriver.handlers.cni import runner

from dradriver.contract.hookspecs import CDI, NRI, ClaimRef
from dradriver.nri import PodSandbox
from dradriver.nrimode.sandboxes import PodSandboxes
from dradriver.state import metadata
from dradriver.state.moves import IN, SPENT
from tests.support import fakecni
from tests.support.statenode import POD, UID, Node, claim_object, fsynced

REF = ClaimRef("default", "c", UID)
NETNS = "/run/netns/cni-one"


@pytest.fixture
def cni(node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Plugins `first` and `second` in a bin dir; each call is a step of the node."""
    fakecni.install(tmp_path / "bin", "first", "second")
    (tmp_path / "made").mkdir()
    real = runner.call

    def counted(bin_dir: Path, plugin: str, command: str, *args: Any) -> Any:
        if command != runner.VERSION:
            node.steps.tick(f"cni {command} {plugin}")
        return real(bin_dir, plugin, command, *args)

    monkeypatch.setattr(runner, "call", counted)
    return tmp_path


def _network(state: Path, fail: dict[str, str] | None = None) -> str:
    plugins = [
        {"type": "first", "stateDir": str(state), "address": "10.99.0.5/24"},
        {"type": "second", "stateDir": str(state), **(fail or {})},
    ]
    return json.dumps({"cniVersion": "1.0.0", "name": "net-a", "plugins": plugins})


def _preparer(node: Node, root: Path, injection: str = NRI, **settings: Any) -> Any:
    preparer = node.preparer(cni_bin_dir=root / "bin", cni_plugins=("first", "second"), **settings)
    preparer.injection = injection
    return preparer


def _add(node: Node, cni: dict[str, Any]) -> None:
    params = {"type": "cni", "cni": {"interfaceName": "net1", **cni}}
    node.api.fake.add_claim(claim_object(UID, "netdev-virtual", params, True))


def _pod(sandbox: str = "s1", netns: str = NETNS) -> PodSandbox:
    return PodSandbox(sandbox, POD, "p", "default", netns)


def _sandboxes(preparer: Any) -> PodSandboxes:
    return PodSandboxes(preparer.lifecycle, preparer.gate)


def _teardown(node: Node, sandboxes: PodSandboxes, pod: PodSandbox) -> None:
    sandboxes.stop_pod_sandbox(pod)
    node.kernel.remove_namespace(pod.netns)
    sandboxes.remove_pod_sandbox(PodSandbox(pod.id, pod.uid, pod.name, pod.namespace, ""))


def _made(root: Path) -> list[str]:
    return fakecni.made(root / "made")


def _holds(sandbox: str) -> list[str]:
    return [f"net-a-{sandbox}-net1-first", f"net-a-{sandbox}-net1-second"]


def test_a_sandbox_gets_the_network_and_its_end_deletes_it(node, cni):
    _add(node, {"config": _network(cni / "made")})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    assert _made(cni) == []  # nothing on the node at prepare
    node.kernel.add_namespace(NETNS)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    assert _made(cni) == _holds("s1")
    record = preparer.records.load(UID)
    [(key, where)] = record.placement.items()
    assert where["state"] == IN and json.loads(where["attached"])["result"]["ips"]
    [device] = record.devices
    assert device.network_data == {
        "interfaceName": "net1",
        "ips": ["10.99.0.5/24"],
        "hardwareAddress": "02:00:00:aa:bb:01",
    }
    # The device metadata file the pod's containers read says what the plugins made.
    path = metadata.host_path(node.plugin_dir, REF, "nic")
    first, _ = json.JSONDecoder().raw_decode(path.read_text())
    [request] = first["requests"]
    assert request["devices"][0]["networkData"] == device.network_data
    _sandboxes(preparer).run_pod_sandbox(_pod())  # a repeat (another instance): nothing
    assert _made(cni) == _holds("s1")
    _teardown(node, _sandboxes(preparer), _pod())
    assert _made(cni) == []
    assert preparer.records.load(UID).placement[key]["state"] == SPENT
    node.kernel.add_namespace(NETNS)  # the pod's next sandbox
    _sandboxes(preparer).run_pod_sandbox(_pod("s2"))
    assert _made(cni) == _holds("s2")
    # The kubelet unprepares while the sandbox is still there: the network goes first.
    assert preparer.unprepare([REF])[UID].error is None
    assert _made(cni) == [] and node.files() == []


def test_what_a_network_attached_and_its_deletion_are_fsynced(node, cni, monkeypatch):
    # A plugin's state outlives a reboot (an IPAM lease): only its DEL releases it.
    _add(node, {"config": _network(cni / "made")})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    flushed = fsynced(monkeypatch)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    assert str(node.state_dir) in flushed
    flushed.clear()
    _teardown(node, _sandboxes(preparer), _pod())
    assert _made(cni) == [] and str(node.state_dir) in flushed


def test_a_plugin_failing_mid_chain_fails_the_sandbox_naming_it_and_leaves_nothing(node, cni):
    _add(node, {"config": _network(cni / "made", {"fail": "ADD"})})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    with pytest.raises(Exception) as failed:
        _sandboxes(preparer).run_pod_sandbox(_pod())
    text = str(failed.value)
    assert f"claim default/c ({UID})" in text and "network net-a" in text
    assert "plugin second (CNI ADD) failed: injected failure: second (CNI error code 11)" in text
    assert _made(cni) == []
    assert {w["state"] for w in preparer.records.load(UID).placement.values()} == {SPENT}
    _teardown(node, _sandboxes(preparer), _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert _made(cni) == [] and node.files() == []


def test_a_crash_at_any_step_of_run_is_finished_at_the_next_synchronize(node, cni):
    _add(node, {"config": _network(cni / "made")})
    assert _preparer(node, cni).prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    start = node.steps.count
    _sandboxes(_preparer(node, cni)).run_pod_sandbox(_pod())
    steps = node.steps.count - start
    _teardown(node, _sandboxes(_preparer(node, cni)), _pod())
    assert steps >= 4  # journal, two ADDs, commit
    for step in range(1, steps + 1):
        node.kernel.add_namespace(NETNS)
        crashing = _sandboxes(_preparer(node, cni))
        node.crash_at(step, partial(crashing.run_pod_sandbox, _pod("crashing")))
        restarted = _sandboxes(node.start())
        restarted.synchronize([_pod("crashing")])
        assert restarted.synced.wait(30), step
        assert _made(cni) == _holds("crashing"), (step, node.steps.log[-8:])
        _teardown(node, restarted, _pod("crashing"))
        assert _made(cni) == [], step
    assert _preparer(node, cni).unprepare([REF])[UID].error is None
    assert node.files() == []


@pytest.mark.parametrize("at", ["stop", "unprepare"])
def test_a_crash_at_any_step_of_a_delete_is_finished_after_the_restart(node, cni, at):
    _add(node, {"config": _network(cni / "made")})
    assert _preparer(node, cni).prepare([REF])[UID].error is None

    def end(preparer: Any) -> None:
        if at == "stop":
            _sandboxes(preparer).stop_pod_sandbox(_pod())
        else:
            assert preparer.unprepare([REF])[UID].error is None

    node.kernel.add_namespace(NETNS)
    _sandboxes(_preparer(node, cni)).run_pod_sandbox(_pod())
    start = node.steps.count
    end(_preparer(node, cni))
    steps = node.steps.count - start
    node.kernel.remove_namespace(NETNS)
    for step in range(1, steps + 1):
        if _preparer(node, cni).records.load(UID) is None:
            assert _preparer(node, cni).prepare([REF])[UID].error is None
        node.kernel.add_namespace(NETNS)
        _sandboxes(_preparer(node, cni)).run_pod_sandbox(_pod())
        node.crash_at(step, partial(end, _preparer(node, cni)))
        restarted = node.start()
        if at == "stop":  # the runtime went on without the driver: the sandbox is gone
            node.kernel.remove_namespace(NETNS)
            sandboxes = _sandboxes(restarted)
            sandboxes.synchronize([])
            assert sandboxes.synced.wait(30), step
        else:  # the kubelet calls again
            assert restarted.unprepare([REF])[UID].error is None, step
            node.kernel.remove_namespace(NETNS)
        assert _made(cni) == [], (step, node.steps.log[-8:])
    assert _preparer(node, cni).unprepare([REF])[UID].error is None
    assert node.files() == []


def test_a_sandbox_gone_unseen_is_deleted_at_synchronize(node, cni):
    _add(node, {"config": _network(cni / "made")})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    node.kernel.remove_namespace(NETNS)  # stopped and removed while the driver was down
    sandboxes = _sandboxes(_preparer(node, cni))
    sandboxes.synchronize([])
    assert sandboxes.synced.wait(30)
    assert _made(cni) == []
    assert {w["state"] for w in preparer.records.load(UID).placement.values()} == {SPENT}
    assert preparer.unprepare([REF])[UID].error is None


def test_a_network_attachment_definition_is_read_once_and_kept(node, cni):
    node.api.fake.add_nad("default", "net-a", _network(cni / "made"))
    _add(node, {"networkAttachment": "net-a"})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.api.fake.nads.clear()  # deleted after the prepare: the record has what it said
    node.kernel.add_namespace(NETNS)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    assert _made(cni) == _holds("s1")
    _teardown(node, _sandboxes(preparer), _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert _made(cni) == [] and node.files() == []


@pytest.mark.parametrize(
    "cni_config, error",
    [
        (
            {"networkAttachment": "missing"},
            "request nic: config $.cni.networkAttachment: NetworkAttachmentDefinition "
            "default/missing not found (or its CRD is not installed)",
        ),
        (
            {"networkAttachment": "other/net-a"},
            "request nic: config $.cni.networkAttachment: NetworkAttachmentDefinition "
            "other/net-a is in another namespace than the claim's (default); the operator "
            "allows none (--nad-namespaces)",
        ),
        (
            {"networkAttachment": "net-a", "config": "{}"},
            "request nic: config $.cni.config: networkAttachment and config are both set: set "
            "only one of them",
        ),
        (
            {"interfaceName": "net2"},
            "request nic: config $.cni.networkAttachment: required: one of networkAttachment "
            "and config",
        ),
        (
            {"config": '[{"type": "bridge"}]'},
            'request nic: config $.cni.config: \'[{"type": "bridge"}]\' is invalid: a CNI '
            "network configuration (list), as JSON text (an object)",
        ),
        (
            {"config": '{"cniVersion": "1.0.0", "name": "x", "type": "bridge"}'},
            "request nic: config $.cni.config plugins[0].type: plugin bridge is not allowed on "
            "this node (--cni-plugins: first,second)",
        ),
    ],
    ids=["unknown", "other-namespace", "both", "neither", "not-an-object", "not-allowed"],
)
def test_bad_input_is_refused_at_prepare_naming_the_field(node, cni, cni_config, error):
    node.api.fake.add_nad("other", "net-a", _network(cni / "made"))
    _add(node, cni_config)
    outcome = _preparer(node, cni).prepare([REF])[UID]
    assert outcome.error is not None and error in outcome.error, outcome.error
    assert node.files() == [] and _made(cni) == []


def test_cdi_mode_is_refused_with_the_reason(node, cni):
    _add(node, {"config": _network(cni / "made")})
    outcome = _preparer(node, cni, CDI).prepare([REF])[UID]
    assert outcome.error is not None
    assert "needs the NRI injection mode" in outcome.error
    assert "the plugins run in the pod sandbox's network namespace" in outcome.error
    assert node.files() == []


class Reported:
    """FailureEvents as the daemon wires it, keeping what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None]] = []

    def sandbox(self, pod: Any, reason: str, error: str, claim: ClaimRef | None) -> None:
        self.events.append((pod.name, reason, error, claim.uid if claim else None))


def test_a_network_changed_by_hand_is_reported_on_the_pod_and_the_claim_at_restart(node, cni):
    _add(node, {"config": _network(cni / "made")})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    (cni / "made" / _holds("s1")[1]).unlink()  # what `second` made, removed by hand
    reported = Reported()
    restarted = PodSandboxes(preparer.lifecycle, preparer.gate, failures=reported)
    restarted.synchronize([_pod()])
    assert restarted.synced.wait(30)
    [(pod, reason, error, claim)] = reported.events
    assert (pod, reason, claim) == ("p", "NetworkCheckFailed", UID)
    assert f"claim default/c ({UID}): request nic: network net-a: " in error
    assert "plugin second (CNI CHECK) failed: net1 is not there" in error
    assert preparer.records.load(UID).placement  # not hidden, not undone: the pod keeps it
    _teardown(node, restarted, _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert _made(cni) == []


def test_a_sandbox_that_did_not_get_its_network_is_reported_on_its_pod(node, cni):
    _add(node, {"config": _network(cni / "made", {"fail": "ADD"})})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    reported = Reported()
    with pytest.raises(Exception, match="injected failure"):
        PodSandboxes(preparer.lifecycle, preparer.gate, failures=reported).run_pod_sandbox(_pod())
    [(pod, reason, error, claim)] = reported.events
    assert (pod, reason, claim) == ("p", "SandboxNetworkFailed", None)
    assert "plugin second (CNI ADD) failed: injected failure" in error
    _teardown(node, _sandboxes(preparer), _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_a_plugin_slower_than_the_timeout_is_killed_the_sandbox_fails_and_nothing_is_left(
    node, cni
):
    _add(node, {"config": _network(cni / "made", {"sleep": 30})})
    preparer = _preparer(node, cni, cni_timeout=0.5)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    started = time.monotonic()
    with pytest.raises(Exception, match=r"plugin second \(CNI ADD\) did not finish within"):
        _sandboxes(preparer).run_pod_sandbox(_pod())
    assert time.monotonic() - started < 10  # not the plugin's 30 s
    assert _made(cni) == []
    _teardown(node, _sandboxes(preparer), _pod())
    assert preparer.unprepare([REF])[UID].error is None


class Annotations:
    """The NetworkStatusWriter as the sandbox handler uses it, keeping what it submits."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str, str, list[dict[str, Any]]]] = []

    def submit(self, namespace: str, name: str, uid: str, entries: list[dict[str, Any]]) -> None:
        self.submitted.append((namespace, name, uid, entries))


def test_the_pods_network_status_is_written_as_multus_writes_it_once_per_sandbox(node, cni):
    node.api.fake.add_nad("default", "net-a", _network(cni / "made"))
    _add(node, {"networkAttachment": "net-a"})
    preparer = _preparer(node, cni)
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    written = Annotations()
    sandboxes = PodSandboxes(preparer.lifecycle, preparer.gate, network_status=written)
    sandboxes.run_pod_sandbox(_pod())
    sandboxes.run_pod_sandbox(_pod())  # a repeat (another instance's event): nothing new
    assert written.submitted == [
        (
            "default",
            "p",
            POD,
            [
                {
                    "name": "default/net-a",
                    "interface": "net1",
                    "ips": ["10.99.0.5"],
                    "mac": "02:00:00:aa:bb:01",
                    "default": False,
                    "dns": {},
                }
            ],
        )
    ]
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_a_reboot_deletes_the_networks_of_the_sandboxes_it_ended(node, cni):
    """A CNI network's lease is a file on the node: it outlives the reboot that ended
    the sandbox, so the claim prepared again at start deletes it first."""
    from dradriver.claims import reconcile

    _add(node, {"config": _network(cni / "made")})
    preparer = _preparer(node, cni)
    preparer.lifecycle.boot_id = "boot-1"
    assert preparer.prepare([REF])[UID].error is None
    node.kernel.add_namespace(NETNS)
    _sandboxes(preparer).run_pod_sandbox(_pod())
    assert _made(cni) == _holds("s1")
    node.kernel.remove_namespace(NETNS)  # the reboot: the sandbox went with it
    restarted = _preparer(node, cni)
    restarted.lifecycle.boot_id = "boot-2"
    loaded, _ = restarted.records.load_all()
    report = reconcile.reconcile(loaded, node.cdi_dir, "dra.example.com", restarted.lifecycle)
    assert report.reprepared_claims == [UID]
    assert _made(cni) == []
    assert restarted.records.load(UID).placement == {}
    assert restarted.unprepare([REF])[UID].error is None
    assert node.files() == []
