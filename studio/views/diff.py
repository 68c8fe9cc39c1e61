"""The Diff panel: what the agent changed, per turn or cumulative, unified or split.

Like a code host's pull-request diff: a file list with +/− counts on the left,
the selected file's hunks on the right. Only the selected file is rendered, and a
file whose diff is over LARGE_FILE_CHARS shows its first HEAD_LINES lines until
asked for all, so a 20 MB cumulative diff opens as fast as a small one.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import PurePosixPath

from PySide6.QtCore import QEvent, QModelIndex, QRect, QRectF, QSize, Qt
from PySide6.QtGui import (
    QBrush, QColor, QFont, QPainter, QPaintEvent, QSyntaxHighlighter, QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QButtonGroup, QComboBox, QFrame, QHBoxLayout, QLabel, QListView, QPlainTextEdit, QPushButton,
    QSplitter, QStackedWidget, QStyle, QStyledItemDelegate, QStyleOptionViewItem, QTextEdit,
    QVBoxLayout, QWidget,
)

from engine.models import TrialRecord
from studio.models.diff import FileDiff, parse_diff, split_numbers, split_rows, unified_rows
from studio.models.files import FILE_ROLE, STATUS_WORDS, FileListModel, Index
from studio.theme import REDACTED_BADGE_BG, REDACTED_BADGE_FG, is_dark, mono_font
from studio.widgets import GutteredEdit, empty_state, marked_spans, rich, utf16_index, visible

LARGE_FILE_CHARS = 1_000_000
HEAD_LINES = 2_000
# Above this many lines the syntax highlighter (a Python call per line) is left off;
# row colours are painted for visible rows only, so they stay.
SYNTAX_MAX_LINES = 20_000


@dataclass(frozen=True)
class DiffColours:
    add_bg: str
    delete_bg: str
    hunk_bg: str
    filler_bg: str
    add_gutter: str
    delete_gutter: str
    add_marker: str
    delete_marker: str
    hunk_fg: str
    keyword: str
    string: str
    comment: str
    number: str
    muted: str

    @staticmethod
    def current() -> DiffColours:
        return _DARK if is_dark() else _LIGHT


_LIGHT = DiffColours("#e6ffec", "#ffebe9", "#ddf4ff", "#f3f4f6", "#ccffd8", "#ffd7d5",
                     "#1a7f37", "#cf222e", "#0550ae", "#8250df", "#0a3069", "#6e7781", "#0550ae",
                     "#6e7781")
_DARK = DiffColours("#132d1d", "#3a1619", "#122338", "#1b1f24", "#1d4428", "#5a1e22",
                    "#3fb950", "#f85149", "#79c0ff", "#d2a8ff", "#a5d6ff", "#8b949e", "#79c0ff",
                    "#8b949e")


# --- syntax colour: one small alternation per language family, scanned once per line ----------

_STRINGS = r""""(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?"""
_NUMBER = r"\b\d+(?:\.\d+)?\b"


def _language(comment: str, keywords: str, strings: str = _STRINGS) -> re.Pattern[str]:
    words = "|".join(keywords.split())
    return re.compile(rf"(?P<comment>{comment}.*$)|(?P<string>{strings})"
                      rf"|(?P<keyword>\b(?:{words})\b)|(?P<number>{_NUMBER})")


_PYTHON = _language("#", """and as assert async await break case class continue def del elif else
    except False finally for from global if import in is lambda match None nonlocal not or pass
    raise return self True try while with yield""")
_JS = _language("//", """async await break case catch class const continue default delete do else
    enum export extends false finally for from function if implements import in instanceof
    interface let new null return static super switch this throw true try type typeof undefined
    var void while yield""", _STRINGS + r"|`(?:[^`\\]|\\.)*`?")
_SHELL = _language("#", """if then else elif fi for while until do done case esac in function
    return export local set unset readonly exit shift source""")
_C_LIKE = _language("//", """break case char class const continue default do double else enum
    extern false fn for func go if impl import int let long match mut nil package pub return self
    static struct switch true type use var void while""")
_CONFIG = _language("#", "true false null yes no")
_LANGUAGES = {
    ".py": _PYTHON, ".pyi": _PYTHON,
    ".js": _JS, ".jsx": _JS, ".mjs": _JS, ".cjs": _JS, ".ts": _JS, ".tsx": _JS,
    ".sh": _SHELL, ".bash": _SHELL, ".zsh": _SHELL,
    ".go": _C_LIKE, ".rs": _C_LIKE, ".c": _C_LIKE, ".h": _C_LIKE, ".cc": _C_LIKE, ".cpp": _C_LIKE,
    ".java": _C_LIKE, ".kt": _C_LIKE, ".swift": _C_LIKE,
    ".toml": _CONFIG, ".yaml": _CONFIG, ".yml": _CONFIG, ".cfg": _CONFIG, ".ini": _CONFIG,
}


def language_for(path: str) -> re.Pattern[str] | None:
    name = PurePosixPath(path).name
    if name in ("Dockerfile", "Makefile"):
        return _SHELL
    return _LANGUAGES.get(PurePosixPath(path).suffix.lower())


def _faint(colour: str, alpha: int = 70) -> QColor:
    faint = QColor(colour)
    faint.setAlpha(alpha)
    return faint


def _format(fg: str | None = None, bg: str | None = None, *, bold: bool = False,
            italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    if fg:
        fmt.setForeground(QColor(fg))
    if bg:
        fmt.setBackground(QColor(bg))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


class DiffHighlighter(QSyntaxHighlighter):
    """Colours one pane: +/− markers, hunk headers, light syntax and redaction marks as badges.

    The whole-row green/red backgrounds are painted by DiffEdit, because a
    character format's background stops at the last character of the line.
    """

    def __init__(self, edit: DiffEdit) -> None:
        super().__init__(edit.document())
        self.edit = edit
        self.language: re.Pattern[str] | None = None
        self.marker = True  # unified rows start with "+", "-" or " "
        self.set_colours(DiffColours.current())

    def set_colours(self, c: DiffColours) -> None:
        self.formats = {
            "add_marker": _format(c.add_marker, bold=True),
            "delete_marker": _format(c.delete_marker, bold=True),
            "hunk": _format(c.hunk_fg),
            "meta": _format(c.muted, italic=True),
            "keyword": _format(c.keyword, bold=True),
            "string": _format(c.string),
            "comment": _format(c.comment, italic=True),
            "number": _format(c.number),
            "redacted": _format(REDACTED_BADGE_FG, REDACTED_BADGE_BG, bold=True),
        }

    def highlightBlock(self, text: str) -> None:
        kinds = self.edit.kinds
        n = self.currentBlock().blockNumber()
        kind = kinds[n] if n < len(kinds) else "context"
        size = utf16_index(text, len(text))
        if kind in ("hunk", "meta"):
            self.setFormat(0, size, self.formats[kind])
            return
        start = 0
        if self.marker and text[:1] in ("+", "-"):
            self.setFormat(0, 1, self.formats["add_marker" if text[0] == "+" else "delete_marker"])
            start = 1
        elif self.marker:
            start = 1
        if self.language is not None:
            for m in self.language.finditer(text, start):
                group = m.lastgroup or ""
                a, b = utf16_index(text, m.start()), utf16_index(text, m.end())
                self.setFormat(a, b - a, self.formats[group])
        for a, b in marked_spans(text):
            self.setFormat(a, b - a, self.formats["redacted"])


class DiffEdit(GutteredEdit):
    """A read-only, unwrapped pane of diff rows: a line-number gutter and a colour per row kind.

    Row kinds: context, add, delete, hunk, meta, filler (a blank line that keeps the
    split view's sides aligned).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(mono_font())
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.kinds: list[str] = []
        self.numbers: list[tuple[int | None, ...]] = []
        self._columns = 2
        self._digits = 3
        self.highlighter = DiffHighlighter(self)
        self._apply_colours()

    def show_rows(self, text: str, kinds: list[str], numbers: list[tuple[int | None, ...]], *,
                  columns: int, marker: bool, language: re.Pattern[str] | None) -> None:
        self.kinds, self.numbers, self._columns = kinds, numbers, columns
        text = visible(text)  # line for line: controls become markers, never line breaks
        widest = max((n for row in numbers for n in row if n is not None), default=0)
        self._digits = max(3, len(str(widest)))
        syntax = len(kinds) <= SYNTAX_MAX_LINES
        self.highlighter.marker = marker
        self.highlighter.language = language
        # Attached, setPlainText highlights in the same call; attaching to a document that
        # still holds text would queue a second, later pass, so it is emptied first.
        if not syntax:
            self.highlighter.setDocument(None)  # type: ignore[arg-type]
        elif self.highlighter.document() is None:
            self.clear()
            self.highlighter.setDocument(self.document())
        self.setPlainText(text)
        self.setExtraSelections([] if syntax else self._redacted_selections(text))
        self.fit_gutter()

    def clear_rows(self) -> None:
        self.show_rows("", [], [], columns=self._columns, marker=False, language=None)

    def _redacted_selections(self, text: str) -> list[QTextEdit.ExtraSelection]:
        selections: list[QTextEdit.ExtraSelection] = []
        fmt = self.highlighter.formats["redacted"]
        for a, b in islice(marked_spans(text), 10_000):
            sel = QTextEdit.ExtraSelection()
            cursor = QTextCursor(self.document())
            cursor.setPosition(a)
            cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
            sel.cursor, sel.format = cursor, fmt  # type: ignore[misc]
            selections.append(sel)
        return selections

    # --- colours ---

    def _apply_colours(self) -> None:
        c = DiffColours.current()
        self.colours = c
        filler = QBrush(QColor(c.filler_bg))
        self._row_brushes: dict[str, list[QBrush]] = {
            "add": [QBrush(QColor(c.add_bg))],
            "delete": [QBrush(QColor(c.delete_bg))],
            "hunk": [QBrush(QColor(c.hunk_bg))],
            "filler": [filler, QBrush(_faint(c.muted), Qt.BrushStyle.BDiagPattern)],
        }
        self._gutter_brushes = {"add": QColor(c.add_gutter), "delete": QColor(c.delete_gutter),
                                "hunk": QColor(c.hunk_bg), "filler": QColor(c.filler_bg)}
        self.highlighter.set_colours(c)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:  # the desktop switched light/dark
            self._apply_colours()
            self.highlighter.rehighlight()

    # --- row backgrounds: painted for visible rows only, so a huge file costs nothing extra ---

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self.viewport())
        width = self.viewport().width()
        for number, top, height in self._visible_rows(event.rect().bottom()):
            kind = self.kinds[number] if number < len(self.kinds) else "context"
            for brush in self._row_brushes.get(kind, ()):
                painter.fillRect(QRectF(0, top, width, height), brush)
        painter.end()
        super().paintEvent(event)

    def _visible_rows(self, bottom: int) -> Iterator[tuple[int, float, float]]:
        """(row number, top, height) of each row shown, in viewport coordinates."""
        block = self.firstVisibleBlock()
        offset = self.contentOffset()
        while block.isValid():
            geometry = self.blockBoundingGeometry(block).translated(offset)
            if geometry.top() > bottom:
                break
            yield block.blockNumber(), geometry.top(), geometry.height()
            block = block.next()

    # --- gutter ---

    def gutter_width(self) -> int:
        digit = self.fontMetrics().horizontalAdvance("9")
        return 10 + self._columns * (self._digits * digit + 8)

    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        painter = QPainter(gutter)
        painter.fillRect(event.rect(), self.palette().alternateBase())
        painter.setFont(self.font())
        muted = QColor(self.colours.muted)
        digit = self.fontMetrics().horizontalAdvance("9")
        column = self._digits * digit + 8
        for number, top, height in self._visible_rows(event.rect().bottom()):
            kind = self.kinds[number] if number < len(self.kinds) else "context"
            if kind in self._gutter_brushes:
                painter.fillRect(QRectF(0, top, gutter.width(), height), self._gutter_brushes[kind])
            painter.setPen(muted)
            row = self.numbers[number] if number < len(self.numbers) else ()
            for i, n in enumerate(row):
                if n is not None:
                    painter.drawText(QRectF(4 + i * column, top, column - 4, height),
                                     _RIGHT, str(n))
        painter.end()


# --- the file list ------------------------------------------------------------------------------

_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_STATUS_LETTER = {"added": "A", "deleted": "D", "modified": "M", "renamed": "R"}


class _FileDelegate(QStyledItemDelegate):
    """Path on the left (elided in the middle), +/− counts or a "binary" tag on the right."""

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        return QSize(200, option.fontMetrics.height() + 10)  # type: ignore[attr-defined]

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        f: FileDiff = index.data(FILE_ROLE)
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""  # type: ignore[attr-defined]
        widget = opt.widget  # type: ignore[attr-defined]
        style = widget.style() if widget else None
        if style:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        c = DiffColours.current()
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)  # type: ignore[attr-defined]
        palette = opt.palette  # type: ignore[attr-defined]
        text_colour = (palette.highlightedText() if selected else palette.text()).color()
        rect = opt.rect.adjusted(8, 0, -8, 0)  # type: ignore[attr-defined]
        metrics = opt.fontMetrics  # type: ignore[attr-defined]
        painter.save()
        # Right side first, so the path gets whatever width is left.
        right = rect.right()
        if f.binary:
            tag = "binary"
            w = metrics.horizontalAdvance(tag) + 10
            h = metrics.height()
            box = QRect(right - w + 1, rect.center().y() - h // 2, w, h)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(c.muted))
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.drawRoundedRect(box, 4, 4)
            painter.setPen(QColor("#ffffff"))
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, tag)
            right -= w + 8
        else:
            counts = ((f"−{f.removed}", c.delete_marker), (f"+{f.added}", c.add_marker))
            for text, colour in counts:
                w = metrics.horizontalAdvance(text)
                painter.setPen(text_colour if selected else QColor(colour))
                painter.drawText(QRect(right - w + 1, rect.top(), w, rect.height()),
                                 Qt.AlignmentFlag.AlignVCenter, text)
                right -= w + 6
            right -= 4
        letter = _STATUS_LETTER[f.status]
        lw = metrics.horizontalAdvance("M") + 6
        painter.setPen(text_colour if selected else QColor(
            {"A": c.add_marker, "D": c.delete_marker}.get(letter, c.muted)))
        bold = QFont(opt.font)  # type: ignore[attr-defined]
        bold.setBold(True)
        painter.setFont(bold)
        painter.drawText(QRect(rect.left(), rect.top(), lw, rect.height()),
                         Qt.AlignmentFlag.AlignVCenter, letter)
        painter.setFont(opt.font)  # type: ignore[attr-defined]
        painter.setPen(text_colour)
        path_rect = QRect(rect.left() + lw, rect.top(), max(0, right - rect.left() - lw),
                          rect.height())
        path = metrics.elidedText(visible(f.path), Qt.TextElideMode.ElideMiddle, path_rect.width())
        painter.drawText(path_rect, Qt.AlignmentFlag.AlignVCenter, path)
        painter.restore()


# --- the panel ---------------------------------------------------------------------------------

def _displayable(text: str) -> str:
    """Characters Qt would take as line breaks would shift rows off their colours and numbers."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "␍")
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "␤").replace("\u2029", "¶")
    return text


def _split_side_kind(kind: str, present: bool, side: str) -> str:
    if not present:
        return "filler"
    if kind == "change":
        return "delete" if side == "old" else "add"
    return kind


class DiffView(QWidget):
    """`show_record(record)`; None shows an empty state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._record: TrialRecord | None = None
        self._diffs: dict[int, list[FileDiff]] = {}  # combo index -> files, parsed when first shown
        self._texts: list[str] = []
        self._file: FileDiff | None = None
        self._show_all = False
        self.mode = "unified"

        self.turn_combo = QComboBox()
        self.turn_combo.setMinimumContentsLength(12)
        self.turn_combo.currentIndexChanged.connect(self._turn_changed)
        self.unified_button = QPushButton("Unified")
        self.split_button = QPushButton("Split")
        self._mode_group = QButtonGroup(self)
        for button in (self.unified_button, self.split_button):
            button.setCheckable(True)
            button.setFlat(False)
            self._mode_group.addButton(button)
        self.unified_button.setChecked(True)
        self.unified_button.toggled.connect(lambda on: self.set_mode("unified" if on else "split"))
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)

        bar = QHBoxLayout()
        bar.setContentsMargins(8, 6, 8, 6)
        bar.setSpacing(6)
        bar.addWidget(self.turn_combo)
        bar.addSpacing(8)
        bar.addWidget(self.unified_button)
        bar.addWidget(self.split_button)
        bar.addStretch(1)
        bar.addWidget(self.summary)

        self.file_model = FileListModel()
        self.file_list = QListView()
        self.file_list.setModel(self.file_model)
        self.file_list.setItemDelegate(_FileDelegate(self.file_list))
        self.file_list.setUniformItemSizes(True)  # rows are never measured one by one
        self.file_list.setMinimumWidth(180)
        self.file_list.selectionModel().currentChanged.connect(self._file_changed)

        self.file_header = QLabel()
        self.file_header.setTextFormat(Qt.TextFormat.RichText)
        self.file_header.setContentsMargins(8, 4, 8, 4)
        self.large_label = QLabel()
        self.show_all_button = QPushButton("Show all")
        self.show_all_button.clicked.connect(self.show_all)
        self.large_bar = QFrame()
        self.large_bar.setObjectName("largeBar")
        self.large_bar.setStyleSheet("#largeBar { background: palette(alternate-base);"
                                     " border-bottom: 1px solid palette(mid); }")
        large = QHBoxLayout(self.large_bar)
        large.setContentsMargins(8, 4, 8, 4)
        large.addWidget(self.large_label, 1)
        large.addWidget(self.show_all_button)
        self.large_bar.hide()

        self.unified = DiffEdit()
        self.old_edit = DiffEdit()
        self.new_edit = DiffEdit()
        # One visible vertical scrollbar for both sides; the left one still follows the wheel.
        self.old_edit.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        for edit in (self.old_edit, self.new_edit):
            # Equal viewport heights keep the two scroll ranges equal, row for row.
            edit.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        for a, b in ((self.old_edit, self.new_edit), (self.new_edit, self.old_edit)):
            a.verticalScrollBar().valueChanged.connect(b.verticalScrollBar().setValue)
            a.horizontalScrollBar().valueChanged.connect(b.horizontalScrollBar().setValue)
        self.split = QSplitter(Qt.Orientation.Horizontal)
        self.split.setChildrenCollapsible(False)
        self.split.addWidget(self.old_edit)
        self.split.addWidget(self.new_edit)
        self.split.setHandleWidth(2)

        self.message = empty_state()
        self.pages = QStackedWidget()
        for page in (self.unified, self.split, self.message):
            self.pages.addWidget(page)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(0)
        right_layout.addWidget(self.file_header)
        right_layout.addWidget(self.large_bar)
        right_layout.addWidget(self.pages, 1)

        self.body = QSplitter(Qt.Orientation.Horizontal)
        self.body.addWidget(self.file_list)
        self.body.addWidget(right)
        self.body.setStretchFactor(1, 1)
        self.body.setSizes([260, 840])

        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.setSpacing(0)
        content_layout.addLayout(bar)
        content_layout.addWidget(self.body, 1)

        self.empty = empty_state()
        self.empty.setTextFormat(Qt.TextFormat.RichText)
        self.outer = QStackedWidget()
        self.outer.addWidget(self.empty)
        self.outer.addWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.outer)
        self.show_record(None)

    # --- public API ---

    @property
    def files(self) -> list[FileDiff]:
        return self.file_model.files

    @property
    def current_file(self) -> FileDiff | None:
        return self._file

    def show_record(self, record: TrialRecord | None) -> None:
        self._record = record
        self._diffs.clear()
        self._texts = []
        self.turn_combo.blockSignals(True)
        self.turn_combo.clear()
        if record is None or not record.turns:
            self.turn_combo.blockSignals(False)
            self.file_model.set_files([])
            self._show_file(None)
            if record is None:
                self.empty.setText("Select a trial to see what its agent changed.")
            elif record.outcome == "infra_error":
                reason = record.failure.reason if record.failure else "the trial was void"
                self.empty.setText(rich(f"No turns ran, so nothing changed: {reason}."))
            else:
                self.empty.setText("No turns ran in this trial, so nothing changed.")
            self.outer.setCurrentWidget(self.empty)
            return
        self._texts = [_cumulative(record)] + [t.diff for t in record.turns]
        self.turn_combo.addItem("Cumulative")
        for turn in record.turns:
            self.turn_combo.addItem(f"Turn {turn.index}" + ("" if turn.status == "completed"
                                                             else f" ({turn.status})"))
        self.turn_combo.setCurrentIndex(0)
        self.turn_combo.blockSignals(False)
        self.outer.setCurrentIndex(1)
        self._turn_changed(0)

    def set_turn(self, index: int) -> None:
        """0 for the cumulative diff, n for turn n's own diff."""
        self.turn_combo.setCurrentIndex(index)

    def set_mode(self, mode: str) -> None:
        """"unified" or "split"."""
        if mode not in ("unified", "split"):
            raise ValueError(mode)
        self.mode = mode
        button = self.unified_button if mode == "unified" else self.split_button
        if not button.isChecked():
            self.unified_button.blockSignals(True)  # its toggled signal is what calls us
            button.setChecked(True)
            self.unified_button.blockSignals(False)
        self._render()

    def select_file(self, path: str) -> None:
        for row, f in enumerate(self.files):
            if f.path == path:
                self.file_list.setCurrentIndex(self.file_model.index(row))
                return
        raise KeyError(path)

    def show_all(self) -> None:
        self._show_all = True
        self._render()

    # --- internals ---

    def _turn_changed(self, index: int) -> None:
        if index < 0 or index >= len(self._texts):
            return
        if index not in self._diffs:
            self._diffs[index] = parse_diff(self._texts[index])
        files = self._diffs[index]
        self.file_model.set_files(files)
        added = sum(f.added for f in files)  # str.count per file: fast even at 20 MB
        removed = sum(f.removed for f in files)
        noun = "file" if len(files) == 1 else "files"
        self.summary.setText(f"{len(files)} {noun} changed &nbsp;{_counts_html(added, removed)}")
        if files:
            self.file_list.setCurrentIndex(self.file_model.index(0))
        else:
            self.message.setText("The agent changed no files." if index == 0
                                 else f"Turn {index} changed no files.")
            self._show_file(None)

    def _file_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self._show_file(self.files[current.row()] if current.isValid() else None)

    def _show_file(self, f: FileDiff | None) -> None:
        self._file = f
        self._show_all = False
        self._render()

    def _render(self) -> None:
        f = self._file
        self.large_bar.hide()
        if f is None:
            self.file_header.setText("")
            self._show_message(self.message.text())
            return
        moved = html.escape(visible(f" ← {f.old_path}") if f.old_path else "")
        counts = "binary" if f.binary else _counts_html(f.added, f.removed)
        muted = DiffColours.current().muted
        status = f"<span style='color:{muted}'>{STATUS_WORDS[f.status]}</span>"
        path = html.escape(visible(f.path))
        self.file_header.setText(f"<b>{path}</b>{moved} &nbsp;{status} &nbsp;{counts}")
        if f.binary:
            self._show_message(f"Binary file — not shown\n{visible(f.path)}")
            return
        if f.body_start >= f.end:
            self._show_message("No text changes in this file (empty, or only its mode changed).")
            return
        body = f.body
        if f.size > LARGE_FILE_CHARS and not self._show_all:
            total = f.line_count()
            body = f.head(HEAD_LINES)
            self.large_label.setText(f"Showing the first {HEAD_LINES:,} of {total:,} lines of this "
                                     f"file's diff ({f.size / 1e6:.1f} MB).")
            self.large_bar.show()
        body = _displayable(body)
        language = language_for(f.path)
        if self.mode == "unified":
            rows = unified_rows(body)
            self.unified.show_rows(body.rstrip("\n"), [k for _, _, k in rows],
                                   [(a, b) for a, b, _ in rows], columns=2, marker=True,
                                   language=language)
            self.pages.setCurrentWidget(self.unified)
        else:
            rows = split_rows(body)
            numbers = split_numbers(rows)
            for edit, side in ((self.old_edit, 0), (self.new_edit, 1)):
                name = "old" if side == 0 else "new"
                kinds = [_split_side_kind(kind, row[side] is not None, name) for *row, kind in rows]
                text = "\n".join(row[side] or "" for row in rows)
                edit.show_rows(text, kinds, [(n[side],) for n in numbers], columns=1, marker=False,
                               language=language)
            self.pages.setCurrentWidget(self.split)

    def _show_message(self, text: str) -> None:
        """A sentence instead of hunks; the panes are emptied so nothing stale is kept around."""
        self.message.setText(text)
        for edit in (self.unified, self.old_edit, self.new_edit):
            if edit.document().characterCount() > 1:
                edit.clear_rows()
        self.pages.setCurrentWidget(self.message)


def _counts_html(added: int, removed: int) -> str:
    c = DiffColours.current()
    return (f"<span style='color:{c.add_marker}'>+{added}</span> "
            f"<span style='color:{c.delete_marker}'>−{removed}</span>")


def _cumulative(record: TrialRecord) -> str:
    """The workspace's whole change: the engine keeps it once, on the last turn that was diffed
    (an aborted turn is not), and not at all when one turn's own diff is the whole change."""
    kept = next((t.cumulative_diff for t in reversed(record.turns) if t.cumulative_diff), None)
    if kept is not None:
        return kept
    changed = [t.diff for t in record.turns if t.diff]
    return changed[0] if len(changed) == 1 else ""  # more than one: they undid each other
