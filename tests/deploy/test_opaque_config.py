"""Every opaque config in deploy/ is valid for `dra-driver validate-config`.

Checked: each DeviceClass config, each claim template config, and for each example
request what the driver really gets: class config first, claim config merged over it
(dradriver.claims.resolution.deep_merge, the daemon's own merge).
"""

from __future__ import annotations

import pytest
import yaml

from dradriver.claims.resolution import deep_merge
from tests.deploy.support import (
    DRIVER,
    device_classes,
    objects,
    run_driver,
)


def _registered() -> set[tuple[str, str]]:
    res = run_driver("handlers")
    assert res.returncode == 0, res.stderr
    rows = [line.split()[0] for line in res.stdout.splitlines()[1:] if line.strip()]
    return {tuple(row.split("/", 1)) for row in rows}  # type: ignore[misc]


def _class_params(name: str) -> list[dict]:
    """The opaque configs of one of the chart's classes ([] for another driver's class)."""
    spec = device_classes().get(name, {}).get("spec") or {}
    return [c["opaque"]["parameters"] for c in spec.get("config") or []]


def _alternatives(req: dict) -> list[tuple[str, str]]:
    """(request name as allocated, class) of a request: itself, or each firstAvailable
    subrequest as `req/sub`."""
    if "exactly" in req:
        return [(req["name"], req["exactly"]["deviceClassName"])]
    return [
        (f"{req['name']}/{sub['name']}", sub["deviceClassName"]) for sub in req["firstAvailable"]
    ]


def _cases():
    """(id, parameters) of every config to validate."""
    for name, device_class in device_classes().items():
        for i, config in enumerate(device_class["spec"].get("config") or []):
            yield f"DeviceClass/{name}#{i}", config["opaque"]["parameters"]
    for template in objects("ResourceClaimTemplate"):
        tname = template["metadata"]["name"]
        devices = template["spec"]["spec"]["devices"]
        for i, config in enumerate(devices.get("config") or []):
            yield f"ResourceClaimTemplate/{tname}#{i}", config["opaque"]["parameters"]
        for req in devices["requests"]:
            for name, device_class in _alternatives(req):
                merged = None
                for params in _class_params(device_class):
                    merged = deep_merge(merged, params)
                for config in devices.get("config") or []:
                    wanted = config.get("requests")
                    if not wanted or name in wanted or req["name"] in wanted:
                        merged = deep_merge(merged, config["opaque"]["parameters"])
                if merged is not None:
                    yield f"merged/{tname}/{name}", merged


CASES = list(_cases())


def test_every_opaque_config_is_for_this_driver():
    for device_class in device_classes().values():
        for config in device_class["spec"].get("config") or []:
            assert config["opaque"]["driver"] == DRIVER
    for template in objects("ResourceClaimTemplate"):
        for config in template["spec"]["spec"]["devices"].get("config") or []:
            assert config["opaque"]["driver"] == DRIVER
            requests = template["spec"]["spec"]["devices"]["requests"]
            names = {name for r in requests for name, _ in _alternatives(r)}
            names |= {r["name"] for r in requests}
            assert set(config.get("requests") or names) <= names


@pytest.mark.parametrize("case,params", CASES, ids=[c for c, _ in CASES])
def test_validate_config(case, params, tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    res = run_driver("validate-config", str(path))
    type_ = params.get("type", next(iter(params), None))  # no type: the device's kind
    kind = (params.get(type_) or {}).get("kind") if isinstance(type_, str) else None
    if res.returncode != 0 and (type_, kind) not in _registered():
        pytest.xfail(f"{type_}/{kind} is not registered yet: {res.stderr.strip()}")
    assert res.returncode == 0, f"{case}: {res.stderr}"
    assert f"valid ({type_}/" in res.stdout


def test_validate_config_rejects_a_broken_example(tmp_path):
    """The check above is not vacuous: a macvlan without its parent is refused."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"type": "netdev", "netdev": {"kind": "macvlan"}}))
    res = run_driver("validate-config", str(path))
    assert res.returncode == 1
    assert "parent" in res.stderr


def test_roce_class_config_selects_the_combo_handler():
    assert _class_params("roce-devices") == [{"type": "combo", "combo": {"kind": "roce"}}]
    for name in ("network-devices", "virtual-network", "rdma-devices"):
        assert _class_params(name) == [], f"{name}: the device's default config applies"
