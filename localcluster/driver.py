"""The driver on a local node, run the way its DaemonSet would run it.

One mode exists: "host-process". The driver runs as a host process inside the
node's network and mount namespaces (where the runtime mounts pods' network
namespaces, as a DaemonSet pod sees the host's `/var/run/netns` with HostToContainer
propagation), with the kubelet's plugin directories, containerd's CDI directory, the
node's NRI socket (`--injection` is left at its default, auto, as a user gets it),
`--pod-uid`, and a token of the `dra-driver` ServiceAccount bound to a Pod on the
node. That Pod is real and running: busybox sleeping in `dra-system`, named as the
DaemonSet's pods are (`dra-driver-<5 characters>`), so the API server
adds `authentication.kubernetes.io/node-name` to the driver's requests and the
admission policy of deploy/driver.yaml sees exactly what it would see for the
DaemonSet. (A "daemonset" mode that runs deploy/driver.yaml itself from an image
built here is the next step: `start_driver` is where it will plug in.)
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .apiclient import ApiError
from .driverproc import DRIVER, DriverProcess
from .images import BUSYBOX_IMAGE
from .layout import PARENT
from .manifests import DEPLOY, DRIVER_NAMESPACE, DRIVER_SA, daemonset_env, driver_manifests
from .node import LocalNode
from .waiting import wait_for

STAND_IN_LABEL = "dra-driver.example.com/host-process"
# The tests' IPv6 claim addresses are in IPv6's documentation range; the examples have
# none, so the DaemonSet's ranges (deploy/driver.yaml) do not include it.
IPV6_TEST_RANGE = "2001:db8::/32"


def claim_address_ranges() -> str:
    """--claim-address-ranges of the driver: the DaemonSet's (the ranges of the examples'
    addresses) and IPV6_TEST_RANGE. None of them is the node's (layout.NODE_IP's)."""
    daemonset = (daemonset_env("DRA_CLAIM_ADDRESS_RANGES") or "").split(",")
    return ",".join(r for r in (*daemonset, IPV6_TEST_RANGE) if r)


def install_driver_objects(node: LocalNode) -> None:
    """deploy/namespace.yaml, driver.yaml (but the DaemonSet: the driver runs as a host
    process) and resourceclass.yaml, unchanged."""
    node.apply(DEPLOY / "namespace.yaml")
    node.apply(driver_manifests())
    node.apply(DEPLOY / "resourceclass.yaml")


def driver_pod_manifest(
    node_name: str, namespace: str = DRIVER_NAMESPACE, service_account: str = DRIVER_SA
) -> dict[str, Any]:
    """The Pod whose identity the host-process driver uses: bound to the node, in the
    driver's namespace and ServiceAccount, running busybox (local image) that sleeps.
    Its own label, not the DaemonSet's selector, so a DaemonSet never adopts it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{service_account}-",
            "namespace": namespace,
            "labels": {STAND_IN_LABEL: "true"},
            "annotations": {
                "dra-driver.example.com/note": (
                    "the driver runs as a host process in the node's network namespace "
                    "with this pod's UID and service-account token"
                )
            },
        },
        "spec": {
            "nodeName": node_name,
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "driver",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": [
                        "sh",
                        "-c",
                        "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done",
                    ],
                }
            ],
        },
    }


class DriverMode(Protocol):
    """What the tests and the demo need of a driver, however it runs."""

    pod_uid: str

    def start(self, wait: bool = True) -> DriverMode:
        """Start it; with `wait`, until the kubelet registered it."""
        ...

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it with `sig`."""
        ...

    def log(self) -> str:
        """Everything it logged so far."""
        ...


class HostDriver:
    """`dra-driver run` as a host process in the node (see the module docstring).

    `daemonset_env`: run it instead from the environment of a DaemonSet's container (a
    Helm release's: every setting comes from it, with the downward API's fields filled
    in for the stand-in Pod), as `namespace`/`service_account`."""

    def __init__(
        self,
        node: LocalNode,
        args: tuple[str, ...] = (),
        *,
        namespace: str = DRIVER_NAMESPACE,
        service_account: str = DRIVER_SA,
        daemonset_env: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    ) -> None:
        self.node = node
        self.args = args
        self.namespace, self.service_account = namespace, service_account
        self.daemonset_env = daemonset_env
        self.pod: dict[str, Any] = {}
        self.proc: DriverProcess | None = None

    @property
    def pod_uid(self) -> str:
        """The UID of its Pod."""
        return str(self.pod["metadata"]["uid"])

    @property
    def pod_name(self) -> str:
        """The name of its Pod."""
        return str(self.pod["metadata"]["name"])

    @property
    def process(self) -> DriverProcess:
        """The driver process (once started)."""
        if self.proc is None:
            raise RuntimeError("driver not started")
        return self.proc

    def start(self, wait: bool = True) -> HostDriver:
        """Create its Pod, get a token bound to it, start the driver; with `wait`, until
        the kubelet has registered it. Started again (after stop/kill), the same Pod,
        token and directories are used, as after a container restart."""
        lay = self.node.lay
        if self.proc is None:
            self.pod = self.node.request(
                "POST",
                f"/api/v1/namespaces/{self.namespace}/pods",
                driver_pod_manifest(self.node.name, self.namespace, self.service_account),
            )
            kubeconfig = self.node.control_plane.bound_token_kubeconfig(
                self.namespace, self.service_account, self.pod, self.node.name
            )
            lay.driver_dir.mkdir(parents=True, exist_ok=True)
            if self.daemonset_env is not None:  # every setting from the DaemonSet's env
                env = self.daemonset_env(self.pod)
                args = self.args
            else:
                env = {"DRA_CLAIM_ADDRESS_RANGES": claim_address_ranges()}
                args = ("--virtual-parents", PARENT, "--nri-socket", str(lay.nri_socket))
                args += self.args
            self.proc = DriverProcess(
                lay.driver_dir,
                lay.netns,
                kubeconfig,
                node=self.node.name,
                pod_uid=self.pod_uid,
                args=args,
                env=env,
                driver=env.get("DRA_DRIVER_NAME", DRIVER),
                own_flags=self.daemonset_env is None,
                registry=lay.kubelet_registry,
                plugins=lay.kubelet_plugins,
                cdi=lay.cdi_dir,
                enter=lay.enter(),
            )
            self.node.on_stop.append(self.stop)
        registrations = self.registrations()
        self.process.start(wait=wait)
        if wait:
            self.wait_registered(registrations + 1)
        return self

    def registrations(self) -> int:
        """How often the kubelet has registered this instance (`kubelet_registrations`)."""
        return kubelet_registrations(
            self.node, self.process.reg_socket, str(self.process.service_socket)
        )

    def wait_registered(self, times: int = 1, timeout: float = 30) -> None:
        """Until the kubelet has registered this instance (the `times`-th time)."""
        wait_for(
            f"the kubelet to register driver pod {self.pod_name}",
            lambda: self.registrations() >= times,
            timeout,
            log=self.log,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process (SIGTERM, or `sig`); its Pod stays."""
        if self.proc is not None and self.proc.proc is not None:
            self.proc.stop(sig)  # one that exited already is only reaped

    def kill(self) -> None:
        """SIGKILL, as a crash would end it; its Pod stays."""
        self.stop(signal.SIGKILL)

    def signal(self, sig: int) -> None:
        """Send `sig` to a running driver and return at once."""
        if self.proc is not None and self.proc.proc is not None:
            self.proc.proc.send_signal(sig)

    def remove(self) -> None:
        """Stop the process and delete its Pod, as a finished rollout does."""
        self.stop()
        try:
            self.node.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}")
        except ApiError as e:
            if e.code != 404:
                raise

    def log(self) -> str:
        """Everything it logged so far."""
        return self.proc.log() if self.proc is not None else ""

    @property
    def log_path(self) -> Path:
        """Its log file."""
        return self.process.log_path

    @property
    def cdi(self) -> Path:
        """Its CDI spec directory (containerd's)."""
        return self.process.cdi

    @property
    def state(self) -> Path:
        """Its state directory (allocation records)."""
        return self.process.state


def kubelet_registrations(node: LocalNode, reg_socket: Path, endpoint: str) -> int:
    """How often the kubelet has registered the plugin at `reg_socket`, by its own log:
    a `RegisterPlugin started` for that registration socket followed by its connection
    to the plugin's `endpoint`. (A connection alone is not one: after a restart on the
    same socket paths, the kubelet's gRPC channel reconnects first, and its plugin
    watcher then unregisters the plugin and registers it again a second later; a pod
    prepared in between fails and waits for the kubelet's resync, 60-90 s.)"""
    started = f'RegisterPlugin started" plugin={{"SocketPath":"{reg_socket}"'
    connected = f'endpoint="{endpoint}" connected=true'
    try:
        log = (node.lay.logs / "kubelet.log").read_text(errors="replace")
    except FileNotFoundError:
        return 0
    count, pending = 0, False
    for line in log.splitlines():
        if started in line:
            pending = True
        elif pending and connected in line:
            count, pending = count + 1, False
    return count


def start_driver(
    node: LocalNode, mode: str = "host-process", args: tuple[str, ...] = (), wait: bool = True
) -> HostDriver:
    """Start the driver on `node` in `mode` (the only one so far: host-process)."""
    if mode != "host-process":
        raise ValueError(f"driver mode {mode!r} is not implemented (host-process is)")
    return HostDriver(node, args).start(wait=wait)
