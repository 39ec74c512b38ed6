"""The plugin contract: what a third-party plugin can do, and what stops the driver at start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dradriver.apiserver.inventory import Inventory
from dradriver.base.errors import RegistryError
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import Default, Device, Prepared, Validated, hookimpl
from dradriver.contract.registry import HandlerRegistry
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
        "from dradriver.contract.registry import HandlerRegistry\n"
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


# -- installed as an operator or a packager would: entry points of real distributions ------

WIDGET_MODULE = """
from dradriver.contract.hookspecs import Device, Prepared, Validated, hookimpl


class WidgetHandler:
    type = "tp"
    kinds = ("widget",)

    def schema(self, kind):
        return {"properties": {"kind": {"type": "string"}}}

    def validate(self, req):
        return Validated()

    def prepare(self, req):
        return Prepared(edits={"env": ["WIDGET=1"]}, undo={})

    def unprepare(self, undo):
        pass


@hookimpl
def dradriver_handlers():
    return [WidgetHandler()]


@hookimpl
def dradriver_discover(context):
    return [Device("widget-0", {"type": "tp", "kind": "widget"})]
"""

TABLE = (
    "import json, sys\n"
    "from dradriver.base.errors import RegistryError\n"
    "from dradriver.contract.registry import HandlerRegistry\n"
    "try:\n"
    "    reg = HandlerRegistry()\n"
    "except RegistryError as exc:\n"
    "    print(json.dumps({'error': str(exc)})); raise SystemExit\n"
    "from pathlib import Path\n"
    "from dradriver.contract.hookspecs import HandlerContext\n"
    "context = HandlerContext('dra.example.com', 'node-a', Path(sys.argv[1]))\n"
    "print(json.dumps({'plugins': sorted({p for _, _, p in reg.table()}),\n"
    "    'types': sorted(reg.kinds()), 'devices': [d.name for d in reg.discover(context)],\n"
    "    'families': sorted(m.split('.')[2] for m in sys.modules\n"
    "                       if m.startswith('dradriver.handlers.') and m.count('.') == 2)}))\n"
)


def _distribution(site: Path, name: str, entry_points: str, metadata_text: str = "") -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        metadata_text or f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(entry_points)


def _table(site: Path) -> dict:
    """The registry a driver started with `site` first on its path would have: run in
    `site` (not the checkout, whose build metadata would come first), the installed
    package found through its install."""
    (site / "sys").mkdir()  # an empty sysfs: built-ins discover nothing
    res = subprocess.run(
        [sys.executable, "-c", TABLE, str(site / "sys")],
        cwd=site,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_plugin_installed_with_an_entry_point_is_loaded_beside_the_builtins(tmp_path):
    (tmp_path / "widgetplugin.py").write_text(WIDGET_MODULE)
    _distribution(tmp_path, "widget_plugin", "[dradriver.handlers]\nwidgets = widgetplugin\n")
    got = _table(tmp_path)
    assert got["plugins"] == ["cni", "combo", "netdev", "rdma", "widgets"]
    assert "tp" in got["types"] and "widget-0" in got["devices"]


def test_a_family_left_out_of_the_entry_points_is_never_imported(tmp_path):
    """A packager may drop any built-in family: only entry points decide what loads."""
    from importlib import metadata

    ours = metadata.distribution("dra-driver")
    kept = "".join(
        line
        for line in (ours.read_text("entry_points.txt") or "").splitlines(keepends=True)
        if not line.startswith("combo")
    )
    assert "netdev" in kept and "combo" not in kept
    # The same distribution, first on the path: importlib.metadata takes the first one.
    about = ours.read_text("METADATA") or ours.read_text("PKG-INFO") or ""
    _distribution(tmp_path, "dra_driver", kept, about)
    got = _table(tmp_path)
    assert got["plugins"] == ["cni", "netdev", "rdma"]
    assert got["families"] == ["cni", "netdev", "rdma"]
    assert "combo" not in got["types"]


def test_a_plugin_that_cannot_be_loaded_is_named(tmp_path):
    (tmp_path / "brokenplugin.py").write_text("raise ImportError('needs libwidget')\n")
    _distribution(tmp_path, "broken_plugin", "[dradriver.handlers]\nbroken = brokenplugin\n")
    got = _table(tmp_path)
    assert got == {
        "error": "handler plugin 'broken' (brokenplugin of broken_plugin 1.0) cannot be "
        "loaded: ImportError: needs libwidget; fix or uninstall that package"
    }


def test_no_plugin_installed_is_an_error_that_says_so():
    with pytest.raises(RegistryError, match="no handler plugin is installed"):
        HandlerRegistry({}, entry_points=False)


# -- a plugin written against the import paths of 0.1 (kept for one release) ------------

OLD_PATHS_MODULE = """
from dradriver import naming, netlink
from dradriver.errors import ConfigError
from dradriver.hookspecs import Device, Prepared, Validated, hookimpl
from dradriver.kit import netconfig


class OldHandler:
    type = "old"
    kinds = ("gadget",)

    def schema(self, kind):
        return {"properties": {"kind": {"type": "string"}}}

    def validate(self, req):
        return Validated()

    def prepare(self, req):
        edits = netconfig.net_devices_edit(naming.host_ifname("uid", "key", "c"), "net1")
        return Prepared(edits=edits, undo={"link": netlink.Link.__name__})

    def unprepare(self, undo):
        raise ConfigError("never called here")


@hookimpl
def dradriver_handlers():
    return [OldHandler()]


@hookimpl
def dradriver_discover(context):
    return [Device("gadget-0", {"type": "old", "kind": "gadget"})]
"""

OLD_PATHS_RUN = TABLE + (
    "handler = reg.get('old', 'gadget')\n"
    "print(json.dumps(handler.prepare(None).edits))\n"
    "import dradriver.hookspecs, dradriver.contract.hookspecs, dradriver.rtnl.wire\n"
    "import dradriver.kernel.rtnl.wire, importlib.util\n"
    "from dradriver.claims import resolve\n"
    "from dradriver.claims.resolution import resolve as resolved\n"
    "print(json.dumps([dradriver.hookspecs is dradriver.contract.hookspecs,\n"
    "    dradriver.rtnl.wire is dradriver.kernel.rtnl.wire, resolve is resolved,\n"
    "    importlib.util.find_spec('dradriver.contract.hookspecs').name,\n"
    "    dradriver.contract.hookspecs.__spec__.origin.endswith('contract/hookspecs.py')]))\n"
)


def test_a_plugin_written_against_the_old_import_paths_still_loads_and_works(tmp_path):
    """0.1's module paths (dradriver.hookspecs, dradriver.netlink, netconfig's link
    helpers) resolve to the moved modules, the same objects, with a DeprecationWarning."""
    (tmp_path / "oldplugin.py").write_text(OLD_PATHS_MODULE)
    _distribution(tmp_path, "old_plugin", "[dradriver.handlers]\nold = oldplugin\n")
    (tmp_path / "sys").mkdir()
    res = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", OLD_PATHS_RUN,
         str(tmp_path / "sys")],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    table, edits, same = (json.loads(line) for line in res.stdout.splitlines())
    assert "old" in table["plugins"] and "gadget-0" in table["devices"]
    [move] = edits["netDevices"]
    assert move == {"name": "net1", "hostInterfaceName": "drcbgigevg2727e"}
    # The moved module keeps its own spec (importlib.reload and find_spec still work).
    assert same == [True, True, True, "dradriver.contract.hookspecs", True]
    for old, new in [
        ("dradriver.hookspecs", "dradriver.contract.hookspecs"),
        ("dradriver.errors", "dradriver.base.errors"),
        ("dradriver.netlink", "dradriver.kernel.netlink"),
        ("dradriver.kit.netconfig.net_devices_edit", "dradriver.kit.links.net_devices_edit"),
        ("dradriver.claims.resolve", "dradriver.claims.resolution.resolve"),
    ]:
        assert f"{old} moved to {new}" in res.stderr
