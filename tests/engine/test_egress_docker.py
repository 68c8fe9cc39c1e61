"""The egress gateway with a real sandbox: no way out but the gateway, and secrets
the agent never sees. Every byte stays on loopback or the gateway's Unix socket."""

from __future__ import annotations

import datetime as dt
import sqlite3
import ssl
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import BASE_IMAGE, EchoUpstream, HostService

REAL_KEY = "real-example-key-" + "7d3f9a1c5e8b2046"


def _cert(name: str, issuer_key, issuer_name, key, ca: bool):
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def upstream(tmp_path):
    """An HTTPS stand-in for api.example.test on 127.0.0.1, with its own self-signed CA."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("Upstream Test CA", ca_key, None, ca_key, ca=True)
    leaf = _cert("api.example.test", ca_key, ca.subject, key, ca=False)
    (tmp_path / "upstream-ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoUpstream)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    EchoUpstream.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], tmp_path / "upstream-ca.pem", EchoUpstream.seen
    server.shutdown()


def upstream_toml(port: int, upstream_ca: Path) -> str:
    """proctor.toml for an agent script that calls the `upstream` stand-in through the gateway."""
    return f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "2m"

[[variants]]
name = "scripted"
command = "python3 .agent/agent.py"

[gateway]
resolve = {{"api.example.test" = "127.0.0.1:{port}"}}
trust = ["{upstream_ca}"]
"""


AGENT = r'''
import json, os, socket, urllib.request
def say(**item):
    print(json.dumps(item), flush=True)
key = os.environ["EXAMPLE_KEY"]
request = urllib.request.Request("https://api.example.test/v1/echo?key=" + key,
                                 headers={"Authorization": "Bearer " + key})
body = urllib.request.urlopen(request, timeout=30).read().decode()
say(type="command", command="GET https://api.example.test/v1/echo", exitCode=0, output=body)
try:
    urllib.request.urlopen("https://blocked.example.test/data", timeout=30)
    say(type="message", role="assistant", text="blocked host reachable")
except Exception as e:
    say(type="message", role="assistant", text="blocked: " + str(e))
try:  # the upstream's real address, around the gateway: the sandbox has no route there
    socket.create_connection(("127.0.0.1", int(os.environ["UPSTREAM_PORT"])), timeout=3)
    say(type="message", role="assistant", text="direct: reachable")
except OSError as e:
    say(type="message", role="assistant", text="direct: " + type(e).__name__)
say(type="finished", reason="done")
'''


def test_the_gateway_brokers_the_key_and_blocks_the_rest(suite, run_eval, upstream, store, monkeypatch):
    port, upstream_ca, seen = upstream
    monkeypatch.setenv("EXAMPLE_KEY", REAL_KEY)
    path = suite(f"""
from pathlib import Path
from engine import evaluation, Secret

@evaluation(files={{".agent/agent.py": Path("agent.py")}}, env={{"UPSTREAM_PORT": "{port}"}},
            secrets={{"EXAMPLE_KEY": Secret(hosts=["api.example.test"])}})
def calls_the_api(c):
    c.send("call the api")
    c.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\\\0' '\\\\n'").stdout.to_contain("proctor-placeholder-EXAMPLE_KEY")
    c.exec("grep -rl {REAL_KEY} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true").stdout.to_equal("")
    c.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '").stdout.to_equal("lo")
""", toml=upstream_toml(port, upstream_ca), files={"agent.py": AGENT})
    summary, events, records = run_eval(path)
    [run] = summary.runs
    record = records[run.trials[0].id]
    assert record.outcome == "pass", (record.failure, record.validations, record.turns)

    # The upstream got the real key, in the header and in the query.
    assert seen == [{"path": f"/v1/echo?key={REAL_KEY}", "auth": f"Bearer {REAL_KEY}"}]
    outputs = [i.output or i.text for i in record.trajectory]
    assert '{"ok": true, "path": "/v1/echo"}' in outputs
    assert any("blocked:" in o and "403" in o for o in outputs), outputs
    assert "direct: ConnectionRefusedError" in outputs or any(o.startswith("direct: ") and "reachable" not in o
                                                              for o in outputs)

    brokered, blocked = record.egress
    assert (brokered.method, brokered.host, brokered.path) == ("GET", "api.example.test", "/v1/echo")
    assert brokered.allowed and brokered.brokered == ["EXAMPLE_KEY"] and brokered.status == 200
    assert (blocked.host, blocked.allowed, blocked.status) == ("blocked.example.test", False, 403)
    container = [p for p in record.phases if p.phase == "container"][0]
    assert container.status == "ok"
    line = [e.summary for e in events if getattr(e, "phase", None) == "container" and hasattr(e, "summary")][0]
    assert "no network, gateway only" in line and "egress gateway started · brokers EXAMPLE_KEY" in line

    # Neither the value nor a fragment of it reached the store.
    store.flush()
    raw = b"".join(p.read_bytes() for p in store.path.parent.glob(store.path.name + "*"))
    with sqlite3.connect(store.path) as db:
        raw += "".join(str(r) for r in db.execute("select record from trial")).encode()
    for i in range(0, len(REAL_KEY) - 8):
        assert REAL_KEY[i:i + 8].encode() not in raw


def test_an_image_without_a_relay_runtime_is_void(suite, run_eval, monkeypatch, docker_client):
    monkeypatch.setenv("EXAMPLE_KEY", REAL_KEY)
    path = suite("""
from engine import evaluation, Install, Secret

@evaluation(image=Install("proctor-test-base:bookworm", ["rm -f /usr/bin/python3*"]),
            secrets={"EXAMPLE_KEY": Secret(hosts=["api.example.test"])})
def no_python(c):
    c.send("x")
""")
    summary, _, records = run_eval(path)
    record = records[summary.runs[0].trials[0].id]
    assert record.outcome == "infra_error" and record.failure.where == "container"
    assert "python3, node or socat" in record.failure.reason
    docker_client.images.remove(record.image, force=True)


def test_a_gateway_that_cannot_start_is_void(suite, run_eval, monkeypatch):
    monkeypatch.setenv("EXAMPLE_KEY", REAL_KEY)
    toml = f"""
[defaults]
image = "{BASE_IMAGE}"

[[variants]]
name = "scripted"
command = "true"

[gateway]
trust = ["no-such-ca.pem"]
"""
    path = suite("""
from engine import evaluation, Secret

@evaluation(secrets={"EXAMPLE_KEY": Secret(hosts=["api.example.test"])})
def gateway_fails(c):
    c.send("x")
""", toml=toml)
    summary, _, records = run_eval(path)
    record = records[summary.runs[0].trials[0].id]
    assert record.outcome == "infra_error" and record.failure.where == "container"
    assert record.failure.reason.startswith("the egress gateway could not start")
    assert "no-such-ca.pem" in record.failure.reason
    assert not record.turns


ATTACKER = r'''
import json, os, urllib.error, urllib.request
def say(**item):
    print(json.dumps(item), flush=True)
key = os.environ["EXAMPLE_KEY"]
request = urllib.request.Request("https://api.example.test/v1/headers", headers={"Authorization": "Bearer " + key})
open("/tmp/echo.json", "w").write(urllib.request.urlopen(request, timeout=30).read().decode())
for name in ("no_proxy", "NO_PROXY"):  # the relay's own loopback is exempt; ask the gateway anyway
    os.environ.pop(name, None)
for url, headers in [("http://localhost:" + os.environ["SERVICE_PORT"] + "/admin", {}),
                     ("http://api.example.test/v1/plain", {"Authorization": "Bearer " + key})]:
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30)
        say(type="message", role="assistant", text=url + " reachable")
    except urllib.error.HTTPError as e:
        say(type="message", role="assistant", text=url + " " + str(e.code))
say(type="finished", reason="done")
'''


@pytest.fixture
def host_service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostService)
    HostService.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], HostService.seen
    server.shutdown()


def test_the_sandbox_reaches_neither_the_hosts_services_nor_the_real_key(suite, run_eval, upstream, host_service,
                                                                        monkeypatch):
    port, upstream_ca, seen = upstream
    service_port, service_seen = host_service
    monkeypatch.setenv("EXAMPLE_KEY", REAL_KEY)
    path = suite(f"""
from pathlib import Path
from engine import evaluation, Secret

@evaluation(files={{".agent/agent.py": Path("agent.py")}}, env={{"SERVICE_PORT": "{service_port}"}},
            allow=["localhost"], secrets={{"EXAMPLE_KEY": Secret(hosts=["api.example.test"])}})
def attacks(c):
    c.send("attack")
    c.exec("cat /tmp/echo.json").stdout.to_contain("Bearer proctor-placeholder-EXAMPLE_KEY")
    c.exec("grep -rl {REAL_KEY} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true").stdout.to_equal("")
""", toml=upstream_toml(port, upstream_ca), files={"agent.py": ATTACKER})
    summary, _, records = run_eval(path)
    record = records[summary.runs[0].trials[0].id]
    assert record.outcome == "pass", (record.failure, record.validations, record.turns)
    assert seen == [{"path": "/v1/headers", "auth": f"Bearer {REAL_KEY}"}]  # the key went out once, over TLS
    assert service_seen == []
    texts = [i.text for i in record.trajectory if i.kind == "message"]
    assert texts == [f"http://localhost:{service_port}/admin 403", "http://api.example.test/v1/plain 403"]
    echo, local, plain = record.egress
    assert (echo.path, echo.allowed, echo.brokered) == ("/v1/headers", True, ["EXAMPLE_KEY"])
    assert (local.host, local.allowed, local.status) == ("localhost", False, 403) and "loopback" in local.reason
    assert (plain.path, plain.allowed, plain.status) == ("/v1/plain", False, 403) and "cleartext" in plain.reason
