"""Replay in the window: one finished trial selected, then Replay (or `proctor studio --open ID
--view replay [--at …]`); the trial plays back through a timeline, trajectory and header of
its own model; Esc goes back to the tabs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from studio.models.replay import MAX


def studio(store, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine.cli", "studio", "--store", str(store), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_replay_action_plays_the_selected_trial_to_its_end(window, recorded, records, qtbot):
    record = records["writes_greet"]
    assert not window.replay_action.isEnabled(), "nothing selected: nothing to replay"
    window.browser.select_id(window.store.list_batches()[0].batch_id)
    qtbot.waitUntil(lambda: window.selected_batch is not None)
    assert not window.replay_action.isEnabled(), "a batch is not a trial"
    assert window.browser.select_id(record.id)
    qtbot.waitUntil(window.replay_action.isEnabled)

    window.replay_action.trigger()
    assert window.pages.currentWidget() is window.replay_page
    replay = window.replay
    assert replay is not None and replay.player.trial_id == record.id
    assert replay.player.live is not window.live, "the replay's clock must not move running trials"
    assert replay.player.playing and replay.player.speed == 1.0, "Replay plays it, at the recorded pace"
    replay.player.set_speed(MAX)
    replay.player.play()
    qtbot.waitUntil(lambda: replay.player.at_end and not replay.player.playing, timeout=10_000)
    trajectory = window.replay_page.trajectory
    # Every item of the record under its turns' headers, and its checks and verdict: what the
    # Trajectory tab shows of it.
    window.tabs.setCurrentWidget(window.trajectory)
    assert [r.title for r in trajectory.model.rows] == [r.title for r in window.trajectory.model.rows]

    qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert window.pages.currentWidget() is window.normal_page
    assert window.replay is None, "the replay is let go of, its timers with it"


def test_a_running_or_missing_trial_is_not_replayed(window, recorded):
    assert window.open_replay("t_nope") == f"no trial t_nope in {recorded.store_path}"
    assert window.pages.currentWidget() is window.normal_page


def test_open_view_replay_at_half_stands_mid_way(window, recorded, records):
    from studio.app import open_from_args

    record = records["writes_greet"]
    assert open_from_args(window, record.id, "replay", "0.5") is None
    player = window.replay.player
    assert not player.playing, "opened at a point: paused there"
    assert player.elapsed_ms == round(player.total_ms * 0.5)
    assert 0 < player.position < len(player.events)
    assert open_from_args(window, record.id, "replay", "1500ms") is None
    assert window.replay.player.elapsed_ms == min(1500, window.replay.player.total_ms)
    assert open_from_args(window, record.id, "replay", None) is None
    assert window.replay.player.at_end, "no --at: the end"


def test_a_replay_says_it_is_one_and_its_slider_has_the_width_at_1024_px(window, records, qtbot):
    from studio.app import open_from_args

    window.resize(1024, 700)
    record = records["writes_greet"]
    assert open_from_args(window, record.id, "replay", "0.5") is None
    qtbot.waitUntil(lambda: window.replay.bar.slider.width() > 0)
    header = window.replay.views[0]
    assert "REPLAY" in header.outcome.text() and "RUNNING" not in header.outcome.text(), \
        "nothing runs in a replay"
    assert "into the recording" in header.reason.full_text()
    bar = window.replay.bar
    assert bar.slider.width() >= 0.9 * bar.width() - 20, "the scrubber has a line of its own"
    window.replay.player.seek_ms(window.replay.player.total_ms)
    assert "PASS" in header.outcome.text(), "at the end, the record's outcome"


def test_a_replay_screenshot_renders_the_trial_mid_way(recorded, tmp_path):
    out = tmp_path / "replay.png"
    done = studio(recorded.store_path, "--open", recorded.trials["writes_greet"], "--view", "replay",
                  "--at", "0.5", "--screenshot", str(out), "--size", "1024x700")
    assert done.returncode == 0, done.stderr
    image = QImage(str(out)).convertToFormat(QImage.Format.Format_RGB32)
    assert (image.width(), image.height()) == (1024, 700)
    pixels = np.frombuffer(image.constBits(), np.uint32).reshape(700, -1)[:, 470:] & 0xFFFFFF
    assert len(np.unique(pixels)) > 50, "the replay page is blank"


@pytest.mark.parametrize("args, message", [
    (["--view", "replay", "--at", "1.5"],
     "--at takes a fraction from 0 to 1 (like 0.5) or a time (like 3s or 1500ms), not 1.5"),
    (["--view", "replay", "--at", "soon"],
     "--at takes a fraction from 0 to 1 (like 0.5) or a time (like 3s or 1500ms), not soon"),
    (["--view", "overview", "--at", "0.5"], "--at places a replay: add --view replay"),
])
def test_replay_argument_errors_are_one_line_and_exit_2(recorded, tmp_path, args, message):
    out = tmp_path / "x.png"
    done = studio(recorded.store_path, "--open", recorded.trials["writes_greet"], *args,
                  "--screenshot", str(out))
    assert done.returncode == 2
    assert done.stderr.strip() == f"proctor: {message}"
    assert not out.exists()


def test_replay_of_a_batch_or_nothing_is_one_line_and_exit_2(recorded, tmp_path):
    out = tmp_path / "x.png"
    batch = studio(recorded.store_path, "--open", recorded.batch_id, "--view", "replay",
                   "--screenshot", str(out))
    assert batch.returncode == 2
    assert batch.stderr.strip().splitlines()[-1] == (
        f"proctor: {recorded.batch_id} is a batch: the replay view replays one trial")
    nothing = studio(recorded.store_path, "--view", "replay", "--screenshot", str(out))
    assert nothing.returncode == 2
    assert nothing.stderr.strip() == "proctor: the replay view needs a trial id: --open ID"
    assert not out.exists()
