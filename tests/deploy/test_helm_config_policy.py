"""The config admission policies as the Helm chart installs them (templates/config-policy/),
rendered by a real helm and run by Kubernetes' own admission code (tests/deploy/k8scheck).

- The driver name flows into them: renamed, they give every case of the table the
  verdict and message the default ones give (the name swapped), and leave the default
  driver's configs alone; any string is quoted right for YAML and CEL.
- configPolicy values: off, validation actions, failure policy; bad ones fail naming the
  value.
- An operator's own `dra-driver admission-policy` output (third-party handlers) replaces
  the built-in policies through configPolicy.generated, and mistakes in it fail naming
  the value.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from dradriver import admission
from dradriver.contract.config import ConfigSchema
from tests.deploy.support import (
    DRIVER,
    admission_request,
    as_installed,
    by_name,
    deployed_classes,
    gen_manifests,
    generated_objects,
    run_driver,
    run_k8scheck,
)
from tests.deploy.test_config_policy import _table
from tests.support import configcases as cc
from tests.support import thirdparty
from tests.support.helm import helm_binary

gen = gen_manifests()
OTHER = "net.example.org"
BAD = [cc.nd(kind="macvlna", parent="eth0", mtu=70000)]
MTU_MESSAGE = "spec.devices.config[0].opaque.parameters.netdev.mtu: 70000 is out of range 68-65535"


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


def config_policies(text: str) -> list[dict[str, Any]]:
    """The objects of templates/config-policy/ in `helm template` output, by name."""
    found = [t for path, t in gen.documents(text) if path.startswith("config-policy/")]
    return by_name(yaml.safe_load(t) for t in found)


def labels(release: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "dra-driver", "app.kubernetes.io/instance": release}


def policy_file(tmp_path: Path, objects: list[dict[str, Any]]) -> str:
    path = tmp_path / f"policies-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text("---\n".join(yaml.safe_dump(o) for o in objects))
    return str(path)


def renamed(value: Any, name: str) -> Any:
    """`value` (JSON) with the default driver name replaced by `name` everywhere."""
    return json.loads(json.dumps(value).replace(DRIVER, json.dumps(name)[1:-1]))


def claim_for(driver: str, configs: list[dict[str, Any]], class_name: str = "") -> dict[str, Any]:
    claim = cc.claim("c", configs, device_class=class_name or None)
    claim["metadata"]["namespace"] = "default"
    return renamed(claim, driver)


def test_renamed_policies_judge_the_table_as_the_default_ones(helm, k8scheck, tmp_path):
    """`--set driverName=net.example.org`: for every case of the table, with the objects'
    driver renamed too, the same verdict and the same messages (the name swapped) as the
    default policies give; the default driver's configs are left alone (no cost: the
    match conditions stop the policies)."""
    text = gen.render(helm, "--set", f"driverName={OTHER}", release="net", namespace="net-system")
    policies = config_policies(text)
    assert policies == as_installed(generated_objects(OTHER), labels("net"))
    assert [p["metadata"]["name"] for p in policies[:2]] == [
        f"{OTHER}-opaque-config",
        f"{OTHER}-opaque-config-merged",
    ]
    default = config_policies(gen.render(helm))
    rows = _table()
    cases = [admission_request(obj, params) for *_, obj, params in rows]
    want = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, default), cases=cases)
    ours = run_k8scheck(
        k8scheck, "vap", policy_file(tmp_path, policies), cases=renamed(cases, OTHER)
    )
    theirs = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, policies), cases=cases)
    assert sum(not w["allowed"] for w in want) >= 80, "the table lost its invalid cases"
    wrong = []
    for (name, kind, *_), w, o, t in zip(rows, want, ours, theirs, strict=True):
        if (o["allowed"], _parts(o["messages"]), o["errors"]) != (
            w["allowed"], _parts(renamed(w["messages"], OTHER)), w["errors"]
        ):  # fmt: skip
            wrong.append(f"{name} [{kind}]: renamed {o}, default {w}")
        if not t["allowed"] or t["errors"] or t["cost"]:
            wrong.append(f"{name} [{kind}]: the renamed policies looked at {DRIVER}'s: {t}")
    assert not wrong, "\n".join(wrong[:20])


def _parts(messages: list[str]) -> list[tuple[str, list[str]]]:
    """Each message as its lead and its problems in sorted order: CEL iterates a map (a
    config's `sysctls`) in no fixed order, so two runs may list the same problems
    differently. The problems are the `; `-separated parts from the first field path on."""
    out = []
    for m in messages:
        at = m.find("spec.")
        lead, problems = (m[:at], m[at:]) if at >= 0 else (m, "")
        out.append((lead, sorted(problems.split("; "))))
    return out


def test_macvlan_global_macs_reach_the_policies_as_the_driver_takes_them(helm, k8scheck, tmp_path):
    """settings.macvlanGlobalMacs: the policies are `dra-driver admission-policy
    --macvlan-global-macs`'s, the listed MAC is accepted in any case and no other global
    one; without the list it is refused, as the driver and `validate-config` do."""
    listed = "00:1B:21:AA:BB:CC"
    text = gen.render(
        helm, "--set", "settings.macvlanGlobalMacs={" + listed + ",00:50:56:00:00:01}"
    )
    policies = config_policies(text)
    res = run_driver("admission-policy", "--driver-name", DRIVER, "--macvlan-global-macs",
                     f"{listed},00:50:56:00:00:01")  # fmt: skip
    assert res.returncode == 0, res.stderr
    wanted = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert policies == as_installed(wanted, labels("dra-driver"))
    default = config_policies(gen.render(helm))
    macs = [listed.lower(), "00:1b:21:aa:bb:cd", "02:00:00:00:00:07"]
    claims = [claim_for(DRIVER, [cc.nd(kind="macvlan", parent="eth0", macAddress=m)]) for m in macs]
    cases = [admission_request(c, deployed_classes()) for c in claims]
    got = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, policies), cases=cases)
    before = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, default), cases=cases)
    assert [g["allowed"] for g in got] == [True, False, True], got
    assert [b["allowed"] for b in before] == [False, False, True], before
    assert all(not g["errors"] for g in got + before)
    field = "spec.devices.config[0].opaque.parameters.netdev.macAddress:"
    assert field in " ".join(got[1]["messages"]) and field in " ".join(before[0]["messages"])
    for mac, allowed in zip(macs, [True, False, True], strict=True):
        path = tmp_path / f"{mac.replace(':', '')}.yaml"
        path.write_text(json.dumps(_macvlan_params(mac)))
        res = run_driver("validate-config", "--macvlan-global-macs", listed, str(path))
        assert (res.returncode == 0) == allowed, res.stderr


def _macvlan_params(mac: str) -> dict[str, Any]:
    netdev = {"kind": "macvlan", "parent": "eth0", "interfaceName": "net1", "macAddress": mac}
    return {"type": "netdev", "netdev": netdev}


@pytest.mark.parametrize(
    "name",
    ["we'ird\\\"na: me #{{x}} é\tz {{ .Values }} ''' ", "two\nlines\\n'"],
    ids=["quotes", "newline"],
)
def test_any_driver_name_is_quoted_for_yaml_and_cel(helm, k8scheck, tmp_path, name):
    """A name the values schema would refuse (--skip-schema-validation), with quotes,
    backslashes, YAML indicators, template braces, a tab or a newline: the templates
    render exactly the generator's objects for it, which compile and judge that
    driver's configs. (The other templates are left out: the schema keeps such names
    away from them.)"""
    chart = tmp_path / "dra-driver"
    shutil.copytree(gen.CHART, chart)
    for directory in ("driver", "resourceclass"):
        shutil.rmtree(chart / "templates" / directory)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"driverName": name}))
    text = gen.render(helm, "--skip-schema-validation", "-f", str(values), chart=chart)
    policies = config_policies(text)
    assert policies == as_installed(generated_objects(name), labels("dra-driver"))
    params = renamed(deployed_classes(), name)
    cases = [
        admission_request(claim_for(name, BAD), params),
        admission_request(claim_for(DRIVER, BAD), params),
        admission_request(claim_for(name, [cc.nd(kind="macvlan")], "virtual-network"), params),
    ]
    got = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, policies), cases=cases)
    assert [g["allowed"] for g in got] == [False, True, False], got
    assert all(not g["errors"] for g in got), got
    if "\n" in name:  # the API server drops a message expression's result with a line
        # break for the policy's message
        assert got[0]["messages"] == [f"an opaque config of {name} is invalid"]
        assert got[2]["messages"] == [
            f"an opaque config of {name} does not fit the one of its DeviceClass"
        ]
        return
    assert got[0]["messages"][0].startswith(f"{name} opaque config: ")
    assert MTU_MESSAGE in got[0]["messages"][0]
    assert got[2]["messages"][0].startswith(f"{name} opaque config merged with DeviceClass ")


def test_values_turn_them_off_and_set_actions_and_failure_policy(helm):
    off = gen.render(helm, "--set", "configPolicy.enabled=false")
    assert config_policies(off) == []
    assert "config-policy.yaml" not in gen.manifests(off)
    text = gen.render(
        helm,
        "--set", "configPolicy.failurePolicy=Fail",
        "--set", "configPolicy.validationActions={Warn,Audit}",
    )  # fmt: skip
    assert config_policies(text) == as_installed(
        generated_objects(), labels("dra-driver"), "Fail", ("Warn", "Audit")
    )


def fpga_policy(driver: str) -> str:
    """`dra-driver admission-policy --driver-name DRIVER` where the fpga plugin is installed."""
    built = admission.build(ConfigSchema(thirdparty.registry(), driver), driver)
    assert built.warnings == []
    return admission.render(built, admission.header(driver))


def test_an_operators_generated_policy_replaces_the_built_in(helm, k8scheck, tmp_path):
    """configPolicy.generated with the policies for a third-party kind: installed instead
    of the built-in ones, with the release's labels and the configPolicy settings; it
    checks the plugin's kind, which the built-in policies refuse as an unknown type."""
    generated = tmp_path / "fpga-policy.yaml"
    generated.write_text(fpga_policy(OTHER))
    text = gen.render(
        helm,
        "--set", f"driverName={OTHER}",
        "--set-file", f"configPolicy.generated={generated}",
        "--set", "configPolicy.failurePolicy=Fail",
        "--set", "configPolicy.validationActions={Warn,Audit}",
        release="net", namespace="net-system",
    )  # fmt: skip
    policies = config_policies(text)
    objects = [d for d in yaml.safe_load_all(generated.read_text()) if d]
    assert policies == as_installed(objects, labels("net"), "Fail", ("Warn", "Audit"))
    assert "templates/config-policy/policies.yaml" not in text
    built_in = config_policies(gen.render(helm, "--set", f"driverName={OTHER}"))

    fpga = {"type": "fpga", "fpga": {"kind": "bitstream", "image": "x.bit"}}
    bad = {"type": "fpga", "fpga": {"kind": "bitstream", "image": "", "slots": 9}}
    params = renamed(deployed_classes(), OTHER)
    cases = [admission_request(claim_for(OTHER, [c]), params) for c in (fpga, bad, BAD[0])]
    got = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, policies), cases=cases)
    assert [g["allowed"] for g in got] == [True, False, False], got
    text = got[1]["messages"][0]
    assert "parameters.fpga.slots: 9 is out of range 1-4" in text, text
    assert "parameters.fpga.image:" in text, text
    assert MTU_MESSAGE in got[2]["messages"][0], "the built-in kinds are still checked"
    [refused] = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, built_in), cases=cases[:1])
    assert not refused["allowed"] and "parameters.type:" in refused["messages"][0]


def test_a_generated_policy_for_another_driver_or_incomplete_fails(helm, tmp_path):
    generated = tmp_path / "policy.yaml"
    generated.write_text(fpga_policy(DRIVER))
    err = refused(helm, tmp_path, generated.read_text(), f"driverName={OTHER}")
    assert (
        f'configPolicy.generated: ValidatingAdmissionPolicy "{DRIVER}-opaque-config" is not a '
        f"config policy of driverName {OTHER}: generate it with "
        f"`dra-driver admission-policy --driver-name {OTHER}`"
    ) in err
    half = "\n---\n".join(generated.read_text().split("\n---\n")[:2])
    err = refused(helm, tmp_path, half)
    assert "configPolicy.generated holds ValidatingAdmissionPolicy" in err
    assert "not the two policies and two bindings of driverName dra.example.com" in err
    err = refused(helm, tmp_path, "kind: [unclosed\n")
    assert "configPolicy.generated: document 0 is not a YAML object" in err


def refused(helm: Path, tmp_path: Path, generated: str, *sets: str) -> str:
    """`helm template` with configPolicy.generated = `generated` must fail: its error."""
    path = tmp_path / "generated.yaml"
    path.write_text(generated)
    args = ["--set-file", f"configPolicy.generated={path}"]
    for value in sets:
        args += ["--set", value]
    with pytest.raises(SystemExit) as exc:
        gen.render(helm, *args)
    return str(exc.value)


@pytest.mark.parametrize(
    "value,message",
    [
        ("configPolicy.failurePolicy=Never", "/configPolicy/failurePolicy"),
        ("configPolicy.validationActions={Deny,Warn}", "/configPolicy/validationActions"),
        ("configPolicy.validationActions={Block}", "/configPolicy/validationActions/0"),
        ("configPolicy.validationActions=null", "/configPolicy"),
        ("configPolicy.enable=false", "additional properties 'enable' not allowed"),
        ("settings.macvlanGlobalMacs={01:00:5e:00:00:01}", "/settings/macvlanGlobalMacs/0"),
        ("settings.macvlanGlobalMacs={00:00:00:00:00:00}", "/settings/macvlanGlobalMacs/0"),
    ],
)
def test_bad_values_fail_naming_the_value(helm, value, message):
    with pytest.raises(SystemExit) as exc:
        gen.render(helm, "--set", value)
    assert message in str(exc.value)


def test_cni_plugins_reach_the_policies_as_the_driver_takes_them(helm, k8scheck, tmp_path):
    """settings.cniPlugins: the policies are `dra-driver admission-policy --cni-plugins`'s;
    an inline network naming a plugin left out is refused by them and by the driver's
    `validate-config` given the same list, one the default list refuses is accepted."""
    plugins = "macvlan,host-local,portmap"
    policies = config_policies(gen.render(helm, "--set", "settings.cniPlugins={" + plugins + "}"))
    res = run_driver("admission-policy", "--driver-name", DRIVER, "--cni-plugins", plugins)
    assert res.returncode == 0, res.stderr
    wanted = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert policies == as_installed(wanted, labels("dra-driver"))
    default = config_policies(gen.render(helm))
    networks = [("macvlan", "portmap"), ("bridge",)]
    params = [cc.cn(config=cc.network_text(*n)) for n in networks]
    cases = [admission_request(claim_for(DRIVER, [p]), deployed_classes()) for p in params]
    got = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, policies), cases=cases)
    before = run_k8scheck(k8scheck, "vap", policy_file(tmp_path, default), cases=cases)
    assert [g["allowed"] for g in got] == [True, False], got
    assert [b["allowed"] for b in before] == [False, True], before
    assert all(not g["errors"] for g in got + before)
    said = 'spec.devices.config[0].opaque.parameters.cni.config: plugin "bridge" is not allowed'
    assert said in " ".join(got[1]["messages"]), got[1]
    for i, (p, allowed) in enumerate(zip(params, [True, False], strict=True)):
        path = tmp_path / f"net{i}.yaml"
        path.write_text(json.dumps(p))
        res = run_driver("validate-config", "--cni-plugins", plugins, str(path))
        assert (res.returncode == 0) == allowed, res.stderr
