"""What the driver tells the operator about settings that cannot work: which drivers the
DeviceClasses select, the Events it records on its own pod, and the check that no
DeviceClass selects its driver name. The Events reach a real API server in the e2e tier
(test_5_rbac) and `kubectl describe` in the cluster tier (test_3b_bad_values)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from dradriver import selfcheck
from dradriver.apiserver.deviceclasses import classes_for, drivers_of, named_drivers
from dradriver.apiserver.events import (
    BURST,
    MAX_QUEUED,
    NOTE_LIMIT,
    REFILL_SECONDS,
    WARNING,
    EventRecorder,
    ObjectRef,
    event_body,
)
from dradriver.apiserver.kubeapi import ApiError
from dradriver.settings import Settings
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
POD = ObjectRef("Pod", "dra-system", "dra-driver-x7k2p", "0b6c7a1e-uid")


def device_class(name: str, *expressions: str) -> dict[str, Any]:
    """A DeviceClass with one CEL selector per expression."""
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def shipped_classes() -> list[dict[str, Any]]:
    """The DeviceClasses deploy/resourceclass.yaml installs (rendered from the chart)."""
    docs = yaml.safe_load_all((ROOT / "deploy/resourceclass.yaml").read_text())
    return [d for d in docs if d and d.get("kind") == "DeviceClass"]


def test_the_shipped_classes_select_the_default_driver_and_no_other():
    classes = shipped_classes()
    names = [c["metadata"]["name"] for c in classes]
    assert len(names) == 4
    assert classes_for("dra.example.com", classes) == names
    assert classes_for("dra.example.org", classes) == []
    assert named_drivers(classes) == {"dra.example.com": names}


@pytest.mark.parametrize(
    ("expression", "drivers"),
    [
        ('device.driver == "a.example.com"', {"a.example.com"}),
        (
            "device.driver=='a.example.com' && device.attributes['a.example.com'].x",
            {"a.example.com"},
        ),
        ('"a.example.com" == device.driver', {"a.example.com"}),
        ('device.driver == "a.example.com" && device.attributes["x"].y != "z"', {"a.example.com"}),
        # The comparison may not have to hold: the class may select any driver.
        ('device.driver == "a.example.com" || device.driver == "b.example.com"', None),
        ('!(device.driver == "a.example.com")', None),
        ('device.attributes["a"].?kind.orValue("") == "x" && device.driver == "a.x"', None),
        ('device.driver in ["a.example.com", "b.example.com"]', None),
        ("true", None),
    ],
)
def test_the_driver_a_selector_requires(expression, drivers):
    assert drivers_of(device_class("c", expression)) == drivers


def test_a_class_selects_every_driver_its_selectors_allow():
    assert drivers_of({"metadata": {"name": "all"}, "spec": {}}) is None  # no selectors
    both = device_class("both", 'device.driver == "a.x"', 'device.driver == "b.x"')
    assert drivers_of(both) == set()  # all selectors must hold: none can
    classes = [both, device_class("a", 'device.driver == "a.x"')]
    assert classes_for("a.x", classes) == ["a"]
    assert classes_for("b.x", classes) == []
    assert named_drivers(classes) == {"a.x": ["a"]}


def test_an_event_body_is_what_events_k8s_io_v1_accepts():
    body = event_body(
        POD, WARNING, "NoDeviceClass", "n" * 5000, "dra.example.com/driver", "n1", 0.25
    )
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert body["metadata"] == {"name": "dra-driver-x7k2p.ee6b280", "namespace": "dra-system"}
    assert body["eventTime"] == "1970-01-01T00:00:00.250000Z"
    assert body["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "dra-system",
        "name": "dra-driver-x7k2p",
        "uid": "0b6c7a1e-uid",
    }
    assert (body["reason"], body["action"], body["type"]) == ("NoDeviceClass",) * 2 + ("Warning",)
    assert (body["reportingController"], body["reportingInstance"]) == (
        "dra.example.com/driver",
        "n1",
    )
    assert len(body["note"]) == NOTE_LIMIT and body["note"].endswith("...")
    short = event_body(POD, WARNING, "r" * 300, "note", "c/d", "i" * 300, 0)
    assert len(short["reason"]) == len(short["reportingInstance"]) == 128
    assert short["note"] == "note"


def test_an_object_reference_with_a_name_no_object_has_is_refused():
    for namespace, name in [("../kube-system", "p"), ("ns", "a/b"), ("NS", "p"), ("ns", "")]:
        with pytest.raises(ValueError, match="is not a Kubernetes"):
            ObjectRef("Pod", namespace, name, "u")


class Api:
    """Records the requests an EventRecorder sends; `fail` makes each one an ApiError;
    `gate` holds them until set."""

    def __init__(self, fail: bool = False) -> None:
        self.posted: list[tuple[str, str, dict[str, Any]]] = []
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None):
        assert timeout is not None and timeout <= 5
        self.gate.wait(10)
        if self.fail:
            raise ApiError(403, "Forbidden", "events.events.k8s.io is forbidden")
        self.posted.append((method, path, body))


def test_each_distinct_event_is_posted_once():
    api = Api()
    recorder = EventRecorder(api, "dra.example.com", "n1")
    for _ in range(3):
        recorder.record(POD, WARNING, "NotRegistered", "not registered")
    recorder.record(POD, WARNING, "NotRegistered", "another message")
    recorder.stop()
    assert [(m, p, b["note"]) for m, p, b in api.posted] == [
        ("POST", "/apis/events.k8s.io/v1/namespaces/dra-system/events", "not registered"),
        ("POST", "/apis/events.k8s.io/v1/namespaces/dra-system/events", "another message"),
    ]


def test_recording_never_waits_for_the_api_server_and_the_queue_is_bounded():
    api = Api()
    api.gate.clear()  # the API server does not answer
    ticks = iter(range(0, 10**6, 60))  # a minute between records: the rate limit allows all
    recorder = EventRecorder(api, "dra.example.com", "n1", clock=lambda: next(ticks))
    for i in range(MAX_QUEUED + 20):
        recorder.record(POD, WARNING, "R", f"event {i}")  # returns at once: no deadlock
    api.gate.set()
    recorder.stop()
    assert MAX_QUEUED <= len(api.posted) <= MAX_QUEUED + 1  # one was in flight


def test_events_beyond_the_burst_are_dropped_until_the_rate_allows_more(caplog):
    now = [0.0]
    api = Api()
    recorder = EventRecorder(api, "dra.example.com", "n1", clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="dradriver.apiserver.events"):
        for i in range(BURST + 5):  # a burst of distinct failures
            recorder.record(POD, WARNING, "PrepareFailed", f"claim {i}")
        now[0] += REFILL_SECONDS * 2  # two more after two refill periods
        for i in range(5):
            recorder.record(POD, WARNING, "PrepareFailed", f"later claim {i}")
        recorder.stop()
    notes = [b["note"] for _, _, b in api.posted]
    assert notes == [f"claim {i}" for i in range(BURST)] + ["later claim 0", "later claim 1"]
    # A dropped event is not remembered: once the rate allows, its repeat is posted.
    recorder2 = EventRecorder(api, "dra.example.com", "n1", clock=lambda: now[0])
    for i in range(BURST + 1):
        recorder2.record(POD, WARNING, "PrepareFailed", f"again {i}")
    now[0] += REFILL_SECONDS
    recorder2.record(POD, WARNING, "PrepareFailed", f"again {BURST}")  # the kubelet's retry
    recorder2.stop()
    assert [b["note"] for _, _, b in api.posted][-1] == f"again {BURST}"
    dropped = [r for r in caplog.records if r.getMessage() == "event dropped: rate limit"]
    assert len(dropped) == 8 and dropped[0].note == f"claim {BURST}"


def test_an_event_the_api_server_refuses_is_a_warning_in_the_log(caplog):
    recorder = EventRecorder(Api(fail=True), "dra.example.com", "n1")
    with caplog.at_level(logging.WARNING, logger="dradriver.apiserver.events"):
        recorder.record(POD, WARNING, "AllowListUnmatched", "no eth9")
        recorder.stop()
    [record] = [r for r in caplog.records if r.getMessage() == "cannot record an event"]
    assert record.reason == "AllowListUnmatched" and "forbidden" in str(record.error)


class ClassesApi(Api):
    """An API whose DeviceClass list is `classes`, or an error."""

    def __init__(self, classes: list[dict[str, Any]] | None) -> None:
        super().__init__()
        self.classes = classes

    def list_device_classes(self) -> list[dict[str, Any]]:
        if self.classes is None:
            raise ApiError(403, "Forbidden", "deviceclasses is forbidden")
        return self.classes


def reporter_with(api: Api) -> selfcheck.Reporter:
    return selfcheck.Reporter(EventRecorder(api, "dra.example.org", "n1"), POD)


def test_no_device_class_for_the_driver_name_is_a_warning_and_an_event(caplog):
    api = ClassesApi(shipped_classes())
    reporter = reporter_with(api)
    settings = Settings(node_name="n1", driver_name="dra.example.org")
    with caplog.at_level(logging.WARNING, logger="dradriver.selfcheck"):
        selfcheck.check_device_classes(settings, api, reporter)  # type: ignore[arg-type]
        reporter.stop()
    [record] = caplog.records
    assert "no DeviceClass selects driver dra.example.org" in record.getMessage()
    assert record.classes.startswith("dra.example.com (network-devices, virtual-network")
    [(_, _, body)] = api.posted
    assert body["reason"] == "NoDeviceClass" and body["type"] == "Warning"
    assert "no DeviceClass selects driver dra.example.org" in body["note"]
    assert "classes: dra.example.com (network-devices" in body["note"]


def test_a_driver_name_a_class_selects_or_an_unreadable_list_is_not_reported(caplog):
    for api, name in [
        (ClassesApi(shipped_classes()), "dra.example.com"),
        (ClassesApi(None), "x.y"),
    ]:
        reporter = reporter_with(api)
        with caplog.at_level(logging.WARNING, logger="dradriver.selfcheck"):
            selfcheck.check_device_classes(
                Settings(node_name="n1", driver_name=name), api, reporter
            )  # type: ignore[arg-type]
            reporter.stop()
        assert api.posted == [] and caplog.records == []


def test_without_a_pod_the_findings_go_to_the_log_only(caplog):
    settings = Settings(node_name="n1", pod_uid="u1")  # a host process: no pod name
    api = Api()
    reporter = selfcheck.reporter_for(settings, EventRecorder(api, "dra.example.com", "n1"))
    with caplog.at_level(logging.ERROR, logger="dradriver.selfcheck"):
        selfcheck.nag(settings, reporter, nri_lost=True, registered=False)
    assert len(caplog.records) == 2
    reporter.stop()
    assert api.posted == []


def test_the_nag_records_each_problem_once_as_an_event():
    api = Api()
    reporter = reporter_with(api)
    settings = Settings(node_name="n1")
    for _ in range(3):
        selfcheck.nag(settings, reporter, nri_lost=True, registered=False)
    selfcheck.nag(settings, reporter, nri_lost=False, registered=True)
    reporter.stop()
    assert [b["reason"] for _, _, b in api.posted] == ["NriDisconnected", "NotRegistered"]
    assert "hostPaths.kubeletRegistryDir" in api.posted[1][2]["note"]


def test_the_checks_stop_with_the_driver():
    stop = threading.Event()
    api = ClassesApi([])
    done = threading.Thread(
        target=selfcheck.keep_reporting,
        args=(stop, Settings(node_name="n1"), api, reporter_with(api)),
        kwargs={"nri_lost": lambda: False, "registered": lambda: True},
    )
    done.start()
    stop.set()
    wait_for("the checks to stop", lambda: not done.is_alive())
    assert api.posted == []  # stopped before the DeviceClass check
