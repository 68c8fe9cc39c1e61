"""The Compare panel: two trials side by side, aligned step by step, with where they part.

On top, who A and B are and the figures as deltas (B − A). Then one table of
the aligned trajectories (A | gutter | B), so both sides scroll together by
construction; the first divergence is selected and scrolled to on open, and
n/p step through the divergences. Under it, tabs: per-turn files (only in A,
only in B, different, with each side's diff), checks and judge verdicts side by
side with the first differing one marked, and both phase timelines on one axis.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractItemModel, QPoint, QRect, QSize, Qt
from PySide6.QtGui import (
    QColor, QFont, QFontMetrics, QKeySequence, QPainter, QPaintEvent, QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPlainTextEdit, QPushButton, QSplitter,
    QStackedWidget, QTableView, QTabWidget, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget,
)

from engine.compare import (
    Checks, Comparison, Deltas, FileStatus, TurnFiles, align, checks, deltas, turn_files,
)
from engine.cost import fmt_usd
from engine.models import PhaseSpan, TrialRecord, Validation
from engine.text import fmt_ms, plural
from studio.models.compare import GUTTER, AlignedModel, tint
from studio.theme import (
    GROUP_COLOUR, OUTCOME_COLOUR, VALIDATION_COLOUR, VALIDATION_GLYPH, amber_text, mono_font,
    phase_colour,
)
from studio.widgets import (
    MUTED, ElidedLabel, empty_state, failure_line, make_table, muted_colour, outcome_pill,
    table_item, visible,
)

FILE_STATUS_WORDS: dict[FileStatus, str] = {"only_a": "only in A", "only_b": "only in B",
                                            "different": "different"}
_FILE_GLYPH: dict[FileStatus, str] = {"only_a": "−", "only_b": "+", "different": "~"}


# --- text ---------------------------------------------------------------------------------------

def signed_ms(ms: int | None) -> str:
    """A duration delta: +1.2s, −638ms, ±0ms; — when either side lacks it."""
    if ms is None:
        return "—"
    return ("+" if ms > 0 else "−" if ms < 0 else "±") + fmt_ms(abs(ms))


def signed(n: int | None) -> str:
    if n is None:
        return "—"
    return f"+{n:,}" if n > 0 else f"−{-n:,}" if n < 0 else "±0"


def who(record: TrialRecord) -> str:
    """"writes_greet #1 · scripted": which trial this side is."""
    return f"{record.case_id} #{record.trial} · {record.variant}"


def deltas_line(d: Deltas) -> str:
    tokens = [f"{name.replace('_', ' ')} {signed(d.tokens[name])}"
              for name in ("input", "output") if d.tokens.get(name) is not None]
    return (f"B − A   time {signed_ms(d.duration_ms)} · commands {signed(d.command_count)}"
            f" · tokens {', '.join(tokens) or '—'} · cost {signed_usd(d.cost_usd)}")


def signed_usd(dollars: float | None) -> str:
    """A cost delta: +$0.42, −$0.0031, ±$0.00; "unknown" when either side's price is."""
    if dollars is None:
        return "unknown"
    return ("+" if dollars > 0 else "−" if dollars < 0 else "±") + fmt_usd(abs(dollars))


def over(colour: QColor | None, base: QColor) -> QColor:
    """A see-through colour as it shows over `base` (rich text has no alpha)."""
    if colour is None:
        return base
    a = colour.alphaF()
    return QColor(*(round(c * a + b * (1 - a)) for c, b in
                    zip(colour.getRgb()[:3], base.getRgb()[:3], strict=True)))


def validation_words(v: Validation | None) -> str:
    return "— (not run)" if v is None else f"{VALIDATION_GLYPH[v.status]} {v.status}"


# --- blocks of this panel -----------------------------------------------------------------------

class PhaseStrip(QWidget):
    """A's and B's phases as two rows of bars on one time axis, coloured by phase group."""

    ROW_PX = 22
    LABEL_PX = 28
    RIGHT_PX = 56  # room for the trial's total after its last bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sides: list[tuple[str, list[PhaseSpan]]] = []
        self.setMouseTracking(True)
        self.setMinimumHeight(2 * self.ROW_PX + 60)

    def set_phases(self, a: list[PhaseSpan], b: list[PhaseSpan]) -> None:
        # The axis is each trial's own time from its start: the wait for a slot before it
        # (a span below 0) is not the trial's, and would be drawn over the labels.
        self.sides = [(side, [p for p in spans if p.end_ms > 0]) for side, spans in (("A", a), ("B", b))]
        self.update()

    @property
    def end_ms(self) -> int:
        return max((p.end_ms for _, spans in self.sides for p in spans), default=0) or 1

    def sizeHint(self) -> QSize:
        return QSize(600, 2 * self.ROW_PX + 60)

    def _x(self, ms: int) -> int:
        width = self.width() - self.LABEL_PX - self.RIGHT_PX
        return self.LABEL_PX + int(ms / self.end_ms * width)

    def span_at(self, pos: QPoint) -> PhaseSpan | None:
        side = (pos.y() - 8) // self.ROW_PX
        if not 0 <= side < len(self.sides):
            return None
        for span in self.sides[side][1]:
            x0 = self._x(span.start_ms)
            if x0 <= pos.x() <= max(self._x(span.end_ms), x0 + 2):
                return span
        return None

    def mouseMoveEvent(self, event) -> None:  # noqa: ANN001 - QMouseEvent
        span = self.span_at(event.position().toPoint())
        if span is None:
            self.setToolTip("")
            return
        name = span.phase if span.index is None else f"{span.phase} {span.index}"
        self.setToolTip(f"{name} · {span.status} · {fmt_ms(span.end_ms - span.start_ms)}")

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        muted = QColor(muted_colour(self))
        text = self.palette().text().color()
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() - 1.5))
        metrics = QFontMetrics(small)
        for row, (label, spans) in enumerate(self.sides):
            top = 8 + row * self.ROW_PX
            painter.setFont(self.font())
            painter.setPen(text)
            painter.drawText(QRect(0, top, self.LABEL_PX - 6, self.ROW_PX - 4),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, label)
            painter.setFont(small)
            for span in spans:
                x0, x1 = self._x(span.start_ms), self._x(span.end_ms)
                # One pixel of gap so that back-to-back phases read as separate bars.
                bar = QRect(x0, top + 2, max(x1 - x0 - 1, 2), self.ROW_PX - 6)
                colour = phase_colour(span.phase)
                painter.fillRect(bar, colour)
                if span.status in ("failed", "error", "aborted"):
                    painter.setPen(QColor(OUTCOME_COLOUR["fail"]))
                    painter.drawRect(bar.adjusted(0, 0, -1, -1))
                name = span.phase if span.index is None else f"{span.phase} {span.index}"
                if metrics.horizontalAdvance(name) + 6 <= bar.width():
                    painter.setPen(QColor("#ffffff"))
                    painter.drawText(bar, Qt.AlignmentFlag.AlignCenter, name)
            end = max((p.end_ms for p in spans), default=0)
            painter.setPen(muted)
            painter.drawText(QRect(self._x(end) + 4, top, 60, self.ROW_PX - 4),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             fmt_ms(end))
        # The axis: five ticks over the longer trial.
        axis = 8 + len(self.sides) * self.ROW_PX + 2
        painter.setPen(muted)
        painter.drawLine(self.LABEL_PX, axis, self._x(self.end_ms), axis)
        for i in range(5):
            ms = self.end_ms * i // 4
            x = self._x(ms)
            painter.drawLine(x, axis, x, axis + 4)
            painter.drawText(QRect(x - 40, axis + 5, 80, 16), Qt.AlignmentFlag.AlignHCenter,
                             fmt_ms(ms))
        # What the colours mean, once, under the axis.
        x = self.LABEL_PX
        for group, words in (("prep", "preparation"), ("agent", "agent"), ("check", "checks"),
                             ("judge", "judge"), ("end", "teardown")):
            painter.fillRect(QRect(x, axis + 28, 10, 10), QColor(GROUP_COLOUR[group]))
            painter.setPen(muted)
            painter.drawText(QPoint(x + 14, axis + 37), words)
            x += 22 + metrics.horizontalAdvance(words)
        painter.end()


class FilesPane(QWidget):
    """Per turn, the files only in A, only in B, or different; a file's two diffs side by side."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["File", "Where"])
        self.tree.setRootIsDecorated(True)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(False)
        self.tree.currentItemChanged.connect(self._on_current)
        self.a_diff, self.b_diff = QPlainTextEdit(), QPlainTextEdit()
        for pane in (self.a_diff, self.b_diff):
            pane.setReadOnly(True)
            pane.setFont(mono_font())
            pane.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.empty = empty_state()
        diffs = QSplitter(Qt.Orientation.Horizontal)
        for side, pane in (("A", self.a_diff), ("B", self.b_diff)):
            box = QWidget()
            column = QVBoxLayout(box)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(2)
            caption = QLabel(side)
            caption.setStyleSheet(f"{MUTED} font-weight: 600;")
            column.addWidget(caption)
            column.addWidget(pane)
            diffs.addWidget(box)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tree)
        split.addWidget(diffs)
        # Two to three: at 1,024 px a quarter of the pane left the paths no room at all.
        split.setSizes([400, 600])
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(split)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self.turns: list[TurnFiles] = []

    def set_turns(self, turns: list[TurnFiles]) -> None:
        self.turns = turns
        self.tree.clear()
        self.a_diff.clear()
        self.b_diff.clear()
        if not any(t.files for t in turns):
            self.empty.setText("Both trials changed the same files in the same way, turn by turn."
                               if turns else "Neither trial changed a file.")
            self.stack.setCurrentIndex(0)
            return
        self.stack.setCurrentIndex(1)
        first: QTreeWidgetItem | None = None
        for turn in turns:
            parent = QTreeWidgetItem([f"Turn {turn.turn}",
                                      plural(len(turn.files), "file") if turn.files else "same"])
            parent.setFlags(parent.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.tree.addTopLevelItem(parent)
            for delta in turn.files:
                child = QTreeWidgetItem([f"{_FILE_GLYPH[delta.status]} {visible(delta.path)}",
                                         FILE_STATUS_WORDS[delta.status]])
                child.setData(0, Qt.ItemDataRole.UserRole, delta)
                child.setFont(0, mono_font())
                background = tint(delta.status if delta.status != "different" else "changed", 45)
                for column in (0, 1):
                    child.setBackground(column, background)
                parent.addChild(child)
                first = first or child
            parent.setExpanded(True)
        if first is not None:
            self.tree.setCurrentItem(first)

    def listed(self, turn: int, status: FileStatus) -> list[str]:
        """The paths the tree shows under `turn` as `status` (what a user reads)."""
        for i in range(self.tree.topLevelItemCount()):
            parent = self.tree.topLevelItem(i)
            if parent.text(0) == f"Turn {turn}":
                return [parent.child(j).data(0, Qt.ItemDataRole.UserRole).path
                        for j in range(parent.childCount())
                        if parent.child(j).data(0, Qt.ItemDataRole.UserRole).status == status]
        return []

    def _on_current(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None) -> None:
        delta = item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None
        if delta is None:
            return
        self.a_diff.setPlainText(visible(delta.a_diff or f"A did not change {delta.path} in this turn."))
        self.b_diff.setPlainText(visible(delta.b_diff or f"B did not change {delta.path} in this turn."))


# --- the panel ----------------------------------------------------------------------------------

class CompareView(QWidget):
    """Two trials side by side (`show_pair`); the first divergence selected and in view."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.a: TrialRecord | None = None
        self.b: TrialRecord | None = None
        self.comparison: Comparison | None = None
        self.checks: Checks | None = None

        self.a_pill, self.b_pill = QLabel(), QLabel()
        self.a_line, self.b_line = ElidedLabel(), ElidedLabel()
        self.deltas_label = QLabel()
        self.deltas_label.setFont(mono_font())
        self.deltas_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.model = AlignedModel(self)
        self.table = QTableView()
        self._setup_table(self.table, self.model)
        self.previous_button = QPushButton("◀ Previous (p)")
        self.next_button = QPushButton("Next (n) ▶")
        self.previous_button.clicked.connect(self.previous_divergence)
        self.next_button.clicked.connect(self.next_divergence)
        self.position_label = QLabel()
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)

        self.files = FilesPane()
        self.checks_table = make_table(["", "Check", "A", "B"])
        self.checks_table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        header = self.checks_table.horizontalHeader()
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        for column in (0, 2, 3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.checks_note = QLabel(wordWrap=True)
        self.checks_note.setStyleSheet(MUTED)
        # Lines that wrap rather than widen: at 1,024 px the panel shares the window with the browser.
        for label in (self.deltas_label, self.position_label, self.legend):
            label.setWordWrap(True)
        checks_box = QWidget()
        checks_layout = QVBoxLayout(checks_box)
        checks_layout.setContentsMargins(4, 4, 4, 4)
        checks_layout.addWidget(self.checks_note)
        checks_layout.addWidget(self.checks_table)
        self.timeline = PhaseStrip()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.files, "Files")
        self.tabs.addTab(checks_box, "Checks")
        self.tabs.addTab(self.timeline, "Timeline")

        self._build()
        for key, slot in (("N", self.next_divergence), ("P", self.previous_divergence)):
            shortcut = QShortcut(QKeySequence(key), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)
        self.show_pair(None, None)

    @staticmethod
    def _setup_table(table: QTableView, model: QAbstractItemModel) -> None:
        table.setModel(model)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.setShowGrid(False)
        table.setWordWrap(False)
        table.setTextElideMode(Qt.TextElideMode.ElideRight)
        table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        # Fixed row heights and column widths: nothing measures 20,000 cells.
        rows = table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(table.fontMetrics().height() + 6)
        rows.hide()
        columns = table.horizontalHeader()
        columns.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        columns.setSectionResizeMode(GUTTER, QHeaderView.ResizeMode.Fixed)
        columns.resizeSection(GUTTER, 26)
        columns.setHighlightSections(False)
        columns.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def _build(self) -> None:
        head = QVBoxLayout()
        head.setSpacing(2)
        for side, pill, line in (("A", self.a_pill, self.a_line), ("B", self.b_pill, self.b_line)):
            letter = QLabel(side)
            letter.setStyleSheet("font-weight: 700;")
            letter.setFixedWidth(16)
            pill.setTextFormat(Qt.TextFormat.RichText)
            row = QHBoxLayout()
            row.setSpacing(8)
            row.addWidget(letter)
            row.addWidget(pill)
            row.addWidget(line, 1)
            head.addLayout(row)
        head.addWidget(self.deltas_label)
        head.addWidget(self.legend)  # a line of its own: beside the position it wrapped mid-entry
        bar = QHBoxLayout()
        bar.addWidget(self.position_label, 1)
        bar.addWidget(self.previous_button)
        bar.addWidget(self.next_button)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addLayout(bar)
        top_layout.addWidget(self.table)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(head)
        layout.addWidget(split, 1)
        self.empty = empty_state()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.stack)

    # --- showing ------------------------------------------------------------------------------

    def show_pair(self, a: TrialRecord | None, b: TrialRecord | None) -> None:
        """Compare A with B; with fewer than two trials, say what to do instead."""
        self.a, self.b = a, b
        if a is None or b is None:
            self.comparison = self.checks = None
            self.model.clear()
            one = a or b
            self.empty.setText(
                "Nothing to compare yet. Select two trials in the browser (Ctrl-click),"
                " then Compare."
                if one is None else
                f"Only one trial is selected ({who(one)}). Ctrl-click a second trial in the browser"
                " to compare it with this one.")
            self.stack.setCurrentIndex(0)
            return
        self.stack.setCurrentIndex(1)
        self._show_header(a, b)
        self.comparison = align(a, b)
        self.model.set_comparison(a, b, self.comparison)
        self._show_checks(checks(a, b))
        self.files.set_turns(turn_files(a, b))
        self.timeline.set_phases(a.phases, b.phases)
        self._show_legend()
        if self.comparison.first_divergence is not None:
            self.go_to(self.comparison.first_divergence)
        else:
            self.table.clearSelection()
            self.table.scrollToTop()
            self._show_position(None)

    def _show_header(self, a: TrialRecord, b: TrialRecord) -> None:
        for record, pill, line in ((a, self.a_pill, self.a_line), (b, self.b_pill, self.b_line)):
            pill.setText(outcome_pill(record.outcome, record.failure))
            reason = failure_line(record) if record.outcome != "pass" else ""
            line.set_full_text(" · ".join(part for part in (
                who(record), plural(record.command_count, "command"), record.id, reason) if part))
        self.deltas_label.setText(deltas_line(deltas(a, b)))

    def _show_legend(self) -> None:
        rows = self.comparison.rows if self.comparison else []
        counts = {kind: 0 for kind in ("changed", "only_a", "only_b")}
        for row in rows:
            if row.kind in counts:
                counts[row.kind] += 1
        swatch = "<span style='background-color:{}'>&nbsp;{}&nbsp;</span>"
        base = self.table.palette().base().color()
        parts = [swatch.format(over(tint(kind), base).name(),
                               f"{glyph} {counts[kind]} {word}".replace(" ", "&nbsp;"))
                 for kind, glyph, word in (("changed", "~", "changed"),
                                           ("only_a", "−", "only in A"),
                                           ("only_b", "+", "only in B"))]
        self.legend.setText("Rows: " + " ".join(parts))

    def _show_checks(self, pairs: Checks) -> None:
        self.checks = pairs
        table = self.checks_table
        table.setRowCount(len(pairs.pairs))
        for row, pair in enumerate(pairs.pairs):
            v = pair.a or pair.b
            first = row == pairs.first_difference
            marker = "◆ first difference" if first else ("≠" if pair.differs else "")
            cells = [table_item(marker, colour=amber_text() if pair.differs else None),
                     table_item(f"{v.kind}: {v.name}" if v else "", mono=True),
                     table_item(validation_words(pair.a),
                                colour=VALIDATION_COLOUR[pair.a.status] if pair.a else None),
                     table_item(validation_words(pair.b),
                                colour=VALIDATION_COLOUR[pair.b.status] if pair.b else None)]
            for column, cell in enumerate(cells):
                if first:
                    font = QFont(cell.font())
                    font.setBold(True)
                    cell.setFont(font)
                    cell.setBackground(tint("changed", 90))
                table.setItem(row, column, cell)
        if not pairs.pairs:
            self.checks_note.setText("Neither trial ran a check.")
        elif pairs.first_difference is None:
            self.checks_note.setText("Every check and verdict has the same status on both sides.")
        else:
            pair = pairs.pairs[pairs.first_difference]
            named = pair.a or pair.b
            assert named is not None  # a pair always has a side
            self.checks_note.setText(f"First difference: {named.kind} “{named.name}”: "
                                     f"A {validation_words(pair.a)}, B {validation_words(pair.b)}.")
        if pairs.first_difference is not None:
            table.selectRow(pairs.first_difference)

    # --- stepping -----------------------------------------------------------------------------

    def current_row(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows else None

    def go_to(self, row: int) -> None:
        """Select `row` and bring it to the middle of the table."""
        index = self.model.index(row, 0)
        self.table.selectRow(row)
        self.table.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        self._show_position(row)

    def next_divergence(self) -> None:
        self._step(forward=True)

    def previous_divergence(self) -> None:
        self._step(forward=False)

    def _step(self, *, forward: bool) -> None:
        if self.comparison is None:
            return
        current = self.current_row()
        if current is None:
            current = -1 if forward else self.model.rowCount()
        row = (self.comparison.next_divergence(current) if forward
               else self.comparison.previous_divergence(current))
        if row is not None:
            self.go_to(row)

    def _show_position(self, row: int | None) -> None:
        divergences = self.comparison.divergences if self.comparison else []
        if not divergences:
            self.position_label.setText("The two trajectories match step for step.")
        elif row in divergences:
            number = divergences.index(row) + 1
            first = " (first)" if number == 1 else ""
            self.position_label.setText(
                f"Divergence {number} of {len(divergences)}{first} · row {row + 1}")
        else:
            self.position_label.setText(plural(len(divergences), "divergence"))
        self.previous_button.setEnabled(bool(divergences) and row != divergences[0])
        self.next_button.setEnabled(bool(divergences) and row != divergences[-1])
        self.position_label.setStyleSheet(f"color: {amber_text()}; font-weight: 600;"
                                          if divergences else MUTED)
