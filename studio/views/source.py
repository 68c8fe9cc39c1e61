"""The Source tab: the eval file (and proctor.toml) as the record keeps them, read-only.

The engine snapshots the eval's source into each record (`TrialRecord.source`,
path -> text, eval file first), so what is shown is what ran, not the file on disk
today. Monospace, line numbers, the case's `@evaluation … def` lines highlighted;
a record without a snapshot says "Source unavailable". Text is `visible`: a
bidirectional control in the source (Trojan Source) is a marker, never obeyed.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QTextCursor, QTextFormat
from PySide6.QtWidgets import (QHBoxLayout, QPlainTextEdit, QStackedWidget, QTabBar, QTextEdit,
                               QVBoxLayout, QWidget)

from engine.models import TrialRecord
from studio.theme import AMBER, mono_font
from studio.widgets import MUTED, ElidedLabel, GutteredEdit, empty_state, visible

UNAVAILABLE = "Source unavailable: this record keeps no copy of its eval file."
NO_TRIAL = "Select a trial to see the eval file it ran."


def case_lines(text: str, case_id: str) -> tuple[int, int] | None:
    """The case's first and last line (1-based): from its decorator to its `def`; None when
    the text has no function of that name (the record keeps no line number of its own)."""
    lines = text.split("\n")
    define = re.compile(rf"\s*(?:async\s+)?def\s+{re.escape(case_id)}\s*\(")
    found = next((i for i, line in enumerate(lines) if define.match(line)), None)
    if found is None:
        return None
    first = found
    for i in range(found - 1, -1, -1):  # up through its decorators, to the first blank line
        if not lines[i].strip():
            break
        if lines[i].lstrip().startswith("@"):
            first = i
    return first + 1, found + 1


class SourceEdit(GutteredEdit):
    """Read-only monospace text with a line-number gutter."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(mono_font())
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.fit_gutter()

    def gutter_width(self) -> int:
        digits = max(3, len(str(self.blockCount())))
        return self.fontMetrics().horizontalAdvance("9" * digits) + 14

    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        p = QPainter(gutter)
        p.fillRect(event.rect(), self.palette().alternateBase())
        muted = QColor(self.palette().text().color())
        muted.setAlpha(130)
        p.setPen(muted)
        p.setFont(self.font())
        block = self.firstVisibleBlock()
        offset = self.contentOffset()
        height = self.fontMetrics().height()
        while block.isValid():
            top = round(self.blockBoundingGeometry(block).translated(offset).top())
            if top > event.rect().bottom():
                break
            if block.isVisible():
                p.drawText(0, top, gutter.width() - 6, height, Qt.AlignmentFlag.AlignRight,
                           str(block.blockNumber() + 1))
            block = block.next()
        p.end()

    def highlight(self, first: int, last: int) -> None:
        """Tint lines `first`..`last` (1-based) across the whole width and scroll them into view."""
        colour = QColor(AMBER)
        colour.setAlpha(70)
        selections = []
        for n in range(first, last + 1):
            block = self.document().findBlockByNumber(n - 1)
            if not block.isValid():
                break
            selection = QTextEdit.ExtraSelection()
            selection.format.setBackground(colour)  # type: ignore[attr-defined]
            selection.format.setProperty(QTextFormat.Property.FullWidthSelection, True)  # type: ignore[attr-defined]
            selection.cursor = QTextCursor(block)  # type: ignore[misc]
            selections.append(selection)
        self.setExtraSelections(selections)
        block = self.document().findBlockByNumber(max(0, first - 4))  # a few lines of context above
        self.verticalScrollBar().setValue(block.firstLineNumber() if block.isValid() else 0)

    def highlighted_lines(self) -> list[int]:
        """The tinted lines (1-based), as a user sees them."""
        return [s.cursor.blockNumber() + 1 for s in self.extraSelections()]


class SourceView(QWidget):
    """`show_record(record)`: its source snapshot, one tab per file; None: an empty state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._files: list[tuple[str, str]] = []  # (path, text as shown)
        self._case: str | None = None
        self.files = QTabBar(documentMode=True, expanding=False)
        self.files.currentChanged.connect(self._show_file)
        self.where = ElidedLabel(code=False)  # a long path must not widen the panel
        self.where.setStyleSheet(MUTED)
        self.where.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        top = QHBoxLayout()
        top.setContentsMargins(6, 4, 6, 2)
        top.addWidget(self.files)
        top.addWidget(self.where, 1)
        self.edit = SourceEdit()
        self.empty = empty_state(NO_TRIAL)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty)
        self.pages.addWidget(self.edit)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(top)
        layout.addWidget(self.pages, 1)
        self.show_record(None)

    def show_record(self, record: TrialRecord | None) -> None:
        self._files = [(path, visible(text)) for path, text in (record.source if record else {}).items()]
        self._case = record.case_id if record else None
        self.files.blockSignals(True)
        while self.files.count():
            self.files.removeTab(0)
        for path, _text in self._files:
            self.files.setTabToolTip(self.files.addTab(PurePath(path).name), path)
        self.files.blockSignals(False)
        self.files.setVisible(len(self._files) > 1)
        if not self._files:
            self.edit.clear()
            self.where.set_full_text("")
            self.empty.setText(NO_TRIAL if record is None else UNAVAILABLE)
            self.pages.setCurrentWidget(self.empty)
            return
        self.pages.setCurrentWidget(self.edit)
        self.files.setCurrentIndex(0)  # the eval file: the engine puts it first
        self._show_file(0)

    def _show_file(self, index: int) -> None:
        if not 0 <= index < len(self._files):
            return
        path, text = self._files[index]
        self.edit.setPlainText(text)
        lines = case_lines(text, self._case) if self._case else None
        if lines is not None:
            self.edit.highlight(*lines)
            self.where.set_full_text(f"case {self._case} · line {lines[0]} · {path}")
        else:
            self.edit.setExtraSelections([])
            self.where.set_full_text(path if index else f"{path} · no def {self._case} in it")

    def text(self) -> str:
        return self.edit.toPlainText()
