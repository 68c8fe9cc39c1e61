"""The browser's search hits: what the full-text index found for the search box's query.

One painted row per hit: the trial (outcome glyph, case, variant, #n) and where the
match is, over the snippet with each match highlighted. The panel takes a
`SearchHits` model and subscribes to it; Enter or a click on a hit says which
(`hit_activated`), and the window opens that trial at that item. From the search
box, Down moves into the hits and Escape clears the search.
"""

from __future__ import annotations

import re

from PySide6.QtCore import (
    QEvent, QModelIndex, QObject, QPersistentModelIndex, QPointF, QRectF, QSize, Qt, Signal,
)
from PySide6.QtGui import QColor, QFont, QFontMetrics, QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QLabel, QLineEdit, QListView, QPushButton, QStyle,
    QStyledItemDelegate, QStyleOptionViewItem, QVBoxLayout, QWidget,
)

from engine.store.search import SearchHit
from engine.text import plural

from ..models.search_hits import HitRole, SearchHits
from ..theme import OUTCOME_COLOUR, OUTCOME_GLYPH
from ..widgets import MUTED, visible

SHOWN_ROWS = 5  # hits in view at once; the list scrolls to the rest
PAD_X, PAD_Y = 8, 4
LEAD = 24  # characters kept before the first match when the snippet must be cut on the left
MATCH_BG = QColor(224, 168, 0, 110)  # amber behind a match: readable on light and dark
NO_HITS = ("No trajectory item, evidence, reason or prompt matches this search "
           "(the tree below still filters ids and reasons).")
SEARCHING = "Searching trajectories, evidence, reasons and prompts…"
FIELD_WORD = {"message": "message", "command": "command", "output": "output", "tool": "tool call",
              "path": "file path", "evidence": "evidence", "reason": "failure reason", "prompt": "prompt"}
_SPACE = re.compile(r"\s+")

Index = QModelIndex | QPersistentModelIndex


def segments(snippet: str, marks: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """The snippet as (text, is_match) parts in order, each shown safe on one line: agent text
    is shown, never obeyed (studio.widgets.visible), and its line breaks become spaces."""
    parts: list[tuple[str, bool]] = []
    at = 0
    for start, end in sorted(marks):
        start, end = max(start, at), min(end, len(snippet))
        if start >= end:
            continue
        if start > at:
            parts.append((snippet[at:start], False))
        parts.append((snippet[start:end], True))
        at = end
    if at < len(snippet):
        parts.append((snippet[at:], False))
    return [(_SPACE.sub(" ", visible(text)), match) for text, match in parts if text]


def where_words(hit: SearchHit) -> str:
    """Where in the trial the match is, as the row says it."""
    field = FIELD_WORD.get(hit.field, hit.field)
    # Positions count from 0; validations and turns are numbered from 1 where the studio shows them.
    if hit.where == "evidence" and hit.position is not None:
        return f"evidence of validation {hit.position + 1}"
    if hit.where == "prompt" and hit.position is not None:
        return f"turn {hit.position + 1} prompt"
    return field


class HitDelegate(QStyledItemDelegate):
    """Two lines per hit: the trial and where, then the snippet with its matches highlighted."""

    def _fonts(self, option: QStyleOptionViewItem) -> tuple[QFont, QFont, QFontMetrics]:
        bold = QFont(option.font)
        bold.setBold(True)
        return option.font, bold, QFontMetrics(option.font)

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        return QSize(1, 2 * QFontMetrics(option.font).lineSpacing() + 3 * PAD_Y)

    def paint(self, p: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        hit: SearchHit | None = index.data(HitRole)
        if hit is None:
            return
        font, bold, fm = self._fonts(option)
        pal: QPalette = option.palette
        rect = QRectF(option.rect)
        text = pal.color(QPalette.ColorRole.Text)
        muted = QColor(text)
        muted.setAlpha(150)
        p.save()
        p.setClipRect(rect)
        if option.state & QStyle.StateFlag.State_Selected:
            selected = QColor(pal.color(QPalette.ColorRole.Highlight))
            selected.setAlpha(70)
            p.fillRect(rect, selected)
        line = QColor(text)
        line.setAlpha(25)
        p.setPen(line)
        p.drawLine(rect.bottomLeft(), rect.bottomRight())
        left, right = rect.left() + PAD_X, rect.right() - PAD_X
        baseline = rect.top() + PAD_Y + fm.ascent()

        # The first line: outcome glyph, case, variant and number; where, on the right.
        outcome = hit.outcome if hit.outcome in OUTCOME_GLYPH else None
        p.setFont(bold)
        p.setPen(QColor(OUTCOME_COLOUR[outcome]))
        glyph = OUTCOME_GLYPH[outcome] + " "
        p.drawText(QPointF(left, baseline), glyph)
        x = left + QFontMetrics(bold).horizontalAdvance(glyph)
        where = where_words(hit)
        p.setFont(font)
        p.setPen(muted)
        where_x = right - fm.horizontalAdvance(where)
        p.drawText(QPointF(where_x, baseline), where)
        room = int(where_x - 12 - x)
        p.setFont(bold)
        p.setPen(text)
        case = QFontMetrics(bold).elidedText(hit.case_id, Qt.TextElideMode.ElideRight, room)
        p.drawText(QPointF(x, baseline), case)
        x += QFontMetrics(bold).horizontalAdvance(case)
        p.setFont(font)
        p.setPen(muted)
        rest = fm.elidedText(f"  {hit.variant} #{hit.trial}", Qt.TextElideMode.ElideRight,
                             max(0, int(where_x - 12 - x)))
        p.drawText(QPointF(x, baseline), rest)

        # The second line: the snippet, cut on the left when its first match would not show.
        baseline += fm.lineSpacing() + PAD_Y
        parts = _in_view(segments(hit.snippet, hit.marks), fm, right - left)
        x = left
        for part, match in parts:
            width = fm.horizontalAdvance(part)
            if x + width > right:
                part, width = fm.elidedText(part, Qt.TextElideMode.ElideRight, int(right - x)), right - x
            if match:
                p.fillRect(QRectF(x, baseline - fm.ascent(), fm.horizontalAdvance(part), fm.height()),
                           MATCH_BG)
            p.setPen(text)
            p.drawText(QPointF(x, baseline), part)
            x += width
            if x >= right:
                break
        p.restore()


def _in_view(parts: list[tuple[str, bool]], fm: QFontMetrics, width: float) -> list[tuple[str, bool]]:
    """The parts with the text before the first match cut to LEAD characters (after an
    ellipsis) when the first match would otherwise end past `width`."""
    before = 0.0
    for n, (text, match) in enumerate(parts):
        if match:
            if before + fm.horizontalAdvance(text) <= width or n == 0:
                return parts
            lead = "".join(t for t, _ in parts[:n])
            return [("…" + lead[-LEAD:], False), *parts[n:]]
        before += fm.horizontalAdvance(text)
    return parts


class _HitList(QListView):
    """The hits: Enter opens the current one; Up from the first, or Escape, goes back to the box."""

    entered = Signal(QModelIndex)
    leave = Signal(bool)  # back to the search box; True: and clear it

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.currentIndex().isValid():
            self.entered.emit(self.currentIndex())
            return
        if key == Qt.Key.Key_Escape:
            self.leave.emit(True)
            return
        if key == Qt.Key.Key_Up and self.currentIndex().row() <= 0:
            self.leave.emit(False)
            return
        super().keyPressEvent(event)


class SearchHitsView(QWidget):
    """The hits of the search box's query, shown while it has one; `box`: the search box whose
    Down moves into the hits and whose Escape clears it."""

    hit_activated = Signal(object)  # the SearchHit, on Enter or a click

    def __init__(self, model: SearchHits, box: QLineEdit | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.box = box
        self.status = QLabel(wordWrap=True)
        self.status.setStyleSheet(MUTED)
        self.more = QPushButton("More hits", flat=True, visible=False,
                                toolTip="Show the next page of hits")
        self.more.setCursor(Qt.CursorShape.PointingHandCursor)
        self.more.setStyleSheet("QPushButton { color: palette(link); padding: 0 4px; }")
        self.more.clicked.connect(model.fetch_next)
        self.list = _HitList()
        self.list.setModel(model)
        self.list.setItemDelegate(HitDelegate(self.list))
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.clicked.connect(self._activate)
        self.list.entered.connect(self._activate)
        self.list.leave.connect(self._leave)
        top = QHBoxLayout()
        top.setContentsMargins(2, 0, 2, 0)
        top.addWidget(self.status, 1)
        top.addWidget(self.more)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.list)
        if box is not None:
            box.installEventFilter(self)
        model.changed.connect(self._update)
        model.rowsInserted.connect(lambda *_: self._fit())
        model.modelReset.connect(self._fit)
        self._update()

    def status_text(self) -> str:
        """What the line above the hits says: how many, that there are none, or why not."""
        m = self.model
        if m.error is not None:
            return m.error
        partial = ""
        if m.unindexed:
            partial = (f" · {plural(m.unindexed, 'trial')} not searchable: {m.index_error}"
                       if m.index_error else
                       f" · {plural(m.unindexed, 'trial')} not searchable yet (being indexed)")
        if not m.hits:
            return (SEARCHING if m.busy else NO_HITS) + partial
        count = plural(len(m.hits), "hit") + (" so far" if m.more else "")
        return f"{count} in trajectories, evidence, reasons and prompts · Enter opens one{partial}"

    def _update(self) -> None:
        m = self.model
        self.setVisible(bool(m.query))
        self.status.setText(self.status_text())
        colour = OUTCOME_COLOUR["fail"] if m.error is not None else None
        self.status.setStyleSheet(f"color: {colour};" if colour else MUTED)
        self.more.setVisible(m.more)
        self.more.setEnabled(not m.busy)
        self._fit()

    def _fit(self) -> None:
        """The list as tall as its hits, up to SHOWN_ROWS; none: no list."""
        rows = min(self.model.rowCount(), SHOWN_ROWS)
        self.list.setVisible(rows > 0)
        if rows:
            row_height = self.list.sizeHintForRow(0)
            self.list.setFixedHeight(rows * row_height + 2 * self.list.frameWidth())

    def _activate(self, index: QModelIndex) -> None:
        if (hit := index.data(HitRole)) is not None:
            self.hit_activated.emit(hit)

    def _leave(self, clear: bool) -> None:
        if self.box is None:
            return
        self.box.setFocus(Qt.FocusReason.OtherFocusReason)
        if clear:
            self.box.clear()

    def enter(self) -> bool:
        """Move the keyboard into the hits, on the first; False when there are none."""
        if self.model.rowCount() == 0:
            return False
        self.list.setFocus(Qt.FocusReason.OtherFocusReason)
        if not self.list.currentIndex().isValid():
            self.list.setCurrentIndex(self.model.index(0))
        return True

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.box and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key == Qt.Key.Key_Down:
                return self.enter()
            if key == Qt.Key.Key_Escape and self.box.text():
                self.box.clear()
                return True
        return super().eventFilter(watched, event)
