"""The egress gateway near wire speed (issue 16, part 4): a CONNECT tunnel is spliced in
the kernel rather than copied through Python, and still carries every byte both ways, in
order, with half-closes passed on. No Docker: every byte goes over loopback or the
gateway's Unix socket."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import os
import random
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox.ca import CertificateAuthority
from engine.sandbox.gateway import BrokeredSecret, Gateway, GatewayHost, GatewaySpec, _Unswap
from tests.engine.test_gateway import connect

HOST = "files.example.test"
SENT = random.Random(1).randbytes(3 << 20)  # what the sandbox uploads
ANSWER = random.Random(2).randbytes(9 << 20)  # what the upstream sends back


class Sink(socketserver.StreamRequestHandler):
    """Reads what the client sends until its half-close, then answers the digest of it and
    ANSWER, and closes: a tunnel that loses the half-close or a byte fails here."""

    def handle(self) -> None:
        digest = hashlib.sha256()
        while data := self.request.recv(1 << 16):
            digest.update(data)
        self.request.sendall(digest.digest() + ANSWER)


@pytest.fixture(scope="module")
def upstream() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Sink)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def gateway(tmp_path: Path, upstream: socketserver.ThreadingTCPServer) -> Iterator[Gateway]:
    host = GatewayHost()
    port = upstream.server_address[1]
    yield host.start(GatewaySpec(socket_path=tmp_path / "g.sock", allow=[HOST],
                                 resolve={HOST: f"127.0.0.1:{port}"}))
    host.close()


@pytest.fixture
def spliced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each real `os.splice` call moved (the call itself is the kernel's)."""
    moved: list[int] = []
    real = os.splice

    def counting(*args, **kwargs) -> int:  # type: ignore[no-untyped-def]
        n = real(*args, **kwargs)
        moved.append(n)
        return n

    monkeypatch.setattr(os, "splice", counting)
    return moved


def through(gateway: Gateway, early: bool = False) -> bytes:
    """CONNECT, upload SENT, half-close, and read the answer to the end."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(str(gateway.spec.socket_path))
        connect = f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode()
        # A client may send its first bytes before the 200 arrives: they must go first.
        sock.sendall(connect + SENT[:1000] if early else connect)
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        sock.sendall(SENT[1000:] if early else SENT)
        sock.shutdown(socket.SHUT_WR)
        got = bytearray()
        while data := sock.recv(1 << 20):
            got += data
        return bytes(got)


def entry_bytes(gateway: Gateway) -> int:
    [entry] = [e for e in gateway.entries() if e.host == HOST]
    assert (entry.method, entry.status, entry.allowed) == ("CONNECT", 200, True)
    return entry.bytes


@pytest.mark.skipif(not hasattr(os, "splice"), reason="splice is Linux's")
def test_a_tunnel_is_spliced_in_the_kernel_and_loses_nothing(gateway: Gateway, spliced: list[int]):
    got = through(gateway)
    assert got[:32] == hashlib.sha256(SENT).digest()  # the upload arrived whole, then its end
    assert got[32:] == ANSWER
    total = len(SENT) + 32 + len(ANSWER)
    # Both ways, every byte moved by splice: into the pipe and out of it again.
    assert sum(spliced) == 2 * total
    gateway.close()  # the entry is written as the tunnel closes
    assert entry_bytes(gateway) == total


def test_bytes_sent_before_the_200_go_first(gateway: Gateway):
    got = through(gateway, early=True)
    assert got[:32] == hashlib.sha256(SENT).digest() and got[32:] == ANSWER


def test_without_splice_a_tunnel_copies_and_loses_nothing(gateway: Gateway,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delattr(os, "splice", raising=False)  # as on macOS
    got = through(gateway)
    assert got[:32] == hashlib.sha256(SENT).digest() and got[32:] == ANSWER
    gateway.close()
    assert entry_bytes(gateway) == len(SENT) + 32 + len(ANSWER)


# --- a brokered download, read from upstream in big steps ------------------------------

API = "api.example.test"
PLACEHOLDER = "proctor-placeholder-KEY-0000"
VALUE = "real-key-0123456789"
BODY = 3 << 20
# Where the upstream writes the real value back into its answer: across the boundaries of a
# TLS record (16 KiB), of httpcore's read (64 KiB) and of the gateway's read (256 KiB).
ECHOES = sorted({k * step - cut for step in (16 << 10, 64 << 10, 256 << 10) for k in (1, 3, 7)
                 for cut in (0, 1, 9, 18)} | {BODY - len(VALUE)})


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers 3 MiB of random bytes with the Authorization value it got written in at ECHOES."""
    protocol_version = "HTTP/1.1"

    connections = 0  # how many connections the upstream has accepted

    def setup(self) -> None:
        super().setup()
        Echo.connections += 1
        # As real servers do: a head and body written apart would wait on Nagle and the
        # gateway's delayed ACK, 40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        if self.path == "/small":  # a small answer on a kept-alive connection
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if self.path == "/closes":  # answers, then closes without saying so: not reusable
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            self.close_connection = True
            return
        if self.path == "/cut":  # promises 3 MiB, sends 300 KiB and closes
            self.send_response(200)
            self.send_header("Content-Length", str(BODY))
            self.end_headers()
            self.wfile.write(bytes(300 << 10))
            self.close_connection = True
            return
        got = (self.headers["Authorization"] or "").removeprefix("Bearer ").encode()
        body = bytearray(random.Random(3).randbytes(BODY))
        for at in ECHOES:
            body[at:at + len(got)] = got
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, bytes]]:
    folder = tmp_path_factory.mktemp("gw-speed")
    ca = CertificateAuthority("Test upstream CA")
    (folder / "ca.pem").write_bytes(ca.cert_pem)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.socket = ca.server_context(API).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = GatewayHost()
    gateway = host.start(GatewaySpec(
        socket_path=folder / "g.sock", resolve={API: f"127.0.0.1:{server.server_address[1]}"},
        trust=[folder / "ca.pem"],
        secrets=[BrokeredSecret(name="KEY", placeholder=PLACEHOLDER, value=VALUE, hosts=[API])]))
    yield gateway, gateway.ca_pem
    host.close()
    server.shutdown()
    server.server_close()


def brokered(gateway: Gateway, cadata: bytes) -> ssl.SSLSocket:
    """CONNECT to the brokered host, then TLS verified against the gateway's CA."""
    return connect(gateway, API, cadata)


def test_a_pooled_upstream_connection_the_host_closed_is_not_reused(echo: tuple[Gateway, bytes]):
    gateway, cadata = echo
    with brokered(gateway, cadata) as tls:
        for _ in range(3):
            tls.sendall(f"GET /closes HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
            response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            response.begin()
            assert (response.status, response.read()) == (200, b"ok")
            time.sleep(0.2)  # the upstream's close reaches the gateway's idle connection


def test_an_upstream_that_breaks_mid_answer_ends_the_connection(echo: tuple[Gateway, bytes]):
    gateway, cadata = echo
    with brokered(gateway, cadata) as tls:
        tls.sendall(f"GET /cut HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
        response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
        response.begin()
        with pytest.raises(http.client.IncompleteRead):
            response.read()
    assert [e.status for e in gateway.entries() if e.path == "/cut"] == [200]


def test_a_brokered_download_never_hands_the_key_to_the_sandbox(echo: tuple[Gateway, bytes],
                                                               monkeypatch: pytest.MonkeyPatch):
    gateway, cadata = echo
    steps: list[int] = []  # the size of each piece of the answer as the unswap gets it
    feed = _Unswap.feed

    def counted(self: _Unswap, data: bytes) -> bytes:
        steps.append(len(data))
        return feed(self, data)

    monkeypatch.setattr(_Unswap, "feed", counted)
    with brokered(gateway, cadata) as tls:
        for _ in range(2):  # the second on the kept-alive connection to the upstream
            tls.sendall(f"GET /d HTTP/1.1\r\nHost: {API}\r\nAuthorization: Bearer {PLACEHOLDER}"
                        f"\r\n\r\n".encode())
            response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            response.begin()
            body = response.read()
            assert response.status == 200
            assert VALUE.encode() not in body
            # Every echo came back as the placeholder, and nothing else moved.
            expected = bytearray(random.Random(3).randbytes(BODY))
            for at in ECHOES:
                expected[at:at + len(VALUE)] = VALUE.encode()
            assert body == bytes(expected).replace(VALUE.encode(), PLACEHOLDER.encode())
    # An entry is logged once the answer's last byte has passed, which the client may read a
    # moment before: wait for the second (one full run saw only the first).
    deadline = time.monotonic() + 10
    while len(entries := [e for e in gateway.entries() if e.path == "/d"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(e.status, e.brokered) for e in entries] == [(200, ["KEY"])] * 2
    # Read from the upstream in big steps, not a TLS record (16 KiB) at a time.
    assert sum(steps) == 2 * BODY and sum(steps) / len(steps) > 48 << 10
