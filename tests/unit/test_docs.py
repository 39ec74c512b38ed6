"""The prose stays true to the repository: README.md and docs/*.md link only to files and
headings that exist, name only `make` targets the Makefile has and only repository paths
that exist, and README.md stays short. Each check is also run on a synthetic text that
breaks it, so none of them can pass by finding nothing."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "design.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 16 * 1024  # bytes; the README gets a newcomer running, the rest is in docs/

# Targets that land in parallel (issue 19: `make unit`). Until the Makefile has one, the
# docs may name it; once it is there it is checked like any other.
LANDING_TARGETS = {"unit"}
# Top-level folders whose paths are checked. `localcluster/` lands in parallel (issue 19):
# its paths are checked only once the folder exists.
TOP_DIRS = {"dradriver", "handlers", "tests", "hack", "deploy", "bench", "kind-node", "docs"}
LANDING_DIRS = {"localcluster"}
TOP_FILES = {
    "Makefile",
    "Dockerfile",
    "pyproject.toml",
    "kind-config.yaml",
    "README.md",
    "design.md",
}
# Bare file names (no folder) with these endings must exist somewhere in the repository.
BARE_SUFFIXES = (".py", ".sh")
SKIP_DIRS = {".git", ".venv", ".cache", "node_modules", "__pycache__"}

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
MAKE = re.compile(r"(?<![\w/.-])make\s+(?:[A-Z_][A-Z0-9_]*=\S*\s+)*([a-z][a-z0-9_-]*)")


def _split(text: str) -> tuple[str, list[str]]:
    """The prose of a markdown text (code blocks blanked out) and its code blocks."""
    prose: list[str] = []
    blocks: list[str] = []
    block: list[str] = []
    inside = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if inside:
                blocks.append("\n".join(block))
                block = []
            inside = not inside
            prose.append("")
        elif inside:
            block.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (letters,
    digits, `_`, `-` and spaces kept), spaces become `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a markdown text's headings give, duplicates numbered as GitHub does."""
    prose, _ = _split(text)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose.splitlines():
        m = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(text: str, where: Path) -> Iterator[str]:
    """Relative links of `text` (a file at `where`) whose file or heading does not exist."""
    prose, _ = _split(text)
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        path = (where.parent / file_part).resolve() if file_part else where
        if not path.exists():
            yield f"{where.name}: {target}: no such file"
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            yield f"{where.name}: {target}: no such heading in {path.name}"


def makefile_targets(makefile: str) -> set[str]:
    """The targets a Makefile defines (rules, not variable assignments)."""
    out: set[str] = set()
    for line in makefile.splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?![:=])", line)
        if m:
            out.update(m.group(1).split())
    return out


def make_targets(text: str) -> set[str]:
    """The targets of every `make ...` in code: inline code spans and code blocks."""
    prose, blocks = _split(text)
    code = [m.group(2) for m in SPAN.finditer(prose)] + blocks
    return {m.group(1) for piece in code for m in MAKE.finditer(piece)}


def unknown_targets(text: str, targets: set[str]) -> set[str]:
    """The `make` targets `text` names that `targets` lacks (landing ones excepted)."""
    return {t for t in make_targets(text) if t not in targets and t not in LANDING_TARGETS}


def _repo_names(root: Path) -> set[str]:
    """The names of every file and folder of the repository (caches and venvs aside)."""
    names = set()
    for path in root.rglob("*"):
        if not SKIP_DIRS.intersection(path.relative_to(root).parts):
            names.add(path.name)
    return names


def path_like(span: str) -> bool:
    """Whether a code span is one path (not a command, a pattern or a placeholder)."""
    return bool(re.fullmatch(r"[\w.@/+-]+", span)) and "..." not in span


def ignored(span: str, root: Path) -> bool:
    """Whether `.gitignore` names the path: an output (`bench/results.json`), not a file
    of the repository."""
    gitignore = root / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.exists() else []
    patterns = [p.strip().rstrip("/") for p in lines if p.strip() and not p.startswith("#")]
    return any(fnmatch(span, p) or span.startswith(p + "/") for p in patterns)


def missing_paths(text: str, root: Path, names: set[str]) -> Iterator[str]:
    """Repository paths in `text`'s code spans that do not exist under `root`.

    Checked: paths under a top-level folder or file of the repository
    (`dradriver/claims/prepare.py`, `deploy/helm/dra-driver`, `Makefile`), paths relative
    to `dradriver/` (`claims/budget.py`, as the docs name modules by layer), and bare
    names of source files (`budget.py`), which must exist somewhere in the repository."""
    prose, _ = _split(text)
    layers = {p.name for p in (root / "dradriver").iterdir() if p.is_dir()}
    for m in SPAN.finditer(prose):
        span = m.group(2).strip()
        if not path_like(span):
            continue
        first = span.split("/")[0]
        if "/" in span or span in TOP_FILES:
            if first in LANDING_DIRS and not (root / first).exists():
                continue  # lands in parallel: checked once the folder exists
            if first in TOP_DIRS | LANDING_DIRS or span in TOP_FILES:
                if not (root / span).exists() and not ignored(span, root):
                    yield span
            elif first in layers and not (root / "dradriver" / span).exists():
                yield span
        elif Path(span).suffix in BARE_SUFFIXES and span not in names:
            yield span


@pytest.fixture(scope="module")
def repo_names() -> set[str]:
    return _repo_names(ROOT)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link goes to a file that exists, and its #anchor to a heading of it."""
    assert list(broken_links(doc.read_text(), doc)) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_make_targets_exist(doc: Path) -> None:
    """Every `make <target>` the docs name is a target of the Makefile."""
    targets = makefile_targets((ROOT / "Makefile").read_text())
    assert unknown_targets(doc.read_text(), targets) == set()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_exist(doc: Path, repo_names: set[str]) -> None:
    """Every repository path and source file named in a code span exists."""
    assert list(missing_paths(doc.read_text(), ROOT, repo_names)) == []


def test_readme_stays_short() -> None:
    """README.md gets a newcomer running; everything else belongs in docs/."""
    assert len((ROOT / "README.md").read_bytes()) < README_LIMIT


def test_every_page_is_in_the_index() -> None:
    """docs/README.md links every page of docs/, and README.md links docs/README.md's pages."""
    index = (ROOT / "docs" / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= set(LINK.findall(index))
    assert {f"docs/{p}" for p in pages} <= set(LINK.findall(readme))


# Self-tests: each check fails on a text that breaks it.


def test_slugs_follow_github() -> None:
    """Headings become GitHub's anchors, duplicates numbered."""
    assert slug("Where a call's time goes") == "where-a-calls-time-goes"
    assert (
        slug("The NRI protocol layer (`dradriver/nri/`)") == "the-nri-protocol-layer-dradrivernri"
    )
    assert slug("Claim addresses: no claim changes how the node routes") == (
        "claim-addresses-no-claim-changes-how-the-node-routes"
    )
    assert anchors("# A\n\n## A\n\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_broken_links_are_found(tmp_path: Path) -> None:
    """A missing file, a missing heading and a missing same-page heading are reported;
    good links, external links and links inside code blocks are not."""
    (tmp_path / "other.md").write_text("# Other\n\n## Some heading\n")
    doc = tmp_path / "doc.md"
    text = (
        "# Doc\n\n[ok](other.md) [ok](other.md#some-heading) [ok](#doc) "
        "[ext](https://example.com/x#y)\n"
        "[bad](gone.md) [bad](other.md#no-such) [bad](#nowhere)\n"
        "```\n[in code](gone-too.md)\n```\n"
    )
    doc.write_text(text)
    assert sorted(broken_links(text, doc)) == [
        "doc.md: #nowhere: no such heading in doc.md",
        "doc.md: gone.md: no such file",
        "doc.md: other.md#no-such: no such heading in other.md",
    ]


def test_unknown_make_targets_are_found() -> None:
    """Targets in code spans and code blocks are checked against the Makefile's rules;
    variable assignments before the target are skipped."""
    targets = makefile_targets("X ?= 1\ntest: ## t\n\t@true\nall e2e: test\nY := $(X)\n")
    assert targets == {"test", "all", "e2e"}
    text = (
        "Run `make test`, `DRA_X=1 make e2e` and `make FOO=1 nosuch`.\n"
        "```sh\nmake all\nmake gone   # comment\n```\n"
        "`make unit` lands in parallel.\n"
    )
    assert unknown_targets(text, targets) == {"nosuch", "gone"}


def test_missing_paths_are_found(tmp_path: Path) -> None:
    """Stale paths under a top-level folder, relative to dradriver/, and bare source file
    names are reported; commands, placeholders and paths that exist are not."""
    (tmp_path / "dradriver" / "claims").mkdir(parents=True)
    (tmp_path / "dradriver" / "claims" / "budget.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "Makefile").write_text("")
    (tmp_path / ".gitignore").write_text("# outputs\nbench/results.json\n.cache/\n")
    names = _repo_names(tmp_path)
    text = (
        "`dradriver/claims/budget.py` `claims/budget.py` `budget.py` `Makefile` "
        "`tests/` `<state-dir>/by-pod` `make test` `/etc/cdi` `deploy/...` `.py` "
        "`bench/results.json`\n"
        "`dradriver/claims/calls.py` `claims/gc.py` `phases.py` `tests/gone.py` "
        "`localcluster/demo.py`\n"
    )
    assert sorted(missing_paths(text, tmp_path, names)) == [
        "claims/gc.py",
        "dradriver/claims/calls.py",
        "phases.py",
        "tests/gone.py",
    ]
    (tmp_path / "localcluster").mkdir()  # once it exists, its paths are checked
    assert list(missing_paths("`localcluster/demo.py`", tmp_path, names)) == [
        "localcluster/demo.py"
    ]
