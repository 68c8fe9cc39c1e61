"""The small widgets and rich-text helpers the panels share, so that no panel imports another.

Text: agent text made `visible` (controls as markers, never obeyed), rich text with
`redact.MARK` drawn as badges and `code` spans in monospace,
outcome words and pills, a record's one-line reason, byte counts. Widgets: a
label that elides instead of widening its panel, a monospace text block, cards,
tags, wrapped labels, empty states, scroll areas and read-only tables.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import (
    QColor, QFont, QPaintEvent, QResizeEvent, QTextCharFormat, QTextCursor, QTextOption,
)
from PySide6.QtWidgets import (
    QAbstractItemView, QFrame, QLabel, QPlainTextEdit, QScrollArea, QSizePolicy, QTableWidget,
    QTableWidgetItem, QTextEdit, QVBoxLayout, QWidget,
)

from engine.models import Failure, TrialRecord
from engine.redact import MARK
from engine.text import fmt_ms, plural
from studio.theme import (
    AMBER, OUTCOME_COLOUR, OUTCOME_GLYPH, REDACTED_BADGE_BG, REDACTED_BADGE_FG, mono_font,
)

MUTED = "color: palette(placeholder-text);"  # secondary text, as a style sheet
TRUNCATED_MARK = "[truncated "  # how limits.truncate marks a cut: "[truncated 1,234 chars]"

_CODE = re.compile(r"`([^`]*)`?")
# Terminal escape sequences an agent's output may carry: CSI (colours, cursor moves), OSC (titles,
# links), then any other ESC pair; dropped, as a terminal would not print them either.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]")
# Characters that are invisible or reorder what follows (bidi overrides and isolates, zero-width
# and tag characters, C0 and C1 controls but tab and newline): each is shown as a marker instead.
# Zero-width (non-)joiners stay: emoji sequences and Persian words need them.
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e"
                     "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U0001bca0-\U0001bca3\U000e0001"
                     "\U000e0020-\U000e007f]")
_ASCII_UNSEEN = bytes([*range(0, 9), *range(11, 32), 127])  # _UNSEEN's ASCII part (ESC and CR too)
_OUTCOME_WORD = {"pass": "PASS", "fail": "FAIL", "infra_error": "INFRA ERROR", "skipped": "SKIPPED",
                 None: "RUNNING"}


# --- text ---------------------------------------------------------------------------------------

def fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024  # type: ignore[assignment]
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}"
    return f"{n} B"


def visible(text: str) -> str:
    r"""Agent text as it is, never as it would act: terminal escape sequences dropped, and every
    invisible or bidirectional control shown as a marker (`⟨U+202E⟩`), so `\u202eevil.txt`
    never reads as `txt.live`. Line breaks stay; `\r\n` is one. HTML escaping is the caller's."""
    if text.isascii():  # almost every text: C0 controls and DEL are all there is to look for
        if len(text.encode().translate(None, _ASCII_UNSEEN)) == len(text):
            return text
    elif _UNSEEN.search(text) is None:
        return text
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    return _UNSEEN.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)


def utf16_index(text: str, i: int) -> int:
    """Qt positions count UTF-16 units; Python counts code points (they differ past U+FFFF)."""
    return i if text.isascii() else len(text[:i].encode("utf-16-le")) // 2


def marked_spans(text: str, start: str = MARK, end: str | None = None) -> Iterator[tuple[int, int]]:
    """Each `start…end` span of `text` (the mark alone when `end` is None) as Qt positions; a
    span whose end is missing runs to the end of the text."""
    end = start if end is None else end
    i = text.find(start)
    while i >= 0:
        j = text.find(end, i + len(start) - len(end))
        j = len(text) if j < 0 else j + len(end)
        yield utf16_index(text, i), utf16_index(text, j)
        i = text.find(start, j)


def redacted_html(escaped_text: str) -> str:
    """Draw every redaction mark in already HTML-escaped text as a small filled badge."""
    badge = (f'<span style="background-color:{REDACTED_BADGE_BG}; color:{REDACTED_BADGE_FG};'
             f' font-weight:600;">&nbsp;redacted&nbsp;</span>')
    return escaped_text.replace(html.escape(MARK), badge)


def rich(text: str, *, code: bool = True) -> str:
    """Plain text as Qt rich text: escaped, `code` spans in monospace, redaction marks as badges."""
    escaped = html.escape(visible(text))
    if code and "`" in escaped:
        family = html.escape(mono_font().family())
        escaped = _CODE.sub(lambda m: f"<span style=\"font-family:'{family}'\">{m.group(1)}</span>",
                            escaped)
    return redacted_html(escaped).replace("\n", "<br>")


def muted_colour(widget: QWidget) -> str:
    """Half way from the text colour to the background: readable, and clearly secondary.

    Rich text cannot use QSS's palette(placeholder-text), and the palette's own
    placeholder colour carries an alpha that a colour name drops.
    """
    palette = widget.palette()
    text, base = palette.text().color(), palette.window().color()
    return QColor((text.red() + base.red()) // 2, (text.green() + base.green()) // 2,
                  (text.blue() + base.blue()) // 2).name()


def outcome_words(outcome: str | None, failure: Failure | None = None) -> str:
    """"✗ FAIL assertion", "✓ PASS", "○ INFRA ERROR", "● RUNNING": read without colour too."""
    word = f"{OUTCOME_GLYPH[outcome]} {_OUTCOME_WORD.get(outcome, str(outcome).upper())}"
    if failure is not None and outcome == "fail":
        word += f" {failure.kind}"
    return word


def outcome_pill(outcome: str | None, failure: Failure | None = None) -> str:
    """The outcome as a filled pill, in rich text."""
    # Amber is too light behind white text; dark text keeps it readable.
    fg = "#1f1f1f" if outcome == "infra_error" else "#ffffff"
    return pill(outcome_words(outcome, failure), OUTCOME_COLOUR[outcome], fg)


def pill(text: str, bg: str, fg: str = "#ffffff") -> str:
    """Words on a filled background, in rich text."""
    return (f"<span style='background-color:{bg}; color:{fg}; font-weight:700;'>"
            f"&nbsp;{html.escape(text)}&nbsp;</span>")


def failure_line(record: TrialRecord) -> str:
    """Why the trial ended, in one line: the failure's reason and where it happened."""
    f = record.failure
    if f is not None:
        where = f" ({f.where})" if f.where else ""
        void = " · void" if record.outcome == "infra_error" else ""
        return f"{f.reason}{where}{void}"
    if record.outcome == "pass":
        passed = sum(v.status == "passed" for v in record.validations)
        parts = [f"{passed} of {len(record.validations)} validations passed",
                 plural(len(record.turns), "turn"), plural(record.command_count, "command")]
        if record.phases:
            parts.append(fmt_ms(max(p.end_ms for p in record.phases)))
        return " · ".join(parts)
    if record.outcome == "skipped" and record.phases:  # it ran: an imported log scored nothing
        return "not scored: it ran, but no check, verdict or score decided it"
    if record.outcome == "skipped":
        return "never started: the batch ended before this trial ran"
    return "running"


# --- labels and blocks --------------------------------------------------------------------------

class ElidedLabel(QLabel):
    """One line of text cut with "…" to fit its width, the whole of it in the tooltip.

    A long failure reason or command would otherwise widen the whole panel.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None, *, code: bool = True) -> None:
        super().__init__(parent)
        self._full = ""
        self._code = code
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.set_full_text(text)

    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = visible(text).replace("\n", " ")
        self.setToolTip(self._full if len(self._full) > 40 else "")
        self._refit()

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        width = self.fontMetrics().horizontalAdvance(self._full) + 24
        return QSize(width, super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._refit()

    def _refit(self) -> None:
        # Badges and monospace spans run a little wider than the plain text measured here.
        width = max(0, self.width() - 16)
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width)
        text = rich(shown, code=self._code)
        if text != self.text():
            self.setText(text)


def wrapped(text: str, *, style: str = "", code: bool = True) -> QLabel:
    """A selectable label of rich text (`rich`) that wraps."""
    label = QLabel(rich(text, code=code))
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if style:
        label.setStyleSheet(style)
    return label


def empty_state(text: str = "") -> QLabel:
    """The sentence a panel shows in place of what it has nothing of: centred and muted."""
    label = QLabel(text)
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    label.setWordWrap(True)
    label.setStyleSheet(f"{MUTED} padding: 24px;")
    return label


def tag(text: str, bg: str, fg: str = "#ffffff") -> QLabel:
    """A small filled label: a trial's tag, "exit 1", "truncated"."""
    label = QLabel(text)
    label.setStyleSheet(f"background: {bg}; color: {fg}; border-radius: 3px; padding: 0 5px;"
                        f" font-size: 11px; font-weight: 600;")
    label.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
    return label


def card(stripe: str | None = None) -> tuple[QFrame, QVBoxLayout]:
    """A framed box, with a coloured stripe on its left edge when `stripe` is given."""
    frame = QFrame()
    frame.setObjectName("card")
    border = f"border-left: 4px solid {stripe};" if stripe else ""
    frame.setStyleSheet(f"QFrame#card {{ background: palette(base); border: 1px solid palette(mid);"
                        f" border-radius: 6px; {border} }}")
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(12, 8, 12, 10)
    layout.setSpacing(6)
    return frame, layout


def scroll_area() -> QScrollArea:
    """A frameless area that scrolls down only: a panel's column of cards."""
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return scroll


class TextBlock(QTextEdit):
    """Read-only monospace text, wrapped; as tall as its text, up to `lines` lines until expanded.

    A QTextEdit rather than a label: one long line (a raw JSON response) wraps
    anywhere instead of widening the panel, and a long text scrolls inside.
    Redaction marks show as badges, truncation marks in amber.
    """

    EXPANDED_MAX_PX = 640

    def __init__(self, text: str, *, lines: int = 10, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(mono_font())
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setStyleSheet("QTextEdit { background: palette(alternate-base); border-radius: 4px;"
                           " border: 1px solid palette(midlight); }")
        self.document().setDocumentMargin(5)
        self.lines = lines
        self.expanded = False
        self.setPlainText(visible(text).rstrip("\n"))
        self._mark(MARK, None, REDACTED_BADGE_BG, REDACTED_BADGE_FG)
        self._mark(TRUNCATED_MARK, "]", AMBER, "#1f1f1f")
        self._fit()

    def _mark(self, start: str, end: str | None, bg: str, fg: str) -> None:
        """Badge every `start…end` span; the text is already redacted, the badge makes it seen."""
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(bg))
        fmt.setForeground(QColor(fg))
        fmt.setFontWeight(QFont.Weight.Bold)
        for a, b in marked_spans(self.toPlainText(), start, end):
            cursor = QTextCursor(self.document())
            cursor.setPosition(a)
            cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)

    def badge_spans(self, colour: str = REDACTED_BADGE_BG) -> list[str]:
        """The texts drawn as badges of `colour` (what a user sees highlighted)."""
        spans: list[str] = []
        block = self.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.charFormat().background().color().name() == QColor(colour).name():
                    spans.append(fragment.text())
                it += 1
            block = block.next()
        return spans

    @property
    def overflowing(self) -> bool:
        return self._content_height() > self._collapsed_height() + 1

    def set_expanded(self, expanded: bool) -> None:
        self.expanded = expanded
        self._fit()

    def _line_px(self) -> float:
        return self.fontMetrics().lineSpacing()

    def _collapsed_height(self) -> float:
        return self.lines * self._line_px() + 2 * self.document().documentMargin()

    def _content_height(self) -> float:
        doc = self.document()
        doc.setTextWidth(max(self.viewport().width(), 50))
        return doc.size().height()

    def _fit(self) -> None:
        cap = self.EXPANDED_MAX_PX if self.expanded else self._collapsed_height()
        self.setFixedHeight(int(min(self._content_height(), cap)) + 2 * self.frameWidth() + 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():  # height follows width, not the reverse
            self._fit()


# --- tables -------------------------------------------------------------------------------------

def make_table(headers: list[str]) -> QTableWidget:
    """A read-only table of whole rows, no grid, no focus frame: a list to read, not to edit."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setShowGrid(False)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    table.horizontalHeader().setHighlightSections(False)
    table.horizontalHeader().setDefaultAlignment(Qt.AlignmentFlag.AlignLeft
                                                 | Qt.AlignmentFlag.AlignVCenter)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    table.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # no focus frame in a table that is only read
    return table


def table_item(text: str, *, colour: str | None = None, mono: bool = False, tip: str | None = None,
               align_right: bool = False) -> QTableWidgetItem:
    """A cell; a long text keeps the whole of it in its tooltip."""
    text = visible(text)
    item = QTableWidgetItem(text)
    if colour:
        item.setForeground(QColor(colour))
    if mono:
        item.setFont(mono_font())
    if tip or len(text) > 40:
        item.setToolTip(visible(tip) if tip else text)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class _Gutter(QWidget):
    """The strip left of a GutteredEdit's text: the edit says how wide and paints it."""

    def __init__(self, edit: GutteredEdit) -> None:
        super().__init__(edit)
        self.edit = edit

    def sizeHint(self) -> QSize:
        return QSize(self.edit.gutter_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        self.edit.paint_gutter(self, event)


class GutteredEdit(QPlainTextEdit):
    """A plain-text pane with a gutter (line numbers) that scrolls with its text; a subclass
    gives `gutter_width()` and `paint_gutter(gutter, event)`, and calls `fit_gutter()` when
    the width it needs changes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.gutter = _Gutter(self)
        self.blockCountChanged.connect(self.fit_gutter)
        self.updateRequest.connect(self._scroll_gutter)

    def gutter_width(self) -> int:
        raise NotImplementedError

    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        raise NotImplementedError

    def fit_gutter(self, *_: object) -> None:
        self.setViewportMargins(self.gutter_width(), 0, 0, 0)
        rect = self.contentsRect()
        self.gutter.setGeometry(QRect(rect.left(), rect.top(), self.gutter_width(), rect.height()))

    def _scroll_gutter(self, rect: QRect, dy: int) -> None:
        if dy:
            self.gutter.scroll(0, dy)
        else:
            self.gutter.update(0, rect.y(), self.gutter.width(), rect.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.fit_gutter()
