"""The search index kept current in the store writer's spare time.

A saved trial is indexed right after its record is committed, in a transaction of
its own (`Writer.after_commit`): a 100,000-item record's index takes seconds, and
neither its save nor the events queued behind it should wait for that. The step
runs before any flush taken with the save, so a process's search, which flushes
first, finds what the process saved; a store being closed finishes what its
process saved before the writer stops.

A store from before the index (schema 3), or one whose process stopped between a
save and its indexing, holds finished trials the index lacks; `catch_up` indexes
them a step of about STEP_S at a time, newest first, with PAUSE_S between steps so
another process sharing the store gets the write lock. Each gets an index sequence
below every other (search.index_stored's `older`), so hits stay newest first
whatever order the trials were indexed in.

At most one step is scheduled or running at a time, and at most one pause waits:
asking again (every search asks) adds no work. A step's trials stay its own until
the writer says its transaction committed; if it failed (a full disk, a read-only
store) they are put back, the failure goes to `error`, not to the writer's
listeners (the records are stored; only search lags), and indexing waits for the
next save or catch_up. A trial the index refuses (a damaged index: search.guarded
passes over it) is not tried again by this process, so a damaged index cannot keep
the writer busy.
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
REREAD_S = 2.0  # catch_up reads the store for missing trials again at most this often, unwaited


class Indexer:
    """Indexes trials through the store's writer: those just saved first, then (once asked
    with `catch_up`) every finished trial the index lacks."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self._saved: deque[str] = deque()  # trials saved by this process, not indexed yet
        self._backlog: deque[str] | None = None  # the missing ones, once catch_up was asked
        self._catching_up = False
        self._read_at = -REREAD_S  # when the backlog was last read from the store
        self._refused: set[str] = set()
        self._taken: list[tuple[str, bool]] = []  # the running step's (trial, saved here)
        self._scheduled = False  # a step is on the writer's queue, or running
        self._pause: threading.Timer | None = None  # before the next catch-up step
        self._step_s = STEP_S
        self.error: BaseException | None = None  # why the last step failed; None once one commits

    def add(self, trial_ids: Iterable[str]) -> None:
        """Index these trials right after the write that saves them commits. Call it inside
        that write, on the writer's thread."""
        with self._lock:
            self._saved.extend(trial_ids)
            if self._scheduled:
                return
            self._cancel_pause()  # saved trials go first, without waiting
            self._scheduled = True
            self._writer.after_commit(self._step, self._failed, self._committed)

    def catch_up(self, waited: bool = False) -> None:
        """Start indexing, in the writer's spare time, every finished trial the index lacks;
        `waited`: someone waits for all of it, so steps are longer (fewer commits and pauses)."""
        with self._lock:
            self._catching_up = True
            self._step_s = WAITED_STEP_S if waited else STEP_S
            # Read the store again (another process may have left some), but not on every
            # search: a trial the index refused stays missing, and the read takes the write lock.
            if not self._backlog and (waited or time.monotonic() - self._read_at > REREAD_S):
                self._backlog = None
            elif not self._backlog:
                return
            if self._pause is None:  # else the pause's end goes on
                self._schedule()

    @property
    def left(self) -> int | None:
        """Trials known to be waiting for their index; None before the backlog is read."""
        with self._lock:
            if self._catching_up and self._backlog is None:
                return None
            return len(self._saved) + len(self._taken) + len(self._backlog or ())

    @property
    def owes(self) -> bool:
        """Trials this process saved are not indexed yet, and a step for them is scheduled."""
        with self._lock:
            return bool(self._saved) and self._scheduled

    @property
    def busy(self) -> bool:
        """Indexing goes on: a step is scheduled or running, or a pause between steps waits.
        It stops when all is indexed, when a step failed (`error`) and when the writer closes."""
        with self._lock:
            return self._scheduled or self._pause is not None

    def _step(self, conn: Connection) -> None:
        """Index for about STEP_S, what was saved first (on the writer's thread)."""
        with self._lock:
            load = self._catching_up and self._backlog is None
        if load:
            missing = _search.missing(conn, newest_first=True)
            with self._lock:
                self._backlog = deque(t for t in missing if t not in self._refused)
                self._read_at = time.monotonic()
        deadline = time.monotonic() + self._step_s
        while time.monotonic() < deadline or not self._taken:
            picked = self._next()
            if picked is None:
                break
            trial_id, saved = picked
            if trial_id not in self._refused and not self._index(conn, trial_id, older=not saved):
                self._refused.add(trial_id)

    def _next(self) -> tuple[str, bool] | None:
        with self._lock:
            if self._saved:
                picked = self._saved.popleft(), True
            elif self._backlog:
                picked = self._backlog.popleft(), False
            else:
                return None
            self._taken.append(picked)
            return picked

    def _committed(self) -> None:
        """The step's transaction committed: go on, saved trials at once, the backlog after a
        pause; once the writer is closing, only what this process saved."""
        with self._lock:
            self._taken.clear()
            self.error = None
            self._scheduled = False
            if self._saved:
                self._schedule()
            elif (self._backlog or (self._catching_up and self._backlog is None)) \
                    and not self._writer.closed:
                self._pause = threading.Timer(PAUSE_S, self._resume)
                self._pause.daemon = True
                self._pause.start()

    def _failed(self, error: BaseException) -> None:
        """The step's transaction failed: its trials go back; indexing waits for a save or
        catch_up to ask again."""
        with self._lock:
            for trial_id, saved in reversed(self._taken):
                if saved:
                    self._saved.appendleft(trial_id)
                elif self._backlog is not None:
                    self._backlog.appendleft(trial_id)
            self._taken.clear()
            self.error = error
            self._scheduled = False

    def _resume(self) -> None:
        """The pause's end, on its timer's thread."""
        with self._lock:
            if self._pause is threading.current_thread():  # else it was cancelled
                self._pause = None
                self._schedule()

    def _cancel_pause(self) -> None:
        if self._pause is not None:
            self._pause.cancel()
            self._pause = None

    def _schedule(self) -> None:
        """Queue a step unless one is scheduled (with the lock held: a save's `add` must
        not see a step scheduled that the writer then refuses)."""
        if not self._scheduled:
            self._scheduled = self._writer.later(self._step, self._failed, self._committed)

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
