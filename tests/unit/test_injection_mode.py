"""The injection mode: its flags, the choice at start-up (against the NRI stand-in on a
real socket), what a record keeps of it, and what each mode puts in the CDI spec."""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dradriver import injectionmode, settings
from dradriver.base.errors import ConfigError, DriverError
from dradriver.contract.hookspecs import (
    CDI,
    NRI,
    ClaimRef,
    PodInterface,
    PodRoute,
    PodSysctl,
    Prepared,
)
from dradriver.kernel import netlink
from dradriver.kit import rdma
from dradriver.nri import NriPlugin
from dradriver.nrimode import placing
from dradriver.state import injection
from dradriver.state.moves import IN, Move, moves_of, placement
from dradriver.state.records import FORMAT, PREPARED, ClaimRecord
from dradriver.state.recordstore import RecordStore
from tests.support.fakekernel import FakeKernel
from tests.support.handlers import request
from tests.support.nriruntime import fake_runtime

UID = "5a0c6f5e-0000-4000-8000-000000000001"
REQ = request({"type": "netdev"})[1]  # (check_mode reads only the injection mode)


def _parse(argv: list[str], env: dict[str, str], monkeypatch) -> settings.Settings:
    for name in ("DRA_INJECTION", "DRA_NRI_SOCKET", "DRA_NRI_PLUGIN_INDEX"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    settings.add_flags(parser, run=True)
    return settings.from_args(parser.parse_args(["--node-name", "n", *argv]))


def test_injection_flags_defaults_environment_and_refusals(monkeypatch):
    s = _parse([], {}, monkeypatch)
    assert (s.injection, str(s.nri_socket), s.nri_plugin_index) == (
        "auto",
        "/var/run/nri/nri.sock",
        "10",
    )
    s = _parse([], {"DRA_INJECTION": "NRI", "DRA_NRI_SOCKET": "/x/nri.sock"}, monkeypatch)
    assert (s.injection, s.nri_socket) == ("nri", Path("/x/nri.sock"))
    assert _parse(["--injection", "cdi"], {"DRA_INJECTION": "nri"}, monkeypatch).injection == "cdi"
    for argv, message in (
        (["--injection", "ebpf"], "--injection must be one of auto, cdi, nri"),
        (["--nri-socket", "nri.sock"], "--nri-socket must be an absolute path"),
        (["--nri-socket", "/" + "x" * 120], "at most 107 bytes"),
        (["--nri-plugin-index", "1"], "--nri-plugin-index must be two digits"),
    ):
        with pytest.raises(SystemExit, match=message):
            _parse(argv, {}, monkeypatch)


class _Nothing:
    """A SandboxHandler that does nothing (the choice is what is tested)."""

    def synchronize(self, pods):
        pass

    def run_pod_sandbox(self, pod):
        pass

    def stop_pod_sandbox(self, pod):
        pass

    def remove_pod_sandbox(self, pod):
        pass


def _choose(tmp_path, monkeypatch, mode, sock, nri_claims=()):
    """((mode, plugin needed), whether the plugin was left running)."""
    s = settings.Settings(node_name="n", injection=mode, nri_socket=sock)
    plugin = NriPlugin(sock, _Nothing(), backoff_first=0.05, backoff_max=0.1)
    monkeypatch.setattr(injectionmode, "NRI_REGISTRATION_WAIT", 1.0)
    try:
        chosen = injectionmode.choose(s, plugin, list(nri_claims))
        return chosen, plugin.started
    finally:
        plugin.stop()


def _mode_line(caplog) -> logging.LogRecord:
    [line] = [r for r in caplog.records if r.getMessage() == "injection mode"]
    return line


def test_auto_is_nri_when_the_runtime_accepts_the_plugin(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.injectionmode")
    with fake_runtime() as runtime:

        def serve() -> None:
            conn = runtime.accept()
            conn.configure()
            conn.synchronize([])

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        assert _choose(tmp_path, monkeypatch, "auto", runtime.path) == ((NRI, True), True)
        t.join(30)
    line = _mode_line(caplog)
    assert line.mode == "nri" and "auto: the runtime accepted" in line.reason


def test_auto_falls_back_to_cdi_at_once_without_a_runtime(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.injectionmode")
    missing = tmp_path / "nri.sock"
    assert _choose(tmp_path, monkeypatch, "auto", missing) == ((CDI, False), False)
    assert "no NRI socket at" in _mode_line(caplog).reason
    # A socket file nobody listens on (a runtime that stopped): at once too.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(missing))
    stale.close()
    caplog.clear()
    assert _choose(tmp_path, monkeypatch, "auto", missing) == ((CDI, False), False)
    assert "nothing accepts connections" in _mode_line(caplog).reason


def test_auto_falls_back_to_cdi_when_the_runtime_never_accepts_the_plugin(
    tmp_path, monkeypatch, caplog
):
    """A runtime that takes the connection but never configures the plugin (a hung or
    incompatible one): auto waits NRI_REGISTRATION_WAIT, then CDI, and keeps nothing."""
    caplog.set_level(logging.INFO, logger="dradriver.injectionmode")
    with fake_runtime() as runtime:
        held = []
        t = threading.Thread(target=lambda: held.append(runtime.accept()), daemon=True)
        t.start()
        start = time.monotonic()
        assert _choose(tmp_path, monkeypatch, "auto", runtime.path) == ((CDI, False), False)
        took = time.monotonic() - start
        t.join(30)
    assert held, "the plugin never connected"
    assert 0.9 <= took < 20, took  # NRI_REGISTRATION_WAIT is 1 s here: it waited, then gave up
    line = _mode_line(caplog)
    assert line.mode == "cdi" and "did not accept the NRI plugin" in line.reason


def test_nri_stays_nri_without_a_runtime_and_says_so(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.injectionmode")
    assert _choose(tmp_path, monkeypatch, "nri", tmp_path / "nri.sock") == ((NRI, True), True)
    line = _mode_line(caplog)
    assert line.levelno == logging.WARNING and "pods get no interfaces until it does" in line.reason


def test_cdi_runs_the_plugin_only_for_claims_prepared_in_nri_mode(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.injectionmode")
    sock = tmp_path / "nri.sock"
    assert _choose(tmp_path, monkeypatch, "cdi", sock) == ((CDI, False), False)
    assert _choose(tmp_path, monkeypatch, "cdi", sock, [UID]) == ((CDI, True), True)
    said = [r for r in caplog.records if "there is no NRI socket" in r.getMessage()]
    assert [r.claim for r in said] == [UID]


# -- records ---------------------------------------------------------------------------------


def test_a_record_keeps_its_mode_moves_and_placement(tmp_path):
    store = RecordStore(tmp_path)
    move = Move(
        "drcx",
        "net1",
        ("198.51.100.7/24",),
        (PodRoute("0.0.0.0/0", "198.51.100.1"), PodRoute("203.0.113.0/24", None, 5)),
        (PodSysctl("ipv4", "rp_filter", "2"),),
    )
    record = ClaimRecord(ClaimRef("default", "c", UID), PREPARED, injection=NRI)
    record.moves["nic/d"] = [move, Move(rdma="mlx5_0", returns=True)]
    record.placement["nic/d"] = placement(IN, "sandbox-1", "/run/netns/cni-1")
    store.save(record)
    doc = json.loads(Path(store.path(UID)).read_text())
    assert (doc["version"], doc["writer"], doc["injection"]) == (1, FORMAT, "nri")
    again = store.load(UID)
    assert again is not None and again.moves == record.moves
    assert again.placement == record.placement and again.injection == NRI
    # A record of an older writer is a CDI claim with nothing to move.
    del doc["injection"], doc["moves"], doc["placement"]
    Path(store.path(UID)).write_text(json.dumps(doc))
    old = store.load(UID)
    assert old is not None and (old.injection, old.moves, old.placement) == (CDI, {}, {})


def test_moves_come_from_the_handler_or_else_from_the_netdevices():
    edits = {"netDevices": [{"hostInterfaceName": "drca", "name": "net1"}]}
    assert moves_of(Prepared(edits, {})) == [Move("drca", "net1")]
    described = PodInterface("drca", "net1", ("10.0.0.2/24",), returns=True)
    assert moves_of(Prepared(edits, {}, pod_interfaces=(described,), pod_rdma=("rxe0",))) == [
        Move("drca", "net1", ("10.0.0.2/24",), returns=True),
        Move(rdma="rxe0", returns=True),
    ]


def test_each_mode_puts_in_the_spec_what_it_should():
    edits = {
        "netDevices": [{"hostInterfaceName": "drca", "name": "net1"}],
        "env": ["DRA_RDMA_DEVICE=rxe0"],
        "deviceNodes": [{"path": "/dev/infiniband/uverbs0"}],
    }
    cdi = injection.spec_edits(CDI, "nic-a", edits)
    nri = injection.spec_edits(NRI, "nic-a", edits)
    variables = ["DRA_RDMA_DEVICE=rxe0", "DRA_NETDEV=net1", "DRA_NETDEV_NIC_A=net1"]
    assert cdi == {**edits, "env": variables}
    assert nri == {"env": variables, "deviceNodes": edits["deviceNodes"]}
    assert injection.spec_edits(NRI, "r", {"env": ["X=1"]}) == {"env": ["X=1"]}


# -- RDMA exclusive netns mode ------------------------------------------------------------


def test_exclusive_rdma_needs_nri_mode_and_an_exclusive_host():
    kernel = FakeKernel()
    previous = netlink.use(kernel)
    try:
        config = {"netnsMode": "exclusive"}
        for mode, exclusive_host, expected in (
            (CDI, True, "exclusive needs the NRI injection mode"),
            (NRI, False, "rdma system set netns exclusive"),
        ):
            kernel.rdma_exclusive_mode = exclusive_host
            with pytest.raises(ConfigError, match=expected) as refused:
                rdma.check_mode(replace(REQ, injection=mode), config, "$.rdma")
            assert refused.value.issues[0][0] == "$.rdma.netnsMode"
        kernel.rdma_exclusive_mode = True
        assert rdma.check_mode(replace(REQ, injection=NRI), config, "$.rdma") is True
        assert rdma.check_mode(REQ, {"netnsMode": "shared"}, "$.rdma") is False
    finally:
        netlink.use(previous)


def test_an_exclusive_rdma_device_follows_the_pod_and_comes_back():
    kernel = FakeKernel()
    kernel.rdma = {"mlx5_0": None, "mlx5_1": None}
    kernel.add_namespace("/run/netns/pod")
    previous = netlink.use(kernel)
    try:
        moves = [Move(rdma="mlx5_0", returns=True)]
        placing.move_in(moves, "/run/netns/pod")
        placing.move_in(moves, "/run/netns/pod")  # a repeat finds it there
        assert kernel.rdma == {"mlx5_0": "/run/netns/pod", "mlx5_1": None}
        placing.move_out(moves, "/run/netns/pod")
        assert kernel.rdma == {"mlx5_0": None, "mlx5_1": None}
        kernel.rdma["mlx5_0"] = "/run/netns/other"
        with pytest.raises(DriverError, match="RDMA device mlx5_0 is neither on the host"):
            placing.move_in(moves, "/run/netns/pod")
    finally:
        netlink.use(previous)
