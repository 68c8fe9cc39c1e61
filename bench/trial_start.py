#!/usr/bin/env python3
"""Trial start to first turn: a warm sandbox (claimed from the batch's pool) against a
cold one (created by the trial), side by side in one run.

Each round runs two batches through `Engine.run`, in alternating order: `warm = 0` (today's
cold path) and `warm = 2`. Each batch is two trials of engine_overhead.py's minimal case at
concurrency 1; the second trial is the one measured. With `warm = 2` the pool starts making
both trials' containers when the batch starts, so the second one's has had the first trial's
time, as every trial's has in a batch whose turns take longer than a container takes to
start (this one's take a few hundred milliseconds). The figure is the record's own clock: the
first `turn` span's start (ms since the trial's start, after its slot). Prints each round,
both medians, per-phase medians and
`warm/cold ratio: X.XX` with the goal (warm median <= 150 ms). `--gateway` measures a case
with an allowed host instead, whose trials also start an egress gateway and its relay.
Always exits 0.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/trial_start.py --rounds 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.engine_overhead import EVAL_SOURCE, TOML  # noqa: E402
from engine.batch import BatchPlan, Engine  # noqa: E402
from engine.config import find_config, load_config  # noqa: E402
from engine.events import PhaseEnded  # noqa: E402
from engine.spec import load_cases  # noqa: E402
from engine.store import Store  # noqa: E402

GOAL_MS = 150
PHASES = ("image", "container", "env", "workspace", "files", "setup", "snapshot", "harness")


def suite(folder: Path, warm: int, gateway: bool) -> Path:
    folder.mkdir()
    (folder / "proctor.toml").write_text(TOML.replace("concurrency = 1", f"concurrency = 1\nwarm = {warm}"))
    path = folder / "bench.eval.py"
    # With an allowed host the trial gets an egress gateway (started, never used).
    path.write_text(EVAL_SOURCE.replace('timeout="2m"', 'timeout="2m", allow=["api.example.test"]')
                    if gateway else EVAL_SOURCE)
    return path


def one_batch(engine: Engine, store: Store, path: Path) -> tuple[int, dict[str, int], bool]:
    """The second trial's start-to-first-turn ms, its phases' ms, and whether it claimed warm."""
    config = load_config(find_config(path))
    events: list = []
    summary = engine.run(BatchPlan(cases=load_cases([path]), variants=config.variants, config=config,
                                   trials=2, trigger="api"), events.append)
    [run] = summary.runs
    second = max(run.trials, key=lambda t: t.trial)
    record = store.get_trial(second.id)
    assert record is not None and record.outcome == "pass", record and record.failure
    turn = next(s for s in record.phases if s.phase == "turn")
    spans = {s.phase: s.end_ms - s.start_ms for s in record.phases if s.phase in PHASES}
    warm = any(isinstance(e, PhaseEnded) and e.trial_id == second.id and e.phase == "container"
               and e.summary.startswith("claimed warm") for e in events)
    return turn.start_ms, spans, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gateway", action="store_true", help="a case with an egress gateway")
    args = parser.parse_args()
    client = docker.from_env(timeout=120)
    with tempfile.TemporaryDirectory(prefix="proctor-bench-start-") as tmp:
        root = Path(tmp)
        paths = {"cold": suite(root / "cold", 0, args.gateway), "warm": suite(root / "warm", 2, args.gateway)}
        store = Store(root / "bench.db")
        engine = Engine(store, client)
        for side in ("cold", "warm"):  # warm-up: images, daemon facts, imports
            one_batch(engine, store, paths[side])
        figures: dict[str, list[int]] = {"cold": [], "warm": []}
        phases: dict[str, dict[str, list[int]]] = {"cold": {}, "warm": {}}
        missed = 0
        for n in range(args.rounds):
            order = ("cold", "warm") if n % 2 == 0 else ("warm", "cold")
            said = []
            for side in order:
                ms, spans, claimed = one_batch(engine, store, paths[side])
                if side == "warm" and not claimed:
                    missed += 1  # the pool was not ready: this trial went cold
                figures[side].append(ms)
                for phase, span in spans.items():
                    phases[side].setdefault(phase, []).append(span)
                said.append(f"{side} {ms} ms" + ("" if side == "cold" or claimed else " (not warm)"))
            print(f"round {n + 1}: " + ", ".join(said), flush=True)
        store.close()
    cold, warm = statistics.median(figures["cold"]), statistics.median(figures["warm"])
    print()
    print(f"{'phase':<10} {'cold ms':>8} {'warm ms':>8}")
    for phase in PHASES:
        c, w = (statistics.median(phases[s].get(phase, [0])) for s in ("cold", "warm"))
        print(f"{phase:<10} {c:>8.0f} {w:>8.0f}")
    print()
    print(f"cold: median {cold:.0f} ms (range {min(figures['cold'])}–{max(figures['cold'])})")
    print(f"warm: median {warm:.0f} ms (range {min(figures['warm'])}–{max(figures['warm'])})"
          + (f", {missed} of {args.rounds} not warm" if missed else ""))
    what = " with a gateway" if args.gateway else ""
    print(f"summary: trial start to first turn{what}, warm {warm:.0f} ms")
    print(f"warm/cold ratio: {warm / cold:.2f} (goal: warm <= {GOAL_MS} ms: "
          f"{'met' if warm <= GOAL_MS else 'not met'})")


if __name__ == "__main__":
    main()
