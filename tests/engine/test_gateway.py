"""The egress gateway: allow-list, tunnels, brokered secrets, streaming. No Docker:
every byte goes over loopback or the gateway's Unix socket."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import http.server
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.models import EgressEntry
from engine.sandbox.gateway import (BrokeredSecret, Gateway, GatewayError, GatewayHost,
                                    GatewaySpec, host_matches)

PLACEHOLDER = "proctor-placeholder-TEST_KEY-abc"
VALUE = "real-value-123"
API = "api.example.test"  # brokered: the gateway terminates TLS
OTHER = "other.example.test"  # allowed, not brokered: tunnelled untouched
PLAIN = "plain.example.test"  # allowed, plain HTTP
PLAIN_BROKERED = "plain-key.example.test"  # brokered, plain HTTP


# --- a test CA and stand-in upstreams -----------------------------------------------

class UpstreamCA:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "upstream test CA")])
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def server_context(self, folder: Path, names: list[str]) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
                .sign(self.key, hashes.SHA256()))
        (folder / "leaf.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / "leaf.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(folder / "leaf.pem", folder / "leaf.key")
        return ctx


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, dict(self.headers)))  # type: ignore[attr-defined]
        if self.path.startswith("/sse"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")  # no length: the gateway must chunk it
            self.end_headers()
            for n in range(3):
                self.wfile.write(f"data: event {n}\n\n".encode())
                time.sleep(0.3)
            self.close_connection = True
            return
        body = f"path={self.path};auth={self.headers.get('Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding") == "chunked":
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size + 2)[:-2]
            self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((self.path, dict(self.headers)))  # type: ignore[attr-defined]
        self.send_response(201)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Upstream(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 50 concurrent connects must not overflow the backlog

    def __init__(self, tls: ssl.SSLContext | None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.tls, self.seen = tls, []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def finish_request(self, request, client_address):  # type: ignore[override]
        # The TLS handshake happens in the request's own thread, not in the accept loop.
        if self.tls is None:
            return super().finish_request(request, client_address)
        with self.tls.wrap_socket(request, server_side=True) as wrapped:
            super().finish_request(wrapped, client_address)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        pass  # a tunnel cut by the gateway's close() mid-handshake is expected, not news

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("gw")
    ca = UpstreamCA()
    (folder / "upstream-ca.pem").write_bytes(ca.pem)
    api = Upstream(ca.server_context(folder, [API]))
    other = Upstream(ca.server_context(folder, [OTHER]))
    plain = Upstream(None)
    host = GatewayHost()
    spec = GatewaySpec(
        socket_path=folder / "gateway.sock", allow=[OTHER, PLAIN],
        secrets=[BrokeredSecret(name="TEST_KEY", placeholder=PLACEHOLDER, value=VALUE,
                                hosts=[API, PLAIN_BROKERED])],
        resolve={API: api.address, OTHER: other.address, PLAIN: plain.address,
                 PLAIN_BROKERED: plain.address},
        trust=[folder / "upstream-ca.pem"])
    gateway = host.start(spec)
    yield {"gateway": gateway, "api": api, "other": other, "plain": plain, "ca": ca, "folder": folder}
    host.close()
    for server in (api, other, plain):
        server.shutdown()
        server.server_close()


# --- a client in the sandbox's place --------------------------------------------------

def connect(gateway: Gateway, host: str, cadata: bytes) -> ssl.SSLSocket:
    """CONNECT through the gateway's socket, then TLS verified against `cadata`."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(gateway.spec.socket_path))
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    ctx = ssl.create_default_context(cadata=cadata.decode())
    if cadata != gateway.ca_pem:
        return ctx.wrap_socket(sock, server_hostname=host)
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # what Python 3.13+ clients check by default
    ctx.set_alpn_protocols(["h2", "http/1.1"])  # as curl and node offer
    tls = ctx.wrap_socket(sock, server_hostname=host)
    assert tls.selected_alpn_protocol() == "http/1.1"
    return tls


def get(sock: socket.socket, path: str, host: str, headers: str = "") -> http.client.HTTPResponse:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
    response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
    response.begin()
    return response


def raw(gateway: Gateway, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(gateway.spec.socket_path))
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def logged(gateway: Gateway, **match: object) -> list[EgressEntry]:
    """The entries matching `match`, once there are any: an entry is written when its
    response is finished, which can be a moment after the client has read it all."""
    deadline = time.monotonic() + 5
    while True:
        found = [e for e in gateway.entries() if all(getattr(e, k) == v for k, v in match.items())]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


# --- the tests ------------------------------------------------------------------------

def test_host_patterns():
    assert host_matches("API.example.test.", ["api.example.test"])
    assert host_matches("a.b.example.test", ["*.example.test"])
    assert not host_matches("example.test", ["*.example.test"])
    assert not host_matches("evilexample.test", ["*.example.test", "example.tes"])


def test_socket_is_open_to_the_sandbox_root(world):
    assert (world["gateway"].spec.socket_path.stat().st_mode & 0o777) == 0o666


def test_brokered_secret_is_swapped_in_headers_and_query(world):
    gateway, api = world["gateway"], world["api"]
    with connect(gateway, API, gateway.ca_pem) as sock:
        response = get(sock, f"/v1/models?key={PLACEHOLDER}&x=1", API,
                       f"Authorization: Bearer {PLACEHOLDER}\r\n")
        body = response.read().decode()
    assert response.status == 200
    assert body == f"path=/v1/models?key={VALUE}&x=1;auth=Bearer {VALUE}"
    path, headers = api.seen[-1]
    assert VALUE in path and headers["Authorization"] == f"Bearer {VALUE}" and headers["Host"] == API
    [entry] = logged(gateway, host=API, path="/v1/models")
    assert (entry.method, entry.path, entry.allowed, entry.brokered, entry.status) == (
        "GET", "/v1/models", True, ["TEST_KEY"], 200)
    assert entry.bytes == len(body)
    assert VALUE not in repr(gateway.entries()) and VALUE not in repr(gateway.spec)


def test_no_log_holds_the_real_value(world, caplog):
    gateway = world["gateway"]
    with caplog.at_level(logging.DEBUG):
        with connect(gateway, API, gateway.ca_pem) as sock:
            get(sock, f"/logged?key={PLACEHOLDER}", API, f"X-Key: {PLACEHOLDER}\r\n").read()
        logged(gateway, path="/logged")
    assert world["api"].seen[-1][0] == f"/logged?key={VALUE}"
    assert VALUE not in caplog.text


def test_basic_credentials_and_url_userinfo_are_swapped(world):
    gateway, api = world["gateway"], world["api"]
    basic = base64.b64encode(f"x:{PLACEHOLDER}".encode()).decode()
    with connect(gateway, API, gateway.ca_pem) as sock:
        get(sock, "/repo.git", API, f"Authorization: Basic {basic}\r\n").read()
    assert api.seen[-1][1]["Authorization"] == "Basic " + base64.b64encode(f"x:{VALUE}".encode()).decode()
    # Plain HTTP to a brokered host: userinfo in the URL becomes swapped Basic credentials.
    out = raw(gateway, f"GET http://x:{PLACEHOLDER}@{PLAIN_BROKERED}/u?key={PLACEHOLDER} HTTP/1.1\r\n"
                       f"Host: {PLAIN_BROKERED}\r\nConnection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200")
    path, headers = world["plain"].seen[-1]
    assert path == f"/u?key={VALUE}"
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"x:{VALUE}".encode()).decode()
    assert logged(gateway, host=PLAIN_BROKERED)[-1].brokered == ["TEST_KEY"]


def test_host_not_allowed_gets_403_and_is_logged(world):
    gateway = world["gateway"]
    out = raw(gateway, b"CONNECT evil.example.test:443 HTTP/1.1\r\nHost: evil.example.test:443\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403") and b"not in the allow-list" in out
    [entry] = logged(gateway, host="evil.example.test", method="CONNECT")
    assert (entry.allowed, entry.status) == (False, 403)
    out = raw(gateway, b"GET http://evil.example.test/x HTTP/1.1\r\nHost: evil.example.test\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403")
    [entry] = logged(gateway, host="evil.example.test", method="GET")
    assert (entry.path, entry.allowed, entry.status) == ("/x", False, 403)


def test_allowed_host_is_tunnelled_untouched(world):
    gateway, other = world["gateway"], world["other"]
    # Verified against the upstream's own CA: the gateway did not terminate TLS.
    with connect(gateway, OTHER, world["ca"].pem) as sock:
        response = get(sock, f"/t?key={PLACEHOLDER}", OTHER, f"Authorization: Bearer {PLACEHOLDER}\r\n")
        assert response.status == 200
        response.read()
    path, headers = other.seen[-1]
    assert PLACEHOLDER in path and headers["Authorization"] == f"Bearer {PLACEHOLDER}"
    [entry] = logged(gateway, host=OTHER)  # written when the tunnel closes
    assert (entry.method, entry.path, entry.status, entry.brokered) == ("CONNECT", "", 200, [])
    assert entry.bytes > 0


def test_plain_http_request_is_forwarded(world):
    gateway, plain = world["gateway"], world["plain"]
    out = raw(gateway, f"GET http://{PLAIN}/hello?key={PLACEHOLDER} HTTP/1.1\r\nHost: {PLAIN}\r\n"
                       f"Connection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(f"path=/hello?key={PLACEHOLDER};auth=None".encode())
    assert plain.seen[-1][0] == f"/hello?key={PLACEHOLDER}"  # not a brokered host: unchanged
    [entry] = logged(gateway, host=PLAIN, path="/hello")
    assert (entry.method, entry.path, entry.status, entry.allowed) == ("GET", "/hello", 200, True)


def test_post_bodies_are_forwarded_and_never_swapped(world):
    gateway = world["gateway"]
    body = f'{{"key": "{PLACEHOLDER}"}}'.encode()
    with connect(gateway, API, gateway.ca_pem) as sock:  # chunked, then Content-Length, one tunnel
        sock.sendall(f"POST /echo HTTP/1.1\r\nHost: {API}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                     + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
        response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
        response.begin()
        assert (response.status, response.read()) == (201, body)
        sock.sendall(f"POST /echo HTTP/1.1\r\nHost: {API}\r\nContent-Length: {len(body)}\r\n"
                     f"Expect: 100-continue\r\n\r\n".encode())
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
        response.begin()
        assert (response.status, response.read()) == (201, body)


def test_server_sent_events_arrive_as_they_are_sent(world):
    gateway = world["gateway"]
    with connect(gateway, API, gateway.ca_pem) as sock:
        sock.sendall(f"GET /sse HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
        arrivals, data = [], b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, "the gateway closed before the last chunk"
            data += chunk
            if b"data:" in chunk:
                arrivals.append(time.monotonic())
    assert b"Transfer-Encoding: chunked" in data
    assert [line for line in data.split(b"\n") if line.startswith(b"data:")] == [
        b"data: event 0", b"data: event 1", b"data: event 2"]
    assert len(arrivals) == 3
    assert arrivals[1] - arrivals[0] > 0.15 and arrivals[2] - arrivals[1] > 0.15


def test_keep_alive_serves_two_requests_on_one_tunnel(world):
    gateway = world["gateway"]
    with connect(gateway, API, gateway.ca_pem) as sock:
        assert get(sock, "/one", API).read() == b"path=/one;auth=None"
        assert get(sock, "/two", API).read() == b"path=/two;auth=None"
    assert logged(gateway, path="/two") and [e.path for e in gateway.entries() if e.path in ("/one", "/two")] == [
        "/one", "/two"]


def test_fifty_concurrent_requests_all_succeed(world):
    gateway = world["gateway"]

    def one(n: int) -> bytes:
        with connect(gateway, API, gateway.ca_pem) as sock:
            return get(sock, f"/n{n}", API, f"Authorization: Bearer {PLACEHOLDER}\r\n").read()

    with ThreadPoolExecutor(50) as pool:
        bodies = list(pool.map(one, range(50)))
    assert bodies == [f"path=/n{n};auth=Bearer {VALUE}".encode() for n in range(50)]


def test_malformed_request_gets_400(world):
    assert raw(world["gateway"], b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(world["gateway"], b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_unreachable_upstream_gets_502_without_the_secret(tmp_path):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    host = GatewayHost()
    try:
        gateway = host.start(GatewaySpec(
            socket_path=tmp_path / "g.sock", allow=[PLAIN],
            secrets=[BrokeredSecret(name="TEST_KEY", placeholder=PLACEHOLDER, value=VALUE, hosts=[API])],
            resolve={API: f"127.0.0.1:{port}", PLAIN: f"127.0.0.1:{port}"}))
        out = raw(gateway, f"GET http://{API}/x?key={PLACEHOLDER} HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
        assert out.startswith(b"HTTP/1.1 502") and VALUE.encode() not in out
        assert raw(gateway, f"CONNECT {PLAIN}:443 HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 502")
        assert logged(gateway, host=PLAIN)
        assert [(e.host, e.status) for e in gateway.entries()] == [(API, 502), (PLAIN, 502)]
        gateway.close()
        assert not (tmp_path / "g.sock").exists()
    finally:
        host.close()


def test_start_failure_is_one_sentence(tmp_path):
    host = GatewayHost()
    try:
        with pytest.raises(GatewayError, match="does not exist"):
            host.start(GatewaySpec(socket_path=tmp_path / "missing" / "g.sock"))
        with pytest.raises(GatewayError, match="trusted CA file"):
            host.start(GatewaySpec(socket_path=tmp_path / "g.sock", trust=[tmp_path / "nope.pem"]))
    finally:
        host.close()


def test_close_ends_open_tunnels(tmp_path, world):
    host = GatewayHost()
    gateway = host.start(GatewaySpec(socket_path=tmp_path / "g.sock", allow=[OTHER],
                                     resolve={OTHER: world["other"].address}))
    sock = connect(gateway, OTHER, world["ca"].pem)  # an idle tunnel, left open
    gateway.close()
    assert sock.recv(1) == b""  # closed from the gateway's side
    sock.close()
    host.close()
