"""The trajectory: one painted row per item under bold turn headers (STUDIO.md "Trajectory").

No widget per item: a `QListView` over `TrajectoryFilter` with one delegate that
paints the kind icon, the command with its exit-code badge, output folded to a
few lines and every `[redacted]` mark as a filled badge. Folded heights are
counted from line breaks only (no text layout), so laying out 10,000 rows is a
dictionary lookup per row; only expanded rows are wrapped, once per width.
Given the store, a finished trial's items are read from it a page at a time as
the list reaches them (`StoredItems`), not with the record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import islice

from PySide6.QtCore import (QItemSelection, QItemSelectionModel, QModelIndex, QPersistentModelIndex,
                            QPointF, QRectF, QSize, Qt, QTimer, Signal)
from PySide6.QtGui import (QColor, QFont, QFontMetrics, QGuiApplication, QIcon, QKeyEvent, QKeySequence,
                           QPainter, QPalette, QPen, QPixmap, QPolygonF, QResizeEvent, QShortcut,
                           QShowEvent)
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QHBoxLayout, QLabel, QLineEdit,
                               QListView, QStyle, QStyledItemDelegate, QStyleOptionViewItem,
                               QToolButton, QVBoxLayout, QWidget)

from engine.models import TrajectoryItem, TrialRecord, TurnRecord
from engine.redact import MARK as REDACTED
from engine.store import Store, StoreError
from engine.text import fmt_ms
from studio.models.live import LiveTrials
from studio.models.trajectory import (HEADER, KINDS, VALIDATION, MatchRole, Row, StoredItems, TextRole,
                                      TrajectoryFilter, TrajectoryModel)
from studio.theme import (GROUP_COLOUR, OUTCOME_COLOUR, REDACTED_BADGE_BG, REDACTED_BADGE_FG, VALIDATION_COLOUR,
                          VALIDATION_GLYPH, mono_font)

FOLD_LINES = 3
SEARCH_LEAST = 100  # the search field's width when the toolbar is at its narrowest
SEARCH_ROOM = 80  # more for the search before the chips' labels take room beside it
APPEND_CHUNK = 1_000  # live items appended per pass of the event loop (about 7 ms of work)
PAD_X, PAD_Y, ICON, GAP = 8, 5, 18, 8
KIND_COLOUR = {"message": GROUP_COLOUR["agent"], "command": "#455a64", "toolCall": "#2b7bb9",
               "fileChange": "#b7791f"}
KIND_LABEL = {"message": "messages", "command": "commands", "toolCall": "tool calls",
              "fileChange": "file changes"}
_TOKENS = re.compile(re.escape(REDACTED) + r"|\s+|[^\s\[]+|\[")

Index = QModelIndex | QPersistentModelIndex


def split_redacted(text: str) -> list[tuple[str, bool]]:
    """Text as (segment, is_redacted) parts, in order; empty segments dropped."""
    parts: list[tuple[str, bool]] = []
    for i, piece in enumerate(text.split(REDACTED)):
        if i:
            parts.append((REDACTED, True))
        if piece:
            parts.append((piece, False))
    return parts


def wrap_line(line: str, width: float, advance: Callable[[str], float]) -> list[str]:
    """Greedy word wrap of one line; a word wider than a line is cut by characters."""
    lines: list[str] = []
    cur, w = "", 0.0
    for token in _TOKENS.findall(line):
        tw = advance(token)
        if w + tw > width and cur:
            lines.append(cur)
            cur, w = "", 0.0
            if token.isspace():
                continue
        if tw > width and token != REDACTED:
            for ch in token:
                cw = advance(ch)
                if w + cw > width and cur:
                    lines.append(cur)
                    cur, w = "", 0.0
                cur, w = cur + ch, w + cw
            continue
        cur, w = cur + token, w + tw
    lines.append(cur)
    return lines


class _Fonts:
    """The fonts a row uses and their metrics, measured once per view font."""

    def __init__(self, base: QFont) -> None:
        self.ui = QFont(base)
        self.bold = QFont(base)
        self.bold.setBold(True)
        self.mono = mono_font()
        self.mono.setPointSizeF(base.pointSizeF())
        self.small = QFont(base)
        self.small.setPointSizeF(max(6.0, base.pointSizeF() - 1.5))
        self.small_bold = QFont(self.small)
        self.small_bold.setBold(True)
        self.fm_ui, self.fm_bold = QFontMetrics(self.ui), QFontMetrics(self.bold)
        self.fm_mono, self.fm_small = QFontMetrics(self.mono), QFontMetrics(self.small)
        self.fm_small_bold = QFontMetrics(self.small_bold)
        self.badge_w = self.fm_small_bold.horizontalAdvance("redacted") + 8


class TrajectoryDelegate(QStyledItemDelegate):
    def __init__(self, view: TrajectoryView) -> None:
        super().__init__(view)
        self._view = view
        self.fonts = _Fonts(view.font())
        self._heights: dict[int, QSize] = {}  # folded size by row id: independent of width
        self._wrapped: dict[tuple[int, int], tuple[list[str], list[str]]] = {}  # (row id, width) -> lines

    def clear(self) -> None:
        self._heights.clear()
        self._wrapped.clear()

    # --- measuring ----------------------------------------------------------------------

    def _row(self, index: Index) -> Row:
        view = self._view
        # Called for every row at each layout: skip the mapping when the filter hides nothing.
        row = index.row() if view.proxy.hides_nothing else view.proxy.mapToSource(index).row()
        return view.model.rows[row]

    def _text_width(self) -> int:
        return max(80, self._view.list.viewport().width() - 2 * PAD_X - ICON - GAP)

    def _body_fm(self, row: Row) -> QFontMetrics:
        return self.fonts.fm_ui if row.kind == "message" else self.fonts.fm_mono

    def _title(self, row: Row) -> str:
        return "" if row.kind == "message" else ("$ " if row.kind == "command" else "") + row.title

    def _badges_width(self, row: Row) -> int:
        """Room the status, exit-code and truncation badges take at the end of the first line."""
        fm, w = self.fonts.fm_small_bold, 6
        if row.kind == VALIDATION:
            w += fm.horizontalAdvance(row.status) + 12
        if row.exit_code is not None:
            w += fm.horizontalAdvance(f"exit {row.exit_code}") + 12
        if row.truncated:
            w += fm.horizontalAdvance("truncated") + 12
        return w

    def _wrap(self, text: str, width: int, fm: QFontMetrics) -> list[str]:
        badge = self.fonts.badge_w + 2  # as `_marked` paints it
        advance = lambda t: badge if t == REDACTED else fm.horizontalAdvance(t)  # noqa: E731
        return [w for line in text.split("\n") for w in wrap_line(line.expandtabs(4), width, advance)]

    def layout(self, row: Row, expanded: bool) -> tuple[list[str], list[str], int]:
        """The title's and the body's lines as shown, and how many body lines are folded away."""
        title = [self._title(row)] if row.kind != "message" else []
        if not expanded:
            body = row.body.split("\n", FOLD_LINES)[:FOLD_LINES] if row.body else []
            return title, body, max(0, row.lines - FOLD_LINES)
        width = self._text_width()
        key = (row.id, width)
        if key not in self._wrapped:
            first = width - self._badges_width(row)
            wrapped = self._wrap(title[0], first, self.fonts.fm_mono) if title else []
            body = self._wrap(row.body, width, self._body_fm(row)) if row.body else []
            self._wrapped[key] = (wrapped, body)
        return (*self._wrapped[key], 0)

    def foldable(self, row: Row) -> bool:
        if row.kind in (HEADER, VALIDATION):  # a verdict's whole story is its Evidence card
            return False
        if row.lines > FOLD_LINES or row.id in self._view.expanded:
            return True
        width = self._text_width()  # a long line is elided when folded: unfolding wraps it
        fm = self._body_fm(row)
        return (self.fonts.fm_mono.horizontalAdvance(self._title(row)) > width - self._badges_width(row)
                or any(fm.horizontalAdvance(line) > width for line in row.body.split("\n")[:FOLD_LINES]))

    def _height(self, row: Row, expanded: bool) -> int:
        f = self.fonts
        if row.kind == HEADER:
            return f.fm_bold.lineSpacing() + 2 * PAD_Y + 6
        title, body, folded = self.layout(row, expanded)
        h = 2 * PAD_Y + len(title) * f.fm_mono.lineSpacing() + len(body) * self._body_fm(row).lineSpacing()
        if folded or expanded:
            h += f.fm_small.lineSpacing()
        return max(h, ICON + 2 * PAD_Y)

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        row = self._row(index)
        if row.id in self._view.expanded:
            return QSize(1, self._height(row, True))
        size = self._heights.get(row.id)
        if size is None:  # the list gives every row its full width
            size = self._heights[row.id] = QSize(1, self._height(row, False))
        return size

    # --- painting -----------------------------------------------------------------------

    def paint(self, p: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        row = self._row(index)
        rect = QRectF(option.rect)
        pal: QPalette = option.palette
        text = pal.color(QPalette.ColorRole.Text)
        muted = QColor(text)
        muted.setAlpha(150)
        p.save()
        p.setClipRect(rect)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        if row.kind == HEADER:
            self._paint_header(p, rect, row, pal, text, muted, option)
            p.restore()
            return
        if option.state & QStyle.StateFlag.State_Selected:
            sel = QColor(pal.color(QPalette.ColorRole.Highlight))
            sel.setAlpha(70)
            p.fillRect(rect, sel)
        if index.data(MatchRole):  # a search match: an amber edge, readable on light and dark
            p.fillRect(QRectF(rect.left(), rect.top(), 3, rect.height()), QColor("#e0a800"))
        line = QColor(text)
        line.setAlpha(25)
        p.setPen(line)
        p.drawLine(rect.bottomLeft(), rect.bottomRight())

        f = self.fonts
        icon = QRectF(rect.left() + PAD_X, rect.top() + PAD_Y, ICON, ICON)
        if row.kind == VALIDATION:
            paint_verdict(p, icon, row.status)
        else:
            paint_icon(p, icon, row.kind)
        x = rect.left() + PAD_X + ICON + GAP
        right = rect.right() - PAD_X
        y = rect.top() + PAD_Y
        expanded = row.id in self._view.expanded
        title, body, folded = self.layout(row, expanded)
        if row.exit_code is not None or row.truncated or row.kind == VALIDATION:  # badges end the first line
            line_h, badge_right = (f.fm_ui if row.kind == "message" else f.fm_mono).lineSpacing(), right
            if row.kind == VALIDATION:
                badge_right -= self._badge(p, badge_right, y, line_h, row.status,
                                           QColor(VALIDATION_COLOUR.get(row.status, "#888888")),
                                           QColor("#ffffff")) + 4
            if row.exit_code is not None:
                colour = OUTCOME_COLOUR["pass" if row.exit_code == 0 else "fail"]
                badge_right -= self._badge(p, badge_right, y, line_h, f"exit {row.exit_code}", QColor(colour),
                                           QColor("#ffffff")) + 4
            if row.truncated:
                self._badge(p, badge_right, y, line_h, "truncated", QColor(OUTCOME_COLOUR["skipped"]),
                            QColor("#ffffff"))
        first_width = right - x - self._badges_width(row)
        for i, line in enumerate(title):
            self._marked(p, x, y, first_width if i == 0 else right - x, line, f.mono, f.fm_mono, text)
            y += f.fm_mono.lineSpacing()
        font, fm = (f.ui, f.fm_ui) if row.kind == "message" else (f.mono, f.fm_mono)
        body_colour = text if row.kind == "message" else muted
        for i, line in enumerate(body):
            width = first_width if i == 0 and not title else right - x
            self._marked(p, x, y, width, line, font, fm, body_colour)
            y += fm.lineSpacing()
        if folded or expanded:
            p.setFont(f.small)
            p.setPen(muted)
            hint = f"… {folded} more line{'s' if folded != 1 else ''} · click to expand" if folded \
                else "click to fold"
            p.drawText(QPointF(x, y + f.fm_small.ascent()), hint)
        p.restore()

    def _paint_header(self, p: QPainter, rect: QRectF, row: Row, pal: QPalette, text: QColor,
                      muted: QColor, option: QStyleOptionViewItem) -> None:
        f = self.fonts
        band = rect.adjusted(0, 3, 0, -1)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        colour = QColor(pal.color(QPalette.ColorRole.Highlight) if selected else text)
        colour.setAlpha(70 if selected else 22)
        p.fillRect(band, colour)
        p.fillRect(QRectF(band.left(), band.top(), 3, band.height()), QColor(GROUP_COLOUR["agent"]))
        baseline = band.center().y() + (f.fm_bold.ascent() - f.fm_bold.descent()) / 2
        right = band.right() - PAD_X
        if row.status:
            status = row.status + (f" · {fmt_ms(row.ms)}" if row.ms is not None else "")
            p.setFont(f.ui)
            p.setPen(QColor(OUTCOME_COLOUR["fail"]) if row.status != "completed" else muted)
            right -= f.fm_ui.horizontalAdvance(status)
            p.drawText(QPointF(right, baseline), status)
            right -= 12
        p.setPen(text)
        p.setFont(f.bold)
        x = band.left() + PAD_X
        p.drawText(QPointF(x, baseline), f.fm_bold.elidedText(row.title, Qt.TextElideMode.ElideRight,
                                                               int(right - x)))

    def _badge(self, p: QPainter, right: float, top: float, line_h: int, label: str, bg: QColor,
               fg: QColor) -> float:
        """A filled, rounded badge ending at `right`, centred on the line; returns its width."""
        f = self.fonts
        w = f.fm_small_bold.horizontalAdvance(label) + 8
        h = f.fm_small_bold.height() + 1
        box = QRectF(right - w, top + (line_h - h) / 2, w, h)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(bg)
        p.drawRoundedRect(box, 3, 3)
        p.setPen(fg)
        p.setFont(f.small_bold)
        p.drawText(box, Qt.AlignmentFlag.AlignCenter, label)
        return w

    def _marked(self, p: QPainter, x: float, top: float, width: float, line: str, font: QFont,
                fm: QFontMetrics, colour: QColor) -> None:
        """One line with its `[redacted]` marks as badges, elided at `width`."""
        right = x + width
        baseline = top + fm.ascent()
        for segment, redacted in split_redacted(line.expandtabs(4)):
            if redacted:
                if x + self.fonts.badge_w > right:
                    break
                x += self._badge(p, x + self.fonts.badge_w, top, fm.lineSpacing(), "redacted",
                                 QColor(REDACTED_BADGE_BG), QColor(REDACTED_BADGE_FG)) + 2
                continue
            p.setFont(font)
            p.setPen(colour)
            w = fm.horizontalAdvance(segment)
            if x + w > right:
                p.drawText(QPointF(x, baseline), fm.elidedText(segment, Qt.TextElideMode.ElideRight,
                                                               int(right - x)))
                break
            p.drawText(QPointF(x, baseline), segment)
            x += w


def paint_icon(p: QPainter, box: QRectF, kind: str) -> None:
    """A kind's icon as a coloured square with a drawn mark: no emoji or icon font needed."""
    p.save()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(KIND_COLOUR.get(kind, "#888888")))
    p.drawRoundedRect(box, 4, 4)
    white = QColor("#ffffff")
    p.setBrush(white)
    p.translate(box.topLeft())
    if kind == "command":
        p.setPen(QPen(white, 1.6, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap, Qt.PenJoinStyle.RoundJoin))
        p.drawPolyline(QPolygonF([QPointF(4.5, 5.5), QPointF(8, 9), QPointF(4.5, 12.5)]))  # ›
        p.drawLine(QPointF(9.5, 13), QPointF(14, 13))  # _
    elif kind == "toolCall":
        font = QFont("serif")
        font.setItalic(True)
        font.setBold(True)
        font.setPixelSize(14)
        p.setPen(white)
        p.setFont(font)
        p.drawText(QRectF(0, -1, box.width(), box.height()), Qt.AlignmentFlag.AlignCenter, "ƒ")
    elif kind == "fileChange":  # a pencil
        p.translate(box.width() / 2, box.height() / 2)
        p.rotate(-45)
        p.drawRect(QRectF(-3.5, -1.7, 8.5, 3.4))
        p.drawPolygon(QPolygonF([QPointF(-4.5, -1.7), QPointF(-4.5, 1.7), QPointF(-7.5, 0)]))
    elif kind == "message":  # a speech bubble
        p.drawRoundedRect(QRectF(3.5, 4, 11, 7.5), 2.5, 2.5)
        p.drawPolygon(QPolygonF([QPointF(5.5, 11), QPointF(9, 11), QPointF(5, 14.5)]))
    p.restore()


def paint_verdict(p: QPainter, box: QRectF, status: str) -> None:
    """A check's or a judge's verdict: its status colour and glyph, as the Evidence card has them."""
    p.save()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(VALIDATION_COLOUR.get(status, "#888888")))
    p.drawRoundedRect(box, 4, 4)
    font = QFont()
    font.setBold(True)
    font.setPixelSize(13)
    p.setFont(font)
    p.setPen(QColor("#ffffff"))
    p.drawText(box, Qt.AlignmentFlag.AlignCenter, VALIDATION_GLYPH.get(status, "?"))
    p.restore()


def kind_icon(kind: str, size: int = 16) -> QIcon:
    pixmap = QPixmap(size * 2, size * 2)  # drawn at twice the size, so it stays crisp on HiDPI
    pixmap.setDevicePixelRatio(2)
    pixmap.fill(Qt.GlobalColor.transparent)
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(size / ICON, size / ICON)
    paint_icon(p, QRectF(0, 0, ICON, ICON), kind)
    p.end()
    return QIcon(pixmap)


class _List(QListView):
    """A list whose Ctrl+C copies every selected row's full text, not just the current one."""

    copy_requested = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copy_requested.emit()
            return
        super().keyPressEvent(event)


class TrajectoryView(QWidget):
    """A trial's items: as stored, or, while it runs, growing from the live model."""

    # A check's or judge's row was clicked: its phase and number ("check", 1), for its Evidence card.
    validation_clicked = Signal(str, int)

    def __init__(self, live: LiveTrials | None = None, store: Store | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.live = live
        self.store = store  # where a record without its items (Store.get_trial_outline) has them
        self._following: str | None = None  # the running trial shown, by id
        self._pending: list[TrajectoryItem] = []  # its new items, appended on the clock's tick
        # A flood's items go in chunks, the event loop running between them.
        self._more = QTimer(self, singleShot=True, interval=0, timeout=self._append_pending)
        self.model = TrajectoryModel(self)
        self.proxy = TrajectoryFilter(self.model)
        self.expanded: set[int] = set()  # row ids unfolded by a click
        self._follow_when_shown = False  # items arrived while hidden and at the bottom

        self.chips: dict[str, QToolButton] = {}
        bar = QHBoxLayout()
        bar.setContentsMargins(6, 4, 6, 4)
        bar.setSpacing(4)
        for kind in KINDS:
            chip = QToolButton(checkable=True, checked=True, autoRaise=False, icon=kind_icon(kind))
            chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            chip.setToolTip(f"Show {KIND_LABEL[kind]}")
            chip.toggled.connect(self._apply_kinds)
            self.chips[kind] = chip
            bar.addWidget(chip)
        bar.addStretch(1)
        self.search = QLineEdit(placeholderText="Search  (Ctrl+F)", clearButtonEnabled=True)
        self.search.setMinimumWidth(SEARCH_LEAST)
        self.search.textChanged.connect(self._on_search)
        shift = Qt.KeyboardModifier.ShiftModifier
        self.search.returnPressed.connect(
            lambda: self.find(backwards=bool(QApplication.keyboardModifiers() & shift)))
        self.match_label = QLabel("")
        self.match_label.setMinimumWidth(48)
        previous = QToolButton(text="‹", toolTip="Previous match (Shift+F3)", autoRaise=True)
        following = QToolButton(text="›", toolTip="Next match (F3)", autoRaise=True)
        previous.clicked.connect(lambda: self.find(backwards=True))
        following.clicked.connect(lambda: self.find())
        for w in (self.search, self.match_label, previous, following):
            bar.addWidget(w)

        self.list = _List()
        self.list.setModel(self.proxy)
        self.list.setUniformItemSizes(False)
        # Lay rows out a batch at a time from the event loop, so appending to a long list
        # never stalls the GUI thread for a whole relayout.
        self.list.setLayoutMode(QListView.LayoutMode.Batched)
        self.list.setBatchSize(200)
        self.list.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setResizeMode(QListView.ResizeMode.Adjust)  # expanded rows rewrap to the new width
        self.delegate = TrajectoryDelegate(self)
        self.list.setItemDelegate(self.delegate)
        self.list.clicked.connect(self._on_clicked)
        self.list.copy_requested.connect(self.copy_selection)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(bar)
        layout.addWidget(self.list)
        # The chips' labels need about 350 px more than their icons: where the row lacks that
        # room the chips show icons only (their tooltips name them), so half a laptop screen fits.
        self._bar = bar
        self._set_chip_style(Qt.ToolButtonStyle.ToolButtonIconOnly)
        self._least_width = bar.minimumSize().width()
        self._labelled: tuple[tuple[str, ...], int] | None = None  # chip texts, the row's width with them

        context = Qt.ShortcutContext.WidgetWithChildrenShortcut
        # Ctrl+F belongs to the window, which calls focus_search() on the current tab.
        QShortcut(QKeySequence("F3"), self, lambda: self.find(), context=context)
        QShortcut(QKeySequence("Shift+F3"), self, lambda: self.find(backwards=True), context=context)
        self._update_chips()
        if live is not None:
            live.items_added.connect(self._on_items_added)
            live.ticked.connect(self._append_pending)
            live.trial_finished.connect(self._on_trial_finished)

    # --- what callers use -------------------------------------------------------------

    def show_record(self, record: TrialRecord | None) -> None:
        """A trial's turns and items; a running trial's go on growing while a view watches it."""
        self._following, self._pending = None, []
        self.expanded.clear()
        self._follow_when_shown = False
        self.delegate.clear()
        self.model.set_record(record, self._stored_items(record))
        self._update_chips()
        self._on_search(self.search.text())
        trial = self.live.trial(record.id) if self.live and record and record.outcome is None else None
        if trial is not None and trial.watched:
            self._following = record.id
            self.append_items(trial.items)

    def _stored_items(self, record: TrialRecord | None) -> StoredItems | None:
        """The items of a record read without them, from the store; None when it has them."""
        if self.store is None or record is None or record.trajectory:
            return None
        store, trial_id = self.store, record.id
        try:
            layout = store.trajectory_layout(trial_id)
        except StoreError:
            return None  # a damaged summary: the turns and checks still show, without items
        if not layout:
            return None

        def read(start: int, stop: int) -> list[TrajectoryItem]:
            try:
                return store.trajectory_items(trial_id, start, stop)
            except StoreError:
                return []  # those rows say they could not be read

        return StoredItems(layout, read)

    def append_items(self, items: Iterable[TrajectoryItem]) -> None:
        """Live: new items at the end; the list follows them if it was at the bottom."""
        items = list(items)
        if not items:
            return
        bar = self.list.verticalScrollBar()
        following = self._follow_when_shown or bar.value() >= bar.maximum() - 4
        self.model.append_items(items)
        self._update_chips()
        # Scrolling lays out every row first; a hidden list (another tab is current) would do
        # that for each batch of a live trial, so it scrolls once it is shown instead.
        shown = self.list.isVisible()
        if following and shown:
            self.list.scrollToBottom()
        self._follow_when_shown = following and not shown

    def minimumSizeHint(self) -> QSize:
        """As narrow as the toolbar with the chips as icons: their labels come where they fit."""
        return QSize(self._least_width, super().minimumSizeHint().height())

    def _labelled_width(self) -> int:
        """The width at which the chips' labels fit beside the search; measured once per label set."""
        texts = tuple(chip.text() for chip in self.chips.values())
        if self._labelled is None or self._labelled[0] != texts:
            extra = 0
            for chip in self.chips.values():
                style = chip.toolButtonStyle()
                chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
                extra += chip.sizeHint().width()
                chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
                extra -= chip.sizeHint().width()
                chip.setToolButtonStyle(style)
            self._labelled = (texts, self._least_width + extra + SEARCH_ROOM)
        return self._labelled[1]

    def _set_chip_style(self, style: Qt.ToolButtonStyle) -> None:
        for chip in self.chips.values():
            if chip.toolButtonStyle() != style:
                chip.setToolButtonStyle(style)

    def _fit_chips(self) -> None:
        labelled = self.width() >= self._labelled_width()
        self._set_chip_style(Qt.ToolButtonStyle.ToolButtonTextBesideIcon if labelled
                             else Qt.ToolButtonStyle.ToolButtonIconOnly)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_chips()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._follow_when_shown:
            self._follow_when_shown = False
            self.list.scrollToBottom()

    def update_turn(self, turn: TurnRecord) -> None:
        self.model.update_turn(turn)

    def finish_record(self, record: TrialRecord) -> None:
        """The end of a trial this view grew item by item (a replay): its turn headers take
        their prompts, status and time, and its checks and verdicts come in; laid out anew
        only when a check ran between two turns."""
        for turn in record.turns:
            self.model.update_turn(turn)
        if not self.model.append_validations(record):
            self.show_record(record)
        self._update_chips()

    # --- a running trial ----------------------------------------------------------------

    def _on_items_added(self, trial_id: str, items: list[TrajectoryItem]) -> None:
        if trial_id == self._following:
            self._pending.extend(items)

    def _append_pending(self) -> None:
        """On the live clock: a list lays out five times a second, not at every batch of events;
        at most APPEND_CHUNK items at a time, so that 20,000 a second never stall the GUI."""
        if self._pending:
            items = self._pending[:APPEND_CHUNK]
            del self._pending[:APPEND_CHUNK]
            self.append_items(items)
            if self._pending:
                self._more.start()

    def _on_trial_finished(self, trial_id: str, _outcome: str) -> None:
        if trial_id == self._following:  # its record follows; until then, all it did
            items, self._pending = self._pending, []
            self.append_items(items)
            self._following = None

    def select_phase(self, phase: str, index: int | None) -> None:
        """Select the items a timeline span stands for (a turn's, or its diff's)."""
        rows = self.model.rows_for_phase(phase, index)
        shown = [i for i in (self.proxy.mapFromSource(self.model.index(r)) for r in rows) if i.isValid()]
        if not shown:
            return
        selection = QItemSelection(shown[0], shown[-1])  # a turn's rows are contiguous in the list
        self.list.selectionModel().setCurrentIndex(shown[0], QItemSelectionModel.SelectionFlag.NoUpdate)
        self.list.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self.list.scrollTo(shown[0], QAbstractItemView.ScrollHint.PositionAtTop)

    def select_item(self, position: int) -> bool:
        """Select and show the trajectory item at `position` (its index among the trial's items,
        as the store and the search index number them); its kind is shown if it was hidden.
        False when the trial has no such item."""
        kinds = self.model.rows.kind
        items = (r for r in range(len(self.model.rows)) if kinds(r) in KINDS)  # items in order
        row = next(islice(items, position, None), None) if position >= 0 else None
        if row is None:
            return False
        if not self.chips[kinds(row)].isChecked():
            self.chips[kinds(row)].setChecked(True)  # a search hit is worth seeing whatever the filter
        index = self.proxy.mapFromSource(self.model.index(row))
        self.list.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self.list.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def find(self, backwards: bool = False) -> int | None:
        """Go to the next (or previous) match after the current row; returns its row."""
        matches = self.proxy.match_rows()
        if not matches:
            self.match_label.setText("0/0" if self.search.text() else "")
            return None
        current = self.list.currentIndex().row()
        if backwards:
            earlier = [m for m in matches if m < current]
            target = earlier[-1] if earlier else matches[-1]
        else:
            later = [m for m in matches if m > current]
            target = later[0] if later else matches[0]
        self._go_to(target)
        self.match_label.setText(f"{matches.index(target) + 1}/{len(matches)}")
        return target

    def copy_selection(self) -> str:
        rows = sorted(self.list.selectionModel().selectedIndexes(), key=lambda i: i.row())
        text = "\n\n".join(i.data(TextRole) for i in rows)
        if text:
            QGuiApplication.clipboard().setText(text)
        return text

    # --- reacting -----------------------------------------------------------------------

    def _go_to(self, row: int) -> None:
        index = self.proxy.index(row, 0)
        self.list.setCurrentIndex(index)
        self.list.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)

    def focus_search(self) -> None:
        self.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search.selectAll()

    def _on_search(self, text: str) -> None:
        self.proxy.set_search(text)
        matches = self.proxy.match_rows()
        if not text:
            self.match_label.setText("")
        elif matches:  # search as you type: the first match at or after where you are
            current = self.list.currentIndex().row()
            target = next((m for m in matches if m >= current), matches[0])
            self._go_to(target)
            self.match_label.setText(f"{matches.index(target) + 1}/{len(matches)}")
        else:
            self.match_label.setText("0/0")

    def _apply_kinds(self) -> None:
        self.proxy.set_kinds(k for k, chip in self.chips.items() if chip.isChecked())
        self._on_search(self.search.text())

    def _update_chips(self) -> None:
        for kind, chip in self.chips.items():
            chip.setText(f"{KIND_LABEL[kind]} {self.model.counts.get(kind, 0)}")
        self._fit_chips()  # wider counts may no longer fit as labels
        self.layout().activate()  # wider counts widen the chips now, not at the next event

    def _on_clicked(self, index: QModelIndex) -> None:
        if QApplication.keyboardModifiers() != Qt.KeyboardModifier.NoModifier:
            return  # ctrl/shift clicks are for selecting
        self.toggle(index)

    def toggle(self, index: QModelIndex) -> bool:
        """Unfold a folded row or fold it back; False when it has nothing to fold. A check's
        row says which it is instead (`validation_clicked`)."""
        row = self.model.rows[self.proxy.mapToSource(index).row()]
        if row.kind == VALIDATION and row.phase is not None:
            self.validation_clicked.emit(*row.phase)
            return False
        if row.kind == HEADER or not self.delegate.foldable(row):
            return False
        self.expanded ^= {row.id}
        self.delegate.sizeHintChanged.emit(index)  # the list lays out again, from cached heights
        return True
