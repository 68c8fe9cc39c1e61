"""The store's single writer: one thread that commits whatever is queued, in one transaction.

SQLite allows one writer at a time; funnelling every write through one thread
keeps trial threads from contending for the lock, and batching turns
thousands of events into a single executemany and a single fsync.

A write that must be known to be stored (a trial's record) is submitted with a
future that resolves at its commit. Work that may lag (the search index) runs in a
transaction of its own after the writes taken with it, so it never delays their
commit: `after_commit`, asked for inside a write, runs right after that write's
commit and before any flush taken with it; `later` is queued like a write. Their
failures go to their own `on_error`, not to the writer's listeners: an index that
cannot be written must not stop a batch whose records are stored. Another process holding the lock only
delays writes (up to `BUSY_PATIENCE_S`); any other failure is reported at once
to the `on_error` callback, so a batch can stop instead of running on unrecorded.
"""

from __future__ import annotations

import atexit
import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import Connection, Engine, insert

from .tables import EventRow

Write = Callable[[Connection], None]
EventValues = dict[str, Any]  # one row of the event table
ErrorCallback = Callable[[BaseException], None]
Describe = Callable[[BaseException], BaseException]  # a driver error -> what callers see
_STOP = object()
_EVENT_TABLE = EventRow.__table__  # type: ignore[attr-defined]

# How long writes keep retrying while another process holds the write lock: long
# enough for a studio's or another run's big commit, bounded so a stuck lock ends the batch.
BUSY_PATIENCE_S = 300.0
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


@dataclass(frozen=True, slots=True)
class _Tracked:
    """A write whose commit (or failure) someone waits for."""

    write: Write
    done: Future[None]


@dataclass(frozen=True, slots=True)
class _Later:
    """A write that runs alone, after the others taken with it (`later`, `after_commit`)."""

    write: Write
    on_error: ErrorCallback | None = None
    on_commit: Callable[[], None] | None = None


def is_busy(exc: BaseException) -> bool:
    """True when SQLite said another connection holds the lock (the busy timeout ran out)."""
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


class Writer:
    def __init__(self, engine: Engine, name: str = "proctor-store-writer",
                 on_error: ErrorCallback | None = None, describe: Describe = lambda e: e,
                 patience_s: float = BUSY_PATIENCE_S) -> None:
        self._engine = engine
        self._describe = describe
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._on_error = on_error
        self._patience_s = patience_s
        self._lock = threading.Lock()  # guards _closed against a put racing close()
        self._closed = False
        self._after: list[_Later] = []  # after_commit's, for the transaction being written
        # Started by the first write, so a store opened only to read (`ls`, `show`) costs no thread.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # A daemon thread dies with the interpreter: a forgotten close() must lose nothing.
        atexit.register(self.close)

    def put(self, item: Write | EventValues) -> bool:
        """Queue a write; False when the writer is closed."""
        with self._lock:
            if self._closed:
                return False
            if not self.started:
                self._thread.start()
            self._queue.put(item)
            return True

    def submit(self, write: Write) -> Future[None] | None:
        """Queue a write and return a future set at its commit; None when the writer is closed."""
        tracked = _Tracked(write, Future())
        return tracked.done if self.put(tracked) else None  # type: ignore[arg-type]

    def later(self, write: Write, on_error: ErrorCallback | None = None,
              on_commit: Callable[[], None] | None = None) -> bool:
        """Queue a write to run in its own transaction once those queued with it are committed;
        its failure goes to `on_error` (else it is reported like any other), its commit to
        `on_commit` (both on the writer's thread). False when the writer is closed, except
        when asked on the writer's thread as it drains for close(): it then runs before the
        writer stops, so work a write started is finished."""
        later = _Later(write, on_error, on_commit)
        with self._lock:
            if self._closed and threading.current_thread() is self._thread:
                self._after.append(later)
                return True
        return self.put(later)  # type: ignore[arg-type]

    def after_commit(self, write: Write, on_error: ErrorCallback | None = None,
                     on_commit: Callable[[], None] | None = None) -> None:
        """Inside a write (on the writer's thread): run `write` in a transaction of its own
        right after the one being written commits, before the flushes taken with it are set;
        also when the writer is closing."""
        with self._lock:
            self._after.append(_Later(write, on_error, on_commit))

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued before this call is committed; False on timeout."""
        done = threading.Event()
        if not self.put(done):  # type: ignore[arg-type]
            return True  # closed: close() already drained the queue
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> bool:
        atexit.unregister(self.close)
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            if not self.started:
                return True  # nothing was written
            self._queue.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def started(self) -> bool:
        """True once something was written."""
        return self._thread.ident is not None

    def take_error(self) -> BaseException | None:
        """The first error since the last call, once."""
        with self._lock:
            error, self._error = self._error, None
            return error

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:  # take everything queued so far into one transaction
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            writes = [i for i in items if callable(i) or isinstance(i, _Tracked)]
            events = [i for i in items if isinstance(i, dict)]
            if writes or events:
                self._commit(writes, events)
            self._run_after()
            for item in items:
                if isinstance(item, _Later):
                    self._alone(item)
                    self._run_after()
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()
            if any(item is _STOP for item in items):
                return

    def _run_after(self) -> None:
        """What the writes just committed asked for (after_commit); it may ask for more."""
        with self._lock:
            after, self._after = self._after, []
        while after:
            for later in after:
                self._alone(later)
            with self._lock:
                after, self._after = self._after, []

    def _alone(self, later: _Later) -> None:
        error = self._attempt([later.write], [])
        if error is not None and later.on_error is None:
            self._report(error, keep=True)
            return
        try:
            if error is None:
                if later.on_commit is not None:
                    later.on_commit()
            else:
                later.on_error(error)  # type: ignore[misc]
        except Exception:  # a callback's bug must not stop the writer
            pass

    def _commit(self, writes: list[Write | _Tracked], events: list[EventValues]) -> None:
        error = self._attempt(writes, events)
        if error is None:
            return
        if len(writes) + bool(events) == 1:
            self._report(error, keep=not isinstance(writes[0] if writes else None, _Tracked))
            return
        # One bad write must not cost the others queued with it: retry each alone.
        for write in writes:
            if (error := self._attempt([write], [])) is not None:
                self._report(error, keep=not isinstance(write, _Tracked))
        if events and (error := self._attempt([], events)) is not None:
            self._report(error, keep=True)

    def _attempt(self, writes: list[Write | _Tracked], events: list[EventValues]) -> BaseException | None:
        """Commit these in one transaction, waiting out another process's lock; settle their futures."""
        deadline = time.monotonic() + self._patience_s
        while True:
            try:
                self._transaction([w.write if isinstance(w, _Tracked) else w for w in writes], events)
                error = None
                break
            except Exception as exc:
                if is_busy(exc) and time.monotonic() < deadline:
                    continue  # SQLite's busy timeout already waited; wait again
                error = self._describe(exc)
                break
        for write in writes:
            if isinstance(write, _Tracked) and not write.done.done():
                if error is None:
                    write.done.set_result(None)
                elif len(writes) + bool(events) == 1:  # alone: this write's own failure
                    write.done.set_exception(error)
        return error

    def _report(self, error: BaseException, keep: bool) -> None:
        """Tell the listener at once; `keep` it for flush() unless a future already carries it."""
        if keep:
            with self._lock:
                self._error = self._error or error
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:  # a listener's bug must not stop the writer
                pass

    def _transaction(self, writes: list[Write], events: list[EventValues]) -> None:
        with self._engine.begin() as conn:
            for write in writes:
                write(conn)
            if events:
                conn.execute(insert(_EVENT_TABLE), events)

