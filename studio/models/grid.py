"""The run grid's model: a batch's cases as rows, its variants as columns, one cell per run.

A cell holds browse.GridCell (one query, `run_grid`); it reads as its pass rate, a
deterministic mark and `cmd min/median/max · median time`, and is tinted from the fail
colour to the pass colour by its pass rate. A cell with nothing scored is tinted by what
it does hold (void, skipped, running); a case a variant never ran is blank and inert.

Costs come later, read out of the records off the GUI thread (`set_costs`, by trial id, as
the batch's Overview reads them): a cell then adds its median cost per scored trial, and
its tooltip the total and how many trials' cost is unknown.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

from engine.cost import fmt_usd
from engine.store.browse import GridCell
from engine.text import fmt_ms, plural

from .. import theme

Index = QModelIndex | QPersistentModelIndex
CellRole = Qt.ItemDataRole.UserRole + 1  # the GridCell itself, or None

DETERMINISTIC = "◆"  # STUDIO.md: "83% ◆ deterministic"
NOT_DETERMINISTIC = "◇"
TINT_ALPHA = 90  # a tint, so the cell's text stays readable in light and dark themes


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True, slots=True)
class CellCost:
    """What a cell's finished trials cost, as far as it is known."""

    median: float | None  # per scored trial, over those priced
    total: float | None  # over every priced trial (a void that spent tokens cost them too)
    priced: int
    unknown: int  # finished trials whose tokens have no price: never counted as $0


def cell_cost(cell: GridCell, costs: Mapping[str, float | None]) -> CellCost | None:
    """None when none of the cell's trials has been read yet."""
    read = [(t, costs[t.id]) for t in cell.trials if t.id in costs]
    if not read:
        return None
    known = [c for _, c in read if c is not None]
    scored = sorted(c for t, c in read if c is not None and t.outcome in ("pass", "fail"))
    return CellCost(median=statistics.median(scored) if scored else None,
                    total=sum(known) if known else None, priced=len(known),
                    unknown=len(read) - len(known))


def cell_text(cell: GridCell, cost: CellCost | None = None) -> str:
    """Two lines: `67% ◇` and `cmd 2/3/9 · 41s` (` · $0.42`, the median cost, once read);
    `—` where nothing was scored."""
    d = cell.distribution
    if d.pass_rate is None:
        words = [plural(n, w) for n, w in ((d.voided, "void"), (cell.skipped, "skipped"),
                                           (cell.running, "running")) if n]
        first = "— " + (", ".join(words) if words else "no trials")
    else:
        mark = DETERMINISTIC if d.deterministic else NOT_DETERMINISTIC
        first = f"{round(d.pass_rate * 100)}% {mark}"
    commands = "/".join(_number(v) for v in (d.command_min, d.command_median, d.command_max))
    money = ""
    if cost is not None and cost.median is not None:
        money = f" · {fmt_usd(cost.median)}" + ("?" if cost.unknown else "")  # part unknown
    return f"{first}\ncmd {commands} · {fmt_ms(cell.median_ms)}{money}"


def cost_words(cost: CellCost | None) -> str:
    """The tooltip's cost line: never $0 for tokens with no price."""
    if cost is None:
        return "cost: not read yet"
    if cost.total is None:
        return f"cost unknown for {plural(cost.unknown, 'trial')} (no model, or no price for it)"
    at_least = "≥ " if cost.unknown else ""  # the unknown part is not $0
    line = (f"cost: median {fmt_usd(cost.median)} per scored trial, "
            f"total {at_least}{fmt_usd(cost.total)}")
    return line + (f" ({plural(cost.unknown, 'trial')} unknown)" if cost.unknown else "")


def cell_tip(cell: GridCell, cost: CellCost | None = None) -> str:
    d = cell.distribution
    lines = [f"{cell.case_id} · {cell.variant}",
             f"{d.passed} passed, {d.failed} failed, {d.voided} void, {cell.skipped} skipped"
             + (f", {cell.running} running" if cell.running else ""),
             "pass rate " + ("— (nothing scored)" if d.pass_rate is None
                             else f"{d.pass_rate:.0%} of {plural(d.scored, 'scored trial')}"),
             ("deterministic: every scored trial agrees, command counts within 4"
              if d.deterministic else "not deterministic (needs 2+ scored trials that agree)"),
             f"commands min/median/max {_number(d.command_min)}/{_number(d.command_median)}/"
             f"{_number(d.command_max)}, median time {fmt_ms(cell.median_ms)}",
             cost_words(cost)]
    return "\n".join(lines)


def cell_colour(cell: GridCell) -> QColor:
    """Fail red to pass green by pass rate; with nothing scored, the colour of what is there."""
    d = cell.distribution
    if d.pass_rate is None:
        outcome = ("running" if cell.running else "infra_error" if d.voided
                   else "skipped")
        return QColor(theme.OUTCOME_COLOUR[outcome])
    # Through the hues (red, amber, green): a straight RGB blend is a muddy grey half way.
    fail, passed = QColor(theme.OUTCOME_COLOUR["fail"]), QColor(theme.OUTCOME_COLOUR["pass"])
    rate = d.pass_rate
    h, s, l = (a + (b - a) * rate for a, b in zip(fail.getHslF()[:3], passed.getHslF()[:3]))
    return QColor.fromHslF(h, s, l)


class GridModel(QAbstractTableModel):
    """Cases × variants of one batch; `set_cells` replaces them all."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.cases: list[str] = []
        self.variants: list[str] = []
        self._cells: dict[tuple[str, str], GridCell] = {}
        self._costs: dict[str, float | None] = {}  # by trial id; kept across refreshes

    def set_costs(self, costs: Mapping[str, float | None]) -> None:
        """Each finished trial's cost in US dollars by trial id; None where unknown."""
        self._costs = dict(costs)
        if self.cases and self.variants:
            self.dataChanged.emit(self.index(0, 0),
                                  self.index(len(self.cases) - 1, len(self.variants) - 1))

    def cost(self, cell: GridCell) -> CellCost | None:
        return cell_cost(cell, self._costs)

    def set_cells(self, cells: list[GridCell]) -> None:
        self.beginResetModel()
        # Rows and columns in the order the batch planned its runs.
        self.cases = list(dict.fromkeys(c.case_id for c in cells))
        self.variants = list(dict.fromkeys(c.variant for c in cells))
        self._cells = {(c.case_id, c.variant): c for c in cells}
        self.endResetModel()

    def cell(self, index: Index) -> GridCell | None:
        if not index.isValid():
            return None
        return self._cells.get((self.cases[index.row()], self.variants[index.column()]))

    def index_of_run(self, run_id: str) -> QModelIndex:
        for (case_id, variant), cell in self._cells.items():
            if run_id in cell.run_ids:
                return self.index(self.cases.index(case_id), self.variants.index(variant))
        return QModelIndex()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 — Qt's signature
        return 0 if parent.isValid() else len(self.cases)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.variants)

    def flags(self, index: Index) -> Qt.ItemFlag:
        if self.cell(index) is None:
            return Qt.ItemFlag.NoItemFlags  # this variant never ran this case
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        names = self.variants if orientation == Qt.Orientation.Horizontal else self.cases
        return names[section] if 0 <= section < len(names) else None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        cell = self.cell(index)
        if cell is None:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return cell_text(cell, self.cost(cell))
        if role == Qt.ItemDataRole.ToolTipRole:
            return cell_tip(cell, self.cost(cell))
        if role == Qt.ItemDataRole.BackgroundRole:
            colour = cell_colour(cell)
            colour.setAlpha(TINT_ALPHA)
            return colour
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return Qt.AlignmentFlag.AlignCenter
        if role == CellRole:
            return cell
        return None
