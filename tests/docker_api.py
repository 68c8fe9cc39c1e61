"""A tiny Docker daemon stand-in on a Unix socket: it answers `/_ping`, `/version` and
`/containers/json` as the Docker API does, so tests can check which socket a client found
and what it read, over a real socket, without a daemon of their own."""

from __future__ import annotations

import json
import socketserver
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Iterator


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # docker-py keeps its connection open
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 — http.server's name
        path = self.path.split("?")[0]
        self.server.seen.append(path)
        if path.endswith("/_ping"):
            self._reply(b"OK", "text/plain")
        elif path.endswith("/version"):
            self._reply(json.dumps({"Version": self.server.version, "ApiVersion": "1.43",
                                    "MinAPIVersion": "1.12"}).encode())
        elif path.endswith("/containers/json"):
            self._reply(json.dumps([{"Id": f"c{i}", "Labels": {"proctor": "1"}}
                                    for i in range(self.server.containers)]).encode())
        else:
            self.send_error(404)

    def _reply(self, body: bytes, kind: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass  # no request lines in the test output

    def address_string(self) -> str:
        return "unix"  # a Unix socket's peer has no address


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, version: str, containers: int) -> None:
        super().__init__(str(path), _Handler)
        self.version, self.containers = version, containers
        self.seen: list[str] = []


@contextmanager
def fake_daemon(path: Path, version: str = "99.0-fake", containers: int = 0) -> Iterator[_Server]:
    """A stand-in daemon listening on `path` (a socket file) until the block ends."""
    server = _Server(path, version, containers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        path.unlink(missing_ok=True)


def dead_socket(path: Path) -> Path:
    """A socket file nobody listens on, as a stopped daemon leaves behind."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # bound, never listening: a connect is refused
    return path
