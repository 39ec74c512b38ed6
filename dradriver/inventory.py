"""The node's device inventory: the virtual device plus what handlers discover."""

from __future__ import annotations

import threading

from dradriver import slices
from dradriver.hookspecs import Device, HandlerContext
from dradriver.registry import HandlerRegistry


class Inventory:
    """Discovered devices by name; re-discovered on demand, looked up at prepare."""

    def __init__(
        self, registry: HandlerRegistry, context: HandlerContext, virtual_slots: int
    ) -> None:
        """Start empty; `refresh` discovers."""
        self._registry = registry
        self.context = context
        self._slots = virtual_slots
        self._fallback = False
        self._lock = threading.Lock()
        self._devices: dict[str, Device] | None = None

    @property
    def fallback(self) -> bool:
        """Whether the virtual device is published as single-allocation devices."""
        return self._fallback

    def set_fallback(self, fallback: bool) -> None:
        """Switch how the virtual device is published (see slices.virtual_devices)."""
        self._fallback = fallback

    def refresh(self) -> list[Device]:
        """Discover again; return every device this node should publish."""
        found = slices.virtual_devices(self._slots, self._fallback)
        found += self._registry.discover(self.context)
        with self._lock:
            self._devices = {d.name: d for d in found}
        return found

    def devices(self) -> list[Device]:
        """The devices found by the last refresh (discovering now if never done)."""
        with self._lock:
            known = self._devices
        return list(known.values()) if known is not None else self.refresh()

    def lookup(self, name: str) -> Device | None:
        """The device called `name` on this node, discovering again on a miss."""
        if slices.is_virtual_device(name):
            return slices.virtual_device(name)
        device = next((d for d in self.devices() if d.name == name), None)
        if device is None:
            device = next((d for d in self.refresh() if d.name == name), None)
        return device
