"""The plugin manager: loads handler plugins, maps (type, kind) to a Handler, and holds
the defaults and discovery the plugins declare."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pluggy

from dradriver import hookspecs
from dradriver.errors import ConfigError, RegistryError
from dradriver.hookspecs import Default, Device, Handler, HandlerContext
from dradriver.log import event

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "dradriver.handlers"
BUILTIN_PACKAGE = "dradriver.handlers"  # the repository's handlers/ folder, installed here
BUILTIN_PLUGINS = ("netdev", "rdma", "combo")


class HandlerRegistry:
    """Handlers by (type, kind), defaults by device kind and by type, and discovery."""

    def __init__(
        self, plugins: Mapping[str, object] | None = None, *, entry_points: bool = True
    ) -> None:
        """Register `plugins` (name -> plugin); by default the built-ins and entry points.

        Raises RegistryError when plugins conflict, or when a plugin implements a hook
        that does not exist (a misspelled name would otherwise be silently ignored).
        """
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs.HandlerSpec)
        for name, plugin in (plugins if plugins is not None else _builtin_plugins()).items():
            self._pm.register(plugin, name=name)
        if entry_points:
            # Built-ins are declared in the same group; pluggy skips names already registered.
            self._pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self._pm.get_name(exc.plugin) or repr(exc.plugin)
            raise RegistryError(
                f"handler plugin {name!r} implements an unknown hook ({exc}); "
                f"the hooks are those of dradriver.hookspecs.HandlerSpec"
            ) from None
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._owners: dict[tuple[str, str], str] = {}
        for plugin_name, handlers in self._per_plugin(self._pm.hook.dradriver_handlers):
            for handler in handlers:
                self._add(plugin_name, handler)
        self._device_defaults: dict[str, Default] = {}
        self._type_defaults: dict[str, Default] = {}
        defaults_owner: dict[tuple[str, str | None], str] = {}
        for plugin_name, defaults in self._per_plugin(self._pm.hook.dradriver_defaults):
            for default in defaults:
                self._add_default(plugin_name, default, defaults_owner)

    @staticmethod
    def _per_plugin(hook: Any) -> list[tuple[str, list[Any]]]:
        """Call `hook` plugin by plugin in registration order, keeping who answered what."""
        return [(impl.plugin_name, impl.function()) for impl in hook.get_hookimpls()]

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

    def _add_default(
        self, plugin_name: str, default: Default, owners: dict[tuple[str, str | None], str]
    ) -> None:
        what = (
            f"the default of devices of kind {default.device_kind}"
            if default.device_kind is not None
            else f"the default kind of type {default.type}"
        )
        if (default.type, default.kind) not in self._handlers:
            raise RegistryError(
                f"handler plugin {plugin_name!r} declares {default.type}/{default.kind} as "
                f"{what}, but no plugin serves it"
            )
        key = (default.type if default.device_kind is None else "", default.device_kind)
        if key in owners:
            raise RegistryError(
                f"handler plugins {owners[key]!r} and {plugin_name!r} both declare {what}; "
                "uninstall or disable one of them"
            )
        owners[key] = plugin_name
        if default.device_kind is None:
            self._type_defaults[default.type] = default
        else:
            self._device_defaults[default.device_kind] = default

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

    def default_for_device(self, device_kind: str) -> Default | None:
        """The (type, kind) serving a device published with `kind` attribute `device_kind`."""
        return self._device_defaults.get(device_kind)

    def default_kind(self, type_: str) -> str | None:
        """The kind a config of `type_` gets when it names none."""
        default = self._type_defaults.get(type_)
        return default.kind if default else None

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
        for impl in self._pm.hook.dradriver_discover.get_hookimpls():
            found = _isolated(impl.plugin_name, impl.function, context)
            for device in found:
                if device.name in devices:
                    event(
                        log,
                        logging.ERROR,
                        "duplicate device name dropped",
                        plugin=impl.plugin_name,
                        device=device.name,
                    )
                    continue
                devices[device.name] = device
        return list(devices.values())


def _isolated(
    plugin_name: str, discover: Callable[..., object], context: HandlerContext
) -> list[Device]:
    """One plugin's discovery: a broken plugin must not stop publishing the rest."""
    try:
        found = discover(context=context)
        if not isinstance(found, (list, tuple)):
            raise TypeError(f"dradriver_discover returned {type(found).__name__}, not a list")
        return list(found)
    except Exception as exc:
        event(log, logging.ERROR, "discovery failed", plugin=plugin_name, error=exc)
        return []


def _builtin_plugins() -> dict[str, Any]:
    """The built-in handler plugins, imported from `dradriver.handlers`."""
    return {name: importlib.import_module(f"{BUILTIN_PACKAGE}.{name}") for name in BUILTIN_PLUGINS}
