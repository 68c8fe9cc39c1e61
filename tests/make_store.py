"""Fill a Proctor store with synthetic batches, fast: a test fixture (the browser's paging
tests) that the studio's benchmark (bench/studio.py) uses too.

`make_store(path, trials=100_000, batches=1000)` writes straight into the tables
through SQLAlchemy Core (one transaction, executemany), not through the store's
queued writer, so 100,000 trials take seconds. The mix looks like a real team's
store: a few dozen cases with their own difficulty and tags, a handful of
variants, mostly passes, some assertion/judge/timeout failures, a few void and
skipped trials, and the newest batch still running. Records are small but valid
TrialRecords, so `proctor show` works on any of them.

    python tests/make_store.py [PATH] [--trials N] [--batches N]
"""

from __future__ import annotations

import sqlite3

import argparse
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.models import TrialRecord  # noqa: E402
from engine.store import Store  # noqa: E402
from engine.store.tables import BatchRow, RunRow, TrialRow  # noqa: E402

VERBS = ["writes", "fixes", "refactors", "tests", "documents", "adds", "renames", "ports",
         "speeds_up", "removes"]
NOUNS = ["greet", "parser", "cache", "cli_flags", "retry_loop", "csv_export", "auth_check",
         "date_math", "logging", "config_loader"]
VARIANTS = {"scripted": 0.15, "mini-4o": 0.0, "mini-4.1": 0.08, "claude-sonnet": 0.12,
            "codex-mini": -0.05}
TAGS = ["smoke", "math", "refactor", "slow", "web", "cli", "regression"]
TRIGGERS = ["cli"] * 6 + ["studio"] * 3 + ["ci"] * 2 + ["api"]
PHASES = ["setup", "harness", "turn", "check", "judge"]
FAILURES = {
    "assertion": ["python3 -m pytest -q exited 1: AssertionError: assert 4 == 5",
                  "cat greet.py: stdout does not contain 'def greet'",
                  "npm test exited 1: 3 failing"],
    "judge": ["verdict 0.35 is below its threshold 0.7: the module has no docstrings",
              "the judge's reply was not a JSON verdict after 3 tries"],
    "timeout": ["the trial ran past its timeout of 15m"],
    "infra": ["image build failed: apt-get exited 100",
              "setup step 2 (pip install -r requirements.txt) exited 1",
              "secret OPENAI_API_KEY is not set on the host",
              "Docker went away during the turn"],
}


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _id(rng: random.Random, prefix: str) -> str:
    return f"{prefix}_{rng.getrandbits(40):010x}"


def make_store(path: str | Path, trials: int = 100_000, batches: int = 1000,
               seed: int = 7) -> Path:
    """A new store at `path` (replaced if present) holding `batches` batches of `trials` in all."""
    path = Path(path)
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    Store(path).close()  # the schema, exactly as the engine makes it
    rng = random.Random(seed)
    cases = [f"{v}_{n}" for v in VERBS for n in NOUNS]
    rng.shuffle(cases)
    cases = cases[:40]
    difficulty = {c: rng.betavariate(4, 2) for c in cases}  # chance an average agent passes
    base_commands = {c: rng.randint(2, 18) for c in cases}
    tags = {c: sorted(rng.sample(TAGS, rng.choice([1, 1, 2]))) for c in cases}

    now = datetime.now(timezone.utc).replace(microsecond=0)
    first = now - timedelta(days=90)
    batch_rows: list[dict[str, Any]] = []
    run_rows: list[dict[str, Any]] = []
    trial_rows: list[dict[str, Any]] = []
    per_batch = [trials // batches + (i < trials % batches) for i in range(batches)]
    for b, size in enumerate(per_batch):
        batch_id = _id(rng, "b")
        live = b == batches - 1  # the newest batch is still running
        started = first + (now - first) * (b + rng.random() * 0.5) / batches
        trigger = rng.choice(TRIGGERS)
        variants = rng.sample(sorted(VARIANTS), rng.choice([1, 1, 2, 3]))
        repeats = rng.choice([1, 3, 3, 5])
        position = 0
        clock = started
        remaining = size
        while remaining > 0:
            case = rng.choice(cases)
            for variant in variants:
                if remaining <= 0:
                    break
                run_id = _id(rng, "r")
                run_rows.append(dict(id=run_id, batch_id=batch_id, case_id=case,
                                     variant=variant, position=position))
                position += 1
                for n in range(1, min(repeats, remaining) + 1):
                    remaining -= 1
                    clock += timedelta(seconds=rng.uniform(0.5, 20))
                    running = live and remaining < 3
                    trial_rows.append(_trial(rng, batch_id, run_id, case, variant, n, trigger,
                                             clock, difficulty[case] + VARIANTS[variant],
                                             base_commands[case], tags[case], running))
        finished = max(clock + timedelta(seconds=rng.uniform(20, 300)), started)
        batch_rows.append(dict(
            id=batch_id, trigger=trigger, status="running" if live else "finished",
            owner="", started_at=_iso(started), finished_at=None if live else _iso(finished),
            heartbeat_at=_iso(clock), config="{}"))

    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA synchronous=OFF")
        conn.execute(insert(BatchRow.__table__), batch_rows)  # type: ignore[attr-defined]
        conn.execute(insert(RunRow.__table__), run_rows)  # type: ignore[attr-defined]
        for start in range(0, len(trial_rows), 20_000):
            conn.execute(insert(TrialRow.__table__),  # type: ignore[attr-defined]
                         trial_rows[start:start + 20_000])
    engine.dispose()
    return path


def _trial(rng: random.Random, batch_id: str, run_id: str, case: str, variant: str, n: int,
           trigger: str, started: datetime, skill: float, base_commands: int, tags: list[str],
           running: bool) -> dict[str, Any]:
    trial_id = _id(rng, "t")
    failure: dict[str, Any] | None = None
    roll = rng.random()
    if running:
        outcome = None
    elif roll < 0.04:
        outcome, kind = "infra_error", "infra"
    elif roll < 0.05:
        outcome, kind = "skipped", None
    elif rng.random() < skill:
        outcome, kind = "pass", None
    else:
        outcome = "fail"
        kind = rng.choices(["assertion", "judge", "timeout"], [75, 15, 10])[0]
    if outcome in ("fail", "infra_error"):
        failure = {"kind": kind, "reason": rng.choice(FAILURES[kind]),
                   "where": "check 1 of 2" if kind == "assertion" else None}
    scored = outcome in ("pass", "fail")
    commands = 0
    if scored:  # failing agents wander: more commands, more spread
        extra = rng.randint(0, 12) if outcome == "fail" else 0
        commands = max(0, base_commands + rng.randint(-3, 3) + extra)
    duration_ms = int(rng.lognormvariate(10.5, 0.8)) if outcome not in (None, "skipped") else None
    usage_in = int(rng.lognormvariate(9.5, 1.0)) if scored else 0
    usage_out = usage_in // rng.randint(8, 30) if scored else 0
    finished_at = _iso(started + timedelta(milliseconds=duration_ms)) if duration_ms else None
    record = {
        "schema_version": 1, "id": trial_id, "batch_id": batch_id, "run_id": run_id,
        "case_id": case, "variant": variant, "trial": n, "trigger": trigger,
        "outcome": outcome, "failure": failure, "started_at": _iso(started),
        "finished_at": finished_at, "command_count": commands, "tags": tags,
        "usage": {"input": usage_in, "output": usage_out, "cache_read": usage_in // 2,
                  "cache_write": 0, "reasoning": None},
    }
    return dict(
        id=trial_id, run_id=run_id, batch_id=batch_id, case_id=case, variant=variant, trial=n,
        owner="", status="running" if running else "done", outcome=outcome,
        failure_kind=failure and failure["kind"], failure_reason=failure and failure["reason"],
        failure_where=failure and failure["where"], command_count=commands,
        duration_ms=duration_ms, started_at=_iso(started), finished_at=finished_at,
        tags=json.dumps(tags), tokens=usage_in + usage_out,
        phase=rng.choice(PHASES) if running else None, record=json.dumps(record))


def put_trial(store: Store, record: TrialRecord) -> str:
    """Store a trial as the engine does: queued first, then saved finished, or marked
    running when it has no outcome yet."""
    store.create_trial(record.model_copy(update=dict(outcome=None, failure=None)), owner="")
    if record.outcome is not None:
        store.save_trial(record)
    else:
        store.mark_trial_running(record.id, record.started_at or "")
    return record.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default="/tmp/proctor-bench.db")
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=1000)
    args = parser.parse_args()
    began = time.perf_counter()
    path = make_store(args.path, args.trials, args.batches)
    seconds = time.perf_counter() - began
    print(f"{args.trials:,} trials in {args.batches:,} batches written to {path} "
          f"in {seconds:.2f}s ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()


def store_bytes(store) -> bytes:
    """Every byte a store holds: its files (with the WAL) and its event and trial rows, for a
    test that a secret reached none of them."""
    store.flush()
    raw = b""
    for suffix in ("", "-wal", "-shm"):
        p = store.path.parent / (store.path.name + suffix)
        if p.exists():
            raw += p.read_bytes()
    with sqlite3.connect(store.path) as db:
        for table in ("event", "trial"):
            raw += "".join(str(row) for row in db.execute(f"select * from {table}")).encode()
    return raw
