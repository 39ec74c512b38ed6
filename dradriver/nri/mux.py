"""NRI's connection multiplexer: logical connections over one unix socket (pure, no I/O).

Wire format (containerd/nri v0.11.0, pkg/net/multiplex/mux.go): every frame is an
8-byte header, the big-endian uint32 connection ID and the big-endian uint32 payload
length, followed by the payload. Logical connections need no set-up: each side simply
uses an agreed ID. The plugin serves its Plugin service on connection 1 and calls the
runtime's Runtime service on connection 2 (pkg/net/multiplex/ttrpc.go); ID 0 is
reserved. Frames for a connection nobody opened are dropped, as upstream does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

HEADER = struct.Struct(">II")
HEADER_LEN = HEADER.size  # 8
PLUGIN_SERVICE_CONN = 1  # the runtime calls the plugin here
RUNTIME_SERVICE_CONN = 2  # the plugin calls the runtime here
RESERVED_CONN = 0
# Largest payload upstream writes in one frame: a whole ttrpc message (10-byte header
# plus at most 4 MiB). A longer frame can only come from a broken or hostile peer.
MAX_PAYLOAD = 10 + (4 << 20)
# Largest frame payload this side writes. The runtime reads each logical connection
# through a 4096-byte bufio.Reader, and the mux hands a whole frame to one Read call or
# fails it with ENOMEM when the caller's buffer is smaller; so frames stay within 4096
# bytes and never mix two ttrpc messages, like the frames Go's own ttrpc writer produces.
MAX_WRITE_PAYLOAD = 4096


class MuxError(Exception):
    """The byte stream on the NRI socket is not valid multiplexer framing."""


def encode_frames(conn_id: int, data: bytes, max_payload: int = MAX_WRITE_PAYLOAD) -> bytes:
    """Frame `data` for logical connection `conn_id`, split into payloads of <= max_payload."""
    if not 0 < conn_id <= 0xFFFFFFFF:
        raise MuxError(f"connection ID {conn_id} is reserved or out of range")
    if max_payload <= 0:
        raise MuxError(f"frame payload limit {max_payload} must be positive")
    out = bytearray()
    for start in range(0, len(data), max_payload):
        chunk = data[start : start + max_payload]
        out += HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class FrameDecoder:
    """Turns the bytes read from the socket, in pieces of any size, into frames."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self._buf = bytearray()
        self._max = max_payload

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Add received bytes; yield each complete (connection ID, payload) in order.

        Raises MuxError on a frame longer than the limit; the stream cannot be trusted
        after that, so the caller drops the connection.
        """
        self._buf += data
        while len(self._buf) >= HEADER_LEN:
            conn_id, length = HEADER.unpack_from(self._buf)
            if length > self._max:
                raise MuxError(
                    f"frame for connection {conn_id} announces {length} bytes, "
                    f"more than the {self._max} the NRI multiplexer allows"
                )
            end = HEADER_LEN + length
            if len(self._buf) < end:
                return
            payload = bytes(self._buf[HEADER_LEN:end])
            del self._buf[:end]
            yield conn_id, payload
