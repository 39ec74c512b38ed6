"""ttrpc framing, envelopes and endpoints, against vectors derived from ttrpc v1.2.7.

Header (channel.go): PutUint32(p[:4], Length), PutUint32(p[4:8], StreamID), p[8] = Type,
p[9] = Flags. Envelopes are protobuf (request.proto): a field's key is
(number << 3) | wire type (0 varint, 2 length-delimited), then the value; proto3 leaves
out fields that hold their default.
"""

import time

import pytest

from dradriver.nri.proto import api_pb2
from dradriver.nri.rpc import ClientEndpoint, IncomingCall, ServerEndpoint
from dradriver.nri.service import EVENT_MASK, PLUGIN_SERVICE, RUNTIME_SERVICE, event_mask
from dradriver.nri.ttrpc import (
    MSG_DATA,
    MSG_REQUEST,
    MSG_RESPONSE,
    Code,
    Message,
    MessageReader,
    TtrpcError,
    decode_request,
    decode_response,
    encode_message,
    encode_request,
    encode_response,
)

# RegisterPluginRequest{plugin_name: "dra-driver", plugin_idx: "10"}:
#   0a (field 1, len) 0a (10) "dra-driver" | 12 (field 2, len) 02 "10"        = 16 bytes
REGISTER_PAYLOAD = bytes.fromhex("0a0a") + b"dra-driver" + bytes.fromhex("1202") + b"10"
# Request{service: "nri.pkg.api.v1alpha1.Runtime" (28 = 0x1c bytes),
#         method: "RegisterPlugin" (14 = 0x0e), payload: the 16 (0x10) bytes above,
#         timeout_nano: 5e9}. 5_000_000_000 as a varint, 7 bits at a time from the low end:
#   5e9 % 128 = 0 -> 0x80 (more follows); 39062500 % 128 = 100 -> 0xe4; 305175 % 128 = 23
#   -> 0x97; 2384 % 128 = 80 -> 0xd0; 18 -> 0x12 (last). Key of field 4 varint: 0x20.
REGISTER_REQUEST = (
    bytes.fromhex("0a1c")
    + b"nri.pkg.api.v1alpha1.Runtime"
    + bytes.fromhex("120e")
    + b"RegisterPlugin"
    + bytes.fromhex("1a10")
    + REGISTER_PAYLOAD
    + bytes.fromhex("2080e497d012")
)
# Response{status: {}} (Go always sets the status): 0a (field 1, len) 00.
OK_EMPTY_RESPONSE = bytes.fromhex("0a00")
# Response{status: {code: 2, message: "boom"}}: Status = 08 02 12 04 "boom" (8 bytes).
UNKNOWN_BOOM_RESPONSE = bytes.fromhex("0a08 0802 1204") + b"boom"


def test_header_vector():
    # length 2, stream 1, type request (1), flags 0, then the 2 bytes of data
    assert encode_message(1, MSG_REQUEST, b"\x0a\x00") == bytes.fromhex(
        "00000002 00000001 01 00 0a00"
    )
    assert encode_message(0x01020304, MSG_RESPONSE, b"") == bytes.fromhex("00000000 01020304 0200")


def test_request_vector_of_a_registration():
    assert encode_request(RUNTIME_SERVICE, "RegisterPlugin", REGISTER_PAYLOAD, 5.0) == (
        REGISTER_REQUEST
    )
    req = decode_request(REGISTER_REQUEST)
    assert (req.service, req.method, req.timeout_nano) == (
        "nri.pkg.api.v1alpha1.Runtime",
        "RegisterPlugin",
        5_000_000_000,
    )
    reg = api_pb2.RegisterPluginRequest.FromString(req.payload)
    assert (reg.plugin_name, reg.plugin_idx) == ("dra-driver", "10")


def test_response_vectors():
    assert encode_response() == OK_EMPTY_RESPONSE
    assert encode_response(code=Code.UNKNOWN, message="boom") == UNKNOWN_BOOM_RESPONSE
    assert decode_response(OK_EMPTY_RESPONSE) == b""
    with pytest.raises(TtrpcError, match="UNKNOWN: boom") as err:
        decode_response(UNKNOWN_BOOM_RESPONSE)
    assert err.value.code == 2
    # A response without status (fields absent) is a success, as in Go's client.
    assert decode_response(bytes.fromhex("1201") + b"x") == b"x"


def test_event_mask_encoding():
    # event.go: Set(e) does mask |= 1 << (e - 1). RUN_POD_SANDBOX=1, STOP=2, REMOVE=3,
    # CREATE_CONTAINER=4.
    assert EVENT_MASK == 0b1111
    assert event_mask([api_pb2.REMOVE_POD_SANDBOX]) == 0b100
    assert event_mask([api_pb2.VALIDATE_CONTAINER_ADJUSTMENT]) == 1 << 13
    # ConfigureResponse{events: 15}: field 2 varint -> key 0x10, value 0f.
    assert api_pb2.ConfigureResponse(events=EVENT_MASK).SerializeToString() == b"\x10\x0f"


def test_garbage_is_a_clear_error():
    with pytest.raises(TtrpcError, match="INVALID_ARGUMENT: unmarshal request error"):
        decode_request(b"\xff\xff\xff")  # field 0x1fff..., truncated varint
    with pytest.raises(TtrpcError, match="unparseable ttrpc response"):
        decode_response(b"\x0a\x05\x08")  # status announces 5 bytes, 1 follows


def test_reader_reassembles_messages_split_anywhere():
    stream = encode_message(1, MSG_REQUEST, REGISTER_REQUEST) + encode_message(3, MSG_REQUEST, b"")
    for cut in range(len(stream) + 1):
        reader = MessageReader()
        got = list(reader.feed(stream[:cut])) + list(reader.feed(stream[cut:]))
        assert [(m.stream_id, m.data) for m in got] == [(1, REGISTER_REQUEST), (3, b"")]


def test_reader_skips_an_oversized_message_and_keeps_going():
    reader = MessageReader(max_data=4)
    big = encode_message(5, MSG_REQUEST, b"123456789")  # announces 9 > 4
    after = encode_message(7, MSG_REQUEST, b"ok")
    got = list(reader.feed(big[:12]))  # header + 2 bytes of the body
    assert got == [Message(5, MSG_REQUEST, 0, b"", oversized=9)]
    got = list(reader.feed(big[12:] + after))
    assert [(m.stream_id, m.data) for m in got] == [(7, b"ok")]


def test_encode_refuses_messages_over_4_mib():
    with pytest.raises(TtrpcError, match="RESOURCE_EXHAUSTED"):
        encode_message(1, MSG_REQUEST, b"\0" * ((4 << 20) + 1))


class Wire:
    """Collects what an endpoint sends, decoded back into messages."""

    def __init__(self):
        self.reader = MessageReader()
        self.messages = []

    def send(self, data: bytes) -> None:
        self.messages += self.reader.feed(data)

    def responses(self):
        out = []
        for m in self.messages:
            assert m.type == MSG_RESPONSE
            try:
                out.append((m.stream_id, "ok", decode_response(m.data)))
            except TtrpcError as exc:
                out.append((m.stream_id, Code(exc.code).name, exc.message))
        return out


def request(stream_id, method="Configure", payload=b"", service=PLUGIN_SERVICE, timeout=None):
    data = encode_request(service, method, payload, timeout)
    return Message(stream_id, MSG_REQUEST, 0, data)


def test_server_routes_and_answers_once():
    wire = Wire()
    calls: list[IncomingCall] = []
    server = ServerEndpoint({(PLUGIN_SERVICE, "Configure"): calls.append}, wire.send)
    server.receive(request(1, payload=b"abc", timeout=2.0))
    (call,) = calls
    assert (call.method, call.payload, call.remote_timeout) == ("Configure", b"abc", 2.0)
    assert call.reply(b"\x10\x07")
    assert not call.fail(Code.UNKNOWN, "too late")  # the first answer wins
    assert wire.responses() == [(1, "ok", b"\x10\x07")]


def test_server_refuses_what_go_ttrpc_refuses():
    wire = Wire()
    server = ServerEndpoint({(PLUGIN_SERVICE, "Configure"): lambda c: c.reply(b"")}, wire.send)
    server.receive(request(2))  # even: server-initiated streams do not exist
    server.receive(request(5, method="CreateContainer"))  # not served
    server.receive(request(7, service="nri.pkg.api.v1alpha1.Other"))
    server.receive(request(5))  # stream IDs must increase
    server.receive(Message(9, MSG_REQUEST, 0, b"\xff\xff"))  # not a Request
    server.receive(Message(11, MSG_DATA, 0, b""))  # no streaming methods
    server.receive(Message(13, MSG_REQUEST, 0, b"", oversized=5 << 20))
    assert [(s, code) for s, code, _ in wire.responses()] == [
        (2, "INVALID_ARGUMENT"),
        (5, "UNIMPLEMENTED"),
        (7, "UNIMPLEMENTED"),
        (5, "INVALID_ARGUMENT"),
        (9, "INVALID_ARGUMENT"),
        (11, "INVALID_ARGUMENT"),
        (13, "RESOURCE_EXHAUSTED"),
    ]
    assert wire.responses()[1][2] == "method CreateContainer"
    assert wire.responses()[2][2] == "service nri.pkg.api.v1alpha1.Other"


def test_server_answers_by_the_deadline_and_not_again():
    wire = Wire()
    calls: list[IncomingCall] = []
    server = ServerEndpoint({(PLUGIN_SERVICE, "StateChange"): calls.append}, wire.send)
    server.receive(request(1, method="StateChange"))
    expired = []
    now = time.monotonic()
    calls[0].answer_by(now + 1.0, "not in time", on_expire=lambda: expired.append(1))
    assert server.next_deadline() == now + 1.0
    server.expire(now + 0.5)
    assert wire.messages == []
    server.expire(now + 1.0)
    assert wire.responses() == [(1, "DEADLINE_EXCEEDED", "not in time")]
    assert expired == [1]
    assert not calls[0].reply(b"")  # the handler finished later: nothing more is sent
    assert server.next_deadline() is None and len(wire.messages) == 1


def test_server_survives_a_handler_that_raises():
    wire = Wire()

    def broken(call):
        raise KeyError("bug")

    server = ServerEndpoint({(PLUGIN_SERVICE, "Configure"): broken}, wire.send)
    server.receive(request(1))
    assert wire.responses() == [(1, "INTERNAL", "Configure: 'bug'")]


def test_client_uses_odd_increasing_stream_ids_and_matches_responses():
    wire = Wire()
    client = ClientEndpoint(wire.send)
    results = []
    a = client.call(RUNTIME_SERVICE, "RegisterPlugin", b"", 5.0, lambda p, e: results.append(p))
    b = client.call(RUNTIME_SERVICE, "RegisterPlugin", b"", 5.0, lambda p, e: results.append(e))
    assert (a, b) == (1, 3)
    assert [m.stream_id for m in wire.messages] == [1, 3]
    sent = decode_request(wire.messages[0].data)
    assert 4.9e9 < sent.timeout_nano <= 5e9
    client.receive(Message(3, MSG_RESPONSE, 0, UNKNOWN_BOOM_RESPONSE))
    client.receive(Message(1, MSG_RESPONSE, 0, OK_EMPTY_RESPONSE))
    client.receive(Message(1, MSG_RESPONSE, 0, OK_EMPTY_RESPONSE))  # duplicate: ignored
    assert results[0].code == Code.UNKNOWN and results[1] == b""
    assert client.next_deadline() is None


def test_client_times_out_and_fails_on_close():
    client = ClientEndpoint(lambda data: None)
    results = []
    client.call(RUNTIME_SERVICE, "RegisterPlugin", b"", 1.0, lambda p, e: results.append(e))
    client.call(RUNTIME_SERVICE, "RegisterPlugin", b"", 9.0, lambda p, e: results.append(e))
    client.expire(time.monotonic() + 2.0)
    assert [e.code for e in results] == [Code.DEADLINE_EXCEEDED]
    client.close("gone")
    assert [e.code for e in results] == [Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE]
    assert "RegisterPlugin: gone" in str(results[1])


def test_client_reports_a_send_failure_at_once():
    def broken(data):
        raise BrokenPipeError("pipe")

    results = []
    ClientEndpoint(broken).call(RUNTIME_SERVICE, "X", b"", 1.0, lambda p, e: results.append(e))
    assert results[0].code == Code.UNAVAILABLE
