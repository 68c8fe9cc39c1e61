#!/usr/bin/env python3
"""Saving a trial of 100,000 trajectory items: how long until its record is committed (the
save's future, which the engine and the events queued behind it wait for), and until it
is also searchable (a flush after the save).

The record is engine-shaped (commands with output, messages, tool calls, file changes over
20 turns) and saved three times, as new trials, into a fresh store; the median is printed.
It uses only Store.save_trial and Store.flush, so it runs on any revision:

    python bench/revs.py --before 9dad5e5 -- bench/save.py

(revs.py runs the working tree's copy of this file on a revision that has none.)
Prints `summary:` lines for revs.py. Always exits 0.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

if "PYTHONPATH" not in os.environ:  # under revs.py the tree measured is on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.models import TrajectoryItem, TrialRecord, TurnRecord  # noqa: E402
from engine.store import Store  # noqa: E402

WORDS = ("error", "import", "module", "greet", "parser", "config", "pytest", "assert", "token",
         "build", "cache", "install", "requirements", "numpy", "fixture", "loader", "retry")


def record(trial_id: str, items: int, rng: random.Random) -> TrialRecord:
    at = datetime.now(timezone.utc).isoformat()

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    trajectory = []
    for n in range(items):
        turn, roll = n * 20 // items, rng.random()
        if roll < 0.5:
            item = TrajectoryItem(kind="command", turn=turn, at=at, command=f"pytest -q tests/{words(1)}.py",
                                  exit_code=rng.choice([0, 1]), output="\n".join(words(8) for _ in range(4)))
        elif roll < 0.75:
            item = TrajectoryItem(kind="message", turn=turn, at=at, role="assistant", text=words(30))
        elif roll < 0.9:
            item = TrajectoryItem(kind="toolCall", turn=turn, at=at, name="read_file",
                                  input={"path": f"src/{words(1)}.py"}, output=words(12))
        else:
            item = TrajectoryItem(kind="fileChange", turn=turn, at=at, path=f"src/{words(1)}.py", change="modify")
        trajectory.append(item)
    return TrialRecord(id=trial_id, batch_id="b_bench", run_id="r_bench", case_id="bench", variant="v",
                       trial=1, trigger="api", outcome="pass", started_at=at,
                       turns=[TurnRecord(index=i, prompt=words(10), status="completed", ms=1) for i in range(20)],
                       trajectory=trajectory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(5)
    committed, searchable = [], []
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "save.db")
        try:
            for n in range(args.times):
                trial = record(f"t_bench{n}", args.items, rng)
                began = time.perf_counter()
                store.save_trial(trial).result()
                committed.append(time.perf_counter() - began)
                store.flush()
                searchable.append(time.perf_counter() - began)
                print(f"  save {n + 1}: committed in {committed[-1]:.2f} s, searchable after {searchable[-1]:.2f} s")
        finally:
            store.close()
    print("summary:")
    print(f"save of a {args.items:,}-item trial, committed: {statistics.median(committed):.2f} s")
    print(f"save of a {args.items:,}-item trial, searchable: {statistics.median(searchable):.2f} s")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
    sys.exit(0)
