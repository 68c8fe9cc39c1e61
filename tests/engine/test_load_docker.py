"""Load: 200 trials at concurrency 8 with a no-op agent, on a real daemon. Every
trial is recorded, the store passes SQLite's integrity check, nothing is left
behind, and the engine's memory stays flat from the first trials to the last."""

from __future__ import annotations

import gc
import sqlite3
import threading

import pytest

from engine.batch import BatchPlan, Engine
from engine.config import find_config, load_config
from engine.events import TrialFinished
from engine.spec import load_cases

TRIALS = 200
CONCURRENCY = 8
# Growth allowed between the first fifth of the batch and its end. A leak of 100 KB per
# trial (one kept record, one kept sandbox) would pass 16 MB before 200; glibc's arenas
# alone have moved a full run's figure by a few MB.
RSS_GROWTH_MAX_MB = 16


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _settled_rss_mb() -> float:
    """RSS once the garbage collector and glibc have given back what they can."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return _rss_mb()


@pytest.mark.slow
def test_200_trials_at_concurrency_8_are_all_recorded_with_flat_memory(suite, docker_client, store):
    path = suite("""
from engine import evaluation

@evaluation()
def noop(c):
    c.send("nothing to do")
    c.exec("true").to_succeed()
""", toml=f"""
[defaults]
image = "proctor-test-base:bookworm"
timeout = "2m"
concurrency = {CONCURRENCY}

[[variants]]
name = "noop"
harness = "command"
command = "echo '{{\\"type\\":\\"finished\\",\\"reason\\":\\"done\\"}}'"
""")
    config = load_config(find_config(path))
    plan = BatchPlan(cases=load_cases([path]), variants=config.select_variants(None), config=config,
                     trials=TRIALS, trigger="api")
    engine = Engine(store, docker_client)
    finished: list[str] = []
    samples: dict[int, float] = {}
    lock = threading.Lock()

    def sink(event) -> None:
        if isinstance(event, TrialFinished):
            with lock:
                finished.append(event.outcome)
                count = len(finished)
            if count % 20 == 0:
                samples[count] = _settled_rss_mb()

    handle = engine.start_batch(plan, sink)
    summary = handle.wait(timeout=1200)
    assert summary is not None, "the batch did not finish in 20 minutes"
    store.flush()

    [run] = summary.runs
    assert run.distribution.trials == TRIALS
    outcomes = [t.outcome for t in run.trials]
    # Said with the reasons, so a rare void (1 in ~4 full runs on a loaded machine) says why.
    assert outcomes.count("pass") == TRIALS, (
        {o: outcomes.count(o) for o in set(outcomes)},
        {t.id: t.failure.reason for t in run.trials if t.outcome != "pass" and t.failure})
    assert len(finished) == TRIALS, f"{len(finished)} trial_finished events"
    missing = [t.id for t in run.trials if store.get_trial(t.id) is None]
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:3]}"

    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        running = db.execute("SELECT count(*) FROM trial WHERE status != 'done'").fetchone()[0]
        assert running == 0, f"{running} trials not done"
    left = docker_client.api.containers(all=True, filters={"label": f"proctor.batch={handle.batch_id}"})
    assert left == []

    growth = samples[TRIALS] - samples[TRIALS // 5]
    print(f"\nengine RSS after {TRIALS // 5} trials {samples[TRIALS // 5]:.1f} MB, "
          f"after {TRIALS} {samples[TRIALS]:.1f} MB (growth {growth:+.1f} MB)")
    assert growth <= RSS_GROWTH_MAX_MB, (f"RSS grew {growth:.1f} MB over {TRIALS - TRIALS // 5} trials: "
                                         + ", ".join(f"{n}: {mb:.0f}" for n, mb in sorted(samples.items())))
