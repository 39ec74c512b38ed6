"""The NRI multiplexer framing, against byte vectors derived from nri v0.11.0 mux.go.

mux.go writes, per frame: binary.BigEndian.PutUint32(hdr[0:4], uint32(id)),
binary.BigEndian.PutUint32(hdr[4:8], uint32(size)), then the payload. So conn 1 with
payload "abc" is 00000001 (ID) 00000003 (length) 616263 ("abc" in ASCII).
"""

import pytest

from dradriver.nri.mux import (
    MAX_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    FrameDecoder,
    MuxError,
    encode_frames,
)

ABC_ON_1 = bytes.fromhex("00000001 00000003 616263")
EMPTY_ON_2 = bytes.fromhex("00000002 00000000")
# ID 0xdeadbeef, length 1, payload 0xff: both fields big-endian.
FF_ON_DEADBEEF = bytes.fromhex("deadbeef 00000001 ff")


def test_connection_ids_are_upstreams():
    # multiplex/ttrpc.go: PluginServiceConn ConnID = iota + 1; RuntimeServiceConn (next).
    assert (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN) == (1, 2)
    # mux.go: maxPayloadSize = ttrpcMessageHeaderLength (10) + ttrpcMessageLengthMax (4 << 20)
    assert MAX_PAYLOAD == 10 + 4 * 1024 * 1024


def test_encode_matches_hand_derived_vector():
    assert encode_frames(1, b"abc") == ABC_ON_1
    assert encode_frames(0xDEADBEEF, b"\xff") == FF_ON_DEADBEEF


def test_encode_splits_long_messages_into_bounded_frames():
    data = bytes(range(256)) * 40  # 10240 bytes -> 4096 + 4096 + 2048
    out = encode_frames(2, data)
    frames = list(FrameDecoder().feed(out))
    assert [len(p) for _, p in frames] == [4096, 4096, 2048]
    assert {c for c, _ in frames} == {2}
    assert b"".join(p for _, p in frames) == data
    assert out[:8] == bytes.fromhex("00000002 00001000")  # 4096 = 0x1000


def test_encode_refuses_the_reserved_connection():
    with pytest.raises(MuxError, match="reserved"):
        encode_frames(0, b"x")


def test_decode_hand_derived_vectors():
    dec = FrameDecoder()
    assert list(dec.feed(ABC_ON_1 + EMPTY_ON_2 + FF_ON_DEADBEEF)) == [
        (1, b"abc"),
        (2, b""),
        (0xDEADBEEF, b"\xff"),
    ]
    assert dec.pending == 0


def test_decode_byte_by_byte_partial_reads():
    dec = FrameDecoder()
    stream = ABC_ON_1 + FF_ON_DEADBEEF
    got = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == [(1, b"abc"), (0xDEADBEEF, b"\xff")]


def test_decode_interleaved_connections_keep_their_order():
    stream = encode_frames(1, b"a1") + encode_frames(2, b"b1") + encode_frames(1, b"a2")
    got = list(FrameDecoder().feed(stream))
    assert got == [(1, b"a1"), (2, b"b1"), (1, b"a2")]


def test_truncated_frame_waits_and_reports_what_is_pending():
    dec = FrameDecoder()
    assert list(dec.feed(ABC_ON_1[:-1])) == []
    assert dec.pending == len(ABC_ON_1) - 1
    assert list(dec.feed(ABC_ON_1[-1:])) == [(1, b"abc")]


def test_oversize_frame_is_refused_before_reading_its_payload():
    # Length 0x00400100 = 4 MiB + 256 > 10 + 4 MiB: refused from the header alone.
    header = bytes.fromhex("00000001 00400100")
    with pytest.raises(MuxError, match=r"connection 1 announces 4194560 bytes"):
        list(FrameDecoder().feed(header))


def test_largest_allowed_frame_passes():
    payload = b"\0" * MAX_PAYLOAD
    assert list(FrameDecoder().feed(encode_frames(1, payload, max_payload=MAX_PAYLOAD))) == [
        (1, payload)
    ]
