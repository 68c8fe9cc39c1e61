"""The trial browser panel: a filter bar over a tree of batches → runs → trials.

The tree's model (studio/models/browser.py) pages from SQLite; this widget only
turns the filter bar (its filters wrap onto more rows in a narrow panel) into a
BrowseFilter, opens the batches and runs that hold a search's matches, deletes a
finished batch the user confirms, keeps expansion across resets, polls
the store about once a second for work another process (a CLI run) did (the
reads on a worker thread, the rows applied on the GUI thread), and repaints live
rows so their phase and elapsed time move.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

from PySide6.QtCore import (
    QEvent, QItemSelection, QItemSelectionModel, QModelIndex, QObject, QPoint, QRect, QSize, Qt,
    QTimer, Signal,
)
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QHeaderView, QLabel, QLayout, QLayoutItem, QLineEdit, QMenu,
    QMessageBox, QTreeView, QVBoxLayout, QWidget,
)

from engine.store import Store, StoreError
from engine.store.browse import RUNNING, BatchItem, BrowseFilter, filter_options
from engine.text import plural

from .. import theme
from ..models.browser import (
    COLUMN, BatchIdRole, BrowserModel, ItemRole, KindRole, RunIdRole, TrialIdRole,
)
from ..models.live import LiveTrials
from ..models.search_hits import SearchHits

SEARCH_DEBOUNCE_MS = 150
POLL_MS = 1000  # how often to ask the store whether another process changed it
TICK_MS = 500  # how often live rows repaint their elapsed time
MATCH_ROWS = 20  # rows a search or filter opens at least, to show its matching trials
EMPTY_TEXT = ("No batches yet — run the demo suite: proctor run examples/demo -v, "
              "or press Run…")
NO_MATCH_TEXT = "No trial matches these filters — widen them or clear the search."
# The tree matches ids, cases and reasons; the hits above it match inside the records.
HITS_ONLY_TEXT = ("No trial's id, case or failure reason holds these words. The hits above "
                  "are inside trials' records: Enter or a double-click opens one.")
COLUMN_WIDTHS = {"name": 220, "outcome": 120, "pass_rate": 64, "deterministic": 110,
                 "commands": 80, "duration": 70, "tokens": 60, "trigger": 60, "started": 130}
OUTCOMES = [("All outcomes", None), (f"{theme.OUTCOME_GLYPH['pass']} pass", "pass"),
            (f"{theme.OUTCOME_GLYPH['fail']} fail", "fail"),
            (f"{theme.OUTCOME_GLYPH['infra_error']} void (infra_error)", "infra_error"),
            (f"{theme.OUTCOME_GLYPH['skipped']} skipped", "skipped"),
            (f"{theme.OUTCOME_GLYPH['running']} running", RUNNING)]


def _combo(tip: str) -> QComboBox:
    combo = QComboBox(toolTip=tip)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(8)  # "All cases" whole; a narrow panel wraps them onto rows
    return combo


class FilterRows(QLayout):
    """Widgets in one row where they fit, else in as few balanced rows as fit; each row's
    widgets share its width. The browser's filters wrap so the panel can be narrow."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 4) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self.setSpacing(spacing)
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation.Horizontal

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:
        hints = [item.sizeHint() for item in self._items]
        width = sum(h.width() for h in hints) + self.spacing() * max(0, len(hints) - 1)
        return QSize(width, max((h.height() for h in hints), default=0))

    def minimumSize(self) -> QSize:
        widest = max((item.sizeHint().width() for item in self._items), default=0)
        return QSize(widest, self.heightForWidth(widest))

    def _rows(self, width: int) -> list[list[QLayoutItem]]:
        """The fewest rows that fit `width`, with as many widgets in each as can be."""
        fit, used = 0, -self.spacing()
        for item in self._items:  # how many fit in the first row
            used += self.spacing() + item.sizeHint().width()
            if used > width and fit:
                break
            fit += 1
        rows = math.ceil(len(self._items) / max(1, fit))
        per_row = math.ceil(len(self._items) / max(1, rows))
        return [self._items[i:i + per_row] for i in range(0, len(self._items), per_row)]

    def _place(self, rect: QRect, move: bool) -> int:
        y, gap = rect.y(), self.spacing()
        for row in self._rows(rect.width()):
            height = max(item.sizeHint().height() for item in row)
            used = sum(item.sizeHint().width() for item in row) + gap * (len(row) - 1)
            spare, x = max(0, rect.width() - used), rect.x()
            for n, item in enumerate(row):
                width = item.sizeHint().width() + spare // len(row) + (n < spare % len(row))
                if move:
                    item.setGeometry(QRect(x, y, width, height))
                x += width + gap
            y += height + gap
        return max(0, y - gap - rect.y())


def _running(batch: BatchItem) -> bool:
    return batch.status == "running" or batch.counts.running > 0


class BrowserPanel(QWidget):
    trial_selected = Signal(str)
    batch_selected = Signal(str)
    run_selected = Signal(str)
    compare_run = Signal(str)  # a run's context menu: "compare a pass with a fail"
    trial_activated = Signal(str)  # Enter or double-click on a trial
    selection_changed = Signal()  # which rows are selected (Ctrl-click adds a second trial)
    batch_deleted = Signal(str)  # a batch's context menu: "Delete batch…", answered yes

    def __init__(self, store: Store, parent: QWidget | None = None, poll_ms: int = POLL_MS,
                 tick_ms: int = TICK_MS, live: LiveTrials | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.model = BrowserModel(store, parent=self, live=live)
        self.model.follow_view = True  # pages follow this tree's scrolling

        self.outcome = _combo("Outcome")
        for label, value in OUTCOMES:
            self.outcome.addItem(label, value)
        self.failure_kind = _combo("Failure kind")
        self.case = _combo("Case")
        self.variant = _combo("Variant")
        self.tag = _combo("Tag")
        self.label = _combo("Label: trials whose note carries it")
        self._choices = {self.failure_kind: "Any failure", self.case: "All cases",
                         self.variant: "All variants", self.tag: "All tags",
                         self.label: "All labels"}
        self.combos = (self.outcome, self.failure_kind, self.case, self.variant, self.tag, self.label)
        self.reload_options()
        self.search = QLineEdit(placeholderText="Search ids, reasons and trajectories (in:command pip)",
                                clearButtonEnabled=True)
        # Typing re-queries once the user pauses, not on every key.
        self._debounce = QTimer(self, singleShot=True, interval=SEARCH_DEBOUNCE_MS,
                                timeout=self.apply_filter)
        self.search.textChanged.connect(lambda _text: self._debounce.start())
        # The same box searches the full-text index; the window shows its hits under the box.
        self.search_hits = SearchHits(store, self)
        for combo in self.combos:
            combo.currentIndexChanged.connect(lambda _row: self.apply_filter())

        self.tree = QTreeView(uniformRowHeights=True, alternatingRowColors=True)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # A click selects one row as before; Ctrl-click adds a second trial to compare with.
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setModel(self.model)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for key, width in COLUMN_WIDTHS.items():  # fixed: ResizeToContents would read every row
            self.tree.setColumnWidth(COLUMN[key], width)
        # Newest first, which is also the model's own starting order: no second load.
        header.setSortIndicator(COLUMN["started"], Qt.SortOrder.DescendingOrder)
        self.tree.setSortingEnabled(True)
        # After the tree's own slot has re-sorted the model (it connected first).
        header.sortIndicatorChanged.connect(lambda _column, _order: self._restore_expanded())
        self.tree.selectionModel().currentChanged.connect(self._on_current)
        self.tree.activated.connect(self._on_activated)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self._chosen: list[str] = []  # selected trials' ids, in the order they were selected
        self.tree.selectionModel().selectionChanged.connect(self._on_selection)
        # A reset (filter, sort) drops the selection without a selectionChanged.
        self.model.modelReset.connect(self.selection_changed.emit)
        # Re-opened by whoever reset the model (filter, sort), not from inside modelReset:
        # rows loaded while other views still handle the reset would reach them mid-reset.
        self.model.modelAboutToBeReset.connect(self._remember_expanded)
        self.model.loaded.connect(self._update_empty)
        self.search_hits.changed.connect(self._update_empty)
        self.model.refreshed.connect(self._on_refreshed)
        self._expanded: list[tuple[str, str]] = []  # (kind, id), parents before children
        self._unfiltered: list[tuple[str, str]] = []  # what the user had open before a filter

        self.empty = QLabel(EMPTY_TEXT, self.tree.viewport(), wordWrap=True,
                            alignment=Qt.AlignmentFlag.AlignCenter)
        self.empty.setStyleSheet("color: palette(placeholder-text); padding: 24px;")
        self.tree.viewport().installEventFilter(self)

        # A set of trials shown by id (a failure group's, `show_trials`), and the way back.
        self._trial_ids: frozenset[str] = frozenset()
        self.trial_set = QLabel(visible=False, wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.trial_set.linkActivated.connect(lambda _link: self.show_trials(()))
        # The six filters in one row where the panel is wide, on more rows where it is narrow.
        self.filters = QWidget()
        rows = FilterRows(self.filters)
        for combo in self.combos:
            rows.addWidget(combo)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.search)
        layout.addWidget(self.filters)
        layout.addWidget(self.trial_set)
        layout.addWidget(self.tree, 1)

        self._tick = QTimer(self, interval=tick_ms, timeout=self.model.tick)
        self._poll = QTimer(self, interval=poll_ms, timeout=self.poll)
        if tick_ms:
            self._tick.start()
        if poll_ms:
            self._poll.start()
        self._restore_expanded()
        self._update_empty()

    # -- filter ---------------------------------------------------------------------

    def reload_options(self) -> None:
        """The combo boxes' choices from the store, keeping what is chosen."""
        options = filter_options(self.store)
        for combo, values in ((self.failure_kind, options.failure_kinds),
                              (self.case, options.cases), (self.variant, options.variants),
                              (self.tag, options.tags), (self.label, options.labels)):
            chosen = combo.currentData()
            combo.blockSignals(True)
            combo.clear()
            combo.addItem(self._choices[combo], None)
            for value in values:
                combo.addItem(value, value)
            combo.setCurrentIndex(max(0, combo.findData(chosen)) if chosen else 0)
            combo.blockSignals(False)

    def note_saved(self, _note: object = None) -> None:
        """A note was saved elsewhere: its label joins the choices, and its trial's row shows it."""
        self.reload_options()
        self.model.refresh_async()

    def current_filter(self) -> BrowseFilter:
        def chosen(combo: QComboBox) -> frozenset[str]:
            value = combo.currentData()
            return frozenset({value}) if value else frozenset()

        return BrowseFilter(outcomes=chosen(self.outcome), failure_kinds=chosen(self.failure_kind),
                            cases=chosen(self.case), variants=chosen(self.variant),
                            tags=chosen(self.tag), labels=chosen(self.label),
                            text=self.search.text().strip(), trial_ids=self._trial_ids)

    def apply_filter(self) -> None:
        self._debounce.stop()
        self.search_hits.search(self.search.text())
        flt = self.current_filter()
        if flt == self.model.filter:
            return
        was_active = self.model.filter.active
        self.model.set_filter(flt)  # remembers what was open (_remember_expanded)
        if flt.active and not was_active:
            self._unfiltered = self._expanded
        elif was_active and not flt.active:
            self._expanded = self._unfiltered  # the matches' rows close again
        self._restore_expanded()
        if flt.active:
            self._expand_matches()

    def _expand_matches(self) -> None:
        """Open the batches and runs holding matches, so the matching trials show without two
        clicks each: from the top, until the rows fill the tree's height (at least MATCH_ROWS).
        Each row opened is a query on the GUI thread: opening 100 rows made the worst filter
        134 ms on a 100,000-trial store, against 83 ms without."""
        row_px = max(self.tree.sizeHintForRow(0), self.fontMetrics().height(), 1)
        limit = max(MATCH_ROWS, self.tree.viewport().height() // row_px)
        shown = 0
        for row in range(self.model.rowCount()):
            batch = self.model.index(row, 0)
            self.expand(batch)
            shown += 1 + self.model.rowCount(batch)
            for run_row in range(self.model.rowCount(batch)):
                if shown >= limit:
                    return
                run = self.model.index(run_row, 0, batch)
                self.expand(run)
                shown += self.model.rowCount(run)
            if shown >= limit:
                return

    def clear_filter(self) -> None:
        for combo in self.combos:
            combo.blockSignals(True)
            combo.setCurrentIndex(0)
            combo.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self._trial_ids = frozenset()
        self.trial_set.hide()
        self.apply_filter()

    def show_trials(self, trial_ids: Iterable[str], what: str = "") -> None:
        """Exactly these trials (with the other filters), until "show all"; none: all again."""
        self._trial_ids = frozenset(trial_ids)
        shown = f"{plural(len(self._trial_ids), 'trial')}" + (f" of {what}" if what else "")
        self.trial_set.setText(f"Showing {html.escape(shown)} · <a href='all'>show all</a>")
        self.trial_set.setVisible(bool(self._trial_ids))
        self.apply_filter()

    def show_under_search(self, widget: QWidget) -> None:
        """Place a panel between the search box and the filters (the search's hits)."""
        self.layout().insertWidget(1, widget)

    def search_for(self, text: str) -> None:
        """Put `text` in the search box and apply it now: the tree filters, the hits are read."""
        self.search.setText(text)
        self.apply_filter()

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    # -- selection ------------------------------------------------------------------

    def select_id(self, id_or_prefix: str) -> bool:
        """Expand the path to a batch, run or trial and select it; False when there is none."""
        index = self.model.locate(id_or_prefix)
        if not index.isValid() and self.model.filter.active:
            self.clear_filter()  # the filter hides it: show everything rather than nothing
            index = self.model.locate(id_or_prefix)
        if not index.isValid():
            return False
        parent = index.parent()
        while parent.isValid():
            self.expand(parent)
            parent = parent.parent()
        if index == self.tree.currentIndex():
            self._on_current(index, index)  # asked for again: say so again
        self.tree.setCurrentIndex(index)
        self.tree.scrollTo(index)
        return True

    def current_trial(self) -> str | None:
        return self.tree.currentIndex().data(TrialIdRole)

    def add_to_selection(self, trial_id: str) -> bool:
        """Select a trial besides what is selected (as Ctrl-click does); the current row stays."""
        index = self.model.locate(trial_id)
        if not index.isValid() or index.data(KindRole) != "trial":
            return False
        parent = index.parent()
        while parent.isValid():
            self.expand(parent)
            parent = parent.parent()
        flag = QItemSelectionModel.SelectionFlag
        self.tree.selectionModel().select(index, flag.Select | flag.Rows)
        return True

    def selected_trials(self) -> list[str]:
        """The selected trials in the order they were selected; [] if a batch or run is too."""
        rows = self.tree.selectionModel().selectedRows()
        if any(row.data(KindRole) != "trial" for row in rows):
            return []
        selected = {row.data(TrialIdRole) for row in rows}
        ordered = [t for t in self._chosen if t in selected]
        return ordered + sorted(selected.difference(ordered))

    def selected_ids(self) -> list[str]:
        """The selected rows' ids (trials, runs and batches), what an export writes."""
        role = {"trial": TrialIdRole, "run": RunIdRole, "batch": BatchIdRole}
        rows = self.tree.selectionModel().selectedRows()
        ids = [row.data(role[row.data(KindRole)]) for row in rows if row.data(KindRole) in role]
        return list(dict.fromkeys(ids))

    def _on_selection(self, selected: QItemSelection, deselected: QItemSelection) -> None:
        gone = {i.data(TrialIdRole) for i in deselected.indexes() if i.column() == 0}
        added = [i.data(TrialIdRole) for i in selected.indexes() if i.column() == 0]
        self._chosen = [t for t in self._chosen if t not in gone]
        self._chosen += [t for t in added if t is not None and t not in self._chosen]
        self.selection_changed.emit()

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        kind = current.data(KindRole)
        if kind == "trial":
            self.trial_selected.emit(current.data(TrialIdRole))
        elif kind == "batch":
            self.batch_selected.emit(current.data(BatchIdRole))
        elif kind == "run":
            self.run_selected.emit(current.data(RunIdRole))

    def context_menu(self, index: QModelIndex) -> QMenu | None:
        """What a right-click on a row offers: for a run, a pass and a fail of it compared;
        for a batch, deleting it."""
        if index.data(KindRole) == "batch":
            return self._batch_menu(index.data(ItemRole))
        if index.data(KindRole) != "run":
            return None
        run_id, counts = index.data(RunIdRole), index.data(ItemRole).counts
        menu = QMenu(self.tree)
        action = menu.addAction("Compare a pass with a fail",
                                lambda: self.compare_run.emit(run_id))
        action.setEnabled(counts.passed > 0 and counts.failed > 0)
        if not action.isEnabled():
            action.setText("Compare a pass with a fail (needs both)")
        return menu

    def _batch_menu(self, batch: BatchItem) -> QMenu:
        menu = QMenu(self.tree)
        action = menu.addAction("Delete batch…", lambda: self.delete_batch(batch.id))
        if _running(batch):
            action.setEnabled(False)
            action.setText("Delete batch… (running: stop it first)")
        return menu

    def delete_batch(self, batch_id: str) -> bool:
        """Delete a finished batch and its trials from the store once the user says yes;
        whether it was deleted."""
        batch = self.model.index_of("batch", batch_id).data(ItemRole)
        if batch is None or _running(batch):
            return False
        answer = QMessageBox.question(
            self, "Delete batch",
            f"Delete batch {batch_id} and its {plural(batch.counts.trials, 'trial')} from "
            f"{self.store.path}? Their records and artifacts go too; this cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return False
        try:
            self.store.delete_batches([batch_id])
        except StoreError as e:  # it started running meanwhile, or the store failed
            QMessageBox.warning(self, "Delete batch", str(e))
            return False
        self.model.refresh()
        self.reload_options()  # its cases and tags may be gone with it
        self.batch_deleted.emit(batch_id)
        return True

    def _context_menu(self, pos: QPoint) -> None:
        if (menu := self.context_menu(self.tree.indexAt(pos))) is not None:
            menu.exec(self.tree.viewport().mapToGlobal(pos))

    def _on_activated(self, index: QModelIndex) -> None:
        if index.data(KindRole) == "trial":
            self.trial_activated.emit(index.data(TrialIdRole))

    # -- live -----------------------------------------------------------------------

    def poll(self) -> None:
        """Refresh when the store moved on (our engine or another process wrote to it).

        The change stamp and the re-reads run on a worker thread; the difference is applied
        here when they arrive (one read at a time: a poll during a read does nothing)."""
        self.model.refresh_async(only_if_changed=True)

    def _on_refreshed(self, before: tuple | None, after: tuple) -> None:
        if before is None or after[1] != before[1]:  # a new batch may bring new cases
            self.reload_options()

    # -- expansion across resets (filter, sort) --------------------------------------

    def _remember_expanded(self) -> None:
        self._expanded = []
        for row in range(self.model.rowCount()):
            batch = self.model.index(row, 0)
            if not self.tree.isExpanded(batch):
                continue
            self._expanded.append(("batch", batch.data(BatchIdRole)))
            for run_row in range(self.model.rowCount(batch)):
                run = self.model.index(run_row, 0, batch)
                if self.tree.isExpanded(run):
                    self._expanded.append(("run", run.data(RunIdRole)))

    def _restore_expanded(self) -> None:
        if not self._expanded and self.model.rowCount():
            # Nothing was open: open the first batch, as most visits are about it.
            self.expand(self.model.index(0, 0))
            return
        for kind, item_id in self._expanded:
            self.expand(self.model.index_of(kind, item_id))  # type: ignore[arg-type]

    def expand(self, index: QModelIndex) -> None:
        """Expand a row, loading its children now (a hidden view would load them later)."""
        if index.isValid():
            if self.model.canFetchMore(index):
                self.model.fetchMore(index)
            self.tree.expand(index)

    # -- empty state ----------------------------------------------------------------

    def _update_empty(self) -> None:
        nothing = self.model.rowCount() == 0
        if self.empty.isVisibleTo(self) and not nothing and not self.model.filter.active:
            self.expand(self.model.index(0, 0))  # the first batch arrived: show it open
        if not self.model.filter.active:
            self.empty.setText(EMPTY_TEXT)
        else:
            self.empty.setText(HITS_ONLY_TEXT if self.search_hits.hits else NO_MATCH_TEXT)
        self.empty.setVisible(nothing)
        self.empty.setGeometry(self.tree.viewport().rect())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            self.empty.setGeometry(self.tree.viewport().rect())
        return super().eventFilter(watched, event)
