"""`proctor rm` and `Store.delete_batches` (issue 11, item 9): a batch goes with all its runs,
trials (their records hold the artifacts) and events; a running batch is refused; without
--yes it asks on a terminal and refuses without one."""

from __future__ import annotations

import os
import pty
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engine.store import Store, StoreError
from tests.engine.test_cli import cli, cli_env, one_line, saved_store

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded.db"
# A real batch the engine recorded: 4 runs, 4 trials and their events.
with sqlite3.connect(f"file:{RECORDED}?mode=ro", uri=True) as _db:
    RECORDED_BATCH = _db.execute("SELECT id FROM batch").fetchone()[0]
OTHER_BATCH = "b_1"  # saved_store's


@pytest.fixture
def two_batches(tmp_path) -> Path:
    """A store holding the recorded batch and saved_store's one-trial batch."""
    path = tmp_path / "proctor.db"
    shutil.copyfile(RECORDED, path)
    saved_store(path)
    with Store(path) as store:
        store.finish_batch(OTHER_BATCH, "finished", "2026-11-29T17:41:00.000Z")
    return path


def rows_of(path: Path, batch_id: str) -> dict[str, int]:
    """How many rows of each table belong to the batch (trial ids found through its trials)."""
    with sqlite3.connect(path) as db:
        trials = [row[0] for row in
                  db.execute("SELECT id FROM trial WHERE batch_id = ?", (batch_id,))]
        counts = {"batch": db.execute("SELECT count(*) FROM batch WHERE id = ?",
                                      (batch_id,)).fetchone()[0]}
        for table in ("run", "trial", "event"):
            counts[table] = db.execute(f"SELECT count(*) FROM {table} WHERE batch_id = ?",
                                       (batch_id,)).fetchone()[0]
        marks = ",".join("?" * len(trials))
        counts["events of its trials"] = db.execute(
            f"SELECT count(*) FROM event WHERE trial_id IN ({marks})", trials).fetchone()[0]
    return counts


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def test_delete_batches_removes_every_row_of_the_batch_and_nothing_else(two_batches):
    before = rows_of(two_batches, RECORDED_BATCH)
    assert before["trial"] == 4 and before["event"] > 100  # the fixture is what we think
    kept = rows_of(two_batches, OTHER_BATCH)
    with Store(two_batches) as store:
        assert store.delete_batches([RECORDED_BATCH]) == 1
        assert store.batch_summary(RECORDED_BATCH) is None
        assert [b.batch_id for b in store.list_batches()] == [OTHER_BATCH]
    assert set(rows_of(two_batches, RECORDED_BATCH).values()) == {0}
    assert rows_of(two_batches, OTHER_BATCH) == kept
    assert integrity(two_batches) == "ok"


def test_delete_batches_counts_only_what_was_there(two_batches):
    with Store(two_batches) as store:
        assert store.delete_batches([]) == 0
        assert store.delete_batches(["b_nope", OTHER_BATCH, OTHER_BATCH]) == 1
        assert store.delete_batches([OTHER_BATCH]) == 0


def test_delete_batches_refuses_a_running_batch_and_deletes_nothing(two_batches):
    stopped: list[StoreError] = []
    with Store(two_batches) as store:
        store.add_error_listener(stopped.append)  # a running batch would stop on a write error
        store.create_batch("b_live", "cli", "", "2026-11-30T10:00:00.000Z")
        store.flush()
        with pytest.raises(StoreError, match="b_live is running"):
            store.delete_batches([OTHER_BATCH, "b_live"])
        assert {b.batch_id for b in store.list_batches()} == {RECORDED_BATCH, OTHER_BATCH, "b_live"}
        store.check_writable()  # the writer goes on
    assert stopped == []


def test_rm_yes_deletes_and_says_what(two_batches, capsys):
    code, out, err = cli(capsys, "rm", RECORDED_BATCH[:6], "--yes", "--store", two_batches)
    assert code == 0 and err == ""
    assert RECORDED_BATCH in out and "4 trials" in out
    assert set(rows_of(two_batches, RECORDED_BATCH).values()) == {0}
    assert integrity(two_batches) == "ok"


def test_rm_of_a_running_batch_exits_2_with_one_line(two_batches, capsys):
    with Store(two_batches) as store:
        store.create_batch("b_live", "cli", "", "2026-11-30T10:00:00.000Z")
    code, out, err = cli(capsys, "rm", "b_live", OTHER_BATCH, "--yes", "--store", two_batches)
    assert code == 2 and out == ""
    one_line(err, "b_live", "running")
    assert rows_of(two_batches, OTHER_BATCH)["trial"] == 1  # nothing deleted


def test_rm_of_an_unknown_id_exits_2_and_deletes_nothing(two_batches, capsys):
    code, out, err = cli(capsys, "rm", OTHER_BATCH, "b_nope", "--yes", "--store", two_batches)
    assert code == 2
    one_line(err, "b_nope")
    assert rows_of(two_batches, OTHER_BATCH)["batch"] == 1


def test_rm_without_yes_and_without_a_terminal_refuses(two_batches):
    done = subprocess.run([sys.executable, "-m", "engine.cli", "rm", OTHER_BATCH,
                           "--store", str(two_batches)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=cli_env())
    assert done.returncode == 2 and "Traceback" not in done.stderr
    one_line(done.stderr, "--yes")
    assert rows_of(two_batches, OTHER_BATCH)["batch"] == 1


@pytest.mark.parametrize(("answer", "deleted"), [("y\n", True), ("\n", False), ("no\n", False)])
def test_rm_without_yes_asks_on_a_terminal(two_batches, answer, deleted):
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "engine.cli", "rm", OTHER_BATCH,
                                    "--store", str(two_batches)], stdin=terminal,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=cli_env())
        os.write(controller, answer.encode())
        out, err = process.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert "Traceback" not in err
    assert OTHER_BATCH in err  # the question names what goes
    assert (process.returncode == 0) is deleted
    assert rows_of(two_batches, OTHER_BATCH)["batch"] == (0 if deleted else 1)


def test_rm_of_a_trial_deletes_it_and_its_events_and_keeps_its_batch(two_batches, capsys):
    """SPEC: `proctor rm ID…` (batches or trials)."""
    with Store(two_batches) as store:
        summary = store.batch_summary(RECORDED_BATCH)
        first, second = (run.trials[0].id for run in summary.runs[:2])
        assert list(store.trial_events(first))
    code, out, err = cli(capsys, "rm", first[:9], "--yes", "--store", two_batches)
    assert (code, out.strip(), err) == (0, f"deleted {first} (1 trial)", "")
    with Store(two_batches) as store:
        assert store.get_trial(first) is None and list(store.trial_events(first)) == []
        assert store.get_trial(second) is not None, "the batch's other trials stay"
        assert len([t for r in store.batch_summary(RECORDED_BATCH).runs for t in r.trials]) == 3
    assert integrity(two_batches) == "ok"


def test_rm_of_a_run_or_an_unfinished_trial_exits_2_and_deletes_nothing(two_batches, capsys):
    with Store(two_batches) as store:
        run = store.batch_summary(RECORDED_BATCH).runs[0]
        store.create_run("r_open", RECORDED_BATCH, "open", "v", position=9)
        from tests.engine.test_browse import _trial
        _trial(store, RECORDED_BATCH, "r_open", 1, None, case="open", variant="v")
        store.flush()
    before = rows_of(two_batches, RECORDED_BATCH)
    code, _out, err = cli(capsys, "rm", run.run_id, "--yes", "--store", two_batches)
    assert code == 2 and "is a run: rm deletes batches or trials" in one_line(err)
    code, _out, err = cli(capsys, "rm", "t_open_1", "--yes", "--store", two_batches)
    assert code == 2 and "trial t_open_1 has not finished" in one_line(err)
    assert rows_of(two_batches, RECORDED_BATCH) == before
