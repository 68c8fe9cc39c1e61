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
  floor      a reference, not a gateway: a bare relay in a thread of blocking TLS sockets
             that terminates TLS, swaps the key and searches the answer, with no HTTP, no
             pool, no log: what any proxy that decrypts and re-encrypts costs at least here
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
import threading
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


def load_module(rev: str, name: str) -> ModuleType:
    """`engine/sandbox/NAME.py` as committed at `rev`, as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:engine/sandbox/{name}.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"engine.sandbox.{name}_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "engine.sandbox"
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    exec(compile(source, f"{rev}:engine/sandbox/{name}.py", "exec"), module.__dict__)
    return module


def load_before(rev: str) -> ModuleType:
    """The gateway module as committed at `rev`, beside the working tree's, with the
    upstream client of the same revision (the gateway imports it as `.upstream`)."""
    working = sys.modules["engine.sandbox.upstream"]
    sys.modules["engine.sandbox.upstream"] = load_module(rev, "upstream")
    try:
        return load_module(rev, "gateway")
    finally:
        sys.modules["engine.sandbox.upstream"] = working


class FloorCPU:
    """The CPU seconds the floor's relay threads used, and how many relays have ended."""

    def __init__(self) -> None:
        self.seconds, self.ended = 0.0, 0
        self.changed = threading.Condition()

    def add(self, seconds: float) -> None:
        with self.changed:
            self.seconds, self.ended = self.seconds + seconds, self.ended + 1
            self.changed.notify_all()

    def after(self, ended: int) -> float:
        """The CPU seconds once `ended` relays have ended (a relay ends a moment after the
        client has read its last byte)."""
        with self.changed:
            self.changed.wait_for(lambda: self.ended >= ended, timeout=10)
            return self.seconds


def serve_floor(listener: socket.socket, port: int, server_ctx: ssl.SSLContext,
                upstream_ctx: ssl.SSLContext, used: FloorCPU) -> None:
    """The floor path: per connection, CONNECT's 200, TLS on both legs, the head swapped,
    then the upstream's bytes relayed (searched for the key) until it closes."""
    def relay(client: socket.socket) -> None:
        try:
            relay_one(client)
        finally:
            used.add(time.thread_time())  # the thread's own CPU: it relays this connection only

    def relay_one(client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(4096)
            client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            with server_ctx.wrap_socket(client, server_side=True) as tls:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += tls.recv(65536)
                raw = socket.create_connection(("127.0.0.1", port))
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with upstream_ctx.wrap_socket(raw, server_hostname=HOST) as upstream:
                    upstream.sendall(head.replace(PLACEHOLDER.encode(), KEY.encode()))
                    buffer = bytearray(256 * 1024)
                    view, key = memoryview(buffer), KEY.encode()
                    while n := upstream.recv_into(view):
                        assert buffer.find(key, 0, n) == -1  # the bench's answer never holds it
                        tls.sendall(view[:n])

    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client,), daemon=True).start()


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
    parser.add_argument("--downloads", type=int, default=5, help="downloads per path")
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
    clocks: dict[str, int] = {}
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
        clocks[tunnel_name] = clocks[broker_name] = time.pthread_getcpuclockid(
            host._thread.ident)  # every gateway of a host runs on its loop's one thread
    contexts["direct"] = upstream_ctx
    floor_ca = CertificateAuthority("Bench floor CA")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "floor.sock"))
    listener.listen(64)
    floor_cpu = FloorCPU()
    threading.Thread(target=serve_floor, daemon=True, args=(
        listener, port, floor_ca.server_context(HOST), upstream_ctx, floor_cpu)).start()
    paths["floor"], contexts["floor"] = str(folder / "floor.sock"), ssl.create_default_context(
        cadata=floor_ca.cert_pem.decode())

    def cpu() -> float:
        """CPU seconds so far of this process (client and gateways) and of the upstream's."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        fields = Path(f"/proc/{upstream.pid}/stat").read_text().rpartition(")")[2].split()
        return own.ru_utime + own.ru_stime + (int(fields[11]) + int(fields[12])) / TICKS

    floor_requests = [0]

    def relay_cpu(name: str) -> float:
        """The relay's own CPU so far: a gateway's loop thread, or the floor's relay threads."""
        if name == "floor":
            return floor_cpu.after(floor_requests[0])
        return time.clock_gettime(clocks[name]) if name in clocks else 0.0

    def timed(name: str, path: str, n: int) -> tuple[float, float, float]:
        """Wall, CPU and the relay's own CPU seconds per request."""
        started, used, own = time.perf_counter(), cpu(), relay_cpu(name)
        for _ in range(n):
            request(path, paths[name], port, upstream_ctx, contexts[name])
        floor_requests[0] += n if name == "floor" else 0
        return ((time.perf_counter() - started) / n, (cpu() - used) / n,
                (relay_cpu(name) - own) / n)

    for name in paths:  # warm up: leaf certificates, kept-alive upstream connections
        timed(name, "/small", 3)
    latency: dict[str, list[float]] = {name: [] for name in paths}
    throughput: dict[str, list[float]] = {name: [] for name in paths}
    cpu_request: dict[str, list[float]] = {name: [] for name in paths}
    cpu_mb: dict[str, list[float]] = {name: [] for name in paths}
    own_request: dict[str, list[float]] = {name: [] for name in paths}
    own_mb: dict[str, list[float]] = {name: [] for name in paths}
    print(f"{args.rounds} rounds × {args.requests} requests per path, "
          f"then a {args.mb} MB download per path")
    for r in range(args.rounds):
        for name in paths:  # alternate the paths inside every round
            wall, used, own = timed(name, "/small", args.requests)
            latency[name].append(wall)
            cpu_request[name].append(used)
            own_request[name].append(own)
        print(f"  round {r + 1:2}: "
              + "  ".join(f"{n} {latency[n][-1] * 1000:5.2f} ms" for n in paths))
    for r in range(args.downloads):
        for name in paths:
            wall, used, own = timed(name, "/download", 1)
            throughput[name].append(args.mb / wall)
            cpu_mb[name].append(used * 1000 / args.mb)
            own_mb[name].append(own * 1000 / args.mb)
        print(f"  download {r + 1}: "
              + "  ".join(f"{n} {throughput[n][-1]:6.1f} MB/s" for n in paths))
    print()
    median = {name: statistics.median(values) for name, values in latency.items()}
    speed = {name: statistics.median(values) for name, values in throughput.items()}
    cost = {name: statistics.median(values) for name, values in cpu_mb.items()}
    request_cost = {name: statistics.median(values) for name, values in cpu_request.items()}
    own_cost = {name: statistics.median(values) for name, values in own_mb.items()}
    own_request_cost = {name: statistics.median(values) for name, values in own_request.items()}
    for name in paths:
        print(f"latency  {name:16} median {median[name] * 1000:6.2f} ms per request "
              f"(+{(median[name] - median['direct']) * 1000:5.2f} ms)   "
              f"CPU {request_cost[name] * 1000:5.2f} ms "
              f"(+{(request_cost[name] - request_cost['direct']) * 1000:5.2f} ms)   "
              f"the relay's own {own_request_cost[name] * 1000:5.2f} ms")
    for name in paths:
        print(f"download {name:16} median {speed[name]:7.1f} MB/s "
              f"{speed[name] / speed['direct']:5.2f}× direct   "
              f"CPU {cost[name]:5.2f} ms per MB {cost['direct'] / cost[name]:5.2f}× direct   "
              f"the relay's own {own_cost[name]:5.2f} ms per MB")
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
    print(f"  floor/direct (a bare blocking TLS relay, no HTTP): {ratio('floor')}")
    met = max(median["brokered"] - median["direct"],
              request_cost["brokered"] - request_cost["direct"]) <= 0.001
    print(f"  brokered latency added: before {added(f'brokered@{args.rev}')}; "
          f"after {added('brokered')}"
          f"  goal <= 1 ms  {'met' if met else 'missed'}")
    # The relay's own thread CPU: the steadiest figure of all, and the one a change moves.
    relays = [name for name in paths if name != "direct"]
    print("  the relay's own CPU per MB: "
          + ", ".join(f"{name} {own_cost[name]:.2f} ms" for name in relays))
    print("  the relay's own CPU per request: "
          + ", ".join(f"{name} {own_request_cost[name] * 1000:.2f} ms" for name in relays))
    for host in hosts:
        host.close()
    upstream.terminate()


if __name__ == "__main__":
    main()
