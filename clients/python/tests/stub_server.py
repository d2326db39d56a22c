"""A stub HTTP server for the failure cases: it answers the routes it is given
and, for every other request, accepts it and never answers."""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

#: (status, JSON body or None) of an answered route.
Answer = tuple[int, Any]
Route = Callable[[str, str, bytes], Answer | None]


class Stub:
    """``routes`` maps ``"METHOD /path"`` to an answer (or to a function of the
    method, path and body returning one, or ``None`` to hang); every request is
    counted in :attr:`seen` (``"METHOD /path"``)."""

    def __init__(self, routes: dict[str, Answer | Route] | None = None) -> None:
        self.routes = dict(routes or {})
        self.seen: Counter[str] = Counter()
        self.bodies: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._conns: list[socket.socket] = []
        host, port = self._sock.getsockname()
        self.url = f"http://{host}:{port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, route: str) -> int:
        with self._lock:
            return self.seen[route]

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            for c in self._conns:
                c.close()

    def __enter__(self) -> Stub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                while len(buf) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                body, buf = buf[:length], buf[length:]
                path = target.split("?", 1)[0]
                route = f"{method} {path}"
                with self._lock:
                    self.seen[route] += 1
                    self.bodies.append((route, body))
                answer = self.routes.get(route)
                if callable(answer):
                    answer = answer(method, path, body)
                if answer is None:
                    self._stop.wait()  # accept, never answer
                    return
                status, payload = answer
                data = b"" if payload is None else json.dumps(payload).encode()
                conn.sendall(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
        except OSError:
            return
        finally:
            conn.close()
