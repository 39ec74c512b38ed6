"""The phase clock: exclusive phases that add up to the call's time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dradriver.base import timing
from dradriver.base.timing import OTHER, phase, timed_call

_now = [0.0]


def clock_sleep(seconds: float) -> None:
    """Time passes on the test's clock only: exact, whatever the machine is doing."""
    _now[0] += seconds


@pytest.fixture(autouse=True)
def _test_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: _now[0]))


def test_nested_phases_are_exclusive_and_add_up_to_the_call():
    with timed_call() as clock:
        clock_sleep(0.01)
        with phase("kernel"):
            clock_sleep(0.02)
            with phase("journal"):
                clock_sleep(0.03)
            clock_sleep(0.02)
    seconds = clock.seconds
    assert set(seconds) == {OTHER, "kernel", "journal"}
    assert seconds["journal"] == pytest.approx(0.03)
    assert seconds["kernel"] == pytest.approx(0.04)  # the journal's time is not the kernel's
    assert seconds[OTHER] == pytest.approx(0.01)
    assert abs(sum(seconds.values()) - clock.total) < 1e-9


def test_a_phase_entered_twice_accumulates():
    with timed_call() as clock:
        for _ in range(3):
            with phase("specs"):
                clock_sleep(0.005)
    assert clock.seconds["specs"] == pytest.approx(0.015)


def test_a_failing_phase_is_still_closed():
    with timed_call() as clock:
        try:
            with phase("fetch"):
                raise ValueError("boom")
        except ValueError:
            pass
        clock_sleep(0.01)
    assert clock.seconds[OTHER] == pytest.approx(0.01)  # after the failure: "other" again


def test_without_a_clock_phases_do_nothing():
    with phase("kernel"):
        pass
    assert timing._clock.get() is None
