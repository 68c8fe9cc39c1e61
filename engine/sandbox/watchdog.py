"""A sandbox's limits, watched, so that a trial that reaches one ends naming it.

The kernel enforces memory and processes (the container's cgroup), and the
storage driver enforces disk where it can (`storage_opt`). None of them says so:
an OOM kill is a bare exit 137, a refused fork one line on stderr, a full disk
is no error at all on overlay2 over ext4. The watchdog reads the container's
cgroup counters (OOM kills, refused forks) and the size of its writable layer
about once a second, and calls back once with the limit reached, e.g.
"memory limit 4 GiB reached". `check()` looks at once (after a turn).

Where it reads: on a local daemon, the cgroup files and the layer's folder on
this host (a few reads; the layer is walked for its blocks, so a sparse file
counts what it really takes). Elsewhere (a remote daemon, a layer this user
cannot read): the counters through one `cat` in the sandbox at each `check()`,
and the layer's size from the API (`SizeRw`), less often.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from docker.errors import DockerException

from ..spec import format_size
from .container import Sandbox

if TYPE_CHECKING:
    from ..config import Resources

INTERVAL_S = 1.0
# Measuring takes at most this share of the watchdog's time (a big layer is walked less often).
DUTY = 0.05
# `check()` (after each turn) measures the layer itself only when a walk takes less.
CHECK_WALK_MAX_S = 0.1
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Inside the sandbox: cgroup v1 files, else v2's; each file's lines after a `== name` line.
_PROBE = ("for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/pids/pids.events "
          "/sys/fs/cgroup/memory.events /sys/fs/cgroup/pids.events; do "
          "[ -r $f ] && echo \"== ${f##*/}\" && cat $f; done; true")


@dataclass
class Counters:
    """How often the kernel held the sandbox to a limit: OOM kills, forks refused."""

    oom_kills: int = 0
    forks_refused: int = 0


class Watchdog:
    def __init__(self, sandbox: Sandbox, resources: "Resources", on_limit: Callable[[str], None]):
        """`on_limit(reason)` is called once, from the watchdog's thread or from `check()`."""
        self.sandbox, self.resources, self.on_limit = sandbox, resources, on_limit
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._files, self._layer = _local_paths(sandbox)
        self._walk_s = 0.0  # how long the last walk of the layer took

    @property
    def local(self) -> bool:
        return self._files is not None and self._layer is not None

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"watchdog-{self.sandbox.short_id}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> str | None:
        """Look now; the limit reached, if any (and `on_limit` was called for it). The layer
        is measured here only where that is quick; elsewhere the thread does it."""
        if self.reason is None and not self._stop.is_set():
            quick = self._layer is not None and self._walk_s < CHECK_WALK_MAX_S
            self._fire(self._look(inside=True, disk=quick and not self.sandbox.disk_bounded))
        return self.reason

    def _loop(self) -> None:
        pause = INTERVAL_S
        while not self._stop.wait(pause):
            started = time.monotonic()
            self._fire(self._look(inside=False, disk=not self.sandbox.disk_bounded))
            if self.reason is not None:
                return
            pause = max(INTERVAL_S, (time.monotonic() - started) / DUTY)

    def _fire(self, reason: str | None) -> None:
        if reason is None:
            return
        with self._lock:
            if self.reason is not None or self._stop.is_set():
                return
            self.reason = reason
        self.on_limit(reason)

    def _look(self, inside: bool, disk: bool) -> str | None:
        r = self.resources
        counters = self._counters(inside)
        if counters is not None:
            if counters.oom_kills:
                return f"memory limit {format_size(r.memory)} reached"
            if counters.forks_refused:
                return f"process limit {r.pids} reached"
        if disk:
            used = self._disk_used(r.disk)
            if used is not None and used >= r.disk:
                return f"disk limit {format_size(r.disk)} reached"
        return None

    def _counters(self, inside: bool) -> Counters | None:
        if self._files is not None:
            return self._files.read()
        if not inside:
            return None
        return _probe_inside(self.sandbox)

    def _disk_used(self, limit: int) -> int | None:
        if self._layer is not None:
            started = time.monotonic()
            used = _blocks_used(self._layer, limit)
            self._walk_s = time.monotonic() - started
            return used
        try:
            found = self.sandbox.api.containers(all=True, filters={"id": self.sandbox.id}, size=True)
        except (DockerException, OSError):
            return None
        return int(found[0].get("SizeRw") or 0) if found else None


@dataclass
class _CgroupFiles:
    memory: Path  # memory.oom_control (v1) or memory.events (v2): `oom_kill N`
    pids: Path  # pids.events: `max N`

    def read(self) -> Counters | None:
        try:
            memory, pids = _keyed(self.memory.read_text()), _keyed(self.pids.read_text())
        except OSError:  # the container is gone
            return None
        return Counters(oom_kills=memory.get("oom_kill", 0), forks_refused=pids.get("max", 0))


def _keyed(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    return values


def _local_paths(sandbox: Sandbox) -> tuple[_CgroupFiles | None, Path | None]:
    """The container's cgroup files and writable layer on this host, where this process
    can read them (a local daemon); None for each it cannot."""
    try:
        info = sandbox.api.inspect_container(sandbox.id)
    except (DockerException, OSError):
        return None, None
    layer = (info.get("GraphDriver") or {}).get("Data") or {}
    upper = Path(layer["UpperDir"]) if layer.get("UpperDir") else None
    if upper is not None and not os.access(upper, os.R_OK | os.X_OK):
        upper = None  # a daemon's data root this user may not read, or another machine's
    return _cgroup_files(int((info.get("State") or {}).get("Pid") or 0), sandbox.id), upper


def _cgroup_files(pid: int, container_id: str) -> _CgroupFiles | None:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines() if pid else []
    except OSError:
        return None
    v1: dict[str, str] = {}
    v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers:
            v1.update({c: path for c in controllers.split(",")})
        else:
            v2 = path
    # The same pid on this host is the container's only if its cgroup names the container.
    if "memory" in v1 and "pids" in v1 and container_id in v1["memory"]:
        files = _CgroupFiles(CGROUP_ROOT / "memory" / v1["memory"].lstrip("/") / "memory.oom_control",
                             CGROUP_ROOT / "pids" / v1["pids"].lstrip("/") / "pids.events")
    elif v2 is not None and container_id in v2 and (CGROUP_ROOT / "cgroup.controllers").exists():
        folder = CGROUP_ROOT / v2.lstrip("/")
        files = _CgroupFiles(folder / "memory.events", folder / "pids.events")
    else:
        return None
    return files if files.read() is not None else None


def _probe_inside(sandbox: Sandbox) -> Counters | None:
    """The counters through one command in the sandbox (as root; it only reads)."""
    api = sandbox.api
    try:
        exec_id = api.exec_create(sandbox.id, ["sh", "-c", _PROBE], user="0:0")["Id"]
        text = api.exec_start(exec_id).decode("utf-8", "replace")
    except (DockerException, OSError):
        return None
    sections: dict[str, dict[str, int]] = {}
    for part in text.split("== ")[1:]:
        name, _, body = part.partition("\n")
        sections[name.strip()] = _keyed(body)
    memory = sections.get("memory.oom_control") or sections.get("memory.events") or {}
    return Counters(oom_kills=memory.get("oom_kill", 0),
                    forks_refused=(sections.get("pids.events") or {}).get("max", 0))


def _blocks_used(folder: Path, limit: int) -> int | None:
    """Bytes the files under `folder` take on disk (blocks, so sparse files count what they
    use; a hard-linked file once). Stops counting once past `limit`."""
    total, seen = 0, set()
    stack = [str(folder)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        if total > limit:
            break
    return total
