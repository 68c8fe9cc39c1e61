"""Trajectory items in their own table: a big record still round-trips exactly, the studio can
read a record without its items and then page them, and a store written before the split opens
with every item moved."""

from __future__ import annotations

import json
import sqlite3

import pytest

from engine.models import TrajectoryItem, TrialRecord, TurnRecord
from engine.store import SCHEMA_VERSION, ItemRun, Store, StoreError

ITEMS = 100_000
TURNS = 20


def item(n: int, turns: int = TURNS, items: int = ITEMS) -> TrajectoryItem:
    turn = n * turns // items + 1
    match n % 4:
        case 0:
            return TrajectoryItem(kind="command", turn=turn, command=f"pytest -q t{n}.py", exit_code=n % 3,
                                  output=f"line {n}\n[redacted] ok", truncated=n % 7 == 0)
        case 1:
            return TrajectoryItem(kind="message", turn=turn, role="assistant", text=f"step {n} \u00e9\u2603")
        case 2:
            return TrajectoryItem(kind="toolCall", turn=turn, name="edit", input={"path": f"f{n}.py", "n": [n]},
                                  output="ok")
        case _:
            return TrajectoryItem(kind="fileChange", turn=turn, path=f"src/f{n}.py", change="modify",
                                  warnings=["exitCode: NaN dropped"] if n % 11 == 0 else [])


def big_record(trial_id: str = "t_big", items: int = ITEMS) -> TrialRecord:
    return TrialRecord(
        id=trial_id, batch_id="b_1", run_id="r_1", case_id="c", variant="v", trial=1, trigger="cli",
        outcome="pass", started_at="2026-11-29T17:40:47.120Z", finished_at="2026-11-29T17:41:47.120Z",
        turns=[TurnRecord(index=t, prompt=f"turn {t}", status="completed", ms=10, diff=f"diff {t}")
               for t in range(1, TURNS + 1)],
        trajectory=[item(n, items=items) for n in range(items)],
        command_count=items // 4)


@pytest.fixture(scope="module")
def big() -> TrialRecord:
    return big_record()


@pytest.fixture(scope="module")
def big_store(tmp_path_factory, big):
    store = Store(tmp_path_factory.mktemp("lazy") / "proctor.db")
    store.create_trial(big.model_copy(update=dict(outcome=None, trajectory=[])), owner="")
    store.save_trial(big).result()
    yield store
    store.close()


@pytest.mark.slow
def test_a_100000_item_record_round_trips_exactly(big_store, big):
    assert big_store.get_trial("t_big") == big
    assert big_store.trial_json("t_big") == big.to_json()
    assert list(big_store.trial_json("t_big")) == list(big.to_json())  # the keys in SPEC's order


def test_items_are_stored_in_their_own_table_and_the_record_row_is_light(big_store, big):
    with sqlite3.connect(big_store.path) as conn:
        count = conn.execute("SELECT count(*) FROM trajectory_item WHERE trial_id='t_big'").fetchone()[0]
        row = conn.execute("SELECT length(record) FROM trial WHERE id='t_big'").fetchone()[0]
    assert count == ITEMS
    assert row < 10_000  # the record without its items: the studio's first read parses this only


def test_the_outline_is_the_record_without_its_items_and_diffs(big_store, big):
    outline = big_store.get_trial_outline("t_big")
    bare = [t.model_copy(update=dict(diff="", cumulative_diff="")) for t in big.turns]
    assert outline == big.model_copy(update=dict(trajectory=[], turns=bare))
    assert big_store.get_trial_outline("t_big", diffs=True) == big.model_copy(update=dict(trajectory=[]))
    assert big_store.get_trial_outline("t_missing") is None


def test_items_are_paged_by_position_and_laid_out_by_turn(big_store, big):
    layout = big_store.trajectory_layout("t_big")
    assert [(run.turn, run.start, len(run.kinds)) for run in layout] == [
        (t, (t - 1) * ITEMS // TURNS, ITEMS // TURNS) for t in range(1, TURNS + 1)]
    assert [kind for run in layout for kind in run.kinds] == [i.kind for i in big.trajectory]
    assert big_store.trajectory_items("t_big", 90_000, 90_010) == big.trajectory[90_000:90_010]
    assert big_store.trajectory_items("t_big", ITEMS - 2, ITEMS + 50) == big.trajectory[-2:]
    assert big_store.trajectory_items("t_missing", 0, 10) == []


def test_items_in_turn_order_when_stored_out_of_it(store):
    items = [TrajectoryItem(kind="message", turn=t, text=str(i)) for i, t in enumerate([2, 1, 2, 1])]
    rec = big_record("t_mixed", items=0).model_copy(update=dict(trajectory=items))
    store.save_trial(rec).result()
    assert store.trajectory_layout("t_mixed") == [ItemRun(1, 1, ["message"]), ItemRun(1, 3, ["message"]),
                                                  ItemRun(2, 0, ["message"]), ItemRun(2, 2, ["message"])]
    assert store.get_trial("t_mixed") == rec


def test_saving_again_replaces_the_items_and_deleting_removes_them(store):
    store.create_batch("b_1", "cli", "", "2026-11-29T17:40:47.120Z")
    first = big_record("t_a", items=50)
    store.save_trial(first).result()
    second = first.model_copy(update=dict(trajectory=first.trajectory[:3]))
    store.save_trial(second).result()
    assert store.get_trial("t_a") == second
    store.close_trial_as_infra("t_a", "the engine was killed", "2026-11-29T17:42:00.000Z")
    store.flush()
    assert store.get_trial("t_a").trajectory == second.trajectory
    store.finish_batch("b_1", "finished", "2026-11-29T17:42:00.000Z")
    store.flush()
    assert store.delete_trials(["t_a"]) == 1
    with sqlite3.connect(store.path) as conn:
        for table in ("trajectory_item", "trajectory_layout", "turn_diff"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


def test_a_damaged_item_is_one_sentence_naming_the_trial(store):
    store.save_trial(big_record("t_d", items=5)).result()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE trajectory_item SET json='{not json' WHERE position=3")
    with pytest.raises(StoreError, match="record of trial t_d .* is damaged"):
        store.get_trial("t_d")
    with pytest.raises(StoreError, match="record of trial t_d .* is damaged"):
        store.trajectory_items("t_d", 0, 5)
    assert store.get_trial_outline("t_d").id == "t_d"  # the rest of the record still shows


def _old_store(path, records: dict[str, str]) -> None:
    """A store as the code before the split wrote it: schema 1, no item table, and each record's
    items inside its JSON (`records`: trial id -> the record column's text)."""
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE trajectory_item")
        conn.execute("DROP TABLE trajectory_layout")
        conn.execute("DROP TABLE turn_diff")
        conn.execute("DROP TABLE note")  # schema 3's
        conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
        for trial_id, text in records.items():
            conn.execute("INSERT INTO trial (id, run_id, batch_id, case_id, variant, trial, owner, status, "
                         "command_count, tags, tokens, record) VALUES (?, 'r_1', 'b_1', 'c', 'v', 1, '', "
                         "'done', 0, '[]', 0, ?)", (trial_id, text))


def test_a_store_written_before_the_split_migrates_and_opens_with_every_item(tmp_path):
    path = tmp_path / "old.db"
    rec = big_record("t_old", items=5_000)
    no_items = {k: v for k, v in big_record("t_none", items=0).to_json().items() if k != "trajectory"}
    _old_store(path, {"t_old": json.dumps(rec.to_json()), "t_none": json.dumps(no_items),
                      "t_bad": "{not json"})
    with Store(path) as store:
        assert store.get_trial("t_old") == rec
        assert store.trajectory_items("t_old", 4_990, 5_000) == rec.trajectory[4_990:]
        assert sum(len(run.kinds) for run in store.trajectory_layout("t_old")) == 5_000
        assert store.get_trial("t_none").trajectory == []
        with pytest.raises(StoreError, match="t_bad"):  # still damaged, and alone in being so
            store.get_trial("t_bad")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)
        assert conn.execute("SELECT count(*) FROM trajectory_item").fetchone()[0] == 5_000
        assert conn.execute("SELECT count(*) FROM turn_diff WHERE trial_id='t_old'").fetchone()[0] == TURNS
        assert json.loads(conn.execute("SELECT record FROM trial WHERE id='t_old'").fetchone()[0])[
            "trajectory"] == []


def test_a_diff_that_is_not_utf8_reads_with_replacement_characters(store):
    store.save_trial(big_record("t_u", items=1)).result()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE turn_diff SET diff = CAST(x'2b61ff0a' AS TEXT) WHERE position = 0")
    assert store.get_trial("t_u").turns[0].diff == "+a\ufffd\n"
    assert store.get_trial_outline("t_u", diffs=True).turns[1].diff == "diff 2"
