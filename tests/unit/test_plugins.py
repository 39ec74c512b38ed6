"""The plugin contract: what a third-party plugin can do, and what stops the driver at start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dradriver.config import ConfigSchema
from dradriver.errors import RegistryError
from dradriver.hookspecs import Default, Device, Prepared, Validated, hookimpl
from dradriver.inventory import Inventory
from dradriver.registry import HandlerRegistry
from tests.support.handlers import context

ROOT = Path(__file__).resolve().parents[2]


class WidgetHandler:
    type = "tp"
    kinds = ("widget",)

    def schema(self, kind):
        return {"properties": {"kind": {"type": "string"}, "size": {"type": "integer"}}}

    def validate(self, req):
        return Validated()

    def prepare(self, req):
        return Prepared(edits={"env": [f"WIDGET={req.config.get('size', 1)}"]}, undo={})

    def unprepare(self, undo):
        pass


class WidgetPlugin:
    """A third-party plugin: its own type, device kind, discovered device and defaults."""

    @hookimpl
    def dradriver_handlers(self):
        return [WidgetHandler()]

    @hookimpl
    def dradriver_discover(self, context):
        return [Device("widget-0", {"type": "tp", "kind": "widget"})]

    @hookimpl
    def dradriver_defaults(self):
        return [Default("tp", "widget"), Default("tp", "widget", device_kind="widget")]


def test_a_third_party_plugin_declares_handlers_devices_and_defaults():
    registry = HandlerRegistry({"widgets": WidgetPlugin()}, entry_points=False)
    [device] = Inventory(registry, context()).devices()
    assert device.name == "widget-0"
    resolved = ConfigSchema(registry, "dra.example.com").resolve(None, device)
    assert (resolved.type, resolved.kind) == ("tp", "widget")
    assert registry.table() == [("tp", "widget", "widgets")]


class Misspelled:
    @hookimpl
    def dradriver_handler(self):  # not a hook: would be silently ignored without the check
        return []


def test_a_misspelled_hook_stops_the_driver_naming_the_plugin():
    with pytest.raises(RegistryError, match="'oops' implements an unknown hook"):
        HandlerRegistry({"oops": Misspelled()}, entry_points=False)


class OtherWidgetDefault:
    @hookimpl
    def dradriver_defaults(self):
        return [Default("tp", "widget", device_kind="widget")]


def test_two_plugins_declaring_one_default_is_an_error_naming_both():
    with pytest.raises(RegistryError, match="'widgets' and 'other' both declare the default"):
        HandlerRegistry(
            {"widgets": WidgetPlugin(), "other": OtherWidgetDefault()}, entry_points=False
        )


def test_a_default_nobody_serves_is_an_error():
    with pytest.raises(RegistryError, match=r"declares tp/widget .* but no plugin serves it"):
        HandlerRegistry({"other": OtherWidgetDefault()}, entry_points=False)


@pytest.mark.parametrize("family", ["netdev", "rdma", "combo"])
def test_each_builtin_family_loads_alone_without_the_others(family):
    """A family imports only the core and its own modules, so it can be removed alone."""
    code = (
        "import importlib, json, sys\n"
        "from dradriver.registry import HandlerRegistry\n"
        f"plugin = importlib.import_module('dradriver.handlers.{family}')\n"
        f"table = HandlerRegistry({{'{family}': plugin}}, entry_points=False).table()\n"
        "families = sorted({m.split('.')[2] for m in sys.modules\n"
        "                   if m.startswith('dradriver.handlers.')})\n"
        "print(json.dumps([families, table]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    families, table = json.loads(res.stdout)
    assert families == [family]
    assert table and all(plugin == family for _, _, plugin in table)
