"""The one bridge between the engine and the GUI thread.

The embedded engine runs batches on worker threads and reports into a plain
queue; a timer on the GUI thread drains it about 20 times a second and emits
the events as one list, so widgets are touched only on the GUI thread and
never once per event. Batches started elsewhere (a `proctor run` on the same
store) reach the studio the same way: their events are polled from the store.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from engine.batch import BatchHandle, BatchPlan, Engine
from engine.events import Event
from engine.sandbox.client import DockerUnavailable, connect
from engine.store import Store

DRAIN_MS = 50
POLL_MS = 500
MAX_PER_DRAIN = 20_000


@dataclass
class _Running:
    handle: BatchHandle
    thread: threading.Thread


class EngineBridge(QObject):
    events = Signal(list)           # list[Event], in order, on the GUI thread
    batch_started = Signal(str)     # batch id
    batch_finished = Signal(str, str)  # batch id, error ("" when it ended normally)

    def __init__(self, store: Store, parent: QObject | None = None, poll_store: bool = True):
        super().__init__(parent)
        self.store = store
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._running: dict[str, _Running] = {}
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
        handle = engine.plan(plan)

        def work() -> None:
            error = ""
            try:
                engine.run(plan, handle, self._queue.put)
            except Exception as e:  # shown in the window, never a crash
                error = f"{type(e).__name__}: {e}"
            self._queue.put(("finished", handle.batch_id, error))

        thread = threading.Thread(target=work, name=f"batch-{handle.batch_id}", daemon=True)
        self._running[handle.batch_id] = _Running(handle, thread)
        self._own.add(handle.batch_id)
        thread.start()
        self.batch_started.emit(handle.batch_id)
        return handle.batch_id

    def is_running(self, batch_id: str) -> bool:
        return batch_id in self._running

    def cancel_batch(self, batch_id: str) -> bool:
        running = self._running.get(batch_id)
        if running is None:
            return False
        running.handle.cancel("cancelled from the studio")
        return True

    def cancel_trial(self, trial_id: str) -> bool:
        for running in self._running.values():
            if running.handle.cancel_trial(trial_id, "cancelled from the studio"):
                return True
        return False

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every batch this studio runs (their trials end as cancelled) and wait."""
        for running in list(self._running.values()):
            running.handle.cancel("the studio was closed")
        for running in list(self._running.values()):
            running.thread.join(timeout)
        self._drain.stop()
        self._poll.stop()

    # --- delivery on the GUI thread ----------------------------------------------------

    def _drain_queue(self) -> None:
        batch: list[Event] = []
        finished: list[tuple[str, str]] = []
        for _ in range(MAX_PER_DRAIN):
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, tuple):
                finished.append((item[1], item[2]))
            else:
                batch.append(item)
        if batch:
            self.events.emit(batch)
        for batch_id, error in finished:
            self._running.pop(batch_id, None)
            self.batch_finished.emit(batch_id, error)

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
