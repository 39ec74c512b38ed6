"""The one atomic file write: temp file in the same directory, fsync, rename, fsync dir.

Errors name the file the caller wanted to write, not the temp file, so an operator reading
"No space left on device: /etc/cdi/x.json" knows which disk and which file.

Per-claim files are named by plain strings (`StrPath`), never built with pathlib on the
hot path: pathlib interns every part of every path it parses (CPython 3.11, 3.12), and
claim UIDs passing through the interpreter's table of interned strings made it resize
once for good, 0.9 MB of resident memory (docs/performance.md, "Resident memory").
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

StrPath = str | os.PathLike[str]


def write_atomic(path: StrPath, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Replace `path` with `data` so a reader sees the old or the new file, never a torn one.

    `durable=False` skips both fsyncs: the file then survives a crash of the process
    (the page cache keeps it) but maybe not of the machine. For journals whose subject
    (kernel objects) would not survive the machine's crash either.
    A missing directory is created (someone may have removed it while we run).
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    directory = directory or "."
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)
        if durable:
            fsync_dir(directory)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from exc


def remove_durably(path: StrPath) -> bool:
    """Delete `path` if present and make the deletion durable; return whether it existed."""
    path = os.fspath(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.dirname(path) or ".")
    return True


def fsync_dir(directory: StrPath) -> None:
    """Flush a directory entry change (create, rename, unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Delete temp files a crash left behind in `directory` (ours start with '.' and '.tmp-').

    Best effort: a read-only or missing directory is not an error here.
    """
    removed = []
    with contextlib.suppress(OSError):
        for tmp in directory.glob(".*.tmp-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed
