"""The Overview tab: a trial's overview, or, when a batch or a run is selected, the batch's
run grid (cases × variants) with "compare a pass with a fail"."""

from __future__ import annotations

from PySide6.QtWidgets import QStackedWidget, QWidget

from engine.models import TrialRecord
from engine.store import Store
from studio.views.grid import RunGrid
from studio.views.overview import OverviewView


class OverviewPage(QStackedWidget):
    def __init__(self, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.overview = OverviewView()
        self.grid = RunGrid(store)
        self.addWidget(self.overview)
        self.addWidget(self.grid)

    def show_record(self, record: TrialRecord | None) -> None:
        self.overview.show_record(record)
        self.setCurrentWidget(self.overview)

    def show_batch(self, batch_id: str) -> None:
        self.overview.show_record(None)  # nothing of a trial seen before stays behind the grid
        self.grid.show_batch(batch_id)
        self.setCurrentWidget(self.grid)

    def show_run(self, run_id: str) -> None:
        self.overview.show_record(None)
        self.grid.show_run(run_id)
        self.setCurrentWidget(self.grid)

    def refresh(self) -> None:
        """The grid again from the store (a batch that runs), keeping the picked cell."""
        if self.currentWidget() is self.grid and self.grid.batch_id is not None:
            self.grid.show_batch(self.grid.batch_id)
