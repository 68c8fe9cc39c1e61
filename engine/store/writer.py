"""The store's single writer: one thread that commits whatever is queued, in one transaction.

SQLite allows one writer at a time; funnelling every write through one thread
keeps trial threads from contending for the lock, and batching turns
thousands of events into a single executemany and a single fsync.
"""

from __future__ import annotations

import atexit
import queue
import threading
from typing import Any, Callable

from sqlalchemy import Connection, Engine, insert

from .tables import EventRow

Write = Callable[[Connection], None]
EventValues = dict[str, Any]  # one row of the event table
_STOP = object()
_EVENT_TABLE = EventRow.__table__  # type: ignore[attr-defined]


class Writer:
    def __init__(self, engine: Engine, name: str = "proctor-store-writer") -> None:
        self._engine = engine
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # guards _closed against a put racing close()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        # A daemon thread dies with the interpreter: a forgotten close() must lose nothing.
        atexit.register(self.close)

    def put(self, item: Write | EventValues) -> bool:
        """Queue a write; False when the writer is closed."""
        with self._lock:
            if self._closed:
                return False
            self._queue.put(item)
            return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued before this call is committed; False on timeout."""
        done = threading.Event()
        if not self.put(done):
            return True  # closed: close() already drained the queue
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> bool:
        atexit.unregister(self.close)
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

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
            writes = [i for i in items if callable(i)]
            events = [i for i in items if isinstance(i, dict)]
            if writes or events:
                self._commit(writes, events)
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()
            if any(item is _STOP for item in items):
                return

    def _commit(self, writes: list[Write], events: list[EventValues]) -> None:
        try:
            self._transaction(writes, events)
        except Exception:
            # One bad write must not cost the others queued with it: retry each alone.
            for write in writes:
                self._attempt([write], [])
            self._attempt([], events)

    def _attempt(self, writes: list[Write], events: list[EventValues]) -> None:
        try:
            self._transaction(writes, events)
        except Exception as exc:
            with self._lock:
                self._error = self._error or exc

    def _transaction(self, writes: list[Write], events: list[EventValues]) -> None:
        with self._engine.begin() as conn:
            for write in writes:
                write(conn)
            if events:
                conn.execute(insert(_EVENT_TABLE), events)
