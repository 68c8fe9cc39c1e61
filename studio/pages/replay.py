"""One finished trial replayed, in the right side's place: a line naming it and the way back,
over a header, a timeline and a trajectory fed by a replay model of their own (the window's
live model keeps following what really runs)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from engine.events import Event
from engine.models import TrialRecord
from studio.cli import At
from studio.models.replay import ReplayPlayer, ReplayTrials
from studio.pages.title import PageTitle
from studio.views.header import TrialHeader
from studio.views.replay import ReplayView
from studio.views.timeline import TimelineView
from studio.views.trajectory import TrajectoryView


class ReplayPage(QWidget):
    back = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = PageTitle()
        self.title.back.connect(self.back)
        self.replay: ReplayView | None = None  # made for each replay, let go of on the way back
        self.trajectory: TrajectoryView | None = None
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addWidget(self.title)

    def start(self, record: TrialRecord, events: Sequence[Event], at: At | None = None,
              play: bool = False) -> None:
        """Replay `record` from its events, standing at `at` (default its start), playing or
        paused. ValueError if none of the events is this trial's."""
        model = ReplayTrials()
        try:
            player = ReplayPlayer(model, events, record.id, parent=model)
        except ValueError:
            model.deleteLater()
            raise
        self.stop()
        header = TrialHeader(model, replay=True)
        timeline, trajectory = TimelineView(model), TrajectoryView(model)
        timeline.span_clicked.connect(
            lambda phase, index: trajectory.select_phase(phase, index) if phase in ("turn", "diff") else None)
        self.replay = ReplayView(player, record, [timeline, trajectory], header=header)
        model.setParent(self.replay)  # the view's lifetime is the replay's: its timers go with it
        self.trajectory = trajectory
        self.title.set_text("Replay")  # the header below names the trial
        self._layout.addWidget(self.replay, 1)
        if at is not None:
            player.seek_ms(at.of(player.total_ms))
        if play:
            player.play()

    def stop(self) -> None:
        """Stop the replay shown, if any, and let go of it with its model."""
        if self.replay is None:
            return
        self.replay.player.pause()
        self.replay.hide()
        self.replay.setParent(None)
        self.replay.deleteLater()
        self.replay, self.trajectory = None, None
