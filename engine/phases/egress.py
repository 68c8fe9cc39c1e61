"""One trial's way out: its egress gateway, the relay in its sandbox, the CA it trusts.

Started in the container phase, on the socket folder the container mounts
(engine.sandbox.mount: made here before the container, or ahead with a warm one),
closed at teardown, when its log joins the record. A trial that declares no `allow`
and no `secrets` has nothing to reach, so it gets no gateway: its sandbox simply has
no network. The socket is the only way between the sandbox and this host, so it is
all the sandbox gets.
"""

from __future__ import annotations

from pathlib import Path

import docker
from docker.types import Mount

from ..config import Config
from ..errors import Void
from ..models import EgressEntry
from ..sandbox.ca import CertificateAuthority
from ..sandbox.container import Sandbox
from ..sandbox.gateway import BrokeredSecret, Gateway, GatewayError, GatewayHost, GatewaySpec
from ..sandbox.mount import GatewayMount, MountFailed
from ..sandbox.relay import SOCKET_NAME, RelayFailed, proxy_env, start_relay, trust_ca
from ..spec import Case, Secret


class Egress:
    def __init__(self, host: GatewayHost, case: Case, config: Config,
                 placeholders: dict[str, str], values: dict[str, str],
                 secrets: dict[str, Secret] | None = None):
        """`secrets`: the case's and its harness's (a CLI's key); the case's alone by default."""
        self.host, self.case, self.config = host, case, config
        self.placeholders, self.values = placeholders, values
        self.secrets = case.secrets if secrets is None else secrets
        self.gateway: Gateway | None = None
        self.mount: GatewayMount | None = None
        self.env: dict[str, str] = {}

    @property
    def needed(self) -> bool:
        return bool(self.case.allow or self.secrets)

    def start(self, client: docker.DockerClient, labels: dict[str, str],
              mount: GatewayMount | None = None, ca: CertificateAuthority | None = None) -> list[Mount]:
        """Start the gateway on `mount` (a warm sandbox's, with `ca`, the CA it trusts), or on
        a new one; returns what the container mounts (its socket's folder)."""
        try:
            self.mount = mount or GatewayMount.make(client, labels)
        except MountFailed as e:
            raise Void(str(e), "container") from None
        base = self.config.path.parent if self.config.path else Path.cwd()
        spec = GatewaySpec(
            socket_path=self.mount.shared / SOCKET_NAME,
            allow=list(self.case.allow),
            secrets=[BrokeredSecret(name=name, placeholder=self.placeholders[name],
                                    value=self.values.get(name, ""), hosts=list(secret.hosts))
                     for name, secret in self.secrets.items()],
            resolve=dict(self.config.gateway.resolve),
            private=list(self.config.gateway.private),
            trust=[(base / t).resolve() for t in self.config.gateway.trust],
        )
        try:
            self.gateway = self.host.start(spec, ca)
        except GatewayError as e:
            raise Void(f"the egress gateway could not start: {e}", "container") from None
        return self.mount.mounts

    def attach(self, sandbox: Sandbox, relay: str | None = None) -> str:
        """Start the relay in the sandbox and make it trust the gateway's CA, unless a warm
        sandbox's `relay` runs already (it trusts its CA too); one line to show."""
        assert self.gateway is not None
        try:
            runtime = relay or start_relay(sandbox)
        except RelayFailed as e:
            raise Void(str(e), "container") from None
        if relay is None:
            trust_ca(sandbox, self.gateway.ca_pem)
        self.env = proxy_env()
        brokered = ", ".join(self.secrets) or "nothing"
        return f"egress gateway started · brokers {brokered} · relay on {runtime}"

    def close(self) -> list[EgressEntry]:
        entries: list[EgressEntry] = []
        if self.gateway is not None:
            entries = self.gateway.entries()
            self.gateway.close()
            self.gateway = None
        if self.mount is not None:  # after the container is gone
            self.mount.remove()
            self.mount = None
        return entries
