"""A TCP proxy for fault tests that can stop forwarding without closing (half-open).

``freeze()`` makes every connection, old and new, go silent: nothing is read or sent and
nothing is closed, as when a NAT or a firewall drops a connection's state. ``thaw()``
forwards again (new connections work; old ones resume where they were).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from hotkeyd.testing import free_port


class FreezableProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.port = free_port()
        self._frozen = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def freeze(self) -> None:
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> FreezableProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            self._socks += [client, upstream]
            t = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while not self._stop.is_set():
            if self._frozen.is_set():
                self._stop.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
            except OSError:
                return
