"""The browser's queries: what the studio's trial list shows, filters and sorts, from SQL."""

from __future__ import annotations

import random
import re
import sqlite3

import pytest
import sqlalchemy

from engine.models import Failure, TrialRecord, Usage
from engine.store import Store
from engine.store.browse import (
    SORT_KEYS, BrowseFilter, Sort, batches_page, count_batches, filter_options, runs_of, trial_item,
    trials_of,
)
from engine.store.browse import pass_and_fail, run_grid
from tests.make_store import make_store, put_trial

REASONS = {"assertion": "python3 -m pytest -q exited 1", "judge": "verdict 0.2 below 0.7",
           "timeout": "the trial ran past its timeout of 2m",
           "infra": "setup step 2 (exit 3) failed: 100%_done"}


def _trial(store: Store, batch: str, run: str, n: int, outcome: str | None, commands: int = 0,
           kind: str | None = None, seconds: int = 10, tokens: tuple[int, int] = (0, 0),
           case: str = "writes_greet", variant: str = "scripted",
           tags: tuple[str, ...] = ("smoke",)) -> str:
    kind = kind or {"fail": "assertion", "infra_error": "infra"}.get(outcome or "")
    trial_id = f"t_{run[2:]}_{n}"
    rec = TrialRecord(
        id=trial_id, batch_id=batch, run_id=run, case_id=case, variant=variant, trial=n,
        trigger="cli", tags=list(tags), outcome=outcome, command_count=commands,
        failure=Failure(kind=kind, reason=REASONS[kind]) if kind else None,
        started_at=f"2026-11-29T17:00:{n:02d}.000Z",
        finished_at=f"2026-11-29T17:{seconds // 60:02d}:{n + seconds % 60:02d}.000Z",
        usage=Usage(input=tokens[0], output=tokens[1], cache_read=999))
    return put_trial(store, rec)


@pytest.fixture
def store(tmp_path):
    """Three batches: b_old (all passes), b_mix (every kind of trial), b_live (running)."""
    s = Store(tmp_path / "proctor.db")
    s.create_batch("b_old", "ci", owner="", started_at="2026-11-28T10:00:00.000Z")
    s.create_run("r_old", "b_old", "adds_numbers", "mini-4o", position=0)
    for n in (1, 2):
        _trial(s, "b_old", "r_old", n, "pass", commands=5, tokens=(1000, 100),
               case="adds_numbers", variant="mini-4o", tags=("math",))
    s.finish_batch("b_old", "finished", "2026-11-28T10:01:30.000Z")

    s.create_batch("b_mix", "cli", owner="", started_at="2026-11-29T17:00:00.000Z")
    s.create_run("r_greet", "b_mix", "writes_greet", "scripted", position=0)
    _trial(s, "b_mix", "r_greet", 1, "pass", commands=2, seconds=30, tokens=(1500, 200))
    _trial(s, "b_mix", "r_greet", 2, "pass", commands=3, seconds=20, tokens=(1500, 200))
    _trial(s, "b_mix", "r_greet", 3, "fail", commands=9, seconds=40, tokens=(1500, 200))
    s.create_run("r_same", "b_mix", "fixes_parser", "scripted", position=1)
    _trial(s, "b_mix", "r_same", 1, "fail", commands=4, kind="judge", case="fixes_parser")
    _trial(s, "b_mix", "r_same", 2, "fail", commands=8, kind="timeout", case="fixes_parser")
    s.create_run("r_void", "b_mix", "needs_a_lockfile", "scripted", position=2)
    _trial(s, "b_mix", "r_void", 1, "infra_error", case="needs_a_lockfile", tags=())
    _trial(s, "b_mix", "r_void", 2, "skipped", case="needs_a_lockfile", tags=())
    s.finish_batch("b_mix", "finished", "2026-11-29T17:02:00.000Z")

    s.create_batch("b_live", "studio", owner="", started_at="2026-11-29T18:00:00.000Z")
    s.create_run("r_live", "b_live", "writes_greet", "mini-4o", position=0)
    s.create_run("r_empty", "b_live", "adds_numbers", "mini-4o", position=1)
    live = _trial(s, "b_live", "r_live", 1, None, case="writes_greet", variant="mini-4o")
    s.set_trial_phase(live, "turn")
    s.flush()
    yield s
    s.close()


def ids(items) -> list[str]:
    return [item.id for item in items]


def test_batches_newest_first_with_whole_batch_counts(store):
    live, mix, old = batches_page(store)
    assert ids([live, mix, old]) == ["b_live", "b_mix", "b_old"]
    c = mix.counts
    assert (c.trials, c.passed, c.failed, c.voided, c.skipped, c.running) == (7, 2, 3, 1, 1, 0)
    assert c.scored == 5 and c.pass_rate == 0.4
    assert mix.commands == 2 + 3 + 9 + 4 + 8 and mix.tokens == 3 * 1700
    assert (mix.trigger, mix.status, mix.duration_ms) == ("cli", "finished", 120_000)
    assert live.status == "running" and live.counts.running == 1 and live.duration_ms is None
    assert live.counts.pass_rate is None  # nothing scored: no result, not 0
    assert old.counts.pass_rate == 1.0


def test_runs_carry_their_distribution(store):
    greet, same, void = sorted(runs_of(store, "b_mix"), key=lambda r: r.position)
    assert (greet.case_id, greet.variant) == ("writes_greet", "scripted")
    assert greet.pass_rate == 0.667 and not greet.deterministic
    assert (greet.command_min, greet.command_median, greet.command_max) == (2, 3, 9)
    assert greet.tokens == 5100 and greet.duration_ms == 30_000
    # Two scored trials, both fail, 4 and 8 commands: within four, so deterministic.
    assert same.deterministic and same.pass_rate == 0.0 and same.command_median == 6
    # Void and skipped trials never count: no pass rate, no command counts.
    assert void.pass_rate is None and not void.deterministic
    assert void.command_median is None and void.counts.voided == 1
    empty = [r for r in runs_of(store, "b_live") if r.id == "r_empty"][0]
    assert empty.counts.trials == 0 and empty.pass_rate is None


def test_runs_agree_with_the_engine_distribution(tmp_path):
    """SQL's median and deterministic rule match models.distribution on random runs."""
    rng = random.Random(3)
    with Store(tmp_path / "random.db") as s:
        s.create_batch("b_r", "cli", owner="", started_at="2026-11-29T17:00:00.000Z")
        for r in range(60):
            s.create_run(f"r_{r}", "b_r", f"case_{r}", "v", position=r)
            for n in range(1, rng.randint(1, 6) + 1):
                _trial(s, "b_r", f"r_{r}", n,
                       rng.choice(["pass", "pass", "fail", "infra_error", "skipped"]),
                       commands=rng.randint(0, 10), case=f"case_{r}", variant="v")
        s.flush()
        expected = {run.run_id: run.distribution for run in s.batch_summary("b_r").runs}
        for run in runs_of(s, "b_r"):
            d = expected[run.id]
            got = (run.counts.passed, run.counts.failed, run.counts.voided, run.pass_rate,
                   run.deterministic, run.command_min, run.command_median, run.command_max)
            assert got == (d.passed, d.failed, d.voided, d.pass_rate, d.deterministic,
                           d.command_min, d.command_median, d.command_max), run.id


def test_trials_show_their_failure_tokens_and_live_phase(store):
    greet = trials_of(store, "r_greet")
    assert [t.trial for t in greet] == [1, 2, 3]
    assert greet[2].outcome == "fail" and greet[2].failure_kind == "assertion"
    assert greet[0].tokens == 1700 and greet[0].duration_ms == 30_000
    void = trials_of(store, "r_void")[0]
    assert void.failure_reason == REASONS["infra"]
    live = trials_of(store, "r_live")[0]
    assert (live.status, live.outcome, live.phase) == ("running", None, "turn")
    assert trial_item(store, live.id) == live and trial_item(store, "t_nope") is None


def test_saving_the_record_clears_the_live_phase(store):
    live = trials_of(store, "r_live")[0]
    _trial(store, "b_live", "r_live", 2, "pass", case="writes_greet", variant="mini-4o")
    store.set_trial_phase(live.id, "check")
    store.flush()
    assert trials_of(store, "r_live")[0].phase == "check"
    store.save_trial(store.get_trial(live.id).model_copy(update=dict(outcome="pass")))
    store.flush()
    assert trials_of(store, "r_live")[0].phase is None


@pytest.mark.parametrize("flt, batches, runs_in_mix, trials_in_greet", [
    (BrowseFilter(outcomes={"fail"}), ["b_mix"], ["r_greet", "r_same"], [3]),
    (BrowseFilter(outcomes={"pass"}), ["b_mix", "b_old"], ["r_greet"], [1, 2]),
    (BrowseFilter(outcomes={"running"}), ["b_live"], [], []),
    (BrowseFilter(outcomes={"infra_error", "skipped"}), ["b_mix"], ["r_void"], []),
    (BrowseFilter(failure_kinds={"timeout"}), ["b_mix"], ["r_same"], []),
    (BrowseFilter(cases={"adds_numbers"}), ["b_old"], [], []),
    (BrowseFilter(variants={"mini-4o"}), ["b_live", "b_old"], [], []),
    (BrowseFilter(tags={"math"}), ["b_old"], [], []),
    (BrowseFilter(tags={"smoke"}, outcomes={"pass"}), ["b_mix"], ["r_greet"], [1, 2]),
    (BrowseFilter(text="PARSER"), ["b_mix"], ["r_same"], []),  # case id, any case
    (BrowseFilter(text="t_greet_2"), ["b_mix"], ["r_greet"], [2]),  # trial id
    (BrowseFilter(text="b_ol"), ["b_old"], [], []),  # batch id
    (BrowseFilter(text="past its timeout"), ["b_mix"], ["r_same"], []),  # failure reason
    (BrowseFilter(text="100%_done"), ["b_mix"], ["r_void"], []),  # LIKE wildcards are literal
    (BrowseFilter(text="100%done"), [], [], []),
])
def test_filters(store, flt, batches, runs_in_mix, trials_in_greet):
    assert sorted(ids(batches_page(store, flt))) == batches
    assert count_batches(store, flt) == len(batches)
    assert sorted(ids(runs_of(store, "b_mix", flt))) == runs_in_mix
    assert [t.trial for t in trials_of(store, "r_greet", flt)] == trials_in_greet


def test_filtered_runs_keep_their_whole_distribution(store):
    greet = runs_of(store, "b_mix", BrowseFilter(outcomes={"fail"}))[-1]
    assert greet.id == "r_greet" and greet.pass_rate == 0.667 and greet.counts.trials == 3


def test_sorts(store):
    assert ids(batches_page(store, sort=Sort("started", False))) == ["b_old", "b_mix", "b_live"]
    assert ids(batches_page(store, sort=Sort("tokens", True))) == ["b_mix", "b_old", "b_live"]
    assert ids(batches_page(store, sort=Sort("name", False))) == ["b_live", "b_mix", "b_old"]
    assert ids(batches_page(store, sort=Sort("trigger", False))) == ["b_old", "b_mix", "b_live"]
    assert ids(batches_page(store, sort=Sort("outcome", True))) == ["b_mix", "b_live", "b_old"]
    # No pass rate sorts last in either direction.
    assert ids(batches_page(store, sort=Sort("pass_rate", True)))[-1] == "b_live"
    assert ids(batches_page(store, sort=Sort("pass_rate", False))) == ["b_mix", "b_old", "b_live"]
    assert ids(batches_page(store, sort=Sort("duration", True))) == ["b_mix", "b_old", "b_live"]
    assert ids(runs_of(store, "b_mix", sort=Sort("pass_rate", True))) == [
        "r_greet", "r_same", "r_void"]
    assert ids(runs_of(store, "b_mix", sort=Sort("deterministic", True)))[0] == "r_same"
    assert ids(runs_of(store, "b_mix", sort=Sort("commands", False)))[0] == "r_greet"
    assert [t.trial for t in trials_of(store, "r_greet", sort=Sort("duration", True))] == [3, 1, 2]
    assert [t.trial for t in trials_of(store, "r_greet", sort=Sort("commands", False))] == [1, 2, 3]
    for key in SORT_KEYS:  # every column sorts at every level
        for descending in (False, True):
            assert len(batches_page(store, sort=Sort(key, descending))) == 3
            assert len(runs_of(store, "b_mix", sort=Sort(key, descending))) == 3
            assert len(trials_of(store, "r_greet", sort=Sort(key, descending))) == 3


def test_paging(store):
    assert ids(batches_page(store, limit=2)) == ["b_live", "b_mix"]
    assert ids(batches_page(store, offset=2, limit=2)) == ["b_old"]
    assert batches_page(store, offset=3) == []


def test_filter_options(store):
    options = filter_options(store)
    assert options.cases == ["adds_numbers", "fixes_parser", "needs_a_lockfile", "writes_greet"]
    assert options.variants == ["mini-4o", "scripted"]
    assert options.tags == ["math", "smoke"]
    assert options.failure_kinds == ["assertion", "infra", "judge", "timeout"]


def test_an_empty_store(tmp_path):
    with Store(tmp_path / "empty.db") as s:
        assert batches_page(s) == [] and count_batches(s) == 0
        assert filter_options(s).cases == []


def test_browse_reads_indexes_not_records(tmp_path):
    """Every browse query is answered from the trial table's indexes, never a row scan."""
    path = make_store(tmp_path / "bench.db", trials=2000, batches=20)
    with Store(path) as s, s._read() as conn:
        executed: list[str] = []
        conn.connection.driver_connection.set_trace_callback(executed.append)
        batch = batches_page(conn, BrowseFilter(text="greet", outcomes={"fail"}))[0]
        batches_page(conn, sort=Sort("tokens"))
        runs_of(conn, batch.id, BrowseFilter(tags={"smoke"}))
        conn.connection.driver_connection.set_trace_callback(None)
        plans = [row[3] for sql in executed if sql.lstrip().startswith(("WITH", "SELECT"))
                 for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]
    scans = [p for p in plans if p.startswith("SCAN t") or p.startswith("SCAN trial")]
    assert scans and all("COVERING INDEX" in p for p in scans), plans


def test_make_store_fills_a_realistic_store(tmp_path):
    path = make_store(tmp_path / "bench.db", trials=1000, batches=10)
    with sqlite3.connect(path) as conn:
        total, batches, outcomes = conn.execute(
            "SELECT count(*), count(DISTINCT batch_id), count(DISTINCT outcome) FROM trial"
        ).fetchone()
    assert (total, batches) == (1000, 10) and outcomes == 4
    with Store(path) as s:
        assert count_batches(s) == 10 and batches_page(s)[0].status == "running"
        trial = trials_of(s, runs_of(s, batches_page(s)[1].id)[0].id)[0]
        assert s.get_trial(trial.id).outcome == trial.outcome


# -- the run grid ------------------------------------------------------------------

def grid_batch(s: Store) -> None:
    """b_grid: alpha and beta under v1 and v2 (beta never ran under v2), gamma planned only.

    alpha/v1 holds every outcome: pass 3 cmds 40s, pass 5 cmds 60s, fail 9 cmds 50s,
    two void trials (5s, 6s), one skipped and one running (10s each, as _trial writes them)."""
    s.create_batch("b_grid", "cli", owner="", started_at="2026-11-29T17:00:00.000Z")
    for position, (run, case, variant) in enumerate([
            ("r_a1", "alpha", "v1"), ("r_a2", "alpha", "v2"), ("r_b1", "beta", "v1"),
            ("r_c1", "gamma", "v1")]):
        s.create_run(run, "b_grid", case, variant, position=position)
    a1 = dict(case="alpha", variant="v1")
    _trial(s, "b_grid", "r_a1", 1, "pass", commands=3, seconds=40, **a1)
    _trial(s, "b_grid", "r_a1", 2, "pass", commands=5, seconds=60, **a1)
    _trial(s, "b_grid", "r_a1", 3, "fail", commands=9, seconds=50, **a1)
    _trial(s, "b_grid", "r_a1", 4, "infra_error", seconds=5, **a1)
    _trial(s, "b_grid", "r_a1", 5, "infra_error", seconds=6, **a1)
    _trial(s, "b_grid", "r_a1", 6, "skipped", **a1)
    _trial(s, "b_grid", "r_a1", 7, None, **a1)
    _trial(s, "b_grid", "r_a2", 1, "pass", commands=4, seconds=10, case="alpha", variant="v2")
    _trial(s, "b_grid", "r_a2", 2, "pass", commands=8, seconds=20, case="alpha", variant="v2")
    _trial(s, "b_grid", "r_b1", 1, "pass", commands=2, seconds=10, case="beta", variant="v1")
    _trial(s, "b_grid", "r_b1", 2, "pass", commands=7, seconds=12, case="beta", variant="v1")
    s.flush()


def test_run_grid_figures_by_hand(tmp_path):
    with Store(tmp_path / "grid.db") as s:
        grid_batch(s)
        a1, a2, b1, c1 = run_grid(s, "b_grid")
    assert [(c.case_id, c.variant, c.run_ids) for c in (a1, a2, b1, c1)] == [
        ("alpha", "v1", ["r_a1"]), ("alpha", "v2", ["r_a2"]), ("beta", "v1", ["r_b1"]),
        ("gamma", "v1", ["r_c1"])]
    d = a1.distribution
    assert (d.trials, d.passed, d.failed, d.voided, a1.skipped, a1.running) == (7, 2, 1, 2, 1, 1)
    # 2 passes of 3 scored; counting void, skipped or running trials would say 2/7, 2/6 or 2/5.
    assert d.pass_rate == 0.667 and d.scored == 3 and not a1.deterministic
    assert (d.command_min, d.command_median, d.command_max) == (3, 5, 9)
    # Of 40s, 60s and 50s; with the void trials it would be 40s, with every trial 10s.
    assert a1.median_ms == 50_000
    assert [(t.id, t.trial, t.outcome) for t in a1.trials] == [
        ("t_a1_1", 1, "pass"), ("t_a1_2", 2, "pass"), ("t_a1_3", 3, "fail"),
        ("t_a1_4", 4, "infra_error"), ("t_a1_5", 5, "infra_error"), ("t_a1_6", 6, "skipped"),
        ("t_a1_7", 7, None)]
    assert a1.trials[2].failure.kind == "assertion"
    assert (a1.first("pass").id, a1.first("fail").id) == ("t_a1_1", "t_a1_3")
    # Both pass, 4 and 8 commands: within four, deterministic; the median of two is their mean.
    assert a2.pass_rate == 1.0 and a2.deterministic and a2.distribution.command_median == 6
    assert a2.median_ms == 15_000 and a2.first("fail") is None
    # Both pass, but 2 and 7 commands are five apart: not deterministic.
    assert b1.pass_rate == 1.0 and not b1.deterministic and b1.distribution.command_median == 4.5
    assert b1.median_ms == 11_000
    # Planned, never started: no result rather than 0.
    assert c1.trials == [] and c1.pass_rate is None and c1.median_ms is None
    assert c1.distribution.command_median is None and not c1.deterministic


def test_run_grid_agrees_with_the_engine_distribution(tmp_path):
    """Each cell's distribution is the batch summary's for its run, on random runs."""
    rng = random.Random(5)
    with Store(tmp_path / "random.db") as s:
        s.create_batch("b_r", "cli", owner="", started_at="2026-11-29T17:00:00.000Z")
        for r in range(40):
            s.create_run(f"r_{r}", "b_r", f"case_{r % 8}", f"v{r // 8}", position=r)
            for n in range(1, rng.randint(1, 6) + 1):
                _trial(s, "b_r", f"r_{r}", n,
                       rng.choice(["pass", "pass", "fail", "infra_error", "skipped"]),
                       commands=rng.randint(0, 10), case=f"case_{r % 8}", variant=f"v{r // 8}")
        s.flush()
        runs = s.batch_summary("b_r").runs
        cells = run_grid(s, "b_r")
    assert [c.run_ids for c in cells] == [[run.run_id] for run in runs]
    for cell, run in zip(cells, runs):
        assert (cell.case_id, cell.variant) == (run.case_id, run.variant)
        assert cell.distribution == run.distribution and cell.trials == run.trials


def test_pass_and_fail_picks_the_first_of_each_of_a_run(tmp_path):
    with Store(tmp_path / "grid.db") as s:
        grid_batch(s)
        # alpha/v1: passes 1 and 2, a fail 3, void, skipped and running trials besides.
        assert pass_and_fail(s, "r_a1") == ("t_a1_1", "t_a1_3")
        assert pass_and_fail(s, "r_a2") is None, "passes only"
        assert pass_and_fail(s, "r_c1") is None, "planned, never run"
        assert pass_and_fail(s, "r_nope") is None


def test_run_grid_of_an_unknown_batch_is_empty(store):
    assert run_grid(store, "b_nope") == []


def test_run_grid_reads_columns_not_records(tmp_path):
    """1,000 trials whose records are 20 KB each, and not even JSON: the grid is still right,
    and none of its statements names the record column (its speed is bench/studio.py's)."""
    path = make_store(tmp_path / "grid.db", trials=1000, batches=1)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trial SET record = printf('%.*c', 20000, 'x')")
    conn.close()
    with Store(path) as s:
        [batch] = batches_page(s)
        statements: list[str] = []
        listener = lambda _c, _cur, statement, *_rest: statements.append(statement)  # noqa: E731
        sqlalchemy.event.listen(s._read_engine, "before_cursor_execute", listener)
        cells = run_grid(s, batch.id)
    assert sum(c.distribution.trials for c in cells) == 1000
    assert statements and not [q for q in statements if re.search(r"\brecord\b", q)], statements
