"""The gateway's upstream leg (issue 16, part 4): kept-alive connections to a host are reused,
one that the host closed just as a request left is replaced (for a request without a body),
nothing the agent writes can add a header or a request upstream, every framing of an answer
is read, and kept-alive brokered requests share one upstream connection. No Docker: every byte goes
over loopback or a Unix socket."""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import socketserver
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import gateway as gateway_module
from engine.sandbox.ca import CertificateAuthority
from engine.sandbox.gateway import BrokeredSecret, Gateway, GatewayHost, GatewaySpec
from tests.engine.test_gateway_speed import API, PLACEHOLDER, VALUE, Echo, brokered
from tests.engine.test_gateway_speed import echo  # noqa: F401 (a fixture)

HOST = "plain.example.test"


class Dropping(socketserver.StreamRequestHandler):
    """Answers a connection's first request and keeps the connection; on its second request
    it closes without a word, as a server whose idle timeout fired as the request arrived.
    Records every request head and body it read."""

    def handle(self) -> None:
        server: Upstream = self.server  # type: ignore[assignment]
        for number in (1, 2):
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                if not (byte := self.rfile.read(1)):
                    return
                head += byte
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            server.seen.append(head + self.rfile.read(length))
            if number == 2:
                return  # closed, unanswered
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


class Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Dropping)
        self.seen: list[bytes] = []
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def dropping(tmp_path: Path) -> Iterator[tuple[Gateway, Upstream]]:
    upstream = Upstream()
    host = GatewayHost()
    gateway = host.start(GatewaySpec(socket_path=tmp_path / "g.sock", allow=[HOST],
                                     resolve={HOST: f"127.0.0.1:{upstream.server_address[1]}"}))
    yield gateway, upstream
    host.close()
    upstream.shutdown()
    upstream.server_close()


def exchange(gateway: Gateway, requests: list[bytes]) -> list[bytes]:
    """Send each request on one connection to the gateway and read its whole answer."""
    answers = []
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(gateway.spec.socket_path))
        stream = sock.makefile("rb")
        for request in requests:
            sock.sendall(request)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                if not (byte := stream.read(1)):
                    break
                head += byte
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            answers.append(head + stream.read(length))
    return answers


def test_a_kept_alive_connection_closed_as_the_request_left_is_replaced(dropping):
    gateway, upstream = dropping
    get = f"GET http://{HOST}/a HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    first, second = exchange(gateway, [get, get])
    assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"ok")
    # The host dropped the kept-alive connection on the second request: the gateway sends
    # it again on a new connection instead of answering 502.
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"ok"), second
    assert len(upstream.seen) == 3


def test_a_request_with_a_body_is_never_sent_twice(dropping):
    gateway, upstream = dropping
    get = f"GET http://{HOST}/a HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    post = (f"POST http://{HOST}/pay HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\r\n"
            "hello").encode()
    _, second = exchange(gateway, [get, post])
    assert second.startswith(b"HTTP/1.1 502")  # the host may have acted on it: not repeated
    assert [s for s in upstream.seen if s.startswith(b"POST")] == [
        f"POST /pay HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\r\nhello".encode()]


@pytest.mark.parametrize("line", ["X-Test: a\nInjected: yes", "X-Test: a\rInjected: yes",
                                  "X Test: a"])
def test_a_header_cannot_smuggle_another_upstream(dropping, line):
    gateway, upstream = dropping
    answer, = exchange(gateway, [f"GET http://{HOST}/a HTTP/1.1\r\nHost: {HOST}\r\n{line}\r\n\r\n"
                                 .encode()])
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 502")), answer
    assert not any(b"Injected" in s or b"X Test" in s for s in upstream.seen)


def test_a_target_cannot_smuggle_a_header_upstream(dropping):
    gateway, upstream = dropping
    answer, = exchange(gateway, [f"GET http://{HOST}/a\nInjected:yes HTTP/1.1\r\nHost: {HOST}"
                                 f"\r\n\r\n".encode()])
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert not any(line.startswith(b"Injected") for seen in upstream.seen
                   for line in re.split(rb"\r\n|\r|\n", seen))


def test_kept_alive_brokered_requests_share_one_upstream_connection(echo):  # noqa: F811
    """What made a brokered request cheap (1.5-2 ms of the gateway's CPU with a new TLS
    connection each, 0.25-0.3 ms on a kept-alive one): the upstream leg keeps its connection.
    The CPU figure itself is bench/gateway.py's to measure; a timed test here failed on a
    loaded CI machine."""
    gateway, cadata = echo
    request = (f"GET /small HTTP/1.1\r\nHost: {API}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n"
               f"\r\n").encode()
    before = Echo.connections
    with brokered(gateway, cadata) as tls:
        stream = tls.makefile("rb")
        for _ in range(20):
            tls.sendall(request)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += stream.read(1)
            assert head.startswith(b"HTTP/1.1 200") and stream.read(2) == b"ok"
    # None if an earlier test left an idle connection in the pool, else the one it opened.
    assert Echo.connections - before <= 1


def test_the_gateway_runs_on_uvloop_where_it_is_installed():
    uvloop = pytest.importorskip("uvloop")
    host = GatewayHost()
    try:
        assert isinstance(host._running_loop(), uvloop.Loop)
    finally:
        host.close()


def test_without_uvloop_the_gateway_runs_on_asyncios_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(gateway_module, "uvloop", None)  # as where no wheel is built
    upstream = Upstream()
    host = GatewayHost()
    try:
        gateway = host.start(GatewaySpec(socket_path=tmp_path / "g.sock", allow=[HOST],
                                         resolve={HOST: f"127.0.0.1:{upstream.server_address[1]}"}))
        assert type(gateway._loop).__module__.startswith("asyncio")
        answer, = exchange(gateway, [f"GET http://{HOST}/a HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
                                     .encode()])
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
    finally:
        host.close()
        upstream.shutdown()
        upstream.server_close()


def test_a_body_cannot_smuggle_a_second_request_upstream(dropping):
    """A chunked body with a Content-Length beside it: the gateway forwards the body it read
    (the chunks), so a Content-Length it did not check must not frame it upstream."""
    gateway, upstream = dropping
    smuggled = f"GET /smuggled HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    body = "hello" + smuggled
    exchange(gateway, [(f"POST http://{HOST}/a HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n"
                        f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n{body}\r\n0\r\n\r\n")
                       .encode()])
    assert not any(s.startswith(b"GET /smuggled") for s in upstream.seen)


class Canned(socketserver.StreamRequestHandler):
    """Reads one request head and answers the server's canned bytes, then closes."""

    def handle(self) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            if not (byte := self.rfile.read(1)):
                return
            head += byte
        self.wfile.write(self.server.answer)  # type: ignore[attr-defined]


@pytest.mark.parametrize("answer, method, status, body", [
    # 1xx answers before the real one are passed over.
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "GET", 200, b"ok"),
    # No length and no chunks: the body ends where the connection does.
    (b"HTTP/1.0 200 OK\r\n\r\nto the close", "GET", 200, b"to the close"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n"
     b"Trailer: dropped\r\n\r\n", "GET", 200, b"abcde"),
    (b"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", "GET", 404, b""),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "HEAD", 200, b""),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9, 10\r\n\r\nok", "GET", 502, None),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "GET", 200, None),
])
def test_the_upstream_leg_reads_every_framing(tmp_path, answer, method, status, body):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Canned)
    server.daemon_threads, server.answer = True, answer  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host = GatewayHost()
    try:
        gateway = host.start(GatewaySpec(socket_path=tmp_path / "g.sock", allow=[HOST],
                                         resolve={HOST: f"127.0.0.1:{server.server_address[1]}"}))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(gateway.spec.socket_path))
            sock.sendall(f"{method} http://{HOST}/x HTTP/1.1\r\nHost: {HOST}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            response = http.client.HTTPResponse(sock, method=method)  # type: ignore[arg-type]
            response.begin()
            assert response.status == status
            if body is None:  # broken framing: the answer is cut short, never made up
                with contextlib.suppress(http.client.IncompleteRead):
                    response.read()
            else:
                assert response.read() == body
    finally:
        host.close()
        server.shutdown()
        server.server_close()


def test_raw_deflate_is_read_through_for_the_echo_search(tmp_path):
    """`deflate` sent raw (no zlib header), as some servers do, is decoded, searched for the
    key and sent on decoded; the key it holds comes back as the placeholder."""
    ca = CertificateAuthority("Test upstream CA")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    packed = deflate.compress(b"key=" + VALUE.encode()) + deflate.flush()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Canned)
    server.daemon_threads = True
    server.answer = (  # type: ignore[attr-defined]
        b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n%b"
        % (len(packed), packed))
    server.socket = ca.server_context(API).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host = GatewayHost()
    try:
        gateway = host.start(GatewaySpec(
            socket_path=tmp_path / "g.sock", trust=[tmp_path / "ca.pem"],
            resolve={API: f"127.0.0.1:{server.server_address[1]}"},
            secrets=[BrokeredSecret(name="KEY", placeholder=PLACEHOLDER, value=VALUE,
                                    hosts=[API])]))
        with brokered(gateway, gateway.ca_pem) as tls:
            tls.sendall(f"GET /x HTTP/1.1\r\nHost: {API}\r\nConnection: close\r\n\r\n".encode())
            response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            response.begin()
            assert (response.status, response.getheader("Content-Encoding")) == (200, None)
            assert response.read() == b"key=" + PLACEHOLDER.encode()
    finally:
        host.close()
        server.shutdown()
        server.server_close()


def test_a_gzip_bomb_is_decoded_a_piece_at_a_time(tmp_path):
    """300 MB of zeros in 300 KB of gzip from a brokered host: decoded for the echo search in
    pieces, never as one object of the whole (the test reads the answer as it comes)."""
    ca = CertificateAuthority("Test upstream CA")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    zeros = bytes(1 << 20)
    packed = b"".join(packer.compress(zeros) for _ in range(300)) + packer.flush()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Canned)
    server.daemon_threads = True
    server.answer = (  # type: ignore[attr-defined]
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b" % (len(packed), packed))
    server.socket = ca.server_context(API).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host = GatewayHost()
    tracemalloc.start()
    try:
        gateway = host.start(GatewaySpec(
            socket_path=tmp_path / "g.sock", trust=[tmp_path / "ca.pem"],
            resolve={API: f"127.0.0.1:{server.server_address[1]}"},
            secrets=[BrokeredSecret(name="KEY", placeholder=PLACEHOLDER, value=VALUE, hosts=[API])]))
        with brokered(gateway, gateway.ca_pem) as tls:
            tls.settimeout(60)
            tls.sendall(f"GET /x HTTP/1.1\r\nHost: {API}\r\nConnection: close\r\n\r\n".encode())
            response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            response.begin()
            got = 0
            while chunk := response.read(1 << 20):
                got += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        host.close()
        server.shutdown()
        server.server_close()
    assert got == 300 << 20
    assert peak < 100 << 20, f"the gateway held {peak >> 20} MB at once"
