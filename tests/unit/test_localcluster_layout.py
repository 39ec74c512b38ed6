"""localcluster/ is a tool, not a test helper: it never imports from tests/ (tests import
it, never the other way round), and it stays out of the driver's wheel."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "localcluster"
DYNAMIC = {"import_module", "__import__"}  # importlib.import_module("tests..."), __import__


def _is_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def imports_of_tests(source: str, filename: str = "<source>") -> list[str]:
    """Every import of the `tests` package in `source` (anywhere: module level, in a
    function, behind `if TYPE_CHECKING`, or by name through importlib), and every
    relative import reaching above localcluster/, as `line: statement`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if _is_tests(a.name)]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level > 1 or _is_tests(node.module or "") else []
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) else None
            names = [literal] if name in DYNAMIC and isinstance(literal, str) else []
            names = [n for n in names if _is_tests(n)]
        else:
            continue
        if names:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def localcluster_modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def test_the_package_is_there():
    names = {p.name for p in localcluster_modules()}
    assert {"__init__.py", "__main__.py", "controlplane.py", "node.py", "demo.py"} <= names


@pytest.mark.parametrize("path", localcluster_modules(), ids=lambda p: p.name)
def test_localcluster_never_imports_tests(path: Path):
    assert imports_of_tests(path.read_text(), str(path)) == []


@pytest.mark.parametrize(
    "source",
    [
        "import tests",
        "import tests.support.netns as netns",
        "import os, tests.e2e.kube",
        "from tests.support import netns",
        "from tests import support",
        "from ..tests.support import netns",
        "def f():\n    from tests.support.waiting import wait_for\n",
        "if TYPE_CHECKING:\n    from tests.node import scenario\n",
        "import importlib\nimportlib.import_module('tests.support.netns')",
        "__import__('tests')",
    ],
)
def test_the_check_finds_every_kind_of_tests_import(source: str):
    assert len(imports_of_tests(source)) == 1, source


@pytest.mark.parametrize(
    "source",
    [
        "from . import netns",
        "from .apiclient import ApiError",
        "import testsuite",
        "from testing import x",
        "from dradriver.settings import DEFAULT_DRIVER_NAME",
        "importlib.import_module('dradriver')",
        "x = 'tests'",
    ],
)
def test_the_check_lets_everything_else_through(source: str):
    assert imports_of_tests(source) == [], source


def test_localcluster_is_not_in_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not [p for p in setuptools["packages"] if p.split(".")[0] == "localcluster"]
