"""Entry points read from the installed metadata (dradriver/contract/entrypoints.py),
against importlib.metadata, the reference, on this interpreter's path and on made-up
distributions."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from dradriver.contract import entrypoints


def _reference(group: str, path: list[str]) -> list[tuple[str, str, str, str]]:
    dists = metadata.distributions(path=path)
    seen: set[str] = set()
    out = []
    for dist in dists:
        key = entrypoints._normalize(dist.name)
        if key in seen:
            continue
        seen.add(key)
        out += [
            (e.name, e.value, dist.name, dist.version)
            for e in dist.entry_points
            if e.group == group
        ]
    return sorted(out)


def _ours(group: str, path: list[str]) -> list[tuple[str, str, str, str]]:
    return sorted((e.name, e.value, *e.dist) for e in entrypoints.entry_points(group, path))


@pytest.mark.parametrize("group", ["dradriver.handlers", "console_scripts", "pytest11"])
def test_the_interpreters_entry_points_match_importlib_metadata(group: str) -> None:
    path = [p for p in sys.path if Path(p or ".").is_dir()]
    assert _ours(group, path) == _reference(group, path)
    assert _ours(group, path)


def _dist(site: Path, folder: str, meta: str, entry_points: str) -> None:
    info = site / folder
    info.mkdir(parents=True)
    (info / ("PKG-INFO" if folder.endswith(".egg-info") else "METADATA")).write_text(meta)
    (info / "entry_points.txt").write_text(entry_points)


def test_made_up_distributions_first_on_the_path_win(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    group = "[dradriver.handlers]\n# a comment\nwidgets = widget.plugin:Plugin.hooks [extra]\n"
    _dist(
        first,
        "Widget_Plugin-2.0.dist-info",
        "Name: Widget-Plugin\nVersion: 2.0\n\nbody",
        group + "\n[other]\nx = y\n",
    )
    _dist(second, "widget.plugin-1.0.dist-info", "Name: widget.plugin\nVersion: 1.0\n", group)
    _dist(
        second,
        "eggy.egg-info",
        "Metadata-Version: 1.0\nName: eggy\nVersion: 3\n",
        "[dradriver.handlers]\n  eggs = eggy  \n",
    )
    path = [str(first), str(second), str(tmp_path / "absent")]
    got = _ours("dradriver.handlers", path)
    assert got == _reference("dradriver.handlers", path)
    assert got == [
        ("eggs", "eggy", "eggy", "3"),
        ("widgets", "widget.plugin:Plugin.hooks [extra]", "Widget-Plugin", "2.0"),
    ]


def test_a_value_is_loaded_as_importlib_metadata_loads_it() -> None:
    ep = entrypoints.EntryPoint("x", "os.path:join", Path("d-1.dist-info"))
    assert ep.load() is __import__("os").path.join
    assert entrypoints.EntryPoint("x", "json", Path("d-1.dist-info")).load() is __import__("json")
    with pytest.raises(ValueError, match="malformed"):
        entrypoints.EntryPoint("x", "not a value!", Path("d-1.dist-info")).load()
