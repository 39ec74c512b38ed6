"""ttrpc server and client for one logical connection, driven by one reader thread.

Neither side does I/O itself: each gets the messages the reader reassembled and a
`send` function that frames and writes one message. Both keep deadlines that the
reader's loop enforces through `expire`; the earliest is `next_deadline()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dradriver.base.log import event
from dradriver.nri.ttrpc import (
    MSG_DATA,
    MSG_REQUEST,
    MSG_RESPONSE,
    Code,
    Message,
    TtrpcError,
    decode_request,
    decode_response,
    encode_message,
    encode_request,
    encode_response,
)

log = logging.getLogger(__name__)

Send = Callable[[bytes], None]  # writes one whole ttrpc message; raises OSError when it cannot


@dataclass
class IncomingCall:
    """One request to answer exactly once: `reply`, `fail`, or the deadline answers it."""

    stream_id: int
    service: str
    method: str
    payload: bytes
    remote_timeout: float | None  # what the caller's deadline left when it sent the call
    _server: ServerEndpoint = field(repr=False)
    _answered: bool = False

    @property
    def answered(self) -> bool:
        """Whether an answer (of any kind) went out already."""
        return self._answered

    def reply(self, payload: bytes) -> bool:
        """Answer with success; False if the call was answered before (e.g. timed out)."""
        return self._server.answer(self, encode_response(payload))

    def fail(self, code: int, message: str) -> bool:
        """Answer with an error status; False if the call was answered before."""
        return self._server.answer(self, encode_response(code=code, message=message))

    def answer_by(
        self, deadline: float, message: str, on_expire: Callable[[], None] | None = None
    ) -> None:
        """Unless answered by `deadline` (monotonic), fail with DEADLINE_EXCEEDED, `message`."""
        self._server.watch(self, deadline, message, on_expire)


Handler = Callable[[IncomingCall], None]  # runs on the reader thread: must not block


class ServerEndpoint:
    """Serves unary ttrpc methods: routes requests to handlers, sends their answers."""

    def __init__(self, handlers: dict[tuple[str, str], Handler], send: Send) -> None:
        self._handlers = handlers
        self._send = send
        self._lock = threading.Lock()
        self._last_stream = 0
        self._deadlines: dict[int, tuple[float, str, Callable[[], None] | None]] = {}
        self._pending: dict[int, IncomingCall] = {}

    def receive(self, msg: Message) -> None:
        """Handle one message that arrived on the server's connection."""
        if msg.type not in (MSG_REQUEST, MSG_DATA):
            event(log, logging.DEBUG, "ignored ttrpc message", type=msg.type, stream=msg.stream_id)
            return
        if msg.oversized:
            self._status(msg.stream_id, Code.RESOURCE_EXHAUSTED, f"message length {msg.oversized}")
        elif msg.stream_id % 2 != 1:
            self._status(msg.stream_id, Code.INVALID_ARGUMENT, "StreamID must be odd")
        elif msg.type == MSG_DATA:
            self._status(msg.stream_id, Code.INVALID_ARGUMENT, "no streaming methods here")
        elif msg.stream_id <= self._last_stream:
            self._status(msg.stream_id, Code.INVALID_ARGUMENT, "StreamID must increment")
        else:
            self._last_stream = msg.stream_id
            self._dispatch(msg)

    def _dispatch(self, msg: Message) -> None:
        try:
            req = decode_request(msg.data)
        except TtrpcError as exc:
            self._status(msg.stream_id, exc.code, exc.message)
            return
        handler = self._handlers.get((req.service, req.method))
        if handler is None:
            known = {s for s, _ in self._handlers}
            what = f"method {req.method}" if req.service in known else f"service {req.service}"
            self._status(msg.stream_id, Code.UNIMPLEMENTED, what)
            return
        remote = req.timeout_nano / 1e9 if req.timeout_nano > 0 else None
        call = IncomingCall(msg.stream_id, req.service, req.method, req.payload, remote, self)
        with self._lock:
            self._pending[call.stream_id] = call
        try:
            handler(call)
        except Exception as exc:  # a handler bug must not kill the connection
            event(log, logging.ERROR, "ttrpc handler failed", method=req.method, error=exc)
            call.fail(Code.INTERNAL, f"{req.method}: {exc}")

    def answer(self, call: IncomingCall, response: bytes) -> bool:
        """Send the answer to `call` unless it has one already; True if this one went out."""
        with self._lock:
            if not self._claim(call):
                return False
        return self._transmit(call, response)

    def _claim(self, call: IncomingCall) -> bool:
        """Mark `call` answered (caller holds the lock); False if it was already."""
        if call._answered:
            return False
        call._answered = True
        self._pending.pop(call.stream_id, None)
        self._deadlines.pop(call.stream_id, None)
        return True

    def _transmit(self, call: IncomingCall, response: bytes) -> bool:
        try:
            self._send(encode_message(call.stream_id, MSG_RESPONSE, response))
        except OSError as exc:
            event(log, logging.WARNING, "could not answer", method=call.method, error=exc)
            return False
        return True

    def watch(
        self,
        call: IncomingCall,
        deadline: float,
        message: str,
        on_expire: Callable[[], None] | None,
    ) -> None:
        """Register the deadline by which `call` must be answered."""
        with self._lock:
            if not call._answered:
                self._deadlines[call.stream_id] = (deadline, message, on_expire)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a call still unanswered."""
        with self._lock:
            return min((d for d, _, _ in self._deadlines.values()), default=None)

    def expire(self, now: float) -> None:
        """Fail every unanswered call whose deadline has passed (`on_expire` first)."""
        with self._lock:
            due = [(sid, v) for sid, v in self._deadlines.items() if v[0] <= now]
            claimed = []
            for sid, (_, message, on_expire) in due:
                call = self._pending.get(sid)
                self._deadlines.pop(sid, None)
                if call is not None and self._claim(call):
                    claimed.append((call, message, on_expire))
        for call, message, on_expire in claimed:
            if on_expire:
                on_expire()
            self._transmit(call, encode_response(code=Code.DEADLINE_EXCEEDED, message=message))

    def close(self) -> None:
        """The connection is gone: nothing pending can be answered any more."""
        with self._lock:
            for call in self._pending.values():
                call._answered = True
            self._pending.clear()
            self._deadlines.clear()

    def _status(self, stream_id: int, code: int, message: str) -> None:
        event(log, logging.WARNING, "refused ttrpc request", stream=stream_id, error=message)
        try:
            self._send(
                encode_message(stream_id, MSG_RESPONSE, encode_response(code=code, message=message))
            )
        except OSError as exc:
            event(log, logging.WARNING, "could not answer", stream=stream_id, error=exc)


Done = Callable[[bytes | None, TtrpcError | None], None]  # (payload, error): one is None


@dataclass
class _Outgoing:
    method: str
    deadline: float
    done: Done


class ClientEndpoint:
    """Calls unary ttrpc methods: odd, increasing stream IDs; a deadline per call."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._next_stream = 1
        self._calls: dict[int, _Outgoing] = {}

    def call(self, service: str, method: str, payload: bytes, timeout: float, done: Done) -> int:
        """Send a request; `done` runs once, on the reader thread, with the outcome."""
        deadline = time.monotonic() + timeout
        data = encode_request(service, method, payload, timeout)
        with self._lock:  # stream IDs go on the wire in increasing order
            stream_id = self._next_stream
            self._next_stream += 2
            self._calls[stream_id] = _Outgoing(method, deadline, done)
            try:
                self._send(encode_message(stream_id, MSG_REQUEST, data))
            except OSError as exc:
                del self._calls[stream_id]
                error: TtrpcError | None = TtrpcError(Code.UNAVAILABLE, f"{method}: {exc}")
            else:
                error = None
        if error is not None:
            done(None, error)
        return stream_id

    def receive(self, msg: Message) -> None:
        """Deliver a response to the call waiting for it."""
        if msg.type != MSG_RESPONSE:
            event(log, logging.DEBUG, "ignored ttrpc message", type=msg.type, stream=msg.stream_id)
            return
        with self._lock:
            out = self._calls.pop(msg.stream_id, None)
        if out is None:
            event(log, logging.WARNING, "ttrpc response for no pending call", stream=msg.stream_id)
            return
        if msg.oversized:
            out.done(None, TtrpcError(Code.RESOURCE_EXHAUSTED, f"response of {msg.oversized} B"))
            return
        try:
            payload = decode_response(msg.data)
        except TtrpcError as exc:
            out.done(None, exc)
        else:
            out.done(payload, None)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a call still waiting."""
        with self._lock:
            return min((c.deadline for c in self._calls.values()), default=None)

    def expire(self, now: float) -> None:
        """Fail every call whose deadline passed."""
        with self._lock:
            due = {sid: c for sid, c in self._calls.items() if c.deadline <= now}
            for sid in due:
                del self._calls[sid]
        for out in due.values():
            out.done(None, TtrpcError(Code.DEADLINE_EXCEEDED, f"{out.method}: no answer in time"))

    def close(self, reason: str) -> None:
        """Fail every waiting call: the connection is gone."""
        with self._lock:
            calls = list(self._calls.values())
            self._calls.clear()
        for out in calls:
            out.done(None, TtrpcError(Code.UNAVAILABLE, f"{out.method}: {reason}"))
