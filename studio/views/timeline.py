"""The timeline: phases as rows, time on x (STUDIO.md "Timeline").

Trial mode draws one row per phase kind, batch mode one row per trial. Bars are
drawn by one `BarGraphItem` per colour (never one item per bar) and reused across
redraws, so a live trial can be redrawn at 5–20 Hz for the cost of a few numpy
arrays. Hover and click find the span under the mouse by bisecting the sorted
starts of the row, so they stay cheap with thousands of bars.

A batch of hundreds of trials keeps its rows at a readable height and scrolls
(the wheel scrolls, Ctrl+wheel zooms time); only the rows in view get bars, and
time fits the rows in view until the user zooms. "All rows" (⇕) shows the whole
batch at once as a density picture (trials per pixel row, coloured by phase
group), where a click zooms back to readable rows there. Row labels are painted
only where they fit, elided in the middle; hover names a row's trial, a click
opens it (`trial_clicked`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from math import ceil, floor

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette, QPen, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QScrollBar, QToolButton, QToolTip, QVBoxLayout, QWidget

from engine.models import TrialRecord
from engine.store.browse import TrialSpans
from studio.models.live import LiveTrials
from studio.spans import Span, spans_from_record
from engine.text import fmt_ms
from studio.theme import (
    GROUP_COLOUR, OUTCOME_COLOUR, OUTCOME_GLYPH, PHASE_GROUP, PHASE_ORDER, is_dark,
)

BAR_HEIGHT = 0.62  # of a row; the gap keeps neighbouring rows apart
MIN_BAR_PX = 4  # zero-length phases (env, an empty setup) still show as a sliver
OUTLINE = "outline"  # key of the item that outlines failed and aborted spans
OUTLINED = {"failed", "error", "aborted"}
ROW_PX = 20  # a batch row: a label and a bar a user can read and point at
DENSITY_BELOW_PX = 3  # rows thinner than this are one picture, not thousands of slivers
LABEL_SHARE = 0.33  # of the view's width, at most, for the row labels; longer ones are elided
LABEL_MIN_PX = 110  # ... but never narrower than this
SCROLL_ROWS = 3  # rows per wheel notch
# A trial's wait for a concurrency slot is not its work: shown collapsed, a stub this share
# of the trial's own time left of its start, until a click shows it to scale.
WAIT_STUB = 0.03
WAIT_WEIGHT = 0.35  # in the density picture, a trial waiting for a slot counts this much
OUTCOME_WORD = {"infra_error": "void", None: "running"}
# The density picture's colours: the phase groups, then a failed span in the fail colour;
# per key its red, green, blue, its weight (a slot wait counts less than work) and a count.
DENSITY_KEYS = [*GROUP_COLOUR, "fail"]


def _density_channels() -> np.ndarray:
    """The channels in the current theme's colours (studio/theme.py swaps them light or dark)."""
    return np.array(
        [(*QColor(GROUP_COLOUR.get(key, OUTCOME_COLOUR["fail"])).getRgb()[:3],
          WAIT_WEIGHT if key == "wait" else 1.0, 1.0) for key in DENSITY_KEYS], dtype=np.float64)

Rows = list[tuple[str, list[Span]]]


@dataclass
class TrialRow:
    """A batch-mode row: a trial's name and its spans on the batch's clock, with what hover
    and click need. It unpacks as `(label, spans)`, as a trial-mode row does."""

    label: str
    spans: list[Span]
    trial_id: str = ""
    case_id: str = ""
    trial: int = 0
    variant: str = ""
    outcome: str | None = None

    def __iter__(self) -> Iterator[object]:
        return iter((self.label, self.spans))


class RowAxis(pg.AxisItem):
    """A y axis that paints the labels of the rows in view, elided in the middle to the label
    column, and only where they fit: pyqtgraph's own would draw every row's text, one over
    another when rows are thin. Batch rows get their outcome's glyph by the bars."""

    def __init__(self) -> None:
        super().__init__(orientation="left")
        self.rows: list[str] = []
        self.marks: list[tuple[str, str]] = []  # per row: glyph, colour (batch mode only)
        self.max_px = 240  # the label column's widest; the view sets it from its own width
        self._glyphs: list[tuple[QRectF, str, str]] = []  # painted with the labels
        self.setTicks([[], []])  # no ticks of pyqtgraph's own: the labels are painted here

    def _font(self) -> QFont:
        return self.font() if self.style.get("tickFont") is None else self.style["tickFont"]

    def _gutter(self) -> int:
        return QFontMetrics(self._font()).horizontalAdvance("✓") + 6 if self.marks else 0

    def set_rows(self, labels: list[str], marks: list[tuple[str, str]] | None = None) -> None:
        self.rows, self.marks = list(labels), list(marks or [])
        fm = QFontMetrics(self._font())
        widest = max((fm.horizontalAdvance(label) for label in labels), default=0)
        self.setWidth(min(widest, self.max_px) + self._gutter() + 16)
        self.picture = None
        self.update()

    def generateDrawSpecs(self, p: QPainter):  # noqa: N802 (pyqtgraph's name)
        specs = super().generateDrawSpecs(p)
        view = self.linkedView()
        self._glyphs = []
        if specs is None or view is None or not self.rows or view.height() <= 0:
            return specs
        axis_spec = specs[0]
        top, bottom = view.viewRange()[1]

        def centre(row: float) -> float:
            return self.mapFromScene(view.mapViewToScene(QPointF(0, row))).y()

        fm = QFontMetrics(self._font())
        row_px = abs(centre(1) - centre(0))
        gutter = self._gutter()
        width = self.width() - gutter - 12
        flags = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if row_px * 3 < fm.height():  # too thin for names: row numbers at a round step
            step = _round_step(2 * fm.height() / max(row_px, 1e-9))
            return axis_spec, [], [
                (QRectF(4, centre(row) - fm.height() / 2, width, fm.height()), flags, f"{row + 1:,}")
                for row in range(step - 1, min(len(self.rows), floor(bottom) + 1), step) if row >= top]
        height = max(row_px - 1, fm.height())
        texts: list[tuple[QRectF, int, str]] = []
        last_bottom = float("-inf")
        for row in range(max(0, ceil(top)), min(len(self.rows), floor(bottom) + 1)):
            y = centre(row)
            rect = QRectF(4, y - height / 2, width, height)
            if rect.top() < last_bottom:  # crowded: the label above keeps its place
                continue
            last_bottom = rect.bottom()
            text = _elide(fm, self.rows[row], int(width))
            texts.append((rect, flags, text))
            if row < len(self.marks):
                glyph, colour = self.marks[row]
                self._glyphs.append((QRectF(4 + width + 2, rect.top(), gutter, height), glyph, colour))
        return axis_spec, [], texts

    def drawPicture(self, p: QPainter, axisSpec, tickSpecs, textSpecs) -> None:  # noqa: N802, N803
        super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for rect, glyph, colour in self._glyphs:
            p.setPen(QColor(colour))
            p.drawText(rect, flags, glyph)


def _round_step(rows: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … rows that is at least `rows`."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= rows:
                return step * factor
        step *= 10


def _elide(fm: QFontMetrics, label: str, width: int) -> str:
    """A label that fits `width`: a trial's "#n variant" is kept whole while its case name
    has room for a few letters (elided in its middle, where case names differ least); else
    the whole label is elided in the middle."""
    if fm.horizontalAdvance(label) <= width:
        return label
    case, mark, tail = label.rpartition("#")
    room = width - fm.horizontalAdvance(mark + tail)
    while case and room >= fm.horizontalAdvance("abc…"):
        text = fm.elidedText(case, Qt.TextElideMode.ElideMiddle, room) + mark + tail
        if fm.horizontalAdvance(text) <= width:  # the parts joined can be a few pixels wider
            return text
        room -= 2
    return fm.elidedText(label, Qt.TextElideMode.ElideMiddle, width)


class _RowsViewBox(pg.ViewBox):
    """A view box whose wheel scrolls the rows when there are more than fit; Ctrl+wheel
    (and the bare wheel when all rows fit) zooms time."""

    def __init__(self) -> None:
        super().__init__()
        self.scroll_rows: Callable[[int], bool] | None = None  # wheel delta -> scrolled?

    def wheelEvent(self, ev, axis=None) -> None:  # noqa: N802 (Qt's name)
        zoom = bool(ev.modifiers() & Qt.KeyboardModifier.ControlModifier) \
            or ev.orientation() == Qt.Orientation.Horizontal  # a sideways swipe zooms, as before
        if not zoom and self.scroll_rows is not None and self.scroll_rows(ev.delta()):
            ev.accept()
            return
        super().wheelEvent(ev, axis)


class _BarLabels(pg.GraphicsObject):
    """Names drawn inside the bars wide enough for them ("turn 1", "check 2").

    One item paints every label in device coordinates, so text keeps its size
    while the x axis zooms, and labels that do not fit are skipped.
    """

    def __init__(self) -> None:
        super().__init__()
        self._labels: list[tuple[float, float, float, str]] = []  # x0, x1, y, text
        self._bounds = QRectF()

    def set_labels(self, labels: list[tuple[float, float, float, str]]) -> None:
        self.prepareGeometryChange()
        self._labels = labels
        if labels:
            x0 = min(l[0] for l in labels)
            x1 = max(l[1] for l in labels)
            ys = [l[2] for l in labels]
            self._bounds = QRectF(x0, min(ys) - 0.5, x1 - x0, max(ys) - min(ys) + 1)
        else:
            self._bounds = QRectF()
        self.update()

    def boundingRect(self) -> QRectF:
        return self._bounds

    def paint(self, p: QPainter, *args: object) -> None:
        to_device = p.transform()
        p.resetTransform()
        p.setPen(QColor("#ffffff"))
        fm = p.fontMetrics()
        for x0, x1, y, text in self._labels:
            rect = to_device.mapRect(QRectF(x0, y - BAR_HEIGHT / 2, x1 - x0, BAR_HEIGHT))
            # "check 2" where it fits, else just "2", else nothing
            for candidate in (text, text.rpartition(" ")[2]):
                if rect.width() >= fm.horizontalAdvance(candidate) + 8:
                    p.drawText(rect.adjusted(4, 0, -2, 0), Qt.AlignmentFlag.AlignVCenter, candidate)
                    break


@dataclass
class _Row:
    label: str
    spans: list[Span]  # sorted by start
    starts: list[int] = field(default_factory=list)
    trial: TrialRow | None = None  # batch mode: the trial the row stands for


class TimelineView(QWidget):
    """Trial mode: `show_record` or `show_spans`; batch mode: `show_batch`. Wheel zooms x,
    drag pans x; a batch with more rows than fit scrolls with the wheel and zooms time
    with Ctrl+wheel. A running trial's spans come from the live model, drawn to its clock."""

    span_clicked = Signal(str, object)  # phase, index (int | None)
    row_clicked = Signal(int)  # batch mode: the trial's row
    trial_clicked = Signal(str)  # batch mode: the trial's id, to open it

    def __init__(self, live: LiveTrials | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.live = live
        self._following: str | None = None  # the running trial shown, by id
        self._stale = False  # its clock moved while the view was hidden
        self.axis = RowAxis()
        self.vb = _RowsViewBox()
        self.vb.scroll_rows = self._scroll_by_wheel
        self.plot = pg.PlotWidget(viewBox=self.vb, axisItems={"left": self.axis})
        self.plot.setMouseTracking(True)
        self.vb.setMouseEnabled(x=True, y=False)
        self.vb.setMenuEnabled(False)
        self.vb.invertY(True)  # the first phase on top, as it is read
        self.vb.disableAutoRange()
        self.plot.hideButtons()
        self.plot.getPlotItem().setLabel("bottom", "time", units="s")
        self.plot.showGrid(x=True, y=False, alpha=0.15)
        self.plot.getAxis("bottom").setSIPrefixEnableRanges(((0.0, 1.0),))  # ms, else s: never "ks"

        # Batch mode, when its rows do not fit: a scroll bar, and the whole batch at once.
        self.all_rows = QToolButton(text="⇕", checkable=True, autoRaise=True, visible=False)
        self.all_rows.toggled.connect(self._on_all_rows)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical, visible=False)
        self.scrollbar.valueChanged.connect(self._fit_rows)
        side = QVBoxLayout()
        side.setContentsMargins(0, 0, 0, 0)
        side.setSpacing(0)
        side.addWidget(self.all_rows, 0, Qt.AlignmentFlag.AlignTop)
        side.addWidget(self.scrollbar, 1)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.plot, 1)
        layout.addLayout(side)

        self._items: dict[str, pg.BarGraphItem] = {}  # colour key -> item, created once
        self._shown: set[str] = set()  # keys of items currently in the plot
        self._geometry: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # x0, x1, y
        self._flat = (np.zeros(0), np.zeros(0), np.zeros(0, int), np.zeros(0, int))  # x0, x1, row, key
        self._labels = _BarLabels()
        self._labels.setZValue(3)  # over the bars it names
        self.density = pg.ImageItem(axisOrder="row-major", visible=False)
        self.density.setZValue(1)
        self._now_line = pg.InfiniteLine(angle=90, movable=False)
        self._now_line.setVisible(False)  # until a running trial is drawn
        self.plot.addItem(self._labels)
        self.plot.addItem(self.density)
        self.plot.addItem(self._now_line)
        self._rows: list[_Row] = []
        self._mode = ""
        self._batch: set[str] = set()  # the trials of the batch shown, to keep its place
        self._applied: object = None  # what the bars were last fitted to
        self._now_ms = 0
        self._user_zoomed = False
        self.hover_text = ""
        self.wait_expanded = False  # trial mode: the slot wait to scale, not a stub
        self._wait_ms: int | None = None  # trial mode: the wait drawn collapsed, its real length
        self._spans: list[Span] = []  # trial mode: what show_spans last drew

        self.vb.sigRangeChangedManually.connect(self._on_user_zoom)
        self.vb.sigXRangeChanged.connect(self._apply_geometry)
        self.vb.sigResized.connect(self._fit_rows)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self._apply_palette()
        if live is not None:
            # On the clock only, 5 times a second, however many batches of events arrive.
            live.ticked.connect(self._draw_live)
            live.trial_finished.connect(self._on_trial_finished)

    # --- what callers use -------------------------------------------------------------

    @property
    def row_labels(self) -> list[str]:
        return [row.label for row in self._rows]

    def show_record(self, record: TrialRecord | None) -> None:
        """A trial's phases: as stored, or, while it runs, as the live model folds them."""
        running = record is not None and record.outcome is None and self.live is not None
        if running and self.live.trial(record.id) is not None:
            self._following = record.id
            self._draw_following()
            return
        self.show_spans(spans_from_record(record) if record is not None else [])

    def show_spans(self, spans: list[Span], now_ms: int | None = None) -> None:
        """One row per phase kind in SPEC order; call again with more spans to grow it."""
        self._following = None
        self._spans = spans
        self._draw("trial", self._trial_rows(spans), now_ms)

    def _trial_rows(self, spans: list[Span]) -> Rows:
        """One row per phase; a collapsed wait's row says how long it was."""
        rows = _phase_rows(self._collapse_wait(spans))
        if self._wait_ms is None:
            return rows
        return [(f"slot {fmt_ms(self._wait_ms)} ▸" if label == "slot" else label, row_spans)
                for label, row_spans in rows]

    def _collapse_wait(self, spans: list[Span]) -> list[Span]:
        """Trial mode: the wait for a slot (before 0) as one short stub, unless expanded."""
        waits = [s for s in spans if s.phase == "slot"]
        self._wait_ms = None
        if not waits or self.wait_expanded:
            return spans
        work_end = max((self._end(s) for s in spans if s.phase != "slot"), default=1000)
        self._wait_ms = sum(self._end(s) - s.start_ms for s in waits)
        stub = Span("slot", None, -max(1, int(WAIT_STUB * work_end)), 0, waits[-1].status,
                    waits[-1].detail)
        return [stub] + [s for s in spans if s.phase != "slot"]

    def toggle_wait(self) -> None:
        """Show the wait for a slot to scale, or as a stub again."""
        self.wait_expanded = not self.wait_expanded
        self._user_zoomed = False
        if self._following is not None:
            self._draw_following()
        else:
            self.show_spans(self._spans, self._now_ms if any(s.end_ms is None for s in self._spans) else None)

    def show_batch(self, rows: Sequence[TrialRow | tuple[str, list[Span]]],
                   now_ms: int | None = None) -> None:
        """One row per trial ("case#n variant"); spans in ms from the batch's start. The same
        batch again (grown, while it runs) keeps its scroll and zoom; another starts at its
        top, whole."""
        self._following = None
        batch = {row.trial_id if isinstance(row, TrialRow) else row[0] for row in rows}
        if batch.isdisjoint(self._batch):  # no trial in common: another batch
            self._user_zoomed = False
            self.scrollbar.setValue(0)
            self.all_rows.setChecked(False)
        self._batch = batch
        self._draw("batch", rows, now_ms)

    def reset_zoom(self) -> None:
        self._user_zoomed = False
        self._fit()

    def bar_items(self) -> dict[str, pg.BarGraphItem]:
        """The bar items in the plot, by colour key (a phase group, or "outline")."""
        return {key: self._items[key] for key in self._shown if self._items[key].isVisible()}

    def span_at(self, x_s: float, y: float) -> Span | None:
        """The span under a point in data coordinates (seconds, row)."""
        row = int(round(y))
        if not 0 <= row < len(self._rows) or abs(y - row) > BAR_HEIGHT / 2:
            return None
        spans, starts = self._rows[row].spans, self._rows[row].starts
        x_ms = x_s * 1000
        slack = self._min_width_s() * 1000  # a sliver is as wide as it is drawn
        last = bisect_right(starts, x_ms) - 1
        # Spans in a row do not overlap, but slivers may touch: look at a few to the left.
        for span in reversed(spans[max(0, last - 2): last + 1]):
            if x_ms <= max(self._end(span), span.start_ms + slack):
                return span
        return None

    def describe(self, span: Span) -> str:
        """The hover text: "phase · status · duration", then the detail."""
        running = span.end_ms is None
        status = "running" if running else span.status
        if span.phase == "slot" and self._mode == "trial":
            shown = "drawn short: click to show it to scale" if self._wait_ms is not None \
                else "click to draw it short"
            wait = self._wait_ms if self._wait_ms is not None else self._end(span) - span.start_ms
            return f"waited {fmt_ms(wait)} for a free slot, before the trial started ({shown})"
        text = f"{span.label} · {status} · {fmt_ms(self._end(span) - span.start_ms)}"
        if span.detail:
            text += f"\n{span.detail}"
        return text

    def describe_trial(self, row: int, span: Span | None = None) -> str:
        """A batch row's hover text: "case #n · variant", "✓ pass · duration" (from its first
        phase after any slot wait), then the span under the mouse, if any."""
        trial, spans = self._rows[row].trial, self._rows[row].spans
        work = [s for s in spans if s.phase != "slot"]
        duration = max(self._end(s) for s in work) - work[0].start_ms if work else None
        if trial is None:
            lines = [self._rows[row].label, fmt_ms(duration)]
        else:
            word = OUTCOME_WORD.get(trial.outcome, trial.outcome)
            lines = [f"{trial.case_id} #{trial.trial} · {trial.variant}",
                     f"{OUTCOME_GLYPH.get(trial.outcome, '?')} {word} · {fmt_ms(duration)}"]
        if span is not None:
            lines.append(self.describe(span))
        return "\n".join(lines)

    # --- a running trial ---------------------------------------------------------------

    def _draw_live(self) -> None:
        """On the clock: the running trial to now, unless another tab is current."""
        if self.isHidden():
            self._stale = self._following is not None  # drawn when it is shown again
        else:
            self._draw_following()

    def _draw_following(self) -> None:
        self._stale = False
        trial = self.live.trial(self._following) if self.live and self._following else None
        if trial is not None:
            now = trial.spans.now_ms(self.live.now_ms())
            self._draw("trial", self._trial_rows(trial.spans.spans), now)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        widest = max(LABEL_MIN_PX, int(self.width() * LABEL_SHARE))
        if widest != self.axis.max_px:  # a narrow window keeps room for the bars
            self.axis.max_px = widest
            self.axis.set_rows(self.axis.rows, self.axis.marks)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self._stale:
            self._draw_following()

    def _on_trial_finished(self, trial_id: str, _outcome: str) -> None:
        if trial_id == self._following:  # its record follows; until then, as it last was
            self._following = None

    # --- drawing ------------------------------------------------------------------------

    def _draw(self, mode: str, rows: Sequence[TrialRow | tuple[str, list[Span]]],
              now_ms: int | None) -> None:
        if mode != self._mode:  # another kind of picture: start from the whole of it
            self._mode, self._user_zoomed = mode, False
        self._applied = None
        self._rows = []
        for row in rows:
            label, spans = row
            self._rows.append(_Row(label, sorted(spans, key=lambda s: s.start_ms),
                                   trial=row if isinstance(row, TrialRow) else None))
        for row in self._rows:
            row.starts = [s.start_ms for s in row.spans]
        known = [s.end_ms if s.end_ms is not None else s.start_ms for row in self._rows for s in row.spans]
        self._now_ms = now_ms if now_ms is not None else max(known, default=0)

        bars: dict[str, tuple[list[float], list[float], list[float]]] = {}
        labels: list[tuple[float, float, float, str]] = []
        flat_key: list[int] = []
        density_index = {key: i for i, key in enumerate(DENSITY_KEYS)}
        for y, row in enumerate(self._rows):
            for span in row.spans:
                x0, x1 = span.start_ms / 1000, self._end(span) / 1000
                keys = [PHASE_GROUP.get(span.phase, "end")]
                flat_key.append(density_index["fail" if span.status in OUTLINED else keys[0]])
                if span.status in OUTLINED:
                    keys.append(OUTLINE)
                for key in keys:
                    x0s, x1s, ys = bars.setdefault(key, ([], [], []))
                    x0s.append(x0)
                    x1s.append(x1)
                    ys.append(y)
                if mode == "trial" and span.index is not None:
                    labels.append((x0, x1, y, span.label))

        self._geometry = {k: (np.array(a), np.array(b), np.array(c)) for k, (a, b, c) in bars.items()}
        if mode == "batch":  # what the density picture is made of: every span once
            spans = [s for row in self._rows for s in row.spans]
            self._flat = (np.array([s.start_ms / 1000 for s in spans]),
                          np.array([self._end(s) / 1000 for s in spans]),
                          np.array([y for y, row in enumerate(self._rows) for _ in row.spans], dtype=int),
                          np.array(flat_key, dtype=int))
        for key in self._shown - set(bars):
            self.plot.removeItem(self._items[key])
        for key in set(bars) - self._shown:
            self.plot.addItem(self._item(key))
        self._shown = set(bars)
        self._labels.set_labels(labels)
        running = any(s.end_ms is None for row in self._rows for s in row.spans)
        self._now_line.setVisible(now_ms is not None and running)
        self._now_line.setValue(self._now_ms / 1000)

        marks = [(OUTCOME_GLYPH.get(r.trial.outcome, "?"), OUTCOME_COLOUR.get(r.trial.outcome, "#888"))
                 for r in self._rows if r.trial is not None]
        if self.row_labels != self.axis.rows or marks != self.axis.marks:
            self.axis.set_rows(self.row_labels, marks)
            self.plot.getPlotItem().layout.activate()  # the new width now, so no label is cut
        earliest = min((s.start_ms for row in self._rows for s in row.spans), default=0) / 1000
        self.vb.setLimits(yMin=-0.5, yMax=max(len(self._rows), 1) - 0.5,
                          xMin=min(-1.0, earliest * 1.1), xMax=max(self._now_ms / 1000 * 1.5, 1.0),
                          minXRange=0.001)
        self._fit()

    def _item(self, key: str) -> pg.BarGraphItem:
        if key not in self._items:
            empty = np.zeros(0)
            if key == OUTLINE:
                pen = QPen(QColor(OUTCOME_COLOUR["fail"]), 2)
                pen.setCosmetic(True)
                item = pg.BarGraphItem(x0=empty, width=empty, y=empty, height=BAR_HEIGHT, pen=pen, brush=None)
                item.setZValue(2)  # above the fills it outlines
            else:
                item = pg.BarGraphItem(x0=empty, width=empty, y=empty, height=BAR_HEIGHT,
                                       pen=self._separator(), brush=self._fill(key))
            self._items[key] = item
        return self._items[key]

    def _fill(self, key: str) -> QColor:
        colour = QColor(GROUP_COLOUR[key])
        if key == "wait":  # a slot wait is pale on either background, so work stands out
            colour.setAlpha(150 if not is_dark() else 70)
        return colour

    def _separator(self) -> QPen:
        """A hairline in the background colour, so touching bars (check 1, check 2) stay two."""
        pen = QPen(self.palette().color(QPalette.ColorRole.Base), 1)
        pen.setCosmetic(True)
        return pen

    def _apply_geometry(self, *_: object) -> None:
        """Widths get a floor of a few pixels, so they follow the zoom. Only the rows in view
        (and a screenful around them) get bars, so a batch of thousands paints as fast as a
        screenful; all rows at once are one density picture instead."""
        dense = self._dense()
        applied = (self.vb.viewRange(), self.vb.width(), self.vb.height(), dense)
        if applied == self._applied:  # a y fit and its x fit both ask: draw once
            return
        self._applied = applied
        for key in self._shown:
            self._items[key].setVisible(not dense)
        self.density.setVisible(dense)
        if dense:
            self._paint_density()
            return
        floor_s = self._min_width_s()
        top, bottom = self.vb.viewRange()[1]
        margin = bottom - top
        for key, (x0, x1, y) in self._geometry.items():
            if self._mode == "batch":
                near = (y >= top - margin) & (y <= bottom + margin)
                x0, x1, y = x0[near], x1[near], y[near]
            self._items[key].setOpts(x0=x0, width=np.maximum(x1 - x0, floor_s), y=y, height=BAR_HEIGHT)

    def _dense(self) -> bool:
        return self._mode == "batch" and self._row_px() < DENSITY_BELOW_PX

    def _row_px(self) -> float:
        top, bottom = self.vb.viewRange()[1]
        return self.vb.height() / max(bottom - top, 1e-9)

    def _paint_density(self) -> None:
        """The whole batch as a picture a pixel per row bin and time bin: each pixel's colour
        mixes the phase groups of the trials in it, its opacity is the share of them at work."""
        height, width = max(int(self.vb.height()), 1), max(int(self.vb.width()), 1)
        n = len(self._rows)
        bins = max(min(n, height), 1)
        (left, right), _ = self.vb.viewRange()
        x0, x1, rows, keys = self._flat
        scale = width / max(right - left, 1e-9)
        b0 = np.clip(np.floor((x0 - left) * scale), 0, width).astype(int)
        b1 = np.clip(np.ceil((x1 - left) * scale), 0, width).astype(int)
        b1 = np.where((b1 == b0) & (b0 < width), b0 + 1, b1)  # a sliver still shows
        inside = b1 > b0
        row_bin = rows[inside] * bins // max(n, 1)
        # Each span adds its colour, its weight and a count from its first pixel on and takes
        # them away after its last; running sums over x then give every pixel's totals.
        starts = row_bin * (width + 1) + b0[inside]
        ends = row_bin * (width + 1) + b1[inside]
        at = np.concatenate([starts, ends])
        channels = _density_channels()[keys[inside]]  # r, g, b, weight, 1 per span
        size = bins * (width + 1)
        sums = np.stack([np.bincount(at, np.concatenate([c, -c]), minlength=size) for c in channels.T])
        sums = np.cumsum(sums.reshape(5, bins, width + 1), axis=2)[:, :, :width]
        rgb = sums[:3] / np.maximum(sums[4], 1)
        trials_per_bin = np.bincount(np.arange(n) * bins // max(n, 1), minlength=bins)
        share = sums[3] / np.maximum(trials_per_bin, 1)[:, None]
        image = np.empty((bins, width, 4), dtype=np.uint8)
        image[..., :3] = np.clip(rgb, 0, 255).transpose(1, 2, 0)
        image[..., 3] = np.clip(share * 255, 0, 255)
        self.density.setImage(image, autoLevels=False)
        self.density.setRect(QRectF(left, -0.5, right - left, n))

    def _fit(self) -> None:
        self._fit_rows()

    def _fit_x(self) -> None:
        """The whole time, or, scrolled through a big batch, the time the rows in view worked
        (their slot waits run off to the left), until the user zooms."""
        if self._user_zoomed:
            return
        start, end = 0.0, max(self._now_ms / 1000, 0.001)
        if self._mode == "trial":  # from the wait for a slot, drawn short or to scale
            start = min((s.start_ms for row in self._rows for s in row.spans), default=0) / 1000
            start = min(start, 0.0)
        if self.scrollbar.isVisible():
            top, bottom = self.vb.viewRange()[1]
            work = [(s.start_ms, self._end(s)) for row in self._rows[max(0, ceil(top)): floor(bottom) + 1]
                    for s in row.spans if s.phase != "slot"]
            if work:
                start = min(a for a, _ in work) / 1000
                end = max(max(b for _, b in work) / 1000, start + 0.001)
        room = 0.01 * (end - start)  # a little room on both sides, so no bar sits on the axis
        self.vb.setXRange(start - room, end + 2 * room, padding=0)

    def _fit_rows(self, *_: object) -> None:
        """Every row when they fit (or "all rows" is on), else a scrolled screenful of
        readable rows from the scroll bar's row."""
        n = max(len(self._rows), 1)
        height = self.vb.height()
        overflow = self._mode == "batch" and height > 0 and n * ROW_PX > height
        self.all_rows.setVisible(overflow)
        self.all_rows.setToolTip(f"All {n:,} trials at once, as a density picture; click a row to read it")
        scrolled = overflow and not self.all_rows.isChecked()
        self.scrollbar.setVisible(scrolled)
        top, bottom = -0.5, n - 0.5
        if scrolled:
            visible = height / ROW_PX
            self.scrollbar.blockSignals(True)  # the range clamps the value: one redraw, below
            self.scrollbar.setRange(0, ceil(n - visible))
            self.scrollbar.setPageStep(max(int(visible), 1))
            self.scrollbar.setSingleStep(1)
            self.scrollbar.blockSignals(False)
            top = self.scrollbar.value() - 0.5
            bottom = min(top + visible, n - 0.5)
            top = bottom - visible
        self.vb.setYRange(top, bottom, padding=0)
        self._fit_x()
        self._apply_geometry()

    def _min_width_s(self) -> float:
        px = self.vb.viewPixelSize()[0] if self.vb.width() > 0 else 0.0
        return MIN_BAR_PX * px

    def _end(self, span: Span) -> int:
        return span.end_ms if span.end_ms is not None else max(self._now_ms, span.start_ms)

    # --- scrolling -----------------------------------------------------------------------

    def _scroll_by_wheel(self, delta: int) -> bool:
        if not self.scrollbar.isVisible():
            return False
        self.scrollbar.setValue(self.scrollbar.value() - round(delta / 120 * SCROLL_ROWS))
        return True

    def _on_all_rows(self, _checked: bool) -> None:
        self._fit_rows()

    def scroll_to_row(self, row: int) -> None:
        """Readable rows with `row` in the middle of the view."""
        self.all_rows.setChecked(False)
        self.scrollbar.setValue(max(0, row - int(self.vb.height() / ROW_PX / 2)))

    # --- mouse ---------------------------------------------------------------------------

    def _on_user_zoom(self, *_: object) -> None:
        self._user_zoomed = True

    def _data_point(self, scene_pos: QPointF) -> QPointF | None:
        if not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        return self.vb.mapSceneToView(scene_pos)

    def _batch_row(self, scene_pos: QPointF) -> int | None:
        """Batch mode: the trial's row under a point, anywhere in its row or on its label."""
        on_label = self.axis.sceneBoundingRect().contains(scene_pos)
        if self._mode != "batch" or not (on_label or self.vb.sceneBoundingRect().contains(scene_pos)):
            return None
        point = self.vb.mapSceneToView(scene_pos)
        row = int(round(point.y()))
        return row if 0 <= row < len(self._rows) else None

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        point = self._data_point(scene_pos)
        span = self.span_at(point.x(), point.y()) if point is not None and not self._dense() else None
        row = self._batch_row(scene_pos)
        if row is not None:
            text = self.describe_trial(row, span)
        else:
            text = self.describe(span) if span is not None else ""
        if text != self.hover_text:
            self.hover_text = text
            if text:
                where = self.plot.mapToGlobal(self.plot.mapFromScene(scene_pos))
                QToolTip.showText(where, text, self.plot)
            else:
                QToolTip.hideText()

    def _on_mouse_clicked(self, event: object) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        if event.double():  # double click: back to the whole trial
            self.reset_zoom()
            return
        point = self._data_point(event.scenePos())
        row = self._batch_row(event.scenePos())
        if row is not None:
            if self.all_rows.isChecked():  # the density picture: zoom in to read the rows there
                self.scroll_to_row(row)
                return
            self.row_clicked.emit(row)
            trial = self._rows[row].trial
            if trial is not None:
                self.trial_clicked.emit(trial.trial_id)
            return
        span = self.span_at(point.x(), point.y()) if point is not None else None
        if span is not None and span.phase == "slot" and self._mode == "trial":
            self.toggle_wait()
        elif span is not None:
            self.span_clicked.emit(span.phase, span.index)

    # --- light and dark ------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_palette()
        super().changeEvent(event)

    def _apply_palette(self) -> None:
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setTextPen(text)
            faint = QColor(text)
            faint.setAlpha(90)
            axis.setPen(faint)
        now = QColor(OUTCOME_COLOUR["running"])
        self._now_line.setPen(pg.mkPen(now, width=1, style=Qt.PenStyle.DashLine))
        for key, item in self._items.items():
            if key != OUTLINE:
                item.setOpts(pen=self._separator(), brush=self._fill(key))


def _phase_rows(spans: list[Span]) -> Rows:
    """Trial mode: one row per phase kind, in SPEC order, then any other."""
    by_phase: dict[str, list[Span]] = {}
    for span in spans:
        by_phase.setdefault(span.phase, []).append(span)
    order = PHASE_ORDER + sorted(set(by_phase) - set(PHASE_ORDER))
    return [(phase, by_phase[phase]) for phase in order if phase in by_phase]


def batch_rows(records: Sequence[TrialSpans | TrialRecord]) -> list[TrialRow]:
    """Batch-mode rows (from the store's `batch_spans`, or records): each trial's spans
    moved to the batch's clock."""
    def started(record: TrialSpans | TrialRecord) -> float:
        if not record.started_at:
            return 0.0
        return datetime.fromisoformat(record.started_at.replace("Z", "+00:00")).timestamp() * 1000

    t0 = min((started(r) for r in records if r.started_at), default=0.0)
    rows: list[TrialRow] = []
    for record in records:
        shift = int(started(record) - t0) if record.started_at else 0
        spans = [Span(s.phase, s.index, s.start_ms + shift, s.end_ms + shift, s.status, s.detail)
                 for s in record.phases]
        rows.append(TrialRow(f"{record.case_id}#{record.trial} {record.variant}", spans, record.id,
                             record.case_id, record.trial, record.variant, record.outcome))
    return rows
