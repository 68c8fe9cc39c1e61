"""The search index kept current in the store writer's spare time.

A saved trial is indexed right after its record is committed, in a transaction of
its own (`Writer.after_commit`): a 100,000-item record's index takes seconds, and
neither its save nor the events queued behind it should wait for that. The step
runs before any flush taken with the save, so a process's search, which flushes
first, finds what the process saved.

A store from before the index (schema 3), or one whose process stopped between a
save and its indexing, holds finished trials the index lacks; `catch_up` indexes
them a step of about STEP_S at a time, newest first, with PAUSE_S between steps so
another process sharing the store gets the write lock. Each gets an index sequence
below every other (search.index_stored's `older`), so hits stay newest first
whatever order the trials were indexed in.

A step's failure goes to `error`, not to the writer's listeners (the records are
stored; only search lags), and the step's trials are put back for the next step. A
trial the index refuses (a damaged index: search.guarded passes over it) is not tried
again by this process, so a damaged index cannot keep the writer busy.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from sqlalchemy import Connection

from . import search as _search
from .writer import Writer

__all__ = ["Indexer", "STEP_S", "PAUSE_S"]

STEP_S = 0.25  # the writer's time a step may take before other writes go (one big trial may take longer)
WAITED_STEP_S = 1.0  # the same while someone waits for the whole catch-up (`proctor search`)
PAUSE_S = 0.1  # between catch-up steps: another process's busy handler polls about this often


class Indexer:
    """Indexes trials through the store's writer: those just saved first, then (once asked
    with `catch_up`) every finished trial the index lacks."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._saved: deque[str] = deque()  # trials saved by this process, not indexed yet
        self._backlog: deque[str] | None = None  # the missing ones, once catch_up was asked
        self._catching_up = False
        self._refused: set[str] = set()
        self._queued = False  # a step is queued (after a commit, or on the writer's queue)
        self._step_s = STEP_S
        self.error: BaseException | None = None  # why the last step failed; None once one succeeds

    def add(self, trial_ids: Iterable[str]) -> None:
        """Index these trials right after the write that saves them commits. Call it inside
        that write, on the writer's thread."""
        with self._lock:
            self._saved.extend(trial_ids)
            if self._queued:
                return
            self._queued = True
        self._writer.after_commit(self.step, self._failed)

    def catch_up(self, waited: bool = False) -> None:
        """Start indexing, in the writer's spare time, every finished trial the index lacks;
        `waited`: someone waits for all of it, so steps are longer (fewer commits and pauses)."""
        with self._lock:
            self._catching_up = True
            self._step_s = WAITED_STEP_S if waited else STEP_S
            self.error = None
            if not self._backlog:  # read the store again: another process may have left some
                self._backlog = None
        self._queue()

    @property
    def left(self) -> int | None:
        """Trials known to be waiting for their index; None before the backlog is read."""
        with self._lock:
            if self._catching_up and self._backlog is None:
                return None
            return len(self._saved) + len(self._backlog or ())

    @property
    def owes(self) -> bool:
        """Trials this process saved are not indexed yet (and no step has failed)."""
        with self._lock:
            return bool(self._saved) and self.error is None and not self._writer.closed

    @property
    def busy(self) -> bool:
        """More is to be indexed and will be: a step is queued or trials are left, and
        neither has a step failed nor is the writer closed."""
        with self._lock:
            left = self._queued or bool(self._saved or self._backlog) or (
                self._catching_up and self._backlog is None)
            return left and self.error is None and not self._writer.closed

    def step(self, conn: Connection) -> None:
        """Index for about STEP_S, what was saved first; queue the next step if more is left."""
        with self._lock:
            self._queued = False
            load = self._catching_up and self._backlog is None
        if load:
            missing = deque(_search.missing(conn, newest_first=True))
            with self._lock:
                self._backlog = missing
        deadline = time.monotonic() + self._step_s
        taken: list[tuple[str, bool]] = []  # (trial, whether it was saved here), for a failure
        try:
            while time.monotonic() < deadline or not taken:
                picked = self._next()
                if picked is None:
                    break
                taken.append(picked)
                trial_id, saved = picked
                if trial_id not in self._refused and not self._index(conn, trial_id, older=not saved):
                    self._refused.add(trial_id)
        except BaseException:
            self._put_back(taken)  # the transaction is lost: these go again in the next step
            raise
        with self._lock:
            self.error = None
            saved_left, backlog_left = bool(self._saved), bool(self._backlog)
        if saved_left:
            self._queue()
        elif backlog_left:  # let another process's writes in between
            timer = threading.Timer(PAUSE_S, self._queue)
            timer.daemon = True
            timer.start()

    def _next(self) -> tuple[str, bool] | None:
        with self._lock:
            if self._saved:
                return self._saved.popleft(), True
            if self._backlog:
                return self._backlog.popleft(), False
            return None

    def _put_back(self, taken: list[tuple[str, bool]]) -> None:
        with self._lock:
            for trial_id, saved in reversed(taken):
                if saved:
                    self._saved.appendleft(trial_id)
                elif self._backlog is not None:
                    self._backlog.appendleft(trial_id)

    def _failed(self, error: BaseException) -> None:
        """A step's transaction failed (a full disk, a read-only store): said in `error`; no
        step is queued until the next save or catch_up."""
        with self._lock:
            self.error = error
            self._queued = False

    def _queue(self) -> None:
        with self._lock:
            if self._queued:
                return
            self._queued = True
        if not self._writer.later(self.step, self._failed):
            with self._lock:
                self._queued = False

    @staticmethod
    def _index(conn: Connection, trial_id: str, older: bool) -> bool:
        """False when the index refused it (guarded passed over a damaged index)."""
        indexed = False

        def write() -> None:
            nonlocal indexed
            _search.index_stored(conn, trial_id, older=older)
            indexed = True

        _search.guarded(conn, write)
        return indexed
