"""Schema patterns in the one dialect Python's `re` and RE2 (CEL's `matches`) read alike.

The driver checks opaque config with Python; the admission policy checks the same
schema with CEL, whose regular expressions are RE2. The two agree on plain regular
expressions but differ at the edges, so a schema pattern must keep to their common part:

* `$` is the end of the string (as in JSON Schema's ECMA-262 and in RE2); Python's `$`
  also matches before a trailing newline, so `search` reads it as `\\Z`;
* classes are ASCII (`\\d`, `\\w`, `\\s`, `\\b` as in RE2): `search` compiles with re.ASCII;
* no lookaround, backreferences, possessive or atomic groups, comments, `\\Z`/`\\z`,
  `\\p{...}`, `\\u`, POSIX classes, `{,n}` or multi-line mode: `problems` names each one.
"""

from __future__ import annotations

import re
from functools import cache

# Escapes both engines read alike (besides escaped punctuation).
_COMMON_ESCAPES = set("dDwWsSbBAfnrtv")
_PUNCTUATION = set("\\.^$|?*+()[]{}-/:'\"!#%&,;<=>@`~ _")
_FLAGS = re.compile(r"\(\?[is]+(?:-[is]*)?[:)]")


def problems(pattern: str) -> list[str]:
    """What in `pattern` RE2 and Python's re would read differently (empty: nothing)."""
    found: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not nxt:
                found.append("a trailing backslash")
            elif nxt == "x" and re.match(r"[0-9A-Fa-f]{2}", pattern[i + 2 : i + 4]):
                i += 2
            elif nxt not in _COMMON_ESCAPES and nxt not in _PUNCTUATION:
                found.append(f"the escape \\{nxt}")
            i += 2
            continue
        if in_class:
            if pattern.startswith("[:", i):
                found.append("a POSIX class [:...:]")
            elif ch == "]":
                in_class = False
            i += 1
            continue
        if ch == "[":
            in_class = True
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # a leading ] is a literal
                i += 1
            continue
        if pattern.startswith("(?", i):
            if pattern.startswith(("(?:", "(?P<"), i) or _FLAGS.match(pattern, i):
                i += 2
                continue
            found.append(f"the group {pattern[i : i + 4]}... (lookaround, comment or flag)")
        elif ch in "*+?}" and pattern[i + 1 : i + 2] == "+":
            found.append(f"the possessive quantifier {ch}+")
        elif pattern.startswith("{,", i):
            found.append("the quantifier {,n} (write {0,n})")
        i += 1
    if in_class:
        found.append("an unterminated character class")
    return found


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_end_of_string(pattern), re.ASCII)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text`, `$` being the end of the string."""
    return _compiled(pattern).search(text) is not None


def _end_of_string(pattern: str) -> str:
    """`pattern` with each `$` outside a class and not escaped replaced by `\\Z`."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            lead = 2 if pattern.startswith("^", i + 1) else 1
            if pattern.startswith("]", i + lead):
                lead += 1
            out.append(pattern[i : i + lead])
            i += lead
            continue
        elif ch == "$":
            ch = r"\Z"
        out.append(ch)
        i += 1
    return "".join(out)
