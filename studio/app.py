"""The studio's main window and its entry points (`proctor studio`, `proctor-studio`).

Left: the trial browser. Right: what is selected, as tabs (Overview, Timeline,
Trajectory, Diff, Evidence, Egress, Source) under a header that says what it is and
how it ended; or, in their place, two trials compared (Ctrl-click two, then
Compare; Esc goes back), or one finished trial replayed (Replay; Esc goes back). Bottom: Docker's state and the store.
File → Import… and Export selected… (or files dropped on the window) run as jobs of
studio/transfer.py, with a progress bar at the bottom. The window only
wires: the bridge's batched events go into the live-trials model, which the
browser, the header and the views subscribe to; finished trials are read from
the store.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication, QFileDialog, QLabel, QMainWindow, QPushButton, QSplitter, QStackedWidget,
    QStatusBar, QTabWidget, QToolBar, QVBoxLayout, QWidget,
)

from engine.batch import BatchPlan
from engine.doctor import Diagnosis, diagnose
from engine.events import Event
from engine.replay import replay_events
from engine.models import TrialRecord
from engine.sandbox.client import DockerUnavailable
from engine.spec import EvalFileError
from engine.store import Store, StoreError
from engine.store.browse import TrialSpans, batch_spans, locate, pass_and_fail
from engine.text import plural

from . import theme
from .assets import asset
from .bridge import EngineBridge
from .identity import set_desktop_identity
from .cli import SCREENSHOT_SIZE, At, parse_at
from .models.browser import KindRole, TrialIdRole
from .models.live import LiveTrials
from .off_gui import STORE_WAIT_S, OffGuiThread, wait_for_writer
from .pages.compare import ComparePage
from .pages.overview import OverviewPage
from .pages.replay import ReplayPage
from .settings import StudioSettings, store_location
from .transfer import EXPORT_FILTER, IMPORT_FILTER, Imported, Transfers, importable_files
from .views.browser import BrowserPanel
from .views.diff import DiffView
from .views.egress import EgressView
from .views.evidence import EvidenceView
from .views.header import TrialHeader
from .views.run import RunDialog, default_eval_path
from .views.search_hits import SearchHitsView
from .views.settings_dialog import open_settings
from .views.source import SourceView
from .views.status import ClusterStatusLabel, DockerStatus
from .views.timeline import TimelineView, batch_rows
from .views.trajectory import TrajectoryView
from .views.welcome import DEMO_BUNDLE, WelcomePanel, demo_plan

if TYPE_CHECKING:
    from engine.store.search import SearchHit

STORE_STATUS_MS = 5000
MESSAGE_MS = 10_000  # how long a sentence in the status bar stays (an import's, an export's)
BUSY = "an import or export is still running: try again when it is done"
BATCH_REFRESH_MS = 1000  # a running batch's header, grid and timeline are read again at most this often
BATCH_VIEWS = ("overview", "timeline")  # the tabs that show a batch; the others show one trial
GC_YOUNG = 5_000  # objects allocated between young collections (Python's default: 700)
# A finished trial whose record the store still lacks after that wait: looked for again this
# many seconds later, each; then the banner says so.
RECORD_RETRIES_S = (1.0, 2.0, 4.0)
CATCH_UP_READS = 3  # reads of a running trial's events, when the store was behind the bridge


@runtime_checkable
class RecordView(Protocol):
    """What a tab on the right is: it shows one trial's record, or nothing (None)."""

    def show_record(self, record: TrialRecord | None) -> None: ...


@runtime_checkable
class SearchableView(RecordView, Protocol):
    """A tab with a search field of its own, which Ctrl+F focuses."""

    def focus_search(self) -> None: ...


@dataclass(frozen=True)
class Tab:
    """One tab: its `--view` name, its view (a QWidget), its key; whether the view follows
    running trials (it takes the live-trials model) or reads the store itself."""

    name: str
    view: type[RecordView]
    shortcut: str
    live: bool = False
    store: bool = False

    @property
    def search(self) -> bool:
        """Whether its view has a search of its own (else Ctrl+F searches the browser)."""
        return issubclass(self.view, SearchableView)

    def make(self, live: LiveTrials, store: Store) -> QWidget:
        args = [x for x, wanted in ((live, self.live), (store, self.store)) if wanted]
        view = self.view(*args)  # type: ignore[call-arg]
        assert isinstance(view, QWidget)
        return view


# The one table the window builds its tabs from; studio/cli.py's TABS names them, in order.
TABS: tuple[Tab, ...] = (
    Tab("overview", OverviewPage, "Ctrl+1", store=True),
    Tab("timeline", TimelineView, "Ctrl+2", live=True),
    Tab("trajectory", TrajectoryView, "Ctrl+3", live=True, store=True),
    Tab("diff", DiffView, "Ctrl+4"),
    Tab("evidence", EvidenceView, "Ctrl+5"),
    Tab("egress", EgressView, "Ctrl+6"),
    Tab("source", SourceView, "Ctrl+7"),
)


def _diagnose_here() -> Diagnosis:
    """Docker's state for the demo suite; its fix runs the packaging/docker-up shipped here."""
    return diagnose(docker_up=str(asset("packaging/docker-up")))


class MainWindow(QMainWindow):
    def __init__(self, store: Store, settings: QSettings | None = None, watch_docker: bool = True):
        super().__init__()
        self.store = store
        self.settings = settings or QSettings("Proctor", "studio")
        self.setWindowTitle(f"Proctor — {store.path}")
        self.live = LiveTrials(self)
        self.off_gui = OffGuiThread(self)
        self.bridge = EngineBridge(store, self)
        self.bridge.events.connect(self.live.apply)
        self.bridge.batch_finished.connect(self._on_batch_finished)
        self.live.trial_finished.connect(self._on_trial_finished)

        self.browser = BrowserPanel(store, live=self.live)
        self.browser.trial_selected.connect(self.open_trial)
        self.browser.batch_selected.connect(self.open_batch)
        self.browser.run_selected.connect(self.open_run)
        self.browser.compare_run.connect(self.compare_pass_with_fail)
        self.browser.batch_deleted.connect(self._on_batch_deleted)
        self.browser.selection_changed.connect(self._update_compare_action)
        # The search box's full-text hits, under it; Enter or a click opens one.
        self.hits = SearchHitsView(self.browser.search_hits, box=self.browser.search)
        self.browser.show_under_search(self.hits)
        self.hits.hit_activated.connect(self.open_hit)
        self.header = TrialHeader(self.live)
        # Every one a RecordView; the window fills the current one with what is selected.
        self.views: dict[str, QWidget] = {tab.name: tab.make(self.live, store) for tab in TABS}
        self.overview_page, self.timeline = self.views["overview"], self.views["timeline"]
        self.overview, self.grid = self.overview_page.overview, self.overview_page.grid
        self.grid.compare_requested.connect(self.open_compare)
        self.grid.trial_activated.connect(self.browser.select_id)
        self.overview_page.trial_activated.connect(self.browser.select_id)  # the batch overview's links
        self.overview_page.note_saved.connect(self.browser.note_saved)
        # A failure group: the browser shows exactly its trials; "compare a pass with one" opens Compare.
        self.overview_page.group_opened.connect(
            lambda group: self.browser.show_trials(group.trial_ids, f"a {group.kind} failure group"))
        self.overview_page.compare_requested.connect(self.open_compare)
        self.trajectory, self.diff = self.views["trajectory"], self.views["diff"]
        self.evidence, self.egress = self.views["evidence"], self.views["egress"]
        self.timeline.span_clicked.connect(self._jump_to_items)
        self.trajectory.validation_clicked.connect(self._jump_to_items)  # a check's row: its card
        self.timeline.trial_clicked.connect(self.browser.select_id)  # a batch row opens its trial
        self.tabs = QTabWidget()
        for tab in TABS:
            self.tabs.addTab(self.views[tab.name], tab.name.capitalize())
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
        # Two pages in one place: the selected item's tabs, or two trials compared.
        self.normal_page = QWidget()
        normal = QVBoxLayout(self.normal_page)
        normal.setContentsMargins(0, 0, 0, 0)
        normal.addWidget(self.header)
        normal.addWidget(self.tabs, 1)
        self.compare_page = ComparePage()
        self.compare = self.compare_page.view
        self._sizes_before_compare: list[int] | None = None
        self.replay_page = ReplayPage()
        self.pages = QStackedWidget()
        # An empty store opens on the welcome panel (the demo records, the demo suite, Docker's state).
        self.welcome = WelcomePanel(diagnose=_diagnose_here)
        self.welcome.open_demo.connect(self.open_demo_records)
        self.welcome.run_demo.connect(self.run_demo_suite)
        for page in (self.normal_page, self.compare_page, self.replay_page, self.welcome):
            self.pages.addWidget(page)
        self.compare_page.back.connect(self.show_tabs)
        self.replay_page.back.connect(self.show_tabs)
        layout.addWidget(self.pages, 1)
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
        self.transfers = Transfers(store, self.statusBar(), self)
        self.transfers.imported.connect(self._on_imported)
        self.transfers.exported.connect(lambda n, path: self.statusBar().showMessage(
            f"exported {plural(n, 'trial')} to {path}", MESSAGE_MS))
        self.transfers.failed.connect(self.show_error)
        self._build_menu()
        self.setAcceptDrops(True)  # bundles and Inspect logs dropped on the window are imported

        self.selected_trial: str | None = None
        self.selected_batch: str | None = None
        # Views are filled when their tab is shown: a 10,000-item trajectory or a 20 MB diff
        # costs nothing until someone looks at it.
        self._record: TrialRecord | None = None
        self._filled: set[QWidget] = set()
        self.tabs.currentChanged.connect(lambda _i: self._fill_current())
        # The browser polls the store itself; this only keeps the store's size fresh.
        self._store_timer = QTimer(self, interval=STORE_STATUS_MS, timeout=self._update_store_status)
        self._store_timer.start()
        self._batch_refresh = QTimer(self, singleShot=True, interval=BATCH_REFRESH_MS,
                                     timeout=self._refresh_batch)
        # Another process (a CLI run) writes to the store too: the browser's poll notices.
        self.browser.model.refreshed.connect(lambda _before, _after: self._batch_moved())
        self.browser.model.refreshed.connect(lambda _before, _after: self._follow_store())
        self.docker_status.changed.connect(lambda _text, ok: self._docker_moved(ok))
        self.cluster_status.changed.connect(self._cluster_moved)
        self._follow_store()
        self._restore()
        # What exists now (Qt wrappers, modules, the store's machinery) lives as long as the
        # window: out of the collector's sight, a full collection no longer walks it all and
        # stalls the GUI thread for 100 ms in the middle of a live stream.
        gc.collect()
        gc.freeze()
        # A typed event is about seven tracked objects: at 5,000 events a second, young
        # collections at the default 700 ran 35 times a second on the engine's threads, and
        # every hundredth walked all old objects holding the GIL: 20-40 ms the GUI stood still.
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])

    # --- layout ---------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        bar = QToolBar("Main", movable=False)
        bar.setObjectName("main-toolbar")
        self.run_action = QAction("Run…", self, shortcut=QKeySequence("Ctrl+R"), triggered=self.show_run_dialog)
        self.stop_action = QAction("Stop", self, triggered=self.stop_selected,
                                   toolTip="Cancel the selected running trial, or every trial of the selected batch")
        self.compare_action = QAction(
            "Compare", self, enabled=False, triggered=self.compare_selected,
            toolTip="Compare two trials: Ctrl-click a second trial in the browser")
        self.replay_action = QAction(
            "Replay", self, enabled=False, triggered=self.replay_selected,
            toolTip="Play the selected finished trial back through its timeline and trajectory (Space pauses)")
        for action in (self.run_action, self.stop_action, self.compare_action, self.replay_action):
            bar.addAction(action)
        self.addToolBar(bar)

    def _build_menu(self) -> None:
        menu = self.menuBar().addMenu("&File")
        self.import_action = QAction(
            "Import…", self, shortcut=QKeySequence("Ctrl+I"), triggered=self.import_dialog,
            toolTip="Add Proctor bundles or Inspect AI logs (.eval, .json) to the store; "
                    "or drop them on the window")
        self.export_action = QAction(
            "Export selected…", self, shortcut=QKeySequence("Ctrl+E"), triggered=self.export_selected,
            toolTip="Write the selected trials, run or batch into one bundle file")
        menu.addAction(self.import_action)
        menu.addAction(self.export_action)
        self.settings_action = QAction(
            "Settings…", self, shortcut=QKeySequence("Ctrl+,"), menuRole=QAction.MenuRole.PreferencesRole,
            triggered=lambda: open_settings(self),
            toolTip="Store location, Docker hosts, judge, concurrency, theme and API keys")
        menu.addSeparator()
        menu.addAction(self.settings_action)

    def _build_status(self, watch_docker: bool) -> None:
        status = QStatusBar()
        self.docker_status = DockerStatus(watch=watch_docker)
        self.store_status = QLabel()
        # The store's path gives way (whole in its tooltip and the title): beside Docker's
        # sentence, a long one held a window asked for 1,024 px at 1,193.
        self.store_status.setMinimumWidth(1)
        # Shown only while this studio drives a cluster batch (it is then Ray's driver).
        self.cluster_status = ClusterStatusLabel(self.store, watch=watch_docker)
        status.addWidget(self.docker_status, 1)
        status.addWidget(self.cluster_status)
        status.addPermanentWidget(self.store_status)
        self.setStatusBar(status)
        self._update_store_status()

    def _build_keys(self) -> None:
        for n, tab in enumerate(TABS):
            QShortcut(QKeySequence(tab.shortcut), self, activated=lambda n=n: self._show_tab(n))
        QShortcut(QKeySequence.StandardKey.Find, self, activated=self._find)
        # Only while two trials are compared or one replayed: elsewhere Esc is the focused widget's.
        self._back = QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.show_tabs,
                               enabled=False)

    def _show_tab(self, n: int) -> None:
        self.show_tabs()
        self.tabs.setCurrentIndex(n)

    def _find(self) -> None:
        tab = TABS[self.tabs.currentIndex()]
        (self.views[tab.name] if tab.search else self.browser).focus_search()

    def _update_store_status(self) -> None:
        try:
            size = self.store.path.stat().st_size / 1e6
        except OSError:
            size = 0.0
        self.store_status.setText(f"store {self.store.path} · {size:.1f} MB")
        self.store_status.setToolTip(self.store_status.text())

    # --- what is shown ------------------------------------------------------------------

    def _select(self, trial_id: str | None, batch_id: str | None) -> None:
        """What is selected now; a running trial no longer shown keeps no items."""
        if self.selected_trial is not None and self.selected_trial != trial_id:
            self.live.unwatch(self.selected_trial)
        self.selected_trial, self.selected_batch = trial_id, batch_id
        self.show_tabs()  # one item selected: its tabs, whatever was compared

    def open_trial(self, trial_id: str) -> None:
        self._select(trial_id, None)
        try:
            # Without its items: the Trajectory tab pages them from the store as it shows them.
            record = self.store.get_trial_outline(trial_id)
        except StoreError as e:  # a damaged record: its sentence, and nothing of another trial
            self._show_damaged(trial_id, str(e))
            return
        if record is None:
            return
        if record.outcome is None:
            if self.live.outcome(trial_id) is not None:  # it ended before its record was stored
                self._reload_when_stored(trial_id)
            elif (live := self.live.trial(trial_id)) is None or not live.watched:
                # Its events so far are in the store, all of them; the live model follows it
                # from there, and adds what the bridge delivered that the store lacks yet.
                history = list(self.store.trial_events(trial_id))
                if not self.live.watch(trial_id, history).complete:
                    self._catch_up(trial_id)
        self._show(record)

    def _show(self, record: TrialRecord) -> None:
        self.header.show_record(record)
        self._record, self._filled = record, set()
        self._fill_current()
        self._update_replay_action()

    def _show_damaged(self, trial_id: str, message: str) -> None:
        self._record, self._filled = None, set()
        self._update_replay_action()
        for view in self.views.values():
            view.show_record(None)
        self.header.show_damaged(trial_id, message)
        self.show_error(message)

    def _on_batch_deleted(self, _batch_id: str) -> None:
        """The current row went with a deleted batch (Qt says nothing): what it showed is a
        leftover, so the window shows nothing until the next pick."""
        if self.browser.tree.currentIndex().isValid():
            return  # the row shown is another batch's
        self._select(None, None)
        self._record, self._filled = None, set()
        self._update_replay_action()
        for view in self.views.values():
            view.show_record(None)
        self.header.show_record(None)

    def _fill_current(self) -> None:
        """Fill the view on the current tab with the selected record, once per record."""
        view = self.tabs.currentWidget()
        if self._record is None or view in self._filled:
            return
        self._filled.add(view)
        view.show_record(self._with_diffs(self._record) if view is self.diff else self._record)

    def _with_diffs(self, record: TrialRecord) -> TrialRecord:
        """The record with its turns' diffs, which the first read of a trial leaves in the store."""
        try:
            return self.store.get_trial_outline(record.id, diffs=True) or record
        except StoreError as e:
            self.show_error(str(e))
            return record

    def open_run(self, run_id: str) -> None:
        """A run: its batch, with the run's cell picked in the grid and its trials listed."""
        try:
            located = locate(self.store, run_id)
        except StoreError as e:
            self.show_error(str(e))
            return
        if located is not None:
            self.open_batch(located.batch_id, run_id=run_id)

    def open_batch(self, batch_id: str, run_id: str | None = None) -> None:
        """A batch: the Overview shows its run grid (a run's cell picked), the timeline one
        row per trial; the views of one trial show nothing rather than the trial seen before."""
        self._select(None, batch_id)
        self._record, self._filled = None, set()
        self._update_replay_action()
        for tab in TABS:
            if tab.name not in BATCH_VIEWS:
                self.views[tab.name].show_record(None)
        if run_id is not None:
            self.overview_page.show_run(run_id)
        else:
            self.overview_page.show_batch(batch_id)
        self._show_batch(batch_id, first=True)

    def _show_batch(self, batch_id: str, first: bool = False) -> None:
        """The batch's header from its summary, and its timeline from the phases of its
        records, read off the GUI thread (a batch of thousands of trials reads for a while)."""
        try:
            summary = self.store.batch_summary(batch_id)
        except StoreError as e:
            self.show_error(str(e))
            return
        if summary is None:
            self.header.show_record(None)
            return
        self.header.show_batch(summary)
        store = self.store

        def read() -> tuple[list[TrialSpans], list[str]]:
            damaged: list[str] = []  # the batch's other trials are still worth seeing
            return batch_spans(store, summary.batch_id, damaged), damaged

        def show(result: tuple[list[TrialSpans], list[str]] | Exception) -> None:
            if (self.selected_trial, self.selected_batch) != (None, batch_id):
                return  # the user moved on meanwhile
            if isinstance(result, StoreError):
                self.show_error(str(result))
                return
            if isinstance(result, Exception):
                raise result
            trials, damaged = result
            self.timeline.show_batch(batch_rows(trials))
            if damaged and first:  # said once, not at every refresh of a running batch
                more = f" ({len(damaged) - 1} more damaged records left out)" if len(damaged) > 1 else ""
                self.show_error(damaged[0] + more)

        self.off_gui.run(read, show)

    def _batch_moved(self) -> None:
        """Something of the selected batch may have changed (a trial finished, the store moved
        on, the batch ended): one read for however many changes arrive within a second."""
        if self.selected_batch is not None and not self._batch_refresh.isActive():
            self._batch_refresh.start()

    def _refresh_batch(self) -> None:
        """The selected batch as stored now (our writer first commits what it holds): its
        header, grid and timeline follow a running batch to its end."""
        batch_id = self.selected_batch

        def show(_result: object) -> None:
            if batch_id is not None and self.selected_batch == batch_id and self.selected_trial is None:
                self._show_batch(batch_id)
                self.overview_page.refresh()

        self.off_gui.run(lambda: wait_for_writer(self.store), show)

    def _jump_to_items(self, phase: str, index: int | None) -> None:
        """A click on a timeline bar opens what it stands for: a turn's trajectory items,
        a check's or a judge's evidence card, the setup log."""
        if phase in ("turn", "diff") and index is not None:
            self.trajectory.select_phase(phase, index)
            self.tabs.setCurrentWidget(self.trajectory)
            return
        if self._record is not None and self.evidence not in self._filled:  # a tab fills when first shown
            self._filled.add(self.evidence)
            self.evidence.show_record(self._record)
        kind = {"check": "command", "judge": "judge"}.get(phase)
        cards = [c for c in self.evidence.cards if c.validation.kind == kind]
        target = cards[index - 1] if kind and index and index <= len(cards) else None
        if phase == "setup":
            target = self.evidence.setup_log
        if target is not None:
            self.tabs.setCurrentWidget(self.evidence)
            self.evidence.scroll.ensureWidgetVisible(target)

    def open_hit(self, hit: SearchHit) -> None:
        """A search hit: its trial, at what matched: the item or the turn's header in the
        Trajectory tab, the validation's card in Evidence, the failure reason in Overview."""
        if self.browser.model.locate(hit.trial_id).isValid():
            self.browser.select_id(hit.trial_id)
        else:  # the tree's filter hides it: opened without clearing the search that found it
            self.open_trial(hit.trial_id)
        if self.selected_trial != hit.trial_id or self._record is None:
            return  # a damaged record: the banner says so
        if hit.where == "item" and hit.position is not None:
            self.tabs.setCurrentWidget(self.trajectory)
            self.trajectory.select_item(hit.position)
        elif hit.where == "prompt" and hit.position is not None:
            self.tabs.setCurrentWidget(self.trajectory)
            turns = self._record.turns  # the hit's position is the turn's place among them
            if 0 <= hit.position < len(turns):
                self.trajectory.select_phase("turn", turns[hit.position].index)
        elif hit.where == "evidence" and hit.position is not None:
            self.tabs.setCurrentWidget(self.evidence)
            if 0 <= hit.position < len(self.evidence.cards):
                self.evidence.scroll.ensureWidgetVisible(self.evidence.cards[hit.position])
        else:
            self.tabs.setCurrentWidget(self.overview_page)

    # --- compare -----------------------------------------------------------------------

    def _update_compare_action(self) -> None:
        self.compare_action.setEnabled(len(self.browser.selected_trials()) == 2)
        self._update_replay_action()
        if len(self.browser.tree.selectionModel().selectedRows()) == 1:
            self.show_tabs()  # one item selected again (a click on the current row too)

    def compare_selected(self) -> None:
        """The two trials selected in the browser, the first selected as A."""
        chosen = self.browser.selected_trials()
        if len(chosen) == 2:
            self.open_compare(*chosen)

    def compare_pass_with_fail(self, run_id: str) -> str | None:
        """A run's first pass (A) and first fail (B) compared; the sentence that says why not."""
        try:
            pair = pass_and_fail(self.store, run_id)
        except StoreError as e:
            self.show_error(str(e))
            return str(e)
        if pair is None:
            message = f"run {run_id} has no pass and fail to compare: it needs one of each"
            self.show_error(message)
            return message
        return self.open_compare(*pair)

    def open_compare(self, a_id: str, b_id: str) -> str | None:
        """Show two stored trials compared; the sentence that says why not, else None."""
        records = []
        for trial_id in (a_id, b_id):
            try:
                record = self.store.get_trial(trial_id)
            except StoreError as e:
                self.show_error(str(e))
                return str(e)
            if record is None:
                message = f"no trial {trial_id} in {self.store.path}"
                self.show_error(message)
                return message
            records.append(record)
        if self.pages.currentWidget() is not self.compare_page:
            self._drop_replay()
            self.pages.setCurrentWidget(self.compare_page)
            self._widen_for_compare()
        self.compare_page.show_pair(*records)
        self._back.setEnabled(True)
        return None

    def _widen_for_compare(self) -> None:
        """Give the two sides the room they need, from the browser's, until the way back."""
        left, right = self.splitter.sizes()
        need = self.compare_page.needed_width()
        spare = left - self.browser.minimumSizeHint().width()
        move = min(need - right, spare)
        if move > 0:
            self._sizes_before_compare = [left, right]
            self.splitter.setSizes([left - move, right + move])

    def show_tabs(self) -> None:
        """Back from a comparison or a replay to the selected item's tabs (and the browser's width)."""
        if self.pages.currentWidget() is self.compare_page and self._sizes_before_compare:
            self.splitter.setSizes(self._sizes_before_compare)
        self._sizes_before_compare = None
        self._drop_replay()
        self.pages.setCurrentWidget(self.normal_page)
        self._back.setEnabled(False)

    # --- replay ------------------------------------------------------------------------

    def _update_replay_action(self) -> None:
        record = self._record
        self.replay_action.setEnabled(
            record is not None and record.outcome is not None
            and self.browser.selected_trials() == [record.id])

    def replay_selected(self) -> None:
        """The selected finished trial, played back from its start at the recorded pace."""
        if self._record is not None and self.replay_action.isEnabled():
            self.open_replay(self._record.id, play=True)

    def open_replay(self, trial_id: str, at: At | None = None, play: bool = False) -> str | None:
        """Replay a stored, finished trial, standing at `at` (default its start), playing or
        paused; the sentence that says why not, else None."""
        try:
            record = self.store.get_trial(trial_id)
            events = replay_events(self.store, trial_id) if record is not None else None
        except StoreError as e:
            self.show_error(str(e))
            return str(e)
        if record is None or events is None:
            message = f"no trial {trial_id} in {self.store.path}"
        elif record.outcome is None:
            message = f"trial {record.id} is still running: replay it once it has finished"
        else:
            message = None
        if message is not None:
            self.show_error(message)
            return message
        try:
            self.replay_page.start(record, events, at, play)
        except ValueError as e:  # no events of this trial at all
            self.show_error(str(e))
            return str(e)
        self.pages.setCurrentWidget(self.replay_page)
        self._back.setEnabled(True)
        return None

    def _drop_replay(self) -> None:
        self.replay_page.stop()

    @property
    def replay(self):
        """The replay shown (a ReplayView), or None."""
        return self.replay_page.replay

    # --- live --------------------------------------------------------------------------

    def _on_trial_finished(self, trial_id: str, _outcome: str) -> None:
        if trial_id == self.selected_trial:
            self._reload_when_stored(trial_id)
        else:
            self._batch_moved()

    def _reload_when_stored(self, trial_id: str, retries: tuple[float, ...] | None = None) -> None:
        """Show a finished trial's record once the store has it. Our own writer may still hold
        it (a skipped trial's record is queued, not waited for): that wait is made off the GUI
        thread. Another process commits a record before the event that says it finished."""
        store = self.store
        retries = RECORD_RETRIES_S if retries is None else retries

        def wait() -> TrialRecord | None:
            wait_for_writer(store)
            return store.get_trial_outline(trial_id)

        self.off_gui.run(wait, lambda result: self._on_record_stored(trial_id, result, retries))

    def _on_record_stored(self, trial_id: str, result: TrialRecord | Exception | None,
                          retries: tuple[float, ...]) -> None:
        if trial_id != self.selected_trial:
            return  # the user moved on meanwhile
        finished = self.live.outcome(trial_id) is not None
        if isinstance(result, StoreError):
            self._show_damaged(trial_id, str(result))
        elif isinstance(result, TrialRecord) and (result.outcome is not None or not finished):
            self._show(result)
        elif not finished:
            return  # neither its record nor word that it finished: nothing to show
        elif retries:  # it finished, yet the store still says it runs: a slow writer
            QTimer.singleShot(int(retries[0] * 1000), self,
                              lambda: self._look_again(trial_id, retries[1:]))
        else:
            self.show_error(f"Trial {trial_id} finished, but its record has not reached the store "
                            f"{self.store.path}: select it again in a while, or check that the "
                            "store's disk is not full.")

    def _look_again(self, trial_id: str, retries: tuple[float, ...]) -> None:
        if trial_id == self.selected_trial:
            self._reload_when_stored(trial_id, retries)

    def _catch_up(self, trial_id: str, reads: int = CATCH_UP_READS) -> None:
        """The store lacked events of a running trial that the bridge delivered and the live
        model has let go of (our writer was behind): read them again once the writer has
        written what it holds, off the GUI thread, and show the trial from them."""
        store = self.store

        def read() -> tuple[TrialRecord | None, list[Event]]:
            wait_for_writer(store)
            return store.get_trial(trial_id), list(store.trial_events(trial_id))

        def show(result: tuple[TrialRecord | None, list[Event]] | Exception) -> None:
            if trial_id != self.selected_trial or isinstance(result, Exception):
                return  # the user moved on, or the store failed: what is shown stays
            record, history = result
            if record is None or record.outcome is not None or self.live.trial(trial_id) is None:
                return  # it finished meanwhile: its record is shown as it comes
            complete = self.live.watch(trial_id, history).complete
            self._show(record)
            if not complete and reads > 1:
                self._catch_up(trial_id, reads - 1)

        self.off_gui.run(read, show)

    def _on_batch_finished(self, batch_id: str, error: str) -> None:
        self.browser.poll()
        if self.selected_batch == batch_id:
            self._refresh_batch()
        if error:
            self.show_error(f"Batch {batch_id} failed: {error}")

    # --- actions -------------------------------------------------------------------------

    def show_run_dialog(self) -> None:
        dialog = RunDialog(self, self.settings.value("last_eval", "") or default_eval_path(),
                           settings=StudioSettings.load(self.settings))
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
        selection = (self.selected_trial, self.selected_batch)

        def planned(result: Exception | None) -> None:
            if isinstance(result, StoreError):
                self.show_error(str(result))
            elif result is None and (self.selected_trial, self.selected_batch) == selection:  # the user stayed
                self.browser.model.refresh()
                self.browser.select_id(batch_id)

        # The plan's rows, so the browser can show the batch at once; waited for off the GUI thread.
        self.off_gui.run(lambda: self.store.flush(timeout=STORE_WAIT_S), planned)
        return batch_id

    # --- first run -------------------------------------------------------------------------

    def _follow_store(self) -> None:
        """The welcome panel while the store holds no batch; once one exists (imported, started,
        or another process ran one), its tabs; and the panel again once every batch is deleted."""
        empty = self.browser.model.rowCount() == 0 and not self.browser.model.filter.active
        if not empty and self.pages.currentWidget() is self.welcome:
            self.show_tabs()
        elif empty and self.pages.currentWidget() is self.normal_page:
            self.pages.setCurrentWidget(self.welcome)
            self.welcome.check()

    def _cluster_moved(self, status: object) -> None:
        """The batch Overview's live free slots; one not made yet (made when a batch is first
        shown) hears the next poll."""
        if self.overview_page._batch is not None:  # noqa: SLF001 — never made just for this
            self.overview_page.batch.show_cluster(status)

    def _docker_moved(self, ok: bool) -> None:
        if self.pages.currentWidget() is self.welcome:
            self.welcome.docker_moved(ok)

    def open_demo_records(self) -> None:
        """The shipped demo bundle, imported as any bundle is; the browser then selects its batch."""
        if not self.transfers.import_files([asset(DEMO_BUNDLE)]):
            self.statusBar().showMessage(BUSY, MESSAGE_MS)

    def run_demo_suite(self) -> None:
        """examples/demo on the embedded engine, as the Run dialog would start it."""
        try:
            plan = demo_plan()
        except EvalFileError as e:
            self.show_error(f"Could not read the demo suite: {e}")
            return
        self.start_batch(plan)

    # --- import and export ------------------------------------------------------------------

    def import_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Import bundles or Inspect AI logs",
                                                self._transfer_dir(), IMPORT_FILTER)
        if paths:
            self.import_files([Path(p) for p in paths])

    def import_files(self, paths: list[Path]) -> None:
        """Import bundles and Inspect logs off the GUI thread; the batch is selected after."""
        if paths:
            self.settings.setValue("transfer_dir", str(Path(paths[0]).parent))
        if not self.transfers.import_files(paths):
            self.statusBar().showMessage(BUSY, MESSAGE_MS)

    def _on_imported(self, done: Imported) -> None:
        if done.refused:
            more = len(done.refused) - 1
            self.show_error(done.refused[0] + (f" ({plural(more, 'more file')} refused)" if more else ""))
        if done.message is None:
            return
        self.statusBar().showMessage(done.message, MESSAGE_MS)
        self.browser.model.refresh()
        self.browser.reload_options()  # its cases and variants may be new
        self.browser.select_id(done.batch_ids[0])

    def export_selected(self) -> None:
        ids = self.browser.selected_ids()
        if not ids:
            self.statusBar().showMessage("select trials, a run or a batch to export", MESSAGE_MS)
            return
        name = f"{ids[0]}.zip" if len(ids) == 1 else f"proctor-{len(ids)}-items.zip"
        chosen, _ = QFileDialog.getSaveFileName(self, "Export selected as a bundle",
                                                str(Path(self._transfer_dir()) / name), EXPORT_FILTER)
        if not chosen:
            return
        path = Path(chosen) if Path(chosen).suffix else Path(chosen + ".zip")
        self.settings.setValue("transfer_dir", str(path.parent))
        if not self.transfers.export(ids, path):
            self.statusBar().showMessage(BUSY, MESSAGE_MS)

    def _transfer_dir(self) -> str:
        return str(self.settings.value("transfer_dir", "") or Path.home())

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if importable_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    dragMoveEvent = dragEnterEvent  # noqa: N815 (Qt's name)

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if paths := importable_files(event.mimeData()):
            event.acceptProposedAction()
            self.import_files(paths)
        else:
            event.ignore()

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
        if self._sizes_before_compare:  # Compare widened its side: keep the user's place
            self.splitter.setSizes(self._sizes_before_compare)
        self.settings.setValue("splitter", self.splitter.saveState())
        self.bridge.shutdown()
        self.docker_status.stop()
        self.cluster_status.stop()
        super().closeEvent(event)

    def show_view(self, name: str) -> None:
        names = [tab.name for tab in TABS]
        if name in names:
            self._show_tab(names.index(name))


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

def _arguments_error(open_id: str | None, view: str | None, at: str | None = None) -> str | None:
    """What is wrong with `--open`, `--view` and `--at` together, before any window opens."""
    ids = open_id.split(",") if open_id else []
    if at is not None:
        if view != "replay":
            return "--at places a replay: add --view replay"
        try:
            parse_at(at)
        except ValueError as e:
            return str(e)
    if view == "replay" and len(ids) != 1:
        return "the replay view needs a trial id: --open ID"
    if view == "compare" and (len(ids) != 2 or not all(ids)):
        return "the compare view needs two trial ids: --open ID1,ID2"
    if len(ids) > 1 and view != "compare":
        return "two ids (--open ID1,ID2) open the compare view only: add --view compare"
    return None


def open_from_args(window: MainWindow, open_id: str | None, view: str | None,
                   at: str | None = None) -> str | None:
    """Select what `--open` names and show `--view` (a replay stands at `--at`, paused; default
    its end); the one-line error, else None."""
    if view == "replay" and open_id:
        index = window.browser.model.locate(open_id)
        if not index.isValid():
            return f"no batch or trial {open_id} in {window.store.path}"
        if (kind := index.data(KindRole)) != "trial":
            return f"{open_id} is a {kind}: the replay view replays one trial"
        trial_id = index.data(TrialIdRole)
        window.browser.select_id(trial_id)
        return window.open_replay(trial_id, parse_at(at) if at is not None else At(fraction=1.0))
    if view == "compare" and open_id:
        trials: list[str] = []
        for item_id in open_id.split(","):  # ids or unique prefixes, as for one
            index = window.browser.model.locate(item_id)
            if not index.isValid():
                return f"no batch or trial {item_id} in {window.store.path}"
            if (kind := index.data(KindRole)) != "trial":
                return f"{item_id} is a {kind}: the compare view compares two trials"
            trials.append(index.data(TrialIdRole))
        window.browser.select_id(trials[0])
        window.browser.add_to_selection(trials[1])
        return window.open_compare(*trials)
    error = None
    if open_id and not window.browser.select_id(open_id):
        error = f"no batch or trial {open_id} in {window.store.path}"
    if view == "groups":  # the batch Overview, scrolled to its failure groups once they are read
        window.show_view("overview")
        window.overview_page.show_groups()
    elif view and view != "browser":
        window.show_view(view)
    return error


def run(args: argparse.Namespace) -> int:
    if error := _arguments_error(args.open_id, args.view, args.at):
        print(f"proctor: {error}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Proctor")
    set_desktop_identity(app)  # the taskbar's and Alt-Tab's icon, tied to proctor.desktop
    chosen = StudioSettings.load(QSettings("Proctor", "studio"))  # the Settings dialog's
    # A screenshot is the same picture on every machine: light unless --theme says otherwise.
    theme.apply(args.theme or ("light" if args.screenshot else chosen.theme), app)
    path, chosen_by = store_location(args.store, chosen)  # --store, $PROCTOR_STORE, Settings, default
    try:
        store = Store(path)
    except StoreError as e:
        if args.screenshot:
            print(f"proctor: {e}", file=sys.stderr)
            return 2
        hint = (" It is the store location in Settings: start once with --store FILE, then change it"
                " in File → Settings…" if chosen_by == "Settings" else "")
        window: QMainWindow = ErrorWindow(f"{e}{hint}")
        window.show()
        return app.exec()
    settings = QSettings("Proctor", "studio")
    if args.screenshot:  # the same picture every time: no remembered geometry or splitter
        scratch = tempfile.mkdtemp(prefix="proctor-shot-")
        settings = QSettings(os.path.join(scratch, "studio.ini"), QSettings.Format.IniFormat)
    window = MainWindow(store, settings, watch_docker=not args.screenshot)
    if not args.screenshot:
        store.start_indexing()  # a store from before search, or a save cut short: in spare time
    size = args.size or (SCREENSHOT_SIZE if args.screenshot else None)
    if size is not None:
        window.resize(*size)
    window.show()
    error = open_from_args(window, args.open_id, args.view, args.at)
    if args.search:
        window.browser.search_for(args.search)
    # What is shown may need more room than was asked: say so rather than draw another size.
    size_error = _size_error(window, size) if size is not None and error is None else None
    if error is not None or size_error is not None:
        print(f"proctor: {error or size_error}", file=sys.stderr)
        if args.screenshot or size_error is not None:
            window.close()
            store.close()
            return 2
    if args.screenshot:
        return _screenshot(app, window, args.screenshot, size or SCREENSHOT_SIZE)
    code = app.exec()
    store.close()
    return code


def _size_error(window: QMainWindow, size: tuple[int, int]) -> str | None:
    """Why the window is not the size `--size` asked for, in one sentence; None when it is."""
    width, height = size
    if (window.width(), window.height()) == size:
        return None
    least = window.minimumSizeHint().expandedTo(window.minimumSize())
    if least.width() > width or least.height() > height:
        return (f"the window cannot be {width}x{height}: what it shows needs at least "
                f"{least.width()}x{least.height()} (pass a larger --size)")
    return f"the window cannot be {width}x{height}: it came out {window.width()}x{window.height()}"


def _screenshot(app: QApplication, window: MainWindow, path: Path, size: tuple[int, int]) -> int:
    # Timers draw (timeline, live rows) for 0.6 s; reads off the GUI thread (a --search's hits,
    # the failure groups) are waited for, then their layout settles: a busy machine grabbed
    # the groups mid-layout, their note editor squeezed over the next heading.
    deadline = time.monotonic() + 0.6
    quiet = 0
    while quiet < 10 and time.monotonic() < deadline + STORE_WAIT_S:
        app.processEvents()
        time.sleep(0.02)
        quiet = quiet + 1 if time.monotonic() >= deadline and not OffGuiThread.pending() else 0
    error = _size_error(window, size)  # a view filled meanwhile may have widened it
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = error is None and window.grab().save(str(path))
    window.close()
    window.store.close()
    if error is not None:
        print(f"proctor: {error}", file=sys.stderr)
        return 2
    if not ok:
        print(f"proctor: could not write {path}", file=sys.stderr)
        return 2
    print(path)
    return 0
