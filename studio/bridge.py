"""The one bridge between the engine and the GUI thread.

The embedded engine runs each batch on its own thread (a BatchHandle) and puts
its events into a plain queue; a timer on the GUI thread drains it about 20
times a second and emits the events as one list, so widgets are touched only
on the GUI thread and never once per event. That a batch ended is read from
its handle, and said after its last event. Batches started elsewhere (a
`proctor run` on the same store) reach the studio the same way: their events
are polled from the store.
"""

from __future__ import annotations

import queue

from PySide6.QtCore import QObject, QTimer, Signal

from engine.batch import BatchHandle, BatchPlan, Engine
from engine.events import Event
from engine.sandbox.client import DockerUnavailable, connect
from engine.store import Store

DRAIN_MS = 50
POLL_MS = 500
MAX_PER_DRAIN = 20_000


class EngineBridge(QObject):
    events = Signal(list)           # list[Event], in order, on the GUI thread
    batch_finished = Signal(str, str)  # batch id, error ("" if none); after the batch's events

    def __init__(self, store: Store, parent: QObject | None = None, poll_store: bool = True):
        super().__init__(parent)
        self.store = store
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()  # events only
        self._running: dict[str, BatchHandle] = {}
        self._own: set[str] = set()  # every batch this studio started: their events come by the queue
        self._engine: Engine | None = None
        self._last_seq = store.last_event_seq()
        self._drain = QTimer(self, interval=DRAIN_MS, timeout=self._drain_queue)
        self._drain.start()
        self._poll = QTimer(self, interval=POLL_MS, timeout=self._poll_store)
        if poll_store:
            self._poll.start()

    # --- the embedded engine ----------------------------------------------------

    def engine(self) -> Engine:
        """Connects to Docker on first use; raises DockerUnavailable with the sentence to show."""
        if self._engine is None:
            engine = Engine(self.store, connect())
            engine.sweep()
            self._engine = engine
        return self._engine

    def start_batch(self, plan: BatchPlan) -> str:
        engine = self.engine()
        engine.check_images(plan)  # raises EvalFileError naming the file and line
        handle = engine.start_batch(plan, self._queue.put)
        self._running[handle.batch_id] = handle
        self._own.add(handle.batch_id)
        return handle.batch_id

    def is_running(self, batch_id: str) -> bool:
        return batch_id in self._running

    def cancel_batch(self, batch_id: str) -> bool:
        handle = self._running.get(batch_id)
        if handle is None:
            return False
        handle.cancel("cancelled from the studio")
        return True

    def cancel_trial(self, trial_id: str) -> bool:
        return any(handle.cancel_trial(trial_id, "cancelled from the studio")
                   for handle in self._running.values())

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every batch this studio runs (their trials end as cancelled) and wait."""
        for handle in list(self._running.values()):
            handle.cancel("the studio was closed")
        for handle in list(self._running.values()):
            try:
                handle.wait(timeout)
            except BaseException as e:
                if e is not handle.error:  # an interrupt of this thread, not the batch's
                    raise
                # The window is closing: the batch's error (a SystemExit too) has nowhere to show.
        self._drain.stop()
        self._poll.stop()

    # --- delivery on the GUI thread ----------------------------------------------------

    def _drain_queue(self) -> None:
        # Ended before the drain, so every event of theirs is in the queue: said after those.
        ended = [handle for handle in self._running.values() if handle.done]
        batch: list[Event] = []
        for _ in range(MAX_PER_DRAIN):
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        else:
            ended = []  # more events wait: the ends come on a later tick, after them
        if batch:
            self.events.emit(batch)
        for handle in ended:
            del self._running[handle.batch_id]
            error = f"{type(handle.error).__name__}: {handle.error}" if handle.error else ""
            self.batch_finished.emit(handle.batch_id, error)

    def _poll_store(self) -> None:
        """Events other processes wrote (a CLI run on this store); ours come by the queue."""
        try:
            last = self.store.last_event_seq()
            if last <= self._last_seq:
                return
            rows = self.store.events(after_seq=self._last_seq, limit=MAX_PER_DRAIN,
                                     exclude_batches=self._own)
        except Exception:  # a busy or vanished store: try again on the next tick
            return
        # Our own events were skipped in SQL; move past them too.
        self._last_seq = rows[-1][0] if len(rows) == MAX_PER_DRAIN else last
        if rows:
            self.events.emit([event for _, event in rows])


__all__ = ["EngineBridge", "DockerUnavailable"]
