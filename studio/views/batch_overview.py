"""A batch's Overview: how it went at a glance, above its run grid.

Figures first (pass rate with its scored count, trials, deterministic runs, command
spread, tokens, cost), then each run's outcomes as a small stacked bar, a histogram
of trial durations, the slowest phases (median and p90), void trials grouped by
reason, and the slowest and most expensive trials as links (`trial_activated`). A batch
whose records name cluster nodes (`host`) has a Nodes part: each node's trials by
outcome and those running now, with its free slots while the studio is connected to
the cluster (`show_cluster`, from the status bar's poll).

The figures come from the trial table's short columns on the GUI thread (a few
milliseconds for 1,000 trials, `browse.batch_figures`); phases, usage and cost come
out of the records on a worker thread (`browse.trial_costs`, and their hosts with
`engine.cluster.status.batch_hosts`), and a running batch reads only the trials that
finished since. Cost is at list price (genai-prices) by the model each trial's harness
names; where none is named or priced it says "cost unknown", never $0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QPainter
from PySide6.QtWidgets import (
    QFrame, QGridLayout, QLabel, QSizePolicy, QStyledItemDelegate, QStyleOptionViewItem,
    QTableWidget, QTableWidgetItem, QToolTip, QVBoxLayout, QWidget,
)

from engine.cluster.status import (
    ClusterStatus, NodeStatus, NodeTrials, TrialHost, batch_hosts, batch_nodes,
)
from engine.cost import fmt_usd
from engine.store import Store, StoreError
from engine.store.browse import (
    BatchFigures, CostSummary, OverviewTrial, TrialCost, batch_figures, cost_summary, locate,
    phase_stats, trial_costs,
)
from engine.text import fmt_ms, plural
from studio.off_gui import OffGuiThread
from studio.theme import OUTCOME_COLOUR, OUTCOME_GLYPH, amber_text, is_dark, phase_colour
from studio.widgets import MUTED, empty_state, make_table, scroll_area, table_item, visible

EMPTY_TEXT = "Select a batch in the browser to see how it went."
READING = "reading records…"
LIST_MAX = 5  # slowest and most expensive trials listed
RUNS_VISIBLE = 8  # rows of the runs table before it scrolls
BINS = 24  # of the duration histogram
BarRole = Qt.ItemDataRole.UserRole + 1  # a bar delegate's segments: [(value, colour), …]
TrialRole = Qt.ItemDataRole.UserRole  # the trial (or run) id a row opens
# Stacked in this order; unfinished = queued or running.
WORD = {"infra_error": "void"}
PHASE_WORD = {"slot": "slot wait"}  # the queue, before the trial's first phase
SEGMENTS = [("pass", "pass"), ("fail", "fail"), ("void", "infra_error"), ("skipped", "skipped"),
            ("unfinished", None)]


def fmt_count(n: float) -> str:
    """950, 12.3k, 24.3M."""
    if n < 1000:
        return f"{n:,.0f}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def _fit_rows(table: QTableWidget, most: int | None = None) -> None:
    """As tall as its rows (up to `most`, then it scrolls): a list inside a scrolling page."""
    rows = table.rowCount() if most is None else min(table.rowCount(), most)
    height = table.horizontalHeader().height() + 2 * table.frameWidth()
    height += sum(table.rowHeight(r) for r in range(rows)) if rows else 0
    table.setFixedHeight(height + 2)
    table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if most and
                                     table.rowCount() > most else
                                     Qt.ScrollBarPolicy.ScrollBarAlwaysOff)


class _BarDelegate(QStyledItemDelegate):
    """Draws a cell's segments (BarRole) as one bar, left to right; `scale` is the value the
    cell's full width stands for (None: each bar fills its cell, its segments in proportion)."""

    def __init__(self, parent: QWidget, scale: float | None = None) -> None:
        super().__init__(parent)
        self.scale = scale

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        super().paint(painter, option, index)
        segments: list[tuple[float, str]] = index.data(BarRole) or []
        total = self.scale or sum(v for v, _ in segments)
        if not total:
            return
        rect = option.rect.adjusted(4, 5, -4, -5)
        painter.save()
        x = float(rect.left())
        for value, colour in segments:
            width = rect.width() * value / total
            if width > 0:
                painter.fillRect(QRectF(x, rect.top(), max(width, 1.0), rect.height()),
                                 QColor(colour))
            x += width
        painter.restore()


class _Tile(QFrame):
    """One figure: a label, a big value, a line that says what it is of."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.setObjectName("tile")
        self.setStyleSheet("QFrame#tile { background: palette(base); border: 1px solid "
                           "palette(mid); border-radius: 6px; }")
        self.label = QLabel(label)
        self.label.setStyleSheet(MUTED)
        self.value = QLabel("—")
        font = QFont(self.value.font())
        font.setPointSizeF(font.pointSizeF() * 1.45)
        font.setBold(True)
        self.value.setFont(font)
        self.value.setTextFormat(Qt.TextFormat.RichText)
        self.detail = QLabel()
        self.detail.setStyleSheet(MUTED)
        self.detail.setWordWrap(True)
        for label in (self.label, self.value, self.detail):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(0)
        layout.addWidget(self.label)
        layout.addWidget(self.value)
        layout.addWidget(self.detail)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def set(self, value: str, detail: str = "", tip: str = "") -> None:
        self.value.setText(value)
        self.detail.setText(detail)
        self.setToolTip(tip)


class _MsAxis(pg.AxisItem):
    def tickStrings(self, values: Sequence[float], scale: float, spacing: float) -> list[str]:
        return [fmt_ms(v) if v >= 0 else "" for v in values]


class DurationPlot(pg.PlotWidget):
    """A histogram of trial durations, stacked by outcome: one BarGraphItem per outcome."""

    OUTCOMES = ("pass", "fail", "infra_error")

    def __init__(self) -> None:
        super().__init__(axisItems={"bottom": _MsAxis(orientation="bottom")})
        self.setBackground(None)
        self.setMouseEnabled(x=False, y=False)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.getPlotItem().getAxis("left").setWidth(34)
        self.setFixedHeight(150)
        self.items = {o: pg.BarGraphItem(x0=[], x1=[], y0=[], y1=[], pen=None,
                                         brush=QColor(OUTCOME_COLOUR[o])) for o in self.OUTCOMES}
        for item in self.items.values():
            self.addItem(item)
        self.counts: dict[str, np.ndarray] = {}
        self.edges = np.zeros(0)
        self.scene().sigMouseMoved.connect(self._hover)

    def bin_text(self, x_ms: float) -> str:
        """What the bar at `x_ms` stands for: "12 trials took 40s–50s: 9 pass, 3 fail"."""
        i = int(np.searchsorted(self.edges, x_ms, side="right")) - 1
        if not self.counts or not 0 <= i < BINS:
            return ""
        parts = [f"{int(self.counts[o][i])} {WORD.get(o, o)}" for o in self.OUTCOMES
                 if self.counts[o][i]]
        total = int(sum(self.counts[o][i] for o in self.OUTCOMES))
        span = f"{fmt_ms(self.edges[i])}–{fmt_ms(self.edges[i + 1])}"
        return f"{plural(total, 'trial')} took {span}" + (f": {', '.join(parts)}" if parts else "")

    def _hover(self, pos: QPointF) -> None:
        text = self.bin_text(self.getViewBox().mapSceneToView(pos).x())
        if text:
            QToolTip.showText(QCursor.pos(), text, self)
        else:
            QToolTip.hideText()

    def show_trials(self, trials: list[OverviewTrial]) -> None:
        timed = [(t.outcome, t.duration_ms) for t in trials
                 if t.outcome in self.OUTCOMES and t.duration_ms is not None]
        if not timed:
            self.counts, self.edges = {}, np.zeros(0)
            for item in self.items.values():
                item.setOpts(x0=[], x1=[], y0=[], y1=[])
            return
        top = max(ms for _, ms in timed) or 1
        edges = self.edges = np.linspace(0, top * 1.0001, BINS + 1)
        base = np.zeros(BINS)
        for outcome in self.OUTCOMES:
            values = [ms for o, ms in timed if o == outcome]
            counts = np.histogram(values, bins=edges)[0].astype(float)
            self.counts[outcome] = counts
            self.items[outcome].setOpts(x0=edges[:-1], x1=edges[1:] - top / BINS * 0.08,
                                        y0=base.copy(), y1=base + counts)
            base = base + counts
        self.setXRange(0, edges[-1], padding=0.02)
        self.setYRange(0, max(base.max(), 1), padding=0.05)


class BatchOverview(QWidget):
    """`show_batch(batch_id)`: the batch's figures, plots and lists; `refresh()` again (a
    running batch). A click on a listed trial emits `trial_activated`, on a run `run_activated`."""

    trial_activated = Signal(str)
    run_activated = Signal(str)
    costs_read = Signal(object)  # {trial id: US dollars or None}, each time more are read

    def __init__(self, store: Store, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.batch_id: str | None = None
        self.figures: BatchFigures | None = None
        self.costs: dict[str, TrialCost] = {}  # finished trials of the batch shown, by id
        self.hosts: dict[str, TrialHost] = {}  # started trials of the batch shown and their hosts
        self.cluster: ClusterStatus | None = None  # the cluster this process drives, if any
        self.cost: CostSummary | None = None
        self.reading = False  # records are being read off the GUI thread
        self._again = False  # trials finished during that read: read once more when it lands
        self._generation = 0  # a read that comes back for a batch no longer shown is dropped
        self._off_gui = OffGuiThread(self)

        self.empty = empty_state(EMPTY_TEXT)
        # Where an imported batch came from (a bundle, an Inspect AI log); hidden for our own.
        self.origin = QLabel(wordWrap=True, visible=False, textFormat=Qt.TextFormat.PlainText,
                             textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.origin.setStyleSheet(MUTED)

        self.tiles = {name: _Tile(label) for name, label in [
            ("pass_rate", "Pass rate"), ("trials", "Trials"), ("deterministic", "Deterministic"),
            ("commands", "Commands"), ("tokens", "Tokens"), ("cost", "Cost")]}
        tiles = QGridLayout()
        tiles.setSpacing(6)
        for i, tile in enumerate(self.tiles.values()):
            tiles.addWidget(tile, i // 3, i % 3)

        self.runs = make_table(["Run", "Outcomes", "Pass rate", "Det.", "Commands"])
        self.runs.setItemDelegateForColumn(1, _BarDelegate(self.runs))
        self.runs.cellClicked.connect(self._on_run_clicked)
        self.nodes_note = QLabel(wordWrap=True)
        self.nodes_note.setStyleSheet(MUTED)
        # The outcomes in words last, stretched and elided (whole in the tooltip): a node's name
        # and its figures fit beside the run grid at 1,024 px without a scroll bar.
        self.nodes = make_table(["Node", "Trials", "Slots free", "Outcomes", ""])
        self.nodes.setItemDelegateForColumn(3, _BarDelegate(self.nodes))
        self.nodes.horizontalHeader().setStretchLastSection(True)
        self.nodes.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.nodes.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.durations = DurationPlot()
        self.durations_note = QLabel()
        self.durations_note.setStyleSheet(MUTED)
        self.phases = make_table(["Phase", "Trials", "Median", "p90", ""])
        self.phase_bars = _BarDelegate(self.phases, scale=1.0)
        self.phases.setItemDelegateForColumn(4, self.phase_bars)
        self.phases_note = QLabel(READING)
        self.phases_note.setStyleSheet(MUTED)
        self.voids = make_table(["Void", "Reason", "First"])
        self.voids.cellClicked.connect(lambda row, _c: self._open(self.voids, row))
        self.voids_note = QLabel()
        self.voids_note.setStyleSheet(MUTED)
        self.slowest = make_table(["Trial", "Run", "Time"])
        self.slowest.cellClicked.connect(lambda row, _c: self._open(self.slowest, row))
        self.expensive_title = QLabel()
        self.expensive = make_table(["Trial", "Run", "Cost", "Tokens"])
        self.expensive.cellClicked.connect(lambda row, _c: self._open(self.expensive, row))
        for table in (self.runs, self.nodes, self.phases, self.voids, self.slowest, self.expensive):
            table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.slowest.setCursor(Qt.CursorShape.PointingHandCursor)
        self.expensive.setCursor(Qt.CursorShape.PointingHandCursor)
        self.voids.setCursor(Qt.CursorShape.PointingHandCursor)

        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(6, 4, 6, 6)
        column.setSpacing(6)
        column.addWidget(self.origin)
        column.addLayout(tiles)
        self.runs_heading = self._heading("Outcomes per run")  # parts may go above it
        column.addWidget(self.runs_heading)
        column.addWidget(self.runs)
        self.nodes_heading = self._heading("Nodes")
        for widget in (self.nodes_heading, self.nodes_note, self.nodes):
            column.addWidget(widget)
            widget.hide()  # shown for a batch that ran on cluster nodes
        column.addWidget(self._heading("Trial durations"))
        column.addWidget(self.durations)
        column.addWidget(self.durations_note)
        column.addWidget(self._heading("Slowest phases · time per trial"))
        column.addWidget(self.phases_note)
        column.addWidget(self.phases)
        self.voids_heading = self._heading("Void trials by reason")  # parts are inserted above it
        column.addWidget(self.voids_heading)
        column.addWidget(self.voids_note)
        column.addWidget(self.voids)
        column.addWidget(self._heading("Slowest trials"))
        column.addWidget(self.slowest)
        column.addWidget(self.expensive_title)
        column.addWidget(self.expensive)
        column.addStretch(1)
        self.scroll = scroll_area()
        self.scroll.setWidget(body)
        self.body = body

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.empty)
        layout.addWidget(self.scroll, 1)
        self._set_expensive_title("Most expensive trials")
        self._show_empty(EMPTY_TEXT)

    def insert_part(self, title: str, part: QWidget, before: QWidget) -> None:
        """A part a page adds (the failure groups): its heading and it, above `before`."""
        column = self.body.layout()
        assert isinstance(column, QVBoxLayout)
        at = column.indexOf(before)
        column.insertWidget(at, part)
        column.insertWidget(at, self._heading(title))

    @staticmethod
    def _heading(text: str) -> QLabel:
        label = QLabel(f"<b>{text}</b>")
        label.setContentsMargins(0, 6, 0, 0)
        return label

    def _set_expensive_title(self, text: str) -> None:
        self.expensive_title.setText(f"<b>{text}</b>")
        self.expensive_title.setContentsMargins(0, 6, 0, 0)

    # -- what to show ------------------------------------------------------------------

    def show_batch(self, batch_id: str) -> None:
        """The batch's figures now, its records' phases and cost when they are read; the same
        batch again (a refresh) reads only the trials that finished since."""
        try:
            located = locate(self.store, batch_id)
            if located is None or located.kind != "batch":
                self._show_empty(f"No batch {batch_id} in this store: pick one in the browser.")
                return
            figures = batch_figures(self.store, located.batch_id)
        except StoreError as e:
            self._show_empty(str(e))
            return
        if figures is None:
            self._show_empty(f"No batch {batch_id} in this store: pick one in the browser.")
            return
        if figures.batch_id != self.batch_id:
            self._generation += 1  # what is being read of the batch shown before is dropped
            self.costs, self.cost, self.reading, self.hosts = {}, None, False, {}
            self._show_nodes()
        elif figures == self.figures:
            return  # a refresh of a batch where nothing moved: no tables refilled, no read
        self.batch_id, self.figures = figures.batch_id, figures
        self.empty.hide()
        self.scroll.show()
        self._show_figures(figures)
        self._read_records(figures.batch_id)

    def refresh(self) -> None:
        if self.batch_id is not None:
            self.show_batch(self.batch_id)

    def clear(self) -> None:
        self._show_empty(EMPTY_TEXT)

    def _show_empty(self, sentence: str) -> None:
        self._generation += 1
        self.batch_id, self.figures, self.costs, self.cost = None, None, {}, None
        self.reading = self._again = False
        self.hosts = {}
        self._show_nodes()
        self.empty.setText(sentence)
        self.empty.show()
        self.scroll.hide()

    # -- the figures (short columns) -------------------------------------------------

    def _show_figures(self, f: BatchFigures) -> None:
        c = f.counts
        self.origin.setText(f"Imported from {visible(f.origin)}" if f.origin is not None else "")
        self.origin.setVisible(f.origin is not None)
        if c.pass_rate is None:
            self.tiles["pass_rate"].set("—", "nothing scored yet" if c.trials else "no trial yet",
                                        "Void and skipped trials never count (SPEC.md).")
        else:
            self.tiles["pass_rate"].set(f"{c.pass_rate:.0%}",
                                        f"{c.passed:,} of {c.scored:,} scored",
                                        "passes / (passes + fails); void and skipped never count")
        unfinished = c.trials - c.passed - c.failed - c.voided - c.skipped
        parts = [(c.passed, "pass"), (c.failed, "fail"), (c.voided, "infra_error"),
                 (c.skipped, "skipped"), (unfinished, None)]
        shown = " ".join(f"<span style='color:{self._colour(o)}'>{OUTCOME_GLYPH[o]}{n:,}</span>"
                         for n, o in parts if n)
        self.tiles["trials"].set(f"{c.trials:,}", "", "")
        self.tiles["trials"].detail.setTextFormat(Qt.TextFormat.RichText)
        self.tiles["trials"].detail.setText(shown or "none yet")
        self.tiles["trials"].setToolTip(
            f"{c.passed} pass · {c.failed} fail · {c.voided} void · {c.skipped} skipped · "
            f"{unfinished} not finished")
        deterministic = f.deterministic_runs
        self.tiles["deterministic"].set(
            f"{deterministic} of {len(f.runs)}", "runs deterministic",
            "A run is deterministic when at least two scored trials all agree on pass or fail "
            "and their command counts are within four of each other.")
        if f.command_median is None:
            self.tiles["commands"].set("—", "no scored trial")
        else:
            median = f"{f.command_median:g}"
            self.tiles["commands"].set(f"{f.command_min} · {median} · {f.command_max}",
                                       "min · median · max",
                                       "commands per scored trial: fewest, median, most")
        self._show_tokens_and_cost()
        self._show_runs(f)
        self.durations.show_trials(f.trials)
        timed = len(f.durations_ms)
        self.durations.setVisible(timed > 0)
        self.durations_note.setText(
            f"{plural(timed, 'finished trial')} · median {fmt_ms(float(np.median(f.durations_ms)))}"
            f" · slowest {fmt_ms(max(f.durations_ms))}" if timed else "No trial has finished yet.")
        self._show_voids(f)
        self._fill_trials(self.slowest, [(t, fmt_ms(t.duration_ms)) for t in f.slowest(LIST_MAX)])
        self._show_expensive()

    def _show_runs(self, f: BatchFigures) -> None:
        self.runs.setRowCount(len(f.runs))
        for row, run in enumerate(f.runs):
            c = run.counts
            unfinished = c.trials - c.passed - c.failed - c.voided - c.skipped
            values = [c.passed, c.failed, c.voided, c.skipped, unfinished]
            segments = [(v, OUTCOME_COLOUR[o]) for v, (_, o) in zip(values, SEGMENTS)]
            bar = table_item("")
            bar.setData(BarRole, segments)
            bar.setToolTip(" · ".join(f"{v} {word}" for v, (word, _) in zip(values, SEGMENTS) if v)
                           or "no trial yet")
            rate = "—" if run.pass_rate is None else f"{run.pass_rate:.0%}"
            spread = ("—" if run.command_median is None else
                      f"{run.command_min}/{run.command_median:g}/{run.command_max}")
            items = [table_item(f"{run.case_id} · {run.variant}"), bar,
                     table_item(f"{rate} of {c.scored}", align_right=True),
                     table_item("◆" if run.deterministic else "◇",
                                tip="deterministic" if run.deterministic else "not deterministic"),
                     table_item(spread, align_right=True, tip="commands min/median/max")]
            for column, item in enumerate(items):
                item.setData(TrialRole, run.id)
                self.runs.setItem(row, column, item)
        self.runs.resizeColumnsToContents()
        self.runs.setColumnWidth(1, max(self.runs.columnWidth(1), 120))
        _fit_rows(self.runs, RUNS_VISIBLE)

    def _show_voids(self, f: BatchFigures) -> None:
        self.voids.setRowCount(len(f.voids))
        for row, group in enumerate(f.voids):
            items = [table_item(str(len(group.trial_ids)), colour=amber_text(), align_right=True),
                     table_item(group.reason, tip=group.reason),
                     self._link(group.trial_ids[0])]
            for column, item in enumerate(items):
                item.setData(TrialRole, group.trial_ids[0])
                self.voids.setItem(row, column, item)
        self.voids.resizeColumnsToContents()
        self.voids.setColumnWidth(1, min(self.voids.columnWidth(1), 340))
        self.voids.setVisible(bool(f.voids))
        self.voids_note.setVisible(not f.voids)
        self.voids_note.setText("No void trial: every trial that ran had a fair try.")
        _fit_rows(self.voids)

    def _fill_trials(self, table: QTableWidget, rows: Sequence[tuple[OverviewTrial, str]]
                     | Sequence[tuple[OverviewTrial, str, str]]) -> None:
        table.setRowCount(len(rows))
        for row, (trial, *figures) in enumerate(rows):
            items = [self._link(trial.id),
                     table_item(f"{trial.case_id} · {trial.variant} #{trial.trial}",
                                colour=self._colour(trial.outcome))]
            items += [table_item(str(x), align_right=True) for x in figures]
            for column, item in enumerate(items):
                item.setData(TrialRole, trial.id)
                table.setItem(row, column, item)
        table.resizeColumnsToContents()
        _fit_rows(table)

    def _link(self, trial_id: str) -> QTableWidgetItem:
        item = table_item(trial_id, mono=True, tip=f"Open {trial_id}")
        item.setForeground(self.palette().link())
        font = item.font()
        font.setUnderline(True)
        item.setFont(font)
        return item

    @staticmethod
    def _colour(outcome: str | None) -> str:
        return amber_text() if outcome == "infra_error" else OUTCOME_COLOUR[outcome]

    # -- from the records (a worker thread) -----------------------------------------

    def _read_records(self, batch_id: str) -> None:
        """One read at a time: a running batch refreshes every second, and a read that was
        replaced by each next one would never land on a big batch."""
        if self.reading:
            self._again = True
            return
        generation, store, known = self._generation, self.store, list(self.costs)
        done = [t.id for t in self.hosts.values() if t.status == "done"]
        self.reading, self._again = True, False
        if not self.costs:
            self.phases_note.setText(READING)

        def read() -> tuple[list[TrialCost], list[TrialHost]]:
            return trial_costs(store, batch_id, skip=known), batch_hosts(store, batch_id, skip=done)

        def show(result: tuple[list[TrialCost], list[TrialHost]] | Exception) -> None:
            if generation != self._generation:
                return  # another batch is shown now
            self.reading = False
            if isinstance(result, Exception):
                self.phases_note.setText(f"Could not read the records: {result}")
                return
            costs, hosts = result
            # Finished trials keep the host read before; running ones were read again.
            self.hosts = {i: t for i, t in self.hosts.items() if t.status == "done"}
            self.hosts.update((t.id, t) for t in hosts)
            self._show_nodes()
            self.costs.update((c.id, c) for c in costs)
            self.cost = cost_summary(self.costs.values())
            self.costs_read.emit({c.id: c.cost for c in self.costs.values()})
            self._show_tokens_and_cost()
            self._show_phases()
            self._show_expensive()
            if self._again:
                self._read_records(batch_id)

        self._off_gui.run(read, show)

    # -- the nodes (a cluster batch) ----------------------------------------------------

    def show_cluster(self, status: ClusterStatus | None) -> None:
        """The cluster as the status bar last saw it: its nodes' free slots beside their trials."""
        if status != self.cluster:
            self.cluster = status
            self._show_nodes()

    def _show_nodes(self) -> None:
        nodes = batch_nodes(self.hosts.values())
        for widget in (self.nodes_heading, self.nodes_note, self.nodes):
            widget.setVisible(bool(nodes))
        if not nodes:
            return
        live = {n.name: n for n in self.cluster.nodes} if self.cluster else {}
        self.nodes.setRowCount(len(nodes))
        for row, node in enumerate(nodes):
            values = [node.outcomes.get(o or "", 0) for _, o in SEGMENTS[:-1]] + [node.running]
            words = [(v, word if word != "unfinished" else "running") for v, (word, _) in zip(values, SEGMENTS)]
            said = " · ".join(f"{v} {word}" for v, word in words if v)
            bar = table_item("", tip=said)
            bar.setData(BarRole, [(v, OUTCOME_COLOUR[o]) for v, (_, o) in zip(values, SEGMENTS)])
            items = [table_item(node.name, mono=True, tip=node.name),
                     table_item(f"{node.trials:,}", align_right=True),
                     self._slots(live.get(node.name)), bar, table_item(said, tip=said)]
            for column, item in enumerate(items):
                self.nodes.setItem(row, column, item)
        self.nodes.resizeColumnsToContents()
        self.nodes.setColumnWidth(3, 110)
        _fit_rows(self.nodes, RUNS_VISIBLE)
        self.nodes_note.setText(self._nodes_note(nodes))

    def _slots(self, node: NodeStatus | None) -> QTableWidgetItem:
        """A node's free slots as the cluster says now; its tooltip says why there is no figure."""
        if self.cluster is None:
            text, why = "—", "this studio is not connected to the cluster: no live figure"
        elif self.cluster.error:
            text, why = "—", self.cluster.error
        elif node is None:
            text, why = "—", f"not a node of the cluster at {self.cluster.address} now"
        elif not node.alive:
            text, why = "gone", "Ray reports this node gone"
        else:
            text, why = f"{node.free} of {node.slots}", f"{node.free} of {plural(node.slots, 'proctor_slot')} free now"
        return table_item(text, tip=why, align_right=True)

    def _nodes_note(self, nodes: list[NodeTrials]) -> str:
        ran = f"{plural(len(nodes), 'cluster node')} ran this batch's trials, by their records"
        if self.cluster is None or self.cluster.error:
            return ran + "."
        return f"{ran}; free slots live from the cluster at {self.cluster.address}."

    def _show_tokens_and_cost(self) -> None:
        f, cost = self.figures, self.cost
        if f is None:
            return
        if cost is None:
            self.tiles["tokens"].set(fmt_count(f.tokens), "input + output", f"{f.tokens:,} tokens")
            self.tiles["cost"].set("…", READING)
            return
        u = cost.usage
        self.tiles["tokens"].set(
            fmt_count(f.tokens), f"in {fmt_count(u.input)} · out {fmt_count(u.output)}",
            f"{u.input:,} input ({u.cache_read:,} of them read from cache), {u.output:,} output")
        models = ", ".join(cost.models) or "no model recorded"
        short = "no model recorded" if not cost.models else "no price for its model"
        why = ("no model recorded: the command harness names none" if not cost.models
               else f"no price known for {models}")
        if cost.total is None or (cost.total == 0 and cost.unpriced):  # only free trials known
            value, detail = ("cost unknown", short) if cost.unpriced else ("—", "no finished trial")
        elif cost.unpriced:
            value = f"≥ {fmt_usd(cost.total)}"  # the unknown part is not 0
            detail = f"+ {plural(cost.unpriced, 'trial')} unknown"
        else:
            value, detail = fmt_usd(cost.total), "at list prices"
        self.tiles["cost"].set(value, detail,
                               f"List prices (genai-prices) by each trial's model: {models}. "
                               f"{cost.priced} trials priced, {cost.unpriced} unknown"
                               + (f" ({why})." if cost.unpriced else "."))

    def _show_phases(self) -> None:
        stats = phase_stats(self.costs.values())
        self.phases.setRowCount(len(stats))
        self.phase_bars.scale = max((s.p90_ms for s in stats), default=0) or 1
        for row, s in enumerate(stats):
            colour = phase_colour(s.phase)
            bar = table_item("", tip=f"median {fmt_ms(s.median_ms)}, p90 {fmt_ms(s.p90_ms)}")
            # The median solid, then on to the p90 in a lighter shade.
            light = colour.lighter(160) if not is_dark() else colour.darker(160)
            bar.setData(BarRole, [(s.median_ms, colour.name()),
                                  (s.p90_ms - s.median_ms, light.name())])
            items = [table_item(PHASE_WORD.get(s.phase, s.phase)),
                     table_item(f"{s.trials:,}", align_right=True),
                     table_item(fmt_ms(s.median_ms), align_right=True),
                     table_item(fmt_ms(s.p90_ms), align_right=True), bar]
            for column, item in enumerate(items):
                self.phases.setItem(row, column, item)
        self.phases.resizeColumnsToContents()
        self.phases.horizontalHeader().setStretchLastSection(True)
        self.phases.setVisible(bool(stats))
        self.phases_note.setVisible(not stats)
        self.phases_note.setText("No finished trial has recorded a phase yet.")
        _fit_rows(self.phases)

    def _show_expensive(self) -> None:
        f = self.figures
        if f is None:
            return
        priced = sorted((c for c in self.costs.values() if c.cost), key=lambda c: -(c.cost or 0))
        by_id = {t.id: t for t in f.trials}
        rows: list[tuple[OverviewTrial, str, str]]
        if priced:
            self._set_expensive_title("Most expensive trials")
            rows = [(by_id[c.id], fmt_usd(c.cost or 0), fmt_count(by_id[c.id].tokens))
                    for c in priced[:LIST_MAX] if c.id in by_id]
        else:
            known = self.cost is not None
            self._set_expensive_title("Most tokens · cost unknown" if known else "Most tokens")
            rows = [(t, "cost unknown" if known else "…", fmt_count(t.tokens))
                    for t in f.most_tokens(LIST_MAX)]
        self._fill_trials(self.expensive, rows)

    # -- links -------------------------------------------------------------------------

    def _open(self, table: QTableWidget, row: int) -> None:
        item = table.item(row, 0)
        if item is not None and (trial_id := item.data(TrialRole)):
            self.trial_activated.emit(trial_id)

    def _on_run_clicked(self, row: int, _column: int) -> None:
        item = self.runs.item(row, 0)
        if item is not None and (run_id := item.data(TrialRole)):
            self.run_activated.emit(run_id)
