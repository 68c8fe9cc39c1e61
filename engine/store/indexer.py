"""The search index kept current in the store writer's spare time.

A trial is indexed after its record is committed, in a transaction of its own
(`Writer.later`): a 100,000-item record's index takes seconds, and neither its
save nor the events queued behind it should wait for that. A store from before
the index (schema 3), or one whose process stopped between a save and its
indexing, holds finished trials the index lacks; `catch_up` indexes them the
same way, oldest first (hits list the last indexed first), a step of about
STEP_S at a time so other writes go between the steps.

A trial whose indexing fails (a damaged index: search.guarded passes over it)
is not tried again by this process, so a damaged index cannot keep the writer
busy; it stays missing from search until the store is next opened.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from sqlalchemy import Connection

from . import search as _search
from .writer import Writer

__all__ = ["Indexer", "STEP_S"]

STEP_S = 0.25  # the writer's time a step may take before other writes go (one big trial may take longer)


class Indexer:
    """Indexes trials through the store's writer: those just saved first, then (once asked
    with `catch_up`) every finished trial the index lacks."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._saved: deque[str] = deque()  # trials saved by this process, not indexed yet
        self._backlog: deque[str] | None = None  # the missing ones, once catch_up was asked
        self._catching_up = False
        self._failed: set[str] = set()
        self._scheduled = False

    def add(self, trial_ids: Iterable[str]) -> None:
        """Index these trials soon, before any backlog. Call it inside the write that saves
        them: the step it queues then runs after their commit, and before any flush queued
        after it, so a process's search finds what it saved once it flushed."""
        with self._lock:
            self._saved.extend(trial_ids)
            self._schedule()

    def catch_up(self) -> None:
        """Start indexing, in the writer's spare time, every finished trial the index lacks."""
        with self._lock:
            self._catching_up = True
            if not self._backlog:  # read the store again: another process may have left some
                self._backlog = None
            self._schedule()

    @property
    def busy(self) -> bool:
        """A step is queued or running, or trials are left."""
        with self._lock:
            return self._scheduled or bool(self._saved or self._backlog) or (
                self._catching_up and self._backlog is None)

    def step(self, conn: Connection) -> bool:
        """Index for about STEP_S, what was saved first; True while more is left."""
        deadline = time.monotonic() + STEP_S
        with self._lock:
            self._scheduled = False
            if self._catching_up and self._backlog is None:
                self._backlog = deque(_search.missing(conn))
        while time.monotonic() < deadline or self._must_index():
            trial_id = self._next()
            if trial_id is None:
                return False
            if trial_id not in self._failed and not self._index(conn, trial_id):
                self._failed.add(trial_id)
        return self._left()

    def _must_index(self) -> bool:
        """Trials this process saved are all indexed in the step: a flush after a save then
        waits for its indexing, so the process's own search finds what it saved."""
        with self._lock:
            return bool(self._saved)

    def _next(self) -> str | None:
        with self._lock:
            if self._saved:
                return self._saved.popleft()
            if self._backlog:
                return self._backlog.popleft()
            return None

    def _left(self) -> bool:
        with self._lock:
            return bool(self._saved or self._backlog)

    @staticmethod
    def _index(conn: Connection, trial_id: str) -> bool:
        """False when the index refused it (guarded passed over a damaged index)."""
        indexed = False

        def write() -> None:
            nonlocal indexed
            _search.index_stored(conn, trial_id)
            indexed = True

        _search.guarded(conn, write)
        return indexed

    def _schedule(self) -> None:
        """Queue a step unless one is queued (called with the lock held)."""
        if not self._scheduled:
            self._scheduled = self._writer.later(self._background_step)

    def _background_step(self, conn: Connection) -> None:
        if self.step(conn):
            with self._lock:
                self._schedule()
