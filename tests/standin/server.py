"""The loopback server every provider stand-in shares: recording, JSON and SSE replies, TLS.

A stand-in serves on 127.0.0.1 on a free port, in plain HTTP or, for the gateway's
upstream side, in HTTPS with a throwaway CA and a leaf for the provider's host name (the
same per-process CA Proctor gives a trial; its PEM goes into `[gateway] trust`).
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Self
from urllib.parse import parse_qsl, urlsplit

import zstandard

from engine.sandbox.ca import CertificateAuthority
from tests.standin.script import Script, two_turns


@dataclass(frozen=True)
class Seen:
    """One request the stand-in received, as it arrived."""

    method: str
    path: str  # without the query
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: Any  # the decoded JSON, or None
    key: str | None  # the API key it carried, where this provider puts it

    @property
    def text(self) -> str:
        """The body as one JSON text, for `"earlier prompt" in seen.text`."""
        return json.dumps(self.body)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked SSE as the real APIs send it
    server: _Server

    def log_message(self, *args: object) -> None:
        pass  # no request lines in the test output

    def do_GET(self) -> None:
        self.server.standin._dispatch(self)

    do_POST = do_HEAD = do_GET

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size + 2)[:-2]
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        coding = self.headers.get("Content-Encoding", "").lower()
        if coding == "gzip":
            return gzip.decompress(data)
        if coding == "zstd":  # Codex compresses its request bodies this way
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        return data

    def send_json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_sse(self, events: Iterable[tuple[str | None, Any]]) -> None:
        """Server-sent events, each `(event name or None, data)`, one chunk per event."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in events:
            frame = (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
            chunk = frame.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: StandIn, tls: CertificateAuthority | None, host: str):
        super().__init__(("127.0.0.1", 0), Handler)
        self.standin, self.tls, self.host = standin, tls, host

    def finish_request(self, request, client_address):  # type: ignore[no-untyped-def]
        # The TLS handshake happens in the request's own thread, not in the accept loop.
        if self.tls is None:
            return super().finish_request(request, client_address)
        with self.tls.server_context(self.host).wrap_socket(request, server_side=True) as wrapped:
            super().finish_request(wrapped, client_address)

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        pass  # a client that hangs up mid-stream is not the test's news


class StandIn:
    """A provider API on loopback that answers from a `Script` and records every request.

    Use as a context manager: `with AnthropicStandIn() as api: … api.url …`, or with
    `tls=folder` for HTTPS as `HOST` (then `ca_path`, `resolve` and `gateway_toml()`)."""

    HOST: ClassVar[str]  # the provider's real host name

    def __init__(self, script: Script | None = None, model: str | None = None,
                 tls: Path | None = None) -> None:
        self.script = script or two_turns()
        self.model = model  # None: answer as the model the request names
        self.requests: list[Seen] = []
        self.ca_path: Path | None = None
        self._tls_folder = tls
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: _Server | None = None

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> Self:
        ca = None
        if self._tls_folder is not None:
            ca = CertificateAuthority(f"{type(self).__name__} test CA")
            self._tls_folder.mkdir(parents=True, exist_ok=True)
            self.ca_path = self._tls_folder / f"{self.HOST}-ca.pem"
            self.ca_path.write_bytes(ca.cert_pem)
        self._server = _Server(self, ca, self.HOST)
        # A short poll: close() waits for it.
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- where it is ----------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "the stand-in is not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The base URL on loopback (an HTTPS one checks as `HOST`, not 127.0.0.1)."""
        scheme = "https" if self._tls_folder is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def resolve(self) -> dict[str, str]:
        """`[gateway] resolve` sending the provider's host here."""
        return {self.HOST: f"127.0.0.1:{self.port}"}

    def gateway_toml(self) -> str:
        """The `[gateway]` table of a proctor.toml that routes `HOST` to this stand-in."""
        assert self.ca_path is not None, "gateway_toml needs the stand-in started with tls="
        return (f'[gateway]\nresolve = {{"{self.HOST}" = "127.0.0.1:{self.port}"}}\n'
                f'trust = ["{self.ca_path}"]\n')

    # --- what it saw --------------------------------------------------------------------

    def calls(self) -> list[Seen]:
        """The scripted requests (those carrying tools), in order."""
        with self._lock:
            return [s for s in self.requests if self.is_scripted(s)]

    def keys(self) -> set[str]:
        """The API keys that arrived; requests without one (Claude Code's `HEAD /` probe)
        are left out."""
        with self._lock:
            return {s.key for s in self.requests if s.key is not None}

    # --- for the providers --------------------------------------------------------------

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_standin{next(self._ids):04d}"

    def model_for(self, requested: str | None) -> str:
        return self.model or requested or "standin-model"

    def _dispatch(self, handler: Handler) -> None:
        split = urlsplit(handler.path)
        raw = handler.read_body() if handler.command == "POST" else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        query = dict(parse_qsl(split.query))
        headers = {k.lower(): v for k, v in handler.headers.items()}
        seen = Seen(handler.command, split.path, query, headers, body, self.key_of(headers, query))
        with self._lock:
            self.requests.append(seen)
        self.answer(handler, seen)

    def key_of(self, headers: dict[str, str], query: dict[str, str]) -> str | None:
        raise NotImplementedError

    def is_scripted(self, seen: Seen) -> bool:
        raise NotImplementedError

    def answer(self, handler: Handler, seen: Seen) -> None:
        raise NotImplementedError


def bearer(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization", "")
    return value[7:] if value.lower().startswith("bearer ") else (value or None)


def chunks(text: str, parts: int = 3) -> list[str]:
    """`text` cut into a few pieces, so a client must join deltas."""
    size = max(1, -(-len(text) // parts))
    return [text[n:n + size] for n in range(0, len(text), size)] or [""]
