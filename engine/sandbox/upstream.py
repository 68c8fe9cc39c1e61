"""The gateway's connections to upstream hosts: httpx over plain asyncio streams.

httpx's default network layer on asyncio is AnyIO, whose TLS stream hands httpcore one
TLS record (16 KiB) per read, through several layers of cancel scopes: for a brokered
download that was most of the gateway's CPU. asyncio's own TLS transport decrypts what
the socket holds in one go, so each read here takes up to `_READ` bytes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

_READ = 256 * 1024  # per read: what asyncio's TLS transport decrypts from one socket read
# The stream's buffer pauses the socket at twice this: a bound on what one connection holds.
_LIMIT = 512 * 1024


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        # More than httpcore's 64 KiB when it is there: h11 takes any size, and fewer reads
        # are what makes a download fast.
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max(max_bytes, _READ))
        except TimeoutError:
            raise httpcore.ReadTimeout("the upstream sent nothing in time") from None
        except OSError as e:
            raise httpcore.ReadError(str(e)) from e

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("the upstream took nothing in time") from None
        except OSError as e:
            raise httpcore.WriteError(str(e)) from e

    async def aclose(self) -> None:
        self._writer.close()  # not awaited: a TLS peer that never answers must not hold us

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        try:
            await self._writer.start_tls(ssl_context, server_hostname=server_hostname,
                                         ssl_handshake_timeout=timeout)
        except TimeoutError:
            self._writer.close()
            raise httpcore.ConnectTimeout("the TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as e:  # SSLError is an OSError; named for the reader
            self._writer.close()
            raise httpcore.ConnectError(str(e)) from e
        return self

    def get_extra_info(self, info: str) -> Any:
        if info in ("ssl_object", "socket"):
            return self._writer.get_extra_info(info)
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "is_readable":  # an idle pooled connection the upstream has closed
            return self._reader.at_eof() or self._reader.exception() is not None
        return None


class _Backend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
            self, host: str, port: int, timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                local = (local_address, 0) if local_address else None
                reader, writer = await asyncio.open_connection(host, port, limit=_LIMIT,
                                                               local_addr=local)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"cannot connect to {host}:{port} in time") from None
        except OSError as e:
            raise httpcore.ConnectError(str(e)) from e
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            with contextlib.suppress(OSError):
                sock.setsockopt(*option)
        return _Stream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class Transport(httpx.AsyncHTTPTransport):
    """httpx's own transport (pool, keep-alive, errors) on the asyncio network layer above."""

    def __init__(self, verify: ssl.SSLContext, socket_options: list[tuple[int, int, int]]):
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5)
        super().__init__(verify=verify, http1=True, http2=False, limits=limits,
                         socket_options=socket_options)
        # The pool as httpx builds it, but on this network layer: httpx has no argument for it.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify, http1=True, http2=False, socket_options=socket_options,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=_Backend())
