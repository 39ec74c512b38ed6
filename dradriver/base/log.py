"""Structured logging: one line per event, `key=value` pairs, the claim UID as `claim=`."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    """Render `ts=... level=... logger=... msg=... k=v` from a record and its extras."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        parts += [f"{k}={_quote(v)}" for k, v in record.__dict__.items() if k not in _RESERVED]
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def setup(level: str = "info") -> None:
    """Send every driver log line to stderr in key=value form."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    """Log `msg` with structured fields (e.g. claim=<uid>) at `level`."""
    if logger.isEnabledFor(level):
        extra = {(k + "_" if k in _RESERVED else k): v for k, v in fields.items()}
        logger.log(level, msg, extra=extra, stacklevel=2)
