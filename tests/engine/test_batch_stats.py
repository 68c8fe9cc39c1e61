"""A batch's Overview figures (browse.batch_figures, trial_costs, phase_stats, cost_summary):
worked out by hand on a small batch, the empty and all-void cases, damaged records, and the
read time of a 1,000-trial batch with records of a real agent's size."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.models import Failure, PhaseSpan, TrajectoryItem, TrialRecord, Usage
from engine.store import Store
from engine.store.browse import (
    batch_figures, cost_summary, harness_model, phase_stats, price, trial_costs,
)
from tests.make_store import put_trial

START = datetime(2026, 11, 29, 17, 0, tzinfo=timezone.utc)
MINI = "mini harness · gpt-4o-mini at api.openai.com"
UNPRICED = "mini harness · no-such-model-x at 127.0.0.1:9"
COMMAND = "command harness · sh .agent/run.sh"


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _phases(harness: str | None, **ms: int | list[int]) -> list[PhaseSpan]:
    """Spans back to back: `harness` names the model, then each phase's time(s) in order."""
    spans, clock = [], 0
    if harness is not None:
        spans.append(PhaseSpan(phase="harness", status="ok", start_ms=0, end_ms=100,
                               detail=harness))
        clock = 100
    for phase, times in ms.items():
        for i, t in enumerate(times if isinstance(times, list) else [times], 1):
            spans.append(PhaseSpan(phase=phase, status="ok", start_ms=clock, end_ms=clock + t,
                                   index=i))
            clock += t
    return spans


def add_trial(store: Store, batch: str, run: str, case: str, variant: str, n: int,
              outcome: str | None, *, commands: int = 0, seconds: float = 0,
              usage: tuple[int, int, int] = (0, 0, 0), phases: Sequence[PhaseSpan] = (),
              reason: str | None = None, trajectory: Sequence[TrajectoryItem] = ()) -> str:
    trial_id = f"t_{run[2:]}_{n}"
    kind = {"fail": "assertion", "infra_error": "infra"}.get(outcome or "")
    started = START + timedelta(minutes=n)
    rec = TrialRecord(
        id=trial_id, batch_id=batch, run_id=run, case_id=case, variant=variant, trial=n,
        trigger="cli", outcome=outcome, command_count=commands,
        failure=Failure(kind=kind, reason=reason or "python3 -m pytest exited 1") if kind else None,
        started_at=_iso(started), finished_at=_iso(started + timedelta(seconds=seconds)),
        usage=Usage(input=usage[0], output=usage[1], cache_read=usage[2]),
        phases=list(phases), trajectory=list(trajectory))
    return put_trial(store, rec)


def overview_batch(s: Store) -> None:
    """b_ov: writes_greet under mini-4o (gpt-4o-mini) and scripted (command harness), and
    fixes_parser under an unpriced model; every kind of trial.

    r_m  mini-4o    pass 3 cmds 40s, pass 5 cmds 60s, fail 9 cmds 50s
    r_s  scripted   pass 2 cmds 10s (1,700 tokens, no model), void ×3 (setup step 2 twice,
                    Docker once; 5s 6s 7s, no tokens), skipped, running
    r_d  unpriced   pass 4 cmds 20s, pass 6 cmds 30s (110 tokens each, no price)"""
    s.create_batch("b_ov", "cli", owner="", started_at=_iso(START))
    for position, (run, case, variant) in enumerate([
            ("r_m", "writes_greet", "mini-4o"), ("r_s", "writes_greet", "scripted"),
            ("r_d", "fixes_parser", "unpriced"), ("r_e", "planned_only", "mini-4o")]):
        s.create_run(run, "b_ov", case, variant, position=position)
    m = dict(batch="b_ov", run="r_m", case="writes_greet", variant="mini-4o")
    add_trial(s, **m, n=1, outcome="pass", commands=3, seconds=40, usage=(1000, 100, 500),
              phases=_phases(MINI, turn=[1000, 2000], check=300))
    add_trial(s, **m, n=2, outcome="pass", commands=5, seconds=60, usage=(2000, 200, 0),
              phases=_phases(MINI, turn=500, check=100))
    add_trial(s, **m, n=3, outcome="fail", commands=9, seconds=50, usage=(4000, 400, 0),
              phases=_phases(MINI, turn=9000, check=200))
    sc = dict(batch="b_ov", run="r_s", case="writes_greet", variant="scripted")
    add_trial(s, **sc, n=1, outcome="pass", commands=2, seconds=10, usage=(1500, 200, 0),
              phases=_phases(COMMAND, turn=800))
    add_trial(s, **sc, n=2, outcome="infra_error", seconds=5, reason="setup step 2 exited 1",
              phases=_phases(None, setup=4000))
    add_trial(s, **sc, n=3, outcome="infra_error", seconds=6, reason="setup step 2 exited 1",
              phases=_phases(None, setup=6000))
    add_trial(s, **sc, n=4, outcome="infra_error", seconds=7, reason="Docker went away",
              phases=_phases(None, setup=5000))
    add_trial(s, **sc, n=5, outcome="skipped")
    add_trial(s, **sc, n=6, outcome=None, seconds=3)
    d = dict(batch="b_ov", run="r_d", case="fixes_parser", variant="unpriced")
    add_trial(s, **d, n=1, outcome="pass", commands=4, seconds=20, usage=(100, 10, 0),
              phases=_phases(UNPRICED, turn=1000))
    add_trial(s, **d, n=2, outcome="pass", commands=6, seconds=30, usage=(100, 10, 0),
              phases=_phases(UNPRICED, turn=1000))
    s.flush()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "overview.db") as s:
        overview_batch(s)
        yield s


def test_batch_figures_by_hand(store):
    f = batch_figures(store, "b_ov")
    c = f.counts
    assert (c.trials, c.passed, c.failed, c.voided, c.skipped, c.running) == (11, 5, 1, 3, 1, 1)
    # 5 passes of 6 scored: counting void, skipped or running trials would say 5/11, 5/9 …
    assert c.scored == 6 and c.pass_rate == 0.833
    # Scored trials' commands 2 3 4 5 6 9; the voids' 0s would drag the minimum and median down.
    assert (f.command_min, f.command_median, f.command_max) == (2, 4.5, 9)
    assert [r.id for r in f.runs] == ["r_m", "r_s", "r_d", "r_e"]  # planned order
    # r_d: two passes, 4 and 6 commands (within four); r_m mixes outcomes; r_s has one scored.
    assert [r.deterministic for r in f.runs] == [False, False, True, False]
    assert f.deterministic_runs == 1
    assert f.runs[3].counts.trials == 0 and f.runs[3].pass_rate is None
    assert f.tokens == 1100 + 2200 + 4400 + 1700 + 110 + 110
    assert [(v.reason, v.trial_ids) for v in f.voids] == [
        ("setup step 2 exited 1", ["t_s_2", "t_s_3"]), ("Docker went away", ["t_s_4"])]
    assert [(t.id, t.duration_ms) for t in f.slowest(3)] == [
        ("t_m_2", 60_000), ("t_m_3", 50_000), ("t_m_1", 40_000)]
    # Skipped and running trials have no time of their own to show.
    assert sorted(f.durations_ms) == [5000, 6000, 7000, 10_000, 20_000, 30_000, 40_000,
                                      50_000, 60_000]
    assert [t.id for t in f.most_tokens(2)] == ["t_m_3", "t_m_2"]


def test_cost_and_phases_by_hand(store):
    costs = {c.id: c for c in trial_costs(store, "b_ov")}
    assert "t_s_6" not in costs, "a running trial's record is not final yet"
    assert len(costs) == 10
    assert (costs["t_m_1"].model, costs["t_s_1"].model, costs["t_d_1"].model) == (
        "gpt-4o-mini", None, "no-such-model-x")
    # gpt-4o-mini at $0.15 per million input tokens, $0.075 cached, $0.60 output:
    # t_m_1: 500 × 0.15 + 500 × 0.075 + 100 × 0.6 = 172.5 µ$; t_m_2: 300 + 120; t_m_3: 600 + 240.
    assert costs["t_m_1"].cost == pytest.approx(0.0001725)
    assert costs["t_m_2"].cost == pytest.approx(0.00042)
    assert costs["t_m_3"].cost == pytest.approx(0.00084)
    # No model (the command harness), or a model with no price: unknown, never 0.
    assert costs["t_s_1"].cost is None and costs["t_d_1"].cost is None
    # No token spent (void before the agent started, skipped) costs nothing, model or not.
    assert costs["t_s_2"].cost == 0 and costs["t_s_5"].cost == 0
    assert costs["t_m_1"].phase_ms == {"harness": 100, "turn": 3000, "check": 300}

    total = cost_summary(costs.values())
    assert total.total == pytest.approx(0.0001725 + 0.00042 + 0.00084)
    assert (total.priced, total.unpriced) == (7, 3)
    assert total.models == ["gpt-4o-mini", "no-such-model-x"]
    assert (total.usage.input, total.usage.output, total.usage.cache_read) == (8700, 920, 500)

    stats = {s.phase: s for s in phase_stats(costs.values())}
    # Turn per trial: 3000 500 9000 (r_m), 800 (r_s), 1000 1000 (r_d); sorted
    # 500 800 1000 1000 3000 9000: median 1000, p90 the ceil(5.4) = 6th, 9000.
    assert (stats["turn"].trials, stats["turn"].median_ms, stats["turn"].p90_ms) == (6, 1000, 9000)
    # Setup only in the voids: 4000 6000 5000 -> median 5000, p90 the 3rd, 6000.
    setup = stats["setup"]
    assert (setup.trials, setup.median_ms, setup.p90_ms) == (3, 5000, 6000)
    assert (stats["check"].median_ms, stats["check"].p90_ms) == (200, 300)
    assert [s.phase for s in phase_stats(costs.values())][:2] == ["setup", "turn"]  # slowest first


def test_read_trials_are_skipped(store):
    first = trial_costs(store, "b_ov")
    assert trial_costs(store, "b_ov", skip=[c.id for c in first]) == []
    assert {c.id for c in trial_costs(store, "b_ov", skip=["t_m_1"])} == {
        c.id for c in first} - {"t_m_1"}


def test_an_empty_batch_and_an_unknown_one(tmp_path):
    with Store(tmp_path / "empty.db") as s:
        s.create_batch("b_empty", "cli", owner="", started_at=_iso(START))
        s.create_run("r_x", "b_empty", "alpha", "v1", position=0)
        s.flush()
        f = batch_figures(s, "b_empty")
        assert batch_figures(s, "b_nope") is None
        assert trial_costs(s, "b_empty") == [] and phase_stats([]) == []
        none = cost_summary([])
    assert f.counts.trials == 0 and f.counts.pass_rate is None
    assert f.command_median is None and f.slowest() == [] and f.voids == []
    assert [r.id for r in f.runs] == ["r_x"]
    assert none.total is None and (none.priced, none.unpriced) == (0, 0)


def test_an_all_void_batch_has_no_pass_rate(tmp_path):
    with Store(tmp_path / "void.db") as s:
        s.create_batch("b_void", "cli", owner="", started_at=_iso(START))
        s.create_run("r_v", "b_void", "alpha", "v1", position=0)
        for n in (1, 2):
            add_trial(s, "b_void", "r_v", "alpha", "v1", n, "infra_error", seconds=2,
                      reason="image build failed: apt-get exited 100",
                      phases=_phases(None, image=2000))
        s.flush()
        f = batch_figures(s, "b_void")
        costs = trial_costs(s, "b_void")
    assert f.counts.pass_rate is None and f.counts.scored == 0  # no result, not 0%
    assert [(v.reason, len(v.trial_ids)) for v in f.voids] == [
        ("image build failed: apt-get exited 100", 2)]
    assert cost_summary(costs).total == 0  # nothing spent
    assert [(p.phase, p.median_ms) for p in phase_stats(costs)] == [("image", 2000)]


def test_a_damaged_record_is_left_out(store):
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE trial SET record = '{not json' WHERE id = 't_m_2'")
        conn.execute("UPDATE trial SET record = '{\"usage\": 5, \"phases\": 7}' WHERE id = 't_m_3'")
    conn.close()
    ids = {c.id for c in trial_costs(store, "b_ov")}
    assert "t_m_2" not in ids and "t_m_3" not in ids and "t_m_1" in ids
    assert batch_figures(store, "b_ov").counts.trials == 11  # the columns still count it


def test_a_damaged_row_is_left_out_of_the_figures(store):
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE trial SET command_count = 'many' WHERE id = 't_m_3'")
    conn.close()
    f = batch_figures(store, "b_ov")
    assert f.counts.trials == 10 and f.counts.failed == 0  # t_m_3, the one failure, left out
    assert f.command_max == 6


def test_harness_model_and_price():
    assert harness_model(MINI) == ("gpt-4o-mini", "api.openai.com")
    assert harness_model(COMMAND) is None
    assert harness_model("command harness · python3 agent.py at home") is None
    assert price(Usage(input=1000, output=100), None) is None
    assert price(Usage(input=1000, output=100), "no-such-model-x") is None
    assert price(Usage(), None) == 0
    # A local server's address is no provider genai-prices knows: the model's list price.
    assert price(Usage(input=1000), "gpt-4o-mini", "127.0.0.1:9") == pytest.approx(0.00015)
    # Cache reads beyond the input are no usage a provider bills: unknown, not a negative price.
    assert price(Usage(input=10, cache_read=500), "gpt-4o-mini") is None


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5", "gpt-4.1"])
def test_price_agrees_with_genai_prices(model):
    """The per-token rates, asked once per model and day, price as genai-prices itself does."""
    from genai_prices import Usage as Tokens, calc_price

    rng = random.Random(model)
    for _ in range(20):
        i = rng.randint(0, 150_000)
        usage = Usage(input=i, output=rng.randint(0, 9000), cache_read=rng.randint(0, i // 2),
                      cache_write=rng.randint(0, i // 2))
        theirs = calc_price(Tokens(input_tokens=usage.input, output_tokens=usage.output,
                                   cache_read_tokens=usage.cache_read,
                                   cache_write_tokens=usage.cache_write), model,
                            genai_request_timestamp=START).total_price
        assert price(usage, model, at=_iso(START)) == pytest.approx(float(theirs), rel=1e-9)


# -- a batch of a real size -----------------------------------------------------------------

def big_batch(path: Path, trials: int = 1000, output_chars: int = 2000, seed: int = 3) -> str:
    """A store holding one finished batch of `trials` trials whose records are as long as a
    real agent's (12 commands with `output_chars` of output each, phases, usage, a model):
    for the read-time test, the window tests and the README's screenshot. Its batch id."""
    rng = random.Random(seed)
    reasons = ["setup step 2 (pip install -r requirements.txt) exited 1",
               "image build failed: apt-get exited 100", "Docker went away during the turn"]
    cases = [f"{verb}_{noun}" for verb in ("writes", "fixes", "refactors", "tests")
             for noun in ("greet", "parser", "cache", "cli_flags", "retry_loop")]
    variants = {"mini-4o": "gpt-4o-mini", "mini-4.1": "gpt-4.1", "scripted": None}
    with Store(path) as s:
        s.create_batch("b_big", "cli", owner="", started_at=_iso(START))
        runs = [(case, variant) for case in cases for variant in variants]
        per_run = -(-trials // len(runs))
        made = 0
        for position, (case, variant) in enumerate(runs):
            run = f"r_{position:03d}"
            s.create_run(run, "b_big", case, variant, position=position)
            skill = rng.random()
            for n in range(1, per_run + 1):
                if made == trials:
                    break
                made += 1
                model = variants[variant]
                harness = (f"mini harness · {model} at api.openai.com" if model
                           else "command harness · sh .agent/run.sh")
                roll = rng.random()
                outcome = ("infra_error" if roll < 0.04 else "skipped" if roll < 0.05
                           else "pass" if rng.random() < skill else "fail")
                ran = outcome in ("pass", "fail")
                turns = [int(rng.lognormvariate(9.5, 0.7)) for _ in range(rng.randint(1, 3))]
                phases = (_phases(harness, setup=rng.randint(300, 3000), turn=turns,
                                  check=[rng.randint(80, 900) for _ in range(2)],
                                  judge=rng.randint(600, 4000))
                          if ran else _phases(None, setup=rng.randint(300, 3000)))
                tokens = int(rng.lognormvariate(9.5, 1.0)) if ran else 0
                items = [TrajectoryItem(kind="command", turn=1, command="python3 -m pytest -q",
                                        exit_code=rng.choice([0, 1]), output="x" * output_chars)
                         for _ in range(12 if ran else 0)]
                add_trial(s, "b_big", run, case, variant, n, outcome,
                          commands=rng.randint(2, 14) if ran else 0,
                          seconds=phases[-1].end_ms / 1000 + rng.uniform(1, 4),
                          usage=(tokens, tokens // 12, tokens // 3), phases=phases,
                          reason=rng.choice(reasons), trajectory=items)
        s.finish_batch("b_big", "finished", _iso(START + timedelta(hours=1)))
        s.flush()
    return "b_big"


@pytest.mark.slow
def test_a_1000_trial_batch_reads_fast(tmp_path):
    path = tmp_path / "big.db"
    batch = big_batch(path)
    with Store(path) as s:
        price(Usage(input=1), "gpt-4o-mini")  # genai-prices' import and table load, once
        times = {"figures": [], "records": []}
        for _ in range(3):
            began = time.perf_counter()
            f = batch_figures(s, batch)
            middle = time.perf_counter()
            costs = trial_costs(s, batch)
            times["figures"].append(middle - began)
            times["records"].append(time.perf_counter() - middle)
        size = path.stat().st_size
    best = {k: min(v) * 1000 for k, v in times.items()}
    print(f"\n1,000-trial batch ({size / 1e6:.1f} MB store): figures {best['figures']:.1f} ms, "
          f"records (phases, usage, cost) {best['records']:.1f} ms")
    assert f.counts.trials == 1000 and len(costs) == 1000
    assert cost_summary(costs).priced > 600
    # Goal: well under 200 ms in all; generous bounds here, for a loaded 2-core CI machine.
    assert best["figures"] < 100 and best["records"] < 400
