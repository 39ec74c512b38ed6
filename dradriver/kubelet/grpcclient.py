"""One unary gRPC call over a unix socket, on a connection of its own: how the liveness
checker asks the driver's sockets what the kubelet would."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from dradriver.kubelet import grpcwire
from dradriver.kubelet.grpcwire import RpcError, Status

_READ = 65536


def call(socket_path: Path, method: str, request: Any, response_type: Any, timeout: float) -> Any:
    """Call `method` ("/package.Service/Method") with `request`; the response decoded as
    `response_type`. Raises RpcError: UNAVAILABLE when nothing answers on the socket,
    DEADLINE_EXCEEDED after `timeout` seconds, or the status the server gave."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(str(socket_path))
        except OSError as exc:
            raise RpcError(Status.UNAVAILABLE, f"cannot connect to {socket_path}: {exc}") from exc
        return _exchange(sock, method, request, response_type, timeout, deadline)
    except TimeoutError as exc:
        raise RpcError(Status.DEADLINE_EXCEEDED, f"no answer within {timeout:g} s") from exc
    except (OSError, h2.exceptions.ProtocolError) as exc:
        raise RpcError(Status.UNAVAILABLE, f"the connection failed: {exc}") from exc
    finally:
        sock.close()


def _exchange(
    sock: socket.socket,
    method: str,
    request: Any,
    response_type: Any,
    timeout: float,
    deadline: float,
) -> Any:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", method.encode()),
        (b":authority", b"localhost"),
        (b"content-type", grpcwire.CONTENT_TYPE),
        (b"te", b"trailers"),
        (b"grpc-timeout", grpcwire.format_timeout(timeout)),
    ]
    conn.send_headers(stream, headers)
    conn.send_data(stream, grpcwire.frame(request.SerializeToString()), end_stream=True)
    sock.sendall(conn.data_to_send())
    reader = grpcwire.MessageReader()
    messages: list[bytes] = []
    status: dict[bytes, bytes] = {}
    ended = False
    while not ended:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        data = sock.recv(_READ)
        if not data:
            raise RpcError(Status.UNAVAILABLE, "the server closed the connection")
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived | h2.events.TrailersReceived):
                status.update(ev.headers or [])
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                messages += reader.feed(ev.data or b"")
            elif isinstance(ev, h2.events.StreamReset):
                raise RpcError(Status.UNAVAILABLE, f"the server reset the call ({ev.error_code})")
            elif isinstance(ev, h2.events.ConnectionTerminated):
                raise RpcError(Status.UNAVAILABLE, "the server closed the connection")
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
        with contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
    code, details = grpcwire.read_status(status)
    if code != Status.OK:
        raise RpcError(code, details)
    if len(messages) != 1:
        raise RpcError(Status.INTERNAL, f"expected one response message, got {len(messages)}")
    return response_type.FromString(messages[0])
