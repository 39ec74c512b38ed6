"""gRPC's wire format over HTTP/2, as the kubelet's Go client speaks it: status codes,
the length-prefixed message, the `grpc-timeout` header and the status trailers.

Pure: no sockets here (grpcserver.py serves it, grpcclient.py calls with it).
"""

from __future__ import annotations

import enum
import re
from urllib.parse import quote, unquote

MAX_MESSAGE = 4 * 1024 * 1024  # bytes: gRPC's default limit on a received message
CONTENT_TYPE = b"application/grpc"
_PREFIX = 5  # one flag byte (compressed or not), four length bytes (big-endian)
_TIMEOUT = re.compile(rb"([0-9]{1,8})([HMSmun])")
_UNIT_SECONDS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
# grpc-message is percent-encoded: every byte outside printable ASCII, and "%" itself.
_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


class Status(enum.IntEnum):
    """gRPC status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class RpcError(Exception):
    """A call that ended with a status other than OK."""

    def __init__(self, code: Status, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def frame(message: bytes) -> bytes:
    """One uncompressed message with its length prefix."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class MessageReader:
    """Splits a stream's DATA into whole messages, refusing compressed or oversized ones."""

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """The messages completed by `data` (raises RpcError on one it cannot take)."""
        self._buffer += data
        out = []
        while len(self._buffer) >= _PREFIX:
            if self._buffer[0] != 0:
                raise RpcError(Status.UNIMPLEMENTED, "compressed messages are not accepted")
            size = int.from_bytes(self._buffer[1:_PREFIX], "big")
            if size > self._limit:
                raise RpcError(
                    Status.RESOURCE_EXHAUSTED,
                    f"message of {size} bytes is larger than the limit of {self._limit}",
                )
            if len(self._buffer) < _PREFIX + size:
                break
            out.append(bytes(self._buffer[_PREFIX : _PREFIX + size]))
            del self._buffer[: _PREFIX + size]
        return out

    @property
    def pending(self) -> bool:
        """Whether part of a message is still missing."""
        return bool(self._buffer)


def parse_timeout(value: bytes) -> float:
    """Seconds of a `grpc-timeout` header value (raises RpcError if it is malformed)."""
    match = _TIMEOUT.fullmatch(value)
    if match is None:
        raise RpcError(Status.INTERNAL, f"malformed grpc-timeout {value!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def format_timeout(seconds: float) -> bytes:
    """A `grpc-timeout` header value for `seconds` (in milliseconds, at least one)."""
    return b"%dm" % min(max(1, round(seconds * 1000)), 99_999_999)


def status_headers(code: Status, details: str) -> list[tuple[bytes, bytes]]:
    """The trailers that end a call."""
    out = [(b"grpc-status", b"%d" % code)]
    if details:
        out.append((b"grpc-message", quote(details, safe=_MESSAGE_SAFE).encode()))
    return out


def read_status(headers: dict[bytes, bytes]) -> tuple[Status, str]:
    """The status and message a call ended with, from its trailers."""
    raw = headers.get(b"grpc-status")
    if raw is None:
        return Status.UNKNOWN, "the call ended without a grpc-status"
    try:
        code = Status(int(raw))
    except ValueError:
        return Status.UNKNOWN, f"unknown grpc-status {raw!r}"
    return code, unquote(headers.get(b"grpc-message", b"").decode("utf-8", "replace"))
