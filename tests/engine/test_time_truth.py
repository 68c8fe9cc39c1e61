"""Time tells the truth (issue 11, item 5): a trial's `started_at` is its first phase's start,
after any wait for a concurrency slot; `queued_at` keeps when it began waiting; its duration,
the browser's Duration and Started columns and the CLI's "fail in …" count its own work only.
The slot wait stays in the record as its own span, just before the start."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime

import pytest

from engine.events import TrialStarted
from engine.store import Store
from engine.text import span_ms
from tests.conftest import suite_toml

TOML = suite_toml({"scripted": "sh .agent/run.sh"}, concurrency=1)

# Each trial works about a second of its own, then fails its check.
EVAL = """
from pathlib import Path
from engine import evaluation

@evaluation(files={".agent/run.sh": Path("agent.sh")}, trials=3)
def waits(c):
    c.send("x")
    c.exec("false").to_succeed()
"""
AGENT = "sleep 1\necho '{\"type\":\"finished\",\"reason\":\"done\"}'\n"
LINE = re.compile(r"^✗ \[waits#(\d) scripted\] fail in ([\d.]+)(ms|s) · assertion")


def epoch_ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.fixture(scope="module")
def serial_batch(docker_client, tmp_path_factory):
    """Three trials at concurrency 1 through `proctor run`: (stdout, records by trial number,
    trial summaries by number, the store)."""
    folder = tmp_path_factory.mktemp("time-truth")
    (folder / "proctor.toml").write_text(TOML)
    (folder / "agent.sh").write_text(AGENT)
    (folder / "test.eval.py").write_text(EVAL)
    db = folder / "proctor.db"
    done = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(folder / "test.eval.py"),
                           "--store", str(db)], capture_output=True, text=True, timeout=300, cwd=folder)
    assert done.returncode == 1, (done.stdout, done.stderr)
    store = Store(db)
    [batch] = store.list_batches()
    [run] = store.batch_summary(batch.batch_id).runs
    summaries = {t.trial: t for t in run.trials}
    records = {n: store.get_trial(t.id) for n, t in summaries.items()}
    yield done.stdout, records, summaries, store
    store.close()


@pytest.mark.slow
def test_a_trial_that_waited_starts_when_its_work_starts(serial_batch):
    _, records, _, _ = serial_batch
    first, third = records[1], records[3]
    assert third.queued_at is not None and third.started_at is not None
    # It waited for the two before it: it started only after the first one finished.
    assert epoch_ms(third.started_at) >= epoch_ms(first.finished_at)
    assert epoch_ms(third.queued_at) <= epoch_ms(first.started_at) <= epoch_ms(third.started_at)
    for record in records.values():
        assert epoch_ms(record.queued_at) <= epoch_ms(record.started_at)


@pytest.mark.slow
def test_a_trial_that_waited_counts_its_own_work_only(serial_batch):
    _, records, summaries, _ = serial_batch
    first, third = records[1], records[3]
    own = span_ms(third.started_at, third.finished_at)
    batch_time = span_ms(first.queued_at, third.finished_at)
    # The Duration column (the store's duration_ms) is the trial's own work, well under the
    # batch's time: at least the first trial's work is not in it.
    assert summaries[3].duration_ms == own
    assert own <= batch_time - span_ms(first.started_at, first.finished_at)
    # The wait is its own span, just before the start, and in the timings.
    [slot] = [s for s in third.phases if s.phase == "slot"]
    waited = epoch_ms(third.started_at) - epoch_ms(third.queued_at)
    assert slot.end_ms == 0 and abs((slot.end_ms - slot.start_ms) - waited) <= 100
    assert third.timings.slot_ms == slot.end_ms - slot.start_ms
    work = [s for s in third.phases if s.phase != "slot"]
    assert work[0].phase == "image" and 0 <= work[0].start_ms < 500


@pytest.mark.slow
def test_the_live_start_is_the_real_start(serial_batch):
    """The browser counts a running trial's Duration from its TrialStarted event."""
    _, records, _, store = serial_batch
    first, third = records[1], records[3]
    [started] = [e for e in store.trial_events(third.id) if isinstance(e, TrialStarted)]
    assert started.at == epoch_ms(third.started_at) >= epoch_ms(first.finished_at)


@pytest.mark.slow
def test_the_cli_says_each_trials_own_time(serial_batch):
    stdout, records, _, _ = serial_batch
    said = {}
    for line in stdout.splitlines():
        if match := LINE.match(line):
            value, unit = float(match.group(2)), match.group(3)
            said[int(match.group(1))] = value if unit == "ms" else value * 1000
    assert set(said) == {1, 2, 3}, stdout
    third = records[3]
    own = span_ms(third.started_at, third.finished_at)
    # fmt_ms rounds to a tenth of a second; the record's own end comes just after the event.
    assert abs(said[3] - own) <= 500, (said[3], own)
    assert said[3] < span_ms(third.queued_at, third.finished_at) - 1000
