"""ttrpc message framing and envelopes (containerd/ttrpc v1.2.7; pure, no I/O).

A ttrpc message is a 10-byte header, the big-endian uint32 data length, the big-endian
uint32 stream ID, one byte message type (1 request, 2 response, 3 data) and one byte of
flags, followed by the data: a `ttrpc.Request` (service, method, payload, timeout_nano)
or a `ttrpc.Response` (status, payload). Clients use odd stream IDs that increase with
every request; data is at most 4 MiB (PROTOCOL.md, channel.go).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import DecodeError

from dradriver.nri.proto import ttrpc_pb2

HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size  # 10
MAX_DATA = 4 << 20
MSG_REQUEST = 0x1
MSG_RESPONSE = 0x2
MSG_DATA = 0x3


class Code(IntEnum):
    """The gRPC status codes ttrpc carries in Response.status.code."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class TtrpcError(Exception):
    """A call failed: a status from the peer, a time-out, or a lost connection."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        try:
            name = Code(code).name
        except ValueError:
            name = f"code {code}"
        super().__init__(f"{name}: {message}")


class TtrpcProtocolError(Exception):
    """The peer broke the ttrpc framing; the connection cannot be used any more."""


@dataclass(frozen=True)
class Message:
    """One ttrpc message as received; `oversized` ones carry no data (it was discarded)."""

    stream_id: int
    type: int
    flags: int
    data: bytes
    oversized: int = 0  # announced length of a message over MAX_DATA, else 0


def encode_message(stream_id: int, msg_type: int, data: bytes, flags: int = 0) -> bytes:
    """Header plus data of one ttrpc message."""
    if len(data) > MAX_DATA:
        raise TtrpcError(
            Code.RESOURCE_EXHAUSTED, f"message of {len(data)} bytes exceeds {MAX_DATA}"
        )
    return HEADER.pack(len(data), stream_id, msg_type, flags) + data


class MessageReader:
    """Reassembles the byte stream of one logical connection into ttrpc messages.

    A message may arrive split over many frames and reads; one over MAX_DATA is skipped
    without buffering it and reported with `oversized` set, as ttrpc's channel does.
    """

    def __init__(self, max_data: int = MAX_DATA) -> None:
        self._buf = bytearray()
        self._max = max_data
        self._skip = 0

    def feed(self, data: bytes) -> Iterator[Message]:
        """Add bytes of this connection; yield every complete message."""
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data
        while len(self._buf) >= HEADER_LEN:
            length, stream_id, msg_type, flags = HEADER.unpack_from(self._buf)
            if length > self._max:
                dropped = min(length, len(self._buf) - HEADER_LEN)
                self._skip = length - dropped
                del self._buf[: HEADER_LEN + dropped]
                yield Message(stream_id, msg_type, flags, b"", oversized=length)
                if self._skip:
                    return
                continue
            end = HEADER_LEN + length
            if len(self._buf) < end:
                return
            body = bytes(self._buf[HEADER_LEN:end])
            del self._buf[:end]
            yield Message(stream_id, msg_type, flags, body)


def encode_request(service: str, method: str, payload: bytes, timeout: float | None) -> bytes:
    """A serialized ttrpc.Request; `timeout` (seconds) becomes timeout_nano."""
    req = ttrpc_pb2.Request(service=service, method=method, payload=payload)
    if timeout is not None:
        req.timeout_nano = max(1, int(timeout * 1e9))
    return req.SerializeToString()


def decode_request(data: bytes) -> ttrpc_pb2.Request:
    """Parse a ttrpc.Request; TtrpcError(INVALID_ARGUMENT) if it is not one."""
    req = ttrpc_pb2.Request()
    try:
        req.ParseFromString(data)
    except DecodeError as exc:
        raise TtrpcError(Code.INVALID_ARGUMENT, f"unmarshal request error: {exc}") from exc
    return req


def encode_response(payload: bytes = b"", code: int = Code.OK, message: str = "") -> bytes:
    """A serialized ttrpc.Response; the status is always present, as Go's server sends it."""
    resp = ttrpc_pb2.Response(payload=payload)
    resp.status.code = code
    resp.status.message = message
    return resp.SerializeToString()


def decode_response(data: bytes) -> bytes:
    """Payload of a ttrpc.Response; raise TtrpcError for a non-OK status or garbage."""
    resp = ttrpc_pb2.Response()
    try:
        resp.ParseFromString(data)
    except DecodeError as exc:
        raise TtrpcError(Code.INTERNAL, f"unparseable ttrpc response: {exc}") from exc
    if resp.HasField("status") and resp.status.code != Code.OK:
        raise TtrpcError(resp.status.code, resp.status.message)
    return resp.payload
