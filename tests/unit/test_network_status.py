"""The pod annotation k8s.v1.cni.cncf.io/network-status, written in the background:
Multus's format, a newer write replacing a queued one, a pod gone or replaced dropped,
a failing API tried again a bounded number of times."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

from dradriver.apiserver import networkstatus
from dradriver.apiserver.kubeapi import ApiError
from tests.support.waiting import wait_for


class Api:
    def __init__(self, fail: list[int] | None = None) -> None:
        self.calls: list[tuple[str, str, str, dict[str, str]]] = []
        self.fail = list(fail or [])
        self.lock = threading.Lock()

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str]
    ) -> None:
        with self.lock:
            self.calls.append((namespace, name, uid, dict(annotations)))
            if self.fail:
                raise ApiError(self.fail.pop(0), "Failure", "injected")


ENTRY = networkstatus.entry(
    "default/net-a", "net1", ["10.1.0.5/24", "fd00::5/64"], "02:00:00:00:00:01"
)


def test_an_entry_is_multus_format():
    assert ENTRY == {
        "name": "default/net-a",
        "interface": "net1",
        "ips": ["10.1.0.5", "fd00::5"],
        "mac": "02:00:00:00:00:01",
        "default": False,
        "dns": {},
    }
    assert "mac" not in networkstatus.entry("n", "net1", [], None)


def test_written_as_one_annotation_of_json():
    api = Api()
    networkstatus.NetworkStatusWriter(api).submit("ns", "p", "uid-1", [ENTRY])
    wait_for("the write", lambda: api.calls, 30)
    [(namespace, name, uid, annotations)] = api.calls
    assert (namespace, name, uid) == ("ns", "p", "uid-1")
    assert json.loads(annotations[networkstatus.ANNOTATION]) == [ENTRY]


def test_a_failing_write_is_tried_again_then_given_up_and_a_gone_pod_dropped():
    api = Api(fail=[500] * 10)
    writer = networkstatus.NetworkStatusWriter(api, first_pause=0.01)
    writer.submit("ns", "p", "uid-1", [ENTRY])
    wait_for(
        "every try", lambda: len(api.calls) == networkstatus.TRIES and not writer.pending(), 30
    )
    gone = Api(fail=[404])
    writer = networkstatus.NetworkStatusWriter(gone, first_pause=0.01)
    writer.submit("ns", "p", "uid-2", [ENTRY])
    wait_for("the one try", lambda: gone.calls and not writer.pending(), 30)
    assert len(gone.calls) == 1
    assert len(api.calls) == networkstatus.TRIES  # none after giving up
