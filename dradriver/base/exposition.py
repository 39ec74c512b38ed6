"""Counters, gauges and histograms with labels, rendered in the Prometheus text format
0.0.4 (dradriver.base.metricsserver serves them).

The text is what prometheus_client renders for the same metrics, less its `_created`
samples: the metrics in the order they were made, each with its `# HELP` and `# TYPE`
lines; a counter exposed as `<name>_total`; a histogram as its cumulative
`_bucket{le="..."}` samples up to `+Inf`, then `_count` and `_sum`; label names sorted;
numbers as Go writes them (`1.0`, `0.005`, `1.234567e+06`, `+Inf`).
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # of what `Registry.render` writes

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Labels = tuple[tuple[str, str], ...]  # (name, value) pairs
Sample = tuple[str, Labels, float]  # suffix of the metric's name, labels, value


def format_float(value: float) -> str:
    """`value` as Prometheus writes a sample value or bucket bound."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    whole, dot, fraction = text.partition(".")
    if value > 0 and dot and len(whole) > 6:  # Go writes an exponent from 1e+06 on
        digits = (whole + fraction).rstrip("0")
        mantissa = f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits
        return f"{mantissa}e+{len(whole) - 1:02d}"
    return text


def escape_label_value(value: str) -> str:
    """`value` escaped to stand between the double quotes of a label."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class _Value:
    """A number that threads add to, set and read under a lock."""

    __slots__ = ("_lock", "_number")

    def __init__(self) -> None:
        """Start at 0.0."""
        self._lock = threading.Lock()
        self._number = 0.0

    def inc(self, amount: float) -> None:
        """Add `amount`."""
        with self._lock:
            self._number += amount

    def set(self, number: float) -> None:
        """Make it `number`."""
        with self._lock:
            self._number = float(number)

    def get(self) -> float:
        """The number now."""
        with self._lock:
            return self._number


class _OneNumber:
    """A metric child that is one number, exposed as one sample."""

    suffix = ""  # of its sample's name

    def __init__(self) -> None:
        """Start at 0."""
        self._value = _Value()

    def samples(self) -> list[Sample]:
        """Its one sample."""
        return [(self.suffix, (), self._value.get())]


class CounterChild(_OneNumber):
    """One counter: a number that only goes up."""

    suffix = "_total"

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount`, which may not be negative."""
        if amount < 0:
            raise ValueError(f"a counter only goes up: cannot add {amount}")
        self._value.inc(amount)


class GaugeChild(_OneNumber):
    """One gauge: a number that goes up and down."""

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount`."""
        self._value.inc(amount)

    def set(self, number: float) -> None:
        """Make it `number`."""
        self._value.set(number)


class HistogramChild:
    """One histogram: how many observations fell at or below each bound, and their sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        """No observations yet; `bounds` ascend and end with +Inf."""
        self._bounds = bounds
        self._lock = threading.Lock()
        self._counts = [0] * len(bounds)  # per bucket, not cumulative
        self._sum = 0.0

    def observe(self, amount: float) -> None:
        """Count one observation of `amount`."""
        bucket = bisect.bisect_left(self._bounds, amount)  # the first bound >= amount
        with self._lock:
            self._sum += amount
            if not math.isnan(amount):  # NaN is at or below no bound
                self._counts[bucket] += 1

    def samples(self) -> list[Sample]:
        """Its cumulative buckets, then its count and sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out: list[Sample] = []
        seen = 0
        for bound, count in zip(self._bounds, counts, strict=True):
            seen += count
            out.append(("_bucket", (("le", format_float(bound)),), float(seen)))
        out.append(("_count", (), float(seen)))
        out.append(("_sum", (), total))
        return out


ChildT = TypeVar("ChildT", CounterChild, GaugeChild, HistogramChild)


class _Metric(Generic[ChildT]):
    """A named metric: its help, its label names and one child per set of label values."""

    kind: ClassVar[str]
    reserved_labels: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry,
    ) -> None:
        """A metric in `registry`; without labels its one child exists at once."""
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} of {name}")
            if label in self.reserved_labels:
                raise ValueError(f"label {label!r} is reserved in a {self.kind} ({name})")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], ChildT] = {}
        if not self.labelnames:
            self._children[()] = self._new_child()
        registry.register(self)

    @property
    def exposed_name(self) -> str:
        """The name of its `# HELP` and `# TYPE` lines."""
        return self.name

    def labels(self, *values: object) -> ChildT:
        """The child for these label values (in the order of the label names)."""
        if len(values) != len(self.labelnames) or not values:
            raise ValueError(f"{self.name} takes the labels {self.labelnames}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._new_child()
        return child

    def samples(self) -> list[Sample]:
        """Every child's samples, children in the order they were first used."""
        with self._lock:
            children = list(self._children.items())
        out: list[Sample] = []
        for values, child in children:
            labels = tuple(zip(self.labelnames, values, strict=True))
            out.extend((suffix, labels + extra, v) for suffix, extra, v in child.samples())
        return out

    def _only(self) -> ChildT:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels: pick a child with .labels(...)")
        return self._children[()]

    def _new_child(self) -> ChildT:
        raise NotImplementedError


class Counter(_Metric[CounterChild]):
    """A counter, exposed as `<name>_total`."""

    kind = "counter"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry,
    ) -> None:
        """A counter in `registry`; a `_total` ending of `name` is dropped, and added back."""
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry=registry)

    @property
    def exposed_name(self) -> str:
        """The name of its `# HELP` and `# TYPE` lines."""
        return self.name + "_total"

    @property
    def _value(self) -> _Value:  # read as `._value.get()`, as of a prometheus_client metric
        return self._only()._value

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` to the counter without labels."""
        self._only().inc(amount)

    def _new_child(self) -> CounterChild:
        return CounterChild()


class Gauge(_Metric[GaugeChild]):
    """A gauge."""

    kind = "gauge"

    @property
    def _value(self) -> _Value:  # read as `._value.get()`, as of a prometheus_client metric
        return self._only()._value

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` to the gauge without labels."""
        self._only().inc(amount)

    def set(self, number: float) -> None:
        """Make the gauge without labels `number`."""
        self._only().set(number)

    def _new_child(self) -> GaugeChild:
        return GaugeChild()


class Histogram(_Metric[HistogramChild]):
    """A histogram with fixed bucket bounds."""

    kind = "histogram"
    reserved_labels = frozenset({"le"})

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry,
    ) -> None:
        """A histogram in `registry` with these ascending bounds (+Inf added if missing)."""
        bounds = tuple(float(b) for b in buckets)
        if not bounds or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"the buckets of {name} must ascend: {buckets}")
        self.bounds = bounds if bounds[-1] == math.inf else (*bounds, math.inf)
        super().__init__(name, documentation, labelnames, registry=registry)

    def observe(self, amount: float) -> None:
        """Count one observation of the histogram without labels."""
        self._only().observe(amount)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)


class Registry:
    """The metrics one endpoint serves, in the order they were made."""

    def __init__(self) -> None:
        """No metrics yet."""
        self._lock = threading.Lock()
        self._metrics: list[_Metric[Any]] = []

    def register(self, metric: _Metric[Any]) -> None:
        """Add `metric`; its names may not be taken already."""
        names = {metric.name, metric.exposed_name}
        with self._lock:
            for other in self._metrics:
                if names & {other.name, other.exposed_name}:
                    raise ValueError(f"metric {metric.name} is already registered")
            self._metrics.append(metric)

    def render(self) -> str:
        """Every metric in the Prometheus text format 0.0.4."""
        with self._lock:
            metrics = list(self._metrics)
        lines: list[str] = []
        for metric in metrics:
            exposed = metric.exposed_name
            lines.append(f"# HELP {exposed} {_escape_help(metric.documentation)}\n")
            lines.append(f"# TYPE {exposed} {metric.kind}\n")
            for suffix, labels, value in metric.samples():
                lines.append(_sample_line(metric.name + suffix, labels, value))
        return "".join(lines)


def _sample_line(name: str, labels: Labels, value: float) -> str:
    if not labels:
        return f"{name} {format_float(value)}\n"
    pairs = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(labels))
    return f"{name}{{{pairs}}} {format_float(value)}\n"
