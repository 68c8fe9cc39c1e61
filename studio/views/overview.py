"""The Overview panel: how a trial ended and where its time, tokens and files went.

Outcome and reason first (what a reader looks for), then the facts, timings,
usage, the phases table and the captured artifacts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol, cast

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout, QFrame, QGridLayout, QHBoxLayout, QHeaderView, QLabel, QSizePolicy, QTableWidget,
    QVBoxLayout, QWidget,
)

from engine.cost import fmt_usd, models_of, recorded_cost
from engine.models import TrialRecord
from engine.redact import MARK
from engine.text import fmt_ms, plural
from studio.theme import GROUP_COLOUR, VALIDATION_COLOUR, amber_text, phase_colour
from studio.widgets import (
    MUTED, TextBlock, card, failure_line, fmt_bytes, make_table, outcome_pill, rich, scroll_area,
    table_item, tag, wrapped,
)


class NoteWidget(Protocol):
    """What the Outcome card needs of a note editor: studio.views.note.NoteEditor, made by
    the page's `note_editor(trial_id)` (panels never import one another)."""

    target: str

    def flush(self) -> None: ...


# (Timings field, label, phase group): the groups' hues, so the bar reads like the timeline.
# Colours are looked up when drawn, so a theme switch (studio/theme.py) reaches them.
TIMING_PARTS = [
    ("slot_ms", "slot wait", "wait"),
    ("setup_ms", "setup", "prep"),
    ("agent_ms", "agent", "agent"),
    ("diff_ms", "diff", "diff"),
    ("checks_ms", "checks", "check"),
    ("judge_ms", "judge", "judge"),
    ("teardown_ms", "teardown", "end"),
]


def _part_colour(group: str) -> str:
    """A timing part's colour in the current theme; the diff is the agent's, lighter."""
    if group == "diff":
        return QColor(GROUP_COLOUR["agent"]).lighter(145).name()
    return GROUP_COLOUR[group]


def fmt_time(iso: str | None) -> str:
    """An ISO timestamp in the desktop's local time, to the second."""
    if not iso:
        return "—"
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def trial_ms(record: TrialRecord) -> int | None:
    if record.started_at and record.finished_at:
        try:
            start = datetime.fromisoformat(record.started_at)
            end = datetime.fromisoformat(record.finished_at)
            return int((end - start).total_seconds() * 1000)
        except ValueError:
            pass
    return max((p.end_ms for p in record.phases), default=None)


def cost_line(record: TrialRecord) -> str:
    """"cost $0.0042 · gpt-4o-mini", or why it is unknown: never $0 for tokens with no price."""
    cost, models = recorded_cost(record), models_of(record)
    if cost is not None:
        return f"cost {fmt_usd(cost)}" + (f" · {', '.join(models)}" if models else "")
    if not models:
        return "cost unknown: no model recorded"
    return f"cost unknown: no price for {', '.join(models)} (add it to [prices] in proctor.toml)"


class TimingBar(QWidget):
    """One horizontal bar cut into the trial's time parts, in their phase groups' colours."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[str, int, str]] = []
        self.setFixedHeight(16)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(300, 16)

    def set_parts(self, parts: list[tuple[str, int, str]]) -> None:
        self.parts = [p for p in parts if p[1] > 0]
        self.setToolTip("\n".join(f"{label}: {fmt_ms(ms)}" for label, ms, _ in self.parts))
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(self.palette().midlight())
        p.drawRoundedRect(QRectF(0, 0, self.width(), self.height()), 3, 3)
        total = sum(ms for _, ms, _ in self.parts)
        x = 0.0
        for _, ms, colour in self.parts:
            # Every part that took any time stays visible, however short.
            w = max(2.0, self.width() * ms / total) if total else 0.0
            p.setBrush(QColor(colour))
            p.drawRect(QRectF(x, 0, min(w, self.width() - x), self.height()))
            x += w
        p.end()


def _fit_rows(table: QTableWidget) -> None:
    """As tall as its rows: the panel scrolls, not each table inside it."""
    height = table.horizontalHeader().height() + 2 * table.frameWidth()
    height += sum(table.rowHeight(r) for r in range(table.rowCount()))
    scrollbar = table.horizontalScrollBar()
    table.setFixedHeight(height + (scrollbar.sizeHint().height() if scrollbar.isVisible() else 0))


def _badged_cell(table: QTableWidget, row: int, column: int, text: str) -> None:
    """A cell with redaction marks drawn as badges (an item can only show plain text)."""
    table.setItem(row, column, table_item(text))
    if MARK in text:
        table.item(row, column).setText("")  # the label draws it; the item keeps it for tooltips
        table.item(row, column).setData(Qt.ItemDataRole.UserRole, text)
        label = QLabel(rich(text.replace("\n", " ")))
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setContentsMargins(4, 0, 4, 0)
        label.setToolTip(text)
        table.setCellWidget(row, column, label)


def _section(title: str) -> tuple[QFrame, QVBoxLayout]:
    frame, body = card()
    heading = QLabel(title)
    font = QFont(heading.font())
    font.setBold(True)
    heading.setFont(font)
    body.addWidget(heading)
    return frame, body


USAGE_COLUMNS = 3
SIDE_BY_SIDE_PX = 720  # two cards of a row fit beside each other from this viewport width


class OverviewView(QWidget):
    """`show_record(record)`; None shows an empty state. Given `note_editor`, the Outcome
    card holds the trial's note editor."""

    def __init__(self, parent: QWidget | None = None,
                 note_editor: Callable[[str], QWidget] | None = None) -> None:
        super().__init__(parent)
        self.record: TrialRecord | None = None
        self._note_editor = note_editor
        self.note: NoteWidget | None = None  # kept while the same trial is shown again (live)
        # The widgets of the record shown, made anew by each show_record.
        self.reason: QLabel | None = None
        self.void_fields: QLabel | None = None
        self.timing_bar: TimingBar | None = None
        self.timing_legend: QLabel | None = None
        self.usage_values: dict[str, QLabel] = {}
        self.cost_label: QLabel | None = None
        self.phases_table: QTableWidget | None = None
        self.artifacts_table: QTableWidget | None = None
        self.artifact_text: TextBlock | None = None
        self.scroll = scroll_area()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll)
        self.show_record(None)

    def show_record(self, record: TrialRecord | None) -> None:
        if self.note is not None and (record is None or record.id != self.note.target):
            self.note.flush()  # an edit waiting for a pause in typing is saved, not lost
            self.note = None
        self.record = record
        self.reason = self.void_fields = self.timing_legend = self.artifact_text = None
        self.timing_bar = self.phases_table = self.artifacts_table = None
        self.usage_values, self.cost_label = {}, None
        self._pairs: list[QBoxLayout] = []
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.setContentsMargins(12, 12, 12, 12)
        column.setSpacing(10)
        if record is None:
            empty = wrapped("Select a trial to see how it ended, where its time went and what "
                            "it used.", style=MUTED)
            column.addWidget(empty)
        else:
            for left, right in ((self._outcome(record), self._facts(record)),
                                (self._timings(record), self._usage(record))):
                row = QBoxLayout(QBoxLayout.Direction.LeftToRight)
                row.setSpacing(10)
                row.addWidget(left, 3)
                row.addWidget(right, 2)
                column.addLayout(row)
                self._pairs.append(row)
            column.addWidget(self._phases(record))
            column.addWidget(self._artifacts(record))
        column.addStretch(1)
        self.scroll.setWidget(inner)
        self._arrange()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._arrange()

    def _arrange(self) -> None:
        """Cards side by side where both fit, else one above the other: the area scrolls down
        only, so a card pushed past its right edge could not be seen at all."""
        side_by_side = self.scroll.viewport().width() >= SIDE_BY_SIDE_PX
        direction = QBoxLayout.Direction.LeftToRight if side_by_side else QBoxLayout.Direction.TopToBottom
        for row in self._pairs:
            row.setDirection(direction)

    # --- sections ---

    def _outcome(self, record: TrialRecord) -> QFrame:
        frame, body = _section("Outcome")
        pill = QLabel(outcome_pill(record.outcome, record.failure))
        pill.setTextFormat(Qt.TextFormat.RichText)
        font = QFont(pill.font())
        font.setPointSizeF(font.pointSizeF() * 1.15)
        pill.setFont(font)
        body.addWidget(pill)
        f = record.failure
        self.reason = wrapped(f.reason if f else failure_line(record))
        body.addWidget(self.reason)
        if f and f.where:
            body.addWidget(wrapped(f"where: {f.where}", style=MUTED))
        if record.void_fields:
            missing = ", ".join(record.void_fields)
            self.void_fields = wrapped(f"Void: no {missing} were recorded; this trial does not "
                                       f"count toward the pass rate.",
                                       style=f"color: {amber_text()}; font-weight: 600;")
            body.addWidget(self.void_fields)
        if self._note_editor is not None:
            if self.note is None:
                self.note = cast(NoteWidget, self._note_editor(record.id))
            # Moved out of the old card, which the scroll area deletes.
            body.addWidget(cast(QWidget, self.note))
        body.addStretch(1)
        return frame

    def _facts(self, record: TrialRecord) -> QFrame:
        frame, body = _section("Trial")
        grid = QGridLayout()
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(3)
        rows: list[tuple[str, str | QWidget]] = [
            ("case", f"{record.case_id} #{record.trial} · {record.variant}"),
            ("id", record.id),
            ("batch", record.batch_id),
            ("trigger", record.trigger),
            ("image", record.image or "—"),
            ("started", fmt_time(record.started_at)),
            ("finished", f"{fmt_time(record.finished_at)} · {fmt_ms(trial_ms(record))}"),
            ("work", plural(len(record.turns), "turn") + " · "
                     + plural(record.command_count, "command")),
        ]
        if record.tags:
            chips = QWidget()
            chip_row = QHBoxLayout(chips)
            chip_row.setContentsMargins(0, 0, 0, 0)
            chip_row.setSpacing(4)
            for t in record.tags:
                chip_row.addWidget(tag(t, "palette(midlight)", "palette(text)"))
            chip_row.addStretch(1)
            rows.append(("tags", chips))
        for r, (key, value) in enumerate(rows):
            k = QLabel(key)
            k.setStyleSheet(MUTED)
            grid.addWidget(k, r, 0, Qt.AlignmentFlag.AlignTop)
            if isinstance(value, str):
                value_label = QLabel(value)
                value_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                value_label.setWordWrap(True)
                value = value_label
            grid.addWidget(value, r, 1)
        grid.setColumnStretch(1, 1)
        body.addLayout(grid)
        body.addStretch(1)
        return frame

    def _timings(self, record: TrialRecord) -> QFrame:
        frame, body = _section("Time")
        timings = record.timings.model_dump()
        parts = [(label, int(timings.get(key, 0)), _part_colour(group)) for key, label, group in TIMING_PARTS
                 if key != "slot_ms" or timings.get("slot_ms")]
        self.timing_bar = TimingBar()
        self.timing_bar.set_parts(parts)
        body.addWidget(self.timing_bar)
        # Entries joined by &nbsp; inside, plain spaces between: a wrap never splits one.
        legend = " &nbsp; ".join(f"<span style='color:{colour}'>■</span>&nbsp;{label}&nbsp;"
                                 f"<b>{fmt_ms(ms)}</b>" for label, ms, colour in parts if ms > 0)
        self.timing_legend = QLabel(legend)
        self.timing_legend.setTextFormat(Qt.TextFormat.RichText)
        self.timing_legend.setWordWrap(True)
        body.addWidget(self.timing_legend)
        slot = " · waiting for a slot is not counted by the timeout" if timings["slot_ms"] else ""
        body.addWidget(wrapped(f"whole trial {fmt_ms(trial_ms(record))}{slot}", style=MUTED))
        body.addStretch(1)
        return frame

    def _usage(self, record: TrialRecord) -> QFrame:
        frame, body = _section("Tokens")
        u = record.usage
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(0)
        # Three a row: five side by side made the card 357 px at least, wider than a narrow pane.
        stats = [("input", u.input), ("output", u.output), ("reasoning", u.reasoning),
                 ("cache read", u.cache_read), ("cache write", u.cache_write)]
        for i, (name, value) in enumerate(stats):
            number = QLabel("—" if value is None else f"{value:,}")
            font = QFont(number.font())
            font.setBold(True)
            number.setFont(font)
            caption = QLabel(name)
            caption.setStyleSheet(MUTED)
            row, column = divmod(i, USAGE_COLUMNS)
            grid.addWidget(number, 2 * row, column)
            grid.addWidget(caption, 2 * row + 1, column)
            self.usage_values[name] = number
        grid.setColumnStretch(USAGE_COLUMNS, 1)
        body.addLayout(grid)
        self.cost_label = wrapped(cost_line(record), style=MUTED)
        body.addWidget(self.cost_label)
        for warning in record.usage_warnings:
            body.addWidget(wrapped(f"⚠ {warning}",
                                   style=f"color: {amber_text()}; font-weight: 600;"))
        body.addStretch(1)
        return frame

    def _phases(self, record: TrialRecord) -> QFrame:
        frame, body = _section(f"Phases ({len(record.phases)})")
        table = make_table(["phase", "status", "start", "duration", "detail"])
        table.setRowCount(len(record.phases))
        for r, s in enumerate(record.phases):
            swatch = QPixmap(10, 10)
            swatch.fill(phase_colour(s.phase))
            name = table_item(s.phase if s.index is None else f"{s.phase} {s.index}")
            name.setIcon(swatch)
            table.setItem(r, 0, name)
            colour = (amber_text() if s.status in ("error", "aborted")
                      else VALIDATION_COLOUR.get(s.status) if s.status in ("failed", "skipped") else None)
            table.setItem(r, 1, table_item(s.status, colour=colour))
            table.setItem(r, 2, table_item(fmt_ms(s.start_ms), align_right=True))
            table.setItem(r, 3, table_item(fmt_ms(s.end_ms - s.start_ms), align_right=True))
            _badged_cell(table, r, 4, s.detail)
        header = table.horizontalHeader()
        for c in range(4):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        _fit_rows(table)
        self.phases_table = table
        body.addWidget(table)
        return frame

    def _artifacts(self, record: TrialRecord) -> QFrame:
        frame, body = _section(f"Artifacts ({len(record.artifacts)})")
        self.artifacts_table = table = make_table(["path", "bytes", "sha256"])
        if not record.artifacts:
            note = "No workspace files captured (c.capture(path) saves one into the record)."
            body.addWidget(wrapped(note, style=MUTED, code=False))
            return frame
        table.setRowCount(len(record.artifacts))
        for r, a in enumerate(record.artifacts):
            table.setItem(r, 0, table_item(a.path, mono=True))
            table.setItem(r, 1, table_item(fmt_bytes(a.bytes), align_right=True,
                                           tip=f"{a.bytes:,} bytes"))
            table.setItem(r, 2, table_item(a.sha256[:12] + "…", mono=True, tip=a.sha256))
        header = table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        _fit_rows(table)
        body.addWidget(table)
        self.artifact_holder = QVBoxLayout()
        body.addLayout(self.artifact_holder)
        table.currentCellChanged.connect(lambda row, *_: self.show_artifact(row))
        table.selectRow(0)
        return frame

    def show_artifact(self, row: int) -> None:
        """Show the text of artifact `row` under the table, when it was captured as text."""
        if self.record is None or not 0 <= row < len(self.record.artifacts):
            return
        while self.artifact_holder.count():
            old = self.artifact_holder.takeAt(0).widget()
            if old is not None:
                old.deleteLater()
        artifact = self.record.artifacts[row]
        if artifact.text is None:
            self.artifact_text = None
            note = (f"{artifact.path} was not saved as text (binary, too large, or it held a "
                    f"password).")
            self.artifact_holder.addWidget(wrapped(note, style=MUTED, code=False))
            return
        self.artifact_text = TextBlock(artifact.text, lines=14)
        self.artifact_holder.addWidget(self.artifact_text)
