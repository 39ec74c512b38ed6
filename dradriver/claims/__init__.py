"""Preparing and unpreparing claims: resolution, planning, the call budget, fetching,
the lifecycle of a claim's devices, start-up reconciliation."""

from typing import Any


def __getattr__(name: str) -> Any:
    """0.1's `dradriver.claims` module (claim resolution) at its new place, with a
    DeprecationWarning; removed in 0.3."""
    # By name: a `from` import here would ask this very __getattr__ for the submodule.
    import importlib  # noqa: PLC0415 - only for the names of 0.1
    import warnings  # noqa: PLC0415

    resolution = importlib.import_module("dradriver.claims.resolution")
    if name.startswith("_") or not hasattr(resolution, name):
        raise AttributeError(f"module {__name__} has no attribute {name}")
    warnings.warn(
        f"dradriver.claims.{name} moved to dradriver.claims.resolution.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(resolution, name)
