"""The gateway's connections to upstream hosts: a lean HTTP/1.1 client on asyncio streams.

The gateway has already parsed the request it forwards and re-frames every answer it sends
back, so a general client (httpx, httpcore, h11) only repeats that work: with it a brokered
request on a kept-alive connection cost the gateway 0.8-1.1 ms of CPU, and every byte of a
download was copied three more times. Here a request is one write of its head and an
answer's body is read straight from the stream, `_READ` bytes at a time. Connections to a
host are kept alive and reused, and one the host closed as a request left is replaced.
What h11 enforced is checked here: no control character in the target or a header, and
a body exactly as long as its Content-Length (a byte more would be another request).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http import HTTPStatus

INFLATE_PIECE = 1 << 20  # the most a decoded piece of an answer holds
_READ = 256 * 1024  # per read: what one socket read of a TLS stream decrypts at once
# The stream's buffer pauses the socket at twice this: a bound on what one connection holds.
_LIMIT = 512 * 1024
CONNECT_S, READ_S, WRITE_S = 15.0, 300.0, 60.0
_IDLE_S = 5.0  # a kept-alive connection unused this long is closed: servers drop them too
_IDLE_MAX = 20  # kept-alive connections per host
_CONNECTIONS = 100  # open at once per host; more wait for one to end
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_IN_A_VALUE = re.compile(r"[\x00\r\n]")
_NOT_IN_A_TARGET = re.compile(r"[\x00-\x20\x7f]")


class UpstreamError(Exception):
    """The upstream could not be reached, or broke HTTP; the message says how (never a value)."""


class _Stale(Exception):
    """A reused connection was found closed before any answer came."""


@dataclass(eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    key: tuple[str, str, int]
    reused: bool = False
    idle_since: float = 0.0

    def usable(self) -> bool:
        """Still open: an idle connection the upstream has closed reads as at its end."""
        return (not self.reader.at_eof() and self.reader.exception() is None
                and not self.writer.is_closing() and time.monotonic() - self.idle_since < _IDLE_S)

    def close(self) -> None:
        self.writer.close()  # not awaited: a TLS peer that never answers must not hold us


async def _read(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        async with asyncio.timeout(READ_S):
            return await reader.read(n)
    except TimeoutError:
        raise UpstreamError("the upstream sent nothing in time") from None
    except OSError as e:
        raise UpstreamError(f"the connection broke: {e.strerror or e}") from None


async def _line(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        async with asyncio.timeout(READ_S):
            return await reader.readuntil(b"\r\n")
    except TimeoutError:
        raise UpstreamError("the upstream sent nothing in time") from None
    except asyncio.IncompleteReadError:
        raise UpstreamError(f"the upstream closed the connection in {what}") from None
    except asyncio.LimitOverrunError:
        raise UpstreamError(f"the upstream sent too long a line in {what}") from None
    except OSError as e:
        raise UpstreamError(f"the connection broke: {e.strerror or e}") from None


@dataclass(eq=False)
class Response:
    """An upstream's answer; its body is read once, by `raw()` or `decoded()`."""
    status: int
    reason: str
    headers: list[tuple[str, str]]
    _connection: _Connection
    _pool: Pool
    _length: int | None  # None: chunked or to the close
    _chunked: bool
    _keep: bool
    _done: bool = False
    _closed: bool = False

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    async def raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives, content coding kept, chunk framing removed."""
        reader = self._connection.reader
        if self._chunked:
            while True:
                size_line = (await _line(reader, "a chunk's size")).split(b";")[0].strip()
                if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
                    raise UpstreamError("the upstream sent a malformed chunk size")
                if not (left := int(size_line, 16)):
                    break
                while left:
                    if not (data := await _read(reader, min(left, _READ))):
                        raise UpstreamError("the upstream closed the connection mid-chunk")
                    left -= len(data)
                    yield data
                if await _line(reader, "a chunk's end") != b"\r\n":
                    raise UpstreamError("the upstream sent a chunk longer than its size")
            while await _line(reader, "the trailers") != b"\r\n":  # trailers: dropped
                pass
        elif self._length is not None:
            left = self._length
            while left:
                if not (data := await _read(reader, min(left, _READ))):
                    raise UpstreamError("the upstream closed the connection before the "
                                        "answer's end")
                left -= len(data)
                yield data
        else:
            while data := await _read(reader, _READ):
                yield data
        self._done = True

    async def decoded(self) -> AsyncIterator[bytes]:
        """The body with its content coding (gzip, deflate, or both in turn) undone."""
        codings = [c.strip().lower() for c in (self.header("content-encoding") or "").split(",")]
        decoders = [_decoder(c) for c in reversed(codings) if c not in ("", "identity")]
        async for data in self.raw():
            for piece in _inflated(decoders, data):
                yield piece
        tail = b""
        for decoder in decoders:
            tail = decoder.decompress(tail) + decoder.flush()
        if tail:
            yield tail

    async def aclose(self) -> None:
        """Done with the answer: its connection is kept for the next request when it can be."""
        if self._closed:
            return
        self._closed = True
        self._pool._release(self._connection, keep=self._done and self._keep)


def _inflated(decoders: list, data: bytes) -> Iterator[bytes]:
    """`data` through each decoder in turn, INFLATE_PIECE bytes at most at a time: a small
    compressed read can stand for gigabytes (a gzip bomb), which must never be one object."""
    if not decoders:
        if data:
            yield data
        return
    first, rest = decoders[0], decoders[1:]
    while data:
        out = first.decompress(data, INFLATE_PIECE)
        data = first.unconsumed_tail
        yield from _inflated(rest, out)
        if not out:
            break


class _Deflate:
    """`deflate` as servers send it: zlib-wrapped as the RFC says, or raw as some do."""

    def __init__(self) -> None:
        self._z: zlib._Decompress | None = None
        self._first = True

    @property
    def unconsumed_tail(self) -> bytes:
        return self._z.unconsumed_tail if self._z else b""

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        if self._first and data:
            self._first = False
            try:
                self._z = zlib.decompressobj()
                return self._z.decompress(data, max_length)
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._z.decompress(data, max_length) if self._z else b""

    def flush(self) -> bytes:
        return self._z.flush() if self._z else b""


def _decoder(coding: str) -> zlib._Decompress | _Deflate:
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _Deflate()
    raise UpstreamError(f"the upstream's {coding} encoding cannot be read")


def _head(method: str, target: str, headers: list[tuple[str, str]], framing: str) -> bytes:
    if _NOT_IN_A_TARGET.search(target):
        raise UpstreamError("the request's target holds a space or a control character")
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _NOT_IN_A_VALUE.search(value):
            # Never the value in the message: it may be a secret swapped in.
            raise UpstreamError(f"the request header {name[:40]!r} cannot be sent")
        lines.append(f"{name}: {value}")
    if framing:
        lines.append(framing)
    return _latin1("\r\n".join(lines) + "\r\n\r\n")


def _latin1(text: str) -> bytes:
    try:
        return text.encode("latin-1")  # what the client sent, byte for byte
    except UnicodeEncodeError:
        return text.encode()  # a swapped-in value outside latin-1


async def _exactly(body: AsyncIterator[bytes], length: int) -> AsyncIterator[bytes]:
    """`body`, checked to hold `length` bytes: a byte past it would be read upstream as the
    start of another request, one the gateway never saw."""
    async for data in body:
        length -= len(data)
        if length < 0:
            raise UpstreamError("the request's body is longer than its Content-Length")
        yield data
    if length:
        raise UpstreamError("the request's body is shorter than its Content-Length")


class Pool:
    """The connections to one upstream host (one pool per name: a connection's TLS holds its
    SNI, so two names resolved to one address never share one)."""

    def __init__(self, tls: ssl.SSLContext):
        self._tls = tls
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(_CONNECTIONS)

    async def _open(self, key: tuple[str, str, int], server_name: str) -> _Connection:
        scheme, address, port = key
        try:
            async with asyncio.timeout(CONNECT_S):
                reader, writer = await asyncio.open_connection(
                    address, port, limit=_LIMIT, ssl=self._tls if scheme == "https" else None,
                    server_hostname=server_name if scheme == "https" else None)
        except TimeoutError:
            raise UpstreamError(f"cannot connect to {address}:{port} in time") from None
        except (OSError, ssl.SSLError) as e:  # SSLError is an OSError; named for the reader
            raise UpstreamError(f"cannot connect to {address}:{port}: {e}") from None
        # A request's head and body leave as separate writes: with Nagle the second would
        # wait for the upstream's delayed ACK, 40 ms on every request.
        with contextlib.suppress(OSError, AttributeError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer, key)

    def _take(self, key: tuple[str, str, int]) -> _Connection | None:
        """The most recently used idle connection to `key` that is still open."""
        for connection in reversed(self._idle):
            if connection.key == key:
                self._idle.remove(connection)
                if connection.usable():
                    connection.reused = True
                    return connection
                connection.close()
        return None

    def _release(self, connection: _Connection, keep: bool) -> None:
        self._slots.release()
        if keep and not connection.writer.is_closing():
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
            while len(self._idle) > _IDLE_MAX:
                self._idle.pop(0).close()
        else:
            connection.close()

    async def send(self, method: str, scheme: str, address: str, port: int, server_name: str,
                   target: str, headers: list[tuple[str, str]],
                   body: AsyncIterator[bytes] | None) -> Response:
        """Send one request and read its answer's head. Raises UpstreamError."""
        lengths = [v.strip() for k, v in headers if k.lower() == "content-length"]
        if lengths and (len(set(lengths)) != 1 or not lengths[0].isdigit()):
            raise UpstreamError("the request's Content-Length is not one number")
        length = int(lengths[0]) if lengths else None
        framing = ("" if body is None or length is not None else "Transfer-Encoding: chunked")
        if body is None and length is None and method in ("POST", "PUT", "PATCH"):
            framing = "Content-Length: 0"
        head = _head(method, target, headers, framing)
        if body is not None and length is not None:
            body = _exactly(body, length)
        key = (scheme, address, port)
        try:
            async with asyncio.timeout(WRITE_S):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamError(f"{_CONNECTIONS} connections to the host are still busy") from None
        try:
            connection = self._take(key) or await self._open(key, server_name)
            try:
                return await self._exchange(connection, method, head, body,
                                            chunked=framing.startswith("Transfer"))
            except _Stale:
                # The host closed a kept-alive connection as the request left: a request
                # without a body is sent again, once, on a new one.
                connection = await self._open(key, server_name)
                return await self._exchange(connection, method, head, None, False)
        except BaseException:
            self._slots.release()
            raise

    async def _exchange(self, connection: _Connection, method: str, head: bytes,
                        body: AsyncIterator[bytes] | None, chunked: bool) -> Response:
        writer = connection.writer

        async def drain() -> None:  # bounded per write: a big upload may take its time
            try:
                async with asyncio.timeout(WRITE_S):
                    await writer.drain()
            except TimeoutError:
                raise UpstreamError("the upstream took nothing in time") from None

        try:
            try:
                writer.write(head)
                if body is not None:
                    async for data in body:
                        if data:
                            writer.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
                            await drain()
                    if chunked:
                        writer.write(b"0\r\n\r\n")
                await drain()
            except OSError as e:
                if connection.reused and body is None:
                    raise _Stale() from None
                raise UpstreamError(f"the connection broke: {e.strerror or e}") from None
            return await self._answer(connection, method, body is None)
        except BaseException:
            connection.close()
            raise

    async def _answer(self, connection: _Connection, method: str, retry: bool) -> Response:
        reader = connection.reader
        while True:
            try:
                async with asyncio.timeout(READ_S):
                    head = await reader.readuntil(b"\r\n\r\n")
            except TimeoutError:
                raise UpstreamError("the upstream sent nothing in time") from None
            except asyncio.IncompleteReadError as e:
                if connection.reused and retry and not e.partial:
                    raise _Stale() from None
                raise UpstreamError("the upstream closed the connection without an "
                                    "answer") from None
            except asyncio.LimitOverrunError:
                raise UpstreamError("the upstream's answer head is too large") from None
            except OSError as e:
                if connection.reused and retry:
                    raise _Stale() from None
                raise UpstreamError(f"the connection broke: {e.strerror or e}") from None
            line, *lines = head.decode("latin-1").split("\r\n")[:-2]
            version, _, rest = line.partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/1.") or not (code.isdigit() and len(code) == 3):
                # Quoted as h11 did: the gateway's scrub redacts what it may hold.
                raise UpstreamError(f"illegal status line: {line[:200]!r}")
            status = int(code)
            if not 100 <= status < 200 or status == 101:
                break  # an informational answer (100 Continue, 103) comes before the real one
        headers = []
        for text in lines:
            name, colon, value = text.partition(":")
            if not colon or not name or name != name.strip():
                raise UpstreamError("the upstream sent a malformed header")
            headers.append((name, value.strip()))
        fields = {k.lower(): v for k, v in headers}
        tokens = {t.strip().lower() for t in fields.get("connection", "").split(",")}
        keep = version == "HTTP/1.1" and "close" not in tokens
        length, chunked = None, False
        if method == "HEAD" or status in (204, 304) or status < 200:
            length = 0
        elif fields.get("transfer-encoding", "").lower().endswith("chunked"):
            chunked = True
        elif "content-length" in fields:
            values = {v.strip() for v in fields["content-length"].split(",")}
            if len(values) != 1 or not (text := values.pop()).isdigit():
                raise UpstreamError("the upstream sent a malformed Content-Length")
            length = int(text)
        else:
            keep = False  # the body ends where the connection does
        if not reason:
            with contextlib.suppress(ValueError):
                reason = HTTPStatus(status).phrase
        return Response(status, reason, headers, connection, self, length, chunked, keep)

    async def aclose(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()
