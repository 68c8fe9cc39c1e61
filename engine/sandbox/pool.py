"""Warm sandboxes: containers created and started ahead of need, one pool per batch.

For each key (an image and the sandbox's limits) a batch uses, up to `warm` started
containers wait, made as a cold one is (`Sandbox.create`: no network, the same limits)
and labelled as the pool's (`cleanup.pool_labels`). A trial claims one instead of making
one. Claiming takes it out of the pool under the pool's lock, so no container is handed to
two trials, and none comes back: the trial's teardown removes it as it removes a cold one,
so a warm container has never run agent code. Filler threads top each key up after every
claim; closing the pool removes what was not claimed, and a killed process's warm
containers are swept by their owner label (`cleanup.sweep`).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import docker
from docker.errors import DockerException

from .cleanup import pool_labels
from .container import Sandbox

if TYPE_CHECKING:
    from ..config import Resources

FILLERS = 2  # containers made at once: more only crowds a daemon that is also running trials
CLOSE_WAIT_S = 30


@dataclass(frozen=True)
class PoolKey:
    """What makes two sandboxes interchangeable before any trial touched them."""

    image: str
    resources: "Resources"


@dataclass
class _Slot:
    idle: deque[Sandbox] = field(default_factory=deque)
    making: int = 0
    planned: int | None = None  # trials of the batch that may claim; None: not known
    claimed: int = 0
    failed: str | None = None  # the last create's error: the key is no longer filled

    def wanted(self, warm: int) -> int:
        """How many more to start now: up to `warm` waiting, never more than can be claimed."""
        if self.failed is not None:
            return 0
        target = warm if self.planned is None else min(warm, self.planned - self.claimed)
        return max(0, target - len(self.idle) - self.making)


class SandboxPool:
    def __init__(self, client: docker.DockerClient, batch_id: str, owner: str, warm: int):
        """`warm`: started containers kept waiting per key (0: the pool never makes one)."""
        self.client, self.warm = client, warm
        self.labels = pool_labels(batch_id, owner)
        self._slots: dict[PoolKey, _Slot] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._fillers = [threading.Thread(target=self._fill, name=f"warm-{batch_id}-{n}", daemon=True)
                         for n in range(min(FILLERS, warm))]
        for thread in self._fillers:
            thread.start()

    def want(self, key: PoolKey, trials: int | None = None) -> None:
        """A key the batch will use, by `trials` more trials (None: as many as come)."""
        with self._changed:
            slot = self._slots.setdefault(key, _Slot(planned=0 if trials is not None else None))
            if trials is not None and slot.planned is not None:
                slot.planned += trials
            self._changed.notify_all()

    def claim(self, key: PoolKey) -> Sandbox | None:
        """A started container of `key`, now this caller's alone; None when none waits (the
        key becomes wanted, so later trials find one)."""
        with self._changed:
            if self._closed:
                return None
            slot = self._slots.setdefault(key, _Slot())
            slot.claimed += 1
            sandbox = slot.idle.popleft() if slot.idle else None
            self._changed.notify_all()
            return sandbox

    def wait_ready(self, key: PoolKey, timeout: float) -> bool:
        """Wait until `key` has all it wants waiting (benchmarks and tests); False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: (s := self._slots.get(key)) is not None and (s.failed is not None or (
                    s.making == 0 and s.wanted(self.warm) == 0)), timeout)

    def close(self) -> None:
        """Stop filling and remove every container no trial claimed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._fillers:
            thread.join(CLOSE_WAIT_S)
        with self._changed:
            left = [s for slot in self._slots.values() for s in slot.idle]
            for slot in self._slots.values():
                slot.idle.clear()
        for sandbox in left:
            _remove(sandbox)

    def _next(self) -> PoolKey | None:
        """Under the lock: a key that wants one more, marked as being made (None: closed)."""
        while not self._closed:
            for key, slot in self._slots.items():
                if slot.wanted(self.warm):
                    slot.making += 1
                    return key
            self._changed.wait()
        return None

    def _fill(self) -> None:
        while True:
            with self._changed:
                key = self._next()
            if key is None:
                return
            sandbox, failed = None, None
            try:
                sandbox = Sandbox.create(self.client, key.image, dict(self.labels), key.resources)
            except Exception as e:  # the key is no longer filled; a trial making its own says why
                failed = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            with self._changed:
                slot = self._slots[key]
                slot.making -= 1
                slot.failed = failed
                keep = sandbox is not None and not self._closed
                if keep:
                    slot.idle.append(sandbox)
                self._changed.notify_all()
            if sandbox is not None and not keep:
                _remove(sandbox)


def _remove(sandbox: Sandbox) -> None:
    try:
        sandbox.destroy()
    except (DockerException, OSError):
        pass  # the sweep of a later start removes it by its owner label
