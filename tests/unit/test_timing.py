"""The phase clock: exclusive phases that add up to the call's time."""

from __future__ import annotations

import time

from dradriver.base import timing
from dradriver.base.timing import OTHER, phase, timed_call


def test_nested_phases_are_exclusive_and_add_up_to_the_call():
    with timed_call() as clock:
        time.sleep(0.01)
        with phase("kernel"):
            time.sleep(0.02)
            with phase("journal"):
                time.sleep(0.03)
            time.sleep(0.02)
    seconds = clock.seconds
    assert set(seconds) == {OTHER, "kernel", "journal"}
    assert 0.03 <= seconds["journal"] < 0.06
    assert 0.04 <= seconds["kernel"] < 0.07  # the journal's time is not the kernel's
    assert 0.01 <= seconds[OTHER] < 0.04
    assert abs(sum(seconds.values()) - clock.total) < 1e-9


def test_a_phase_entered_twice_accumulates():
    with timed_call() as clock:
        for _ in range(3):
            with phase("specs"):
                time.sleep(0.005)
    assert clock.seconds["specs"] >= 0.015


def test_a_failing_phase_is_still_closed():
    with timed_call() as clock:
        try:
            with phase("fetch"):
                raise ValueError("boom")
        except ValueError:
            pass
        time.sleep(0.01)
    assert clock.seconds[OTHER] >= 0.01  # after the failure, time goes back to "other"


def test_without_a_clock_phases_do_nothing():
    with phase("kernel"):
        pass
    assert timing._clock.get() is None
