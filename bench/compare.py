#!/usr/bin/env python3
"""Compare and replay: how long two big trials take to align, against reading them.

Alignment (engine/compare.py, no Qt): two engine-shaped records of `--items`
(10,000) trajectory items of all four kinds over 20 turns, with command outputs
of a few lines. B is A with `--differences` (100) real differences spread
evenly (a changed command, a deleted step, an inserted step, a renamed tool, in
turn), and with every volatile part redrawn (temp paths, trial ids, timestamps,
hex), which must not count. Both are saved into a temporary store; then, the
least of `--repeat` runs of each:

    read      Store.get_trial of both (what opening a compare must do anyway)
    align     engine.compare.align(a, b)
    beside    turn_files, checks and deltas (the panes beside the alignment)

The script checks that the alignment found exactly the differences made, and
prints align/read. Goal: align well under 1 s, and align (with paint, measured
with the compare view) <= 10x read.

Replay (to come, a later part of issue 10): replaying a 10,000-item trial at
full speed to its end (goal <= 2 s) and the longest GUI stall (goal <= 50 ms).
It goes in `replay()` below and adds its lines to the summary.

    python bench/compare.py [--items 10000] [--differences 100] [--repeat 5]

Always exits 0.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.compare import align, checks, deltas, turn_files  # noqa: E402
from engine.models import (  # noqa: E402
    PhaseSpan, TrajectoryItem, TrialRecord, TurnRecord, Usage, Validation,
)
from engine.store import Store  # noqa: E402

ALIGN_GOAL_S = 1.0
RATIO_GOAL = 10.0
TURNS = 20
WORDS = ("parser token module refactor check fixture tests import greet value config path result "
         "error branch diff lint cache build schema").split()


def mark(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trajectory(items: int, rng: random.Random, start: datetime) -> list[TrajectoryItem]:
    """`items` steps of all four kinds, with volatile parts drawn from `rng`."""
    out = []
    for i in range(items):
        turn = 1 + i * TURNS // items
        at = iso(start + timedelta(milliseconds=i * 250 + rng.randint(0, 99)))
        word = WORDS[i % len(WORDS)]
        tmp = f"/tmp/tmp.{rng.getrandbits(32):08x}"
        kind = ("command", "command", "toolCall", "fileChange", "message")[i % 5]
        if kind == "command":
            command = f"python -m pytest -q tests/test_{word}_{i}.py --basetemp {tmp} # at {at}"
            output = "\n".join(f"{tmp}/test_{word}.py::test_{k} PASSED at {at}" for k in range(4))
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, command=command, exit_code=0,
                                      output=output))
        elif kind == "toolCall":
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, name="edit", output="ok",
                                      input={"path": f"src/{word}_{i}.py", "old": f"{word} = {i}",
                                             "new": f"{word} = {i + 1}",
                                             "session": f"t_{rng.getrandbits(40):010x}"}))
        elif kind == "fileChange":
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, path=f"src/{word}_{i}.py",
                                      change="modify"))
        else:
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, role="assistant",
                                      text=f"Changed {word} (commit {rng.getrandbits(40):010x})."))
    return out


def diverge(items: list[TrajectoryItem], differences: int) -> tuple[list[TrajectoryItem], list[int]]:
    """`items` with `differences` real differences spread evenly; returns them and where each is
    (as an index into `items`, before any shift)."""
    out, where = list(items), []
    step = len(items) // differences
    # From the end, so each edit leaves the indices of the earlier ones alone.
    for n in reversed(range(differences)):
        i = n * step + step // 2
        i -= i % 5  # a command
        where.append(i)
        match n % 4:
            case 0:
                out[i] = out[i].model_copy(update={"command": out[i].command + " -x"})
            case 1:
                del out[i]
            case 2:
                out.insert(i, out[i].model_copy(update={"command": "make clean"}))
            case _:
                out[i + 2] = out[i + 2].model_copy(update={"name": "write"})
                where[-1] = i + 2
    return out, sorted(where)


def record(id: str, batch_id: str, run_id: str, items: list[TrajectoryItem], outcome: str,
           start: datetime, rng: random.Random) -> TrialRecord:
    turns = []
    for n in range(1, TURNS + 1):
        paths = sorted({item.path for item in items if item.turn == n and item.kind == "fileChange"})
        diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x = {n}\n"
                       f"+x = {n + rng.randint(0, 1)}\n" for p in paths)
        turns.append(TurnRecord(index=n, prompt=f"Step {n}.", status="completed", ms=30_000, diff=diff,
                                files_changed=paths))
    phases = [PhaseSpan(phase="turn", status="ok", start_ms=n * 31_000, end_ms=n * 31_000 + 30_000, index=n)
              for n in range(1, TURNS + 1)]
    status = "passed" if outcome == "pass" else "failed"
    return TrialRecord(
        id=id, batch_id=batch_id, run_id=run_id, case_id="refactors_parser", variant="claude-sonnet",
        trial=1 if outcome == "pass" else 2, trigger="cli", outcome=outcome, started_at=iso(start),
        finished_at=iso(start + timedelta(seconds=TURNS * 31 + rng.randint(0, 60))), phases=phases,
        turns=turns, trajectory=items, command_count=sum(i.kind == "command" for i in items),
        usage=Usage(input=rng.randint(10**6, 5 * 10**6), output=rng.randint(10**5, 3 * 10**5)),
        validations=[Validation(kind="command", name="python -m pytest -q", status=status),
                     Validation(kind="judge", name="the change is idiomatic", status="passed")])


def least(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        began = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - began)
    return best, result


def alignment(args: argparse.Namespace) -> dict[str, Any]:
    print(f"1. Alignment: two {args.items:,}-step trials differing at {args.differences} places")
    rng = random.Random(7)
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    a_items = trajectory(args.items, random.Random(1), start)
    # B's own volatile parts, then its real differences.
    b_items, where = diverge(trajectory(args.items, random.Random(2), start + timedelta(minutes=20)),
                             args.differences)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "compare.db")
        batch_id, run_id = "b_0000bench", "r_0000bench"
        store.create_batch(batch_id, "cli", "bench", iso(start))
        store.create_run(run_id, batch_id, "refactors_parser", "claude-sonnet", 0)
        for id, items, outcome in (("t_00000000a1", a_items, "pass"), ("t_00000000b2", b_items, "fail")):
            store.save_trial(record(id, batch_id, run_id, items, outcome, start, rng)).result()
        store.close()
        size = (Path(tmp) / "compare.db").stat().st_size
        store = Store(Path(tmp) / "compare.db")
        read, (a, b) = least(args.repeat, lambda: (store.get_trial("t_00000000a1"),
                                                   store.get_trial("t_00000000b2")))
        store.close()
    aligned, comparison = least(args.repeat, lambda: align(a, b))
    beside, _ = least(args.repeat, lambda: (turn_files(a, b), checks(a, b), deltas(a, b)))
    found = [row.a if row.a is not None else comparison.rows[i - 1].a + 1
             for i, row in ((i, comparison.rows[i]) for i in comparison.divergences)]
    exact = found == where
    print(f"   store {size / 1e6:.1f} MB; {len(comparison.rows):,} rows, {len(comparison.divergences)} "
          f"divergences (first at row {comparison.first_divergence}); "
          f"{'exactly the ones made' if exact else f'NOT the ones made: {found[:5]} vs {where[:5]}'}")
    print(f"   read both {ms(read)}, align {ms(aligned)}, beside (files, checks, deltas) {ms(beside)}; "
          f"align/read {aligned / read:.2f}")
    return {"read": read, "align": aligned, "beside": beside, "exact": exact}


def replay(args: argparse.Namespace) -> dict[str, Any]:
    """Replay of a 10,000-item trial at full speed (to come; issue 10's replay part)."""
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--differences", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each figure; the least is kept")
    args = parser.parse_args()
    one = alignment(args)
    print()
    two = replay(args)
    print("summary:")
    print(f"  read both records: {ms(one['read'])}")
    print(f"  align {args.items:,} x {args.items:,} steps: {ms(one['align'])}  goal <= 1 s  "
          f"{mark(one['align'] <= ALIGN_GOAL_S and one['exact'])}")
    print(f"  files, checks and deltas: {ms(one['beside'])}")
    print(f"  align/read ratio: {one['align'] / one['read']:.2f}  goal <= {RATIO_GOAL:g}  "
          f"{mark(one['align'] / one['read'] <= RATIO_GOAL)}")
    for label, seconds in two.items():  # the replay half's figures, when it is built
        print(f"  {label}: {ms(seconds)}")


if __name__ == "__main__":
    main()
