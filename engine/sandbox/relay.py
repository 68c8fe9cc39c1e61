"""The relay inside the sandbox: 127.0.0.1:PORT -> the gateway's Unix socket.

The sandbox has no network but loopback; the gateway's socket is mounted (read-only)
into it. The relay copies bytes both ways and decides nothing: the gateway
enforces the allow-list. It is written in whatever the image has: python3,
node, or socat; an image with none of them cannot reach the gateway. The sandbox
trusts the gateway's CA (it terminates TLS for brokered hosts) through a bundle of
the image's own CAs and that one.
"""

from __future__ import annotations

from .container import ENGINE_DIR, Sandbox

GATEWAY_DIR = "/run/proctor-gateway"  # where the gateway's socket folder is mounted
SOCKET_NAME = "gateway.sock"
PORT = 3128
READY = f"{ENGINE_DIR}/relay.ready"
CA_FILE = f"{ENGINE_DIR}/gateway-ca.pem"
CA_BUNDLE = f"{ENGINE_DIR}/ca-bundle.pem"
# The image's own CAs first, so tunnelled hosts still verify; then the gateway's.
_BUNDLE = (f"for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do "
           f"[ -f $f ] && cat $f && break; done > {CA_BUNDLE}; cat {CA_FILE} >> {CA_BUNDLE}")

PYTHON = f"""
import socket, sys, threading
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect("{GATEWAY_DIR}/{SOCKET_NAME}")
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    pump(upstream, client)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", {PORT}))
server.listen(256)
open("{READY}", "w").close()
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

NODE = f"""
const net = require("net"), fs = require("fs");
net.createServer(c => {{
  const u = net.connect({{path: "{GATEWAY_DIR}/{SOCKET_NAME}"}});
  c.pipe(u); u.pipe(c);
  c.on("error", () => u.destroy()); u.on("error", () => c.destroy());
}}).listen({PORT}, "127.0.0.1", () => fs.writeFileSync("{READY}", ""));
"""

# Tries each runtime in turn; writes which one started, or exits 127 when none is there.
START = f"""
if command -v python3 >/dev/null 2>&1; then run="python3 {ENGINE_DIR}/relay.py"
elif command -v node >/dev/null 2>&1; then run="node {ENGINE_DIR}/relay.js"
elif command -v socat >/dev/null 2>&1; then
  run="socat TCP-LISTEN:{PORT},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{GATEWAY_DIR}/{SOCKET_NAME}"
  touch {READY}
else exit 127; fi
nohup $run >{ENGINE_DIR}/relay.log 2>&1 &
i=0
while [ ! -e {READY} ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done
[ -e {READY} ] && echo "${{run%% *}}"
"""


class RelayFailed(Exception):
    pass


def start_relay(sandbox: Sandbox) -> str:
    """Start the relay; returns the runtime it runs on. Raises RelayFailed with the sentence to show."""
    sandbox.put_files({f"{ENGINE_DIR}/relay.py".lstrip("/"): PYTHON.encode(),
                       f"{ENGINE_DIR}/relay.js".lstrip("/"): NODE.encode()}, base="/")
    out = sandbox.exec(START, timeout=15, workdir="/")
    if out.exit_code == 127:
        raise RelayFailed("the image has no python3, node or socat to run the egress relay: "
                          "add one of them to the image")
    if out.exit_code != 0 or not out.stdout.strip():
        raise RelayFailed(f"the egress relay did not start in the sandbox: {out.output.strip()[:200]}")
    return out.stdout.strip()


def trust_ca(sandbox: Sandbox, ca_pem: bytes) -> None:
    """Make the sandbox trust the gateway's CA: its file, and the bundle (CA_BUNDLE)."""
    sandbox.put_files({CA_FILE.lstrip("/"): ca_pem}, base="/")
    sandbox.exec(_BUNDLE, timeout=30, workdir="/")


def proxy_env(ca_bundle: str = CA_BUNDLE, ca_file: str = CA_FILE) -> dict[str, str]:
    """What the sandbox needs to send its traffic through the relay and trust the gateway's CA."""
    proxy = f"http://127.0.0.1:{PORT}"
    return {
        "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
        "ALL_PROXY": proxy, "all_proxy": proxy,
        "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
        "SSL_CERT_FILE": ca_bundle, "REQUESTS_CA_BUNDLE": ca_bundle, "CURL_CA_BUNDLE": ca_bundle,
        "GIT_SSL_CAINFO": ca_bundle, "NODE_EXTRA_CA_CERTS": ca_file,
    }
