"""cni / network: a claim's secondary network made by standard CNI plugins in the pod.

The config names a NetworkAttachmentDefinition (`networkAttachment`; the core reads it
once, outside the lock, and hands its `spec.config` over in `config`) or carries a
network configuration itself (`config`). Prepare checks it and keeps it in the record;
the plugins run at the pod sandbox (NRI mode): ADD into its network namespace, DEL when
the sandbox stops or goes or the claim is unprepared, CHECK when the driver starts
again. Nothing is made on the node at prepare.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dradriver.base.errors import ClaimError, ConfigError, DeviceError
from dradriver.contract.hookspecs import (
    NEEDS_NRI,
    NRI,
    Attached,
    DeviceRequest,
    NetworkData,
    PodSandbox,
    Prepared,
    Validated,
)
from dradriver.kit import hostaddr, netconfig, shaping

from . import network, runner
from .network import CNI_PATH, Network

log = logging.getLogger(__name__)

TYPE = "cni"
KIND = "network"
VIRTUAL_KIND = "virtual"  # the node's virtual device (published by the netdev family)
DEVICE_KINDS = ("host-device", "sriov-vf")  # whole host NICs and VFs
DEFAULT_INTERFACE = "net1"  # Multus's default for a secondary network

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string"},
        "networkAttachment": {
            "type": "string",
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            "maxLength": 317,
            "description": "a NetworkAttachmentDefinition: <name> in the claim's namespace, "
            "or <namespace>/<name> where the operator allows it",
        },
        "config": {
            "type": "string",
            "maxLength": network.MAX_CONFIG_BYTES,
            "pattern": r"^[ \t\n\r]*\{[\s\S]*\}[ \t\n\r]*$",
            "description": "a CNI network configuration (list), as JSON text (an object)",
        },
        "interfaceName": {
            **netconfig.COMMON_PROPERTIES["interfaceName"],
            "default": DEFAULT_INTERFACE,
        },
        "ips": {
            "type": "array",
            "items": netconfig.COMMON_PROPERTIES["ipAddresses"]["items"],
            "maxItems": netconfig.MAX_IPS,
            "description": "static addresses, passed as the `ips` capability",
        },
        "mac": {
            **netconfig.COMMON_PROPERTIES["macAddress"],
            "description": "passed as the `mac` capability",
        },
    },
    "additionalProperties": False,
    # dradriver.contract.fieldrules: one source; the plugins an inline config names are
    # checked at admission against the list the schema's builder is given (--cni-plugins).
    "exactlyOneOf": ["networkAttachment", "config"],
    "jsonTypes": {"field": "config"},
}


def _network(req: DeviceRequest) -> Network:
    """The request's network, checked against the node's settings and its device."""
    cfg = req.config
    text = cfg["config"]  # the schema asks for one source; a NAD's is inlined (attachments.py)
    where = _where(cfg)
    net = network.parse(str(text), where)
    network.check_allowed(net, req.context.cni_plugins, where)
    issues = _node_issues(net, req.context.virtual_parents, where)
    if issues:
        raise ConfigError.many(issues)
    net = network.with_state_dir(net, str(req.context.cni_state_dir))
    kind = req.published.kind if req.published is not None else ""
    if network.takes_device(net):
        if kind not in DEVICE_KINDS or req.published is None:
            raise ConfigError(
                f"plugin {','.join(t for t in net.types if t in network.DEVICE_PLUGINS)} takes "
                f"a host NIC or VF, but the allocated device {req.device} is not one; request "
                "a device of the network-devices class",
                f"{where} plugins",
            )
        attrs = req.published.attributes
        net = network.with_device(
            net, str(attrs.get("pciAddress", "")), str(attrs.get("interfaceName", ""))
        )
    elif kind != VIRTUAL_KIND:
        raise ConfigError(
            f"the allocated device {req.device} is a host device, but no plugin of the "
            "network takes one; request the virtual-network class",
            f"{where} plugins",
        )
    return net


def _where(config: Mapping[str, Any]) -> str:
    """The field the network came from, as errors name it."""
    named = config.get("networkAttachment")
    if named is None:
        return f"{CNI_PATH}.config"
    return f"{CNI_PATH}.networkAttachment (NetworkAttachmentDefinition {named})"


def _node_issues(net: Network, allowed: tuple[str, ...], where: str) -> list[tuple[str, str]]:
    """(path, why) of what the network would do to the node that no claim may: change
    its network, keep files where the operator did not say, hang a link on or join an
    interface the operator does not offer (--virtual-parents)."""
    issues = [(f"{where} {field}", why) for field, why in network.node_changes(net)]
    offered = ",".join(allowed) or "empty"
    for field, parent in network.host_interfaces(net):
        if not parent:
            why = "required: without it the plugin takes the interface of the default route"
        elif any(fnmatch.fnmatchcase(parent, p) for p in allowed):
            continue
        else:
            why = f"{parent} is not on the operator's list of parent interfaces ({offered})"
            why += " (--virtual-parents)"
        issues.append((f"{where} {field}", why))
    return issues


def _static_ips(net: Network) -> list[str]:
    """The addresses a `static` IPAM of the list gives."""
    out = []
    for plugin in net.plugins:
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "static":
            for entry in ipam.get("addresses") or ():
                if isinstance(entry, dict) and isinstance(entry.get("address"), str):
                    out.append(entry["address"])
    return out


def _check_versions(req: DeviceRequest, net: Network, where: str) -> None:
    """Refuse a plugin that is not installed, or does not speak the list's cniVersion."""
    for i, kind in enumerate(net.types):
        try:
            spoken = runner.versions(req.context.cni_bin_dir, kind)
        except runner.PluginError as exc:
            raise ConfigError(str(exc), f"{where} plugins[{i}].type") from None
        if net.version not in spoken:
            raise ConfigError(
                f"cniVersion {net.version}: plugin {kind} speaks {', '.join(spoken)}",
                f"{where} plugins[{i}]",
            )


def _check_bandwidth(req: DeviceRequest, net: Network) -> None:
    """A share of the virtual device's bandwidth must be enforceable by the network's
    plugins (a whole device's `bandwidth` only picked a link that fast)."""
    kind = req.published.kind if req.published is not None else ""
    if kind != VIRTUAL_KIND or not shaping.allocated(req):
        return
    problem = network.bandwidth_problem(net)
    if problem is not None:
        raise ClaimError(
            f"{shaping.FIELD}: network {net.name} cannot hold the pod to the claim's "
            f"bandwidth: {problem}; or leave bandwidth out of the request"
        )


class CniHandler:
    """Runs a claim's CNI network in its pod sandbox (an AttachingHandler)."""

    type = TYPE
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """networkAttachment or config, interfaceName, ips, mac."""
        return SCHEMA

    def validate(self, req: DeviceRequest) -> Validated:
        """NRI mode; the plugins allowed, installed and speaking the
        list's version; parents allowed; addresses the node allows."""
        if req.injection != NRI:
            raise ConfigError(
                f"{NEEDS_NRI}: the plugins run in the pod sandbox's network namespace",
                f"{CNI_PATH}.kind",
            )
        net = _network(req)
        where = _where(req.config)
        _check_versions(req, net, where)
        _check_bandwidth(req, net)
        ips = [ipaddress.ip_interface(a) for a in req.config.get("ips", ())]
        shares = bool(network.host_interfaces(net))
        hostaddr.check(req.context, ips, f"{CNI_PATH}.ips", on_host=shares)
        for field, first, last in network.host_local_ranges(net):
            hostaddr.check_span(req.context, first, last, f"{where} {field}", on_host=shares)
        static = []
        for a in _static_ips(net):
            try:
                static.append(ipaddress.ip_interface(a))
            except ValueError:
                raise ConfigError(f"{a} is not an address with a prefix length", where) from None
        hostaddr.check(req.context, static, f"{where} ipam.addresses", on_host=shares)
        return Validated(container_interfaces=(self._ifname(req),))

    @staticmethod
    def _ifname(req: DeviceRequest) -> str:
        return str(req.config.get("interfaceName", DEFAULT_INTERFACE))

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Nothing on the node: the network, as checked, is kept for the sandbox."""
        net = _network(req)
        ifname = self._ifname(req)
        undo = {
            "network": net.to_json(),
            "attachment": req.config.get("networkAttachment") or "",
            "interfaceName": ifname,
            "claim": str(req.claim),
            "capabilities": _capabilities(req.config, shaping.allocated(req)),
            "binDir": str(req.context.cni_bin_dir),
            "timeout": req.context.cni_timeout,
        }
        ips = tuple(str(a) for a in req.config.get("ips", ()))
        return Prepared(
            edits={},
            undo=undo,
            network_data=NetworkData(ifname, ips, req.config.get("mac")),
            pod_attach=ifname,
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Nothing: what the plugins made goes with `detach`, which the core calls first."""

    def attach(self, undo: Mapping[str, Any], sandbox: PodSandbox) -> Attached:
        """ADD the network into the sandbox's namespace; its result is the state kept."""
        net, rt, bin_dir = _call(undo, sandbox)
        try:
            result = runner.add(bin_dir, net, rt, _timeout(undo))
        except runner.PluginError as exc:
            raise DeviceError(f"{_named(undo)}: {exc}") from None
        name = str(undo.get("attachment") or net.name)
        return Attached({"result": result}, network_data(result, rt.ifname), name)

    def detach(
        self, undo: Mapping[str, Any], sandbox: PodSandbox, state: Mapping[str, Any] | None
    ) -> None:
        """DEL the network (told the ADD's result when it finished)."""
        net, rt, bin_dir = _call(undo, sandbox, deleting=True)
        prev = state.get("result") if state else None
        failures = runner.delete(bin_dir, net, rt, prev, _timeout(undo))
        if failures and rt.netns:
            raise DeviceError(f"{_named(undo)}: {failures}")
        if failures:  # the namespace is gone: what was in it went with it
            log.warning(
                "DEL of a network whose pod sandbox is gone failed; taken as done: %s: %s",
                _named(undo), failures,
            )  # fmt: skip

    def check(self, undo: Mapping[str, Any], sandbox: PodSandbox, state: Mapping[str, Any]) -> None:
        """CHECK the network against the ADD's result."""
        net, rt, bin_dir = _call(undo, sandbox)
        try:
            runner.check(bin_dir, net, rt, state.get("result") or {}, _timeout(undo))
        except runner.PluginError as exc:
            raise DeviceError(f"{_named(undo)}: {exc}") from None


def _timeout(undo: Mapping[str, Any]) -> float:
    """The seconds the network's plugins may take in all, as the record keeps them."""
    return float(undo["timeout"])


def _capabilities(config: Mapping[str, Any], rate: int) -> dict[str, Any]:
    """The runtime config a claim gives plugins that declare the capability: `ips` and
    `mac` from its config, `bandwidth` its share of the device's (`rate` bit/s)."""
    caps: dict[str, Any] = {}
    if rate:
        caps[shaping.BANDWIDTH] = shaping.cni_runtime_config(rate)
    if config.get("ips"):
        caps["ips"] = list(config["ips"])
    if config.get("mac"):
        caps["mac"] = str(config["mac"])
    return caps


def _named(undo: Mapping[str, Any]) -> str:
    """The network as errors name it."""
    name = undo.get("attachment") or undo["network"].get("name")
    what = "NetworkAttachmentDefinition" if undo.get("attachment") else "network"
    return f"{what} {name}"


def _call(
    undo: Mapping[str, Any], sandbox: PodSandbox, deleting: bool = False
) -> tuple[Network, runner.Runtime, Path]:
    """The recorded network, and what the runtime passes its plugins for `sandbox` (for
    a DEL, no namespace once it is gone, as runtimes pass it)."""
    net = network.parse(json.dumps(undo["network"]), "the record's network")
    args = [("IgnoreUnknown", "1"), ("K8S_POD_UID", sandbox.pod_uid)]
    if sandbox.pod_namespace:
        args += [("K8S_POD_NAMESPACE", sandbox.pod_namespace), ("K8S_POD_NAME", sandbox.pod_name)]
    args.append(("K8S_POD_INFRA_CONTAINER_ID", sandbox.id))
    rt = runner.Runtime(
        container_id=sandbox.id,
        netns=""
        if deleting and not Path(sandbox.netns or "/nonexistent").exists()
        else sandbox.netns,
        ifname=str(undo["interfaceName"]),
        args=tuple(args),
        capabilities=dict(undo.get("capabilities") or {}),
    )
    return net, rt, Path(str(undo["binDir"]))


def network_data(result: Mapping[str, Any], ifname: str) -> NetworkData:
    """What the pod got on `ifname`, from a CNI result: its addresses and MAC."""
    interfaces = result.get("interfaces") or []
    index = next(
        (
            i
            for i, itf in enumerate(interfaces)
            if isinstance(itf, dict) and itf.get("name") == ifname and itf.get("sandbox")
        ),
        None,
    )
    mac = interfaces[index].get("mac") if index is not None else None
    ips = tuple(
        str(ip["address"])
        for ip in result.get("ips") or []
        if isinstance(ip, dict)
        and ip.get("address")
        and (index is None or ip.get("interface") in (None, index))
    )
    return NetworkData(ifname, ips[: netconfig.MAX_IPS], str(mac) if mac else None)
