"""The trial browser's model: batches → runs (case × variant) → trials, paged from SQLite.

Batches come a page at a time (`canFetchMore`/`fetchMore`), a batch's runs and a
run's trials on its first expansion; every load is one query of
engine/store/browse.py. Nodes are addressed by integer keys, never Python
pointers, so a reset or a refresh can drop nodes without leaving the view a
dangling index. `refresh()` re-queries only what is loaded and applies the
difference as row inserts, moves, removals and `dataChanged`, so expansion and
selection survive it. A refresh is a read phase (store queries only, on a snapshot of
what is loaded) and an apply phase (the row signals); `refresh_async()` runs the read on
a worker thread, so polling a busy store never stalls the GUI thread on SQL.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Literal

from PySide6.QtCore import (
    QAbstractItemModel, QModelIndex, QObject, QPersistentModelIndex, QRect, Qt, QTimer, Signal,
)
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPixmap

from engine.store import Store
from engine.text import fmt_ms
from engine.store.browse import (
    SORT_KEYS, BatchItem, BrowseFilter, Counts, Located, RunItem, Sort, TrialItem,
    batches_page, change_stamp, locate, runs_of, trials_of,
)

from .. import theme
from ..widgets import visible
from .live import LiveTrial, LiveTrials

Kind = Literal["batch", "run", "trial"]
Item = BatchItem | RunItem | TrialItem
Index = QModelIndex | QPersistentModelIndex

PAGE_SIZE = 200
NEAR_END = 60  # painting a batch this close to the last loaded one asks for the next page
HEADERS = ["Name", "Outcome", "Pass rate", "Deterministic", "Commands", "Duration", "Tokens",
           "Trigger", "Started"]
COLUMN = {key: n for n, key in enumerate(SORT_KEYS)}  # the columns are the sort keys, in order
NUMERIC = {COLUMN[k] for k in ("pass_rate", "commands", "duration", "tokens")}

TrialIdRole = Qt.ItemDataRole.UserRole + 1
BatchIdRole = Qt.ItemDataRole.UserRole + 2
KindRole = Qt.ItemDataRole.UserRole + 3
RunIdRole = Qt.ItemDataRole.UserRole + 4
ItemRole = Qt.ItemDataRole.UserRole + 5  # the browse.py row itself

IMPORTED = "imported"  # the mark of a batch read from a bundle or another tool's log
OUTCOME_WORD = {"pass": "pass", "fail": "fail", "infra_error": "void", "skipped": "skipped"}


@dataclass(eq=False)
class Node:
    key: int
    kind: Kind
    item: Any  # BatchItem | RunItem | TrialItem, by kind
    parent: Node | None
    row: int
    children: list[Node] | None = None  # None until first fetched


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A batch or run whose children are loaded, as the model held it when a read began."""

    id: str
    item: Any
    children_live: bool  # a trial below it not done yet (runs only: a batch's children are runs)
    loaded: tuple[_Loaded, ...] = ()  # a batch's runs whose trials are loaded


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a refresh re-reads, taken on the GUI thread; plain values, safe in any thread."""

    generation: int
    stamp: tuple[Any, ...] | None
    filter: BrowseFilter
    sort: Sort
    limit: int  # the batches loaded, at least a page
    loaded: tuple[_Loaded, ...]  # batches whose runs are loaded


@dataclass(slots=True)
class _Fetched:
    """A refresh's reads: the batches, and the children of what was loaded and may have moved."""

    stamp: tuple[Any, ...]
    limit: int
    batches: list[BatchItem]
    runs: dict[str, list[RunItem]] = field(default_factory=dict)  # by batch id, in batch order
    trials: dict[str, list[TrialItem]] = field(default_factory=dict)  # by run id


class _Courier(QObject):
    """Carries a worker's reads to the model's thread. Python owns it and the worker holds it
    while emitting, so the emit never reaches a deleted C++ object; a queued delivery to a
    model deleted meanwhile is discarded by Qt."""

    fetched = Signal(int, object, object)  # generation, _Fetched | None (unchanged), error


class _Reader:
    """One daemon thread that runs the browser models' read phases, one after another,
    started on first use (a thread per read would cost a start each time)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="browser-reads",
                                                daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # noqa: BLE001 — a job reports its own errors; keep serving
                pass
            del job  # its snapshot and courier go now, not when the next job comes


_reader = _Reader()


def _item_live(item: Any) -> bool:
    """A batch or run that is still running by its own counts."""
    return item.counts.running > 0 or getattr(item, "status", "") == "running"


def _children_sort(sort: Sort) -> Sort:
    if sort.key == "started":
        # Newest batches first, but a batch's runs and a run's trials in the order they ran.
        return Sort("started", descending=False)
    return sort


def _read(store: Store, snap: _Snapshot, only_if_changed: bool = False) -> _Fetched | None:
    """A refresh's read phase: store reads only, no model state, so any thread may run it.

    None when `only_if_changed` and the store has not moved since the snapshot's stamp."""
    stamp = change_stamp(store)
    if only_if_changed and stamp == snap.stamp:
        return None
    batches = batches_page(store, snap.filter, snap.sort, 0, snap.limit)
    fetched = _Fetched(stamp, snap.limit, batches)
    now = {b.id: b for b in batches}
    sort = _children_sort(snap.sort)
    for batch in snap.loaded:
        # A finished batch whose counts did not move has nothing new below it; a batch that
        # left the page is removed, children and all.
        new = now.get(batch.id)
        if new is None or not (new != batch.item or _item_live(new) or batch.children_live):
            continue
        runs = fetched.runs[batch.id] = runs_of(store, batch.id, snap.filter, sort)
        new_runs = {r.id: r for r in runs}
        for run in batch.loaded:
            new_run = new_runs.get(run.id)
            if new_run is not None and (new_run != run.item or _item_live(new_run)
                                        or run.children_live):
                fetched.trials[run.id] = trials_of(store, run.id, snap.filter, sort)
    return fetched


def _epoch_ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return None


def _age(iso: str, now: float) -> str:
    started = _epoch_ms(iso)
    if started is None:
        return ""
    seconds = max(0, int(now - started / 1000))
    if seconds < 10:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            break
    if unit == "d" and seconds >= 30 * 86_400:
        return datetime.fromtimestamp(started / 1000).strftime("%Y-%m-%d")
    return f"{seconds // size}{unit} ago"


def _local(iso: str | None, fmt: str) -> str:
    at = _epoch_ms(iso)
    return datetime.fromtimestamp(at / 1000).strftime(fmt) if at is not None else ""


def _tokens(n: int) -> str:
    if not n:
        return "—"
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k" if n < 10_000 else f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def _rate(rate: float | None) -> str:
    return "—" if rate is None else f"{round(rate * 100)}%"


def _overall(counts: Counts, status: str = "") -> str | None:
    """The one outcome a batch or run shows: live first, then the worst finished."""
    if counts.running or (status == "running" and not counts.trials):
        return None  # running
    for outcome, n in (("fail", counts.failed), ("infra_error", counts.voided),
                       ("pass", counts.passed), ("skipped", counts.skipped)):
        if n:
            return outcome
    return None if status == "running" else "skipped"


def _tally(counts: Counts) -> str:
    glyph = theme.OUTCOME_GLYPH
    parts = [(glyph["pass"], counts.passed), (glyph["fail"], counts.failed),
             (glyph["infra_error"], counts.voided), (glyph["skipped"], counts.skipped),
             (glyph["running"], counts.running)]
    return " ".join(f"{g}{n}" for g, n in parts if n) or "no trials yet"


_icons: dict[tuple[str | None, str], QIcon] = {}  # by outcome and colour: a theme switch draws anew


def outcome_icon(outcome: str | None) -> QIcon:
    """The outcome's glyph drawn in its colour: the colour never stands alone."""
    key = (outcome, theme.OUTCOME_COLOUR[outcome])
    if key not in _icons:
        pixmap = QPixmap(16, 16)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        font = QFont()
        font.setPixelSize(14)
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(QColor(theme.OUTCOME_COLOUR[outcome]))
        painter.drawText(QRect(0, 0, 16, 16), Qt.AlignmentFlag.AlignCenter,
                         theme.OUTCOME_GLYPH[outcome])
        painter.end()
        _icons[key] = QIcon(pixmap)
    return _icons[key]


class BrowserModel(QAbstractItemModel):
    """Batches → runs → trials of a store, filtered and sorted in SQL."""

    loaded = Signal()  # after a reset, a page of batches or a refresh (the empty state listens)
    refreshed = Signal(object, object)  # a refresh applied: the change stamps before and after

    def __init__(self, store: Store, page_size: int = PAGE_SIZE, parent: Any = None,
                 live: LiveTrials | None = None) -> None:
        super().__init__(parent)
        self.store = store
        # Running trials' phases from the engine's events, ahead of the store.
        self.live = live
        self.page_size = page_size
        self.filter = BrowseFilter()
        self.sort_order = Sort()
        self.stamp: tuple[Any, ...] | None = None  # change_stamp at the last load
        self._batches: list[Node] = []
        self._nodes: dict[int, Node] = {}
        self._by_id: dict[tuple[Kind, str], Node] = {}
        self._next_key = 1
        self._more = False
        # QTreeView lays the root out again after every reset and every insert below an
        # expanded row, and fetches a page each time canFetchMore allows it. With a view
        # attached (`follow_view`), a page is offered only once the view has painted near
        # the end of what is loaded, so pages follow scrolling, not layouts.
        self.follow_view = False
        self._painted_near_end = False
        # refresh_async: one read in flight at most; its result is dropped when the model was
        # reset, paged or refreshed since its snapshot (the generation moved on).
        self._generation = 0
        self._reading = False
        self._courier = _Courier()
        self._courier.fetched.connect(self._on_fetched, Qt.ConnectionType.QueuedConnection)
        if live is not None:
            live.phase_changed.connect(self._on_live_changed)
            live.trial_finished.connect(self._on_live_changed)
        self._reload()

    # -- what the view asks ---------------------------------------------------------

    def _node(self, index: Index) -> Node | None:
        return self._nodes.get(index.internalId()) if index.isValid() else None

    def _children(self, node: Node | None) -> list[Node]:
        if node is None:
            return self._batches
        return node.children or []

    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:
        children = self._children(self._node(parent))
        if 0 <= row < len(children) and 0 <= column < len(HEADERS):
            return self.createIndex(row, column, children[row].key)
        return QModelIndex()

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        node = self._node(index)
        if node is None or node.parent is None:
            return QModelIndex()
        return self.createIndex(node.parent.row, 0, node.parent.key)

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self._children(self._node(parent)))

    def columnCount(self, parent: Index = QModelIndex()) -> int:
        return len(HEADERS)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:
        node = self._node(parent)
        if node is None:
            return bool(self._batches) or self._more
        if node.kind == "trial" or parent.column() != 0:
            return False
        return node.children is None or bool(node.children)

    def canFetchMore(self, parent: Index) -> bool:
        node = self._node(parent)
        if node is None:
            return self._more and (self._painted_near_end or not self.follow_view)
        return node.kind != "trial" and node.children is None

    def fetchMore(self, parent: Index) -> None:
        node = self._node(parent)
        if node is None:
            if self._more:
                self._fetch_batches()
            return
        if node.kind == "trial" or node.children is not None:
            return
        items = self._query_children(node)
        node.children = []  # fetched, even when empty
        if items:
            self.beginInsertRows(self.createIndex(node.row, 0, node.key), 0, len(items) - 1)
            node.children = [self._new_node(kind_of(item), item, node, row)
                             for row, item in enumerate(items)]
            self.endInsertRows()

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        flags = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        node = self._node(index)
        if node is not None and node.kind == "trial":
            flags |= Qt.ItemFlag.ItemNeverHasChildren
        return flags

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        node = self._node(index)
        if node is None:
            return None
        column = index.column()
        item = node.item
        if role == Qt.ItemDataRole.DisplayRole:
            if node.parent is None and node.row >= len(self._batches) - NEAR_END:
                self._near_end()
            return self._text(node, column)
        if role == Qt.ItemDataRole.DecorationRole and column == 0:
            return outcome_icon(self._outcome(node))
        if role == Qt.ItemDataRole.ForegroundRole and column == COLUMN["outcome"]:
            return QColor(theme.OUTCOME_COLOUR[self._outcome(node)])
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(node)
        if role == Qt.ItemDataRole.TextAlignmentRole and column in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == KindRole:
            return node.kind
        if role == TrialIdRole:
            return item.id if node.kind == "trial" else None
        if role == RunIdRole:
            return {"run": item.id, "trial": getattr(item, "run_id", None)}.get(node.kind)
        if role == BatchIdRole:
            return item.id if node.kind == "batch" else item.batch_id
        if role == ItemRole:
            return item
        return None

    # -- what a row says -------------------------------------------------------------

    def _outcome(self, node: Node) -> str | None:
        item = node.item
        if node.kind == "trial":
            return item.outcome  # None while queued or running
        return _overall(item.counts, getattr(item, "status", ""))

    def _live_of(self, trial_id: str) -> LiveTrial | None:
        """The trial as the engine's events tell it, once they named a phase."""
        live = self.live.trial(trial_id) if self.live is not None else None
        return live if live is not None and live.phase is not None else None

    def _running(self, trial: TrialItem) -> bool:
        # The engine's events may say so before the store does.
        return trial.outcome is None and (trial.status == "running"
                                          or self._live_of(trial.id) is not None)

    def _live_phase(self, trial: TrialItem) -> tuple[str, int | None]:
        live = self._live_of(trial.id)
        phase, started = (live.phase, live.started_ms) if live else (trial.phase, None)
        return phase or ("running" if self._running(trial) else "queued"), \
            started if started is not None else _epoch_ms(trial.started_at)

    def _elapsed(self, started_ms: int | None) -> int | None:
        return None if started_ms is None else max(0, int(time.time() * 1000) - started_ms)

    def _text(self, node: Node, column: int) -> str:
        key = SORT_KEYS[column]
        item = node.item
        if node.kind == "batch":
            return self._batch_text(item, key)
        if node.kind == "run":
            return self._run_text(item, key)
        return self._trial_text(item, key)

    def _batch_text(self, b: BatchItem, key: str) -> str:
        c = b.counts
        if key == "name":
            score = f"{c.passed}/{c.scored}" if c.scored else "—"
            # An imported batch says so where its trigger would be: it ran on another machine.
            how = IMPORTED if b.origin is not None else b.trigger
            return f"{b.id[:7]} · {how} · {_age(b.started_at, time.time())}  {score}"
        if key == "outcome":
            return _tally(c)
        if key == "pass_rate":
            return _rate(c.pass_rate)
        if key == "commands":
            return str(b.commands)
        if key == "duration":
            if b.status == "running":
                return fmt_ms(self._elapsed(_epoch_ms(b.started_at)))
            return fmt_ms(b.duration_ms)
        if key == "tokens":
            return _tokens(b.tokens)
        if key == "trigger":
            return b.trigger if b.origin is None else f"{b.trigger} · {IMPORTED}"
        if key == "started":
            return _local(b.started_at, "%Y-%m-%d %H:%M")
        return ""

    def _run_text(self, r: RunItem, key: str) -> str:
        if key == "name":
            return f"{r.case_id} · {r.variant}"
        if key == "outcome":
            return _tally(r.counts)
        if key == "pass_rate":
            return _rate(r.pass_rate)
        if key == "deterministic":
            if r.deterministic:
                return "◆ deterministic"
            return "◇ varies" if r.counts.scored >= 2 else "—"
        if key == "commands":
            if r.command_median is None:
                return "—"
            median = f"{r.command_median:g}"
            return median if r.command_min == r.command_max else \
                f"{median} ({r.command_min}–{r.command_max})"
        if key == "duration":
            return fmt_ms(r.duration_ms)
        if key == "tokens":
            return _tokens(r.tokens)
        if key == "started":
            return _local(r.started_at, "%H:%M:%S")
        return ""

    def _trial_text(self, t: TrialItem, key: str) -> str:
        if key == "name":
            return f"#{t.trial} · {t.label}" if t.label else f"#{t.trial}"  # its note's label
        if key == "outcome":
            glyph = theme.OUTCOME_GLYPH[t.outcome]
            if t.outcome is None:
                phase, started = self._live_phase(t)
                elapsed = self._elapsed(started) if self._running(t) else None
                return f"{glyph} {phase} {fmt_ms(elapsed)}" if elapsed is not None \
                    else f"{glyph} {phase}"
            if t.outcome == "infra_error":
                # A void trial says why in its row, not only in the tooltip.
                return f"{glyph} void · {t.failure_reason or t.failure_kind or 'infra'}"
            kind = f" · {t.failure_kind}" if t.failure_kind else ""
            return f"{glyph} {OUTCOME_WORD[t.outcome]}{kind}"
        if key == "commands":
            return str(t.command_count) if t.outcome not in (None, "skipped") else "—"
        if key == "duration":
            if self._running(t):
                return fmt_ms(self._elapsed(self._live_phase(t)[1]))
            return fmt_ms(t.duration_ms)
        if key == "tokens":
            return _tokens(t.tokens)
        if key == "started":
            return _local(t.started_at, "%H:%M:%S")
        return ""

    def _tooltip(self, node: Node) -> str:
        item = node.item
        if node.kind == "batch":
            # A file wrote it: shown as text, its control characters as markers, never obeyed.
            origin = f"\n{IMPORTED}: {visible(item.origin)}" if item.origin is not None else ""
            return (f"batch {item.id} · {item.trigger} · {item.status}\n"
                    f"{item.counts.trials} trials: {_tally(item.counts)}{origin}")
        if node.kind == "run":
            spread = ("" if item.command_min is None else
                      f"\ncommands min {item.command_min} · median {item.command_median:g}"
                      f" · max {item.command_max}")
            return f"run {item.id}: {item.case_id} under {item.variant}{spread}"
        label = f"\nlabel: {item.label}" if item.label else ""
        if item.failure_kind:
            where = f" ({item.failure_where})" if item.failure_where else ""
            return f"{item.failure_kind}{where}: {item.failure_reason or ''}{label}"
        if item.outcome is None:
            return f"trial {item.id}: {self._live_phase(item)[0]}{label}"
        return f"trial {item.id}: {item.outcome}{label}"

    # -- loading -----------------------------------------------------------------------

    def _new_node(self, kind: Kind, item: Item, parent: Node | None, row: int) -> Node:
        node = Node(self._next_key, kind, item, parent, row)
        self._next_key += 1
        self._nodes[node.key] = node
        self._by_id[(kind, item.id)] = node
        return node

    def _forget(self, node: Node) -> None:
        for child in node.children or []:
            self._forget(child)
        self._nodes.pop(node.key, None)
        self._by_id.pop((node.kind, node.item.id), None)

    def _query_children(self, node: Node) -> list[Any]:
        sort = _children_sort(self.sort_order)
        if node.kind == "batch":
            return runs_of(self.store, node.item.id, self.filter, sort)
        return trials_of(self.store, node.item.id, self.filter, sort)

    def _near_end(self) -> None:
        if self._painted_near_end or not self._more:
            return
        self._painted_near_end = True
        if self.follow_view:
            # The view painted its way close to the end (a drag of the scroll bar included):
            # fetch once this paint is over.
            QTimer.singleShot(0, self, self._fetch_if_near_end)

    def _fetch_if_near_end(self) -> None:
        if self._painted_near_end and self._more:
            self._fetch_batches()

    def _fetch_batches(self) -> None:
        self._painted_near_end = False
        self._generation += 1  # a read in flight knows fewer batches: its page would drop these
        items = batches_page(self.store, self.filter, self.sort_order, len(self._batches),
                             self.page_size)
        self._more = len(items) == self.page_size
        # A batch started since the last page shifts the offsets by one: skip repeats.
        items = [b for b in items if ("batch", b.id) not in self._by_id]
        if items:
            first = len(self._batches)
            self.beginInsertRows(QModelIndex(), first, first + len(items) - 1)
            self._batches += [self._new_node("batch", b, None, first + n)
                              for n, b in enumerate(items)]
            self.endInsertRows()
        self.loaded.emit()

    def _reload(self) -> None:
        self._painted_near_end = False
        self._generation += 1  # a read in flight is of the old filter, sort or store
        self.beginResetModel()
        self._batches, self._nodes, self._by_id = [], {}, {}
        self.stamp = change_stamp(self.store)
        items = batches_page(self.store, self.filter, self.sort_order, 0, self.page_size)
        self._more = len(items) == self.page_size
        self._batches = [self._new_node("batch", b, None, n) for n, b in enumerate(items)]
        self.endResetModel()
        self.loaded.emit()

    def set_filter(self, flt: BrowseFilter) -> None:
        if flt != self.filter:
            self.filter = flt
            self._reload()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        wanted = Sort(SORT_KEYS[column], order == Qt.SortOrder.DescendingOrder)
        if wanted != self.sort_order:
            self.sort_order = wanted
            self._reload()

    def reload(self) -> None:
        """Everything again from the first page (the store was replaced or imported into)."""
        self._reload()

    # -- live ---------------------------------------------------------------------------

    def changed_since_load(self) -> bool:
        """Whether the store moved on since this model last read it (one cheap query)."""
        return change_stamp(self.store) != self.stamp

    def refresh(self) -> None:
        """Re-query what is loaded and apply the difference; expansion and selection stay.

        Both phases here, on the calling thread; `refresh_async` reads on a worker."""
        snap = self._snapshot()
        self._generation += 1  # a read in flight is older than this one
        fetched = _read(self.store, snap)
        assert fetched is not None
        self._apply(fetched)

    def refresh_async(self, only_if_changed: bool = False) -> bool:
        """Refresh with the store reads on a worker thread; the result is applied on this
        model's thread when it arrives, unless the model was reset (filter, sort, store),
        paged or refreshed since. With `only_if_changed`, nothing is applied when the change
        stamp has not moved. False, and nothing started, while a read is still in flight."""
        if self._reading:
            return False
        self._reading = True
        snap = self._snapshot()
        store, courier = self.store, self._courier

        def work() -> None:
            fetched, error = None, None
            try:
                fetched = _read(store, snap, only_if_changed)
            except Exception as e:  # noqa: BLE001 — raised again on the model's thread
                error = e
            try:
                courier.fetched.emit(snap.generation, fetched, error)
            except RuntimeError:  # the application is going away
                pass

        _reader.submit(work)
        return True

    @property
    def refreshing(self) -> bool:
        """Whether a `refresh_async` read is in flight (its result not yet delivered)."""
        return self._reading

    def _on_fetched(self, generation: int, fetched: _Fetched | None,
                    error: BaseException | None) -> None:
        self._reading = False
        if generation != self._generation:
            return  # stale: what it read is not what the model now shows
        if error is not None:
            raise error
        if fetched is not None:
            self._apply(fetched)

    def _snapshot(self) -> _Snapshot:
        """What is loaded, for a read phase: ids and items, no nodes."""
        def loaded(node: Node) -> _Loaded:
            return _Loaded(node.item.id, node.item, self._children_live(node),
                           tuple(loaded(run) for run in node.children or []
                                 if run.kind == "run" and run.children is not None))

        return _Snapshot(self._generation, self.stamp, self.filter, self.sort_order,
                         max(len(self._batches), self.page_size),
                         tuple(loaded(b) for b in self._batches if b.children is not None))

    def _apply(self, fetched: _Fetched) -> None:
        """A refresh's apply phase: the row signals for what a read phase found."""
        before, self.stamp = self.stamp, fetched.stamp
        self._sync(None, fetched.batches)
        self._more = len(fetched.batches) == fetched.limit
        for batch_id, runs in fetched.runs.items():
            batch = self._by_id.get(("batch", batch_id))
            if batch is None or batch.children is None:
                continue  # it left the page
            self._sync(batch, runs)
            for run in batch.children:
                trials = fetched.trials.get(run.item.id)
                if trials is not None and run.children is not None:
                    self._sync(run, trials)
        self.loaded.emit()
        self.refreshed.emit(before, self.stamp)

    def _is_live(self, node: Node) -> bool:
        if node.kind == "trial":
            return node.item.status != "done"
        return _item_live(node.item) or self._children_live(node)

    @staticmethod
    def _children_live(node: Node) -> bool:
        return any(t.item.status != "done" for t in node.children or [] if t.kind == "trial")

    def _sync(self, parent: Node | None, items: list[Any]) -> set[int]:
        """Make `parent`'s rows these items, in this order, with the fewest row signals.

        Returns the keys of the nodes whose item changed (or are new)."""
        nodes = self._batches if parent is None else parent.children
        assert nodes is not None
        parent_index = QModelIndex() if parent is None else \
            self.createIndex(parent.row, 0, parent.key)
        wanted = {item.id: item for item in items}
        for row in range(len(nodes) - 1, -1, -1):  # gone: from the bottom, rows stay valid
            if nodes[row].item.id not in wanted:
                self.beginRemoveRows(parent_index, row, row)
                self._forget(nodes.pop(row))
                self._renumber(nodes, row)
                self.endRemoveRows()
        position = {item.id: n for n, item in enumerate(items)}
        if [n.item.id for n in nodes] != sorted((n.item.id for n in nodes), key=position.get):
            self.layoutAboutToBeChanged.emit()  # PySide6 emits this signal without arguments
            nodes.sort(key=lambda n: position[n.item.id])
            self._renumber(nodes, 0)
            self.changePersistentIndexList(
                self.persistentIndexList(),
                [self._moved(index) for index in self.persistentIndexList()])
            self.layoutChanged.emit()
        changed: set[int] = set()
        kind: Kind = "batch" if parent is None else "run" if parent.kind == "batch" else "trial"
        for row, item in enumerate(items):
            if row < len(nodes) and nodes[row].item.id == item.id:
                if nodes[row].item != item:
                    nodes[row].item = item
                    changed.add(nodes[row].key)
                    self.dataChanged.emit(self.createIndex(row, 0, nodes[row].key),
                                          self.createIndex(row, len(HEADERS) - 1, nodes[row].key))
                continue
            self.beginInsertRows(parent_index, row, row)
            node = self._new_node(kind, item, parent, row)
            nodes.insert(row, node)
            self._renumber(nodes, row + 1)
            self.endInsertRows()
            changed.add(node.key)
        return changed

    def _moved(self, index: QModelIndex) -> QModelIndex:
        node = self._node(index)
        return self.createIndex(node.row, index.column(), node.key) if node else QModelIndex()

    @staticmethod
    def _renumber(nodes: list[Node], start: int) -> None:
        for row in range(start, len(nodes)):
            nodes[row].row = row

    def _on_live_changed(self, trial_id: str, *_: object) -> None:
        """A running trial entered a phase or finished: its row says so before the store does."""
        if node := self._by_id.get(("trial", trial_id)):
            self._row_changed(node)

    def tick(self) -> None:
        """Repaint the live rows, so their elapsed times move (a view timer calls this)."""
        columns = COLUMN["outcome"], COLUMN["duration"]
        for batch in self._batches:
            if not self._is_live(batch):
                continue
            self._row_changed(batch, *columns)
            for run in batch.children or []:
                for trial in run.children or []:
                    if self._running(trial.item):
                        self._row_changed(trial, *columns)

    def _row_changed(self, node: Node, first: int = 0, last: int = len(HEADERS) - 1) -> None:
        self.dataChanged.emit(self.createIndex(node.row, first, node.key),
                              self.createIndex(node.row, last, node.key),
                              [Qt.ItemDataRole.DisplayRole])

    # -- finding -----------------------------------------------------------------------

    @property
    def batch_count(self) -> int:
        """Batches loaded so far."""
        return len(self._batches)

    @property
    def has_more(self) -> bool:
        return self._more

    def index_of(self, kind: Kind, item_id: str) -> QModelIndex:
        node = self._by_id.get((kind, item_id))
        return self.createIndex(node.row, 0, node.key) if node else QModelIndex()

    def locate(self, id_or_prefix: str) -> QModelIndex:
        """The index of a batch, run or trial (an id or a unique prefix), loading its path."""
        where = locate(self.store, id_or_prefix)
        if where is None:
            return QModelIndex()
        return self._load_path(where)

    def _load_path(self, where: Located) -> QModelIndex:
        batch = self.index_of("batch", where.batch_id)
        while not batch.isValid() and self._more:  # page on until the batch is loaded
            self._fetch_batches()
            batch = self.index_of("batch", where.batch_id)
        if not batch.isValid() or where.kind == "batch":
            return batch
        self.fetchMore(batch)
        run = self.index_of("run", where.run_id or "")
        if not run.isValid() or where.kind == "run":
            return run
        self.fetchMore(run)
        return self.index_of("trial", where.trial_id or "")


def kind_of(item: Item) -> Kind:
    if isinstance(item, BatchItem):
        return "batch"
    return "run" if isinstance(item, RunItem) else "trial"
