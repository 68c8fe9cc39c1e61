"""The studio's main window and its entry points (`proctor studio`, `proctor-studio`).

Left: the trial browser. Right: what is selected, as tabs (Overview, Timeline,
Trajectory, Diff, Evidence, Egress) under a header that says what it is and
how it ended. Bottom: Docker's state and the store. Live trials update from
the bridge's batched events; finished ones are read from the store.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication, QLabel, QMainWindow, QPushButton, QSplitter,
    QStatusBar, QTabWidget, QToolBar, QVBoxLayout, QWidget,
)

from engine.batch import BatchPlan
from engine.events import Event, PhaseProgress, PhaseStarted, TrialFinished, TrialStarted
from engine.models import TrajectoryItem, TrialRecord
from engine.sandbox.client import DockerUnavailable
from engine.spec import EvalFileError
from engine.store import Store, StoreError, default_store_path

from . import theme
from .bridge import EngineBridge
from .cli import TABS, add_arguments
from .spans import LiveSpans, spans_from_record
from .views.browser import BrowserPanel
from .views.diff import DiffView
from .views.egress import EgressView
from .views.evidence import EvidenceView
from .views.header import TrialHeader
from .views.overview import OverviewView
from .views.run import RunDialog, default_eval_path
from .views.timeline import TimelineView, batch_rows
from .views.trajectory import TrajectoryView

LIVE_REFRESH_MS = 200
STORE_STATUS_MS = 5000
DOCKER_POLL_S = 5.0


class DockerStatus(QLabel):
    """`● Docker 27.3 · 2 running` or the command that starts it; polled off the GUI thread."""

    changed = Signal(str, bool)

    def __init__(self, watch: bool = True) -> None:
        super().__init__("○ Docker: checking…")
        self.changed.connect(self._show)
        self._stop = threading.Event()
        if watch:
            threading.Thread(target=self._watch, name="docker-status", daemon=True).start()
        else:  # a screenshot: one look, now
            self._show(*self.check())

    @staticmethod
    def check() -> tuple[str, bool]:
        import docker

        try:
            client = docker.from_env(timeout=5)
            version = client.version().get("Version", "?")
            running = len(client.api.containers(filters={"label": "proctor=1"}))
            client.close()
            return f"● Docker {version} · {running} sandboxes running", True
        except Exception:
            return ("○ Docker is not reachable: start it with `sudo systemctl start docker` "
                    "or `sudo bash packaging/docker-up`"), False

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.changed.emit(*self.check())
            self._stop.wait(DOCKER_POLL_S)

    def _show(self, text: str, ok: bool) -> None:
        self.setText(text)
        self.setStyleSheet("" if ok else f"color: {theme.OUTCOME_COLOUR['fail']};")

    def stop(self) -> None:
        self._stop.set()


class MainWindow(QMainWindow):
    def __init__(self, store: Store, settings: QSettings | None = None, watch_docker: bool = True):
        super().__init__()
        self.store = store
        self.settings = settings or QSettings("Proctor", "studio")
        self.setWindowTitle(f"Proctor — {store.path}")
        self.bridge = EngineBridge(store, self)
        self.bridge.events.connect(self._on_events)
        self.bridge.batch_finished.connect(self._on_batch_finished)

        self.browser = BrowserPanel(store)
        self.browser.trial_selected.connect(self.open_trial)
        self.browser.batch_selected.connect(self.open_batch)
        self.header = TrialHeader()
        self.overview, self.timeline, self.trajectory = OverviewView(), TimelineView(), TrajectoryView()
        self.diff, self.evidence, self.egress = DiffView(), EvidenceView(), EgressView()
        self.timeline.span_clicked.connect(self._jump_to_items)
        self.tabs = QTabWidget()
        for name, widget in zip(TABS, (self.overview, self.timeline, self.trajectory, self.diff,
                                       self.evidence, self.egress)):
            self.tabs.addTab(widget, name.capitalize())
        right = QWidget()
        layout = QVBoxLayout(right)
        layout.setContentsMargins(6, 6, 6, 0)
        # Errors a user can act on, shown in the window (never a modal that blocks live updates).
        self.banner = QLabel(wordWrap=True, visible=False,
                             textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setStyleSheet(f"background: {theme.OUTCOME_COLOUR['fail']}; color: white; padding: 6px;"
                                  " border-radius: 4px;")
        self.banner.mousePressEvent = lambda _e: self.banner.hide()  # click to dismiss
        layout.addWidget(self.banner)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.browser)
        self.splitter.addWidget(right)
        # Both panes give way as the window narrows, so at 1,024 px the trial keeps its room.
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 4)
        self.splitter.setSizes([600, 800])
        self.setCentralWidget(self.splitter)
        self._build_toolbar()
        self._build_status(watch_docker)
        self._build_keys()

        self.selected_trial: str | None = None
        self.selected_batch: str | None = None
        self._live: LiveSpans | None = None
        self._live_meta: dict[str, tuple[str, int]] = {}  # trial -> (phase, started epoch ms)
        self._live_timer = QTimer(self, interval=LIVE_REFRESH_MS, timeout=self._redraw_live)
        self._live_title: tuple[str, int, str] = ("", 0, "")
        self._pending_items: list[TrajectoryItem] = []
        # Views are filled when their tab is shown: a 10,000-item trajectory or a 20 MB diff
        # costs nothing until someone looks at it.
        self._record: TrialRecord | None = None
        self._filled: set[QWidget] = set()
        self.tabs.currentChanged.connect(lambda _i: self._fill_current())
        # The browser polls the store itself; this only keeps the store's size fresh.
        self._store_timer = QTimer(self, interval=STORE_STATUS_MS, timeout=self._update_store_status)
        self._store_timer.start()
        self._restore()
        # What exists now (Qt wrappers, modules, the store's machinery) lives as long as the
        # window: out of the collector's sight, a full collection no longer walks it all and
        # stalls the GUI thread for 100 ms in the middle of a live stream.
        gc.collect()
        gc.freeze()

    # --- layout ---------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        bar = QToolBar("Main", movable=False)
        bar.setObjectName("main-toolbar")
        self.run_action = QAction("Run…", self, shortcut=QKeySequence("Ctrl+R"), triggered=self.show_run_dialog)
        self.stop_action = QAction("Stop", self, triggered=self.stop_selected,
                                   toolTip="Cancel the selected running trial, or every trial of the selected batch")
        compare = QAction("Compare", self, enabled=False, toolTip="Compare two trials (coming with the compare view)")
        replay = QAction("Replay", self, enabled=False, toolTip="Replay a stored trial (coming with the replay view)")
        for action in (self.run_action, self.stop_action, compare, replay):
            bar.addAction(action)
        self.addToolBar(bar)

    def _build_status(self, watch_docker: bool) -> None:
        status = QStatusBar()
        self.docker_status = DockerStatus(watch=watch_docker)
        self.store_status = QLabel()
        status.addWidget(self.docker_status, 1)
        status.addPermanentWidget(self.store_status)
        self.setStatusBar(status)
        self._update_store_status()

    def _build_keys(self) -> None:
        for n in range(len(TABS)):
            QShortcut(QKeySequence(f"Ctrl+{n + 1}"), self, activated=lambda n=n: self.tabs.setCurrentIndex(n))
        QShortcut(QKeySequence.StandardKey.Find, self, activated=self._find)

    def _find(self) -> None:
        widget = self.tabs.currentWidget()
        focus = getattr(widget, "focus_search", None)
        (focus or self.browser.focus_search)()

    def _update_store_status(self) -> None:
        try:
            size = self.store.path.stat().st_size / 1e6
        except OSError:
            size = 0.0
        self.store_status.setText(f"store {self.store.path} · {size:.1f} MB")

    # --- what is shown ------------------------------------------------------------------

    def open_trial(self, trial_id: str) -> None:
        self.selected_trial, self.selected_batch = trial_id, None
        try:
            record = self.store.get_trial(trial_id)
        except StoreError as e:  # a damaged record: its sentence, and nothing of another trial
            self._show_damaged(trial_id, str(e))
            return
        if record is None:
            return
        self._live = None
        self._live_timer.stop()
        if record.outcome is None:
            self._start_live(record)
            return
        self.header.show_record(record)
        self._record, self._filled = record, set()
        self._fill_current()

    def _show_damaged(self, trial_id: str, message: str) -> None:
        self._live = None
        self._live_timer.stop()
        self._record, self._filled = None, set()
        for view in (self.overview, self.trajectory, self.diff, self.evidence, self.egress):
            view.show_record(None)
        self.timeline.show_spans([])
        self.header.show_damaged(trial_id, message)
        self.show_error(message)

    def _fill_current(self) -> None:
        """Fill the view on the current tab with the selected record, once per record."""
        view = self.tabs.currentWidget()
        if self._record is None or view in self._filled:
            return
        self._filled.add(view)
        if view is self.timeline:
            if self._live is None:
                self.timeline.show_spans(spans_from_record(self._record))
        elif view is self.trajectory and self._live is not None:
            self.trajectory.show_record(self._record)
            self.trajectory.append_items(self._live_items)
        else:
            view.show_record(self._record)

    def _start_live(self, record: TrialRecord) -> None:
        """A running trial: its timeline and trajectory grow from its events."""
        self._live = LiveSpans()
        self._live_items: list[TrajectoryItem] = []
        for _, event in self.store.events(trial_id=record.id):
            self._live.apply(event)
            self._live_items.extend(_items_of([event]))
        self._live_title = (record.case_id, record.trial, record.variant)
        self._pending_items = []
        self._record, self._filled = record, set()
        self._fill_current()
        self._redraw_live()
        self._live_timer.start()

    def _redraw_live(self) -> None:
        """Five times a second: the timeline to now, the header's clock, new trajectory items."""
        if self._live is None or self.selected_trial is None:
            return
        now = self._live.now_ms(int(time.time() * 1000))
        self.timeline.show_spans(self._live.spans, now)
        running = next((s for s in reversed(self._live.spans) if s.end_ms is None), None)
        self.header.show_live(*self._live_title, running.label if running else "starting", now)
        if self._pending_items:
            items, self._pending_items = self._pending_items, []
            self._live_items.extend(items)
            if self.trajectory in self._filled:
                self.trajectory.append_items(items)

    def open_batch(self, batch_id: str) -> None:
        """A batch: the timeline shows one row per trial."""
        self.selected_batch, self.selected_trial = batch_id, None
        self._record = None
        self._live = None
        self._live_timer.stop()
        try:
            summary = self.store.batch_summary(batch_id)
        except StoreError as e:
            self.show_error(str(e))
            return
        if summary is None:
            return
        records: list[TrialRecord] = []
        damaged: list[str] = []
        for trial in (t for run in summary.runs for t in run.trials):
            try:
                record = self.store.get_trial(trial.id)
            except StoreError as e:  # the batch's other trials are still worth seeing
                damaged.append(str(e))
                continue
            if record is not None:
                records.append(record)
        self.timeline.show_batch(batch_rows(records))
        self.header.show_batch(summary)
        if damaged:
            more = f" ({len(damaged) - 1} more damaged records left out)" if len(damaged) > 1 else ""
            self.show_error(damaged[0] + more)

    def _jump_to_items(self, phase: str, index: int | None) -> None:
        """A click on a timeline bar opens what it stands for: a turn's trajectory items,
        a check's or a judge's evidence card, the setup log."""
        if phase in ("turn", "diff") and index is not None:
            self.trajectory.select_phase(phase, index)
            self.tabs.setCurrentWidget(self.trajectory)
            return
        kind = {"check": "command", "judge": "judge"}.get(phase)
        cards = [c for c in self.evidence.cards if c.validation.kind == kind]
        target = cards[index - 1] if kind and index and index <= len(cards) else None
        if phase == "setup":
            target = self.evidence.setup_log
        if target is not None:
            self.tabs.setCurrentWidget(self.evidence)
            self.evidence.scroll.ensureWidgetVisible(target)

    # --- live --------------------------------------------------------------------------

    def _on_events(self, events: list[Event]) -> None:
        finished_selected = False
        for event in events:
            trial_id = getattr(event, "trial_id", None)
            if isinstance(event, TrialStarted):
                self._live_meta[event.trial_id] = ("starting", event.at)
            elif isinstance(event, PhaseStarted) and trial_id in self._live_meta:
                self._live_meta[trial_id] = (event.phase, self._live_meta[trial_id][1])
                self.browser.model.mark_live(trial_id, event.phase, self._live_meta[trial_id][1])
            elif isinstance(event, TrialFinished):
                self._live_meta.pop(event.trial_id, None)
                self.browser.model.mark_live(event.trial_id, None, None)
                finished_selected |= event.trial_id == self.selected_trial
            if trial_id is not None and trial_id == self.selected_trial and self._live is not None:
                self._live.apply(event)
        if self._live is not None and self.selected_trial is not None:
            self._pending_items.extend(_items_of([e for e in events
                                                  if getattr(e, "trial_id", None) == self.selected_trial]))
        if finished_selected and self.selected_trial:
            self.store.flush(timeout=5)  # our own writer may hold the final record for a moment
            self.open_trial(self.selected_trial)

    def _on_batch_finished(self, batch_id: str, error: str) -> None:
        self.browser.poll()
        if error:
            self.show_error(f"Batch {batch_id} failed: {error}")

    # --- actions -------------------------------------------------------------------------

    def show_run_dialog(self) -> None:
        dialog = RunDialog(self, self.settings.value("last_eval", "") or default_eval_path())
        if dialog.exec() != RunDialog.DialogCode.Accepted or dialog.plan is None:
            return
        self.settings.setValue("last_eval", dialog.path.text())
        self.start_batch(dialog.plan)

    def start_batch(self, plan: BatchPlan) -> str | None:
        """Start a batch on the embedded engine; its trials appear and move live."""
        try:
            batch_id = self.bridge.start_batch(plan)
        except (DockerUnavailable, EvalFileError, StoreError) as e:
            self.show_error(f"Could not start the batch: {e}")
            return None
        self.store.flush(timeout=5)  # the plan's rows, so the browser can show them now
        self.browser.model.refresh()
        self.browser.select_id(batch_id)
        return batch_id

    def show_error(self, message: str) -> None:
        self.banner.setText(f"{message}   (click to dismiss)")
        self.banner.show()

    def stop_selected(self) -> None:
        if self.selected_trial and self.bridge.cancel_trial(self.selected_trial):
            self.statusBar().showMessage(f"cancelling {self.selected_trial}…", 4000)
        elif self.selected_batch and self.bridge.cancel_batch(self.selected_batch):
            self.statusBar().showMessage(f"cancelling {self.selected_batch}…", 4000)
        else:
            self.statusBar().showMessage("nothing this studio runs is selected", 4000)

    # --- state ---------------------------------------------------------------------------

    def _restore(self) -> None:
        geometry = self.settings.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 860)
        splitter = self.settings.value("splitter")
        if isinstance(splitter, QByteArray):
            self.splitter.restoreState(splitter)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("splitter", self.splitter.saveState())
        self.bridge.shutdown()
        self.docker_status.stop()
        super().closeEvent(event)

    def show_view(self, name: str) -> None:
        if name in TABS:
            self.tabs.setCurrentIndex(TABS.index(name))


def _items_of(events: list[Event]) -> list[TrajectoryItem]:
    return [TrajectoryItem.model_validate(e.item) for e in events
            if isinstance(e, PhaseProgress) and e.item is not None]


class ErrorWindow(QMainWindow):
    """When the store cannot be opened: the sentence that says why, and what to do."""

    def __init__(self, message: str):
        super().__init__()
        self.setWindowTitle("Proctor")
        page = QWidget()
        layout = QVBoxLayout(page)
        label = QLabel(f"<h3>Proctor cannot open its store</h3><p>{message}</p>"
                       "<p>Start the studio with another store: <code>proctor studio --store FILE</code></p>")
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
        layout.addWidget(QPushButton("Quit", clicked=self.close))
        layout.addStretch(1)
        self.setCentralWidget(page)
        self.resize(720, 300)


# --- entry points ----------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    if args.view in ("compare", "replay"):
        print(f"proctor: the {args.view} view is not built yet", file=sys.stderr)
        return 2
    if args.screenshot and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Proctor")
    path = args.store or default_store_path()
    try:
        store = Store(path)
    except StoreError as e:
        if args.screenshot:
            print(f"proctor: {e}", file=sys.stderr)
            return 2
        window: QMainWindow = ErrorWindow(str(e))
        window.show()
        return app.exec()
    settings = QSettings("Proctor", "studio")
    if args.screenshot:  # the same picture every time: no remembered geometry or splitter
        scratch = tempfile.mkdtemp(prefix="proctor-shot-")
        settings = QSettings(os.path.join(scratch, "studio.ini"), QSettings.Format.IniFormat)
    window = MainWindow(store, settings, watch_docker=not args.screenshot)
    if args.screenshot:
        width, _, height = args.size.partition("x")
        window.resize(int(width), int(height))
    window.show()
    if args.open_id and not window.browser.select_id(args.open_id):
        print(f"proctor: no batch or trial {args.open_id} in {store.path}", file=sys.stderr)
        if args.screenshot:
            store.close()
            return 2
    if args.view and args.view != "browser":
        window.show_view(args.view)
    if args.screenshot:
        return _screenshot(app, window, args.screenshot)
    code = app.exec()
    store.close()
    return code


def _screenshot(app: QApplication, window: MainWindow, path: Path) -> int:
    deadline = time.monotonic() + 0.6  # let timers draw (timeline, live rows)
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.02)
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = window.grab().save(str(path))
    window.close()
    window.store.close()
    if not ok:
        print(f"proctor: could not write {path}", file=sys.stderr)
        return 2
    print(path)
    return 0


def main() -> int:
    """`proctor-studio`: the launcher a desktop entry starts."""
    parser = argparse.ArgumentParser(prog="proctor-studio")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
