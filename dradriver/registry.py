"""The plugin manager: loads handler plugins and maps (type, kind) to a Handler."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

import pluggy

from dradriver import hookspecs
from dradriver.errors import ConfigError, RegistryError
from dradriver.hookspecs import Device, Handler, HandlerContext
from dradriver.log import event

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "dradriver.handlers"
BUILTIN_PLUGINS = ("netdev", "rdma", "combo")  # modules of the `handlers` package


class HandlerRegistry:
    """Handlers by (type, kind), and the plugins that discover devices."""

    def __init__(
        self, plugins: Mapping[str, object] | None = None, *, entry_points: bool = True
    ) -> None:
        """Register `plugins` (name -> plugin); by default the built-ins and entry points."""
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs.HandlerSpec)
        for name, plugin in (plugins if plugins is not None else _builtin_plugins()).items():
            self._pm.register(plugin, name=name)
        if entry_points:
            # Built-ins are declared in the same group; pluggy skips names already registered.
            self._pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._owners: dict[tuple[str, str], str] = {}
        for plugin_name, plugin in self._pm.list_name_plugin():
            impl = getattr(plugin, "dradriver_handlers", None)
            for handler in impl() if impl else ():
                self._add(plugin_name, handler)

    def _add(self, plugin_name: str, handler: Handler) -> None:
        for kind in handler.kinds:
            key = (handler.type, kind)
            if key in self._owners:
                raise RegistryError(
                    f"handler plugins {self._owners[key]!r} and {plugin_name!r} both serve "
                    f"type={handler.type} kind={kind}; uninstall or disable one of them"
                )
            self._handlers[key] = handler
            self._owners[key] = plugin_name

    def get(self, type_: str, kind: str) -> Handler:
        """The handler for (type, kind), or a ConfigError listing what is available."""
        try:
            return self._handlers[(type_, kind)]
        except KeyError:
            available = ", ".join(f"{t}/{k}" for t, k in sorted(self._handlers))
            raise ConfigError(
                f"no handler for type={type_} kind={kind}; available: {available}",
                f"$.{type_}.kind",
            ) from None

    def kinds(self) -> dict[str, list[str]]:
        """Every type with its kinds, sorted."""
        out: dict[str, list[str]] = {}
        for type_, kind in sorted(self._handlers):
            out.setdefault(type_, []).append(kind)
        return out

    def table(self) -> list[tuple[str, str, str]]:
        """(type, kind, plugin) for every registered pair, sorted."""
        return [(t, k, self._owners[(t, k)]) for t, k in sorted(self._handlers)]

    def discover(self, context: HandlerContext) -> list[Device]:
        """Devices every plugin offers on this node; a failing plugin is logged and skipped."""
        devices: dict[str, Device] = {}
        for plugin_name, plugin in self._pm.list_name_plugin():
            impl = getattr(plugin, "dradriver_discover", None)
            if impl is None:
                continue
            try:
                found: Iterable[Device] = impl(context=context)
            except Exception as exc:  # a broken plugin must not stop publishing the rest
                event(log, logging.ERROR, "discovery failed", plugin=plugin_name, error=exc)
                continue
            for device in found:
                if device.name in devices:
                    event(
                        log,
                        logging.ERROR,
                        "duplicate device name dropped",
                        plugin=plugin_name,
                        device=device.name,
                    )
                    continue
                devices[device.name] = device
        return list(devices.values())


def _builtin_plugins() -> dict[str, Any]:
    """The built-in handler plugins, imported from the `handlers` package."""
    plugins: dict[str, ModuleType] = {}
    for name in BUILTIN_PLUGINS:
        plugins[name] = importlib.import_module(f"handlers.{name}")
    return plugins
