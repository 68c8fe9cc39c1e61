"""The egress gateway: a trial's only way out of its sandbox (SPEC.md "The egress gateway").

An HTTP forward proxy on a Unix socket that is bind-mounted into the sandbox;
a relay there turns 127.0.0.1:PORT into this socket, and HTTP(S)_PROXY points
at it. Hosts outside `allow` (and outside the brokered secrets' hosts) get 403.
HTTPS to an allowed host is tunnelled untouched. HTTPS to a brokered host is
terminated with the per-trial CA so that placeholders can be swapped for the
real values (headers, URL userinfo, query; never the body) before the request
leaves. Every request is logged as an `EgressEntry`, which names secrets and
never holds their values.

One `GatewayHost` runs one event loop on a daemon thread for every trial of an
engine; each trial's `Gateway` is a server on that loop.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
import ssl
import stat
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import certifi
import httpx
from pydantic import BaseModel, Field, SecretStr

from ..models import EgressEntry
from .ca import CertificateAuthority

log = logging.getLogger(__name__)
_THREAD = "proctor-egress-gateway"
_HEAD_LIMIT = 64 * 1024
_CHUNK = 64 * 1024
_START_TIMEOUT_S = 30
# Meaningful for one connection only: never forwarded either way.
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
_UPSTREAM_TIMEOUT = httpx.Timeout(connect=15, read=300, write=60, pool=60)


class _NotOnTheGatewayThread(logging.Filter):
    """httpx logs every request's URL at INFO, and a brokered URL holds a real value in
    its query: the gateway's requests are logged in its egress log, and only there."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != _THREAD


logging.getLogger("httpx").addFilter(_NotOnTheGatewayThread())


class GatewayError(Exception):
    """The gateway could not start; the message is one sentence to show."""


class BrokeredSecret(BaseModel):
    name: str
    placeholder: str
    value: SecretStr  # SecretStr: a repr or validation error of the spec never shows it
    hosts: list[str] = Field(default_factory=list)


class GatewaySpec(BaseModel):
    socket_path: Path
    allow: list[str] = Field(default_factory=list)
    secrets: list[BrokeredSecret] = Field(default_factory=list)
    resolve: dict[str, str] = Field(default_factory=dict)  # host -> "ip:port" to connect to
    trust: list[Path] = Field(default_factory=list)  # extra CA files for upstream TLS


def host_matches(host: str, patterns: list[str]) -> bool:
    """`host` is one of `patterns`; `*.example.com` matches any name under example.com."""
    host = host.lower().rstrip(".")
    for pattern in (p.lower().rstrip(".") for p in patterns):
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


class _BadRequest(Exception):
    pass


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def connection(self) -> set[str]:
        return {t.strip().lower() for t in (self.header("connection") or "").split(",")}

    @property
    def keep_alive(self) -> bool:
        tokens = self.connection
        return "close" not in tokens and (self.version == "HTTP/1.1" or "keep-alive" in tokens)


@dataclass
class _Swap:
    """Placeholder -> value for the secrets brokered to one host; remembers which were used."""
    pairs: list[tuple[str, str, str]]  # name, placeholder, value
    used: set[str] = field(default_factory=set)

    def __call__(self, text: str, encode: bool = False) -> str:
        for name, placeholder, value in self.pairs:
            if placeholder and placeholder in text:
                text = text.replace(placeholder, quote(value, safe="") if encode else value)
                self.used.add(name)
        return text

    def header(self, name: str, value: str) -> str:
        scheme, _, credentials = value.partition(" ")
        if name.lower() == "authorization" and scheme.lower() == "basic":
            # URL userinfo (git's `https://x:TOKEN@host`) arrives as Basic credentials.
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode()
            except ValueError:
                return self(value)
            swapped = self(decoded)
            if swapped != decoded:
                return f"{scheme} {base64.b64encode(swapped.encode()).decode()}"
        return self(value)


async def _read_head(reader: asyncio.StreamReader) -> _Request | None:
    """The next request's line and headers; None when the client closed between requests."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial.strip():
            raise _BadRequest("the request ended before its headers did") from None
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequest("the request headers are too large") from None
    try:
        line, *lines = raw.decode("latin-1").split("\r\n")[:-2]
        method, target, version = line.split(" ")
    except ValueError:
        raise _BadRequest("the request line is not METHOD TARGET HTTP/1.x") from None
    if version not in ("HTTP/1.1", "HTTP/1.0") or not method.isalpha():
        raise _BadRequest("the request line is not METHOD TARGET HTTP/1.x")
    headers = []
    for text in lines:
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip() or len(headers) >= 200:
            raise _BadRequest("a request header is malformed")
        headers.append((name, value.strip()))
    return _Request(method.upper(), target, version, headers)


class _Body:
    """A request body read from the client as it is forwarded (Content-Length or chunked)."""

    def __init__(self, reader: asyncio.StreamReader, request: _Request):
        self.reader = reader
        coding = (request.header("transfer-encoding") or "").lower()
        length = request.header("content-length")
        self.chunked, self.length = coding.endswith("chunked"), 0
        if coding and not self.chunked:
            raise _BadRequest("only chunked transfer-encoding is supported")
        if not self.chunked and length is not None:
            if not length.isdigit():
                raise _BadRequest("the Content-Length is not a number")
            self.length = int(length)
        self.present = self.chunked or length is not None
        self.done = not self.present

    async def stream(self) -> AsyncIterator[bytes]:
        if self.chunked:
            while size := await self._chunk_size():
                while size:  # in pieces: a chunk's size is the client's to choose
                    data = await self.reader.readexactly(min(size, _CHUNK))
                    size -= len(data)
                    yield data
                await self.reader.readexactly(2)
            while (await self.reader.readuntil(b"\r\n")) != b"\r\n":  # trailers: dropped
                pass
        else:
            left = self.length
            while left:
                data = await self.reader.read(min(left, _CHUNK))
                if not data:
                    raise _BadRequest("the request body ended early")
                left -= len(data)
                yield data
        self.done = True

    async def _chunk_size(self) -> int:
        line = (await self.reader.readuntil(b"\r\n")).split(b";")[0].strip()
        if not line or line.strip(b"0123456789abcdefABCDEF"):
            raise _BadRequest("a chunk size is malformed")
        return int(line, 16)


def _split_hostport(text: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host or (port and not port.isdigit()):
        raise _BadRequest(f"{text!r} is not host:port")
    return host.lower(), int(port) if port else default_port


def _encode(value: str) -> bytes:
    try:
        return value.encode("latin-1")  # what the client sent, byte for byte
    except UnicodeEncodeError:
        return value.encode()  # a swapped-in value outside latin-1


def _status(code: int, reason: str, text: str) -> bytes:
    """A short answer of the gateway's own; the connection closes after it."""
    body = text.encode() + b"\n"
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


class Gateway:
    """One trial's gateway, serving on its own Unix socket on the host's loop."""

    def __init__(self, spec: GatewaySpec, loop: asyncio.AbstractEventLoop):
        self.spec, self._loop = spec, loop
        self._ca = CertificateAuthority()
        self.ca_pem: bytes = self._ca.cert_pem
        self._upstream_tls = ssl.create_default_context()  # the system's CAs …
        # … plus certifi's, for hosts (e.g. python.org builds on macOS) without a system store …
        self._upstream_tls.load_verify_locations(certifi.where())
        for path in spec.trust:  # … plus the CAs the configuration trusts.
            try:
                self._upstream_tls.load_verify_locations(cafile=str(path))
            except (OSError, ssl.SSLError) as e:
                raise GatewayError(f"cannot load the trusted CA file {path}: {e}") from None
        for host, target in spec.resolve.items():
            try:
                _split_hostport(target, 0)
            except _BadRequest:
                raise GatewayError(f"resolve for {host} must be ip:port, not {target!r}") from None
        self._resolve = {host.lower().rstrip("."): target for host, target in spec.resolve.items()}
        self._entries: list[EgressEntry] = []
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        # One client per upstream host: a pool keyed by the resolved address would share
        # a connection (and its SNI) between two names resolved to the same place.
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._closed = False

    # --- the engine's side (any thread) -------------------------------------------

    def entries(self) -> list[EgressEntry]:
        with self._lock:
            return [e.model_copy() for e in self._entries]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._loop.is_closed() and self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=15)
            except TimeoutError:  # a stuck connection must not hold up the trial's teardown
                log.warning("egress gateway: connections still closing after 15 s")
        self.spec.socket_path.unlink(missing_ok=True)

    # --- the loop's side ----------------------------------------------------------

    async def _start(self) -> None:
        path = self.spec.socket_path
        if len(os.fsencode(path)) > 107:
            raise GatewayError(f"the socket path {path} is too long (a Unix socket path "
                               "has at most 107 bytes)")
        if not path.parent.is_dir():
            raise GatewayError(f"the socket folder {path.parent} does not exist")
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise GatewayError(f"{path} exists and is not a socket")
            path.unlink()  # a stale socket from a crashed engine
        try:
            self._server = await asyncio.start_unix_server(self._serve, str(path),
                                                           limit=_HEAD_LIMIT)
            # The sandbox's root is not our user: it must be able to connect.
            path.chmod(0o666)
        except OSError as e:
            raise GatewayError(f"cannot listen on {path}: {e.strerror or e}") from None

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        clients = [c.aclose() for c in self._clients.values()]
        await asyncio.gather(*clients, return_exceptions=True)

    def _client_for(self, host: str) -> httpx.AsyncClient:
        if host not in self._clients:
            # trust_env=False: the engine's own proxy variables are not the sandbox's way out.
            # TCP_NODELAY: a request's head and body leave as separate writes; with Nagle the
            # second waits for the upstream's delayed ACK, 40 ms on every request.
            transport = httpx.AsyncHTTPTransport(
                verify=self._upstream_tls, http1=True, http2=False,
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            self._clients[host] = httpx.AsyncClient(transport=transport, trust_env=False,
                                                    timeout=_UPSTREAM_TIMEOUT)
        return self._clients[host]

    def _log(self, **entry: object) -> None:
        with self._lock:
            self._entries.append(EgressEntry.model_validate(entry))

    def _scrub(self, text: str) -> str:
        for secret in self.spec.secrets:
            if value := secret.value.get_secret_value():
                text = text.replace(value, "[redacted]")
        return text

    def _brokered(self, host: str) -> list[BrokeredSecret]:
        return [s for s in self.spec.secrets if host_matches(host, s.hosts)]

    def _allowed(self, host: str) -> bool:
        return host_matches(host, self.spec.allow) or bool(self._brokered(host))

    def _address(self, host: str, port: int) -> tuple[str, int]:
        target = self._resolve.get(host)
        return _split_hostport(target, port) if target else (host, port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request = await _read_head(reader)
            if request is None:
                return
            if request.method == "CONNECT":
                await self._connect(request, reader, writer)
            else:
                await self._requests(reader, writer, None, request)
        except _BadRequest as e:
            writer.write(_status(400, "Bad Request", str(e)))
        except (OSError, EOFError, asyncio.LimitOverrunError):
            pass  # the client went away, or failed its TLS handshake (an OSError too)
        except Exception as e:  # a bug here must not take the loop down, nor print a secret
            log.warning("egress gateway: %s", self._scrub(f"{type(e).__name__}: {e}"))
        finally:
            self._tasks.discard(task)
            writer.close()

    def _forbid(self, writer: asyncio.StreamWriter, method: str, host: str, path: str) -> None:
        self._log(method=method, host=host, path=path, allowed=False, status=403)
        writer.write(_status(403, "Forbidden", f"{host} is not in the allow-list of this trial"))

    async def _connect(self, request: _Request, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        host, port = _split_hostport(request.target, 443)
        if not self._allowed(host):
            return self._forbid(writer, "CONNECT", host, "")
        if self._brokered(host):
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            # No await between the 200 and start_tls: the ClientHello must reach the TLS layer.
            await writer.start_tls(self._ca.server_context(host))
            await self._requests(reader, writer, (host, port))
            return
        started, entry = time.monotonic(), dict(method="CONNECT", host=host, path="", allowed=True)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self._address(host, port)), _UPSTREAM_TIMEOUT.connect)
        except (OSError, asyncio.TimeoutError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else "timed out"
            self._log(**entry, status=502, ms=_ms(started))
            writer.write(_status(502, "Bad Gateway", f"cannot reach {host}:{port}: {why}"))
            return
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        count = [0]
        try:
            await asyncio.gather(self._pipe(reader, up_writer, count),
                                 self._pipe(up_reader, writer, count))
        finally:
            up_writer.close()
            self._log(**entry, status=200, bytes=count[0], ms=_ms(started))

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    count: list[int]) -> None:
        try:
            while data := await src.read(_CHUNK):
                count[0] += len(data)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():  # pass the half-close on; the other way may still talk
                dst.write_eof()
        except OSError:
            dst.close()  # one side broke: so does the tunnel

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        tunnel: tuple[str, int] | None, first: _Request | None = None) -> None:
        """Serve requests on one connection until it closes (keep-alive)."""
        request = first or await _read_head(reader)
        while request is not None:
            if not await self._forward(request, reader, writer, tunnel):
                return
            request = await _read_head(reader)

    async def _forward(self, request: _Request, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, tunnel: tuple[str, int] | None) -> bool:
        """Forward one request and stream its response back; True to keep the connection."""
        started = time.monotonic()
        if tunnel is not None and request.target.startswith("/"):
            scheme, (host, port), userinfo = "https", tunnel, ""
            path, _, query = request.target.partition("?")
        else:
            url = urlsplit(request.target)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise _BadRequest("a proxy request needs an absolute http:// URL")
            scheme, host, userinfo = url.scheme, url.hostname, url.netloc.rpartition("@")[0]
            try:
                port = url.port or (443 if scheme == "https" else 80)
            except ValueError:
                raise _BadRequest("the URL's port is not a number") from None
            path, query = url.path or "/", url.query
        body = _Body(reader, request)
        if not self._allowed(host):
            self._forbid(writer, request.method, host, path)
            return False
        swap = _Swap([(s.name, s.placeholder, s.value.get_secret_value())
                      for s in self._brokered(host)])
        query = swap(query, encode=True)
        hop = _HOP | request.connection  # and the headers `Connection` names
        headers = [(k, swap.header(k, v)) for k, v in request.headers if k.lower() not in hop]
        if userinfo and request.header("authorization") is None:
            credentials = base64.b64encode(swap(unquote(userinfo)).encode()).decode()
            headers.append(("Authorization", f"Basic {credentials}"))
        if request.header("host") is None:
            headers.append(("Host", host if port in (80, 443) else f"{host}:{port}"))
        if body.present and (request.header("expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the gateway takes the body itself
        address, address_port = self._address(host, port)
        try:
            upstream = httpx.Request(
                request.method,
                httpx.URL(scheme=scheme, host=address, port=address_port,
                          raw_path=(path + ("?" + query if query else "")).encode()),
                headers=[(k.encode("latin-1"), _encode(v)) for k, v in headers],
                content=body.stream() if body.present else None,
                # Connect to the resolved address, but SNI and verification are the real name's.
                extensions={"sni_hostname": host} if scheme == "https" else {})
        except httpx.InvalidURL:
            raise _BadRequest("the request's URL is not valid") from None
        entry = dict(method=request.method, host=host, path=path, allowed=True,
                     brokered=sorted(swap.used))
        status, sent, keep = 502, 0, request.keep_alive
        try:
            response = await self._client_for(host).send(upstream, stream=True)
        except (httpx.HTTPError, OSError) as e:
            reason = f"upstream {host}:{port} failed: {type(e).__name__}: {e}".splitlines()[0]
            writer.write(_status(502, "Bad Gateway", self._scrub(reason)))
            self._log(**entry, status=502, ms=_ms(started))
            return False
        try:
            status = response.status_code
            no_body = request.method == "HEAD" or status in (204, 304) or status < 200
            framed = no_body or "content-length" in response.headers
            # An HTTP/1.0 client cannot read chunks: it reads to the close instead.
            chunked = not framed and request.version == "HTTP/1.1"
            keep = keep and body.done and (framed or chunked)
            lines = [f"HTTP/1.1 {status} {response.reason_phrase}"]
            lines += [f"{k.decode('latin-1')}: {v.decode('latin-1')}"
                      for k, v in response.headers.raw if k.decode("latin-1").lower() not in _HOP]
            lines += ["Transfer-Encoding: chunked"] * chunked + ["Connection: close"] * (not keep)
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            # As upstream sends them: server-sent events must not wait for the end.
            async for data in response.aiter_raw():
                sent += len(data)
                writer.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
                await writer.drain()
            if chunked:
                writer.write(b"0\r\n\r\n")
            await writer.drain()
        except httpx.HTTPError:
            keep = False  # upstream broke mid-response: the client sees the connection close
        finally:
            await response.aclose()
            self._log(**entry, status=status, bytes=sent, ms=_ms(started))
        return keep


class GatewayHost:
    """The event loop every gateway of an engine runs on; started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._gateways: list[Gateway] = []
        self._lock = threading.Lock()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever,
                                                name=_THREAD, daemon=True)
                self._thread.start()
            return self._loop

    def start(self, spec: GatewaySpec) -> Gateway:
        """Start a trial's gateway; blocks until it listens. Raises GatewayError."""
        loop = self._running_loop()
        if threading.current_thread() is self._thread:
            raise GatewayError("the gateway cannot be started from its own event loop")
        gateway = Gateway(spec, loop)
        try:
            started = asyncio.run_coroutine_threadsafe(gateway._start(), loop)
            started.result(timeout=_START_TIMEOUT_S)
        except GatewayError:
            raise
        except Exception as e:  # anything else is still "could not start", in one sentence
            raise GatewayError(f"could not listen on {spec.socket_path}: {e}") from None
        with self._lock:
            self._gateways = [g for g in self._gateways if not g._closed] + [gateway]
        return gateway

    def close(self) -> None:
        with self._lock:
            loop, thread, gateways = self._loop, self._thread, self._gateways
            self._loop, self._thread, self._gateways = None, None, []
        for gateway in gateways:
            gateway.close()
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
