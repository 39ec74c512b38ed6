"""`make demo` as an operator would run the driver: a local cluster of N nodes
(cluster.py), the driver image (`make image`, cached) imported into every node, the
Helm chart installed with only the values this cluster needs, deploy/'s examples
spread over the nodes, and per pod its node and interfaces printed (report.py)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .apiclient import ApiError
from .cluster import LocalCluster
from .driverimage import build_driver_image
from .examples import Examples, write_cni_examples, write_examples
from .helmrelease import NAMESPACE, RELEASE, Release, build_helm, operator_values
from .images import Image, busybox_version
from .manifests import DEPLOY
from .node import LocalNode
from .report import describe, pods_or_pod
from .waiting import wait_for

CLUSTER_NAME = "dra-demo"
NETWORK_CHECK = DEPLOY / "network-check.py"


def say(text: str = "") -> None:
    """Print a line of the demo's story at once."""
    print(text, flush=True)


def kubectl_command(cluster: LocalCluster) -> str:
    """kubectl for the host, against the cluster (through the forwarder)."""
    cache = cluster.workdir / "kubectl-cache"
    return f"{cluster.bins.kubectl()} --kubeconfig {cluster.kubeconfig} --cache-dir {cache}"


def rolled_out(cluster: LocalCluster) -> bool:
    """Whether the driver DaemonSet has one updated, Ready pod on every node."""
    ds = cluster.request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{RELEASE}")
    st, want = ds.get("status") or {}, len(cluster.nodes)
    return bool(
        st.get("observedGeneration") == ds["metadata"]["generation"]
        and st.get("updatedNumberScheduled") == want
        and st.get("numberReady") == want
    )


def driver_pods(cluster: LocalCluster) -> str:
    """The driver pods and their nodes, one line each."""
    sel = "app.kubernetes.io/name=dra-driver"
    pods = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={sel}")
    return "\n".join(
        f"  {p['metadata']['name']} on {p['spec'].get('nodeName')}: "
        f"{(p.get('status') or {}).get('phase')}"
        for p in pods["items"]
    )


def run_examples(
    node: LocalNode,
    workdir: Path,
    nodes: int,
    wait: Callable[[list[Path]], bool],
    with_cni: bool = True,
) -> tuple[bool, float]:
    """Apply deploy/'s examples (adapted, once per node) and, `with_cni` (the chart's
    driver: its image has the plugins, the chart the NAD CRD), the cni examples this
    kernel can run; wait for them (`wait`: deploy/network-check.py; the cni pods until
    Running), print each pod; whether all came up, and how long it took."""
    say(f"demo: busybox:1.37.0 here is Debian's busybox-static {busybox_version()}")
    examples = write_examples(workdir / "examples", nodes=nodes)
    cni = write_cni_examples(workdir / "examples") if with_cni else Examples()
    for note in examples.notes + cni.notes:
        say(f"demo: {note}")
    t0 = time.monotonic()
    for path in examples.files:
        node.apply(path)
    if with_cni:
        wait_for(
            "the NetworkAttachmentDefinition API (the chart's cni.installCRD)",
            lambda: _has_nads(node),
            60,
        )
    for path in cni.files:
        node.apply(path)
    say("demo: example workloads applied; waiting for them (deploy/network-check.py wait)")
    ok = wait(examples.files)
    pods = [d for d in cni.docs if d["kind"] == "Pod"]
    try:
        wait_for("the cni example pods to run", lambda: _running(node, pods), 180)
        if pods:
            say(f"demo: the cni example pods run: {', '.join(p['metadata']['name'] for p in pods)}")
    except AssertionError as exc:
        ok = False
        say(f"demo: {exc}")
    seconds = time.monotonic() - t0
    say()
    say(describe(node, examples.docs + cni.docs))
    say()
    return ok, seconds


def _has_nads(node: LocalNode) -> bool:
    try:
        return bool(node.request("GET", "/apis/k8s.cni.cncf.io/v1"))
    except ApiError:
        return False


def _running(node: LocalNode, pods: list[dict[str, Any]]) -> bool:
    """Whether every one of the example `pods` runs (an API error: not yet)."""
    try:
        found = [pods_or_pod(node, p) for p in pods]
    except ApiError:
        return False
    return all(f and (f[0].get("status") or {}).get("phase") == "Running" for f in found)


def install_chart(cluster: LocalCluster, image: Image, helm: Path) -> float:
    """Import the image into every node and install the chart as an operator would,
    until its DaemonSet runs Ready on every node; the seconds it took."""
    t0 = time.monotonic()
    cluster.import_image(image)
    cluster.apply(DEPLOY / "namespace.yaml")
    release = Release(helm, cluster.kubeconfig, cluster.workdir / "helm", RELEASE, NAMESPACE)
    values = {**operator_values(image), "cni": {"installCRD": True}}  # for the cni examples
    release.install(values)
    say(f"demo: helm install {RELEASE} deploy/helm/dra-driver -n {NAMESPACE} with {values}")
    wait_for("the driver DaemonSet on every node", lambda: rolled_out(cluster), 180)
    return time.monotonic() - t0


def up(workdir: Path, nodes: int, network_check: Callable[[str, str, list[Path]], bool]) -> int:
    """Bring the chart demo up in `workdir` and keep it until interrupted; the exit
    status. `network_check(kubectl, mode, files)` runs deploy/network-check.py."""
    t_start = time.monotonic()
    say("demo: the driver image (make image; built once, then cached) ...")
    image, t_image = build_driver_image()
    say(f"demo: image {image.name} ready in {t_image:.1f} s ({image.archive})")
    helm = build_helm()
    cluster = LocalCluster(CLUSTER_NAME, workdir, nodes=nodes)
    try:
        say(f"demo: starting a cluster of {nodes} nodes in {workdir} ...")
        cluster.start()
        t = cluster.timings
        say(
            f"demo: nodes {', '.join(n.name for n in cluster.nodes)} Ready after "
            f"{t['start_total']:.1f} s (control plane {t['control_plane']:.1f} s)"
        )
        t_driver = install_chart(cluster, image, helm)
        say(f"demo: driver pods Ready (registered with their kubelets) after {t_driver:.1f} s:")
        say(driver_pods(cluster))
        kubectl = kubectl_command(cluster)
        ok, t_examples = run_examples(
            cluster.nodes[0], workdir, nodes, lambda files: network_check(kubectl, "wait", files)
        )
        total = time.monotonic() - t_start
        say(
            f"demo: bring-up {total:.1f} s: image {t_image:.1f} s, cluster "
            f"{t['start_total']:.1f} s, chart {t_driver:.1f} s, example pods {t_examples:.1f} s"
            + ("" if ok else " (NOT every example came up: see above)")
        )
        say(f"""
The cluster stays up until Ctrl-C here, or `make demo-down` in another terminal.
  kubectl:        {kubectl} get pods -A -o wide
  or:             export KUBECONFIG={cluster.kubeconfig}
  checker:        make network-check CLUSTER=local
  driver logs:    make logs CLUSTER=local
  node logs:      {workdir}/n*/logs/  and {workdir}/controlplane/*.log""")
        while True:
            signal.pause()
    except KeyboardInterrupt:
        say("\ndemo: stopping ...")
        return 0
    except Exception:
        cluster.print_logs()
        raise
    finally:
        cluster.stop()
        if "teardown" in cluster.timings:
            say(f"demo: cluster stopped and removed in {cluster.timings['teardown']:.1f} s")
        sys.stdout.flush()
