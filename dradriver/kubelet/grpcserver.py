"""A small gRPC server on a unix socket: unary and server-streaming methods over HTTP/2
(the h2 state machine), which is all the kubelet calls.

Each connection has a reader thread; a complete request runs on the server's worker
pool and its answer is written under the connection's lock, within the flow-control
window the client gives. Every wait is bounded: a write that blocks for SEND_TIMEOUT
closes the connection, and a window that stays shut for WINDOW_TIMEOUT resets the stream.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from dradriver.base.log import event
from dradriver.kubelet import grpcwire
from dradriver.kubelet.grpcwire import RpcError, Status

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64  # open at once per socket; the kubelet keeps one
SEND_TIMEOUT = 10.0  # seconds a write may block before the connection is closed
WINDOW_TIMEOUT = 30.0  # seconds an answer waits for the client's flow-control window
_READ = 65536


@dataclass(frozen=True)
class Method:
    """One method: its request type (a protobuf message class) and its handler, which
    returns the response, or yields the responses if `streaming`."""

    request: Any
    handler: Callable[[Any, Call], Any]
    streaming: bool = False


class Call:
    """One call as its handler sees it: its deadline, and whether it is still wanted."""

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline
        self._ended = False
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def time_remaining(self) -> float | None:
        """Seconds before the client's deadline (None without one)."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def is_active(self) -> bool:
        """Whether the client still waits for this call's answer."""
        return not self._ended

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Run `callback` once when the call ends (answered, cancelled, or server stopped)."""
        with self._lock:
            if not self._ended:
                self._callbacks.append(callback)
                return
        callback()

    def abort(self, code: Status, details: str) -> NoReturn:
        """End the call with `code` and `details`."""
        raise RpcError(code, details)

    def end(self) -> None:
        """Mark the call ended and run its callbacks (once)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


@dataclass
class _Stream:
    id: int
    path: str
    method: Method | None
    call: Call
    reader: grpcwire.MessageReader
    messages: list[bytes]
    headers_sent: bool = False
    error: RpcError | None = None


class _Gone(Exception):
    """The stream or its connection went while an answer was being written."""


class Server:
    """Serves `methods` (keyed by path, "/package.Service/Method") on one unix socket."""

    def __init__(self, methods: dict[str, Method], workers: int, name: str) -> None:
        """Nothing listens until `start`; calls run on at most `workers` threads."""
        self._methods = methods
        self._name = name
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._connections: set[_Connection] = set()
        self._lock = threading.Condition()
        self._running = 0  # calls on the pool
        self._stopping = False

    def start(self, path: Path) -> None:
        """Listen on `path` (which must not exist) and serve."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(16)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept, name=f"{self._name}-accept", daemon=True
        )
        self._acceptor.start()

    def stop(self, grace: float) -> None:
        """Stop listening; wait up to `grace` seconds for running calls, then end the rest
        (their handlers see the call inactive) and close every connection."""
        with self._lock:
            self._stopping = True
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            self._listener.close()
        if self._acceptor is not None:
            self._acceptor.join(grace + 1)
        deadline = time.monotonic() + grace
        with self._lock:
            while self._running and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # stopped
            with self._lock:
                if self._stopping or len(self._connections) >= MAX_CONNECTIONS:
                    sock.close()
                    continue
                connection = _Connection(self, sock)
                self._connections.add(connection)
            threading.Thread(
                target=connection.serve, name=f"{self._name}-conn", daemon=True
            ).start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _submit(self, connection: _Connection, stream: _Stream) -> None:
        with self._lock:
            if self._stopping:
                stream.error = RpcError(Status.UNAVAILABLE, "the server is stopping")
            else:
                self._running += 1
                self._pool.submit(self._run, connection, stream)
                return
        connection.finish(stream)

    def _run(self, connection: _Connection, stream: _Stream) -> None:
        try:
            connection.answer(stream)
        finally:
            with self._lock:
                self._running -= 1
                self._lock.notify_all()


class _Connection:
    """One client connection: the h2 state, its socket, and its open streams."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self._server = server
        self._sock = sock
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT), 0)
        )
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self._lock = threading.Condition()
        self._streams: dict[int, _Stream] = {}
        self._closed = False

    def serve(self) -> None:
        """Read and answer until the client or the server closes the connection."""
        try:
            with self._lock:
                self._h2.initiate_connection()
                self._flush()
            while not self._closed:
                data = self._sock.recv(_READ)
                if not data:
                    break
                with self._lock:
                    for ev in self._h2.receive_data(data):
                        self._on_event(ev)
                    self._flush()
        except (OSError, h2.exceptions.ProtocolError) as exc:
            if not self._closed:
                event(log, logging.DEBUG, "gRPC connection ended", error=exc)
        finally:
            self.close()
            self._sock.close()
            self._server._forget(self)

    def close(self) -> None:
        """Say goodbye if we still can, wake the reader, end every open call (the reader
        closes the socket as it leaves)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
                    self._h2.close_connection()
                    self._flush()
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            streams = list(self._streams.values())
            self._streams.clear()
            self._lock.notify_all()
        for stream in streams:
            stream.call.end()

    # -- the reader thread, under the lock ----------------------------------------------

    def _on_event(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.RequestReceived):
            self._on_request(ev.stream_id, dict(ev.headers or []))
        elif isinstance(ev, h2.events.DataReceived):
            self._h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            stream = self._streams.get(ev.stream_id)
            if stream is not None and stream.error is None and ev.data:
                try:
                    stream.messages += stream.reader.feed(ev.data)
                except RpcError as exc:
                    stream.error = exc
        elif isinstance(ev, h2.events.StreamEnded):
            stream = self._streams.get(ev.stream_id)
            if stream is not None:
                self._on_complete(stream)
        elif isinstance(ev, h2.events.StreamReset):
            gone = self._streams.pop(ev.stream_id, None)
            if gone is not None:
                gone.call.end()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self._closed = True
        self._lock.notify_all()  # a window may have opened

    def _on_request(self, stream_id: int, headers: dict[bytes, bytes]) -> None:
        path = headers.get(b":path", b"").decode("utf-8", "replace")
        stream = _Stream(
            stream_id,
            path,
            self._server._methods.get(path),
            Call(None),
            grpcwire.MessageReader(),
            [],
        )
        self._streams[stream_id] = stream
        if stream.method is None:
            stream.error = RpcError(Status.UNIMPLEMENTED, f"method {path} is not served here")
        elif not headers.get(b"content-type", b"").startswith(grpcwire.CONTENT_TYPE):
            stream.error = RpcError(Status.INTERNAL, "content-type is not application/grpc")
        elif b"grpc-timeout" in headers:
            try:
                seconds = grpcwire.parse_timeout(headers[b"grpc-timeout"])
                stream.call = Call(time.monotonic() + seconds)
            except RpcError as exc:
                stream.error = exc

    def _on_complete(self, stream: _Stream) -> None:
        if stream.error is None and (len(stream.messages) != 1 or stream.reader.pending):
            stream.error = RpcError(
                Status.INTERNAL, f"expected one request message, got {len(stream.messages)}"
            )
        if stream.error is not None:
            self._end(stream, stream.error.code, stream.error.details)
            return
        self._server._submit(self, stream)

    # -- worker threads -----------------------------------------------------------------

    def answer(self, stream: _Stream) -> None:
        """Run the stream's handler and write its answer (on a worker thread)."""
        method = stream.method
        assert method is not None
        code, details = Status.OK, ""
        try:
            try:
                request = method.request.FromString(stream.messages[0])
            except Exception as exc:  # protobuf's DecodeError, and whatever else it raises
                raise RpcError(Status.INTERNAL, f"cannot decode the request: {exc}") from exc
            if method.streaming:
                for response in method.handler(request, stream.call):
                    self._send_message(stream, response.SerializeToString())
            else:
                response = method.handler(request, stream.call)
                self._send_message(stream, response.SerializeToString())
        except RpcError as exc:
            code, details = exc.code, exc.details
        except _Gone:
            stream.call.end()
            return
        except Exception as exc:
            event(log, logging.ERROR, "gRPC handler failed", method=stream.path, error=exc)
            code, details = Status.UNKNOWN, f"{stream.path} failed: {type(exc).__name__}"
        with self._lock:
            self._end(stream, code, details)
            with contextlib.suppress(OSError):
                self._flush()

    def finish(self, stream: _Stream) -> None:
        """End a stream that was not run with its error."""
        assert stream.error is not None
        with self._lock:
            self._end(stream, stream.error.code, stream.error.details)

    def _send_message(self, stream: _Stream, message: bytes) -> None:
        data = grpcwire.frame(message)
        deadline = time.monotonic() + WINDOW_TIMEOUT
        with self._lock:
            if not stream.headers_sent:
                self._check(stream)
                self._h2.send_headers(stream.id, self._response_headers())
                stream.headers_sent = True
            while data:
                self._check(stream)
                window = min(
                    self._h2.local_flow_control_window(stream.id),
                    self._h2.max_outbound_frame_size,
                )
                if window <= 0:
                    if not self._lock.wait(deadline - time.monotonic()):
                        self._reset(stream)
                        raise _Gone
                    continue
                self._h2.send_data(stream.id, data[:window])
                data = data[window:]
                self._flush()

    def _check(self, stream: _Stream) -> None:
        if self._closed or self._streams.get(stream.id) is not stream:
            raise _Gone

    def _end(self, stream: _Stream, code: Status, details: str) -> None:
        """Write the status (under the lock): trailers, or headers and trailers in one
        frame if nothing was sent yet; then the call has ended."""
        if not self._closed and self._streams.get(stream.id) is stream:
            trailers = grpcwire.status_headers(code, details)
            if not stream.headers_sent:
                trailers = self._response_headers() + trailers
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.send_headers(stream.id, trailers, end_stream=True)
            self._streams.pop(stream.id, None)
        stream.call.end()

    def _reset(self, stream: _Stream) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError, OSError):
            self._h2.reset_stream(stream.id, h2.errors.ErrorCodes.CANCEL)
            self._flush()
        self._streams.pop(stream.id, None)

    @staticmethod
    def _response_headers() -> list[tuple[bytes, bytes]]:
        return [(b":status", b"200"), (b"content-type", grpcwire.CONTENT_TYPE)]

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            self._sock.sendall(data)
