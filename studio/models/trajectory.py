"""The trajectory as a flat list: a header row per turn, then that turn's items, and after
them the checks and judge verdicts that ran before the next turn (or at the end).

Rows are plain Python objects prepared once (summary, full text, lower-cased
text for search), so painting, filtering and searching 10,000 items never
re-derive strings. Kind filtering and search live in `TrajectoryFilter`; the
model itself only grows (`append_items`) or is replaced (`set_record`).

A stored trial's items come as `StoredItems`: the turn and kind of every item
(enough to lay the rows out, count and filter them), and a reader of items by
position. An item's row is then made when it is first read (painted, measured,
searched), a page of items at a time, so a 100,000-item trial opens at once.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from PySide6.QtCore import (QAbstractListModel, QModelIndex, QPersistentModelIndex,
                            QSortFilterProxyModel, Qt)

from engine.models import TrajectoryItem, TrialRecord, TurnRecord, Validation
from engine.store import ItemRun
from engine.text import fmt_ms
from studio.theme import VALIDATION_GLYPH
from studio.widgets import visible

KINDS = ("message", "command", "toolCall", "fileChange")
HEADER = "turn"  # the kind of a turn header row
VALIDATION = "validation"  # a check's or a judge's verdict: shown whatever kinds are filtered
# The phase a validation ran in, and what the trajectory calls it, by its kind.
VALIDATION_PHASE = {"command": "check", "judge": "judge"}
VALIDATION_WORD = {"command": "check", "judge": "judge", "check": "error in the eval"}
VALIDATION_LINES = 3  # a verdict's lines in the trajectory; the rest are in its Evidence card
PAGE = 500  # stored items read at a time, as their rows are first needed (a few ms of work)
UNREADABLE = "this item could not be read from the store"

KindRole = Qt.ItemDataRole.UserRole + 1
TurnRole = Qt.ItemDataRole.UserRole + 2
TextRole = Qt.ItemDataRole.UserRole + 3  # the full text, as copied
ExitCodeRole = Qt.ItemDataRole.UserRole + 4
TruncatedRole = Qt.ItemDataRole.UserRole + 5
RowRole = Qt.ItemDataRole.UserRole + 6  # the Row itself, for the delegate
MatchRole = Qt.ItemDataRole.UserRole + 7  # the row matches the search (from the filter)

Index = QModelIndex | QPersistentModelIndex


@dataclass(slots=True)
class Row:
    id: int  # the row's position in the model; rows are never removed, so it is stable
    kind: str  # HEADER or an item kind
    turn: int
    title: str  # the heading line: a command, a tool call, a path, a turn's prompt
    body: str  # what is folded: output or a message's text
    text: str  # everything, for copy
    summary: str  # one line, for DisplayRole
    exit_code: int | None = None
    truncated: bool = False
    status: str = ""  # a header's turn status
    ms: int | None = None  # a header's turn duration
    lower: str = ""  # `text` lower-cased, for search
    lines: int = 0  # lines in `body`, for a cheap folded height
    phase: tuple[str, int] | None = None  # a validation's phase and number ("check", 1): its card


@dataclass(frozen=True, slots=True)
class StoredItems:
    """A stored trial's items: their runs of one turn in turn order (Store.trajectory_layout),
    and a reader of the items from one position up to another."""

    layout: list[ItemRun]
    read: Callable[[int, int], list[TrajectoryItem]]


class RowList(Sequence[Row]):
    """The model's rows. A stored item's row is None until it is first read: then its page of
    items is read and their rows made (`fill`). Kinds are known for every row from the start."""

    def __init__(self, fill: Callable[[int], None] | None = None) -> None:
        self._rows: list[Row | None] = []
        self._kinds: list[str] = []
        self._fill = fill

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Row: ...
    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...

    def __getitem__(self, i: int | slice) -> Row | list[Row]:
        if isinstance(i, slice):
            return [self[n] for n in range(*i.indices(len(self._rows)))]
        row = self._rows[i]
        if row is None:
            assert self._fill is not None
            self._fill(i % len(self._rows))
            row = self._rows[i]
            assert row is not None
        return row

    def __setitem__(self, i: int, row: Row) -> None:
        self._rows[i], self._kinds[i] = row, row.kind

    def append(self, row: Row) -> None:
        self._rows.append(row)
        self._kinds.append(row.kind)

    def extend_stored(self, kinds: list[str]) -> None:
        """The places of stored items, their rows not made yet."""
        self._rows.extend([None] * len(kinds))
        self._kinds.extend(kinds)

    def kind(self, i: int) -> str:
        """A row's kind, without making the row."""
        return self._kinds[i]

    def made(self) -> int:
        """How many rows are made (the rest are stored items not read yet)."""
        return len(self._rows) - self._rows.count(None)

    def put(self, i: int, row: Row) -> None:
        """A stored item's row, made."""
        self._rows[i] = row


def _one_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _row(id: int, kind: str, turn: int, title: str, body: str, **kw: Any) -> Row:
    title, body = visible(title), visible(body)  # agent text: shown, never obeyed
    text = "\n".join(part for part in (title, body) if part)
    summary = _one_line(title or body)
    row = Row(id, kind, turn, title, body, text, summary, **kw)
    row.lower = text.lower()
    row.lines = body.count("\n") + 1 if body else 0
    return row


def header_row(id: int, turn: int, prompt: str = "", status: str = "", ms: int | None = None) -> Row:
    title = f"Turn {turn}" + (f" · {_one_line(prompt)}" if prompt else "")
    row = _row(id, HEADER, turn, title, "", status=status, ms=ms)
    if status:
        row.summary = f"{title} ({status}{', ' + fmt_ms(ms) if ms is not None else ''})"
    return row


def item_row(id: int, item: TrajectoryItem) -> Row:
    kw = {"truncated": item.truncated}
    if item.kind == "command":
        row = _row(id, "command", item.turn, item.command or "", item.output or "",
                   exit_code=item.exit_code, **kw)
        if item.exit_code is not None:
            row.summary += f"  → exit {item.exit_code}"
        row.summary = f"$ {row.summary}"
        return row
    if item.kind == "message":
        role = "" if item.role in (None, "assistant") else f"{item.role}: "
        return _row(id, "message", item.turn, "", role + (item.text or ""), **kw)
    if item.kind == "toolCall":
        args = item.input if isinstance(item.input, str) else json.dumps(item.input, ensure_ascii=False)
        title = f"{item.name or 'tool'}({'' if item.input is None else args})"
        output = item.output if isinstance(item.output, str | None) else json.dumps(item.output)
        return _row(id, "toolCall", item.turn, title, output or "", **kw)
    return _row(id, "fileChange", item.turn, f"{item.change or 'change'} {item.path or ''}".strip(), "", **kw)


def validation_row(id: int, turn: int, validation: Validation, phase: tuple[str, int] | None) -> Row:
    """A verdict as the Evidence card sums it up: what ran, its status, what it came to."""
    word = VALIDATION_WORD[validation.kind] + (f" {phase[1]}" if phase else "")
    e = validation.evidence
    lines: list[str] = []
    if validation.kind == "command":
        lines = [f"{VALIDATION_GLYPH['passed' if a.get('passed') else 'failed']} "
                 f"{a.get('matcher', '')} — {a.get('message', '')}" for a in e.get("assertions", [])]
    elif validation.kind == "judge":
        judgment = e.get("judgment") or {}
        if "score" in judgment:
            lines.append(f"score {float(judgment['score']):.2f} vs threshold {float(e.get('threshold', 0.5)):.2f}")
        if judgment.get("reasoning"):
            lines.append(str(judgment["reasoning"]))
    else:
        lines.append(f"{e.get('exception', 'Exception')}: {e.get('message', '')}")
    if e.get("error"):
        lines.append(f"! {e['error']}")
    if len(lines) > VALIDATION_LINES:
        lines[VALIDATION_LINES - 1:] = [f"… {len(lines) - VALIDATION_LINES + 1} more in Evidence"]
    code = e.get("exit_code") if validation.kind == "command" else None
    row = _row(id, VALIDATION, turn, f"{word} · {validation.name}", "\n".join(lines),
               exit_code=code if isinstance(code, int) else None, truncated=validation.truncated,
               status=validation.status, ms=validation.ms, phase=phase)
    row.summary = f"{VALIDATION_GLYPH[validation.status]} {_one_line(row.title)} · {validation.status}"
    return row


def placed_validations(record: TrialRecord, item_turns: Iterable[int] = ()
                       ) -> dict[int, list[tuple[Validation, tuple[str, int] | None]]]:
    """Each validation, in the order they ran, under the turn it followed: the last turn that
    started before its phase did; the last turn when its phase is not recorded; 0 before any.
    `item_turns`: the turns of items stored apart from the record."""
    turns = sorted({t.index for t in record.turns} | {i.turn for i in record.trajectory}
                   | set(item_turns))
    turn_starts = sorted((p.start_ms, p.index) for p in record.phases
                         if p.phase == "turn" and p.index in turns)
    starts = {(p.phase, p.index): p.start_ms for p in record.phases}
    numbers: Counter[str] = Counter()
    placed: dict[int, list[tuple[Validation, tuple[str, int] | None]]] = {}
    for validation in record.validations:
        phase = VALIDATION_PHASE.get(validation.kind)
        target = None
        if phase is not None:
            numbers[phase] += 1
            target = (phase, numbers[phase])
        start = starts.get(target) if target else None
        turn = turns[-1] if turns else 0
        if start is not None:
            turn = max((n for s, n in turn_starts if s <= start), default=0)
        placed.setdefault(turn, []).append((validation, target))
    return placed


class TrajectoryModel(QAbstractListModel):
    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.rows = RowList()
        self.counts: Counter[str] = Counter()
        self._headers: dict[int, int] = {}  # turn -> its header's row
        self._stored: StoredItems | None = None
        self._row_of: list[int] = []  # a stored item's row, by its position
        self._position_on: list[int] = []  # a row's stored item's position (-1: not a stored item)

    # --- filling ----------------------------------------------------------------------

    def set_record(self, record: TrialRecord | None, stored: StoredItems | None = None) -> None:
        """The record's turns and items, each turn's checks after it; None: no rows.
        `stored`: its items, kept in the store, read as their rows are first needed."""
        self.beginResetModel()
        self.rows, self.counts, self._headers = RowList(self._fill), Counter(), {}
        self._stored, self._row_of, self._position_on = stored, [], []
        turns = {t.index: t for t in record.turns} if record is not None else {}
        items: dict[int, list[TrajectoryItem | ItemRun]] = {}
        for item in record.trajectory if record is not None else ():
            items.setdefault(item.turn, []).append(item)
        if stored is not None:
            self._row_of = [0] * sum(len(run.kinds) for run in stored.layout)
            for run in stored.layout:
                items.setdefault(run.turn, []).append(run)
        # A running trial's verdicts are not in yet (a replay's running copy still carries them).
        finished = record is not None and record.outcome is not None
        placed = placed_validations(record, items) if record is not None and finished else {}
        self._add_validations(0, placed.get(0, ()))
        for n in sorted(set(turns) | set(items)):
            turn = turns.get(n)
            self._add(header_row(len(self.rows), n, turn.prompt, turn.status, turn.ms) if turn
                      else header_row(len(self.rows), n))
            for item in items.get(n, ()):
                if isinstance(item, TrajectoryItem):
                    self._add(item_row(len(self.rows), item))
                    continue
                # Stored items: their places now (list operations, no loop), rows when first read.
                first, count = len(self.rows), len(item.kinds)
                self._row_of[item.start:item.start + count] = range(first, first + count)
                self.rows.extend_stored(item.kinds)
            self._add_validations(n, placed.get(n, ()))
        if stored is not None:
            self._position_on = [-1] * len(self.rows)
            for run in stored.layout:
                self.counts.update(run.kinds)
                first, count = self._row_of[run.start], len(run.kinds)
                self._position_on[first:first + count] = range(run.start, run.start + count)
        self.endResetModel()

    def _fill(self, row: int) -> None:
        """Make the rows of the page of stored items that holds this row's item."""
        assert self._stored is not None
        position = self._position_on[row]
        start = position - position % PAGE
        stop = min(start + PAGE, len(self._row_of))
        read = self._stored.read(start, stop)
        for offset, position in enumerate(range(start, stop)):
            at = self._row_of[position]
            if offset < len(read):
                self.rows.put(at, item_row(at, read[offset]))
            else:  # the store failed, or the trial's items changed since the layout was read
                self.rows.put(at, _row(at, self.rows.kind(at), 0, "", UNREADABLE))

    def _add_validations(self, turn: int,
                         validations: Iterable[tuple[Validation, tuple[str, int] | None]]) -> None:
        for validation, phase in validations:
            self._add(validation_row(len(self.rows), turn, validation, phase))

    def append_items(self, items: Iterable[TrajectoryItem]) -> None:
        """Live: new items at the end, with a header for each new turn, in one insert."""
        new: list[Row] = []
        last_turn = self.rows[-1].turn if self.rows else None
        headers = set(self._headers)
        for item in items:
            if item.turn != last_turn and item.turn not in headers:
                new.append(header_row(len(self.rows) + len(new), item.turn))
                headers.add(item.turn)
            new.append(item_row(len(self.rows) + len(new), item))
            last_turn = item.turn
        self._insert(new)

    def append_validations(self, record: TrialRecord) -> bool:
        """A finished record's checks and verdicts after the items already shown, when they
        all ran after its last turn (as most do); False, adding nothing, when one belongs
        between two turns, where only laying the rows out anew can put it."""
        placed = placed_validations(record)
        last = max(self._headers, default=0)
        if any(turn < last for turn in placed):
            return False
        new: list[Row] = []
        for turn in sorted(placed):
            for validation, phase in placed[turn]:
                new.append(validation_row(len(self.rows) + len(new), turn, validation, phase))
        self._insert(new)
        return True

    def update_turn(self, turn: TurnRecord) -> None:
        """A turn's prompt, status and time, when they become known (live)."""
        row = self._headers.get(turn.index)
        if row is None:
            self._insert([header_row(len(self.rows), turn.index, turn.prompt, turn.status, turn.ms)])
            return
        self.rows[row] = header_row(row, turn.index, turn.prompt, turn.status, turn.ms)
        self.dataChanged.emit(self.index(row), self.index(row))

    def _insert(self, new: list[Row]) -> None:
        if not new:
            return
        self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(new) - 1)
        for row in new:
            self._add(row)
        self.endInsertRows()

    def _add(self, row: Row) -> None:
        if row.kind == HEADER:
            self._headers[row.turn] = row.id
        else:
            self.counts[row.kind] += 1
        self.rows.append(row)

    # --- reading ----------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role == KindRole:  # the kind filter's question: answered without making the row
            return self.rows.kind(index.row())
        row = self.rows[index.row()]
        if role == RowRole:
            return row
        if role == Qt.ItemDataRole.DisplayRole:
            return row.summary
        if role == KindRole:
            return row.kind
        if role == TurnRole:
            return row.turn
        if role == TextRole:
            return row.text
        if role == ExitCodeRole:
            return row.exit_code
        if role == TruncatedRole:
            return row.truncated
        return None

    def rows_for_phase(self, phase: str, index: int | None) -> list[int]:
        """The rows a timeline span stands for: a turn's (or its diff's) header and items."""
        if phase not in ("turn", "diff") or index not in self._headers:
            return []
        start = self._headers[index]
        end = start + 1
        while end < len(self.rows) and self.rows.kind(end) not in (HEADER, VALIDATION):
            end += 1
        return list(range(start, end))

    def search(self, text: str) -> list[int]:
        """Rows whose full text holds `text`, ignoring case."""
        needle = text.lower()
        return [row.id for row in self.rows if needle in row.lower] if needle else []


class TrajectoryFilter(QSortFilterProxyModel):
    """Hides unchecked kinds (turn headers stay) and knows which rows match the search."""

    def __init__(self, model: TrajectoryModel) -> None:
        super().__init__()
        self._model = model
        self._kinds: set[str] = set(KINDS)
        # True while every kind is shown: then this model's rows are the source's rows, one for one,
        # and a delegate laying out 10,000 rows can skip a mapToSource per row.
        self.hides_nothing = True
        self._query = ""
        self._matches: set[int] = set()
        self.setSourceModel(model)
        # Qt's own filter, on the kind: while nothing is hidden its pattern is empty and Qt takes
        # every row without a call into Python (100,000 calls of an override took 65 ms a reset).
        self.setFilterRole(KindRole)
        # New rows from append_items are filtered as they arrive; nothing else is dynamic.
        self.setDynamicSortFilter(True)
        model.modelReset.connect(self._research)
        model.rowsInserted.connect(self._research_tail)

    @property
    def kinds(self) -> set[str]:
        return set(self._kinds)

    def set_kinds(self, kinds: Iterable[str]) -> None:
        self.hides_nothing = False  # rows are remapped inside the change
        self._kinds = set(kinds)
        shown = sorted(self._kinds | {HEADER, VALIDATION})
        self.setFilterRegularExpression(
            "" if self._kinds >= set(KINDS) else "^(" + "|".join(map(re.escape, shown)) + ")$")
        self.hides_nothing = self._kinds >= set(KINDS)

    def set_search(self, text: str) -> None:
        self._query = text
        self._research()

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == MatchRole:
            return self.mapToSource(index).row() in self._matches
        return super().data(index, role)

    def match_rows(self) -> list[int]:
        """The matching rows that are shown, as rows of this model, in order."""
        shown = (self.mapFromSource(self._model.index(r)) for r in sorted(self._matches))
        return [i.row() for i in shown if i.isValid()]

    def _research(self) -> None:
        self._matches = set(self._model.search(self._query))
        if self.rowCount():
            self.dataChanged.emit(self.index(0, 0), self.index(self.rowCount() - 1, 0), [MatchRole])

    def _research_tail(self, _parent: Index, first: int, last: int) -> None:
        if self._query:
            needle = self._query.lower()
            self._matches |= {r for r in range(first, last + 1) if needle in self._model.rows[r].lower}
