"""A Dockerfile parser and a few hadolint-style rules (used beside hadolint, or instead).

Each rule takes a parsed Dockerfile and returns its problems as strings.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

COMPILERS = {
    "gcc",
    "g++",
    "cpp",
    "clang",
    "build-essential",
    "make",
    "cmake",
    "golang",
    "golang-go",
    "rustc",
    "cargo",
    "libc6-dev",
    "python3-dev",
    "python-dev",
    "musl-dev",
    "gfortran",
}


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    image: str  # as written
    resolved: str  # ARG defaults substituted
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue  # comments (also inside continuations) and blank lines
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        out.append((start, " ".join(b for b in buf if b)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def _substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(
        r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: values.get(m.group(1), m.group(0)), text
    )


def parse(path: Path) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in _logical_lines(path.read_text()):
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            image = words[0]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, _substitute(image, global_args), name, line))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"{path}:{line}: {keyword} before FROM")
            key, _, default = args.partition("=")
            global_args[key.strip()] = default.strip().strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, args, line))
    if not stages:
        raise ValueError(f"{path}: no FROM")
    return Dockerfile(path, global_args, stages)


def _runs(stage: Stage) -> list[Instruction]:
    return [i for i in stage.instructions if i.keyword == "RUN"]


def _stage_names(df: Dockerfile, before: int) -> set[str]:
    return {s.name for s in df.stages[:before] if s.name} | {str(i) for i in range(before)}


def rule_pinned_base_images(df: Dockerfile) -> list[str]:
    """DL3006/DL3007: every external base image has an explicit tag, not latest."""
    problems = []
    for index, stage in enumerate(df.stages):
        image = stage.resolved
        if image in _stage_names(df, index):
            continue
        if "$" in image:
            problems.append(f"line {stage.line}: unresolved base image {stage.image}")
            continue
        name_tag = image.split("@")[0]
        tag = name_tag.rsplit(":", 1)[1] if ":" in name_tag.split("/")[-1] else ""
        if not tag:
            problems.append(f"line {stage.line}: {image} has no tag")
        elif tag == "latest":
            problems.append(f"line {stage.line}: {image} uses latest")
    return problems


def rule_apt_hygiene(df: Dockerfile) -> list[str]:
    """DL3009/DL3015/DL3014: install with -y --no-install-recommends, update in the same
    RUN, and remove the package lists."""
    problems = []
    for stage in df.stages:
        for run in _runs(stage):
            if not re.search(r"\bapt(-get)? install\b", run.args):
                continue
            where = f"line {run.line}"
            flags = run.args.split()
            if not any(
                f in ("--yes", "--assume-yes") or re.fullmatch(r"-[a-z]*y[a-z]*", f) for f in flags
            ):
                problems.append(f"{where}: apt-get install without -y")
            if "--no-install-recommends" not in run.args:
                problems.append(f"{where}: apt-get install without --no-install-recommends")
            if not re.search(r"\bapt(-get)? update\b", run.args):
                problems.append(f"{where}: apt-get install without update in the same RUN")
            if "rm -rf /var/lib/apt/lists" not in run.args:
                problems.append(f"{where}: apt lists not removed")
    return problems


def _installed_packages(run: Instruction) -> set[str]:
    out: set[str] = set()
    for part in re.split(r"&&|;|\|\|", run.args):
        words = shlex.split(part) if part.strip() else []
        for i, word in enumerate(words):
            if word in ("install", "add") and i and words[i - 1] in ("apt-get", "apt", "apk"):
                out.update(w.split("=")[0] for w in words[i + 1 :] if not w.startswith("-"))
    return out


def rule_final_stage_has_no_compilers(df: Dockerfile) -> list[str]:
    """The image that ships carries no compiler or build toolchain."""
    final = df.final
    problems = []
    if re.match(r"^(docker\.io/)?(library/)?(golang|rust|gcc|buildpack-deps)[:@]", final.resolved):
        problems.append(f"final stage is based on a toolchain image {final.resolved}")
    for run in _runs(final):
        found = _installed_packages(run) & COMPILERS
        if found:
            problems.append(f"line {run.line}: final stage installs {sorted(found)}")
    return problems


def rule_pip_not_editable(df: Dockerfile) -> list[str]:
    """No editable installs (they point into a build context that is not shipped)."""
    problems = []
    for stage in df.stages:
        for run in _runs(stage):
            if re.search(r"\bpip3?\b.*\binstall\b.*(\s-e\s|--editable)", run.args):
                problems.append(f"line {run.line}: editable pip install")
    return problems


def rule_copy_from_known_stage(df: Dockerfile) -> list[str]:
    """DL3022: COPY --from names an earlier stage."""
    problems = []
    for index, stage in enumerate(df.stages):
        for ins in stage.instructions:
            m = re.search(r"--from=(\S+)", ins.args) if ins.keyword == "COPY" else None
            if m and m.group(1) not in _stage_names(df, index):
                problems.append(f"line {ins.line}: COPY --from={m.group(1)}: no such stage")
    return problems


def rule_exec_form_entrypoint(df: Dockerfile) -> list[str]:
    """DL3025: ENTRYPOINT and CMD in JSON form; DL3002: the last USER is not root."""
    problems = []
    for ins in df.final.instructions:
        if ins.keyword in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(ins.args)
            except json.JSONDecodeError:
                value = None
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                problems.append(f"line {ins.line}: {ins.keyword} is not in exec (JSON) form")
    users = [i for i in df.final.instructions if i.keyword == "USER"]
    if users and users[-1].args.split(":")[0] in ("root", "0"):
        problems.append(f"line {users[-1].line}: last USER is root")
    return problems


def rule_pipefail(df: Dockerfile) -> list[str]:
    """DL4006: a RUN with a pipe runs under `set -o pipefail` (SHELL or inline)."""
    problems = []
    for stage in df.stages:
        pipefail = False
        for ins in stage.instructions:
            if ins.keyword == "SHELL":
                pipefail = "pipefail" in ins.args
            piped = ins.keyword == "RUN" and re.search(r"[^|]\|[^|]", ins.args)
            if piped and not pipefail and "pipefail" not in ins.args:
                problems.append(f"line {ins.line}: pipe without pipefail")
    return problems


RULES = (
    rule_pinned_base_images,
    rule_apt_hygiene,
    rule_final_stage_has_no_compilers,
    rule_pip_not_editable,
    rule_copy_from_known_stage,
    rule_exec_form_entrypoint,
    rule_pipefail,
)
