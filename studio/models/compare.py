"""Two trajectories aligned as one table: A's step | how they relate | B's step, a row per row.

The model is computed once per pair (`engine.compare.align` then one summary
string per item), so painting two 10,000-step trajectories only indexes lists.
Row colours are tints of the theme's outcome colours with alpha, so they read
on a light and a dark base alike: changed amber, only in A red, only in B green.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QFont

from engine.compare import Comparison, RowKind
from engine.models import TrajectoryItem, TrialRecord
from studio.theme import AMBER, OUTCOME_COLOUR, mono_font
from studio.widgets import visible

Index = QModelIndex | QPersistentModelIndex

A, GUTTER, B = 0, 1, 2
KindRole = Qt.ItemDataRole.UserRole + 1  # the row's RowKind
FirstRole = Qt.ItemDataRole.UserRole + 2  # True on the first divergence's row

# The gutter says how a row relates without colour: = same, ~ changed, − only A, + only B.
GUTTER_GLYPH: dict[RowKind, str] = {"same": "", "changed": "~", "only_a": "−", "only_b": "+"}
KIND_WORDS: dict[RowKind, str] = {"same": "same", "changed": "changed", "only_a": "only in A",
                                  "only_b": "only in B"}
_TINT: dict[RowKind, str] = {"changed": AMBER, "only_a": OUTCOME_COLOUR["fail"],
                             "only_b": OUTCOME_COLOUR["pass"]}


def tint(kind: RowKind, alpha: int = 70) -> QColor | None:
    """A row's background: a see-through tint, so the text keeps the palette's contrast."""
    if kind not in _TINT:
        return None
    colour = QColor(_TINT[kind])
    colour.setAlpha(alpha)
    return colour


def _one_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def item_summary(item: TrajectoryItem) -> str:
    """The line a step is known by: `$ command`, `tool name`, `path (change)`, `role: text`;
    agent text as it is, never as it would act (studio.widgets.visible)."""
    return visible(_summary(item))


def _summary(item: TrajectoryItem) -> str:
    if item.kind == "command":
        code = "" if item.exit_code in (0, None) else f"  → exit {item.exit_code}"
        return f"$ {_one_line(item.command or '')}{code}"
    if item.kind == "toolCall":
        data = item.input if isinstance(item.input, str) else json.dumps(item.input, default=str)
        return _one_line(f"{item.name or 'tool'} {data if item.input is not None else ''}")
    if item.kind == "fileChange":
        return f"{item.path or '?'} ({item.change or 'change'})"
    return _one_line(f"{item.role or 'message'}: {item.text or ''}")


class AlignedModel(QAbstractTableModel):
    """The aligned rows of a `Comparison`; each side's cell is `step  summary`."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._kinds: list[RowKind] = []
        self._cells: list[tuple[str, str]] = []
        self._first: int | None = None
        self._headers = ("A", "", "B")
        self._mono = mono_font()
        self._mono_bold = QFont(self._mono)
        self._mono_bold.setBold(True)
        self._tints = {kind: tint(kind) for kind in GUTTER_GLYPH}
        # The first divergence keeps its kind's hue, stronger, so it stands out in a long run.
        self._first_tints = {kind: tint(kind, 160) for kind in GUTTER_GLYPH}

    def set_comparison(self, a: TrialRecord, b: TrialRecord, comparison: Comparison) -> None:
        self.beginResetModel()
        a_text = [f"{i + 1:>4}  {item_summary(item)}" for i, item in enumerate(a.trajectory)]
        b_text = [f"{i + 1:>4}  {item_summary(item)}" for i, item in enumerate(b.trajectory)]
        self._kinds = [row.kind for row in comparison.rows]
        self._cells = [("" if row.a is None else a_text[row.a],
                        "" if row.b is None else b_text[row.b]) for row in comparison.rows]
        self._first = comparison.first_divergence
        self._headers = (f"A · {a.case_id} #{a.trial} · {a.variant}", "",
                         f"B · {b.case_id} #{b.trial} · {b.variant}")
        self.endResetModel()

    def clear(self) -> None:
        self.beginResetModel()
        self._kinds, self._cells, self._first = [], [], None
        self.endResetModel()

    def kind(self, row: int) -> RowKind:
        return self._kinds[row]

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self._kinds)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else 3

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self._headers[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row, column = index.row(), index.column()
        kind = self._kinds[row]
        first = row == self._first
        if role == Qt.ItemDataRole.DisplayRole:
            if column == GUTTER:
                return "◆" if first else GUTTER_GLYPH[kind]
            return self._cells[row][0 if column == A else 1]
        if role == Qt.ItemDataRole.BackgroundRole:
            return (self._first_tints if first else self._tints)[kind]
        if role == Qt.ItemDataRole.FontRole:
            return self._mono_bold if first or column == GUTTER else self._mono
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == GUTTER:
                return ("first divergence · " if first else "") + KIND_WORDS[kind]
            text = self._cells[row][0 if column == A else 1]
            return text.strip() or None
        if role == Qt.ItemDataRole.TextAlignmentRole and column == GUTTER:
            return Qt.AlignmentFlag.AlignCenter
        if role == KindRole:
            return kind
        if role == FirstRole:
            return first
        return None
