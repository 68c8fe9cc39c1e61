"""Replay's transport bar, and a replay view: a stored trial played back through the live views.

    [▶] [event ›] [phase ›] [turn ›]                          [16× ▾]  1.2s / 4.1s
    ──┃──┃┃───●────┃──┃─────────────────────────────────────────────────────────────

The bar takes the player and subscribes to it; it never folds an event itself.
The slider runs over the trial's recorded time, with a coloured mark at each phase start.
Panels never import one another: a ReplayView is handed the views it stacks (a timeline
and a trajectory made over the player's model) by whoever builds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QKeySequence, QPainter, QPaintEvent, QShortcut
from PySide6.QtWidgets import (QAbstractSlider, QComboBox, QHBoxLayout, QLabel, QSlider, QSplitter,
                               QStyle, QStyleOptionSlider, QToolButton, QVBoxLayout, QWidget)

from engine.models import TrialRecord
from engine.text import fmt_ms
from studio.models.replay import MAX, SPEEDS, ReplayPlayer
from studio.theme import phase_colour

SPEED_CHOICES: tuple[tuple[str, float], ...] = (*((f"{s:g}×", s) for s in SPEEDS), ("max", MAX))
MARK_PX = 4  # height of a phase mark under the groove


class PhaseSlider(QSlider):
    """A horizontal slider over recorded ms, with a mark at each phase start."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.marks: list[tuple[int, str]] = []  # (ms, phase)
        self.setMinimumHeight(self.sizeHint().height() + 2 * MARK_PX)

    def set_marks(self, marks: list[tuple[int, str]]) -> None:
        self.marks = marks
        self.update()

    def x_of(self, value: int) -> int:
        """Where a value sits along the groove, in widget pixels (the handle's centre)."""
        option = QStyleOptionSlider()
        self.initStyleOption(option)
        style = self.style()
        groove = style.subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                      QStyle.SubControl.SC_SliderGroove, self)
        handle = style.subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                      QStyle.SubControl.SC_SliderHandle, self)
        span = groove.width() - handle.width()
        return groove.x() + handle.width() // 2 + QStyle.sliderPositionFromValue(
            self.minimum(), self.maximum(), value, span)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        if not self.marks:
            return
        p = QPainter(self)
        bottom = self.height() - MARK_PX
        for ms, phase in self.marks:
            p.fillRect(QRect(self.x_of(ms), bottom, 2, MARK_PX), phase_colour(phase))
        p.end()


class TransportBar(QWidget):
    """Play and pause (Space), step by event, phase or turn, seek, speed, and the position."""

    def __init__(self, player: ReplayPlayer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.player = player
        self.play_button = self._button("▶", "Play (Space)", player.toggle)
        self.step_event = self._button("event ›", "Step to the next event", player.step_event)
        self.step_phase = self._button("phase ›", "Step to the next phase", player.step_phase)
        self.step_turn = self._button("turn ›", "Step to the next turn", player.step_turn)
        self.slider = PhaseSlider()
        self.slider.setRange(0, player.total_ms)
        self.slider.setPageStep(max(1, player.total_ms // 20))
        self.slider.set_marks(player.phase_marks)
        self.slider.setToolTip("Seek: drag, or click the groove")
        self.slider.sliderMoved.connect(player.seek_ms)
        self.slider.actionTriggered.connect(self._on_slider_action)
        self.speed = QComboBox(toolTip="Speed: times the recorded pace, or as fast as possible")
        for label, speed in SPEED_CHOICES:
            self.speed.addItem(label, speed)
        self.speed.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.speed.currentIndexChanged.connect(lambda i: player.set_speed(self.speed.itemData(i)))
        self.position = QLabel()
        self.position.setMinimumWidth(self.position.fontMetrics().horizontalAdvance("00m00s / 00m00s") + 8)
        self.position.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

        controls = QHBoxLayout()
        for widget in (self.play_button, self.step_event, self.step_phase, self.step_turn):
            controls.addWidget(widget)
        controls.addStretch(1)
        controls.addWidget(self.speed)
        controls.addWidget(self.position)
        # The slider has a line of its own: beside the buttons in a 1,024-px window it was
        # 120 px, too short to aim at a phase mark.
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.setSpacing(0)
        layout.addLayout(controls)
        layout.addWidget(self.slider)
        # Space anywhere in the window; a text field that takes the key still gets its space.
        QShortcut(QKeySequence(Qt.Key.Key_Space), self, player.toggle)

        player.position_changed.connect(self._show_position)
        player.state_changed.connect(self._show_state)
        self._show_position(int(player.elapsed_ms), player.total_ms)
        self._show_state(player.playing)

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(text=text, toolTip=tip, autoRaise=True)
        button.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Space is play/pause, not "press the focused button"
        button.clicked.connect(lambda: slot())
        return button

    def _on_slider_action(self, action: int) -> None:
        if action != QAbstractSlider.SliderAction.SliderMove:  # a click on the groove, a key
            self.player.seek_ms(self.slider.sliderPosition())

    def _show_position(self, elapsed_ms: int, total_ms: int) -> None:
        self.position.setText(f"{fmt_ms(elapsed_ms)} / {fmt_ms(total_ms)}")
        if not self.slider.isSliderDown():
            self.slider.blockSignals(True)
            self.slider.setValue(elapsed_ms)
            self.slider.blockSignals(False)

    def _show_state(self, playing: bool) -> None:
        self.play_button.setText("⏸" if playing else "▶")
        self.play_button.setToolTip("Pause (Space)" if playing else "Play (Space)")


class ReplayView(QWidget):
    """A stored trial played back: a header (if given) and the transport bar over views
    (record views made over the player's model, sharing the height) that follow the replay
    as they follow a running trial; at the end, the record itself."""

    def __init__(self, player: ReplayPlayer, record: TrialRecord, views: Sequence[QWidget],
                 parent: QWidget | None = None, header: QWidget | None = None) -> None:
        super().__init__(parent)
        self.player, self.record = player, record
        self.views = ([header] if header is not None else []) + list(views)
        self.bar = TransportBar(player)
        split = QSplitter(Qt.Orientation.Vertical)
        for view in views:
            split.addWidget(view)
        if len(views) == 2:  # a timeline over a trajectory: the items get the room
            split.setSizes([200, 400])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        if header is not None:
            layout.addWidget(header)
        layout.addWidget(self.bar)
        layout.addWidget(split, 1)
        player.restarted.connect(self._follow)
        player.finished.connect(self._show_record)
        self._follow()

    def _follow(self) -> None:
        """The trial as it stands in the player's model: the views grow it from there."""
        running = self.record.model_copy(update=dict(outcome=None, failure=None, phases=[], turns=[],
                                                     trajectory=[]))
        for view in self.views:
            view.show_record(running)  # type: ignore[attr-defined]

    def _show_record(self) -> None:
        """The end: the stored record. A view that grew the trial (a trajectory holds every
        item already, as stored) finishes it in place, for a 10,000-item trajectory is laid out
        anew in 60 ms; the others show the record."""
        for view in self.views:
            finish = getattr(view, "finish_record", None)
            if finish is not None:
                finish(self.record)
            else:
                view.show_record(self.record)  # type: ignore[attr-defined]
