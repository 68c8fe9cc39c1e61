"""The Overview tab: a trial's overview or, when a batch or a run is selected, the batch's
overview (figures, plots, links to trials) above its run grid (cases × variants) with
"compare a pass with a fail"."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QSplitter, QStackedWidget, QVBoxLayout, QWidget

from engine.models import TrialRecord
from engine.store import Store
from studio.views.batch_overview import BatchOverview
from studio.views.grid import RunGrid
from studio.views.groups import FailureGroupsModel, FailureGroupsView
from studio.views.note import NoteEditor
from studio.views.overview import OverviewView

GROUPS_SHARE = 3 / 5  # `--view groups`: the figures' share of the height, for a group's note
GROUPS_HEADING_PX = 28  # the heading above the groups, kept in view
LAYOUT_MS = 50  # after a read's widgets are laid out


class OverviewPage(QWidget):
    """A trial's OverviewView, or a batch's BatchOverview over its RunGrid, in one splitter."""

    trial_activated = Signal(str)  # a trial the batch overview links to was clicked
    group_opened = Signal(object)  # a failure group (engine.groups.FailureGroup) to browse
    compare_requested = Signal(str, str)  # a pass and a failed trial, from a failure group
    note_saved = Signal(object)  # a trial's note (engine.models.Note), or None when taken away

    def __init__(self, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.overview = OverviewView(note_editor=self._note_editor)
        self._batch: BatchOverview | None = None  # made when a batch is first shown
        self.groups: FailureGroupsView  # made with the batch's figures, inside them
        self._grouped: tuple[str, tuple[int, int] | None] | None = None  # what was grouped
        self.grid = RunGrid(store)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.overview)
        self.stack.addWidget(self.grid)
        # The batch's figures above its grid; at 1,024 x 700 each gets about half, and scrolls.
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setChildrenCollapsible(False)
        self.split.addWidget(self.stack)
        self._sized = False  # the first show splits the height; then the user's drag holds
        self._top_share = 9 / 20  # of the height, the figures' when first shown
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.split)
        self._show(self.overview)

    def _note_editor(self, trial_id: str) -> NoteEditor:
        editor = NoteEditor(self.store, trial_id)
        editor.saved.connect(self.note_saved)
        return editor

    @property
    def batch(self) -> BatchOverview:
        """The batch's figures, made when first wanted: their plots and tables were a tenth of
        the window's start (25 ms of 276 on a 100,000-trial store), for a trial they never show."""
        if self._batch is None:
            self._batch = BatchOverview(self.store)
            self._batch.trial_activated.connect(self.trial_activated)
            self._batch.run_activated.connect(self.grid.show_run)
            self._batch.costs_read.connect(self._show_costs)
            self.groups = FailureGroupsView(FailureGroupsModel(self.store, self), self._note_editor)
            self.groups.group_opened.connect(self.group_opened)
            self.groups.compare_requested.connect(self.compare_requested)
            self.groups.trial_activated.connect(self.trial_activated)
            # Right under the tiles: what a failing batch's reader looks for first.
            self._batch.insert_part("Failure groups · largest first", self.groups,
                                    before=self._batch.runs_heading)
            self.split.insertWidget(0, self._batch)
            self.split.setStretchFactor(0, 9)
            self.split.setStretchFactor(1, 11)
            self._sized = False
            self._size()
        return self._batch

    def show_groups(self) -> None:
        """The batch's figures scrolled to the failure groups' heading, once the groups are read
        and laid out, with room below it for a picked group's actions and note (`--view groups`)."""
        self._top_share, self._sized = GROUPS_SHARE, False
        self._size()

        def scroll() -> None:
            area = self.batch.scroll
            heading = self.groups.mapTo(area.widget(), QPoint(0, 0)).y() - GROUPS_HEADING_PX
            area.verticalScrollBar().setValue(heading)

        def read() -> None:
            if not self.groups.model.reading:
                self.groups.model.changed.disconnect(read)
                QTimer.singleShot(LAYOUT_MS, scroll)  # after the table's new height is laid out

        if self.groups.model.reading:
            self.groups.model.changed.connect(read)
        else:
            QTimer.singleShot(LAYOUT_MS, scroll)

    def _show_costs(self, costs: dict[str, float | None]) -> None:
        """The costs the batch's figures read, per grid cell; its columns widen to show them."""
        self.grid.model.set_costs(costs)
        self.grid.view.resizeColumnsToContents()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._size()

    def _size(self) -> None:
        if not self._sized and self._batch is not None and self.height() > 0:
            self._sized = True
            # The figures' scroll area would take all it asks for: give the grid its share.
            top = round(self.height() * self._top_share)
            self.split.setSizes([top, self.height() - top])

    def currentWidget(self) -> QWidget:  # noqa: N802 — as QStackedWidget names it
        """What the page shows: the trial's overview, or the batch's grid (under its figures)."""
        return self.stack.currentWidget()

    def _show(self, widget: QWidget) -> None:
        self.stack.setCurrentWidget(widget)
        if widget is self.grid:
            self.batch.setVisible(True)
        elif self._batch is not None:
            self._batch.setVisible(False)
            self._batch.clear()  # nothing of a batch seen before stays behind a trial
            self.groups.model.clear()

    def show_record(self, record: TrialRecord | None) -> None:
        self.overview.show_record(record)
        self._show(self.overview)

    def show_batch(self, batch_id: str) -> None:
        self.overview.show_record(None)  # nothing of a trial seen before stays behind the grid
        self.grid.show_batch(batch_id)
        self.batch.show_batch(batch_id)
        self._group(batch_id)
        self._show(self.grid)

    def show_run(self, run_id: str) -> None:
        self.overview.show_record(None)
        self.grid.show_run(run_id)
        if self.grid.batch_id is not None:
            self.batch.show_batch(self.grid.batch_id)
            self._group(self.grid.batch_id)
        else:
            self.batch.clear()
            self.groups.model.clear()
        self._show(self.grid)

    def refresh(self) -> None:
        """The batch's figures and grid again from the store (a batch that runs), keeping the
        picked cell."""
        if self.currentWidget() is self.grid and self.grid.batch_id is not None:
            self.grid.show_batch(self.grid.batch_id)
            self.batch.show_batch(self.grid.batch_id)
            self._group(self.grid.batch_id)

    def _group(self, batch_id: str) -> None:
        """The batch's failure groups, read again only when its failures may have changed."""
        figures = self.batch.figures
        counts = (figures.counts.failed, figures.counts.voided) if figures else None
        if (batch_id, counts) != self._grouped or self.groups.model.batch_id != batch_id:
            self._grouped = (batch_id, counts)
            self.groups.model.show_batch(batch_id)
