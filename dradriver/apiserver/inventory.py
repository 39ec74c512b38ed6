"""The node's device inventory: what the handler plugins discover, as published."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import replace

from dradriver.apiserver import slices
from dradriver.contract.hookspecs import Device, HandlerContext
from dradriver.contract.registry import HandlerRegistry


class Inventory:
    """Discovered devices by name; re-discovered on demand, looked up at prepare."""

    def __init__(
        self,
        registry: HandlerRegistry,
        context: HandlerContext,
        allocated: Callable[[Collection[str]], Collection[str]] | None = None,
    ) -> None:
        """Start empty; `refresh` discovers. `allocated` says which of some device names
        prepared claims hold: such a device that discovery no longer finds (a NIC in a
        pod's namespace) stays published as it was last found, so a taint can still
        apply to it."""
        self._registry = registry
        self._allocated = allocated
        self._held: set[str] = set()  # devices kept published for a prepared claim
        self.context = context
        self._fallback = False
        self._lock = threading.Lock()
        self._found: dict[str, Device] | None = None  # as the plugins describe them
        self._published: list[Device] = []

    @property
    def fallback(self) -> bool:
        """Whether shareable devices are published as single-allocation devices."""
        return self._fallback

    def set_fallback(self, fallback: bool) -> None:
        """Switch how shareable devices are published (see slices.single_allocation)."""
        self._fallback = fallback

    def refresh(self) -> list[Device]:
        """Discover again; return every device this node should publish."""
        found = self._registry.discover(self.context)
        with self._lock:
            before = self._found or {}
        found += self._still_allocated(before, {d.name for d in found})
        published = slices.single_allocation(found) if self._fallback else found
        with self._lock:
            self._found = {d.name: d for d in found}
            self._published = published
        return published

    def _still_allocated(self, before: dict[str, Device], now: set[str]) -> list[Device]:
        """The devices found before and not now that prepared claims still hold. The
        records are read only for devices that went away since the last refresh: one
        known to be held stays so until discovery finds it again (its claim released)."""
        gone = [name for name in before if name not in now]
        self._held &= set(gone)
        new = [name for name in gone if name not in self._held]
        if new and self._allocated is not None:
            self._held |= set(self._allocated(new))
        return [replace(before[name]) for name in gone if name in self._held]

    def devices(self) -> list[Device]:
        """The devices found by the last refresh (discovering now if never done)."""
        with self._lock:
            if self._found is not None:
                return list(self._published)
        return self.refresh()

    def lookup(self, name: str) -> Device | None:
        """The device called `name` on this node (either way shareable devices are
        published), discovering again on a miss."""
        with self._lock:
            found = self._found
        for attempt in range(2):
            if found is None or attempt:
                self.refresh()
                with self._lock:
                    found = self._found or {}
            device = found.get(name) or slices.share_of(name, found)
            if device is not None:
                return device
        return None
