"""A gateway's socket folder on this host and the volume that mounts it into one sandbox.

Made before the container (which mounts it at create): by the trial's egress phase, or
ahead by the warm pool for a trial that will need a gateway, whose gateway then starts on
it. The folder is `proctor-gw-…/sock/`: the outer folder 0700, so no other user of this
host reaches the socket. Docker's bind mounts take no nosuid or nodev, so the folder
becomes a local volume (`o=bind` with those options) mounted as it is: a remount would
drop them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException
from docker.types import Mount

from .cleanup import gateway_folder
from .relay import GATEWAY_DIR


class MountFailed(Exception):
    """The folder's volume could not be made; one sentence."""


@dataclass
class GatewayMount:
    folder: Path  # removed with the mount
    volume: str
    client: docker.DockerClient

    @property
    def shared(self) -> Path:
        """The folder the sandbox sees at GATEWAY_DIR, where the gateway's socket goes."""
        return self.folder / "sock"

    @property
    def mounts(self) -> list[Mount]:
        # Mounted as the volume is (read-only, nosuid, nodev); no_copy: nothing of the image enters it.
        return [Mount(target=GATEWAY_DIR, source=self.volume, type="volume", no_copy=True)]

    @classmethod
    def make(cls, client: docker.DockerClient, labels: dict[str, str]) -> "GatewayMount":
        folder = gateway_folder(labels["proctor.owner"])  # named after its owner, for the sweep
        shared = folder / "sock"
        shared.mkdir(mode=0o755)
        shared.chmod(0o755)  # whatever the umask: the sandbox's agent user connects too
        try:
            volume = client.api.create_volume(
                driver="local", labels=labels,
                driver_opts={"type": "none", "o": "bind,ro,nosuid,nodev", "device": str(shared)})["Name"]
        except DockerException as e:
            shutil.rmtree(folder, ignore_errors=True)
            raise MountFailed(f"the egress gateway's folder could not be mounted: {str(e)[:200]}") from None
        return cls(folder, volume, client)

    def remove(self) -> None:
        """After the container is gone; what stays behind, the sweep removes."""
        try:
            self.client.api.remove_volume(self.volume, force=True)
        except (DockerException, OSError):  # NotFound included
            pass
        shutil.rmtree(self.folder, ignore_errors=True)
