"""glibc's malloc arenas, capped before the daemon starts any thread."""

from __future__ import annotations

import contextlib
import ctypes
import os

# glibc gives each thread that allocates its own malloc arena (up to 8 per core), each
# keeping freed memory: with ~25 threads that was 1.4 MB more resident after the first
# calls. Two arenas serve a process whose Python code runs one thread at a time anyway.
MALLOC_ARENA_MAX = 2
_M_ARENA_MAX = -8  # mallopt parameter, <malloc.h>


def limit_arenas() -> None:
    """Cap glibc's malloc arenas before any thread starts, unless the operator set
    MALLOC_ARENA_MAX (glibc reads it itself); a C library without mallopt is left alone."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, MALLOC_ARENA_MAX)
