"""One trial's way out: its egress gateway, the relay in its sandbox, the CA it trusts.

Started in the container phase (before the container, which mounts the
gateway's socket folder), closed at teardown, when its log joins the record.
A trial that declares no `allow` and no `secrets` has nothing to reach, so it
gets no gateway: its sandbox simply has no network.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..config import Config
from ..errors import Void
from ..models import EgressEntry
from ..sandbox.container import ENGINE_DIR, Sandbox
from ..sandbox.gateway import BrokeredSecret, Gateway, GatewayError, GatewayHost, GatewaySpec
from ..sandbox.relay import GATEWAY_DIR, SOCKET_NAME, RelayFailed, proxy_env, start_relay
from ..spec import Case

CA_FILE = f"{ENGINE_DIR}/gateway-ca.pem"
CA_BUNDLE = f"{ENGINE_DIR}/ca-bundle.pem"
# The image's own CAs first, so tunnelled hosts still verify; then the gateway's.
_BUNDLE = (f"for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do "
           f"[ -f $f ] && cat $f && break; done > {CA_BUNDLE}; cat {CA_FILE} >> {CA_BUNDLE}")


class Egress:
    def __init__(self, host: GatewayHost, case: Case, config: Config,
                 placeholders: dict[str, str], values: dict[str, str]):
        self.host, self.case, self.config = host, case, config
        self.placeholders, self.values = placeholders, values
        self.gateway: Gateway | None = None
        self.folder: Path | None = None
        self.env: dict[str, str] = {}

    @property
    def needed(self) -> bool:
        return bool(self.case.allow or self.case.secrets)

    def start(self) -> dict[str, str]:
        """Start the gateway; returns the bind the container needs (host folder -> sandbox)."""
        self.folder = Path(tempfile.mkdtemp(prefix="proctor-gw-"))
        self.folder.chmod(0o755)
        base = self.config.path.parent if self.config.path else Path.cwd()
        spec = GatewaySpec(
            socket_path=self.folder / SOCKET_NAME,
            allow=list(self.case.allow),
            secrets=[BrokeredSecret(name=name, placeholder=self.placeholders[name],
                                    value=self.values.get(name, ""), hosts=list(secret.hosts))
                     for name, secret in self.case.secrets.items()],
            resolve=dict(self.config.gateway.resolve),
            trust=[(base / t).resolve() for t in self.config.gateway.trust],
        )
        try:
            self.gateway = self.host.start(spec)
        except GatewayError as e:
            raise Void(f"the egress gateway could not start: {e}", "container") from None
        return {str(self.folder): GATEWAY_DIR}

    def attach(self, sandbox: Sandbox) -> str:
        """Start the relay in the sandbox and make it trust the gateway's CA; one line to show."""
        assert self.gateway is not None
        try:
            runtime = start_relay(sandbox)
        except RelayFailed as e:
            raise Void(str(e), "container") from None
        sandbox.put_files({CA_FILE.lstrip("/"): self.gateway.ca_pem}, base="/")
        sandbox.exec(_BUNDLE, timeout=30, workdir="/")
        self.env = proxy_env(CA_BUNDLE, CA_FILE)
        brokered = ", ".join(self.case.secrets) or "nothing"
        return f"egress gateway started · brokers {brokered} · relay on {runtime}"

    def close(self) -> list[EgressEntry]:
        entries: list[EgressEntry] = []
        if self.gateway is not None:
            entries = self.gateway.entries()
            self.gateway.close()
            self.gateway = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        return entries
