"""`proctor replay`: a stored trial's `run -v` lines again, line for line, at their recorded
pace; a record with no stored events replays from its phases and items."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import _Printer, main
from engine.events import PhaseEnded, PhaseProgress, PhaseStarted, TrialFinished, TrialStarted
from engine.models import Failure, PhaseSpan, TrajectoryItem, TrialRecord
from engine.replay import IDLE_CAP_S, delays, events_from_record, replay_events
from engine.store import Store
from engine.text import iso_ms

REPO = Path(__file__).resolve().parents[2]
HEADER = "from pathlib import Path\nfrom engine import evaluation, git\n"
# Two turns with items, a pause inside each, and a failing check: every kind of -v line.
AGENT = """
echo '{"type":"command","command":"ls","exitCode":0,"output":""}'
sleep 0.3
echo "$PROCTOR_TURN" > "turn$PROCTOR_TURN.txt"
echo '{"type":"fileChange","path":"turn'"$PROCTOR_TURN"'.txt","change":"add"}'
echo '{"type":"message","role":"assistant","text":"done"}'
echo '{"type":"finished","reason":"done"}'
"""
EVAL = HEADER + """
@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh")})
def two_turns(c):
    c.send("one")
    c.send("two")
    c.exec("test -f turn3.txt").to_succeed()
"""


@pytest.fixture
def recorded(suite, run_eval, store):
    """One real two-turn trial that fails its check: (record, its live events)."""
    summary, events, records = run_eval(suite(EVAL, files={"agent.sh": AGENT}))
    [record] = records.values()
    store.flush()
    return record, [e for e in events if getattr(e, "trial_id", None) == record.id]


def verbose_lines(events) -> list[str]:
    """What `run -v` printed for these events: its own printer's lines."""
    printer = _Printer(verbose=True, quiet=False)
    return [line for e in events if (line := printer.line(e)) is not None]


def test_replay_prints_the_run_v_lines_of_a_real_trial(recorded, store, capsys):
    record, live = recorded
    assert record.outcome == "fail"
    expected = verbose_lines(live)
    assert sum("turn" in line for line in expected) >= 8  # two turns' items and ends

    assert main(["replay", record.id[:10], "--speed", "0", "--store", str(store.path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == expected and err == ""


def test_a_record_without_events_replays_from_its_phases_and_items(recorded, store, capsys):
    record, live = recorded
    with sqlite3.connect(store.path) as db:
        assert db.execute("DELETE FROM event WHERE trial_id = ?", (record.id,)).rowcount == len(live)
    replayed = replay_events(store, record.id)

    def spans(events):
        return [(type(e).__name__, e.phase, e.index) for e in events if isinstance(e, (PhaseStarted, PhaseEnded))]

    def ends(events):  # the stored record span closed just before the write, so not as live
        return [(e.phase, e.index, e.detail, e.duration_ms) for e in events
                if isinstance(e, PhaseEnded) and e.phase != "record"]

    def items(events):
        return [(e.index, e.message, e.item.to_json()) for e in events if isinstance(e, PhaseProgress) and e.item]

    assert spans(replayed) == spans(live) and ends(replayed) == ends(live)
    # Status as the record has it, and as it streamed: a check's phase ends with its matchers' verdict.
    statuses = [e.status for e in replayed if isinstance(e, PhaseEnded)]
    streamed = [e.status for e in live if isinstance(e, PhaseEnded)]
    assert statuses == [s.status for s in record.phases] == streamed
    assert ("check", "failed") in [(e.phase, e.status) for e in replayed if isinstance(e, PhaseEnded)]
    assert items(replayed) == items(live) and len(items(live)) == 6
    assert [e.n for e in replayed] == list(range(1, len(replayed) + 1))
    assert isinstance(replayed[0], TrialStarted) and replayed[0].run_id == record.run_id
    last = replayed[-1]
    assert isinstance(last, TrialFinished) and (last.outcome, last.failure) == ("fail", record.failure)
    # Each item inside its own turn, and every phase on the clock it had live.
    turn_of = None
    for event in replayed:
        if isinstance(event, PhaseStarted) and event.phase == "turn":
            turn_of = event.index
        elif isinstance(event, PhaseEnded) and event.phase == "turn":
            turn_of = None
        elif isinstance(event, PhaseProgress) and event.item:
            assert event.index == event.item.turn == turn_of
    phase_at = [e.at for e in live if isinstance(e, (PhaseStarted, PhaseEnded))]
    assert all(abs(a - b) <= 50 for a, b in zip(phase_at, [e.at for e in replayed
                                                           if isinstance(e, (PhaseStarted, PhaseEnded))]))

    # And `proctor replay` prints a line per phase end and per item, as `run -v` did, less
    # what only events held (image and setup output) and a phase's extras (`· 2 commands`).
    assert main(["replay", record.id, "--speed", "max", "--store", str(store.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == verbose_lines(replayed)
    kept = verbose_lines(e for e in live if not isinstance(e, PhaseProgress) or e.item)
    assert [line.split()[3] for line in lines] == [line.split()[3] for line in kept]

    def item_lines(lines):  # less the clock: an item's time within its turn is spread evenly
        return [line.split(" ", 3)[:2] + line.split(" ", 3)[3:] for line in lines if "turn         " in line]

    assert item_lines(lines) == item_lines(kept) and len(item_lines(lines)) == 6


# --- made from the record alone, and paced (no Docker) ----------------------------------------------


T0 = 1_790_000_000_000


def imported(**fields) -> TrialRecord:
    """A record as an importer writes it: phases and items, no events."""
    return TrialRecord(id="t_imported", batch_id="b_1", run_id="r_1", case_id="greets", variant="other",
                       trial=1, trigger="api", started_at=iso_ms(T0), **fields)


def test_items_keep_their_own_time_inside_the_turn_and_spread_without_one():
    record = imported(
        outcome="pass",
        phases=[PhaseSpan(phase="setup", status="ok", start_ms=0, end_ms=100),
                PhaseSpan(phase="turn", index=1, status="ok", start_ms=100, end_ms=1000, detail="1 completed"),
                PhaseSpan(phase="check", index=1, status="ok", start_ms=1000, end_ms=1000),
                PhaseSpan(phase="teardown", status="ok", start_ms=1000, end_ms=1200)],
        trajectory=[TrajectoryItem(kind="command", turn=1, command="ls", exit_code=0, at=iso_ms(T0 + 700)),
                    TrajectoryItem(kind="message", turn=1, role="assistant", text="a"),
                    TrajectoryItem(kind="message", turn=1, role="assistant", text="b")])
    events = events_from_record(record)
    assert [(e.type, getattr(e, "phase", None)) for e in events] == [
        ("trial_started", None), ("phase_started", "setup"), ("phase_ended", "setup"),
        ("phase_started", "turn"), ("phase_progress", "turn"), ("phase_progress", "turn"),
        ("phase_progress", "turn"), ("phase_ended", "turn"), ("phase_started", "check"),
        ("phase_ended", "check"), ("phase_started", "teardown"), ("phase_ended", "teardown"),
        ("trial_finished", None)]
    # Its own `at` (700), then in order after it (never before), inside the span.
    assert [e.at - T0 for e in events if isinstance(e, PhaseProgress)] == [700, 700, 775]
    assert events[-1].at == T0 + 1200 and events[7].summary == "1 completed in 900ms"


def test_delays_follow_the_recorded_gaps_divided_by_speed_and_cap_idle_gaps():
    record = imported(outcome="fail", failure=Failure(kind="assertion", reason="exit 1"), phases=[
        PhaseSpan(phase="setup", status="ok", start_ms=0, end_ms=400),
        PhaseSpan(phase="check", index=1, status="failed", start_ms=400, end_ms=400 + 15 * 60_000)])
    events = events_from_record(record)
    assert [e.at - T0 for e in events] == [0, 0, 400, 400, 400 + 15 * 60_000, 400 + 15 * 60_000]
    assert delays(events, 1) == [0, 0, 0.4, 0, IDLE_CAP_S, 0]
    assert delays(events, 4) == [0, 0, 0.1, 0, IDLE_CAP_S, 0]
    assert delays(events, 16) == [0, 0, 0.025, 0, IDLE_CAP_S, 0]
    assert delays(events, 0) == [0] * 6
    # Out of order stamps (a clock step) never wait a negative time.
    assert delays(list(reversed(events)), 1) == [0] * 6


def cli(*args: str, store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "engine.cli", *args, "--store", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def test_unknown_trial_exits_2_with_one_line(tmp_path):
    done = cli("replay", "t_nope", store=tmp_path / "proctor.db")
    out, err = done.communicate(timeout=60)
    assert done.returncode == 2 and out == ""
    assert err.splitlines() == [f"proctor: no trial t_nope in {tmp_path / 'proctor.db'}"]


@pytest.mark.parametrize("speed", ["fast", "-1", "nan"])
def test_a_bad_speed_exits_2_naming_it(tmp_path, capsys, speed):
    with pytest.raises(SystemExit) as exit:
        main(["replay", "t_1", "--speed", speed, "--store", str(tmp_path / "proctor.db")])
    assert exit.value.code == 2 and repr(speed) in capsys.readouterr().err


def test_replay_waits_at_the_recorded_pace_and_ctrl_c_exits_130_quietly(tmp_path):
    path = tmp_path / "proctor.db"
    with Store(path) as store:
        store.save_trial(imported(outcome="pass", phases=[
            PhaseSpan(phase="setup", status="ok", start_ms=0, end_ms=10, detail="0 steps"),
            PhaseSpan(phase="check", index=1, status="ok", start_ms=10, end_ms=60_000, detail="passed"),
        ])).result(timeout=30)
    process = cli("replay", "t_imp", "--speed", "4", store=path)
    first = process.stdout.readline()
    started = time.monotonic()
    assert "setup" in first and "0 steps in 10ms" in first
    time.sleep(0.5)  # the check's minute is capped at IDLE_CAP_S: still waiting
    assert process.poll() is None and time.monotonic() - started < IDLE_CAP_S
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130 and out == "" and err == ""
