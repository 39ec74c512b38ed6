"""The one poll-until helper the tests use to wait for something asynchronous: the local
cluster's own (localcluster/waiting.py)."""

from __future__ import annotations

from localcluster.waiting import wait_for

__all__ = ["wait_for"]
