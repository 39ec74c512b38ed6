"""gRPC's wire format (dradriver/kubelet/grpcwire.py): message framing, timeouts and the
status trailers, as the Go and C-core implementations write them."""

from __future__ import annotations

import pytest

from dradriver.kubelet import grpcwire
from dradriver.kubelet.grpcwire import MessageReader, RpcError, Status


def test_messages_are_split_whatever_the_chunks() -> None:
    data = b"".join(grpcwire.frame(m) for m in (b"", b"abc", b"x" * 70000))
    for size in (1, 7, 4096, len(data)):
        reader = MessageReader()
        out = []
        for i in range(0, len(data), size):
            out += reader.feed(data[i : i + size])
        assert out == [b"", b"abc", b"x" * 70000]
        assert not reader.pending
    partial = MessageReader()
    assert partial.feed(grpcwire.frame(b"abcdef")[:-1]) == [] and partial.pending


def test_compressed_and_oversized_messages_are_refused() -> None:
    with pytest.raises(RpcError) as compressed:
        MessageReader().feed(b"\x01\x00\x00\x00\x01a")
    assert compressed.value.code == Status.UNIMPLEMENTED
    with pytest.raises(RpcError) as large:
        MessageReader(limit=10).feed(b"\x00\x00\x00\x00\x0b")  # the prefix is enough
    assert large.value.code == Status.RESOURCE_EXHAUSTED
    assert "11 bytes" in large.value.details


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"44999859u", 44.999859),
        (b"45S", 45.0),
        (b"1H", 3600.0),
        (b"2M", 120.0),
        (b"250m", 0.25),
        (b"99999999n", 0.099999999),
    ],
)
def test_timeouts_in_every_unit(value: bytes, seconds: float) -> None:
    assert grpcwire.parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"10", b"S", b"123456789S", b"-1S", b"1.5S", b"10s"])
def test_malformed_timeouts_are_refused(value: bytes) -> None:
    with pytest.raises(RpcError) as exc:
        grpcwire.parse_timeout(value)
    assert exc.value.code == Status.INTERNAL


def test_timeouts_are_written_in_milliseconds() -> None:
    assert grpcwire.format_timeout(45) == b"45000m"
    assert grpcwire.format_timeout(0) == b"1m"
    assert grpcwire.format_timeout(1e9) == b"99999999m"
    assert grpcwire.parse_timeout(grpcwire.format_timeout(2.5)) == 2.5


def test_status_trailers_round_trip_any_text() -> None:
    details = "claim ns/a: 100% ünready\r\nsecond line"
    headers = dict(grpcwire.status_headers(Status.FAILED_PRECONDITION, details))
    assert headers[b"grpc-status"] == b"9"
    assert all(0x20 <= c < 0x7F for c in headers[b"grpc-message"])
    assert grpcwire.read_status(headers) == (Status.FAILED_PRECONDITION, details)
    assert dict(grpcwire.status_headers(Status.OK, "")) == {b"grpc-status": b"0"}
    assert grpcwire.read_status({})[0] == Status.UNKNOWN
    assert grpcwire.read_status({b"grpc-status": b"99"})[0] == Status.UNKNOWN
