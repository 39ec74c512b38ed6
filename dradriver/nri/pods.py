"""What the driver core gets from NRI: pod sandboxes, and the handler it implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dradriver.nri.proto import api_pb2

NETWORK_NAMESPACE = "network"  # OCI namespace type, as containerd puts it in LinuxNamespace


@dataclass(frozen=True)
class PodSandbox:
    """A pod sandbox as the runtime reports it."""

    id: str  # the runtime's sandbox ID
    uid: str  # the Kubernetes pod UID
    name: str
    namespace: str
    netns: str  # path of the sandbox's network namespace; "" for a host-network pod

    @classmethod
    def from_proto(cls, pod: api_pb2.PodSandbox) -> PodSandbox:
        """Convert NRI's PodSandbox; the netns is the path of its "network" namespace."""
        netns = next((ns.path for ns in pod.linux.namespaces if ns.type == NETWORK_NAMESPACE), "")
        return cls(id=pod.id, uid=pod.uid, name=pod.name, namespace=pod.namespace, netns=netns)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class Container:
    """A container being created, as the runtime reports it: what the driver reads."""

    id: str
    name: str
    env: tuple[str, ...]  # the OCI process environment, CDI edits applied

    @classmethod
    def from_proto(cls, container: api_pb2.Container) -> Container:
        """Convert NRI's Container."""
        return cls(id=container.id, name=container.name, env=tuple(container.env))


class SandboxHandler(Protocol):
    """What the core does on pod sandbox events. Calls come from the plugin's threads.

    A call that raises, or that is still running when its time is up, is answered with
    an error: for run_pod_sandbox the runtime then fails the sandbox (and sends stop and
    remove for it); for the others it only logs. Calls for one pod never overlap and come
    in order; calls for different pods overlap only after an earlier one overran its time.
    stop_pod_sandbox and remove_pod_sandbox may come for pods whose run never reached
    the core, and more than once: they must be idempotent.
    """

    def synchronize(self, pods: Sequence[PodSandbox]) -> None:
        """Every pod the runtime knows, on each (re)connection, before any event."""

    def run_pod_sandbox(self, pod: PodSandbox) -> None:
        """The sandbox and its network namespace (CNI done) exist; no container started yet."""

    def stop_pod_sandbox(self, pod: PodSandbox) -> None:
        """The sandbox is stopped; its network namespace still exists (CNI not torn down)."""

    def remove_pod_sandbox(self, pod: PodSandbox) -> None:
        """The sandbox is gone; containerd 2.2 sends no netns path any more ("")."""

    def create_container(self, pod: PodSandbox, container: Container) -> None:
        """A container of the running sandbox is about to be made: raising refuses it
        (the runtime fails the container and the kubelet retries it)."""
