"""Prometheus metrics: prepare/unprepare counts, errors, latency, prepared claims, the
injection mode, pod sandbox events (NRI mode)."""

from __future__ import annotations

from dradriver.base.exposition import Counter, Gauge, Histogram, Registry
from dradriver.base.metricsserver import start_server
from dradriver.base.timing import PhaseClock

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Kubelet calls: fine at the low end, where the latency targets are (docs/performance.md).
_CALL_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0)


class Metrics:
    """The driver's metrics, in a registry of their own (no process collectors)."""

    def __init__(self) -> None:
        """Create the metrics; nothing is served until `serve`."""
        self.registry = Registry()
        r = self.registry
        self.operations = Counter(
            "dra_driver_operations",
            "Claims prepared or unprepared",
            ["operation", "result"],
            registry=r,
        )
        self.latency = Histogram(
            "dra_driver_operation_seconds",
            "Time to prepare or unprepare one claim",
            ["operation"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.prepared_claims = Gauge(
            "dra_driver_prepared_claims",
            "Claims with an allocation record on this node",
            registry=r,
        )
        self.status_failures = Counter(
            "dra_driver_status_write_failures",
            "ResourceClaim status writes that failed",
            registry=r,
        )
        self.claim_reads = Counter(
            "dra_driver_claim_reads",
            "Claims a prepare needed: read before the call (prefetched) or in it (get)",
            ["source"],
            registry=r,
        )
        self.prepared_ahead = Counter(
            "dra_driver_prepared_ahead",
            "Claims prepared before the kubelet asked: prepared, used (asked for), "
            "released (pod done first), failed (the call prepares it again)",
            ["result"],
            registry=r,
        )
        self.call_seconds = Histogram(
            "dra_driver_kubelet_call_seconds",
            "Time from a kubelet call reaching the driver's handler to its answer",
            ["method"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.call_phase_seconds = Counter(
            "dra_driver_kubelet_call_phase_seconds",
            "Time kubelet calls spent in each phase (fetch, lock, plan, kernel, ...)",
            ["method", "phase"],
            registry=r,
        )
        self.publishes = Counter(
            "dra_driver_slice_publishes", "ResourceSlice publish attempts", ["result"], registry=r
        )
        self.injection_mode = Gauge(
            "dra_driver_injection_mode",
            "How new claims' interfaces reach pods: 1 for the mode in force (cdi or nri)",
            ["mode"],
            registry=r,
        )
        self.sandbox_events = Counter(
            "dra_driver_sandbox_events",
            "Pod sandbox events (NRI mode) that concerned claims of this driver",
            ["event", "result"],
            registry=r,
        )
        self.sandbox_latency = Histogram(
            "dra_driver_sandbox_event_seconds",
            "Time to handle one pod sandbox event (NRI mode), the lock wait included",
            ["event"],
            buckets=_BUCKETS,
            registry=r,
        )

    def observe(self, operation: str, seconds: float, ok: bool) -> None:
        """Count one claim operation and its latency."""
        self.operations.labels(operation, "success" if ok else "error").inc()
        self.latency.labels(operation).observe(seconds)

    def observe_call(self, method: str, clock: PhaseClock) -> None:
        """Record one kubelet call's time and where it went."""
        self.call_seconds.labels(method).observe(clock.total)
        for name, seconds in clock.seconds.items():
            self.call_phase_seconds.labels(method, name).inc(seconds)

    def set_injection(self, mode: str, modes: tuple[str, ...] = ("cdi", "nri")) -> None:
        """Show `mode` as the injection mode in force."""
        for m in modes:
            self.injection_mode.labels(m).set(1 if m == mode else 0)

    def observe_sandbox(self, event: str, seconds: float, ok: bool) -> None:
        """Count one pod sandbox event and its latency."""
        self.sandbox_events.labels(event, "success" if ok else "error").inc()
        self.sandbox_latency.labels(event).observe(seconds)

    def serve(self, addr: str) -> None:
        """Serve /metrics on `addr` (host:port) from a daemon thread."""
        host, _, port = addr.rpartition(":")
        start_server(self.registry, host or "0.0.0.0", int(port))
