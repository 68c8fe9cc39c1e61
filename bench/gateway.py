"""What the egress gateway costs: per-request latency and download throughput,
through the gateway against the same request straight to the upstream, measured
alternately in one run (this machine is noisy; only the ratios mean much).

    python bench/gateway.py [--rounds 10] [--requests 30] [--mb 50] [--rev HEAD]

The upstream is an HTTPS stand-in on 127.0.0.1 with its own CA, in a process of its
own (as a real upstream is: its TLS does not take this process's GIL); the gateway
listens on a Unix socket, as it does for a sandbox's relay. Paths:
  direct     a new TLS connection to the upstream per request
  tunnel     CONNECT through the gateway, TLS end to end (an allowed host)
  brokered   CONNECT through the gateway, TLS terminated, the key swapped in and the
             answer searched for it (so sent chunked when it is larger than 256 KiB)
Tunnel and brokered run twice: through the working tree's gateway and through
`engine/sandbox/gateway.py` as committed at --rev ("before"), loaded from `git show`
as its own module, side by side in the same rounds.
Every byte stays on loopback or the Unix socket.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import random
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from multiprocessing.connection import Connection
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.sandbox.ca import CertificateAuthority  # noqa: E402
from engine.sandbox import gateway as working_tree  # noqa: E402

HOST, KEY, PLACEHOLDER = "api.example.test", "real-key-0123456789", "proctor-placeholder-KEY-0000"
CHUNK = 1 << 20
TICKS = os.sysconf("SC_CLK_TCK")
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
    body's size. The body is counted, never kept: read into one scratch buffer on every path,
    so that the client costs the same whatever the framing."""
    scratch = bytearray(1 << 20)
    view = memoryview(scratch)
    data = b""
    while b"\r\n\r\n" not in data:
        more = stream.recv(65536)
        if not more:
            raise ConnectionError("closed before the headers")
        data += more
    head, _, data = data.partition(b"\r\n\r\n")
    fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])

    def skip(left: int) -> None:
        while left:
            n = stream.recv_into(view, min(left, len(scratch)))
            if not n:
                raise ConnectionError("closed mid-body")
            left -= n

    if b"content-length" in fields:
        length = int(fields[b"content-length"])
        skip(length - len(data))
        return length
    got, buffer = 0, bytes(data)
    while True:  # chunked: a size line, the data and CRLF, until the chunk of size 0
        while (end := buffer.find(b"\r\n")) == -1:
            n = stream.recv_into(view, 64)  # a size line is short: read no further into the data
            if not n:
                raise ConnectionError("closed mid-body")
            buffer += scratch[:n]
        size = int(buffer[:end], 16)
        buffer = buffer[end + 2:]
        if size == 0:
            return got
        got += size
        held = min(len(buffer), size + 2)
        skip(size + 2 - held)
        buffer = buffer[held:]


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
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n"
                    f"Authorization: Bearer {PLACEHOLDER}\r\n"
                    f"Connection: close\r\n\r\n".encode())
        return read_response(tls)


def load_before(rev: str) -> ModuleType:
    """The gateway module as committed at `rev`, beside the working tree's."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:engine/sandbox/gateway.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("engine.sandbox.gateway_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "engine.sandbox"
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    exec(compile(source, f"{rev}:engine/sandbox/gateway.py", "exec"), module.__dict__)
    return module


def serve_upstream(ca: CertificateAuthority, size: int, ports: Connection) -> None:
    """The upstream, in its own process: serves until the parent ends it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.socket = ca.server_context(HOST).wrap_socket(server.socket, server_side=True)
    Upstream.download = size
    ports.send(server.server_address[1])
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30, help="requests per path per round")
    parser.add_argument("--mb", type=int, default=50, help="size of the download")
    parser.add_argument("--rev", default="HEAD", help="the revision of the \"before\" gateway")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="proctor-bench-gw-"))
    upstream_ca = CertificateAuthority("Bench upstream CA")
    (folder / "upstream-ca.pem").write_bytes(upstream_ca.cert_pem)
    # Forked before any thread of this process starts.
    here, there = multiprocessing.Pipe()
    upstream = multiprocessing.get_context("fork").Process(
        target=serve_upstream, args=(upstream_ca, args.mb * CHUNK, there), daemon=True)
    upstream.start()
    port = here.recv()
    upstream_ctx = ssl.create_default_context(cadata=upstream_ca.cert_pem.decode())

    before = load_before(args.rev)
    resolve = {HOST: f"127.0.0.1:{port}"}
    trust = [folder / "upstream-ca.pem"]
    hosts, paths, contexts, brokers = [], {"direct": None}, {}, {}
    for label, module in (("before", before), ("after", working_tree)):
        host = module.GatewayHost()
        hosts.append(host)
        host.start(module.GatewaySpec(socket_path=folder / f"tunnel-{label}.sock", allow=[HOST],
                                      secrets=[], resolve=resolve, trust=trust))
        broker = host.start(module.GatewaySpec(
            socket_path=folder / f"broker-{label}.sock", allow=[], resolve=resolve, trust=trust,
            secrets=[module.BrokeredSecret(name="KEY", placeholder=PLACEHOLDER, value=KEY,
                                           hosts=[HOST])]))
        tunnel_name, broker_name = ("tunnel", "brokered") if label == "after" else (
            f"tunnel@{args.rev}", f"brokered@{args.rev}")
        paths[tunnel_name] = str(folder / f"tunnel-{label}.sock")
        paths[broker_name] = str(folder / f"broker-{label}.sock")
        contexts[tunnel_name] = upstream_ctx
        contexts[broker_name] = ssl.create_default_context(cadata=broker.ca_pem.decode())
        brokers[broker_name] = broker
    contexts["direct"] = upstream_ctx

    def cpu() -> float:
        """CPU seconds so far of this process (client and gateways) and of the upstream's."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        fields = Path(f"/proc/{upstream.pid}/stat").read_text().rpartition(")")[2].split()
        return own.ru_utime + own.ru_stime + (int(fields[11]) + int(fields[12])) / TICKS

    def timed(name: str, path: str, n: int) -> tuple[float, float]:
        """Wall and CPU seconds per request."""
        started, used = time.perf_counter(), cpu()
        for _ in range(n):
            request(path, paths[name], port, upstream_ctx, contexts[name])
        return (time.perf_counter() - started) / n, (cpu() - used) / n

    for name in paths:  # warm up: leaf certificates, httpx clients
        timed(name, "/small", 3)
    latency: dict[str, list[float]] = {name: [] for name in paths}
    throughput: dict[str, list[float]] = {name: [] for name in paths}
    cpu_request: dict[str, list[float]] = {name: [] for name in paths}
    cpu_mb: dict[str, list[float]] = {name: [] for name in paths}
    print(f"{args.rounds} rounds × {args.requests} requests per path, "
          f"then a {args.mb} MB download per path")
    for r in range(args.rounds):
        for name in paths:  # alternate the paths inside every round
            wall, used = timed(name, "/small", args.requests)
            latency[name].append(wall)
            cpu_request[name].append(used)
        print(f"  round {r + 1:2}: "
              + "  ".join(f"{n} {latency[n][-1] * 1000:5.2f} ms" for n in paths))
    for r in range(max(3, args.rounds // 3)):
        for name in paths:
            wall, used = timed(name, "/download", 1)
            throughput[name].append(args.mb / wall)
            cpu_mb[name].append(used * 1000 / args.mb)
        print(f"  download {r + 1}: "
              + "  ".join(f"{n} {throughput[n][-1]:6.1f} MB/s" for n in paths))
    print()
    median = {name: statistics.median(values) for name, values in latency.items()}
    speed = {name: statistics.median(values) for name, values in throughput.items()}
    cost = {name: statistics.median(values) for name, values in cpu_mb.items()}
    request_cost = {name: statistics.median(values) for name, values in cpu_request.items()}
    for name in paths:
        print(f"latency  {name:16} median {median[name] * 1000:6.2f} ms per request "
              f"(+{(median[name] - median['direct']) * 1000:5.2f} ms)   "
              f"CPU {request_cost[name] * 1000:5.2f} ms "
              f"(+{(request_cost[name] - request_cost['direct']) * 1000:5.2f} ms)")
    for name in paths:
        print(f"download {name:16} median {speed[name]:7.1f} MB/s "
              f"{speed[name] / speed['direct']:5.2f}× direct   "
              f"CPU {cost[name]:5.2f} ms per MB {cost['direct'] / cost[name]:5.2f}× direct")
    time.sleep(0.5)  # an entry is written as its response ends, a moment after the client read it
    for name, broker in brokers.items():
        swapped = sum(e.brokered == ["KEY"] for e in broker.entries())
        print(f"{name}: requests with the key swapped in: {swapped}")

    def ratio(name: str) -> str:
        return (f"{speed[name] / speed['direct']:.2f} wall, "
                f"{cost['direct'] / cost[name]:.2f} CPU")

    def added(name: str) -> str:
        return (f"{(median[name] - median['direct']) * 1000:+.2f} ms wall, "
                f"{(request_cost[name] - request_cost['direct']) * 1000:+.2f} ms CPU")

    # The ratios come as wall time (what a user waits) and as CPU time (what the paths cost,
    # steadier than wall time on a shared machine); a goal is met when both meet it.
    goals = {"tunnel": 0.9, "brokered": 0.6}
    print("\nsummary:")
    for name in paths:
        print(f"  latency {name}: {median[name] * 1000:.2f} ms")
    for name in paths:
        print(f"  download {name}: {speed[name]:.1f} MB/s")
    for name, goal in goals.items():
        met = min(speed[name] / speed["direct"], cost["direct"] / cost[name]) >= goal
        print(f"  {name}/direct: before {ratio(f'{name}@{args.rev}')}; after {ratio(name)}"
              f"  goal >= {goal}  {'met' if met else 'missed'}")
    met = max(median["brokered"] - median["direct"],
              request_cost["brokered"] - request_cost["direct"]) <= 0.001
    print(f"  brokered latency added: before {added(f'brokered@{args.rev}')}; "
          f"after {added('brokered')}"
          f"  goal <= 1 ms  {'met' if met else 'missed'}")
    for host in hosts:
        host.close()
    upstream.terminate()


if __name__ == "__main__":
    main()
