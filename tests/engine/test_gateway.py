"""The egress gateway: allow-list, tunnels, brokered secrets, streaming. No Docker:
every byte goes over loopback or the gateway's Unix socket."""

from __future__ import annotations

import base64
import datetime as dt
import errno
import gzip
import http.client
import http.server
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.models import EgressEntry
from engine.sandbox.gateway import (BrokeredSecret, Gateway, GatewayError, GatewayHost,
                                    GatewaySpec, _echo_forms, _Unswap, address_refused,
                                    host_matches)

PLACEHOLDER = "proctor-placeholder-TEST_KEY-abc"
VALUE = "real-value-123"
API = "api.example.test"  # brokered: the gateway terminates TLS
OTHER = "other.example.test"  # allowed, not brokered: tunnelled untouched
PLAIN = "plain.example.test"  # allowed, plain HTTP
PLAIN_BROKERED = "plain-key.example.test"  # brokered, plain HTTP
# A second secret whose value changes under JSON escaping and URL encoding.
SPECIAL_PLACEHOLDER = "proctor-placeholder-SPECIAL_KEY-def"
SPECIAL = 'sp/ec+ial"val ue=9'


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every connection this module's tests (and the gateway under test) open stays on
    loopback or a Unix socket: an attempt elsewhere, or a name lookup that would ask a
    DNS server, is refused before a packet leaves, and recorded for the test to see."""
    attempts: list[str] = []
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def loopback(host: str) -> bool:
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def guarded_connect(self: socket.socket, address):  # type: ignore[no-untyped-def]
        if self.family == socket.AF_UNIX or loopback(address[0]):
            return connect(self, address)
        attempts.append(address[0])
        raise OSError(errno.ENETUNREACH, "the test guard refused a connection off loopback")

    def guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = host.decode() if isinstance(host, bytes) else str(host)
        try:
            ipaddress.ip_address(name.split("%")[0])  # numeric: no lookup leaves the machine
        except ValueError:
            if name != "localhost":  # /etc/hosts
                attempts.append(name)
                raise socket.gaierror(socket.EAI_NONAME, "the test guard refused a DNS lookup")
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    return attempts


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
        if self.path.startswith("/echo"):
            return self.echo()
        if self.path.startswith("/sse"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")  # no length: the gateway must chunk it
            self.end_headers()
            # Lockstep: each event is sent once the client has read the one before, so an
            # event the gateway holds back stops the stream (`sse_waits` says which).
            read = getattr(self.server, "sse_read", [])
            for n in range(3):
                self.wfile.write(f"data: event {n}\n\n".encode())
                self.wfile.flush()
                if n < len(read) and not read[n].wait(5):
                    self.server.sse_waits.append(n)  # type: ignore[attr-defined]
            self.close_connection = True
            return
        body = f"path={self.path};auth={self.headers.get('Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def echo(self) -> None:
        """A hostile upstream: the request's path and headers back, in the body and in
        headers, 5 bytes at a time so that every value is cut across chunks."""
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        if "gzip" in self.path:  # whatever the client asked for
            body = gzip.compress(body)
        self.send_response(200)
        self.send_header("X-Echo-Authorization", self.headers.get("Authorization", ""))
        self.send_header("X-Echo-Special", self.headers.get("X-Special", ""))
        if "gzip" in self.path or "brotli" in self.path:  # brotli: a coding the gateway cannot read
            self.send_header("Content-Encoding", "gzip" if "gzip" in self.path else "br")
        if "length" in self.path:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        for n in range(0, len(body), 5):
            self.wfile.write(body[n:n + 5])
            time.sleep(0.002)

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

    def __init__(self, tls: ssl.SSLContext | None, ip: str = "127.0.0.1", port: int = 0):
        self.address_family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        super().__init__((ip, port), Handler)
        self.tls, self.seen, self.ip = tls, [], ip
        # A short poll: shutdown() waits for it, and a test closes several servers.
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def finish_request(self, request, client_address):  # type: ignore[override]
        # The TLS handshake happens in the request's own thread, not in the accept loop.
        if self.tls is None:
            return super().finish_request(request, client_address)
        with self.tls.wrap_socket(request, server_side=True) as wrapped:
            super().finish_request(wrapped, client_address)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        pass  # a tunnel cut by the gateway's close() mid-handshake is expected, not news

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def address(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


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
                                hosts=[API, PLAIN_BROKERED]),
                 BrokeredSecret(name="SPECIAL_KEY", placeholder=SPECIAL_PLACEHOLDER, value=SPECIAL,
                                hosts=[API])],
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
    # The upstream echoed the real value; the agent reads its placeholder back.
    assert body == f"path=/v1/models?key={PLACEHOLDER}&x=1;auth=Bearer {PLACEHOLDER}"
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
    # URL userinfo (as git sends it to a proxy) becomes swapped Basic credentials.
    out = raw(gateway, f"GET https://x:{PLACEHOLDER}@{API}/u?key={PLACEHOLDER} HTTP/1.1\r\n"
                       f"Host: {API}\r\nConnection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200")
    path, headers = api.seen[-1]
    assert path == f"/u?key={VALUE}"
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"x:{VALUE}".encode()).decode()
    assert logged(gateway, host=API, path="/u")[-1].brokered == ["TEST_KEY"]


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
    gateway, api = world["gateway"], world["api"]
    api.sse_read, api.sse_waits = [threading.Event(), threading.Event()], []  # events 0 and 1
    with connect(gateway, API, gateway.ca_pem) as sock:
        sock.sendall(f"GET /sse HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, "the gateway closed before the last chunk"
            data += chunk
            for n, read in enumerate(api.sse_read):  # tell the upstream what arrived
                if f"data: event {n}".encode() in data:
                    read.set()
    assert b"Transfer-Encoding: chunked" in data
    assert [line for line in data.split(b"\n") if line.startswith(b"data:")] == [
        b"data: event 0", b"data: event 1", b"data: event 2"]
    # Each event reached the client while the upstream still held the next one back.
    assert api.sse_waits == [], f"the gateway held back events {api.sse_waits} until more came"


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
    assert bodies == [f"path=/n{n};auth=Bearer {PLACEHOLDER}".encode() for n in range(50)]


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
        out = raw(gateway, f"GET https://{API}/x?key={PLACEHOLDER} HTTP/1.1\r\nHost: {API}\r\n\r\n".encode())
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


def test_gateways_trusting_the_same_files_share_a_context_until_a_file_changes(tmp_path):
    """Loading the system's CAs costs tens of milliseconds a trial; a trust file replaced
    between batches is still loaded again."""
    path = tmp_path / "upstream-ca.pem"
    first, second = UpstreamCA(), UpstreamCA()
    path.write_bytes(first.pem)
    host = GatewayHost()
    try:
        a = host.start(GatewaySpec(socket_path=tmp_path / "a.sock", trust=[path]))
        b = host.start(GatewaySpec(socket_path=tmp_path / "b.sock", trust=[path]))
        assert a._upstream_tls is b._upstream_tls
        path.write_bytes(second.pem + b"\n")  # another CA (and a size of its own)
        c = host.start(GatewaySpec(socket_path=tmp_path / "c.sock", trust=[path]))
        assert c._upstream_tls is not a._upstream_tls
        serials = {int(cert["serialNumber"], 16) for cert in c._upstream_tls.get_ca_certs()}
        assert second.cert.serial_number in serials and first.cert.serial_number not in serials
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


# --- the host's own addresses (issue 8, item 4) -----------------------------------------

@pytest.fixture
def services():
    """The host's own services, which no allow entry may reach unless [gateway] private
    names them: two on 127.0.0.1, one on 127.0.0.2 at the first one's port, one on ::1."""
    first = Upstream(None)
    found = {"first": first, "second": Upstream(None), "other_ip": Upstream(None, "127.0.0.2", first.port),
             "v6": Upstream(None, "::1")}
    yield found
    for server in found.values():
        server.close()


@pytest.fixture
def start(tmp_path: Path):
    """Start a gateway of its own for one test; all are closed at its end."""
    host = GatewayHost()

    def started(**spec: object) -> Gateway:
        return host.start(GatewaySpec(socket_path=tmp_path / f"g{len(host._gateways)}.sock", **spec))

    yield started
    host.close()


def test_address_refused_knows_every_private_range():
    for ip in ["127.0.0.1", "127.8.9.10", "::1", "169.254.169.254", "fe80::1", "10.1.2.3", "172.16.0.1",
               "172.31.255.255", "192.168.1.1", "100.64.0.1", "100.127.255.254", "fc00::1", "fd12:3456::1",
               "0.0.0.0", "::", "224.0.0.251", "239.255.255.250", "ff02::1", "255.255.255.255",
               "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:7f00:1::",
               "fec0::1"]:
        for port in (80, 443):
            assert address_refused(ip, port, set()), ip
    for ip in ["93.184.216.34", "2606:2800:220:1::1", "100.128.0.1", "172.32.0.1"]:
        assert address_refused(ip, 443, set()) is None, ip
        assert address_refused(ip, 80, set()) is None, ip
        assert "port 22" in (address_refused(ip, 22, set()) or ""), ip
    private = {(ipaddress.ip_address("127.0.0.1"), 8080), (ipaddress.ip_address("93.184.216.34"), 8443)}
    assert address_refused("127.0.0.1", 8080, private) is None
    assert address_refused("::ffff:127.0.0.1", 8080, private) is None  # the same address, written as v6
    assert address_refused("127.0.0.1", 8081, private)
    assert address_refused("127.0.0.2", 8080, private)
    assert address_refused("93.184.216.34", 8443, private) is None
    assert "loopback" in (address_refused("127.0.0.1", 443, set()) or "")


def test_allow_localhost_does_not_reach_the_hosts_own_services(start, services):
    gateway = start(allow=["localhost", "127.0.0.1", "::1", "0.0.0.0"])
    first, v6 = services["first"], services["v6"]
    attempts = [
        f"GET http://localhost:{first.port}/admin HTTP/1.1\r\nHost: localhost\r\n\r\n",
        f"GET http://127.0.0.1:{first.port}/admin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        f"GET http://[::1]:{v6.port}/admin HTTP/1.1\r\nHost: [::1]\r\n\r\n",
        f"CONNECT localhost:{first.port} HTTP/1.1\r\n\r\n",
        f"CONNECT 127.0.0.1:{first.port} HTTP/1.1\r\n\r\n",
        f"CONNECT [::1]:{v6.port} HTTP/1.1\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n",  # port 80 on the host
    ]
    for request in attempts:
        out = raw(gateway, request.encode())
        assert out.startswith(b"HTTP/1.1 403") and b"loopback" in out, (request, out)
    assert first.seen == [] and v6.seen == []
    entries = logged(gateway, allowed=False)
    assert len(entries) == len(attempts)
    assert all(e.status == 403 and "loopback" in (e.reason or "") for e in entries), entries


def test_private_addresses_are_refused_before_any_connection(start, loopback_only):
    # The cloud metadata service, a LAN host, a ULA and CGNAT: the test guard stops any
    # connection there; the gateway must not even try.
    gateway = start(allow=["169.254.169.254", "10.1.2.3", "fd00::1", "100.64.0.1"])
    for request in ["GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
                    "CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n",
                    "CONNECT [fd00::1]:443 HTTP/1.1\r\n\r\n",
                    "GET http://100.64.0.1/ HTTP/1.1\r\nHost: 100.64.0.1\r\n\r\n"]:
        out = raw(gateway, request.encode())
        assert out.startswith(b"HTTP/1.1 403"), (request, out)
    assert loopback_only == []
    reasons = [e.reason for e in logged(gateway, allowed=False)]
    assert len(reasons) == 4 and all("private" in (r or "") or "link-local" in (r or "") for r in reasons), reasons


def test_private_lets_exactly_one_address_through(start, services):
    first, second, other_ip = services["first"], services["second"], services["other_ip"]
    gateway = start(allow=["localhost", "127.0.0.2"], private=[f"127.0.0.1:{first.port}"])
    out = raw(gateway, f"GET http://localhost:{first.port}/ok HTTP/1.1\r\nHost: localhost:{first.port}\r\n"
                       f"Connection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200") and first.seen[-1][0] == "/ok"
    with socket.socket(socket.AF_UNIX) as sock:  # a tunnel to the same address
        sock.settimeout(10)
        sock.connect(str(gateway.spec.socket_path))
        sock.sendall(f"CONNECT localhost:{first.port} HTTP/1.1\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        assert get(sock, "/tunnelled", "localhost").read() == b"path=/tunnelled;auth=None"
    for request in [f"GET http://localhost:{second.port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n",  # other port
                    f"CONNECT localhost:{second.port} HTTP/1.1\r\n\r\n",
                    f"GET http://127.0.0.2:{first.port}/ HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n"]:  # other ip
        assert raw(gateway, request.encode()).startswith(b"HTTP/1.1 403"), request
    assert second.seen == [] and other_ip.seen == []


def test_the_checked_address_is_the_one_connected(start, services, monkeypatch, loopback_only):
    """DNS rebinding: a name that answers a vetted address to the check and another to the
    connection. The gateway resolves once and connects to the address it checked."""
    first, other_ip = services["first"], services["other_ip"]
    answers = iter(["127.0.0.1"] + ["127.0.0.2"] * 10)
    guarded = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host in ("rebind.example.test", b"rebind.example.test"):
            host = next(answers)
        return guarded(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    gateway = start(allow=["rebind.example.test"], private=[f"127.0.0.1:{first.port}"])
    out = raw(gateway, f"GET http://rebind.example.test:{first.port}/r HTTP/1.1\r\n"
                       f"Host: rebind.example.test:{first.port}\r\nConnection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200"), out
    assert first.seen[-1][0] == "/r" and first.seen[-1][1]["Host"] == f"rebind.example.test:{first.port}"
    assert other_ip.seen == []
    # The next lookup answers 127.0.0.2, which is not in private: refused, not connected.
    assert raw(gateway, f"CONNECT rebind.example.test:{first.port} HTTP/1.1\r\n\r\n".encode()).startswith(
        b"HTTP/1.1 403")
    assert other_ip.seen == []


# --- what a brokered host sends back (issue 8, item 9) -----------------------------------

def fetch(sock: socket.socket, request: str) -> tuple[http.client.HTTPResponse, bytes, str]:
    """Send one request and read the whole answer: the response, its decoded body and
    its head as text (the raw bytes would hide a value cut by chunk framing)."""
    sock.sendall(request.encode())
    response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
    response.begin()
    body = response.read()
    head = "\n".join(f"{k}: {v}" for k, v in response.getheaders())
    return response, body, head


def leaked(text: str) -> list[str]:
    """Every form of a real value found in `text`."""
    forms = {VALUE, SPECIAL, json.dumps(SPECIAL)[1:-1], quote(SPECIAL, safe=""),
             base64.b64encode(f"x:{VALUE}".encode()).decode(), base64.b64encode(VALUE.encode()).decode()[:16]}
    return [f for f in forms if f in text]


@pytest.mark.parametrize("path", ["/echo-streamed", "/echo-length", "/echo-gzip"])
def test_an_echoing_upstream_hands_back_only_placeholders(world, path):
    gateway, api = world["gateway"], world["api"]
    with connect(gateway, API, gateway.ca_pem) as sock:
        response, body, head = fetch(
            sock, f"GET {path}?key={PLACEHOLDER}&s={SPECIAL_PLACEHOLDER} HTTP/1.1\r\n"
                  f"Host: {API}\r\nAuthorization: Bearer {PLACEHOLDER}\r\nX-Special: {SPECIAL_PLACEHOLDER}\r\n"
                  f"Accept-Encoding: gzip, deflate\r\n\r\n")
    sent_path, sent_headers = api.seen[-1]
    assert VALUE in sent_path and quote(SPECIAL, safe="") in sent_path  # the upstream had both values …
    assert sent_headers["X-Special"] == SPECIAL
    assert sent_headers["Accept-Encoding"] == "identity"  # … and was asked for a body the swap can read
    assert response.status == 200 and response.getheader("Content-Encoding") is None
    # A small body of known length is swapped back whole and keeps a (new) length; others stream.
    assert response.getheader("Content-Length") == (str(len(body)) if "length" in path else None)
    text = body.decode()
    assert leaked(text) == [] and leaked(head) == []  # … and the agent has neither
    echoed = json.loads(text)
    assert echoed["path"] == f"{path}?key={PLACEHOLDER}&s={SPECIAL_PLACEHOLDER}"
    assert echoed["headers"]["Authorization"] == f"Bearer {PLACEHOLDER}"
    assert echoed["headers"]["X-Special"] == SPECIAL_PLACEHOLDER
    assert response.getheader("X-Echo-Authorization") == f"Bearer {PLACEHOLDER}"
    assert response.getheader("X-Echo-Special") == SPECIAL_PLACEHOLDER
    [entry] = logged(gateway, path=path)
    assert entry.brokered == ["SPECIAL_KEY", "TEST_KEY"] and entry.bytes == len(body)


def test_an_answer_the_gateway_cannot_read_never_reaches_the_agent(world):
    gateway = world["gateway"]
    with connect(gateway, API, gateway.ca_pem) as sock:
        response, body, _ = fetch(sock, f"GET /echo-brotli HTTP/1.1\r\nHost: {API}\r\n"
                                        f"Authorization: Bearer {PLACEHOLDER}\r\n\r\n")
    assert response.status == 502 and b"br encoding" in body and VALUE.encode() not in body
    assert logged(gateway, path="/echo-brotli")[0].status == 502


def test_echoed_basic_credentials_come_back_as_the_agents(world):
    gateway = world["gateway"]
    basic = base64.b64encode(f"x:{PLACEHOLDER}".encode()).decode()
    with connect(gateway, API, gateway.ca_pem) as sock:
        response, body, head = fetch(sock, f"GET /echo HTTP/1.1\r\nHost: {API}\r\n"
                                           f"Authorization: Basic {basic}\r\n\r\n")
    assert world["api"].seen[-1][1]["Authorization"] == "Basic " + base64.b64encode(f"x:{VALUE}".encode()).decode()
    assert leaked(body.decode()) == [] and leaked(head) == []
    assert json.loads(body)["headers"]["Authorization"] == f"Basic {basic}"
    assert response.getheader("X-Echo-Authorization") == f"Basic {basic}"


def test_plain_http_to_a_brokered_host_never_carries_the_secret(world):
    gateway, plain = world["gateway"], world["plain"]
    before = len(plain.seen)
    for request in [(f"GET http://{PLAIN_BROKERED}/u HTTP/1.1\r\nHost: {PLAIN_BROKERED}\r\n"
                     f"Authorization: Bearer {PLACEHOLDER}\r\n\r\n"),
                    f"GET http://{PLAIN_BROKERED}/u?key={PLACEHOLDER} HTTP/1.1\r\nHost: {PLAIN_BROKERED}\r\n\r\n",
                    f"GET http://x:{PLACEHOLDER}@{PLAIN_BROKERED}/u HTTP/1.1\r\nHost: {PLAIN_BROKERED}\r\n\r\n"]:
        out = raw(gateway, request.encode())
        assert out.startswith(b"HTTP/1.1 403") and b"cleartext" in out and VALUE.encode() not in out, out
    assert len(plain.seen) == before  # nothing reached the upstream
    entries = logged(gateway, host=PLAIN_BROKERED, allowed=False)
    assert len(entries) == 3 and all(e.status == 403 and "cleartext" in (e.reason or "") for e in entries)
    # Without a placeholder there is nothing to protect: the request goes through.
    out = raw(gateway, f"GET http://{PLAIN_BROKERED}/free HTTP/1.1\r\nHost: {PLAIN_BROKERED}\r\n"
                       f"Connection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200") and plain.seen[-1][0] == "/free"


def test_unswap_catches_a_value_cut_anywhere():
    secrets = [BrokeredSecret(name="TEST_KEY", placeholder=PLACEHOLDER, value=VALUE),
               BrokeredSecret(name="SPECIAL_KEY", placeholder=SPECIAL_PLACEHOLDER, value=SPECIAL)]
    basic = base64.b64encode(f"x:{VALUE}".encode()).decode()
    agents = base64.b64encode(f"x:{PLACEHOLDER}".encode()).decode()
    text = (f'{{"a": "{VALUE}", "s": {json.dumps(SPECIAL)}, "q": "{quote(SPECIAL, safe="")}", '
            f'"b": "Basic {basic}", "v": "{VALUE[:-1]}"}}').encode()
    expected = {"a": PLACEHOLDER, "s": SPECIAL_PLACEHOLDER, "q": SPECIAL_PLACEHOLDER, "b": f"Basic {agents}",
                "v": VALUE[:-1]}  # a value's start alone is not the value: held, then let go
    for cut in range(1, len(text)):
        for cut2 in (cut, min(len(text), cut + 7)):
            unswap = _Unswap(_echo_forms(secrets), [(basic, agents)])
            out = b"".join([unswap.feed(text[:cut]), unswap.feed(text[cut:cut2]), unswap.feed(text[cut2:]),
                            unswap.flush()])
            assert json.loads(out) == expected, (cut, cut2, out)


def test_private_entries_are_ip_and_port(tmp_path):
    from engine.config import load_config
    from engine.spec import EvalFileError
    (tmp_path / "proctor.toml").write_text('[gateway]\nprivate = ["127.0.0.1:8080", "[::1]:9000", "localhost:8080"]\n')
    with pytest.raises(EvalFileError, match=r"proctor.toml:2: gateway.private 'localhost:8080' is not ip:port"):
        load_config(tmp_path / "proctor.toml")
    host = GatewayHost()
    try:
        with pytest.raises(GatewayError, match="private: '::1:80' is not ip:port"):
            host.start(GatewaySpec(socket_path=tmp_path / "g.sock", private=["::1:80"]))
    finally:
        host.close()
