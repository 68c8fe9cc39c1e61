"""What the egress gateway costs: per-request latency and download throughput,
through the gateway against the same request straight to the upstream, measured
alternately in one run (this machine is noisy; only the ratios mean much).

    python bench/gateway.py [--rounds 10] [--requests 30] [--mb 50]

The upstream is an HTTPS stand-in on 127.0.0.1 with its own CA; the gateway
listens on a Unix socket, as it does for a sandbox's relay. Three paths:
  direct     a new TLS connection to the upstream per request
  tunnel     CONNECT through the gateway, TLS end to end (an allowed host)
  brokered   CONNECT through the gateway, TLS terminated, the key swapped in and the
             answer searched for it (so sent chunked when it is larger than 256 KiB)
Every byte stays on loopback or the Unix socket.
"""

from __future__ import annotations

import argparse
import random
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.sandbox.ca import CertificateAuthority  # noqa: E402
from engine.sandbox.gateway import BrokeredSecret, GatewayHost, GatewaySpec  # noqa: E402

HOST, KEY, PLACEHOLDER = "api.example.test", "real-key-0123456789", "proctor-placeholder-KEY-0000"
CHUNK = 1 << 20
# What a download usually is (a wheel, a tarball): bytes that look random. Not one byte
# repeated: a run of "x" is a worst case for the substring search that swaps values back.
BLOCK = random.Random(0).randbytes(CHUNK)


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    download = 0

    def setup(self):
        super().setup()
        # As real servers do: without it the head and body of a keep-alive response wait on
        # Nagle and the gateway's delayed ACK (40 ms), which would be this stand-in's cost.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        size = type(self).download if self.path.startswith("/download") else 2
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = BLOCK
        left = size
        while left:
            n = min(left, CHUNK)
            self.wfile.write(block[:n])
            left -= n

    def log_message(self, *args):
        pass


def read_response(stream) -> int:
    """Read one HTTP/1.1 response, framed by Content-Length or chunked (the gateway sends a
    brokered host's answer chunked: swapping values back changes its length); returns the
    body's size."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = stream.recv(65536)
        if not more:
            raise ConnectionError("closed before the headers")
        data += more
    head, _, data = data.partition(b"\r\n\r\n")
    fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])
    if b"content-length" in fields:
        length, got = int(fields[b"content-length"]), len(data)
        while got < length:
            more = stream.recv(1 << 20)
            if not more:
                raise ConnectionError("closed mid-body")
            got += len(more)
        return got
    got, buffer, at = 0, bytearray(data), 0
    while True:  # chunked: a size line, the data and CRLF, until the chunk of size 0
        while (end := buffer.find(b"\r\n", at)) == -1:
            more = stream.recv(1 << 20)
            if not more:
                raise ConnectionError("closed mid-body")
            buffer += more
        size = int(buffer[at:end], 16)
        at = end + 2
        while len(buffer) < at + size + 2:
            more = stream.recv(1 << 20)
            if not more:
                raise ConnectionError("closed mid-body")
            buffer += more
        if size == 0:
            return got
        got, at = got + size, at + size + 2
        if at > 1 << 20:  # drop what has been read, now and then, not on every chunk
            del buffer[:at]
            at = 0


def request(path: str, via: str | None, port: int, upstream_ctx: ssl.SSLContext,
            gateway_ctx: ssl.SSLContext) -> int:
    if via is None:
        raw = socket.create_connection(("127.0.0.1", port))
        context = upstream_ctx
    else:
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(via)
        raw.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += raw.recv(4096)
        assert reply.startswith(b"HTTP/1.1 200"), reply
        context = gateway_ctx
    with context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n"
                    f"Connection: close\r\n\r\n".encode())
        return read_response(tls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30, help="requests per path per round")
    parser.add_argument("--mb", type=int, default=50, help="size of the download")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="proctor-bench-gw-"))
    upstream_ca = CertificateAuthority("Bench upstream CA")
    (folder / "upstream-ca.pem").write_bytes(upstream_ca.cert_pem)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.socket = upstream_ca.server_context(HOST).wrap_socket(server.socket, server_side=True)
    Upstream.download = args.mb * CHUNK
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    upstream_ctx = ssl.create_default_context(cadata=upstream_ca.cert_pem.decode())

    host = GatewayHost()
    resolve = {HOST: f"127.0.0.1:{port}"}
    trust = [folder / "upstream-ca.pem"]
    tunnel_gw = host.start(GatewaySpec(socket_path=folder / "tunnel.sock", allow=[HOST], secrets=[],
                                       resolve=resolve, trust=trust))
    broker_gw = host.start(GatewaySpec(
        socket_path=folder / "broker.sock", allow=[], resolve=resolve, trust=trust,
        secrets=[BrokeredSecret(name="KEY", placeholder=PLACEHOLDER, value=KEY, hosts=[HOST])]))
    broker_ctx = ssl.create_default_context(cadata=broker_gw.ca_pem.decode())
    paths = {"direct": None, "tunnel": str(folder / "tunnel.sock"), "brokered": str(folder / "broker.sock")}

    def timed(path: str, via: str | None, n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            request(path, via, port, upstream_ctx, upstream_ctx if via == paths["tunnel"] else broker_ctx)
        return (time.perf_counter() - started) / n

    for via in paths.values():  # warm up: leaf certificates, httpx clients
        timed("/small", via, 3)
    latency: dict[str, list[float]] = {name: [] for name in paths}
    throughput: dict[str, list[float]] = {name: [] for name in paths}
    print(f"{args.rounds} rounds × {args.requests} requests per path, then a {args.mb} MB download per path")
    for r in range(args.rounds):
        for name, via in paths.items():  # alternate the paths inside every round
            latency[name].append(timed("/small", via, args.requests))
        print(f"  round {r + 1:2}: " + "  ".join(f"{n} {latency[n][-1] * 1000:6.2f} ms" for n in paths))
    for r in range(max(3, args.rounds // 3)):
        for name, via in paths.items():
            seconds = timed("/download", via, 1)
            throughput[name].append(args.mb / seconds)
    print()
    direct = statistics.median(latency["direct"])
    for name in paths:
        median = statistics.median(latency[name])
        print(f"latency  {name:9} median {median * 1000:6.2f} ms per request   "
              f"{median / direct:4.2f}× direct   (+{(median - direct) * 1000:.2f} ms)")
    base = statistics.median(throughput["direct"])
    for name in paths:
        median = statistics.median(throughput[name])
        print(f"download {name:9} median {median:7.1f} MB/s   {median / base:4.2f}× direct")
    swapped = sum(e.brokered == ["KEY"] for e in broker_gw.entries())
    print(f"\nbrokered requests with the key swapped in: {swapped}")
    host.close()
    server.shutdown()


if __name__ == "__main__":
    main()
