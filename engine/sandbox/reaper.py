"""Removing ended trials' sandboxes in the background, so a trial's slot is free once its
record is committed.

A bounded number of removals may be pending at once: a trial that ends when all places are
taken waits for one (back-pressure), so containers never pile up faster than the daemon
removes them. `drain` waits for every pending removal; a batch calls it before it ends, and
so does the command line before the process exits, on a signal too.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

log = logging.getLogger(__name__)


class Reaper:
    """A pool of removal threads with at most `pending` removals queued or running."""

    def __init__(self, pending: int = 8, removers: int | None = None):
        """`removers`: threads removing at once, `pending` by default: a batch's last
        trials end together, and their removals one by one would hold up its end."""
        removers = pending if removers is None else removers
        if pending < 1 or removers < 1:
            raise ValueError("a reaper needs at least one pending place and one remover")
        self.pending = pending
        self._places = threading.BoundedSemaphore(pending)
        self._pool = ThreadPoolExecutor(max_workers=removers, thread_name_prefix="reaper")
        self._lock = threading.Lock()
        self._futures: set[Future[None]] = set()
        self._failures: list[str] = []

    def submit(self, what: str, remove: Callable[[], None]) -> float:
        """Queue `remove` (named `what` in a failure); waits for a free place first.
        Returns the seconds waited for that place."""
        started = time.monotonic()
        self._places.acquire()
        waited = time.monotonic() - started
        try:
            future = self._pool.submit(self._run, what, remove)
        except RuntimeError:  # the pool is shut: remove here rather than leave it behind
            self._places.release()
            self._run(what, remove, release=False)
            return waited
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return waited

    def in_flight(self) -> int:
        """Removals queued or running now."""
        with self._lock:
            return len(self._futures)

    def drain(self, timeout: float | None = None) -> list[str]:
        """Wait until every removal submitted so far has ended; the failures since the last
        drain, one sentence each. Removals still running after `timeout` are left to the sweep."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                futures = list(self._futures)
            if not futures:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            wait(futures, timeout=left)  # then look again: a trial may have submitted meanwhile
        with self._lock:
            failures, self._failures = self._failures, []
        return failures

    def close(self, timeout: float | None = None) -> list[str]:
        """Drain, then stop the removal threads; later submits remove on the caller's thread."""
        failures = self.drain(timeout)
        self._pool.shutdown(wait=False)
        return failures

    def _run(self, what: str, remove: Callable[[], None], release: bool = True) -> None:
        try:
            remove()
        except Exception as e:  # a removal's failure is said, never raised into a pool thread
            said = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            line = f"could not remove {what}: {said}"
            log.warning(line)
            with self._lock:
                self._failures.append(line)
        finally:
            if release:
                self._places.release()

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)
