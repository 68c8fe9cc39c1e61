#!/usr/bin/env python3
"""Failure groups: how long grouping a batch's failed trials takes (engine.groups).

A temporary store holds one batch of `--failed` (10,000) failed and void trials over 20
cases and 4 variants, from 24 causes (assertions, judges, timeouts, limits, voids), each
reason written with its volatile parts redrawn per trial: temp paths, trial ids, hex,
ports, durations, timestamps, counts, a random quoted name. The trial rows are written
straight into the trial table (their records are never read).

Measured, the least of `--repeat` runs each:

    read    engine.groups.failed_trials (the short columns, one statement)
    group   engine.groups.group (signatures, quoted slots, the rapidfuzz join)
    total   failure_groups(store, batch): what `proctor groups` and the Overview do
    exact   the same rows grouped by their raw reason, the baseline: no masking, no join

It checks that the groups found are the 24 causes. Goal: total <= 1 s.

    python bench/groups.py [--failed 10000] [--repeat 5]

Always exits 0; bench/search.py imports `measure`.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.groups import failed_trials, failure_groups, group, mask  # noqa: E402
from engine.store import Store  # noqa: E402

GOAL_S = 1.0
BATCH = "b_bench0groups"
CASES = [f"case_{i:02d}" for i in range(20)]
# What tells causes apart is words: a number or a path in a reason is masked as volatile.
WORDS = ["parser", "token", "module", "config", "fixture", "greet", "value", "result"]
VARIANTS = ["scripted", "mini-4o", "claude", "codex"]


def _causes(rng: random.Random) -> list[tuple[str, str, str | None, Callable[[], str]]]:
    """24 causes: (outcome, kind, where, a reason with its volatile parts drawn anew)."""
    def hexed(n: int) -> str:
        return "".join(rng.choice("0123456789abcdef") for _ in range(n))

    def tmp() -> str:
        return f"/tmp/tmp{hexed(6)}/work-{rng.randrange(1000)}"

    templates: list[tuple[str, str, str | None, Callable[[], str]]] = []
    for i in range(8):
        templates.append(("fail", "assertion", f"check {1 + i % 3} of 3", lambda i=i: (
            f"`python3 -m pytest -q tests/test_{WORDS[i]}.py` exited {rng.choice([1, 2])}: "
            f"AssertionError: {WORDS[i]} expected {rng.randrange(100)} got {rng.randrange(100)} in {tmp()}/m.py "
            f"after {rng.randrange(10, 900)}ms (pid {rng.randrange(10000, 99999)})")))
    for i in range(4):
        templates.append(("fail", "assertion", "check 1 of 2", lambda i=i: (
            f"`cat out/{i}.json` exited 1: cat: {tmp()}/file-{hexed(8)}.json: No such file "
            f"or directory ({WORDS[i]} missing, trial t_{hexed(10)}, worker '{hexed(5)}')")))
    for i in range(4):
        templates.append(("fail", "judge", f"judge {1 + i}", lambda i=i: (
            f"judge scored 0.{rng.randrange(10, 49)}, below 0.5 for 'criterion number {i} "
            f"about the {WORDS[i]}'")))
    for i in range(2):
        templates.append(("fail", "timeout", f"turn {1 + i}", lambda i=i: (
            f"the trial ran past its timeout of {rng.choice([5, 10, 15])}m (stage {i})")))
    templates.append(("fail", "limit", "turn 1", lambda: (
        f"memory limit {rng.choice([2, 4])} GiB reached at {rng.randrange(1, 99)}%")))
    for i in range(5):
        templates.append(("infra_error", "infra", f"setup step {1 + i}", lambda i=i: (
            f"setup step {1 + i} exited {rng.choice([1, 100, 127])}: E: Unable to locate "
            f"package libfoo{i} at 2026-11-{rng.randrange(1, 29):02d}T10:{rng.randrange(60):02d}:00Z "
            f"from 10.0.{rng.randrange(255)}.{rng.randrange(255)}:{rng.randrange(1024, 65535)}")))
    return templates


def make_store(folder: Path, n_failed: int, seed: int = 17) -> tuple[Path, int]:
    """A store of one batch of `n_failed` failed or void trials; returns it and the causes."""
    rng = random.Random(seed)
    causes = _causes(rng)
    path = folder / "groups.db"
    with Store(path) as store:
        store.create_batch(BATCH, "cli", "", "2026-11-30T10:00:00.000Z")
        for c, case in enumerate(CASES):
            for v, variant in enumerate(VARIANTS):
                store.create_run(f"r_{c:02d}{v}", BATCH, case, variant, c * len(VARIANTS) + v)
    rows = []
    for n in range(n_failed):
        outcome, kind, where, reason = causes[n % len(causes)]
        c, v = rng.randrange(len(CASES)), rng.randrange(len(VARIANTS))
        rows.append((f"t_{n:010x}", f"r_{c:02d}{v}", BATCH, CASES[c], VARIANTS[v], n + 1, "done",
                     outcome, kind, reason(), where, rng.randrange(20), "[]", 0))
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO trial (id, run_id, batch_id, case_id, variant, trial, status, outcome, "
            "failure_kind, failure_reason, failure_where, command_count, tags, tokens, owner) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '')", rows)
    conn.close()
    return path, len(causes)


def _least(work: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure(n_failed: int = 10_000, repeat: int = 5) -> dict[str, Any]:
    """Grouping `n_failed` failed trials: seconds to read, group, both, and the raw baseline."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-groups-") as folder:
        path, causes = make_store(Path(folder), n_failed)
        with Store(path) as store:
            read_s, trials = _least(lambda: failed_trials(store, BATCH), repeat)
            # Each run from cold: the masks of reasons seen before are cached.
            group_s, groups = _least(lambda: (mask.cache_clear(), group(trials))[1], repeat)
            total_s, _ = _least(lambda: (mask.cache_clear(), failure_groups(store, BATCH))[1],
                                repeat)

            def exact() -> dict[tuple[str, str], list[str]]:
                found: dict[tuple[str, str], list[str]] = {}
                for t in failed_trials(store, BATCH):
                    found.setdefault((t.kind, t.reason), []).append(t.id)
                return found

            exact_s, raw = _least(exact, repeat)
    return {"failed": n_failed, "causes": causes, "groups": len(groups),
            "largest": groups[0].count if groups else 0, "raw_reasons": len(raw),
            "read_s": read_s, "group_s": group_s, "total_s": total_s, "exact_s": exact_s,
            "goal_s": GOAL_S, "met": total_s <= GOAL_S and len(groups) == causes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failed", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    m = measure(args.failed, args.repeat)
    print(f"{m['failed']:,} failed trials from {m['causes']} causes "
          f"({m['raw_reasons']:,} distinct raw reasons)")
    print(f"read   {m['read_s'] * 1000:7.1f} ms")
    print(f"group  {m['group_s'] * 1000:7.1f} ms   ({m['groups']} groups, largest {m['largest']:,})")
    print(f"total  {m['total_s'] * 1000:7.1f} ms   (goal <= {GOAL_S * 1000:.0f} ms)")
    print(f"exact  {m['exact_s'] * 1000:7.1f} ms   (by raw reason, no masking: the baseline)")
    print(f"summary: grouping {m['failed']:,} failed trials {m['total_s'] * 1000:.0f} ms "
          f"({m['total_s'] / m['exact_s']:.1f}x grouping by raw reason), {m['groups']} groups "
          f"for {m['causes']} causes: {'met' if m['met'] else 'MISSED'}")


if __name__ == "__main__":
    main()
