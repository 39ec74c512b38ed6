"""The driver's own Prometheus text (dradriver/base/exposition.py): the exact lines of a
counter, a gauge and a histogram with labels, and, for the same operations, the very text
prometheus_client renders (its `_created` samples aside), which prometheus_client's parser
reads back as the same samples. The driver's metrics (dradriver/base/metrics.py) are
checked against their prometheus_client twin the same way."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from dradriver.base import metrics as metrics_module
from dradriver.base.exposition import (
    Counter,
    Gauge,
    Histogram,
    Registry,
    escape_label_value,
    format_float,
)
from dradriver.base.metrics import Metrics

INF, NAN = float("inf"), float("nan")


def prometheus_text(registry: prometheus_client.CollectorRegistry) -> str:
    """What prometheus_client renders, less its `_created` families."""
    kept = []
    for line in prometheus_client.generate_latest(registry).decode().splitlines(keepends=True):
        name = line.split(" ")[2] if line.startswith("#") else line.split("{")[0].split(" ")[0]
        if not name.endswith("_created"):
            kept.append(line)
    return "".join(kept)


def parsed(text: str) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (f.name, f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]


def test_a_counter_a_gauge_and_a_histogram_with_labels_render_line_by_line() -> None:
    r = Registry()
    ops = Counter("ops", "Operations done", ["operation", "result"], registry=r)
    Counter("unused", "Never counted", ["result"], registry=r)
    depth = Gauge("queue_depth", "Claims waiting", registry=r)
    latency = Histogram("op_seconds", "Time of one op", ["op"], buckets=(0.005, 1, 2.5), registry=r)
    ops.labels("prepare", "success").inc()
    ops.labels("prepare", "success").inc(2)
    ops.labels("unprepare", "error").inc(0.5)
    depth.set(3)
    depth.inc(-1)
    latency.labels("prepare").observe(0.5)
    latency.labels("prepare").observe(1)  # on a bound: counted in that bucket
    latency.labels("prepare").observe(7)
    assert r.render() == (
        "# HELP ops_total Operations done\n"
        "# TYPE ops_total counter\n"
        'ops_total{operation="prepare",result="success"} 3.0\n'
        'ops_total{operation="unprepare",result="error"} 0.5\n'
        "# HELP unused_total Never counted\n"
        "# TYPE unused_total counter\n"
        "# HELP queue_depth Claims waiting\n"
        "# TYPE queue_depth gauge\n"
        "queue_depth 2.0\n"
        "# HELP op_seconds Time of one op\n"
        "# TYPE op_seconds histogram\n"
        'op_seconds_bucket{le="0.005",op="prepare"} 0.0\n'
        'op_seconds_bucket{le="1.0",op="prepare"} 2.0\n'
        'op_seconds_bucket{le="2.5",op="prepare"} 2.0\n'
        'op_seconds_bucket{le="+Inf",op="prepare"} 3.0\n'
        'op_seconds_count{op="prepare"} 3.0\n'
        'op_seconds_sum{op="prepare"} 8.5\n'
    )


def test_label_values_and_help_are_escaped() -> None:
    r = Registry()
    c = Counter("c", 'Help with \\ and\nnewline and "quotes"', ["path"], registry=r)
    c.labels('a\\b"c\nd').inc()
    assert r.render().splitlines() == [
        '# HELP c_total Help with \\\\ and\\nnewline and "quotes"',
        "# TYPE c_total counter",
        'c_total{path="a\\\\b\\"c\\nd"} 1.0',
    ]
    assert escape_label_value('x"y') == 'x\\"y'
    [family] = text_string_to_metric_families(r.render())
    assert family.documentation == 'Help with \\ and\nnewline and "quotes"'
    assert family.samples[0].labels == {"path": 'a\\b"c\nd'}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1.0"),
        (0.005, "0.005"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (123456.0, "123456.0"),
        (1234567.0, "1.234567e+06"),
        (10000000.0, "1e+07"),
        (-1234567.0, "-1234567.0"),
        (1e16, "1e+16"),
        (INF, "+Inf"),
        (-INF, "-Inf"),
        (NAN, "NaN"),
    ],
)
def test_numbers_are_written_as_prometheus_writes_them(value: float, text: str) -> None:
    assert format_float(value) == text == floatToGoString(value)


def test_numbers_of_every_magnitude_are_written_as_prometheus_client_writes_them() -> None:
    rng = random.Random(7)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 20) for _ in range(5000)]
    values += [float(rng.randint(0, 10**12)) for _ in range(1000)]
    assert [format_float(v) for v in values] == [floatToGoString(v) for v in values]


def _twins() -> tuple[Registry, prometheus_client.CollectorRegistry, dict[str, tuple]]:
    """The same metrics in our registry and in prometheus_client's."""
    ours, theirs = Registry(), prometheus_client.CollectorRegistry(auto_describe=True)
    pairs: dict[str, tuple] = {}
    for make, kind in ((Counter, prometheus_client.Counter), (Gauge, prometheus_client.Gauge)):
        name = kind.__name__.lower()
        pairs[name] = (
            make(name, f"A {name}", ["a", "b"], registry=ours),
            kind(name, f"A {name}", ["a", "b"], registry=theirs),
        )
        pairs[name + "_plain"] = (
            make(name + "_plain", "No labels", registry=ours),
            kind(name + "_plain", "No labels", registry=theirs),
        )
    buckets = (0.001, 0.0025, 0.01, 0.5, 1.0, 5.0, 1e7)
    pairs["hist"] = (
        Histogram("hist_seconds", "A histogram", ["method"], buckets=buckets, registry=ours),
        prometheus_client.Histogram(
            "hist_seconds", "A histogram", ["method"], buckets=buckets, registry=theirs
        ),
    )
    return ours, theirs, pairs


def _label_value(rng: random.Random) -> str:
    return "".join(rng.choice('ab\\"\n {}=,é☃') for _ in range(rng.randint(0, 4)))


def test_random_operations_render_the_text_and_samples_prometheus_client_renders() -> None:
    rng = random.Random(20240501)
    ours, theirs, pairs = _twins()
    values = [_label_value(rng) for _ in range(6)]
    for _ in range(3000):
        which = rng.choice(list(pairs))
        mine, other = pairs[which]
        if which == "hist":
            args = (rng.choice(values),)
            amount = rng.choice([0.001, 1e7, -1.0, rng.uniform(0, 2), rng.expovariate(1e-6)])
            mine.labels(*args).observe(amount)
            other.labels(*args).observe(amount)
            continue
        if not which.endswith("_plain"):
            label_values = (rng.choice(values), rng.randint(0, 3))  # a label value may be no str
            mine, other = mine.labels(*label_values), other.labels(*label_values)
        amount = rng.choice([1.0, 0.25, rng.uniform(0, 1e9), 1234567.0])
        if which.startswith("gauge") and rng.random() < 0.3:
            mine.set(-amount)
            other.set(-amount)
        else:
            mine.inc(amount)
            other.inc(amount)
    text = ours.render()
    assert text == prometheus_text(theirs)
    assert parsed(text) == parsed(prometheus_text(theirs))
    assert "\\n" in text and '\\"' in text and "e+" in text  # the run exercised them


def test_metrics_of_no_children_and_of_plain_values_match_prometheus_client() -> None:
    ours, theirs, _ = _twins()
    assert ours.render() == prometheus_text(theirs)
    assert parsed(ours.render()) == parsed(prometheus_text(theirs))


def _driver_operations(m: Metrics) -> None:
    """What the daemon does to its metrics in a prepare, an unprepare and a sandbox event."""
    m.set_injection("cdi")
    m.prepared_claims.set(4)
    m.observe("prepare", 0.0031, True)
    m.observe("unprepare", 0.7, False)
    m.prepared_claims.inc(1)
    m.prepared_claims.inc(-1)
    call = SimpleNamespace(total=0.0042, seconds={"fetch": 0.001, "kernel": 0.0025, "other": 7e-4})
    m.observe_call("NodePrepareResources", call)  # type: ignore[arg-type]
    m.observe_call("NodePrepareResources", call)  # type: ignore[arg-type]
    m.status_failures.inc()
    m.claim_reads.labels("prefetched").inc(3)
    m.prepared_ahead.labels("used").inc()
    m.publishes.labels("success").inc()
    m.observe_sandbox("RunPodSandbox", 0.012, True)


def test_the_drivers_metrics_render_what_prometheus_client_rendered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours = Metrics()
    with monkeypatch.context() as patch:  # the same definitions on prometheus_client's classes
        patch.setattr(metrics_module, "Registry", prometheus_client.CollectorRegistry)
        for name in ("Counter", "Gauge", "Histogram"):
            patch.setattr(metrics_module, name, getattr(prometheus_client, name))
        theirs = Metrics()
    _driver_operations(ours)
    _driver_operations(theirs)
    text = ours.registry.render()
    assert text == prometheus_text(theirs.registry)
    assert parsed(text) == parsed(prometheus_text(theirs.registry))
    assert 'dra_driver_operations_total{operation="prepare",result="success"} 1.0\n' in text
    assert 'call_seconds_bucket{le="0.005",method="NodePrepareResources"} 2.0\n' in text
    assert ours.status_failures._value.get() == 1.0  # what tests/unit read
    assert ours.prepared_ahead.labels("used")._value.get() == 1.0


class _Yielding(float):
    """An amount whose addition lets other threads run in the middle of an update."""

    def __radd__(self, other: float) -> float:
        time.sleep(0)  # drops the GIL: an unlocked read-add-write loses updates here
        return float(other) + float(self)


def test_threads_updating_at_once_lose_no_update() -> None:
    r = Registry()
    c = Counter("c", "c", ["t"], registry=r)
    g = Gauge("g", "g", registry=r)
    h = Histogram("h", "h", buckets=(0.5,), registry=r)
    threads, each = 8, 300
    start = threading.Barrier(threads)
    one = _Yielding(1.0)

    def work(i: int) -> None:
        start.wait()
        for _ in range(each):
            c.labels(str(i % 2)).inc(one)
            g.inc(one)
            h.observe(one)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    total = threads * each
    assert c.labels("0")._value.get() + c.labels("1")._value.get() == total
    assert g._value.get() == total
    families = text_string_to_metric_families(r.render())
    samples = {s.name: s.value for f in families for s in f.samples}
    assert samples["h_count"] == samples["h_sum"] == total
    assert samples["h_bucket"] == total  # the last one read: +Inf


def test_misuse_is_refused_as_prometheus_client_refuses_it() -> None:
    r = Registry()
    c = Counter("c_total", "c", ["a"], registry=r)  # exposed as c_total, not c_total_total
    assert r.render().startswith("# HELP c_total c\n")
    with pytest.raises(ValueError, match="only goes up"):
        c.labels("x").inc(-1)
    with pytest.raises(ValueError, match="takes the labels"):
        c.labels("x", "y")
    with pytest.raises(ValueError, match="has labels"):
        c.inc()
    with pytest.raises(ValueError, match="takes the labels"):
        Gauge("g", "g", registry=r).labels("x")
    with pytest.raises(ValueError, match="already registered"):
        Gauge("c", "again", registry=r)
    with pytest.raises(ValueError, match="reserved"):
        Histogram("h", "h", ["le"], buckets=(1,), registry=r)
    with pytest.raises(ValueError, match="must ascend"):
        Histogram("h", "h", buckets=(1, 1), registry=r)
    with pytest.raises(ValueError, match="invalid metric name"):
        Gauge("1g", "g", registry=r)
    with pytest.raises(ValueError, match="invalid label name"):
        Gauge("g2", "g", ["__x"], registry=r)
