"""The layers of dradriver are its folders (docs/architecture.md, "Layers"): each folder
imports only itself and the folders listed for it, the core never imports a handler family,
and a family imports only the plugin contract."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The rule, one line per folder: what each folder of dradriver/ may import besides itself.
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),  # errors, logs, timing, metrics: imports nothing of ours
    "kernel": {"base"},  # netlink facade, rtnl, namespaces, RDMA netlink, the link reaper
    "contract": {"base"},  # hook specs, registry, config schema, naming, address rules
    "kit": {"base", "kernel", "contract"},  # what handler families share
    "state": {"base", "contract"},  # records, their store, CDI specs, atomic writes
    "admission": {"base", "contract"},  # admission policies generated from the schema
    "apiserver": {"base", "kernel", "contract", "state"},  # API calls, status, slices
    "claims": {"base", "kernel", "contract", "state", "apiserver"},  # prepare, unprepare
    "nrimode": {"base", "kernel", "contract", "state", "apiserver", "claims"},  # sandboxes
    "nri": {"base"},  # the NRI protocol: it knows nothing of claims
    "kubelet": {"base", "contract", "claims"},  # gRPC services, sockets, the instance lock
    "top": {  # cli, daemon, selfcheck, settings: the wiring, may import every folder
        "base", "kernel", "contract", "kit", "state", "admission", "apiserver", "claims",
        "nrimode", "nri", "kubelet", "compat",
    },
    "compat": {"base", "kernel", "contract", "state", "apiserver", "claims", "nrimode"},
}  # fmt: skip
# What a handler family (dradriver.handlers.<family>) may import besides itself: the plugin
# contract, the kit, errors, naming and the kernel facade.
FAMILY_MAY_IMPORT = {
    "dradriver.contract.hookspecs",
    "dradriver.contract.naming",
    "dradriver.base.errors",
    "dradriver.kernel.netlink",
    "dradriver.kit",
}
TOP = {"", "cli", "daemon", "injectionmode", "selfcheck", "settings", "__main__"}


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
    if short in TOP:
        return "top"
    if short == "_compat":
        return "compat"
    folder = short.split(".")[0]
    if (folder in MAY_IMPORT and "." in short) or short in MAY_IMPORT:
        return folder
    raise AssertionError(f"module {module} is in no layer: put it in a folder of MAY_IMPORT")


def _family_may_import(dep: str) -> bool:
    return any(dep == m or dep.startswith(m + ".") for m in FAMILY_MAY_IMPORT)


def test_imports_only_go_down_the_layers():
    modules = _modules()
    wrong = []
    for name, path in sorted(modules.items()):
        mine = _group(name)
        for dep in sorted(_imports(name, path, set(modules))):
            theirs = _group(dep)
            if theirs == mine:
                continue
            if mine.startswith("family:"):
                if _family_may_import(dep) or theirs == "family:":
                    continue  # dradriver.handlers itself (the package docstring only)
            elif theirs in MAY_IMPORT[mine]:
                continue
            wrong.append(f"{name} ({mine}) imports {dep} ({theirs})")
    assert wrong == []


def test_every_folder_is_a_layer():
    """`ls dradriver/` is the map: every folder has a rule, every rule a folder."""
    folders = {p.name for p in ROOT.joinpath("dradriver").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(MAY_IMPORT) - {"top", "compat"}
    top = {p.stem for p in ROOT.joinpath("dradriver").glob("*.py")}
    assert top == {
        "__init__", "__main__", "_compat", "cli", "daemon", "injectionmode", "selfcheck", "settings"
    }  # fmt: skip


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    """Every import counts, deferred ones inside functions too."""
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    graph = {name: {d for d in deps if d in modules} for name, deps in graph.items()}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_imports_the_handlers_folder_by_its_checkout_name():
    """`handlers` is installed as dradriver.handlers: `import handlers...` works only in the
    checkout and would slip past the layer rule, which looks at dradriver names."""
    users = [name for name, path in _modules().items() if "handlers" in _third_party(path)]
    assert users == []


def test_the_checker_sees_a_violation():
    """Guard against a checker that passes because it resolves nothing."""
    modules = _modules()
    deps = _imports("dradriver.handlers.netdev.veth", modules["dradriver.handlers.netdev.veth"],
                    set(modules))  # fmt: skip
    assert {"dradriver.kit.netconfig", "dradriver.handlers.netdev.virtual"} <= deps
    assert _group("dradriver.claims.prepare") == "claims"
    assert "claims" not in MAY_IMPORT["apiserver"]
    assert not _family_may_import("dradriver.claims.prepare")
    assert not _family_may_import("dradriver.kernel.nsfs")


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
    """The driver talks rtnetlink itself (dradriver/kernel/rtnl); pyroute2 is for tests only."""
    users = [name for name, path in _modules().items() if "pyroute2" in _third_party(path)]
    assert users == []
    assert "pyroute2" in _third_party(ROOT / "tests" / "support" / "runtime.py")  # it would see
