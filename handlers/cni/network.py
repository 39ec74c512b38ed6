"""A CNI network configuration as a claim names it: parsed and checked (pure).

A claim's `cni.config` (or the NetworkAttachmentDefinition's `spec.config` the core
read for `cni.networkAttachment`) is a network configuration list (`plugins: [...]`)
or a single plugin's configuration, as JSON text. Each plugin runs with its own
configuration plus the list's `name` and `cniVersion`, the previous plugin's result as
`prevResult`, and `runtimeConfig` for the capabilities it declares (CNI spec 1.0).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dradriver.base.errors import ConfigError

CNI_PATH = "$.cni"
MAX_CONFIG_BYTES = 64 * 1024
MAX_PLUGINS = 8
# CNI's own rule for network names (libcni ValidateNetworkName): a name reaches
# host-local's lease directory and the runtime's cache file names.
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
PLUGIN_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,63}$")  # a file in --cni-bin-dir
VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
# Plugin fields that name a host interface the plugin takes or hangs a link on.
PARENT_FIELDS = {"macvlan": "master", "ipvlan": "master", "vlan": "master"}
BRIDGE, DEFAULT_BRIDGE = "bridge", "cni0"
# A bridge's fields that change the node: an address (the gateway) and routes on it, NAT.
BRIDGE_NODE_FIELDS = ("isGateway", "isDefaultGateway", "forceAddress", "ipMasq")
# What the runtime passes a plugin (CNI spec: runtimeConfig; CNI_ARGS given in the
# config as `args`): a network naming them would pick devices and addresses itself.
RUNTIME_FIELDS = ("runtimeConfig", "args")
TUNING = "tuning"  # keeps a backup of what it changed in its dataDir (/run/cni/tuning)
# IPAM fields naming a path on the node (host-local's lease directory, a resolv.conf).
IPAM_FILE_FIELDS = ("dataDir", "resolvConf")
# host-device's fields that pick a host interface; a claim gives it its allocated one.
HOST_DEVICE = "host-device"
HOST_DEVICE_FIELDS = ("device", "hwaddr", "kernelpath", "pciBusID", "deviceID")
DEVICE_PLUGINS = (HOST_DEVICE, "sriov")
BANDWIDTH = "bandwidth"  # the plugin, and the capability it takes a pod's share as
# Fields of the bandwidth plugin's own config it prefers to the runtime's `bandwidth`.
BANDWIDTH_OWN_FIELDS = (
    "ingressRate", "ingressBurst", "egressRate", "egressBurst", "shapedSubnets",
    "unshapedSubnets",
)  # fmt: skip
VETH_PLUGINS = ("bridge", "ptp")  # the plugins that make a veth with a host end


@dataclass(frozen=True)
class Network:
    """A parsed network configuration list: its name, version and plugins."""

    name: str
    version: str
    plugins: tuple[Mapping[str, Any], ...]
    check: bool = True  # CHECK may run: spec 0.4.0 or later, and no `disableCheck`

    @property
    def types(self) -> tuple[str, ...]:
        """The plugins' types (their binaries' names), in order."""
        return tuple(str(p["type"]) for p in self.plugins)

    def plugin_config(
        self,
        index: int,
        prev: Mapping[str, Any] | None,
        runtime: Mapping[str, Any],
    ) -> dict[str, Any]:
        """What plugin `index` reads on stdin: its own config with the list's name and
        version, `prevResult` and the runtime config of the capabilities it declares."""
        conf = dict(self.plugins[index])
        conf["name"] = self.name
        conf["cniVersion"] = self.version
        if prev is not None:
            conf["prevResult"] = prev
        wanted = {k: v for k, v in runtime.items() if _declares(conf, k)}
        if wanted:
            conf["runtimeConfig"] = {**(conf.get("runtimeConfig") or {}), **wanted}
        return conf

    def to_json(self) -> dict[str, Any]:
        """As a conflist (kept in the claim's record)."""
        out = {"cniVersion": self.version, "name": self.name, "plugins": list(self.plugins)}
        return out if self.check else {**out, "disableCheck": True}


def parse(text: str, path: str = f"{CNI_PATH}.config") -> Network:
    """The network configuration `text` holds; ConfigError naming `path` otherwise."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise ConfigError(f"longer than {MAX_CONFIG_BYTES} bytes", path)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"not a CNI network configuration: not JSON ({exc})", path) from None
    if not isinstance(doc, dict):
        raise ConfigError("not a CNI network configuration: not a JSON object", path)
    if "plugins" in doc:
        plugins = doc["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise ConfigError("plugins must be a non-empty list of plugin configurations", path)
    elif "type" in doc:
        plugins = [{k: v for k, v in doc.items() if k not in ("name", "cniVersion")}]
    else:
        raise ConfigError("neither a plugin configuration (type) nor a list (plugins)", path)
    name, version = doc.get("name"), doc.get("cniVersion")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or len(name) > 200:
        raise ConfigError(
            f"name {name!r}: a network needs a name of letters, digits, '_', '.' and '-'",
            f"{path} name",
        )
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise ConfigError(
            f"cniVersion {version!r}: not a version such as 1.0.0", f"{path} cniVersion"
        )
    if len(plugins) > MAX_PLUGINS:
        raise ConfigError(f"{len(plugins)} plugins; at most {MAX_PLUGINS}", f"{path} plugins")
    for i, plugin in enumerate(plugins):
        where = f"{path} plugins[{i}]"
        if not isinstance(plugin, dict):
            raise ConfigError("not a JSON object", where)
        kind = plugin.get("type")
        if not isinstance(kind, str) or not PLUGIN_RE.fullmatch(kind):
            raise ConfigError(f"type {kind!r}: not a plugin name", f"{where}.type")
    spoken = tuple(int(n) for n in version.split("."))
    return Network(
        name, version, tuple(plugins), spoken >= (0, 4, 0) and not doc.get("disableCheck")
    )


def check_allowed(network: Network, allowed: Sequence[str], path: str) -> None:
    """Refuse a plugin the operator does not allow (--cni-plugins)."""
    for i, kind in enumerate(network.types):
        if kind not in allowed:
            raise ConfigError(
                f"plugin {kind} is not allowed on this node (--cni-plugins: "
                f"{','.join(allowed) or 'none'})",
                f"{path} plugins[{i}].type",
            )
        ipam = network.plugins[i].get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") is not None:
            ipam_type = ipam["type"]
            if not isinstance(ipam_type, str) or ipam_type not in allowed:
                raise ConfigError(
                    f"IPAM plugin {ipam_type!r} is not allowed on this node (--cni-plugins: "
                    f"{','.join(allowed) or 'none'})",
                    f"{path} plugins[{i}].ipam.type",
                )


def host_interfaces(network: Network) -> list[tuple[str, str]]:
    """(field path, interface name) of every host interface the plugins hang a link on
    or join (a bridge: `cni0` when the config names none); a parent left out is "":
    the plugin would take the interface of the node's default route."""
    out = []
    for i, plugin in enumerate(network.plugins):
        kind = str(plugin["type"])
        if kind in PARENT_FIELDS:
            field = PARENT_FIELDS[kind]
            out.append((f"plugins[{i}].{field}", str(plugin.get(field) or "")))
        elif kind == BRIDGE:
            out.append((f"plugins[{i}].bridge", str(plugin.get("bridge") or DEFAULT_BRIDGE)))
    return out


def node_changes(network: Network) -> list[tuple[str, str]]:
    """(field path, why) of every setting that would change the node itself: an address
    or NAT rules on the node for a bridge, a file where the operator did not put one."""
    out = []
    for i, plugin in enumerate(network.plugins):
        for field in RUNTIME_FIELDS:
            if field in plugin:
                out.append(
                    (f"plugins[{i}].{field}", "is the runtime's to pass, never a network's "
                     "(a claim's addresses and MAC go in cni.ips and cni.mac, where the node "
                     "checks them)")
                )  # fmt: skip
        if plugin["type"] == BRIDGE:
            for field in BRIDGE_NODE_FIELDS:
                if plugin.get(field):
                    out.append(
                        (f"plugins[{i}].{field}", "would give the node an address, a route or NAT "
                         "rules; a claim never changes the node's own network")
                    )  # fmt: skip
        if plugin["type"] == TUNING and "dataDir" in plugin:
            out.append(
                (f"plugins[{i}].dataDir", "names a directory on the node; a claim's plugins "
                 "keep their state where the driver's node keeps it")
            )  # fmt: skip
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict):
            for field in IPAM_FILE_FIELDS:
                if field in ipam:
                    out.append(
                        (f"plugins[{i}].ipam.{field}", "names a file or directory on the node; "
                         "a claim's IPAM keeps its state where the driver's node keeps it")
                    )  # fmt: skip
    return out


def host_local_ranges(network: Network) -> list[tuple[str, str, str]]:
    """(field path, first, last) of every range host-local hands addresses out of:
    `ranges` (range sets of {subnet, rangeStart, rangeEnd}) or the older `subnet`;
    each first and last is its subnet's when not given ("" when there is no subnet)."""
    out = []
    for i, plugin in enumerate(network.plugins):
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
            continue
        sets = ipam.get("ranges")
        entries: list[tuple[str, Any]] = []
        if isinstance(sets, list):
            for j, rset in enumerate(sets):
                for k, rng in enumerate(rset if isinstance(rset, list) else [rset]):
                    entries.append((f"plugins[{i}].ipam.ranges[{j}][{k}]", rng))
        if "subnet" in ipam or not entries:
            entries.append((f"plugins[{i}].ipam", ipam))
        for path, rng in entries:
            out.append((path, *_first_last(rng if isinstance(rng, dict) else {})))
    return out


def _first_last(rng: Mapping[str, Any]) -> tuple[str, str]:
    """A host-local range's first and last address, as host-local would take them."""
    try:
        net = ipaddress.ip_network(str(rng.get("subnet")), strict=False)
    except ValueError:
        return "", ""
    first = str(rng.get("rangeStart") or net.network_address + 1)
    last = str(rng.get("rangeEnd") or (net.broadcast_address - (1 if net.version == 4 else 0)))
    return first, last


def with_state_dir(network: Network, state_dir: str) -> Network:
    """The list with the plugins' files kept under `state_dir` (the node's state
    directory the operator chose; a config may not name one): host-local's leases in
    networks/, tuning's backups of what it changed in tuning/."""
    plugins = []
    for plugin in network.plugins:
        conf = dict(plugin)
        ipam = conf.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "host-local":
            conf["ipam"] = {**ipam, "dataDir": f"{state_dir}/networks"}
        if conf["type"] == TUNING:
            conf["dataDir"] = f"{state_dir}/tuning"
        plugins.append(conf)
    return Network(network.name, network.version, tuple(plugins))


def bandwidth_problem(network: Network) -> str | None:
    """Why the list cannot hold a pod to the bandwidth share its claim was given (None:
    it can): one bandwidth plugin must take the share as its `bandwidth` capability
    (the plugin prefers rates of its own config over it), beside a plugin that makes a
    veth (the bandwidth plugin shapes its host end)."""
    shapers = [p for p in network.plugins if p["type"] == BANDWIDTH]
    taking = [p for p in shapers if _declares(p, BANDWIDTH)]
    if not shapers:
        return (
            'it has no bandwidth plugin: add {"type": "bandwidth", "capabilities": '
            '{"bandwidth": true}} after its main plugin'
        )
    if len(shapers) > 1:
        return f"it has {len(shapers)} bandwidth plugins (they would share one ifb link)"
    if not taking:
        return (
            'its bandwidth plugin does not take the share: give it "capabilities": '
            '{"bandwidth": true} instead of rates of its own'
        )
    own = [f for f in BANDWIDTH_OWN_FIELDS if f in taking[0]]
    if own:
        return (
            f"its bandwidth plugin names {', '.join(own)} of its own, which it prefers: remove them"
        )
    if not any(p["type"] in VETH_PLUGINS for p in network.plugins):
        return "the bandwidth plugin shapes the host end of a veth, which only bridge or ptp make"
    return None


def _declares(plugin: Mapping[str, Any], capability: str) -> bool:
    """Whether `plugin` declares `capability` (is given it in its runtime config)."""
    caps = plugin.get("capabilities")
    return isinstance(caps, dict) and bool(caps.get(capability))


def takes_device(network: Network) -> bool:
    """Whether a plugin of the list takes a whole host device (host-device, SR-IOV)."""
    return any(kind in DEVICE_PLUGINS for kind in network.types)


def with_device(network: Network, pci: str, ifname: str) -> Network:
    """The list with the allocated device for the plugins that take one: its PCI
    address as `deviceID`, as Multus passes it, and for host-device in the field it
    reads (`pciBusID`, or `device` for a NIC without one); their own picks removed."""
    plugins = []
    for plugin in network.plugins:
        conf = dict(plugin)
        if conf["type"] in DEVICE_PLUGINS:
            conf = {k: v for k, v in conf.items() if k not in HOST_DEVICE_FIELDS}
            if pci:
                conf["deviceID"] = pci
            if conf["type"] == HOST_DEVICE:
                conf["pciBusID" if pci else "device"] = pci or ifname
        plugins.append(conf)
    return Network(network.name, network.version, tuple(plugins))
