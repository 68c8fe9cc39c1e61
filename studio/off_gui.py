"""Work the GUI thread must not wait for: store reads and waits run on a worker thread, and
their result comes back to the GUI thread as a queued call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from engine.store import Store, StoreError

STORE_WAIT_S = 5.0  # how long the studio waits, off the GUI thread, for the store to catch up


def wait_for_writer(store: Store) -> None:
    """Off the GUI thread: until our writer has committed what it holds, or STORE_WAIT_S."""
    try:
        store.flush(timeout=STORE_WAIT_S)
    except StoreError:
        pass  # a slow or failed writer: what it did commit is what the caller reads next


class OffGuiThread(QObject):
    """`run(work, then)` calls `work()` on a worker thread and `then(result)` back on the GUI
    thread (an exception `work` raised is the result)."""

    _done = Signal(object, object)  # then, result
    _pending = 0  # jobs started and not yet delivered, in every instance (a screenshot waits for 0)
    _pending_lock = threading.Lock()

    @classmethod
    def pending(cls) -> int:
        """Jobs whose results have not reached the GUI thread yet, in the whole studio."""
        with cls._pending_lock:
            return cls._pending

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._done.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def run(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        def job() -> None:
            try:
                result = work()
            except Exception as e:  # noqa: BLE001 — handed to `then`, on the GUI thread
                result = e
            try:
                self._done.emit(then, result)
            except RuntimeError:  # the window is gone
                OffGuiThread._settle()

        with OffGuiThread._pending_lock:
            OffGuiThread._pending += 1
        threading.Thread(target=job, name="studio-store-wait", daemon=True).start()

    @staticmethod
    def _settle() -> None:
        with OffGuiThread._pending_lock:
            OffGuiThread._pending -= 1

    @staticmethod
    def _deliver(then: Callable[[Any], None], result: Any) -> None:
        try:
            then(result)
        finally:
            OffGuiThread._settle()
