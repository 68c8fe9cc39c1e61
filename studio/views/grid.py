"""The run grid: a batch's cases × variants, each cell a run's pass rate, deterministic mark,
command counts and median time; a clicked cell lists its trials beneath.

From a cell's list a user opens a trial (double-click: `trial_activated`) or asks
"why did this one fail when that one passed?" (`compare_requested(pass_id, fail_id)`),
offered only when the cell holds both a pass and a fail. One query per batch
(browse.run_grid, the trial table's short columns only).
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelection, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QLabel, QPushButton, QSplitter, QStackedWidget, QStyle,
    QStyledItemDelegate, QStyleOptionViewItem, QTableView, QVBoxLayout, QWidget,
)

from engine.models import TrialSummary
from engine.store import Store, StoreError
from engine.store.browse import GridCell, locate, run_grid
from engine.text import fmt_ms, plural
from studio.models.grid import GridModel
from studio.theme import OUTCOME_COLOUR, amber_text
from studio.widgets import MUTED, empty_state, make_table, outcome_words, table_item

EMPTY_TEXT = "Select a run or a batch in the browser to see its case × variant grid."
PICK_TEXT = "Click a cell to list its trials."
TRIAL_COLUMNS = ["Trial", "#", "Outcome", "Time"]


class _FramedCell(QStyledItemDelegate):
    """The picked cell keeps its pass-rate tint under a frame: a selection fill would hide it."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        plain = QStyleOptionViewItem(option)
        plain.state &= ~QStyle.StateFlag.State_Selected
        if selected:  # the view has already filled the cell's panel with the highlight
            painter.fillRect(option.rect, option.palette.base())
        super().paint(painter, plain, index)
        if selected:
            painter.save()
            painter.setPen(QPen(option.palette.highlight().color(), 3))
            painter.drawRect(option.rect.adjusted(1, 1, -2, -2))
            painter.restore()


class RunGrid(QWidget):
    compare_requested = Signal(str, str)  # a passing trial, then a failing one (A, B)
    trial_activated = Signal(str)  # double-click on a trial in a cell's list

    def __init__(self, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.batch_id: str | None = None
        self.cell: GridCell | None = None  # the clicked cell, whose trials are listed
        self.model = GridModel(self)

        self.title = QLabel()
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.empty = empty_state(EMPTY_TEXT)

        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectItems)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setWordWrap(False)
        self.view.setItemDelegate(_FramedCell(self.view))
        # Two lines a cell: "67% ◇" over "cmd 2/3/9 · 41s".
        self.view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() * 2 + 14)
        self.view.selectionModel().selectionChanged.connect(self._on_selection)

        self.cell_title = QLabel(PICK_TEXT)
        self.cell_title.setStyleSheet(MUTED)
        self.trials = make_table(TRIAL_COLUMNS)
        self.trials.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # a long run
        self.trials.cellDoubleClicked.connect(self._on_trial_double_clicked)
        self.compare_button = QPushButton("Compare a pass with a fail", clicked=self._compare)
        self.compare_button.setEnabled(False)
        self.compare_button.setToolTip("Needs a cell with both a passing and a failing trial.")

        below = QWidget()
        below_layout = QVBoxLayout(below)
        below_layout.setContentsMargins(0, 4, 0, 0)
        row = QHBoxLayout()
        row.addWidget(self.cell_title, 1)
        row.addWidget(self.compare_button)
        below_layout.addLayout(row)
        below_layout.addWidget(self.trials, 1)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.view)
        split.addWidget(below)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(split)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.stack, 1)
        self._show_empty(EMPTY_TEXT)

    # -- what to show ------------------------------------------------------------------

    def show_batch(self, batch_id: str) -> None:
        """The batch's grid; the same batch again refreshes it and keeps the clicked cell."""
        try:
            located = locate(self.store, batch_id)  # an id or a unique prefix of one
            if located is None or located.kind != "batch":
                self._show_empty(f"No batch {batch_id} in this store: pick one in the browser.")
                return
            batch_id = located.batch_id
            cells = run_grid(self.store, batch_id)
        except StoreError as e:
            self._show_empty(str(e))
            return
        kept = None
        if self.cell is not None and batch_id == self.batch_id:
            kept = (self.cell.case_id, self.cell.variant)
        if not cells:
            self._show_empty(f"Batch {batch_id} has no runs yet: they appear once its plan is "
                             "written.", title=batch_id)
            self.batch_id = batch_id
            return
        self.batch_id = batch_id
        self.model.set_cells(cells)
        self.view.resizeColumnsToContents()
        self.stack.setCurrentIndex(1)
        trials = sum(c.distribution.trials for c in cells)
        self.title.setText(f"<b>{batch_id}</b> · {plural(len(self.model.cases), 'case')} × "
                           f"{plural(len(self.model.variants), 'variant')} · "
                           f"{plural(trials, 'trial')}")
        self._list(None)
        if kept is not None and kept[0] in self.model.cases and kept[1] in self.model.variants:
            self._select(self.model.index(self.model.cases.index(kept[0]),
                                          self.model.variants.index(kept[1])))

    def show_run(self, run_id: str) -> None:
        """The grid of the run's batch, with the run's cell selected and its trials listed."""
        try:
            located = locate(self.store, run_id)
        except StoreError as e:
            self._show_empty(str(e))
            return
        if located is None or located.kind != "run" or located.run_id is None:
            self._show_empty(f"No run {run_id} in this store: pick one in the browser.")
            return
        self.show_batch(located.batch_id)
        index = self.model.index_of_run(located.run_id)
        if index.isValid():
            self._select(index)

    def _show_empty(self, sentence: str, title: str = "") -> None:
        self.batch_id = None
        self.model.set_cells([])
        self._list(None)
        self.empty.setText(sentence)
        self.title.setText(title)
        self.stack.setCurrentIndex(0)

    def _select(self, index: QModelIndex) -> None:
        self.view.setCurrentIndex(index)  # selects it too, and lists its trials
        self.view.scrollTo(index)

    # -- a cell's trials ---------------------------------------------------------------

    def _on_selection(self, selected: QItemSelection, _deselected: QItemSelection) -> None:
        indexes = self.view.selectionModel().selectedIndexes()
        self._list(self.model.cell(indexes[0]) if indexes else None)

    def _list(self, cell: GridCell | None) -> None:
        self.cell = cell
        self.trials.setRowCount(0)
        if cell is None:
            self.cell_title.setText(PICK_TEXT)
            self.compare_button.setEnabled(False)
            return
        self.cell_title.setText(f"{cell.case_id} · {cell.variant} · "
                                f"{plural(len(cell.trials), 'trial')}")
        self.trials.setRowCount(len(cell.trials))
        for row, trial in enumerate(cell.trials):
            colour = (amber_text() if trial.outcome == "infra_error"
                      else OUTCOME_COLOUR[trial.outcome])
            tip = trial.failure.reason if trial.failure else None
            items = [table_item(trial.id, mono=True),
                     table_item(str(trial.trial), align_right=True),
                     table_item(outcome_words(trial.outcome, trial.failure), colour=colour,
                                tip=tip),
                     table_item(fmt_ms(trial.duration_ms), align_right=True)]
            for column, item in enumerate(items):
                item.setData(Qt.ItemDataRole.UserRole, trial.id)
                self.trials.setItem(row, column, item)
        self.trials.resizeColumnsToContents()
        self.compare_button.setEnabled(self.pair() is not None)

    def pair(self) -> tuple[str, str] | None:
        """A pass and a fail of the listed cell: the selected trial on its side, else the first."""
        if self.cell is None:
            return None
        chosen = self._selected_trial()
        passed = chosen if chosen and chosen.outcome == "pass" else self.cell.first("pass")
        failed = chosen if chosen and chosen.outcome == "fail" else self.cell.first("fail")
        return (passed.id, failed.id) if passed and failed else None

    def _selected_trial(self) -> TrialSummary | None:
        rows = self.trials.selectionModel().selectedRows()
        if self.cell is None or not rows:
            return None
        return self.cell.trials[rows[0].row()]

    def _compare(self) -> None:
        if (pair := self.pair()) is not None:
            self.compare_requested.emit(*pair)

    def _on_trial_double_clicked(self, row: int, _column: int) -> None:
        if self.cell is not None and 0 <= row < len(self.cell.trials):
            self.trial_activated.emit(self.cell.trials[row].id)
