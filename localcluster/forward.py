"""A TCP forwarder between 127.0.0.1 of two network namespaces.

With stand-in nodes (the e2e tier) a driver runs in a throw-away network namespace
(so its kernel objects are isolated) while kube-apiserver listens on the host's
loopback, so the forwarder listens inside the driver's namespace and connects out
here. A local node (`make demo`, the node tier) is the reverse: the whole node,
kube-apiserver included, runs in a namespace of its own, and users on the host reach
it through a listener here that connects inside.

A socket belongs to the namespace it was made in, so each socket is created inside
its namespace (`netns.inside` switches only the creating thread, briefly); everything
else runs in this process's namespace. The API server's certificate names 127.0.0.1,
so TLS passes through unchanged (a local node even keeps the port the same on both
sides, so one kubeconfig serves the host and the node).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from types import TracebackType

from . import netns


class Forwarder:
    """Accept on 127.0.0.1:<port> in `namespace`, connect to 127.0.0.1:`target` in
    `connect_ns` (None: the namespace of this process, for both)."""

    def __init__(
        self,
        namespace: str | None,
        target: int,
        *,
        connect_ns: str | None = None,
        port: int = 0,
    ) -> None:
        self.namespace = namespace
        self.connect_ns = connect_ns
        self.target = target
        self.port = port
        self.connections = 0
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def __enter__(self) -> Forwarder:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Listen (in `namespace`) and forward each connection from a thread of its own."""
        with _inside(self.namespace):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        self._spawn(self._accept, "forward-accept")

    def stop(self) -> None:
        """Stop accepting, close every open connection, join the threads."""
        self._stopping.set()
        if self._threads:
            self._threads[0].join(5)  # the accept loop notices within its 0.2 s timeout
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            socks = list(self._open)
            self._open.clear()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)
        self._threads.clear()

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, name=name, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                inner, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                outer = self._connect()
            except OSError:
                inner.close()  # API server down (restarting): the client retries
                continue
            outer.settimeout(None)
            inner.settimeout(None)
            self.connections += 1
            self._track(inner)
            self._track(outer)
            pair = [2]
            self._threads[1:] = [t for t in self._threads[1:] if t.is_alive()]
            self._spawn(self._pump, "forward-in", inner, outer, pair)
            self._spawn(self._pump, "forward-out", outer, inner, pair)

    def _connect(self) -> socket.socket:
        with _inside(self.connect_ns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(5)
            sock.connect(("127.0.0.1", self.target))
        except OSError:
            sock.close()
            raise
        return sock

    def _pump(self, src: socket.socket, dst: socket.socket, pair: list[int]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)  # pass the half-close on
        with self._lock:
            pair[0] -= 1
            last = pair[0] == 0
            if last:  # both directions done: close the pair
                self._open.discard(src)
                self._open.discard(dst)
        if last:
            src.close()
            dst.close()


@contextlib.contextmanager
def _inside(namespace: str | None) -> Iterator[None]:
    """Run this thread in `namespace` for the block (None: stay where it is)."""
    if namespace is None:
        yield
        return
    with netns.inside(namespace):
        yield
