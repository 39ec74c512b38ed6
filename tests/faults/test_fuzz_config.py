"""Hostile configs through `dra-driver validate-config`: its main function in-process (many
examples) and the installed command in a subprocess (a few).

Invariants: the exit status is 0 or 1, never a traceback; on 1 every line of stderr is
`<file>: <JSON path>: <reason>`; every field the oracle (tests/faults/fuzzing.py) knows
to be bad is named; a config built only from known-good values is accepted.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dradriver import cli
from tests.faults.fuzzing import JSON_PATH, Case, fuzz, netdev_case, tally

LINE = re.compile(rf"^(?P<file>[^\n]*?): (?P<path>{JSON_PATH}): \S")


def to_json(value: Any) -> str:
    """JSON text of `value` without recursion (json.dumps stops near 1,000 levels)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            parts: list[Any] = [_Raw("{")]
            for i, (key, child) in enumerate(item.items()):
                parts += [_Raw(("," if i else "") + json.dumps(key) + ":"), child]
            stack.extend(reversed([*parts, _Raw("}")]))
        elif isinstance(item, list):
            parts = [_Raw("[")]
            for i, child in enumerate(item):
                parts += [_Raw("," if i else ""), child]
            stack.extend(reversed([*parts, _Raw("]")]))
        else:
            out.append(json.dumps(item))
    return "".join(out)


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text


def validate_in_process(text: str | bytes) -> tuple[int, str, str]:
    """`dra-driver validate-config FILE` through cli.main: (status, stdout, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        out, err = io.StringIO(), io.StringIO()
        sigpipe = signal.getsignal(signal.SIGPIPE)  # main() resets it, as a CLI filter should
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cli.main(["validate-config", str(path)])
        finally:
            signal.signal(signal.SIGPIPE, sigpipe)
        return tuple(  # type: ignore[return-value]
            [status, *(v.getvalue().replace(str(path), "FILE") for v in (out, err))]
        )


def validate_subprocess(text: str) -> tuple[int, str, str]:
    """The installed command, as a user runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.json"
        path.write_text(text)
        res = subprocess.run(
            [sys.executable, "-m", "dradriver", "validate-config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return res.returncode, *(v.replace(str(path), "FILE") for v in (res.stdout, res.stderr))


def check(case: Case, status: int, out: str, err: str) -> None:
    """The invariants of the module docstring."""
    assert status in (0, 1), (status, err)
    assert "Traceback" not in err + out and "internal error" not in err, err
    lines = err.splitlines()
    if status == 0:
        assert err == "" and out.startswith("FILE: valid ("), (out, err)
    else:
        assert lines, "refused without saying why"
        for line in lines:
            match = LINE.match(line)
            assert match and match["file"] == "FILE", f"no JSON path: {line!r}"
    paths = {m["path"] for m in map(LINE.match, lines) if m}
    tally(
        f"status {status}"
        + (" (known bad)" if case.form else " (known good)" if case.exact else "")
    )
    if case.form:
        assert status == 1, f"accepted although {sorted(case.form)} are bad: {case.parameters!r}"
        assert case.form <= paths, f"{sorted(case.form - paths)} not named in:\n{err}"
    elif case.deep:
        assert status == 1 and any(p == "$" or p.startswith(case.deep) for p in paths), err
    elif case.exact:
        assert status == 0, f"a good config was refused: {case.parameters!r}\n{err}"


@fuzz(400)
@given(netdev_case())
def test_validate_config_names_every_bad_field_and_never_crashes(case):
    check(case, *validate_in_process(to_json(case.parameters)))


@fuzz(12, share=40)
@given(netdev_case())
def test_the_installed_command_behaves_the_same(case):
    check(case, *validate_subprocess(to_json(case.parameters)))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "null",
        '"netdev"',
        "{type: netdev, netdev: {kind: veth, 1: x}}",
        "{type: netdev, netdev: {kind: veth, mtu: .nan}}",
        "{type: netdev, netdev: {kind: veth, mtu: .inf}}",
        "{type: netdev, netdev: {kind: veth, mtu: " + "9" * 5000 + "}}",
        "{type: netdev, netdev: {kind: veth, mtu: 2001-12-14}}",
        "{type: netdev, netdev: {kind: veth, interfaceName: !!binary aGVsbG8=}}",
        "{type: netdev, netdev: !!python/object:os.system {}}",
        "{type: netdev, netdev: {kind: veth}, netdev: {kind: tap}}",
        "[" * 5000 + "]" * 5000,
        "{a: " * 3000 + "x" + "}" * 3000,
        # a billion laughs: aliases make a small file a huge object
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
            for p, c in zip("abcdefg", "bcdefgh", strict=True)
        )
        + "type: netdev\nnetdev: {kind: veth, x: *h}\n",
        b"\xff\xfe not utf-8",
        "{type: netdev, netdev: {kind: veth, interfaceName: 'eth1\n'}}",
        "\t{",
    ],
    ids=lambda t: repr(t[:30]),
)
def test_hostile_files_get_an_answer_never_a_traceback(text):
    status, _, err = validate_in_process(text)
    assert status in (0, 1) and "Traceback" not in err
    if status == 1:
        assert all(LINE.match(line) for line in err.splitlines()), err


def test_the_oracle_is_not_vacuous():
    """Known-bad cases are refused and known-good ones accepted by the same check."""
    bad = Case({"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "eth1\n"}})
    bad.form.add("$.netdev.interfaceName")
    check(bad, *validate_in_process(to_json(bad.parameters)))
    good = Case({"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["192.0.2.7/24"]}})
    check(good, *validate_in_process(to_json(good.parameters)))
    with pytest.raises(AssertionError, match="accepted although"):
        wrong = Case(good.parameters, form={"$.netdev.ipAddresses[0]"})
        check(wrong, *validate_in_process(to_json(good.parameters)))


@given(st.data())
@fuzz(30, share=100)
def test_json_round_trips_through_the_iterative_writer(data):
    from tests.faults.fuzzing import JSON

    value = data.draw(JSON)
    assert json.loads(to_json(value)) == value
