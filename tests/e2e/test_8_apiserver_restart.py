"""The driver across a kube-apiserver restart (an upgrade, a control-plane failover):
its pooled connections die with the old process; the next kubelet call, the status
write and the publisher must work against the new one without a retry by the kubelet."""

from __future__ import annotations

import pytest

from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node
from .kubelet import check_answer
from .test_2_examples import wait_status
from .test_3_capacity import claim_pod, veth_template

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.kind("veth"),
    pytest.mark.apiserver_restart(order=0),
]


def test_first_calls_after_an_apiserver_restart_succeed(
    cluster: Cluster, node: Node, kns: str
) -> None:
    d = node.start_driver()
    [before] = wait_for("the driver's slice", cluster.slices)
    cluster.apply(veth_template(kns))
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    # The driver talks to the API server once, so its connection pool holds a
    # connection to the old process.
    warm = claim_pod(kns, "warm")
    cluster.apply(warm)
    [warm_claim] = cluster.kubelet_claims(cluster.wait_bound(kns, "warm"))
    check_answer(d.prepare([warm_claim]), [warm_claim])
    wait_status(cluster, warm_claim)

    cluster.cp.restart_apiserver()

    # The kubelet's first call after the restart: answered, not failed.
    resp = d.prepare([claim])
    check_answer(resp, [claim])
    wait_status(cluster, claim)
    assert "writing claim status failed" not in d.log()
    # The publisher reconnects too: the slice is as before, or published again.
    cluster.delete_slices()
    [after] = wait_for("the slice published after the restart", cluster.slices, 15)
    assert after["spec"]["devices"] == before["spec"]["devices"]
    gone = d.unprepare([claim, warm_claim])
    assert {e.error for e in gone.claims.values()} == {""}
