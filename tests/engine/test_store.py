"""The store: what the CLI and the studio rely on when they read and write it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from engine.events import PhaseProgress, PhaseStarted, TrialFinished
from engine.models import (
    Failure, TrajectoryItem, TrialRecord, TrialSummary, TurnRecord, Validation,
)
from engine.store import SCHEMA_VERSION, Store, StoreError, default_store_path

NOW = "2026-11-29T17:40:47.120Z"
LATER = "2026-11-29T17:40:55.620Z"


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "proctor.db")
    yield s
    s.close()


def record(trial_id="t_0001", run_id="r_1", batch_id="b_1", trial=1, **fields) -> TrialRecord:
    return TrialRecord(id=trial_id, batch_id=batch_id, run_id=run_id, case_id="writes_greet",
                       variant="scripted", trial=trial, trigger="cli", **fields)


def finished(trial_id, run_id, trial, outcome, commands, batch_id="b_1") -> TrialRecord:
    failure = {"fail": Failure(kind="assertion", reason="exit 1", where="check 1 of 1"),
               "infra_error": Failure(kind="infra", reason="image build failed")}.get(outcome)
    return record(trial_id, run_id, batch_id, trial, outcome=outcome, failure=failure,
                  command_count=commands, started_at=NOW, finished_at=LATER)


def progress(trial_id: str, n: int, batch_id="b_1") -> PhaseProgress:
    return PhaseProgress(batch_id=batch_id, trial_id=trial_id, case_id="writes_greet",
                         variant="scripted", trial=1, phase="turn", index=1, message=str(n))


def test_default_path_follows_proctor_store(monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_STORE", str(tmp_path / "elsewhere.db"))
    assert default_store_path() == tmp_path / "elsewhere.db"
    monkeypatch.delenv("PROCTOR_STORE")
    assert default_store_path().name == "proctor.db"


def test_creates_parent_folders_and_uses_wal(tmp_path):
    path = tmp_path / "deep" / "er" / "proctor.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)


def test_record_round_trips(store):
    rec = record(
        outcome="pass", started_at=NOW, finished_at=LATER, command_count=1, tags=["smoke"],
        turns=[TurnRecord(index=1, prompt="Create greet.py", status="completed", ms=4000,
                          diff="diff --git a/greet.py", files_changed=["greet.py"])],
        trajectory=[TrajectoryItem(kind="command", turn=1, command="pytest -q", exit_code=0,
                                   output="1 passed")],
        validations=[Validation(kind="command", name="pytest -q", status="passed",
                                evidence={"exit_code": 0})],
    )
    store.create_trial(record(), owner="host:1")
    store.save_trial(rec)
    store.flush()
    assert store.get_trial("t_0001") == rec
    assert store.trial_json("t_0001") == rec.to_json()
    assert "name" not in store.trial_json("t_0001")["trajectory"][0]  # only its kind's fields
    assert store.get_trial("t_missing") is None
    assert store.unfinished_trials() == []


def test_trial_lifecycle_is_visible_while_it_runs(store):
    store.create_trial(record(), owner="host:42")
    store.flush()
    assert store.get_trial("t_0001").outcome is None
    assert store.unfinished_trials() == [("t_0001", "b_1", "host:42")]
    store.mark_trial_running("t_0001", NOW)
    store.flush()
    assert store.get_trial("t_0001").started_at == NOW
    assert store.unfinished_trials() == [("t_0001", "b_1", "host:42")]


def test_batch_summary_has_runs_in_order_with_distributions(store):
    store.create_batch("b_1", "cli", owner="host:1", started_at=NOW)
    store.create_run("r_2", "b_1", "second_case", "scripted", position=1)
    store.create_run("r_1", "b_1", "writes_greet", "scripted", position=0)
    outcomes = [("t_a3", "r_1", 3, "fail", 9), ("t_a1", "r_1", 1, "pass", 2),
                ("t_a2", "r_1", 2, "pass", 3), ("t_b1", "r_2", 1, "infra_error", 0)]
    for trial_id, run_id, n, outcome, commands in outcomes:
        store.create_trial(record(trial_id, run_id, trial=n), owner="host:1")
        store.save_trial(finished(trial_id, run_id, n, outcome, commands))
    store.finish_batch("b_1", "finished", LATER)
    store.flush()

    summary = store.batch_summary("b_1")
    assert summary.status == "finished" and summary.finished_at == LATER
    assert [r.run_id for r in summary.runs] == ["r_1", "r_2"]
    first, second = summary.runs
    assert [t.trial for t in first.trials] == [1, 2, 3]
    assert first.trials[2].failure == Failure(kind="assertion", reason="exit 1",
                                              where="check 1 of 1")
    assert first.trials[0].duration_ms == 8500
    # Worked out by hand from SPEC.md's rules: passes 2 and 3 commands, a fail with 9.
    assert first.distribution.model_dump() == {
        "trials": 3, "scored": 3, "passed": 2, "failed": 1, "voided": 0, "pass_rate": 0.667,
        "deterministic": False, "command_min": 2, "command_median": 3, "command_max": 9}
    assert second.distribution.model_dump() == {
        "trials": 1, "scored": 0, "passed": 0, "failed": 0, "voided": 1, "pass_rate": None,
        "deterministic": False, "command_min": None, "command_median": None, "command_max": None}
    assert store.batch_summary("b_nope") is None


def test_list_batches_newest_first_and_paged(store):
    for i in range(5):
        store.create_batch(f"b_{i}", "cli", owner="", started_at=f"2026-11-29T17:4{i}:00.000Z")
    store.flush()
    assert [b.batch_id for b in store.list_batches()] == ["b_4", "b_3", "b_2", "b_1", "b_0"]
    assert [b.batch_id for b in store.list_batches(limit=2, offset=1)] == ["b_3", "b_2"]
    assert store.running_batches()[0] == ("b_0", "")


def test_prefix_lookup(store):
    for trial_id in ("t_3fa1", "t_3fa2", "t_4bb0"):
        store.create_trial(record(trial_id), owner="")
    store.flush()
    assert store.get_trial("t_4b").id == "t_4bb0"
    assert store.get_trial("t_3fa1").id == "t_3fa1"
    with pytest.raises(StoreError, match="matches 2 trials"):
        store.get_trial("t_3fa")
    # "_" and "%" are LIKE wildcards; each must match only itself.
    store.create_trial(record("tx4bb1"), owner="")
    store.flush()
    assert store.get_trial("t_4").id == "t_4bb0"  # not "tx4bb1" too
    assert store.get_trial("t%") is None


def test_events_from_eight_threads_land_in_order_per_trial(store):
    per_thread = 500

    def emit(k: int) -> None:
        for n in range(per_thread):
            store.add_event(progress(f"t_{k}", n))

    threads = [threading.Thread(target=emit, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.flush()
    for k in range(8):
        got = store.events(trial_id=f"t_{k}")
        assert [e.message for _, e in got] == [str(n) for n in range(per_thread)]
        assert [seq for seq, _ in got] == sorted(seq for seq, _ in got)
    assert len(store.events(batch_id="b_1", limit=100_000)) == 8 * per_thread


def test_events_page_after_seq_and_keep_their_type(store):
    store.add_event(PhaseStarted(batch_id="b_1", trial_id="t_1", case_id="c", variant="v",
                                 trial=1, phase="image"))
    for n in range(4):
        store.add_event(progress("t_1", n))
    store.add_event(TrialFinished(batch_id="b_1", trial_id="t_1", case_id="c", variant="v",
                                  trial=1, outcome="pass"))
    store.flush()
    first = store.events(trial_id="t_1", limit=2)
    assert isinstance(first[0][1], PhaseStarted)
    rest = store.events(trial_id="t_1", after_seq=first[-1][0])
    assert len(rest) == 4 and isinstance(rest[-1][1], TrialFinished)


def test_ten_thousand_events_are_quick(store):
    events = [progress("t_1", n) for n in range(10_000)]
    start = time.perf_counter()
    for event in events:
        store.add_event(event)
    store.flush()
    elapsed = time.perf_counter() - start
    print(f"10,000 events stored in {elapsed * 1000:.0f} ms")
    assert len(store.events(trial_id="t_1", limit=20_000)) == 10_000
    assert elapsed < 3


def test_reader_sees_committed_data_while_the_writer_keeps_going(store):
    started, stop = threading.Event(), threading.Event()

    def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            store.add_event(progress("t_busy", n))
            started.set()
            n += 1
            time.sleep(0.0002)  # a busy trial's pace, not a flood the writer can never drain

    writer = threading.Thread(target=keep_writing)
    writer.start()
    started.wait()
    try:
        store.create_batch("b_live", "studio", owner="", started_at=NOW)
        store.flush()
        assert store.batch_summary("b_live").status == "running"
        seen = [len(store.events(trial_id="t_busy", limit=1_000_000)) for _ in range(3)]
        assert seen[0] > 0 and seen == sorted(seen)
    finally:
        stop.set()
        writer.join()


def test_close_trial_as_infra_voids_the_record(store):
    store.create_batch("b_1", "cli", owner="host:9", started_at=NOW)
    store.create_run("r_1", "b_1", "writes_greet", "scripted", position=0)
    store.create_trial(record(), owner="host:9")
    store.mark_trial_running("t_0001", NOW)
    store.close_trial_as_infra("t_0001", "the process running it stopped", LATER)
    store.flush()

    rec = store.get_trial("t_0001")
    assert rec.outcome == "infra_error" and rec.finished_at == LATER
    assert rec.failure == Failure(kind="infra", reason="the process running it stopped")
    assert store.unfinished_trials() == []
    run = store.batch_summary("b_1").runs[0]
    assert run.trials == [TrialSummary(id="t_0001", trial=1, outcome="infra_error",
                                       failure=rec.failure, duration_ms=8500)]


def test_corrupt_file_is_refused_in_one_sentence(tmp_path):
    path = tmp_path / "proctor.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as err:
        Store(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message and "not a Proctor store" in message and "--store" in message


def test_other_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(StoreError, match="not a Proctor store"):
        Store(path)


def test_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "proctor.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match="newer Proctor.*upgrade Proctor"):
        Store(path)


def test_reopening_keeps_the_data(tmp_path):
    path = tmp_path / "proctor.db"
    with Store(path) as s:
        s.save_trial(finished("t_1", "r_1", 1, "pass", 1))
    with Store(path) as s:
        assert s.get_trial("t_1").outcome == "pass"


def test_writer_errors_surface_on_flush_and_other_writes_survive(store):
    store.create_batch("b_1", "cli", owner="", started_at=NOW)
    store.flush()
    store.create_batch("b_1", "cli", owner="", started_at=NOW)  # duplicate id
    store.create_batch("b_2", "cli", owner="", started_at=NOW)
    with pytest.raises(StoreError, match="writing to the store .* failed"):
        store.flush()
    store.flush()  # reported once
    assert store.batch_summary("b_2") is not None


def test_writes_after_close_are_refused(tmp_path):
    s = Store(tmp_path / "proctor.db")
    s.close()
    with pytest.raises(StoreError, match="is closed"):
        s.heartbeat("b_1", NOW)


# --- failures surface at once; a lock only delays; the WAL stays bounded ---------------------------


def test_a_failed_write_is_reported_at_once_to_listeners(store):
    failures: list[StoreError] = []
    reported = threading.Event()
    store.add_error_listener(lambda error: (failures.append(error), reported.set()))
    store.create_batch("b_1", "cli", owner="", started_at=NOW)
    store.create_batch("b_1", "cli", owner="", started_at=NOW)  # duplicate id
    assert reported.wait(5), "the writer kept the failure to itself"
    assert isinstance(failures[0], StoreError) and "\n" not in str(failures[0])
    with pytest.raises(StoreError, match="UNIQUE"):
        store.flush()  # and once more to whoever flushes


def test_save_trial_returns_once_committed_or_raises(store):
    store.save_trial(finished("t_1", "r_1", 1, "pass", 1)).result(timeout=5)
    with sqlite3.connect(store.path) as conn:  # another connection sees it: it is committed
        assert conn.execute("SELECT outcome FROM trial WHERE id = 't_1'").fetchone() == ("pass",)
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.save_trial(finished("t_2", "r_1", 2, "pass", 1))


def test_an_unwritable_store_fails_its_write_check(tmp_path):
    path = tmp_path / "proctor.db"
    Store(path).close()
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not possible here")
    try:
        s = Store(path)  # reading still works
        with pytest.raises(StoreError, match="read-only.*--store"):
            s.check_writable()
        s._writer.close()
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def hold_write_lock(path, seconds: float) -> subprocess.Popen:
    """Another process doing BEGIN IMMEDIATE and sleeping; returns once it holds the lock."""
    locker = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"conn = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        f"time.sleep({seconds})\n"
        "conn.rollback()\n")], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


def test_an_outside_write_lock_longer_than_the_busy_timeout_only_delays_writes(tmp_path, monkeypatch):
    import engine.store.store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 300)  # the lock outlasts it many times over
    s = Store(tmp_path / "proctor.db")
    try:
        s.create_batch("b_1", "cli", owner="", started_at=NOW)
        s.flush()
        locker = hold_write_lock(s.path, 3)
        started = time.monotonic()
        s.save_trial(finished("t_1", "r_1", 1, "pass", 1))
        s.create_batch("b_2", "cli", owner="", started_at=NOW)
        s.flush(timeout=60)  # no StoreError: nothing failed, it waited
        assert time.monotonic() - started >= 2
        locker.wait(10)
        assert s.get_trial("t_1").outcome == "pass" and s.batch_summary("b_2") is not None
    finally:
        s.close()


def test_opening_waits_out_an_outside_write_lock(tmp_path, monkeypatch):
    import engine.store.store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 300)
    path = tmp_path / "proctor.db"
    sqlite3.connect(path).close()  # an empty file: opening it must create the tables
    locker = hold_write_lock(path, 2)
    with Store(path) as s:
        assert s.list_batches() == []
    locker.wait(10)


def test_one_big_commit_leaves_no_big_wal(store):
    wal = store.path.with_name(store.path.name + "-wal")
    big = "x" * (20 << 20)
    store.save_trial(finished("t_1", "r_1", 1, "pass", 1).model_copy(update=dict(setup_log=big)))
    store.flush()
    for n in range(3):  # later small commits checkpoint and restart the WAL
        store.create_batch(f"b_{n}", "cli", owner="", started_at=NOW)
        store.flush()
    assert wal.stat().st_size <= 4 << 20, f"WAL of {wal.stat().st_size} B while open"
    store.close()
    assert not wal.exists() or wal.stat().st_size == 0, "close left a WAL behind"


# --- damaged contents: one StoreError or left out, never a traceback ------------------------------


@pytest.mark.parametrize("value", ["'abc'", "0", "-3", "'1e999'", "''"])
def test_an_unreadable_schema_version_is_refused_in_one_sentence(tmp_path, value):
    path = tmp_path / "proctor.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE meta SET value = {value} WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version.*--store") as err:
        Store(path)
    assert "\n" not in str(err.value)


def test_damaged_rows_are_left_out_and_named(store):
    for n, outcome in enumerate(["pass", "fail"], 1):
        store.save_trial(finished(f"t_{n}", "r_1", n, outcome, 1))
    store.create_batch("b_1", "cli", owner="", started_at=NOW)
    store.create_run("r_1", "b_1", "writes_greet", "scripted", 0)
    store.flush()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE trial SET outcome = 'exploded' WHERE id = 't_2'")
    damaged: list[str] = []
    (batch,) = store.list_batches(damaged=damaged)
    assert [t.id for t in batch.runs[0].trials] == ["t_1"] and damaged == ["trial t_2"]


def test_a_damaged_record_is_one_store_error(store):
    store.save_trial(finished("t_1", "r_1", 1, "pass", 1))
    store.flush()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE trial SET record = json_set(record, '$.phases', 'none')")
    with pytest.raises(StoreError, match="t_1.*damaged.*phases"):
        store.get_trial("t_1")


def test_a_damaged_event_is_skipped(store):
    store.add_event(progress("t_1", 1))
    store.add_event(progress("t_1", 2))
    store.flush()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE event SET json = '{\"type\": \"nope\"}' WHERE seq = 1")
    assert [e.message for _, e in store.events(trial_id="t_1")] == ["2"]
