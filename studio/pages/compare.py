"""Two trials compared, in the right side's place: a line naming both and the way back, over
the compare panel."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from engine.models import TrialRecord
from studio.pages.title import PageTitle
from studio.views.compare import CompareView, who

MARGINS_PX = 24  # the page's margins and a scroll bar, beside the panel's own width


class ComparePage(QWidget):
    back = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = PageTitle()
        self.title.back.connect(self.back)
        self.view = CompareView()
        # The panel's labels hold it ~800 px wide: beside the browser in a 1,024-px window it
        # scrolls sideways rather than widen the window.
        scroll = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.view)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(scroll, 1)

    def show_pair(self, a: TrialRecord, b: TrialRecord) -> None:
        self.title.set_text(f"Comparing A: {who(a)} and B: {who(b)}")
        self.view.show_pair(a, b)
        self.view.table.setFocus()  # n and p step through the divergences from here

    def needed_width(self) -> int:
        """The width at which both sides show without scrolling sideways."""
        return self.view.minimumSizeHint().width() + MARGINS_PX
