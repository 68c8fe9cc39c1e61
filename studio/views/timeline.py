"""The timeline: phases as rows, time on x (STUDIO.md "Timeline").

Trial mode draws one row per phase kind, batch mode one row per trial. Bars are
drawn by one `BarGraphItem` per colour (never one item per bar) and reused across
redraws, so a live trial can be redrawn at 5–20 Hz for the cost of a few numpy
arrays. Hover and click find the span under the mouse by bisecting the sorted
starts of the row, so they stay cheap with thousands of bars.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPalette, QPen, QShowEvent
from PySide6.QtWidgets import QToolTip, QVBoxLayout, QWidget

from engine.models import TrialRecord
from engine.store.browse import TrialSpans
from studio.models.live import LiveTrials
from studio.spans import Span, spans_from_record
from engine.text import fmt_ms
from studio.theme import GROUP_COLOUR, OUTCOME_COLOUR, PHASE_GROUP, PHASE_ORDER, is_dark

BAR_HEIGHT = 0.62  # of a row; the gap keeps neighbouring rows apart
MIN_BAR_PX = 4  # zero-length phases (env, an empty setup) still show as a sliver
OUTLINE = "outline"  # key of the item that outlines failed and aborted spans
OUTLINED = {"failed", "error", "aborted"}

Rows = list[tuple[str, list[Span]]]


class RowAxis(pg.AxisItem):
    """A y axis that shows one label per row, sized so no label is cut."""

    rows: list[str] = []

    def set_rows(self, labels: list[str]) -> None:
        self.rows = list(labels)
        self.setTicks([[(float(i), label) for i, label in enumerate(labels)], []])
        fm = QFontMetrics(self.font() if self.style.get("tickFont") is None else self.style["tickFont"])
        widest = max((fm.horizontalAdvance(label) for label in labels), default=0)
        self.setWidth(widest + 16)


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


class TimelineView(QWidget):
    """Trial mode: `show_record` or `show_spans`; batch mode: `show_batch`. Wheel zooms x,
    drag pans x. A running trial's spans come from the live model, drawn to its clock."""

    span_clicked = Signal(str, object)  # phase, index (int | None)
    row_clicked = Signal(int)  # batch mode: the trial's row

    def __init__(self, live: LiveTrials | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.live = live
        self._following: str | None = None  # the running trial shown, by id
        self._stale = False  # its clock moved while the view was hidden
        self.axis = RowAxis(orientation="left")
        self.plot = pg.PlotWidget(axisItems={"left": self.axis})
        self.plot.setMouseTracking(True)
        self.vb: pg.ViewBox = self.plot.getViewBox()
        self.vb.setMouseEnabled(x=True, y=False)
        self.vb.setMenuEnabled(False)
        self.vb.invertY(True)  # the first phase on top, as it is read
        self.vb.disableAutoRange()
        self.plot.hideButtons()
        self.plot.getPlotItem().setLabel("bottom", "time", units="s")
        self.plot.showGrid(x=True, y=False, alpha=0.15)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

        self._items: dict[str, pg.BarGraphItem] = {}  # colour key -> item, created once
        self._shown: set[str] = set()  # keys of items currently in the plot
        self._geometry: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # x0, x1, y
        self._labels = _BarLabels()
        self._labels.setZValue(3)  # over the bars it names
        self._now_line = pg.InfiniteLine(angle=90, movable=False)
        self.plot.addItem(self._labels)
        self.plot.addItem(self._now_line)
        self._rows: list[_Row] = []
        self._mode = ""
        self._now_ms = 0
        self._user_zoomed = False
        self.hover_text = ""

        self.vb.sigRangeChangedManually.connect(self._on_user_zoom)
        self.vb.sigXRangeChanged.connect(self._apply_geometry)
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
        self._draw("trial", _phase_rows(spans), now_ms)

    def show_batch(self, rows: Rows, now_ms: int | None = None) -> None:
        """One row per trial ("case#n variant"); spans in ms from the batch's start."""
        self._following = None
        self._draw("batch", rows, now_ms)

    def reset_zoom(self) -> None:
        self._user_zoomed = False
        self._fit()

    def bar_items(self) -> dict[str, pg.BarGraphItem]:
        """The bar items in the plot, by colour key (a phase group, or "outline")."""
        return {key: self._items[key] for key in self._shown}

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
        text = f"{span.label} · {status} · {fmt_ms(self._end(span) - span.start_ms)}"
        if span.detail:
            text += f"\n{span.detail}"
        return text

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
            self._draw("trial", _phase_rows(trial.spans.spans), now)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self._stale:
            self._draw_following()

    def _on_trial_finished(self, trial_id: str, _outcome: str) -> None:
        if trial_id == self._following:  # its record follows; until then, as it last was
            self._following = None

    # --- drawing ------------------------------------------------------------------------

    def _draw(self, mode: str, rows: Rows, now_ms: int | None) -> None:
        if mode != self._mode:  # another kind of picture: start from the whole of it
            self._mode, self._user_zoomed = mode, False
        self._rows = [_Row(label, sorted(spans, key=lambda s: s.start_ms)) for label, spans in rows]
        for row in self._rows:
            row.starts = [s.start_ms for s in row.spans]
        known = [s.end_ms if s.end_ms is not None else s.start_ms for _, spans in rows for s in spans]
        self._now_ms = now_ms if now_ms is not None else max(known, default=0)

        bars: dict[str, tuple[list[float], list[float], list[float]]] = {}
        labels: list[tuple[float, float, float, str]] = []
        for y, row in enumerate(self._rows):
            for span in row.spans:
                x0, x1 = span.start_ms / 1000, self._end(span) / 1000
                keys = [PHASE_GROUP.get(span.phase, "end")]
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
        for key in self._shown - set(bars):
            self.plot.removeItem(self._items[key])
        for key in set(bars) - self._shown:
            self.plot.addItem(self._item(key))
        self._shown = set(bars)
        self._labels.set_labels(labels)
        running = any(s.end_ms is None for row in self._rows for s in row.spans)
        self._now_line.setVisible(now_ms is not None and running)
        self._now_line.setValue(self._now_ms / 1000)

        if self.row_labels != self.axis.rows:
            self.axis.set_rows(self.row_labels)
            self.plot.getPlotItem().layout.activate()  # the new width now, so no label is cut
        self.vb.setLimits(yMin=-0.5, yMax=max(len(self._rows), 1) - 0.5,
                          xMin=-1.0, xMax=max(self._now_ms / 1000 * 1.5, 1.0), minXRange=0.001)
        self._fit()
        self._apply_geometry()

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
        """Widths get a floor of a few pixels, so they follow the zoom."""
        floor = self._min_width_s()
        for key, (x0, x1, y) in self._geometry.items():
            self._items[key].setOpts(x0=x0, width=np.maximum(x1 - x0, floor), y=y, height=BAR_HEIGHT)

    def _fit(self) -> None:
        self.vb.setYRange(-0.5, max(len(self._rows), 1) - 0.5, padding=0)
        if not self._user_zoomed:  # a little room on both sides, so no bar sits on the axis
            end = max(self._now_ms / 1000, 0.001)
            self.vb.setXRange(-0.01 * end, end * 1.02, padding=0)

    def _min_width_s(self) -> float:
        px = self.vb.viewPixelSize()[0] if self.vb.width() > 0 else 0.0
        return MIN_BAR_PX * px

    def _end(self, span: Span) -> int:
        return span.end_ms if span.end_ms is not None else max(self._now_ms, span.start_ms)

    # --- mouse ---------------------------------------------------------------------------

    def _on_user_zoom(self, *_: object) -> None:
        self._user_zoomed = True

    def _data_point(self, scene_pos: QPointF) -> QPointF | None:
        if not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        return self.vb.mapSceneToView(scene_pos)

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        point = self._data_point(scene_pos)
        span = self.span_at(point.x(), point.y()) if point is not None else None
        text = self.describe(span) if span is not None else ""
        if span is not None and self._mode == "batch":
            text += f"\n{self._rows[int(round(point.y()))].label}"
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
        span = self.span_at(point.x(), point.y()) if point is not None else None
        if point is not None and self._mode == "batch" and 0 <= round(point.y()) < len(self._rows):
            self.row_clicked.emit(int(round(point.y())))
        if span is not None:
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


def batch_rows(records: Sequence[TrialSpans | TrialRecord]) -> Rows:
    """Batch-mode rows (from the store's `batch_spans`, or records): each trial's spans
    moved to the batch's clock."""
    def started(record: TrialSpans | TrialRecord) -> float:
        if not record.started_at:
            return 0.0
        return datetime.fromisoformat(record.started_at.replace("Z", "+00:00")).timestamp() * 1000

    t0 = min((started(r) for r in records if r.started_at), default=0.0)
    rows: Rows = []
    for record in records:
        shift = int(started(record) - t0) if record.started_at else 0
        spans = [Span(s.phase, s.index, s.start_ms + shift, s.end_ms + shift, s.status, s.detail)
                 for s in record.phases]
        rows.append((f"{record.case_id}#{record.trial} {record.variant}", spans))
    return rows
