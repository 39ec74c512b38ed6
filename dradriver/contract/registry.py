"""The plugin manager: loads handler plugins, maps (type, kind) to a Handler, and holds
the defaults and discovery the plugins declare."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pluggy

from dradriver.base.errors import ConfigError, RegistryError
from dradriver.base.log import event
from dradriver.contract import entrypoints, hookspecs
from dradriver.contract.hookspecs import Default, Device, Handler, HandlerContext

log = logging.getLogger(__name__)

# Every handler family, built-in or not, is an entry point of this group: the built-ins
# (the repository's handlers/ folder, installed as dradriver.handlers.*) are declared in
# pyproject.toml like a third party's, so a packager can leave any of them out.
ENTRY_POINT_GROUP = "dradriver.handlers"


class HandlerRegistry:
    """Handlers by (type, kind), defaults by device kind and by type, and discovery."""

    def __init__(
        self, plugins: Mapping[str, object] | None = None, *, entry_points: bool = True
    ) -> None:
        """Register `plugins` (name -> plugin), then the installed entry points.

        Raises RegistryError when an entry point cannot be loaded, when no plugin is
        installed, when plugins conflict, or when a plugin implements a hook that does
        not exist (a misspelled name would otherwise be silently ignored).
        """
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs.HandlerSpec)
        for name, plugin in (plugins or {}).items():
            self._pm.register(plugin, name=name)
        if entry_points:
            self._load_entry_points()
        if not self._pm.get_plugins():
            raise RegistryError(
                f"no handler plugin is installed (entry point group {ENTRY_POINT_GROUP} is "
                "empty): install the dra-driver package, or a plugin package, into this Python"
            )
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self._pm.get_name(exc.plugin) or repr(exc.plugin)
            raise RegistryError(
                f"handler plugin {name!r} implements an unknown hook ({exc}); "
                f"the hooks are those of dradriver.contract.hookspecs.HandlerSpec"
            ) from None
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._owners: dict[tuple[str, str], str] = {}
        for plugin_name, handlers in self._per_plugin("dradriver_handlers"):
            for handler in handlers:
                self._add(plugin_name, handler)
        self._device_defaults: dict[str, Default] = {}
        self._type_defaults: dict[str, Default] = {}
        defaults_owner: dict[tuple[str, str | None], str] = {}
        for plugin_name, defaults in self._per_plugin("dradriver_defaults"):
            for default in defaults:
                self._add_default(plugin_name, default, defaults_owner)

    def _load_entry_points(self) -> None:
        """Register each plugin of the entry point group, as pluggy's
        load_setuptools_entrypoints does, naming the one that cannot be loaded."""
        for ep in entrypoints.entry_points(ENTRY_POINT_GROUP):
            if self._pm.get_plugin(ep.name) is not None or self._pm.is_blocked(ep.name):
                continue  # registered by name already (a test's plugins)
            try:
                plugin = ep.load()
            except Exception as exc:
                dist_name, dist_version = ep.dist
                raise RegistryError(
                    f"handler plugin {ep.name!r} ({ep.value} of {dist_name} "
                    f"{dist_version}) cannot be loaded: "
                    f"{type(exc).__name__}: {exc}; fix or uninstall that package"
                ) from None
            self._pm.register(plugin, name=ep.name)

    def _hook_of(self, plugin_name: str, hook_name: str) -> Any:
        """pluggy's caller of `hook_name` for one plugin alone."""
        others = [p for n, p in self._pm.list_name_plugin() if n != plugin_name]
        return self._pm.subset_hook_caller(hook_name, remove_plugins=others)

    def _per_plugin(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a hook through pluggy plugin by plugin, in the order pluggy keeps them,
        keeping who answered what (a plugin answering None is left out, as pluggy does)."""
        out: list[tuple[str, Any]] = []
        for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
            results = self._hook_of(impl.plugin_name, hook_name)(**kwargs)
            out.extend((impl.plugin_name, result) for result in results)
        return out

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
            for device in self._discover_one(impl.plugin_name, context):
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

    def _discover_one(self, plugin_name: str, context: HandlerContext) -> list[Device]:
        """One plugin's discovery: a broken plugin must not stop publishing the rest."""
        try:
            found = self._hook_of(plugin_name, "dradriver_discover")(context=context)
            for answer in found:
                if not isinstance(answer, (list, tuple)):
                    raise TypeError(
                        f"dradriver_discover returned {type(answer).__name__}, not a list"
                    )
            return [device for answer in found for device in answer]
        except Exception as exc:
            event(log, logging.ERROR, "discovery failed", plugin=plugin_name, error=exc)
            return []
