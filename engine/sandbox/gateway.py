"""The egress gateway: a trial's only way out of its sandbox (SPEC.md "The egress gateway").

An HTTP forward proxy on a Unix socket that is bind-mounted into the sandbox;
a relay there turns 127.0.0.1:PORT into this socket, and HTTP(S)_PROXY points
at it. Hosts outside `allow` (and outside the brokered secrets' hosts) get 403.
HTTPS to an allowed host is tunnelled untouched. HTTPS to a brokered host is
terminated with the per-trial CA so that placeholders can be swapped for the
real values (headers, URL userinfo, query; never the body) before the request
leaves, and the real values swapped back for placeholders in what the host
answers (an upstream that echoes the request must not hand the key to the
agent). A placeholder is never swapped into plain HTTP. Every request is
logged as an `EgressEntry`, which names secrets and never holds their values.

An allowed name is resolved once, and the gateway connects to the address it
checked: loopback, link-local, private and multicast addresses, and ports other
than 80 and 443, are refused unless `[gateway] private` names the exact
address and port (or `resolve` sends a host there).

One `GatewayHost` runs one event loop on a daemon thread for every trial of an
engine; each trial's `Gateway` is a server on that loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import functools
import ipaddress
import json
import logging
import os
import re
import socket
import ssl
import stat
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlsplit

import certifi
from pydantic import BaseModel, Field, SecretStr

try:  # libuv's loop: fewer Python steps per read, write and TLS record than asyncio's own
    import uvloop
except ImportError:  # not built for every platform: asyncio's loop does the same work
    uvloop = None

from ..config import parse_endpoint
from ..models import EgressEntry
from ..redact import Redactor
from .ca import CertificateAuthority
from .upstream import CONNECT_S, Pool, Response, UpstreamError

log = logging.getLogger(__name__)
_THREAD = "proctor-egress-gateway"
_HEAD_LIMIT = 64 * 1024
_CHUNK = 64 * 1024
# A tunnel moves up to this much per step: spliced through a pipe of this size where the
# kernel allows it (Linux), else copied through a buffer of it.
_TUNNEL_STEP = 1 << 20
_START_TIMEOUT_S = 30
# Meaningful for one connection only: never forwarded either way.
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
_PORTS = (80, 443)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Content codings the swap can read through (zlib decodes them).
_DECODABLE = {"identity", "gzip", "deflate"}
# A brokered answer up to this long is swapped back whole, and keeps a Content-Length.
_WHOLE = 256 * 1024
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# NAT64's well-known prefix: a router on the way turns it into the IPv4 address it ends with.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


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
    # "ip:port" on the host or a private network that an allowed name may still reach.
    private: list[str] = Field(default_factory=list)


def _unwrap(address: Address) -> Address:
    """The IPv4 address an IPv6 form stands for (`::ffff:10.0.0.1`, 6to4, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if embedded := address.ipv4_mapped or address.sixtofour:
            return embedded
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _kind(address: Address) -> str | None:
    """What makes `address` the host's own or a private network's; None for a public one."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    site_local = isinstance(address, ipaddress.IPv6Address) and address.is_site_local
    if (address.is_private or address.is_reserved or address in _CGNAT or site_local
            or not address.is_global):
        return "a private address"
    return None


def address_refused(ip: str | Address, port: int, private: set[tuple[Address, int]]) -> str | None:
    """Why the gateway will not connect to ip:port, in one sentence; None when it may."""
    address = _unwrap(ipaddress.ip_address(ip))
    if (address, port) in private:
        return None
    endpoint = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    if kind := _kind(address):
        return f"{address} is {kind}; add \"{endpoint}\" to [gateway] private to allow it"
    if port not in _PORTS:
        return f"port {port} is not 80 or 443; add \"{endpoint}\" to [gateway] private to allow it"
    return None


def host_matches(host: str, patterns: list[str]) -> bool:
    """`host` is one of `patterns`; `*.example.com` matches any name under example.com."""
    host = host.lower().rstrip(".")
    for pattern in (p.lower().rstrip(".") for p in patterns):
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


class _BadRequest(Exception):
    pass


class _Refused(Exception):
    """The request is not let through; the message is the one-line reason."""


class _Unreachable(Exception):
    """The upstream cannot be reached; the message says why."""


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
    """Placeholder -> value for the secrets brokered to one host; remembers which were used,
    and the Basic credentials it rewrote, so that an echo of them can be rewritten back."""
    pairs: list[tuple[str, str, str]]  # name, placeholder, value
    used: set[str] = field(default_factory=set)
    credentials: list[tuple[str, str]] = field(default_factory=list)  # (sent, the agent's)

    def basic(self, userinfo: str) -> str:
        """Basic credentials for `user:placeholder`, with the value swapped in."""
        sent = base64.b64encode(self(userinfo).encode()).decode()
        self.credentials.append((sent, base64.b64encode(userinfo.encode()).decode()))
        return sent

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
            if self(decoded) != decoded:
                return f"{scheme} {self.basic(decoded)}"
        return self(value)


def _forms(value: str) -> list[str]:
    """The shapes a value takes in what an upstream may echo: as it is, JSON-escaped
    (with and without `\\/`), and URL-encoded as quote() and quote_plus() write it."""
    escaped = json.dumps(value)[1:-1]
    return [value, escaped, escaped.replace("/", "\\/"),
            json.dumps(value, ensure_ascii=False)[1:-1],
            quote(value, safe=""), quote(value), quote_plus(value)]


def _echo_forms(secrets: list[BrokeredSecret]) -> dict[bytes, bytes]:
    """Each form of each real value -> the same form of its placeholder."""
    fakes: dict[bytes, bytes] = {}
    for secret in secrets:
        if value := secret.value.get_secret_value():
            for real, fake in zip(_forms(value), _forms(secret.placeholder)):
                fakes.setdefault(real.encode(), fake.encode())
    return fakes


class _Unswap:
    """Real value -> placeholder in a response streamed in chunks. A value cut across two
    chunks is caught: the end of a chunk that could begin a value is held back until the
    next chunk completes it or rules it out.

    Base64 is matched only as the exact Basic credentials the gateway wrote for this
    request (given back as the agent's own): a general base64 search, at three alignments
    in two alphabets, would cost more than the rest of the search together."""

    def __init__(self, fakes: dict[bytes, bytes], credentials: list[tuple[str, str]]):
        self._fakes = {**fakes, **{sent.encode(): agents.encode() for sent, agents in credentials}}
        self._fakes.pop(b"", None)
        # Longest first: where two forms start at one place, the longer one is the match.
        longest = sorted(self._fakes, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(re.escape(real) for real in longest))
        self._tail = b""

    def _found(self, data: bytes) -> bool:
        return any(real in data for real in self._fakes)  # the usual case, and a fast one

    def __call__(self, data: bytes) -> bytes:
        """`data` whole, every value swapped back."""
        if not self._found(data):
            return data
        return self._pattern.sub(lambda match: self._fakes[match.group()], data)

    def feed(self, data: bytes) -> bytes:
        """The next chunk, swapped back, less an end held for the next one."""
        data = self._tail + data
        cut = len(data) - max((_begins(data, real) for real in self._fakes), default=0)
        out, done = [], 0
        if self._found(data):
            for match in self._pattern.finditer(data):
                if match.end() > cut:  # it reaches what is held back: decided with the rest
                    cut = min(cut, match.start())
                    break
                out += [data[done:match.start()], self._fakes[match.group()]]
                done = match.end()
        out.append(data[done:cut])
        self._tail = data[cut:]
        return b"".join(out)

    def flush(self) -> bytes:
        """What is held back once the response has ended: no value's start can complete now,
        but a whole value may still be in it (it was held because a longer one might be)."""
        tail, self._tail = self._tail, b""
        return self(tail)


def _begins(data: bytes, needle: bytes) -> int:
    """The length of the longest end of `data` that is the start of `needle` (never all of it)."""
    at = data.find(needle[:1], max(0, len(data) - len(needle) + 1))
    while at != -1:
        if needle.startswith(data[at:]):
            return len(data) - at
        at = data.find(needle[:1], at + 1)
    return 0


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
    if _CONTROL.search(target):  # a bare LF would start a line of the agent's own upstream
        raise _BadRequest("the request's target holds a control character")
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


def _status(code: int, reason: str, text: str) -> bytes:
    """A short answer of the gateway's own; the connection closes after it."""
    body = text.encode() + b"\n"
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


async def _open(loop: asyncio.AbstractEventLoop, address: tuple[str, int]) -> socket.socket:
    """A TCP connection to `address`, as a bare non-blocking socket for a tunnel."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a handshake's small writes
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


async def _ready(loop: asyncio.AbstractEventLoop, sock: socket.socket, write: bool) -> None:
    """Wait until `sock` can be read (or written)."""
    future = loop.create_future()
    watch, unwatch = ((loop.add_writer, loop.remove_writer) if write
                      else (loop.add_reader, loop.remove_reader))
    watch(sock.fileno(), lambda: future.done() or future.set_result(None))
    try:
        await future
    finally:
        unwatch(sock.fileno())


def _pipe() -> tuple[int, int] | None:
    """A pipe to splice a tunnel through, as large as allowed; None without splice."""
    if not hasattr(os, "splice"):
        return None
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # past the user's pipe quota: the default 64 KiB
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, _TUNNEL_STEP)
    return read, write


async def _relay(loop: asyncio.AbstractEventLoop, src: socket.socket, dst: socket.socket,
                 count: list[int]) -> None:
    """One direction of a tunnel until `src` ends; then the half-close is passed on (the
    other direction may still talk). On Linux the bytes are spliced, socket to pipe to
    socket, and never copied into Python; elsewhere they are copied a step at a time."""
    pipe = _pipe()
    try:
        if pipe is None:
            while data := await loop.sock_recv(src, _TUNNEL_STEP):
                count[0] += len(data)
                await loop.sock_sendall(dst, data)
        else:
            flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
            while True:
                try:
                    held = os.splice(src.fileno(), pipe[1], _TUNNEL_STEP, flags=flags)
                except BlockingIOError:
                    await _ready(loop, src, write=False)
                    continue
                if not held:
                    break
                count[0] += held
                while held:
                    try:
                        held -= os.splice(pipe[0], dst.fileno(), held, flags=flags)
                    except BlockingIOError:
                        await _ready(loop, dst, write=True)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (src, dst):  # one side broke: so does the tunnel
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
    finally:
        for fd in pipe or ():
            os.close(fd)


def _upstream_context(trust: tuple[Path, ...]) -> ssl.SSLContext:
    """What upstream TLS is verified against: loading the system's CAs costs tens of
    milliseconds, so gateways that trust the same files share one context (a context is
    safe to share, and nothing changes it once made)."""
    key = tuple((path, *_stamp(path)) for path in trust)
    with _CONTEXTS_LOCK:
        context = _CONTEXTS.get(key)
    if context is not None:
        return context
    context = ssl.create_default_context()  # the system's CAs …
    # … plus certifi's, for hosts (e.g. python.org builds on macOS) without a system store …
    context.load_verify_locations(certifi.where())
    for path in trust:  # … plus the CAs the configuration trusts.
        try:
            context.load_verify_locations(cafile=str(path))
        except (OSError, ssl.SSLError) as e:
            raise GatewayError(f"cannot load the trusted CA file {path}: {e}") from None
    with _CONTEXTS_LOCK:
        if len(_CONTEXTS) >= _CONTEXTS_MAX:
            _CONTEXTS.clear()
        _CONTEXTS[key] = context
    return context


def _stamp(path: Path) -> tuple[int, int]:
    """A trusted file's change time and size: a file changed since is loaded again."""
    try:
        info = path.stat()
    except OSError:
        return (0, -1)  # loading it says why
    return (info.st_mtime_ns, info.st_size)


_CONTEXTS: dict[tuple, ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()
_CONTEXTS_MAX = 16


class Gateway:
    """One trial's gateway, serving on its own Unix socket on the host's loop."""

    def __init__(self, spec: GatewaySpec, loop: asyncio.AbstractEventLoop,
                 ca: CertificateAuthority | None = None):
        """`ca`: the trial's CA when its sandbox already trusts one (a warm sandbox's)."""
        self.spec, self._loop = spec, loop
        self._ca = ca or CertificateAuthority()
        self.ca_pem: bytes = self._ca.cert_pem
        self._upstream_tls = _upstream_context(tuple(spec.trust))
        try:
            self._private = {(_unwrap(address), port)
                             for address, port in map(parse_endpoint, spec.private)}
        except ValueError as e:
            raise GatewayError(f"[gateway] private: {e}") from None
        for host, target in spec.resolve.items():
            try:
                name, port = _split_hostport(target, 0)
            except _BadRequest:
                raise GatewayError(f"resolve for {host} must be ip:port, not {target!r}") from None
            try:  # a resolve target is an explicit address: any name allowed may reach it
                self._private.add((_unwrap(ipaddress.ip_address(name)), port))
            except ValueError:
                pass
        self._resolve = {host.lower().rstrip("."): target for host, target in spec.resolve.items()}
        self._echoes = _echo_forms(spec.secrets)
        self._entries: list[EgressEntry] = []
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        # One pool per upstream host: a pool keyed by the resolved address would share
        # a connection (and its SNI) between two names resolved to the same place.
        self._pools: dict[str, Pool] = {}
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
        await asyncio.gather(*(p.aclose() for p in self._pools.values()), return_exceptions=True)

    def _pool_for(self, host: str) -> Pool:
        if host not in self._pools:
            self._pools[host] = Pool(self._upstream_tls)
        return self._pools[host]

    def _log(self, **entry: object) -> None:
        with self._lock:
            self._entries.append(EgressEntry.model_validate(entry))

    @functools.cached_property
    def _redactor(self) -> Redactor:
        # Made on the first error, not per trial: most gateways never write a text of their own.
        return Redactor(s.value.get_secret_value() for s in self.spec.secrets)

    def _scrub(self, text: str) -> str:
        """A text the gateway writes itself (an error's reason, a log line), redacted."""
        return self._redactor.text(text)

    def _brokered(self, host: str) -> list[BrokeredSecret]:
        return [s for s in self.spec.secrets if host_matches(host, s.hosts)]

    def _allowed(self, host: str) -> bool:
        return host_matches(host, self.spec.allow) or bool(self._brokered(host))

    async def _address(self, host: str, port: int) -> tuple[str, int]:
        """The address to connect to for host:port: the `resolve` target, or the first
        address the name resolves to that may be reached. Resolved once: the connection
        goes to the address checked, so a name cannot answer one address to the check and
        another to the connection. Raises _Refused or _Unreachable."""
        if target := self._resolve.get(host.rstrip(".")):
            return _split_hostport(target, port)
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                # The system's resolver on every loop (uvloop's own would ask libuv's).
                found = await asyncio.wait_for(self._loop.run_in_executor(
                    None, functools.partial(socket.getaddrinfo, host, port,
                                            type=socket.SOCK_STREAM)), CONNECT_S)
            except (OSError, TimeoutError):
                raise _Unreachable("the name does not resolve") from None
            addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        reasons = [address_refused(address, port, self._private) for address in addresses]
        for address, reason in zip(addresses, reasons):
            if reason is None:
                return address, port
        raise _Refused(reasons[0] if reasons else f"{host} has no address")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        # Room for a whole step on the way to the sandbox: fewer wake-ups per megabyte.
        with contextlib.suppress(OSError):
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _TUNNEL_STEP)
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
        except asyncio.CancelledError:
            pass  # the gateway is closing: asyncio would log a cancelled handler as an error
        except Exception as e:  # a bug here must not take the loop down, nor print a secret
            log.warning("egress gateway: %s", self._scrub(f"{type(e).__name__}: {e}"))
        finally:
            self._tasks.discard(task)
            writer.close()

    def _forbid(self, writer: asyncio.StreamWriter, method: str, host: str, path: str,
                reason: str | None = None) -> None:
        reason = reason or f"{host} is not in the allow-list of this trial"
        self._log(method=method, host=host, path=path, allowed=False, status=403, reason=reason)
        writer.write(_status(403, "Forbidden", reason))

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
            address = await self._address(host, port)
            upstream = await asyncio.wait_for(_open(self._loop, address), CONNECT_S)
        except _Refused as e:
            return self._forbid(writer, "CONNECT", host, "", str(e))
        except (OSError, TimeoutError, _Unreachable) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or "timed out"
            self._log(**entry, status=502, ms=_ms(started))
            writer.write(_status(502, "Bad Gateway", f"cannot reach {host}:{port}: {why}"))
            return
        count, client = [0], None
        try:
            # From here the tunnel's bytes never pass through the stream: its socket is relayed
            # as it is (spliced in the kernel), and whatever the client sent early goes first.
            writer.transport.pause_reading()
            reader.feed_eof()
            early = await reader.read()
            writer.transport.pause_reading()  # read() may have resumed it; no loop turn since
            client = socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno()))
            client.setblocking(False)
            await self._loop.sock_sendall(client, b"HTTP/1.1 200 Connection Established\r\n\r\n")
            if early:
                await self._loop.sock_sendall(upstream, early)
                count[0] += len(early)
            await asyncio.gather(_relay(self._loop, client, upstream, count),
                                 _relay(self._loop, upstream, client, count))
        finally:
            if client is not None:
                client.close()
            upstream.close()
            self._log(**entry, status=200, bytes=count[0], ms=_ms(started))

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
        brokered = self._brokered(host)
        swap = _Swap([(s.name, s.placeholder, s.value.get_secret_value()) for s in brokered])
        query = swap(query, encode=True)
        # Accept-Encoding: a compressed answer would hide an echoed value from the unswap.
        # Content-Length beside chunks: the body sent on is the chunks', framed anew.
        hop = (_HOP | request.connection | ({"accept-encoding"} if brokered else set())
               | ({"content-length"} if body.chunked else set()))
        headers = [(k, swap.header(k, v)) for k, v in request.headers if k.lower() not in hop]
        if userinfo and request.header("authorization") is None:
            headers.append(("Authorization", f"Basic {swap.basic(unquote(userinfo))}"))
        if request.header("host") is None:
            headers.append(("Host", host if port in _PORTS else f"{host}:{port}"))
        if brokered:
            headers.append(("Accept-Encoding", "identity"))
        if scheme == "http" and swap.used:
            names = ", ".join(sorted(swap.used))
            self._forbid(writer, request.method, host, path,
                         f"{names} is not sent in cleartext: use https://{host}")
            return False
        try:
            address, address_port = await self._address(host, port)
        except _Refused as e:
            self._forbid(writer, request.method, host, path, str(e))
            return False
        except _Unreachable as e:
            writer.write(_status(502, "Bad Gateway", f"cannot reach {host}:{port}: {e}"))
            self._log(method=request.method, host=host, path=path, allowed=True, status=502,
                      ms=_ms(started))
            return False
        if body.present and (request.header("expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the gateway takes the body itself
        entry = dict(method=request.method, host=host, path=path, allowed=True,
                     brokered=sorted(swap.used))
        status, sent, keep = 502, [0], request.keep_alive
        try:
            # Connect to the checked address, but SNI and verification are the real name's.
            response = await self._pool_for(host).send(
                request.method, scheme, address, address_port, host,
                path + ("?" + query if query else ""), headers,
                body.stream() if body.present else None)
        except (UpstreamError, OSError) as e:
            reason = f"upstream {host}:{port} failed: {type(e).__name__}: {e}".splitlines()[0]
            writer.write(_status(502, "Bad Gateway", self._scrub(reason)))
            self._log(**entry, status=502, ms=_ms(started))
            return False
        try:
            status = response.status
            no_body = request.method == "HEAD" or status in (204, 304) or status < 200
            # A brokered host's answer goes through the unswap, which changes its length
            # (placeholder and value differ). Not padded to the value's length: the agent must
            # read its own placeholder back, which the gateway swaps again if it is sent on.
            unswap = _Unswap(self._echoes, swap.credentials) if brokered and self._echoes else None
            coding = (response.header("content-encoding") or "").strip().lower() or "identity"
            decode = unswap is not None and not no_body and coding != "identity"
            if decode and not {c.strip() for c in coding.split(",")} <= _DECODABLE:
                status = 502
                why = f"{host} answered in {coding} encoding, which the gateway cannot check"
                writer.write(_status(502, "Bad Gateway", why))
                return False
            # A small answer of known length (an API's JSON) is read whole and keeps a
            # Content-Length, its new one; any other is streamed and sent chunked.
            length, whole = response.header("content-length") or "", None
            if unswap and not no_body and not decode and length.isdigit() and int(length) <= _WHOLE:
                whole = unswap(b"".join([data async for data in response.raw()]))
            drop = _HOP | ({"content-length"} if unswap and not no_body else set()) | (
                {"content-encoding"} if decode else set())
            framed = no_body or whole is not None or (response.header("content-length") is not None
                                                      and "content-length" not in drop)
            # An HTTP/1.0 client cannot read chunks: it reads to the close instead.
            chunked = not framed and request.version == "HTTP/1.1"
            keep = keep and body.done and (framed or chunked)
            lines = [f"HTTP/1.1 {status} {response.reason}"]
            lines += [f"{k}: {v}" for k, v in response.headers if k.lower() not in drop]
            if whole is not None:
                lines.append(f"Content-Length: {len(whole)}")
            lines += ["Transfer-Encoding: chunked"] * chunked + ["Connection: close"] * (not keep)
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            head = unswap(head) if unswap else head
            if whole is not None:
                writer.write(head + whole)
                sent[0] = len(whole)
            else:
                writer.write(head)
                await self._stream(response, writer, unswap, decode, chunked, sent)
            await writer.drain()
        except UpstreamError:
            keep = False  # upstream broke mid-response: the client sees the connection close
        finally:
            await response.aclose()
            self._log(**entry, status=status, bytes=sent[0], ms=_ms(started))
        return keep

    @staticmethod
    async def _stream(response: Response, writer: asyncio.StreamWriter,
                      unswap: _Unswap | None, decode: bool, chunked: bool, sent: list[int]) -> None:
        """The body as upstream sends it (server-sent events must not wait for the end)."""
        def framed(data: bytes) -> bytes:
            return b"%x\r\n%b\r\n" % (len(data), data) if chunked and data else data

        async for data in (response.decoded() if decode else response.raw()):
            data = unswap.feed(data) if unswap else data
            if data:  # an empty chunk would end a chunked body
                sent[0] += len(data)
                writer.write(framed(data))
                await writer.drain()
        rest = unswap.flush() if unswap else b""
        sent[0] += len(rest)
        writer.write(framed(rest) + b"0\r\n\r\n" * chunked)


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
                self._loop = uvloop.new_event_loop() if uvloop else asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever,
                                                name=_THREAD, daemon=True)
                self._thread.start()
            return self._loop

    def start(self, spec: GatewaySpec, ca: CertificateAuthority | None = None) -> Gateway:
        """Start a trial's gateway (with `ca`, the CA its sandbox trusts already); blocks
        until it listens. Raises GatewayError."""
        loop = self._running_loop()
        if threading.current_thread() is self._thread:
            raise GatewayError("the gateway cannot be started from its own event loop")
        gateway = Gateway(spec, loop, ca)
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
