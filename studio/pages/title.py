"""The line on top of a page: what it shows, and the way back (the button, or Esc)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from studio.widgets import ElidedLabel


class PageTitle(QWidget):
    back = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = ElidedLabel(code=False)
        font = self.label.font()
        font.setPointSizeF(font.pointSizeF() * 1.2)
        font.setBold(True)
        self.label.setFont(font)
        button = QPushButton("Back (Esc)", clicked=self.back.emit,
                             toolTip="Back to the selected trial's tabs")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(button)

    def set_text(self, text: str) -> None:
        self.label.set_full_text(text)

    def text(self) -> str:
        return self.label.full_text()
