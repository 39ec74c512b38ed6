"""The fault-injection and fuzzing suite (make test-faults; part of make test).

What a node really does to the driver: SIGKILL at any moment, broken disks, a slow or
failing API server, a second instance, hostile claim configs. Each test states the
invariant it checks; design.md ("Crash safety", "What the fault suite proves") lists them.
The real daemon runs in a throw-away network namespace against the API stand-in, with
the fixtures of the integration tier.
"""

from __future__ import annotations

from tests.integration.conftest import api, droot, start_driver

__all__ = ["api", "droot", "start_driver"]
