"""Import and export in the studio: files in (File → Import…, or dropped on the window) and
bundles out (File → Export selected…).

Each is one job on a worker thread (OffGuiThread), one at a time. A file large enough to read
for a while, or a job still going after half a second, shows a progress bar in the status bar.
A refused file is one line (the importer's sentence, naming the file); the others still go in,
each all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QProgressBar, QStatusBar

from engine.bundle import export_bundle
from engine.importer import Progress, add, prepared
from engine.portable import ImportReport
from engine.store import Store, StoreError
from engine.text import plural

from .off_gui import OffGuiThread

IMPORTABLE = (".zip", ".eval", ".json")  # a bundle, an Inspect AI log (zip or JSON)
IMPORT_FILTER = "Bundles and Inspect AI logs (*.zip *.eval *.json);;All files (*)"
EXPORT_FILTER = "Proctor bundles (*.zip)"
LARGE_BYTES = 2_000_000  # a file at least this big reads for a while: its bar shows at once
SHOW_AFTER_MS = 500  # any other job shows its bar once it has taken this long
STEPS = 1000  # the bar's resolution
BAR_WIDTH = 260


def import_file(store: Store, path: Path,
                progress: Progress | None = None) -> tuple[list[str], ImportReport]:
    """Read, check, redact and add one file as `proctor import` does; the ids of the batches
    it held too (the window selects the first)."""
    portable = prepared(path, progress=progress)
    return [batch.id for batch in portable.batches], add(store, path, portable)


def importable_files(mime: QMimeData) -> list[Path]:
    """The files a drag brings, when every one is a local bundle or Inspect log; else []."""
    urls = mime.urls() if mime.hasUrls() else []
    if not urls or not all(url.isLocalFile() for url in urls):
        return []
    paths = [Path(url.toLocalFile()) for url in urls]
    return paths if all(p.suffix.lower() in IMPORTABLE for p in paths) else []


@dataclass
class Imported:
    """What an import of some files did."""

    batch_ids: list[str] = field(default_factory=list)  # the files' batches, new or not
    added: int = 0  # trials
    same: int = 0  # trials already in the store with the same record
    new_batches: int = 0
    refused: list[str] = field(default_factory=list)  # one line per file refused

    @property
    def message(self) -> str | None:
        """The status bar's sentence; None when every file was refused."""
        if not self.batch_ids:
            return None
        if self.added == 0 and self.new_batches == 0:
            return "nothing new: already in the store"
        count = len(self.batch_ids)
        of = self.batch_ids[0] if count == 1 else plural(count, "batch", "batches")
        same = f" ({self.same} already in the store)" if self.same else ""
        return f"imported {plural(self.added, 'trial')} of {of}{same}"


def _one_line(error: BaseException, path: Path | None) -> str:
    """An error as one line (that names the file it was about), never a traceback."""
    lines = str(error).strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    if path is None or path.name in line:
        return line
    return f"{path.name} could not be imported: {line}"


class Transfers(QObject):
    """`import_files(paths)` and `export(ids, path)`: one job at a time, off the GUI thread,
    its progress bar in the status bar. Ends in `imported`, `exported` or `failed` (one line)."""

    started = Signal()
    imported = Signal(object)  # Imported
    exported = Signal(int, str)  # trials written, the bundle's path
    failed = Signal(str)
    _moved = Signal(int)  # from the worker: steps done of STEPS

    def __init__(self, store: Store, status: QStatusBar, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.busy = False
        self.bar = QProgressBar(visible=False, textVisible=True)
        self.bar.setFixedWidth(BAR_WIDTH)
        self.bar.setRange(0, STEPS)
        status.addPermanentWidget(self.bar)  # a message in the status bar leaves it in place
        self._moved.connect(self.bar.setValue, Qt.ConnectionType.QueuedConnection)
        self._show_later = QTimer(self, singleShot=True, interval=SHOW_AFTER_MS,
                                  timeout=self.bar.show)
        self._off_gui = OffGuiThread(self)

    def import_files(self, paths: Sequence[Path]) -> bool:
        """Import bundles and Inspect logs; False (and nothing started) while a job runs."""
        paths = [Path(p) for p in paths]
        large = any(_size(p) >= LARGE_BYTES for p in paths)
        if not paths or not self._start(f"importing {_names(paths)}", large):
            return False
        store = self.store

        def work() -> Imported:
            done = Imported()
            for i, path in enumerate(paths):
                progress = self._progress(i, len(paths))
                try:
                    batch_ids, report = import_file(store, path, progress=progress)
                except Exception as e:  # noqa: BLE001 — each file is all or nothing; the rest go on
                    done.refused.append(_one_line(e, path))
                    continue
                done.batch_ids += [b for b in batch_ids if b not in done.batch_ids]
                done.added += report.trials_added
                done.same += report.trials_same
                done.new_batches += report.batches_added
            return done

        self._off_gui.run(work, lambda result: self._finish(result, self.imported, paths[0]))
        return True

    def export(self, ids: list[str], path: Path) -> bool:
        """Write the trials, runs or batches `ids` name into a bundle at `path`."""
        if not ids or not self._start(f"exporting to {path.name}", large=False):
            return False
        store = self.store

        def work() -> tuple[int, str]:
            return export_bundle(store, ids, path, progress=self._progress(0, 1)), str(path)

        self._off_gui.run(work, lambda result: self._finish(result, self.exported, path))
        return True

    def _start(self, what: str, large: bool) -> bool:
        if self.busy:
            return False
        self.busy = True
        self.bar.setValue(0)
        # An Inspect log's name runs to 70 characters: the bar says the start of it.
        short = self.bar.fontMetrics().elidedText(what, Qt.TextElideMode.ElideMiddle, BAR_WIDTH - 60)
        self.bar.setFormat(f"{short} %p%")
        self.bar.setToolTip(what)
        if large:
            self.bar.show()
        else:
            self._show_later.start()
        self.started.emit()
        return True

    def _progress(self, index: int, count: int) -> Progress:
        """The importer's progress(done, total) for file `index` of `count`, as bar steps; a
        signal only when the bar would move (an importer may call it per kilobyte)."""
        last = -1

        def moved(done: int, total: int) -> None:
            nonlocal last
            fraction = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
            step = int(STEPS * (index + fraction) / count)
            if step != last:
                last = step
                try:
                    self._moved.emit(step)
                except RuntimeError:  # the window closed meanwhile: nothing to move
                    pass

        return moved

    def _finish(self, result: Any, signal: Any, path: Path) -> None:
        self._show_later.stop()
        self.bar.setValue(STEPS)
        self.bar.hide()
        self.busy = False
        if isinstance(result, StoreError):  # the store's own sentence says what to do
            self.failed.emit(_one_line(result, None))
        elif isinstance(result, Exception):
            self.failed.emit(f"{path.name} failed: {_one_line(result, None)}")
        elif isinstance(result, tuple):
            signal.emit(*result)
        else:
            signal.emit(result)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the importer says what is wrong with it


def _names(paths: Iterable[Path]) -> str:
    names = [p.name for p in paths]
    return names[0] if len(names) == 1 else f"{names[0]} and {plural(len(names) - 1, 'more file')}"
