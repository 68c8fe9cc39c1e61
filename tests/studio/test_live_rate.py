"""A trial streaming 20,000 events a second, written by another process (a `proctor run` on
the same store), shown live on the Trajectory tab: the GUI thread never works more than 50 ms
at a stretch. Measured as the GUI thread's own CPU time between the beats of a 5 ms timer, so
other work on the machine (and the GIL the reading thread holds) does not count."""

from __future__ import annotations

import time

import pytest
from datetime import datetime, timezone

from PySide6.QtCore import QTimer, Qt

from engine.events import PhaseProgress, PhaseStarted, TrialStarted
from engine.models import TrajectoryItem, TrialRecord
from engine.store import Store
from studio.bridge import MAX_PER_DRAIN

STALL_GOAL_S = 0.050


@pytest.mark.slow
def test_twenty_thousand_events_a_second_never_hold_the_gui_thread_50_ms(make_window, tmp_path, qtbot):
    path = tmp_path / "proctor.db"
    cli = Store(path)  # the other process: its own store on the same file
    now = datetime.now(timezone.utc).isoformat()
    cli.create_batch("b_cli", "cli", "other", now)
    cli.create_run("r_cli", "b_cli", "floods", "scripted", 0)
    record = TrialRecord(id="t_cli", batch_id="b_cli", run_id="r_cli", case_id="floods",
                         variant="scripted", trial=1, trigger="cli")
    cli.create_trial(record, "other")
    cli.mark_trial_running(record.id, now)
    ids = dict(batch_id="b_cli", trial_id="t_cli", case_id="floods", variant="scripted", trial=1)
    cli.add_event(TrialStarted(**ids, run_id="r_cli", n=1))
    cli.add_event(PhaseStarted(**ids, phase="turn", index=1, n=2))
    cli.flush()

    window = make_window(path)
    window.resize(1400, 860)
    window.show_view("trajectory")
    assert window.browser.select_id("t_cli") and window.live.trial("t_cli").watched

    # What one poll reads at most (MAX_PER_DRAIN): a second of 20,000 events, as a poll finds
    # them when the one before was slow; every event an item of the trial shown. The poll
    # waits until the probe beats, or its first pass would fall before the probe's first beat.
    window.bridge._poll.stop()
    count = MAX_PER_DRAIN
    for n in range(3, count + 3):
        item = TrajectoryItem(kind="command", turn=1, at=now, command=f"pytest -q tests/test_{n}.py",
                              exit_code=n % 3, output=f"{n} passed in 0.{n % 97}s")
        cli.add_event(PhaseProgress(**ids, phase="turn", index=1, message=item.command, item=item, n=n))
    cli.flush()

    beats: list[float] = []
    probe = QTimer(interval=5, timerType=Qt.TimerType.PreciseTimer)
    probe.timeout.connect(lambda: beats.append(time.thread_time()))  # this (the GUI) thread's CPU
    probe.start()
    try:
        qtbot.waitUntil(lambda: len(beats) >= 3)
        window.bridge._poll.start()
        qtbot.waitUntil(lambda: window.trajectory.model.rowCount() >= count + 1, timeout=30_000)
        qtbot.wait(50)
    finally:
        probe.stop()
        cli.close()
    worked = max(b - a for a, b in zip(beats, beats[1:]))
    assert worked <= STALL_GOAL_S, f"the GUI thread worked {worked * 1000:.0f} ms without a break"
