"""The import paths of release 0.1, kept for one release so third-party plugins keep working.

Before 0.2 every module sat at the top of `dradriver/` (`dradriver.hookspecs`,
`dradriver.netlink`, ...). An import of an old path gets the module at its new place (the
same module object, so hook markers and exception classes are shared) and a
DeprecationWarning naming the new path. Removed in 0.3.

`dradriver.claims` (claim resolution in 0.1) is now the folder of the claim services: its
functions are in `dradriver.claims.resolution`; no plugin imported it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

# Old module name (under dradriver.) -> where it lives now (under dradriver.).
MOVED: dict[str, str] = {
    "errors": "base.errors",
    "log": "base.log",
    "phases": "base.timing",
    "metrics": "base.metrics",
    "hookspecs": "contract.hookspecs",
    "registry": "contract.registry",
    "config": "contract.config",
    "naming": "contract.naming",
    "iprules": "contract.iprules",
    "patterns": "contract.patterns",
    "netlink": "kernel.netlink",
    "rtnl": "kernel.rtnl",
    "nsfs": "kernel.nsfs",
    "rdmanl": "kernel.rdmanl",
    "linkreaper": "kernel.linkreaper",
    "atomicfile": "state.atomicfile",
    "cdi": "state.cdi",
    "records": "state.records",
    "recordstore": "state.recordstore",
    "moves": "state.moves",
    "injection": "state.injection",
    "kubeconfig": "apiserver.kubeconfig",
    "kubeapi": "apiserver.kubeapi",
    "status": "apiserver.status",
    "publisher": "apiserver.publisher",
    "slices": "apiserver.slices",
    "inventory": "apiserver.inventory",
    "plan": "claims.plan",
    "calls": "claims.budget",
    "fetch": "claims.fetch",
    "lifecycle": "claims.lifecycle",
    "prepare": "claims.prepare",
    "gc": "claims.reconcile",
    "sandboxes": "nrimode.sandboxes",
    "placing": "nrimode.placing",
}


def new_name(old: str) -> str | None:
    """The current name of a 0.1 module path such as `dradriver.rtnl.wire`, or None."""
    parts = old.split(".")
    if len(parts) < 2 or parts[0] != "dradriver" or parts[1] not in MOVED:
        return None
    return ".".join(["dradriver", MOVED[parts[1]], *parts[2:]])


class _Alias:
    """Hands out the module already imported under its new name (a loader; not derived
    from importlib.abc, whose import costs the driver's start ~15 ms)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The module at its new place."""
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran under its new name): only its own spec, which
        the import system replaced with the alias's, is put back."""
        module.__spec__ = self.spec


class OldPaths:
    """Finds 0.1 module paths and warns that they moved (a meta path finder)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path, pointing at the module's new place; None otherwise."""
        target_name = new_name(fullname)
        if target_name is None:
            return None
        warnings.warn(
            f"{fullname} moved to {target_name}; the old path goes in dra-driver 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        is_package = fullname == "dradriver.rtnl"
        loader: Any = _Alias(target_name)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=is_package)


def install() -> None:
    """Put the finder for old paths on sys.meta_path (once)."""
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())  # before the path finder: no second copy
