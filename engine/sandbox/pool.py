"""Warm sandboxes: containers created and started ahead of need, one pool per batch.

Each warm container is made for one trial of the batch, the next ones in queue order,
at most `warm` waiting or being made at a time. It is made as that trial's cold one
would be (`Sandbox.create`: no network, the same limits, the trial's own labels, plus
`proctor.pool`), with its own gateway folder, the egress relay started and a CA of
its own trusted when the trial will need a gateway. Only
that trial can claim it, once; a trial whose container is still being made waits for
it, and one whose container was not started yet makes its own. Nothing is given back:
the trial's teardown removes it as it removes a cold one, so a warm container has never
run agent code. Closing the pool removes what was not claimed, and a killed process's
warm containers are swept by their owner label (`cleanup.sweep`).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import docker
from docker.errors import DockerException

from .ca import CertificateAuthority
from .cleanup import POOL_LABEL, labels
from .container import Sandbox
from .mount import GatewayMount
from .relay import start_relay, trust_ca

if TYPE_CHECKING:
    from ..config import Resources

FILLERS = 2  # containers made at once: more only crowds a daemon that is also running trials
CLOSE_WAIT_S = 30
CLAIM_WAIT_S = 120  # a claim waits this long for its container being made, then makes its own


@dataclass(frozen=True)
class PoolKey:
    """What a trial's sandbox is made of before any trial touched it."""

    image: str
    resources: "Resources"


@dataclass
class Warm:
    """A started container made for one trial, and its gateway folder when it needs one."""

    key: PoolKey
    sandbox: Sandbox
    mount: GatewayMount | None = None
    relay: str | None = None  # the runtime of the egress relay started in it, with a mount
    ca: CertificateAuthority | None = None  # the trial's gateway CA, which it trusts already

    def remove(self) -> None:
        try:
            self.sandbox.destroy()
        except (DockerException, OSError):
            pass  # the sweep of a later start removes it by its owner label
        if self.mount is not None:
            self.mount.remove()


State = Literal["planned", "making", "ready", "taken", "dropped"]


@dataclass
class _Entry:
    key: PoolKey
    gateway: bool
    state: State = "planned"
    warm: Warm | None = None


class SandboxPool:
    def __init__(self, client: docker.DockerClient, batch_id: str, owner: str, warm: int):
        """`warm`: containers kept waiting or being made ahead of the trials (0: none)."""
        self.client, self.warm = client, warm
        self.batch_id, self.owner = batch_id, owner
        self._entries: dict[str, _Entry] = {}
        self._queue: deque[str] = deque()  # planned trials, in the order they will start
        self._failed: dict[PoolKey, str] = {}  # a create's error: that key is no longer made ahead
        self._changed = threading.Condition()
        self._closed = False
        self._fillers = [threading.Thread(target=self._fill, name=f"warm-{batch_id}-{n}", daemon=True)
                         for n in range(min(FILLERS, warm))]
        for thread in self._fillers:
            thread.start()

    def labels(self, trial_id: str) -> dict[str, str]:
        """A warm container's: its trial's cold labels, and the pool's mark."""
        return {**labels(self.batch_id, trial_id, self.owner), POOL_LABEL: "1"}

    def plan(self, trial_id: str, key: PoolKey, gateway: bool = False) -> None:
        """A trial that will claim a container of `key` (with a gateway folder), after the
        ones planned before it."""
        with self._changed:
            if trial_id in self._entries:
                return
            self._entries[trial_id] = _Entry(key, gateway)
            self._queue.append(trial_id)
            self._changed.notify_all()

    def claim(self, trial_id: str, key: PoolKey) -> Warm | None:
        """The container made for `trial_id`, now its alone; None when there is none (never
        planned, not started yet, of another key, or its create failed): make one."""
        with self._changed:
            entry = self._entries.get(trial_id)
            if entry is None or self._closed:
                return None
            if entry.state == "making":
                self._changed.wait_for(lambda: entry.state != "making" or self._closed, CLAIM_WAIT_S)
            warm = entry.warm if entry.state == "ready" else None
            # A container still being made is removed once made; one not begun never will be.
            entry.state, entry.warm = ("taken", None) if warm else ("dropped", None)
            self._changed.notify_all()
        if warm is not None and warm.key != key:  # the image resolved to another tag
            warm.remove()
            return None
        return warm

    def drop(self, trial_id: str) -> None:
        """A planned trial that will not run (skipped): its container goes, if made."""
        with self._changed:
            entry = self._entries.get(trial_id)
            if entry is None:
                return
            warm, entry.warm = entry.warm, None
            if entry.state != "taken":  # one being made is removed once made
                entry.state = "dropped"
            self._changed.notify_all()
        if warm is not None:
            warm.remove()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until every container the pool can make now is made (benchmarks and tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._making() == 0 and self._wanted() is None, timeout)

    def close(self) -> None:
        """Stop making and remove every container no trial claimed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._fillers:
            thread.join(CLOSE_WAIT_S)
        with self._changed:
            left = [e.warm for e in self._entries.values() if e.warm is not None]
            for entry in self._entries.values():
                entry.warm = None
        for warm in left:
            warm.remove()

    # Under the lock ---------------------------------------------------------------------

    def _making(self) -> int:
        return sum(e.state == "making" for e in self._entries.values())

    def _wanted(self) -> str | None:
        """The next planned trial to make one for, while fewer than `warm` wait or are made."""
        ahead = sum(e.state in ("making", "ready") for e in self._entries.values())
        while self._queue and ahead < self.warm:
            entry = self._entries[self._queue[0]]
            if entry.state == "planned" and entry.key not in self._failed:
                return self._queue[0]
            self._queue.popleft()  # claimed, dropped, or of a key that cannot be made
        return None

    def _next(self) -> str | None:
        """A trial to make a container for, marked as being made (None: closed)."""
        while not self._closed:
            trial_id = self._wanted()
            if trial_id is not None:
                self._queue.popleft()
                self._entries[trial_id].state = "making"
                return trial_id
            self._changed.wait()
        return None

    # The fillers' own ---------------------------------------------------------------------

    def _fill(self) -> None:
        while True:
            with self._changed:
                trial_id = self._next()
                if trial_id is None:
                    return
                entry = self._entries[trial_id]
            warm, failed = None, None
            try:
                warm = self._make(trial_id, entry)
            except Exception as e:  # the key is no longer made ahead; a trial making its own says why
                failed = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            with self._changed:
                if failed is not None:
                    self._failed[entry.key] = failed
                keep = warm is not None and entry.state == "making" and not self._closed
                entry.state = "ready" if keep else "dropped"
                entry.warm = warm if keep else None
                self._changed.notify_all()
            if warm is not None and not keep:
                warm.remove()

    def _make(self, trial_id: str, entry: _Entry) -> Warm:
        owner = self.labels(trial_id)
        mount = GatewayMount.make(self.client, owner) if entry.gateway else None
        try:
            sandbox = Sandbox.create(self.client, entry.key.image, owner, entry.key.resources,
                                     mounts=mount.mounts if mount else None)
        except BaseException:
            if mount is not None:
                mount.remove()
            raise
        warm = Warm(entry.key, sandbox, mount)
        if mount is not None:  # it connects to the gateway per connection: the trial starts that
            try:
                warm.relay = start_relay(sandbox)
                warm.ca = CertificateAuthority()  # its key stays in this process, as a trial's
                trust_ca(sandbox, warm.ca.cert_pem)
            except BaseException:
                warm.remove()
                raise
        return warm
