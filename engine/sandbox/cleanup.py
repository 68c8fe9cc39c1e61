"""What the engine leaves behind, found by label or by name.

Every container, network and volume carries `proctor=1`, its trial and batch,
and `proctor.owner`: the host, pid and start time of the process that made it.
The host folders the engine makes are named after that process too: a trial's
gateway folder (its gateway socket) `proctor-gw-PID-TICKS-…`, a batch's git
folder (its git sources, fetched on the host) `proctor-git-PID-TICKS-…`, a
sandbox's tree folder (the workspace contents its diffs read) `proctor-tree-PID-TICKS-…`. The
sweep at every start removes only what belongs to a process that is gone, so a
live studio and a live CLI run on one machine never sweep each other. A warm
container (engine.sandbox.pool) is made for one trial and carries its labels
and `proctor.pool`; a gone owner's are swept with the rest.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException, NotFound

LABEL = "proctor"
GATEWAY_PREFIX = "proctor-gw-"
GIT_PREFIX = "proctor-git-"
TREE_PREFIX = "proctor-tree-"
_OWNER_IN_NAME = re.compile(r"(\d+)-(\d+)-")  # after the prefix: PID-TICKS-
# A folder named before folders carried their owner: left behind if this old.
UNOWNED_AFTER_S = 86400


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # Field 22 (after the parenthesised command, which may hold spaces).
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '0'}"


def owner_alive(owner: str) -> bool:
    """True unless we can tell the owner process is gone. Another host's: assume alive."""
    try:
        host, pid, ticks = owner.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    current = _start_ticks(int(pid))
    return current is not None and (ticks == "0" or current == ticks)


def labels(batch_id: str, trial_id: str, owner: str) -> dict[str, str]:
    return {LABEL: "1", "proctor.batch": batch_id, "proctor.trial": trial_id, "proctor.owner": owner}


POOL_LABEL = "proctor.pool"


def owner_folder(prefix: str, owner: str, tmp: Path | None = None) -> Path:
    """A new host folder named after `owner`, so the sweep can tell when it is left behind;
    0700, so only this user reaches what it holds."""
    _, pid, ticks = owner.rsplit(":", 2)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{pid}-{ticks}-", dir=tmp))


def gateway_folder(owner: str, tmp: Path | None = None) -> Path:
    """A new gateway folder for `owner`'s trial."""
    return owner_folder(GATEWAY_PREFIX, owner, tmp)


@dataclass
class Swept:
    containers: int = 0
    networks: int = 0
    volumes: int = 0
    trials: list[str] | None = None
    folders: int = 0  # gateway folders
    git_folders: int = 0
    tree_folders: int = 0
    pool: int = 0  # warm containers (engine.sandbox.pool), among `containers`

    def __str__(self) -> str:
        closed = f", closed {len(self.trials)} trials as infra_error" if self.trials else ""
        return (f"removed {self.containers} containers, {self.networks} networks, {self.volumes} volumes, "
                f"{self.folders} gateway folders, {self.git_folders} git folders, "
                f"{self.tree_folders} tree folders{closed}")


def sweep(client: docker.DockerClient, everything: bool = False) -> Swept:
    """Remove what the engine left behind: everything (`proctor cleanup`), or only
    what belongs to owners that are gone (the sweep at start)."""
    swept = Swept(trials=[])
    flt = {"label": f"{LABEL}=1"}

    def abandoned(obj_labels: dict[str, str]) -> bool:
        return everything or not owner_alive(obj_labels.get("proctor.owner", ""))

    # The low-level list carries labels, so no container is inspected (and none
    # vanishes between listing and inspecting).
    for container in client.api.containers(all=True, filters=flt):
        container_labels = container.get("Labels") or {}
        if abandoned(container_labels):
            _quietly(lambda: client.api.remove_container(container["Id"], force=True))
            swept.containers += 1
            swept.pool += POOL_LABEL in container_labels
            if trial := container_labels.get("proctor.trial"):
                swept.trials.append(trial)  # type: ignore[union-attr]
    for network in client.networks.list(filters=flt):
        if abandoned(network.attrs.get("Labels") or {}):
            _quietly(network.remove)
            swept.networks += 1
    for volume in client.volumes.list(filters=flt):
        if abandoned(volume.attrs.get("Labels") or {}):
            _quietly(lambda: volume.remove(force=True))
            swept.volumes += 1
    swept.folders = sweep_folders(everything)
    swept.git_folders = sweep_folders(everything, prefix=GIT_PREFIX)
    swept.tree_folders = sweep_folders(everything, prefix=TREE_PREFIX)
    return swept


def sweep_folders(everything: bool = False, tmp: Path | None = None, prefix: str = GATEWAY_PREFIX) -> int:
    """Remove this user's folders named `prefix`… (gateway, git or tree) whose owner is gone
    (or all); returns how many."""
    folder = Path(tmp or tempfile.gettempdir())
    removed = 0
    try:
        candidates = [p for p in folder.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return 0
    for path in candidates:
        try:
            info = path.lstat()
        except OSError:
            continue
        if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
            continue
        named = _OWNER_IN_NAME.match(path.name, len(prefix))
        if named:
            gone = not owner_alive(f"{socket.gethostname()}:{named.group(1)}:{named.group(2)}")
        else:
            gone = time.time() - info.st_mtime > UNOWNED_AFTER_S
        if everything or gone:
            shutil.rmtree(path, ignore_errors=True)
            removed += not path.exists()
    return removed


def _quietly(action) -> None:
    try:
        action()
    except NotFound:
        pass
    except DockerException:
        pass  # a second sweep, or `proctor cleanup`, will try again
