"""The one bridge between the engine and the GUI thread.

The embedded engine runs each batch on its own thread (a BatchHandle) and puts
its events into a plain queue; a timer on the GUI thread drains it about 20
times a second and emits the events as one list, so widgets are touched only
on the GUI thread and never once per event. That a batch ended is read from
its handle, and said after its last event. Batches started elsewhere (a
`proctor run` on the same store) reach the studio the same way: their events
are polled from the store, read and parsed on a worker thread (up to
MAX_PER_DRAIN events a poll would stall the GUI thread), one poll at a time.
"""

from __future__ import annotations

import queue
import time
from functools import partial

from PySide6.QtCore import QObject, QTimer, Signal

from engine.batch import BatchHandle, BatchPlan, Engine
from engine.events import Event
from engine.sandbox.client import DockerUnavailable, connect
from engine.store import Store
from studio.off_gui import OffGuiThread

DRAIN_MS = 50
POLL_MS = 500
MAX_PER_DRAIN = 20_000
POLLED_CHUNK = 2_000  # polled events emitted per pass of the event loop, not a poll's 20,000 at once
POLL_PAGE = 500  # events read and parsed between two pauses (about 10 ms of the GIL)
POLL_PAUSE_S = 0.002


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
        self._reader = OffGuiThread(self)
        self._polling = False  # a poll is reading: the next waits for it, so events stay in order
        self._polled: list[Event] = []  # read, not emitted yet
        self._emit_more = QTimer(self, singleShot=True, interval=0, timeout=self._emit_polled)
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
        if self._polling:
            return
        self._polling = True
        self._reader.run(partial(self._read_new, self._last_seq, frozenset(self._own)),
                         self._deliver_polled)

    def _read_new(self, after_seq: int, own: frozenset[str]) -> tuple[int, list[Event]]:
        """On the worker thread: the seq to poll after next time, and the new events. Read a
        page at a time with a pause between: parsing holds the GIL, and the GUI thread, which
        gives it up on every Qt call, would otherwise wait behind the whole poll."""
        last = self.store.last_event_seq()
        if last <= after_seq:
            return after_seq, []
        events: list[Event] = []
        seq = after_seq
        while len(events) < MAX_PER_DRAIN:
            rows = self.store.events(after_seq=seq, limit=POLL_PAGE, exclude_batches=own)
            events += [event for _, event in rows]
            if len(rows) < POLL_PAGE or rows[-1][0] >= last:
                # Our own events were skipped in SQL; move past them too.
                return last, events
            seq = rows[-1][0]
            time.sleep(POLL_PAUSE_S)
        return seq, events

    def _deliver_polled(self, result: tuple[int, list[Event]] | Exception) -> None:
        self._polling = False
        if isinstance(result, Exception) or not self._poll.isActive():
            return  # a busy or vanished store: try again on the next tick; or shut down
        self._last_seq, events = result
        # A batch this studio started while the poll read: its events come by the queue.
        self._polled += [event for event in events if event.batch_id not in self._own]
        self._emit_polled()

    def _emit_polled(self) -> None:
        if self._polled:
            chunk = self._polled[:POLLED_CHUNK]
            del self._polled[:POLLED_CHUNK]
            self.events.emit(chunk)
            if self._polled:
                self._emit_more.start()


__all__ = ["EngineBridge", "DockerUnavailable"]
