"""Records on one state directory shared with older releases, as in a rolling update.

The older instances are the real code of the last releases that wrote record formats 1
and 2 (their `dradriver/` from this repository's history, run in a subprocess): they read
what this release writes and answer the kubelet the same, and this release reads what
they write back and can still unprepare the claim, down to the kernel (the in-memory one
of tests/support/statenode.py).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dradriver.contract.hookspecs import CDI, NRI
from tests.support.statenode import (
    KINDS,
    UID,
    Node,
    add_claim,
    prepare_one,
    unprepare_one,
)

ROOT = Path(__file__).resolve().parents[2]
RELEASES = {
    # The last commit before each format change: the driver whose records it describes.
    1: "0aba416610207425284b43b1a441998468f7eeff",  # then a87484a: format 2
    2: "2d555f864d53a4c1e6eba690579c115f04c82e6f",  # then 066d988: format 3 (NRI mode)
}

# Run with an older release's dradriver first on the path: load every record of a state
# directory, answer as for an idempotent prepare, optionally write each one back.
OLD_INSTANCE = """
import json, sys
from pathlib import Path
from dradriver import records  # the older release: its module layout
store = records.RecordStore(Path(sys.argv[1]))
loaded, problems = store.load_all()
if sys.argv[2] == "rewrite":
    for record in loaded:
        store.save(record)
answers = {
    r.claim.uid: [a if isinstance(a, dict) else a.to_json() for a in r.answer()]
    for r in loaded
}
print(json.dumps({"problems": problems, "answers": answers}))
"""


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Each older release's `dradriver` package, extracted from git."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this repository's history: older releases come from it")
    out = {}
    for fmt, rev in RELEASES.items():
        archive = subprocess.run(
            ["git", "-c", f"safe.directory={ROOT}", "-C", str(ROOT), "archive", rev, "dradriver"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:  # a shallow clone lacks the commit
            pytest.skip(f"commit {rev} (record format {fmt}) is not in this clone")
        target = tmp_path_factory.mktemp(f"format{fmt}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+; Debian 12's 3.11.2 lacks it
                tar.extractall(target, filter="data")
            else:  # our own history from git archive: plain files under dradriver/
                tar.extractall(target)
        out[fmt] = target
    return out


def _old_instance(release: Path, state_dir: Path, rewrite: bool = False) -> dict[str, Any]:
    """What an older release makes of `state_dir` (in a copy unless `rewrite`)."""
    res = subprocess.run(
        [sys.executable, "-c", OLD_INSTANCE, str(state_dir), "rewrite" if rewrite else "read"],
        cwd=release,  # its dradriver comes first, before the installed one
        env={"PYTHONPATH": str(release), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def _prepared(node: Node, kind: str, injection: str) -> list[dict[str, Any]]:
    add_claim(node, kind)
    preparer = node.preparer()
    preparer.injection = injection
    outcome = prepare_one(preparer)
    assert outcome.error is None, outcome.error
    return [d.to_json() for d in outcome.devices]


@pytest.mark.parametrize("injection", [CDI, NRI])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("fmt", sorted(RELEASES))
def test_an_older_release_reads_what_this_one_writes(node, releases, fmt, kind, injection):
    answer = _prepared(node, kind, injection)
    record = (node.state_dir / f"{UID}.alloc.json").read_bytes()
    seen = _old_instance(releases[fmt], node.state_dir)
    assert seen == {"problems": [], "answers": {UID: answer}}
    assert (node.state_dir / f"{UID}.alloc.json").read_bytes() == record  # only read


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("fmt", sorted(RELEASES))
def test_this_release_unprepares_what_an_older_one_wrote_back(node, releases, fmt, kind):
    before = node.links()
    answer = _prepared(node, kind, CDI)
    seen = _old_instance(releases[fmt], node.state_dir, rewrite=True)
    assert seen == {"problems": [], "answers": {UID: answer}}
    written = json.loads((node.state_dir / f"{UID}.alloc.json").read_text())
    assert written.get("writer", 1) == fmt  # the older release's own write
    restarted = node.start()  # reconciliation reads it as this release does at start
    assert prepare_one(restarted).devices == prepare_one(node.preparer()).devices
    assert [d.to_json() for d in prepare_one(restarted).devices] == answer
    assert unprepare_one(restarted).error is None
    assert node.links() == before and node.files() == []


def test_a_record_of_this_release_survives_an_older_one_writing_it_back(node, releases):
    """Format 2 keeps the fields it does not know (format 1 predates that rule): a
    record of this release written back by it still has its NRI mode fields."""
    _prepared(node, "veth", NRI)
    path = node.state_dir / f"{UID}.alloc.json"
    mine = json.loads(path.read_text())
    _old_instance(releases[2], node.state_dir, rewrite=True)
    theirs = json.loads(path.read_text())
    assert theirs["writer"] == 2
    for field in ("injection", "moves", "placement", "bootId", "specs"):
        assert theirs.get(field) == mine.get(field), field
