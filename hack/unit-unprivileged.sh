#!/usr/bin/env bash
# `make unit` as an unprivileged user (nobody), to prove it needs no root: the tracked
# files copied to a world-readable directory, a virtual environment there from the
# system's python3 (a Python installed under /root is not readable by nobody), then
# `make unit` run as nobody. Needs root to switch users; removes everything it made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "$(id -u)" = 0 ] || { echo "unit-unprivileged: run as root (it switches to nobody)" >&2; exit 1; }
python=${UNPRIVILEGED_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || { echo "unit-unprivileged: $python missing (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
work=$(mktemp -d /tmp/dra-unit.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
# Tracked and new (not ignored) files: what a clone would hold, plus uncommitted work.
# (a tracked file deleted in the work tree is skipped, with tar's warning)
git ls-files -z --cached --others --exclude-standard \
    | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C "$work"
cp -a .git "$work/.git"  # the record-format tests read older releases from history
"$python" -m venv "$work/.venv"
"$work/.venv/bin/pip" install --quiet --disable-pip-version-check -e "$work[test]"
chmod -R a+rX "$work"
start=$(date +%s)
runuser -u nobody -- env HOME="$work" make -C "$work" unit PYTHON="$work/.venv/bin/python"
echo "make unit as nobody ($(id -u nobody)): passed in $(( $(date +%s) - start ))s"
