"""The main window over real records and live runs: the embedded engine streaming
into the window, a CLI batch on the same store appearing live, cancelling,
errors shown in the window, and headless screenshots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from engine.store import Store

# Three steps, then it waits for the test to open its gate (`_open_gate`), then a fourth:
# the test sees the trial running for as long as it needs, on any machine.
GATED_AGENT = """
for i in 1 2 3; do
  printf '{"type":"command","command":"step %s","exitCode":0,"output":"ok"}\\n' "$i"
done
n=0
while [ ! -e /tmp/proctor-gate ] && [ "$n" -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
printf '{"type":"command","command":"step 4","exitCode":0,"output":"ok"}\\n'
echo '{"type":"finished","reason":"done"}'
"""


def _slow_suite(folder, sleep_agent=GATED_AGENT, trials=2):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agent.sh").write_text(sleep_agent)
    (folder / "live.eval.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from engine import evaluation

        @evaluation(files={{".agent/run.sh": Path("agent.sh")}}, trials={trials})
        def slow_steps(c):
            c.send("take your time")
            c.exec("true").to_succeed()
    """))
    (folder / "proctor.toml").write_text(textwrap.dedent("""
        [defaults]
        image = "proctor-test-base:bookworm"
        concurrency = 1

        [[variants]]
        name = "scripted"
        command = "sh .agent/run.sh"
    """))
    return folder / "live.eval.py"


def _open_gate(docker_client, trial_id, events) -> None:
    """Let a GATED_AGENT trial go on: the gate is a file in its sandbox, found by the id its
    container phase named ("created ID", or "claimed warm ID": a warm container was labelled
    before any trial claimed it, so it carries no proctor.trial)."""
    said = [e.summary for e in events if getattr(e, "trial_id", None) == trial_id
            and getattr(e, "phase", None) == "container" and getattr(e, "summary", None)]
    short_id = re.search(r"\b[0-9a-f]{12}\b", said[-1])[0]
    docker_client.containers.get(short_id).exec_run(["touch", "/tmp/proctor-gate"])


def _flushes_on(store) -> list[bool]:
    """Record, for every store.flush() the studio's own code makes from now on, whether the
    GUI thread made it (the engine's own flushes, on its first start, are not the window's)."""
    on_gui: list[bool] = []
    flush = store.flush

    def recorded(timeout=None):
        if f"{os.sep}studio{os.sep}" in sys._getframe(1).f_code.co_filename:
            on_gui.append(threading.current_thread() is threading.main_thread())
        return flush(timeout)

    store.flush = recorded
    return on_gui


def _plan(path):
    from engine.batch import BatchPlan
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    config = load_config(find_config(path))
    return BatchPlan(cases=load_cases([path]), variants=config.variants, config=config, trigger="studio")


def test_a_stored_trial_fills_every_view(recorded, make_window, qtbot):
    window = make_window(recorded.store_path)
    trial_id = recorded.trials["writes_greet"]
    assert window.browser.select_id(trial_id)
    qtbot.waitUntil(lambda: window.selected_trial == trial_id)
    assert window.header.title.full_text().startswith("writes_greet #1")
    assert "PASS" in window.header.outcome.text()
    assert len(window.evidence.cards) == 0, "views are filled when their tab is shown"
    for view in (window.trajectory, window.diff, window.evidence):
        window.tabs.setCurrentWidget(view)
    assert window.trajectory.model.rowCount() >= 2
    assert window.diff.file_list.model().rowCount() >= 2
    assert len(window.evidence.cards) == 3
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.keyClick(window.tabs, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.timeline
    window.timeline.span_clicked.emit("turn", 2)
    assert window.tabs.currentWidget() is window.trajectory
    assert window.trajectory.list.currentIndex().data().startswith("Turn 2")
    window.timeline.span_clicked.emit("judge", 1)
    assert window.tabs.currentWidget() is window.evidence


def test_a_batch_shows_one_timeline_row_per_trial_read_without_its_records(recorded, records, make_window,
                                                                          qtbot, monkeypatch):
    import studio.app
    from studio.views.timeline import batch_rows

    window = make_window(recorded.store_path)
    assert window.browser.select_id(recorded.batch_id)
    read, on_gui = [], []
    get_trial = window.store.get_trial
    window.store.get_trial = lambda trial_id: read.append(trial_id) or get_trial(trial_id)
    batch_spans = studio.app.batch_spans
    monkeypatch.setattr(studio.app, "batch_spans", lambda *args: on_gui.append(
        threading.current_thread() is threading.main_thread()) or batch_spans(*args))
    window.timeline.show_spans([])
    window.open_batch(recorded.batch_id)
    labels = [label for label, _ in batch_rows(list(records.values()))]
    qtbot.waitUntil(lambda: window.timeline.row_labels == labels)
    assert on_gui == [False], "the batch timeline is read off the GUI thread"
    assert read == [], "the batch timeline reads the phases only, never a whole record"
    assert [[(s.phase, s.start_ms, s.end_ms) for s in row.spans] for row in window.timeline._rows] == \
        [[(s.phase, s.start_ms, s.end_ms) for s in sorted(spans, key=lambda s: s.start_ms)]
         for _, spans in batch_rows(list(records.values()))]


def test_the_tabs_are_one_table_of_record_views(make_window, qtbot, tmp_path):
    from studio import cli
    from studio.app import TABS, RecordView, SearchableView

    assert [tab.name for tab in TABS] == cli.TABS
    assert [tab.shortcut for tab in TABS] == [f"Ctrl+{n}" for n in range(1, len(TABS) + 1)]
    window = make_window(tmp_path / "tabs.db")
    for n, tab in enumerate(TABS):
        view = window.tabs.widget(n)
        assert view is window.views[tab.name] and isinstance(view, RecordView)
        assert isinstance(view, SearchableView) == tab.search, tab.name
    assert [tab.name for tab in TABS if tab.search] == ["trajectory"]
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.show_view("trajectory")
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.trajectory.search.hasFocus()
    window.show_view("diff")  # no search of its own: Ctrl+F searches the browser
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.browser.search.hasFocus()


def test_a_selected_trial_that_finishes_is_reloaded_without_the_gui_thread_waiting(make_window, qtbot, tmp_path):
    from engine.events import PhaseStarted, TrialFinished, TrialStarted
    from engine.models import TrialRecord

    path = tmp_path / "finishing.db"
    record = TrialRecord(id="t_finishing1", batch_id="b_finishing", run_id="r_0", case_id="writes_greet",
                         variant="scripted", trial=1, trigger="studio")
    ids = dict(batch_id="b_finishing", trial_id=record.id, case_id="writes_greet", variant="scripted", trial=1)
    with Store(path) as store:
        store.create_batch("b_finishing", "studio", "", "2026-11-29T17:40:47.120Z")
        store.create_run("r_0", "b_finishing", "writes_greet", "scripted", 0)
        store.create_trial(record, owner="")
        store.mark_trial_running(record.id, "2026-11-29T17:40:47.120Z")
        for event in (TrialStarted(**ids, run_id="r_0"), PhaseStarted(**ids, phase="turn", index=1)):
            store.add_event(event)
    window = make_window(path)
    assert window.browser.select_id(record.id)
    qtbot.waitUntil(lambda: "RUNNING" in window.header.outcome.text())
    on_gui = _flushes_on(window.store)

    # The engine saves the record, then says the trial finished; the window shows the record.
    window.store.save_trial(record.model_copy(update=dict(outcome="pass")))
    window.bridge.events.emit([TrialFinished(**ids, outcome="pass")])
    qtbot.waitUntil(lambda: "PASS" in window.header.outcome.text(), timeout=10_000)
    assert on_gui == [False], "the wait for the record was made off the GUI thread"


def _running_trial_store(path, trial_id: str = "t_running01", batch_id: str = "b_running"):
    """A store with one running trial and nothing of its events yet: (store, record, ids)."""
    from engine.models import TrialRecord

    record = TrialRecord(id=trial_id, batch_id=batch_id, run_id="r_0", case_id="writes_greet",
                         variant="scripted", trial=1, trigger="studio")
    store = Store(path)
    store.create_batch(batch_id, "studio", "", "2026-11-29T17:40:47.120Z")
    store.create_run("r_0", batch_id, "writes_greet", "scripted", 0)
    store.create_trial(record, owner="")
    store.mark_trial_running(record.id, "2026-11-29T17:40:47.120Z")
    ids = dict(batch_id=batch_id, trial_id=record.id, case_id="writes_greet", variant="scripted", trial=1)
    return store, record, ids


def _numbered_events(ids: dict, items: int) -> list:
    """A running trial's events as the Recorder numbers them: its start, turn 1, `items` commands."""
    from engine.events import PhaseProgress, PhaseStarted, TrialStarted
    from engine.models import TrajectoryItem

    events = [TrialStarted(**ids, run_id="r_0", n=1), PhaseStarted(**ids, phase="turn", index=1, n=2)]
    for k in range(1, items + 1):
        item = TrajectoryItem(kind="command", turn=1, command=f"step {k}", exit_code=0, output="ok")
        events.append(PhaseProgress(**ids, phase="turn", index=1, message=f"step {k}", item=item, n=k + 2))
    return events


def _commands(window, trial_id) -> list[str]:
    return [item.command for item in window.live.trial(trial_id).items]


def test_a_running_trial_is_followed_from_all_of_its_stored_events(make_window, qtbot, tmp_path):
    """More events than one read of the store returns (10,000): every item, once."""
    count = 10_050
    store, record, ids = _running_trial_store(tmp_path / "long.db")
    with store:
        for event in _numbered_events(ids, count):
            store.add_event(event)
    window = make_window(tmp_path / "long.db")
    assert window.browser.select_id(record.id)
    qtbot.waitUntil(lambda: window.selected_trial == record.id)
    assert _commands(window, record.id) == [f"step {k}" for k in range(1, count + 1)]
    window.tabs.setCurrentWidget(window.trajectory)
    assert window.trajectory.model.rowCount() == count + 1  # the turn's header and every item


def test_a_store_behind_the_bridge_is_read_again_once_it_caught_up(make_window, qtbot, tmp_path):
    """The bridge delivered more of a running trial than the live model keeps, while our writer
    had committed only its start when it was selected: nothing is lost."""
    from studio.models.live import RECENT_EVENTS

    count = RECENT_EVENTS + 100
    events = _numbered_events(_running_trial_store(tmp_path / "behind.db")[2], count)
    store, record, _ = _running_trial_store(tmp_path / "unused.db")  # the same ids, for the record
    store.close()
    with Store(tmp_path / "behind.db") as store:
        for event in events:
            store.add_event(event)
    window = make_window(tmp_path / "behind.db")
    window.live.apply(events)  # delivered by the bridge
    # What the click reads first: the trial's start only, as a writer far behind would have it.
    trial_events = window.store.trial_events
    reads: list[int] = []

    def behind(trial_id, *args):
        reads.append(len(reads))
        stored = list(trial_events(trial_id, *args))
        return stored[:2] if len(reads) == 1 else stored

    window.store.trial_events = behind
    assert window.browser.select_id(record.id)
    qtbot.waitUntil(lambda: len(reads) == 2)  # read again, off the GUI thread
    expected = [f"step {k}" for k in range(1, count + 1)]
    qtbot.waitUntil(lambda: window.live.trial(record.id).complete)
    assert _commands(window, record.id) == expected
    window.tabs.setCurrentWidget(window.trajectory)
    qtbot.waitUntil(lambda: window.trajectory.model.rowCount() == count + 1)


def test_a_finished_trial_whose_record_is_late_is_looked_for_again(make_window, qtbot, tmp_path, monkeypatch):
    """The store still says the trial runs after the wait for its writer: look again, and show
    the sentence if its record never comes, never a header frozen on RUNNING."""
    import studio.app
    from engine.events import TrialFinished

    monkeypatch.setattr(studio.app, "RECORD_RETRIES_S", (0.3, 0.3))
    for name, saved in (("late", True), ("lost", False)):
        store, record, ids = _running_trial_store(tmp_path / f"{name}.db", trial_id=f"t_{name}00001")
        with store:
            for event in _numbered_events(ids, 1):
                store.add_event(event)
        window = make_window(tmp_path / f"{name}.db")
        assert window.browser.select_id(record.id)
        qtbot.waitUntil(lambda: "RUNNING" in window.header.outcome.text())
        window.bridge.events.emit([TrialFinished(**ids, outcome="pass", n=4)])  # no record yet
        qtbot.wait(100)
        if saved:  # after the first look, before the next
            window.store.save_trial(record.model_copy(update=dict(outcome="pass")))
            qtbot.waitUntil(lambda: "PASS" in window.header.outcome.text(), timeout=5_000)
            assert not window.banner.isVisible()
        else:
            qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
            assert f"Trial {record.id} finished, but its record has not reached the store" in \
                window.banner.text()


def test_a_run_from_the_window_streams_live(docker_client, make_window, qtbot, tmp_path):
    window = make_window(tmp_path / "live.db")
    on_gui = _flushes_on(window.store)
    delivered = []
    window.bridge.events.connect(delivered.extend)
    batch_id = window.start_batch(_plan(_slow_suite(tmp_path / "suite")))
    assert batch_id and window.bridge.is_running(batch_id)
    qtbot.waitUntil(lambda: window.selected_batch == batch_id, timeout=10_000)  # once its rows are stored

    # The first trial's turn starts: select it while it runs (its agent waits at the gate).
    def turn_started() -> list[str]:
        return [e.trial_id for e in delivered if getattr(e, "phase", None) == "turn"]

    qtbot.waitUntil(lambda: bool(turn_started()), timeout=30_000)
    trial_id = turn_started()[0]
    window.browser.select_id(trial_id)
    qtbot.waitUntil(lambda: window.selected_trial == trial_id)
    live = window.live.trial(trial_id)
    assert live is not None and live.watched, "a running trial is followed by the live model"
    window.tabs.setCurrentWidget(window.trajectory)
    qtbot.waitUntil(lambda: window.trajectory.model.rowCount() >= 4)  # a turn header + 3 steps, live
    assert "RUNNING" in window.header.outcome.text() and "turn 1" in window.header.reason.full_text()
    window.tabs.setCurrentWidget(window.timeline)
    assert "turn" in window.timeline.row_labels

    _open_gate(docker_client, trial_id, delivered)
    qtbot.waitUntil(lambda: "PASS" in window.header.outcome.text(), timeout=30_000)  # its stored record
    assert window.live.trial(trial_id) is None
    window.tabs.setCurrentWidget(window.trajectory)
    # The full record: header + 4 commands, then its check, once the record has its verdict.
    assert window.trajectory.model.rowCount() == 6 and window.trajectory.model.rows[-1].kind == "validation"
    qtbot.waitUntil(lambda: len(set(turn_started())) == 2, timeout=30_000)
    _open_gate(docker_client, turn_started()[-1], delivered)
    qtbot.waitUntil(lambda: not window.bridge.is_running(batch_id), timeout=60_000)
    summary = window.store.batch_summary(batch_id)
    assert [t.outcome for t in summary.runs[0].trials] == ["pass", "pass"]
    assert on_gui and not any(on_gui), "the GUI thread never waits for the store's writer"


def test_a_cli_batch_on_the_same_store_appears_live(docker_client, make_window, qtbot, tmp_path):
    store_path = tmp_path / "shared.db"
    window = make_window(store_path)
    delivered = []
    window.bridge.events.connect(delivered.extend)
    suite = _slow_suite(tmp_path / "suite", trials=1)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    cli = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(suite), "--store", str(store_path)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        qtbot.waitUntil(lambda: any(getattr(e, "phase", None) == "turn" for e in delivered), timeout=30_000)
        assert cli.poll() is None, "the CLI batch was seen while it ran"
        batch_id = delivered[0].batch_id
        trial_id = next(e.trial_id for e in delivered if getattr(e, "phase", None) == "turn")
        qtbot.waitUntil(lambda: window.browser.model.locate(batch_id).isValid(), timeout=10_000)
        assert window.browser.select_id(trial_id)
        qtbot.waitUntil(lambda: "RUNNING" in window.header.outcome.text())
        _open_gate(docker_client, trial_id, delivered)
        assert cli.wait(60) == 0, cli.stderr.read()
    finally:
        if cli.poll() is None:
            cli.kill()
    qtbot.waitUntil(lambda: any(getattr(e, "type", "") == "trial_finished" for e in delivered), timeout=10_000)
    qtbot.waitUntil(lambda: "PASS" in window.header.outcome.text(), timeout=10_000)


def test_a_trial_is_cancelled_from_the_window(docker_client, make_window, qtbot, tmp_path):
    window = make_window(tmp_path / "cancel.db")
    delivered = []
    window.bridge.events.connect(delivered.extend)
    agent = 'echo \'{"type":"message","role":"assistant","text":"waiting"}\'\nsleep 120\n'
    batch_id = window.start_batch(_plan(_slow_suite(tmp_path / "suite", sleep_agent=agent, trials=2)))
    qtbot.waitUntil(lambda: any(getattr(e, "phase", None) == "turn" for e in delivered), timeout=30_000)
    trial_id = next(e.trial_id for e in delivered if getattr(e, "phase", None) == "turn")
    window.browser.select_id(trial_id)
    qtbot.waitUntil(lambda: window.selected_trial == trial_id)
    window.stop_action.trigger()
    # Well before the agent's own 120 s: the cancel stopped it.
    qtbot.waitUntil(lambda: window.store.get_trial(trial_id).outcome is not None, timeout=15_000)
    record = window.store.get_trial(trial_id)
    assert record.outcome == "infra_error" and "cancelled from the studio" in record.failure.reason
    # The batch goes on with its other trial; cancel that one too by cancelling the batch.
    window.bridge.cancel_batch(batch_id)
    qtbot.waitUntil(lambda: not window.bridge.is_running(batch_id), timeout=30_000)
    assert docker_client.containers.list(all=True, filters={"label": f"proctor.batch={batch_id}"}) == []


def test_errors_are_shown_in_the_window(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window(tmp_path / "errors.db")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    suite = _slow_suite(tmp_path / "suite")
    assert window.start_batch(_plan(suite)) is None
    assert window.banner.isVisible() and "Docker is not reachable" in window.banner.text()

    from studio.views.run import RunDialog

    bad = tmp_path / "bad" / "broken.eval.py"
    bad.parent.mkdir()
    bad.write_text("from engine import evaluation\n\n@evaluation(timeout='soon')\ndef x(c):\n    pass\n")
    dialog = RunDialog(window, str(bad))
    qtbot.addWidget(dialog)
    assert f"{bad}:3:" in dialog.error.text() and "soon" in dialog.error.text()


def test_screenshots_render_headless(recorded, tmp_path):
    trial_id = recorded.trials["adds_numbers"]
    out = tmp_path / "evidence.png"
    command = [sys.executable, "-m", "engine.cli", "studio", "--store", str(recorded.store_path),
               "--open", trial_id, "--view", "evidence", "--screenshot", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1400, 860)
    colours = {image.pixel(x, y) for x in range(0, 1400, 50) for y in range(0, 860, 50)}
    assert len(colours) > 5, "the screenshot is not blank"

    missing = subprocess.run(command[:7] + ["t_nope", "--screenshot", str(tmp_path / "x.png")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no batch or trial t_nope" in missing.stderr


def test_a_screenshot_at_1024_by_700_is_that_size_with_the_trajectory_chips_as_icons(recorded, tmp_path):
    out = tmp_path / "small.png"
    done = subprocess.run([sys.executable, "-m", "engine.cli", "studio", "--store", str(recorded.store_path),
                           "--open", recorded.trials["adds_numbers"], "--view", "trajectory",
                           "--screenshot", str(out), "--size", "1024x700"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    image = QImage(str(out))
    # The window used to hold itself 1,339 px wide: the chips' labels and the browser's filters.
    assert (image.width(), image.height()) == (1024, 700)


def test_a_corrupt_store_is_one_sentence_not_a_crash(tmp_path, qtbot):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(os.urandom(4096))
    done = subprocess.run([sys.executable, "-m", "engine.cli", "studio", "--store", str(corrupt),
                           "--screenshot", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(corrupt) in done.stderr and "move it away or pass --store" in done.stderr

    from PySide6.QtWidgets import QLabel

    from studio.app import ErrorWindow

    window = ErrorWindow("corrupt.db is not a Proctor store")
    qtbot.addWidget(window)
    texts = " ".join(label.text() for label in window.findChildren(QLabel))
    assert "corrupt.db is not a Proctor store" in texts and "--store" in texts


def _store_with_a_damaged_record(path) -> tuple[str, str, str]:
    """A batch of two finished trials, the second's record corrupt JSON: (batch, good, damaged)."""
    import sqlite3

    from engine.models import PhaseSpan, TrialRecord

    with Store(path) as store:
        store.create_batch("b_damaged01", "cli", "", "2026-11-29T17:40:47.120Z")
        for n, (trial_id, case) in enumerate([("t_good000001", "reads_fine"), ("t_damaged001", "reads_badly")]):
            store.create_run(f"r_{n}", "b_damaged01", case, "scripted", n)
            store.save_trial(TrialRecord(id=trial_id, batch_id="b_damaged01", run_id=f"r_{n}", case_id=case,
                                         variant="scripted", trial=1, trigger="cli", outcome="pass",
                                         phases=[PhaseSpan(phase="image", status="ok", start_ms=0, end_ms=3)]))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trial SET record = '{\"id\": \"t_damaged001\", broken' WHERE id = 't_damaged001'")
    return "b_damaged01", "t_good000001", "t_damaged001"


def test_a_damaged_record_shows_its_sentence_in_the_window(make_window, qtbot, tmp_path):
    path = tmp_path / "damaged.db"
    batch_id, good, damaged = _store_with_a_damaged_record(path)
    window = make_window(path)
    assert window.browser.select_id(good)
    qtbot.waitUntil(lambda: window.selected_trial == good)
    assert window.header.title.full_text().startswith("reads_fine #1")

    assert window.browser.select_id(damaged)  # a traceback in this slot would fail the test
    qtbot.waitUntil(lambda: window.selected_trial == damaged)
    sentence = f"the record of trial {damaged} in {path} is damaged"
    assert window.banner.isVisible() and sentence in window.banner.text()
    assert sentence in window.header.reason.full_text() and damaged in window.header.title.full_text()
    for view in window.views.values():
        window.tabs.setCurrentWidget(view)  # nothing of the trial shown before is left in them
    assert window.overview.record is None and window.evidence.cards == []
    assert window.trajectory.model.rowCount() == 0 and window.timeline.row_labels == []

    window.banner.hide()
    assert window.browser.select_id(batch_id)
    qtbot.waitUntil(lambda: window.selected_batch == batch_id)
    qtbot.waitUntil(lambda: len(window.timeline.row_labels) > 0)  # the readable trial's rows
    qtbot.waitUntil(window.banner.isVisible)
    assert sentence in window.banner.text()
