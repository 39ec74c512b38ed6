"""The distribution installs the driver under its own name only: dradriver, with the
repository's handlers/ folder as dradriver.handlers (no top-level `handlers` package that
another distribution could also claim)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages_on_disk() -> set[str]:
    """Every package directory, named as it is installed."""
    mapping = {v: k for k, v in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}
    found = set()
    for folder in ("dradriver", *mapping):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((mapping.get(folder, folder), *rel)))
    return found


def test_every_package_is_listed():
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == _packages_on_disk()


def test_entry_points_name_the_installed_package():
    for target in PYPROJECT["project"]["entry-points"]["dradriver.handlers"].values():
        assert target.startswith("dradriver.handlers."), target


def test_wheel_holds_dradriver_only(tmp_path):
    # Built from a copy: setuptools writes its build files next to the sources, and the
    # checkout may not be writable (make unit runs as an unprivileged user).
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("dradriver", "handlers"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    [wheel] = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("dra_driver-")}
    assert top == {"dradriver"}, top
    assert "dradriver/handlers/netdev/veth.py" in names
    assert "dradriver/kit/hostif.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "netdev = dradriver.handlers.netdev" in declared


def test_pyroute2_is_a_test_dependency_only():
    runtime = {dep.split(">")[0].split("=")[0] for dep in PYPROJECT["project"]["dependencies"]}
    assert "pyroute2" not in runtime
    assert any(
        d.startswith("pyroute2") for d in PYPROJECT["project"]["optional-dependencies"]["test"]
    )


# Libraries the driver once loaded and replaced: each is a test dependency at most.
DROPPED = ("pyroute2", "prometheus_client", "grpc", "grpc_health", "urllib3", "jsonschema")


def test_the_running_driver_loads_none_of_the_libraries_it_dropped():
    """Everything the daemon imports, its handler families loaded through their entry
    points (not importlib.metadata), its metrics rendered, and a real netlink request."""
    code = (
        "import sys\n"
        "import dradriver.cli, dradriver.daemon\n"
        "from dradriver.contract.registry import HandlerRegistry\n"
        "assert len(HandlerRegistry().kinds()) > 1\n"
        "dradriver.daemon.serve_metrics(None).registry.render()\n"
        "from dradriver.kernel import netlink\n"
        "assert any(link.name == 'lo' for link in netlink.links())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *DROPPED], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["[]", "False"]
    runtime = {dep.split(">")[0].split("=")[0] for dep in PYPROJECT["project"]["dependencies"]}
    assert not runtime & {name.replace("_", "-") for name in DROPPED} - {"grpc"}
    assert "grpcio" not in runtime


def test_the_running_driver_loads_yaml_only_for_a_yaml_kubeconfig(tmp_path):
    """In-cluster and JSON kubeconfigs never load PyYAML (0.9 MB of the daemon's RSS)."""
    doc = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://192.0.2.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    (tmp_path / "json").write_text(json.dumps(doc))
    (tmp_path / "yaml").write_text(
        "current-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://192.0.2.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import dradriver.cli, dradriver.daemon\n"
        "import dradriver.handlers.netdev, dradriver.handlers.rdma, dradriver.handlers.combo\n"
        "from dradriver import kubeconfig\n"
        "server = kubeconfig.from_file(Path(sys.argv[1])).server\n"
        "print(server, 'yaml' in sys.modules)\n"
    )
    for form, loaded in (("json", "False"), ("yaml", "True")):
        res = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / form)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == ["https://192.0.2.1:6443", loaded]
