"""A pool of Docker hosts with slots: where each trial runs.

No scheduler of our own beyond slot counting: a trial takes a free slot on
any live host (the one with the most free slots), runs there, and gives the
slot back. A host that stops answering is marked dead: only its in-flight
trials are lost (they end as infra_error) and the rest of the batch goes on
on the others. Images are built on each host that needs them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import DockerException

from ..config import HostConfig
from .client import DockerUnavailable
from .images import Images


class NoLiveHost(Exception):
    """Every host of the pool went away."""


@dataclass(eq=False)
class DockerHost:
    name: str
    client: docker.DockerClient
    slots: int
    images: Images = field(init=False)
    busy: int = 0
    alive: bool = True

    def __post_init__(self) -> None:
        self.images = Images(self.client)

    def answers(self) -> bool:
        try:
            self.client.ping()
            return True
        except (DockerException, OSError):
            return False


def connect_host(host: HostConfig, base: Path | None = None) -> docker.DockerClient:
    tls = None
    if host.tls:
        def path(p: str | None) -> str | None:
            return str((base or Path.cwd()) / p) if p else None
        cert = (path(host.client_cert), path(host.client_key)) if host.client_cert else None
        tls = docker.tls.TLSConfig(client_cert=cert, ca_cert=path(host.ca_cert), verify=bool(host.ca_cert))
    try:
        client = docker.DockerClient(base_url=host.url, tls=tls, timeout=120,
                                     use_ssh_client=host.url.startswith("ssh://"))
        client.ping()
        return client
    except DockerException as e:
        raise DockerUnavailable(f"Docker host {host.url} is not reachable ({str(e).splitlines()[0][:120]}): "
                                "start it or remove it from [[hosts]] in proctor.toml") from None


class HostPool:
    def __init__(self, hosts: list[DockerHost]):
        if not hosts:
            raise ValueError("a pool needs at least one host")
        self.hosts = hosts
        self._free = threading.Condition()

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts if h.alive)

    def acquire(self, cancelled: threading.Event | None = None) -> DockerHost:
        """Block until a live host has a free slot; the emptiest host wins."""
        with self._free:
            while True:
                live = [h for h in self.hosts if h.alive]
                if not live:
                    raise NoLiveHost("every Docker host of the pool went away")
                free = [h for h in live if h.busy < h.slots]
                if free:
                    host = max(free, key=lambda h: h.slots - h.busy)
                    host.busy += 1
                    return host
                if cancelled is not None and cancelled.is_set():
                    raise NoLiveHost("the batch was interrupted")
                self._free.wait(0.5)

    def release(self, host: DockerHost, failed: bool = False) -> None:
        """Give a slot back; after a failed trial, a host that no longer answers is dead."""
        if failed and not host.answers():
            host.alive = False
        with self._free:
            host.busy -= 1
            self._free.notify_all()
