"""The layers inside dradriver (design.md, "Layers"): imports only go down, the core never
imports a handler family, and a family imports only the contract, the kit and itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Each group may import itself and the groups listed for it.
LAYERS: dict[str, set[str]] = {
    "foundation": {
        "errors",
        "log",
        "naming",
        "iprules",
        "atomicfile",
        "metrics",
        "phases",
        "hookspecs",
        "patterns",
    },
    "effects": {
        "netlink",
        "rtnl",
        "rtnl.wire",
        "rtnl.links",
        "rtnl.addresses",
        "rtnl.routes",
        "rtnl.client",
        "rtnl.events",
        "nsfs",
        "rdmanl",
        "linkreaper",
        "kubeconfig",
        "kubeapi",
        "kit.sysfs",
    },
    "kit": {"kit", "kit.netconfig", "kit.hostaddr", "kit.hostif", "kit.rdma"},
    "core": {
        "registry",
        "config",
        "claims",
        "cdi",
        "records",
        "recordstore",
        "moves",
        "injection",
        "slices",
        "settings",
        "admission",
        "admission.cel",
        "admission.schema",
        "admission.fragment",
        "admission.merged",
    },
    "services": {
        "inventory",
        "plan",
        "calls",
        "fetch",
        "lifecycle",
        "prepare",
        "gc",
        "status",
        "publisher",
        "sandboxes",
        "placing",
    },
    "kubelet": {"kubelet", "kubelet.sockets", "kubelet.server", "kubelet.proto"},
    "nri": {
        "nri",
        "nri.mux",
        "nri.ttrpc",
        "nri.rpc",
        "nri.connection",
        "nri.pods",
        "nri.dispatch",
        "nri.service",
        "nri.plugin",
        "nri.proto",
        "nri.proto.api_pb2",
        "nri.proto.ttrpc_pb2",
    },
    "wiring": {"daemon", "cli", "__main__", ""},
}
MAY_IMPORT: dict[str, set[str]] = {
    "foundation": set(),
    "effects": {"foundation"},
    "kit": {"foundation", "effects"},
    "family": {"foundation", "effects", "kit"},  # dradriver.handlers.<family>, plus itself
    "core": {"foundation", "effects"},
    "services": {"foundation", "effects", "core"},
    "kubelet": {"foundation", "effects", "core", "services"},
    "nri": {"foundation"},  # the protocol: it knows nothing of claims
    "wiring": {"foundation", "effects", "core", "services", "kubelet", "nri"},
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "handlers":
        parts = ["dradriver", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = [*ROOT.joinpath("dradriver").rglob("*.py"), *ROOT.joinpath("handlers").rglob("*.py")]
    return {_module_name(p): p for p in files if "_pb2" not in p.name}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """dradriver modules `name` imports (statically), resolved to module names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {m for m in out if m.startswith("dradriver") and m != name}


def _group(module: str) -> str:
    short = module.removeprefix("dradriver").removeprefix(".")
    if short.startswith("handlers"):
        return "family:" + (short.split(".")[1] if "." in short else "")
    if short.startswith("kubelet.proto"):
        return "kubelet"
    if short.startswith("nri.proto"):
        return "nri"
    for group, members in LAYERS.items():
        if short in members:
            return group
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS and design.md")


def test_imports_only_go_down_the_layers():
    modules = _modules()
    wrong = []
    for name, path in sorted(modules.items()):
        mine = _group(name)
        allowed = MAY_IMPORT["family" if mine.startswith("family:") else mine]
        for dep in sorted(_imports(name, path, set(modules))):
            theirs = _group(dep)
            if theirs == mine or theirs in allowed:
                continue
            if mine == "family:" and theirs.startswith("family:"):
                continue  # dradriver.handlers itself (the package docstring only)
            wrong.append(f"{name} ({mine}) imports {dep} ({theirs})")
    assert wrong == []


def test_the_checker_sees_a_violation():
    """Guard against a checker that passes because it resolves nothing."""
    modules = _modules()
    deps = _imports("dradriver.handlers.netdev.veth", modules["dradriver.handlers.netdev.veth"],
                    set(modules))  # fmt: skip
    assert {"dradriver.kit.netconfig", "dradriver.handlers.netdev.virtual"} <= deps
    assert _group("dradriver.prepare") == "services"
    assert "core" not in MAY_IMPORT["family"]


def _third_party(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (statically)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_driver_never_imports_pyroute2():
    """The driver talks rtnetlink itself (dradriver/rtnl); pyroute2 is for tests only."""
    users = [name for name, path in _modules().items() if "pyroute2" in _third_party(path)]
    assert users == []
    assert "pyroute2" in _third_party(ROOT / "tests" / "support" / "runtime.py")  # it would see
