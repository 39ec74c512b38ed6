"""A stand-in for containerd's NRI side (nri v0.11.0 pkg/adaptation), on a real unix socket.

It does what adaptation/plugin.go does with an external plugin: accept, serve the
Runtime service (RegisterPlugin) on connection 2, call the Plugin service on connection
1 (Configure, Synchronize split with `more`, StateChange), each call with a deadline
after which it drops the plugin, as upstream's isFatalError does.

Its framing is written here from the upstream definitions, independently of
dradriver.nri, so a shared mistake cannot hide: only the generated protobuf messages are
shared. It also checks what the Go reader needs of the plugin's frames: each frame at
most 4096 bytes (a bufio.Reader's buffer; mux.go's Read fails with ENOMEM on a frame
larger than the caller's buffer) and never carrying bytes of two ttrpc messages.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dradriver.nri.proto import api_pb2, ttrpc_pb2

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"
VALID_EVENTS = (1 << (api_pb2.LAST - 1)) - 1  # event.go: ValidEvents


class CallFailed(Exception):
    """The plugin answered with an error status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"code {code}: {message}")
        self.code = code
        self.message = message


class PluginConn:
    """One accepted plugin connection, as the runtime sees it."""

    def __init__(self, sock: socket.socket, refuse_registration: str = "") -> None:
        self.sock = sock
        self.write_lock = threading.Lock()
        self.registered = threading.Event()
        self.registration: api_pb2.RegisterPluginRequest | None = None
        self.refuse_registration = refuse_registration
        self.violations: list[str] = []
        self.closed = threading.Event()
        self._next_stream = 1
        self._responses: dict[int, threading.Event] = {}
        self._results: dict[int, ttrpc_pb2.Response] = {}
        self._streams = {1: bytearray(), 2: bytearray()}
        self.events = VALID_EVENTS
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- wire --------------------------------------------------------------------------
    def _frame(self, conn_id: int, data: bytes) -> bytes:
        return struct.pack(">II", conn_id, len(data)) + data

    def _msg(self, stream: int, mtype: int, data: bytes) -> bytes:
        return struct.pack(">IIBB", len(data), stream, mtype, 0) + data

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (for malformed input)."""
        with self.write_lock:
            self.sock.sendall(data)

    def _read(self) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while len(buf) >= 8:
                    conn_id, length = struct.unpack_from(">II", buf)
                    if len(buf) < 8 + length:
                        break
                    payload = bytes(buf[8 : 8 + length])
                    del buf[: 8 + length]
                    self._on_frame(conn_id, payload)
        except OSError:
            return
        finally:
            self.closed.set()
            for ev in list(self._responses.values()):
                ev.set()

    def _on_frame(self, conn_id: int, payload: bytes) -> None:
        if len(payload) > 4096:
            self.violations.append(f"frame of {len(payload)} bytes on connection {conn_id}")
        stream = self._streams.get(conn_id)
        if stream is None:
            self.violations.append(f"frame on unknown connection {conn_id}")
            return
        stream += payload
        while len(stream) >= 10:
            length, sid, mtype, _ = struct.unpack_from(">IIBB", stream)
            if len(stream) < 10 + length:
                break
            data = bytes(stream[10 : 10 + length])
            del stream[: 10 + length]
            if stream:  # this frame also carried the start of the next message
                self.violations.append("frame mixes two ttrpc messages")
            if conn_id == 1 and mtype == 2:
                waiting = self._responses.get(sid)
                if waiting is None:
                    self.violations.append(f"response on stream {sid} nobody waits for")
                    continue
                self._results[sid] = ttrpc_pb2.Response.FromString(data)
                waiting.set()
            elif conn_id == 2 and mtype == 1:
                self._serve(sid, ttrpc_pb2.Request.FromString(data))
            else:
                self.violations.append(f"message type {mtype} on connection {conn_id}")

    def _serve(self, sid: int, req: ttrpc_pb2.Request) -> None:
        resp = ttrpc_pb2.Response()
        resp.status.code = 0
        if (req.service, req.method) != (RUNTIME, "RegisterPlugin"):
            resp.status.code = 12
            resp.status.message = f"method {req.method}"
        else:
            reg = api_pb2.RegisterPluginRequest.FromString(req.payload)
            idx_ok = len(reg.plugin_idx) == 2 and reg.plugin_idx.isdigit()
            if self.refuse_registration or not reg.plugin_name or not idx_ok:
                resp.status.code = 2
                resp.status.message = self.refuse_registration or "invalid plugin name or index"
            else:
                self.registration = reg
                self.registered.set()
        self.send_raw(self._frame(2, self._msg(sid, 2, resp.SerializeToString())))

    # -- calls, as adaptation/plugin.go makes them ---------------------------------------
    def call(self, method: str, msg: object, timeout: float = 2.0) -> bytes:
        """Call the plugin; on time-out drop it (a fatal error upstream) and raise."""
        req = ttrpc_pb2.Request(
            service=PLUGIN,
            method=method,
            payload=msg.SerializeToString(),  # type: ignore[attr-defined]
            timeout_nano=int(timeout * 1e9),
        )
        with self.write_lock:
            sid = self._next_stream
            self._next_stream += 2
            self._responses[sid] = threading.Event()
            self.sock.sendall(self._frame(1, self._msg(sid, 1, req.SerializeToString())))
        answered = self._responses[sid].wait(timeout)
        del self._responses[sid]
        if not answered or sid not in self._results:
            self.close()
            raise TimeoutError(f"{method}: no answer within {timeout}s; plugin dropped")
        resp = self._results.pop(sid)
        if resp.status.code != 0:
            raise CallFailed(resp.status.code, resp.status.message)
        return resp.payload

    def request_raw(self, data: bytes, timeout: float = 2.0) -> ttrpc_pb2.Response:
        """Send `data` as the body of a ttrpc request on connection 1; return the Response."""
        with self.write_lock:
            sid = self._next_stream
            self._next_stream += 2
            self._responses[sid] = threading.Event()
            self.sock.sendall(self._frame(1, self._msg(sid, 1, data)))
        answered = self._responses[sid].wait(timeout)
        del self._responses[sid]
        if not answered or sid not in self._results:
            raise TimeoutError(f"no answer to a raw request within {timeout}s")
        return self._results.pop(sid)

    def configure(self, request_timeout_ms: int = 2000) -> int:
        """Configure the plugin; return the event mask it subscribed to (checked like Go)."""
        req = api_pb2.ConfigureRequest(
            runtime_name="fake-runtime",
            runtime_version="v0.0.1",
            registration_timeout=5000,
            request_timeout=request_timeout_ms,
        )
        events = api_pb2.ConfigureResponse.FromString(self.call("Configure", req)).events
        if events & ~VALID_EVENTS:
            raise AssertionError(f"invalid plugin events: {events:#x}")
        self.events = events or VALID_EVENTS
        return events

    def synchronize(self, pods: list[api_pb2.PodSandbox], per_message: int = 0) -> None:
        """Send every pod, split `per_message` at a time like a too-large state is."""
        per = per_message or max(1, len(pods))
        chunks = [pods[i : i + per] for i in range(0, len(pods), per)] or [[]]
        for n, chunk in enumerate(chunks):
            more = n < len(chunks) - 1
            rpl = api_pb2.SynchronizeResponse.FromString(
                self.call("Synchronize", api_pb2.SynchronizeRequest(pods=chunk, more=more))
            )
            if more and rpl.more != more:
                self.close()
                raise AssertionError("plugin does not handle split sync requests")

    def state_change(self, event: int, pod: api_pb2.PodSandbox, timeout: float = 2.0) -> bool:
        """Relay a pod event if subscribed (False if not); raise CallFailed on an error."""
        if not self.events & (1 << (event - 1)):
            return False
        self.call("StateChange", api_pb2.StateChangeEvent(event=event, pod=pod), timeout)
        return True

    def create_container(
        self, pod: api_pb2.PodSandbox, name: str, env: list[str], timeout: float = 2.0
    ) -> bool:
        """Relay a container's creation if subscribed (False if not); raise CallFailed on
        an error, as the runtime then fails the container."""
        if not self.events & (1 << (api_pb2.CREATE_CONTAINER - 1)):
            return False
        container = api_pb2.Container(id=f"ctr-{name}", pod_sandbox_id=pod.id, name=name, env=env)
        req = api_pb2.CreateContainerRequest(pod=pod, container=container)
        api_pb2.CreateContainerResponse.FromString(self.call("CreateContainer", req, timeout))
        return True

    def close(self) -> None:
        """Drop the plugin's connection."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._reader.join(5)


class FakeRuntime:
    """Listens where the runtime's NRI socket would be and hands out plugin connections."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(4)
        self.listener.settimeout(10)
        self.conns: list[PluginConn] = []
        self.refuse_registration = ""  # if set: the error every RegisterPlugin gets

    def accept(self, timeout: float = 10) -> PluginConn:
        """The next plugin connection, registered (RegisterPlugin answered)."""
        self.listener.settimeout(timeout)
        sock, _ = self.listener.accept()
        conn = PluginConn(sock, self.refuse_registration)
        self.conns.append(conn)
        if not self.refuse_registration and not conn.registered.wait(timeout):
            raise AssertionError("plugin did not register")
        return conn

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self.listener.close()
        self.path.unlink(missing_ok=True)
        for conn in self.conns:
            conn.close()


@contextmanager
def fake_runtime() -> Iterator[FakeRuntime]:
    """A FakeRuntime on a socket in a fresh temporary directory; closed afterwards."""
    with tempfile.TemporaryDirectory(prefix="nri-", dir="/tmp") as tmp:
        runtime = FakeRuntime(Path(tmp) / "nri.sock")
        try:
            yield runtime
        finally:
            runtime.close()


def pod(uid: str, netns: str = "/var/run/netns/cni-1", name: str = "app") -> api_pb2.PodSandbox:
    """An NRI PodSandbox as containerd fills it for a pod with its own network namespace."""
    namespaces = [api_pb2.LinuxNamespace(type="ipc"), api_pb2.LinuxNamespace(type="uts")]
    if netns:
        namespaces.append(api_pb2.LinuxNamespace(type="network", path=netns))
    return api_pb2.PodSandbox(
        id=f"sandbox-{uid}",
        uid=uid,
        name=name,
        namespace="default",
        linux=api_pb2.LinuxPodSandbox(namespaces=namespaces),
    )
