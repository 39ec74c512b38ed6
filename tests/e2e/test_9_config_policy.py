"""Scenario 9: bad opaque configs are refused when they are created, by the real API server
running deploy/config-policy.yaml (applied with the other manifests at session start).

The table of tests/support/configcases.py: every invalid config is refused for a
ResourceClaim, a ResourceClaimTemplate and (where a class alone shows it) a DeviceClass,
with a message naming each bad field by its JSON path, and nothing is stored; every
valid config and every example of deploy/, README.md and docs/ is created; other drivers'
configs are not looked at.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from localcluster.apiclient import ApiError
from tests.support import configcases as cc
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .cluster import ADMISSION, RESOURCE, Cluster, config_policy_manifests

pytestmark = [pytest.mark.e2e]

SENTINEL = "e2e-cfg-sentinel"


def _collection(obj: dict[str, Any], namespace: str) -> str:
    if obj["kind"] == "DeviceClass":
        return f"{RESOURCE}/deviceclasses"
    return f"{RESOURCE}/namespaces/{namespace}/{cc.RESOURCES[obj['kind']]}"


def _create(cluster: Cluster, obj: dict[str, Any], namespace: str) -> ApiError | None:
    """POST the object; the API error, or None when it was created."""
    try:
        cluster.cp.request("POST", _collection(obj, namespace), obj)
    except ApiError as e:
        return e
    return None


def _stored(cluster: Cluster, obj: dict[str, Any], namespace: str) -> bool:
    path = f"{_collection(obj, namespace)}/{obj['metadata']['name']}"
    return cluster.get(path, missing_ok=True) is not None


def _merged_policy() -> str:
    return next(
        d["metadata"]["name"]
        for d in config_policy_manifests()
        if d["kind"] == "ValidatingAdmissionPolicy" and "paramKind" in d["spec"]
    )


@pytest.fixture
def case_classes(cluster: Cluster) -> Iterator[dict[int, str]]:
    """The DeviceClasses the cases bring (index -> name), visible to the merged policy.

    Its DeviceClass params come from an informer: a class created last (the sentinel,
    whose config a claim cannot satisfy without a parent) is refused-through once the
    informer has it, and with it every class created before."""
    made: dict[int, str] = {}
    try:
        for n, case in enumerate(cc.cases()):
            if case.class_configs is not None:
                made[n] = f"e2e-cfg-class-{n}"
                cluster.apply(cc.device_class(made[n], case.class_configs))
        cluster.apply(cc.device_class(SENTINEL, [cc.nd(kind="macvlan")]))
        probe = cc.claim("e2e-cfg-probe", [], device_class=SENTINEL)
        probe["metadata"]["namespace"] = "default"
        policy = _merged_policy()
        wait_for(
            "the merged policy to see the new DeviceClasses",
            lambda: cluster.config_policy_refuses(policy, probe),
            30,
        )
        yield made
    finally:
        for name in [*made.values(), SENTINEL]:
            cluster.delete(f"{RESOURCE}/deviceclasses/{name}")


def test_the_api_server_accepts_the_policies_and_they_type_check(cluster: Cluster) -> None:
    """Stored as written, and the API server's type checking (against the OpenAPI schemas
    of ResourceClaim, ResourceClaimTemplate and DeviceClass) finds nothing to warn about."""
    for doc in config_policy_manifests():
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            path = f"{ADMISSION}/validatingadmissionpolicybindings/{doc['metadata']['name']}"
            assert cluster.get(path)["spec"]["policyName"] == doc["spec"]["policyName"]
            continue
        path = f"{ADMISSION}/validatingadmissionpolicies/{doc['metadata']['name']}"
        stored = cluster.get(path)
        assert stored["spec"]["variables"] == doc["spec"]["variables"]
        assert stored["spec"]["validations"] == doc["spec"]["validations"]

        def checked(p: str = path) -> dict[str, Any] | None:
            policy = cluster.get(p)
            status = policy.get("status") or {}
            done = status.get("observedGeneration") == policy["metadata"]["generation"]
            return status if done else None

        status = wait_for(f"type checking of {doc['metadata']['name']}", checked, 60)
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings") or []
        assert warnings == [], json.dumps(warnings, indent=1)[:4000]
        print(f"{doc['metadata']['name']}: {len(json.dumps(stored['spec']))} bytes, type-checks")


def test_invalid_configs_are_refused_when_created(
    cluster: Cluster, kns: str, case_classes: dict[int, str]
) -> None:
    started = time.monotonic()
    refused = accepted = 0
    wrong: list[str] = []
    created_classes: list[str] = []
    merged = _merged_policy()
    try:
        for n, case in enumerate(cc.cases()):
            for kind in ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass"):
                if kind == "DeviceClass" and case.class_configs is not None:
                    continue
                name = f"cfg-{n}-{kind.lower()}"
                if kind == "DeviceClass":
                    obj = cc.device_class(f"e2e-{name}", case.configs)
                    want = case.class_paths
                else:
                    obj = cc.claim(name, case.configs, case.type, case_classes.get(n), kind)
                    want = case.paths
                label = f"{case.name} [{kind}]"
                error = _create(cluster, obj, kns)
                if error is None:
                    accepted += 1
                    if kind == "DeviceClass":
                        created_classes.append(obj["metadata"]["name"])
                    if want:
                        wrong.append(f"{label}: created, want refused naming {want}")
                    continue
                refused += 1
                if not want:
                    wrong.append(f"{label}: refused: {error}")
                    continue
                if error.code != 422 or "ValidatingAdmissionPolicy" not in str(error):
                    wrong.append(f"{label}: not refused by the policy: {error}")
                # The API server reports the first policy that refuses: the merged one
                # names what only the merge shows, the other what each config shows.
                message = error.status.get("message", "")
                by_merged = f"'{merged}'" in message
                own = [p for p in want if (p in case.class_paths) != by_merged]
                if not own:  # both policies refuse it (a value bad in form the merged
                    # rules still read): either may come first, naming what it names
                    full = {p: cc.full_path(kind, p, case_classes.get(n, "")) for p in want}
                    own = [p for p in want if f"{full[p]}:" in message]
                if not own:
                    wrong.append(f"{label}: refused for nothing it should be: {error}")
                for path in own:
                    full = cc.full_path(kind, path, case_classes.get(n, ""))
                    if f"{full}:" not in message:
                        wrong.append(f"{label}: the message does not name {full}: {error}")
                if _stored(cluster, obj, kns):
                    wrong.append(f"{label}: refused, yet stored")
    finally:
        for name in created_classes:
            cluster.delete(f"{RESOURCE}/deviceclasses/{name}")
    print(f"{refused} refused, {accepted} created in {time.monotonic() - started:.1f}s")
    assert not wrong, "\n".join(wrong)
    assert refused >= 150


def test_examples_of_deploy_and_readme_are_created(cluster: Cluster, kns: str) -> None:
    examples = cc.examples()
    assert len(examples) >= 8
    wrong = []
    classes = []
    try:
        for i, example in enumerate(examples):
            obj = copy.deepcopy(example.obj)  # under a name of its own (the deployed
            obj["metadata"] = {"name": f"e2e-example-{i}"}  # classes exist), spec unchanged
            if obj["kind"] == "DeviceClass":
                classes.append(obj["metadata"]["name"])
            error = _create(cluster, obj, kns)
            if error is not None:
                wrong.append(f"{example.source}: {error}")
    finally:
        for name in classes:
            cluster.delete(f"{RESOURCE}/deviceclasses/{name}")
    assert not wrong, "\n".join(wrong)


def test_configs_of_other_drivers_are_untouched(cluster: Cluster, kns: str) -> None:
    garbage = {"type": 5, "netdev": {"kind": "tap", "mtu": -1}}
    claim = cc.claim("foreign", [garbage])
    claim["spec"]["devices"]["config"][0]["opaque"]["driver"] = "gpu.example.com"
    template = copy.deepcopy(claim)
    template["kind"] = "ResourceClaimTemplate"
    template["spec"] = {"spec": claim["spec"]}
    device_class = cc.device_class("e2e-foreign", [garbage])
    device_class["spec"]["config"][0]["opaque"]["driver"] = "gpu.example.com"
    try:
        for obj in (claim, template, device_class):
            assert _create(cluster, obj, kns) is None, obj["kind"]
    finally:
        cluster.delete(f"{RESOURCE}/deviceclasses/e2e-foreign")


def test_kubectl_apply_shows_the_message_the_readme_quotes(cluster: Cluster, kns: str) -> None:
    """What a user sees, exactly as docs/deployment.md quotes it."""
    claim = cc.claim("data-net", [cc.nd(kind="macvlna", parent="eth0", mtu=70000)])
    claim["metadata"]["namespace"] = kns
    res = cluster.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(claim), check=False)
    assert res.returncode != 0
    readme = (cc.ROOT / "docs" / "deployment.md").read_text()
    [quoted] = [
        line for line in readme.splitlines() if line.startswith('The resourceclaims "data-net"')
    ]
    assert res.stderr.strip() == quoted
    assert f"{DRIVER} opaque config" in quoted and "ValidatingAdmissionPolicy" in quoted
