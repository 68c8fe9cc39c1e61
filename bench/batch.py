#!/usr/bin/env python3
"""Batch throughput: 32 trials at concurrency 8 through the engine vs. raw docker-py.

The trial is bench/engine_overhead.py's minimal one (cached image, empty workspace,
a command-harness agent that runs `touch out.txt`, one check), and its helpers are
reused from there. The engine side is one batch of one case × one variant × 32
trials at concurrency 8, timed from `Engine.start_batch(...)` to the summary
`BatchHandle.wait()` returns. The raw side runs engine_overhead's raw per-trial
sequence (the same Docker calls) 32 times in a ThreadPoolExecutor(8), timed from
creating the pool to its last trial's end. After one warm-up batch of each (which
also counts both sides' Docker API requests), rounds alternate engine, raw, … so
drift in the daemon hits both alike.

From the engine batch's stored records it also prints the slot-wait share of wall
time: the sum of each trial's `timings.slot_ms` over the sum of each trial's total
span (first phase start to last phase end), and the mean/max slot wait.

The engine frees a trial's slot once its record is committed and removes the container
in the background (engine/sandbox/reaper.py); the batch, and so the clock, still ends
only once every container is gone. The raw side removes each container in its slot,
as naive docker-py code does. The mean teardown span per trial (in the slot: the
gateway stopped, the wait for a removal place) is printed beside the ratio.

Prints per-round figures, the medians, and `throughput engine/raw: X.XX (goal >= 1.3)`.
Always exits 0.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/batch.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ itself, for engine_overhead

from engine_overhead import IMAGE, CallLog, raw_trial, write_suite  # noqa: E402  (puts the repo on sys.path)

from engine.batch import BatchPlan, Engine  # noqa: E402
from engine.config import find_config, load_config  # noqa: E402
from engine.models import TrialRecord  # noqa: E402
from engine.sandbox.cleanup import owner_id  # noqa: E402
from engine.spec import load_cases  # noqa: E402
from engine.store import Store  # noqa: E402


@dataclass
class EngineRound:
    wall: float                 # start_batch → summary
    cpu: float                  # this process's CPU time (all threads)
    slot_ms: list[int]          # each trial's timings.slot_ms
    span_ms: list[int]          # each trial's first phase start → last phase end
    failed: int                 # trials that did not pass
    teardown_ms: list[int]      # each trial's teardown span (removal runs after it, in the background)

    @property
    def slot_share(self) -> float:
        return sum(self.slot_ms) / max(sum(self.span_ms), 1)

    @property
    def busy_ms(self) -> list[int]:
        """Each trial's span less its slot wait: what it spent holding a slot."""
        return [span - slot for span, slot in zip(self.span_ms, self.slot_ms)]


@dataclass
class RawRound:
    wall: float                 # pool created → last trial done
    cpu: float
    trial_s: list[float]        # each trial's own time
    remove_s: list[float]       # each trial's container removal, inside its slot


def engine_batch(engine: Engine, store: Store, config, cases, trials: int, concurrency: int) -> EngineRound:
    plan = BatchPlan(cases=cases, variants=config.select_variants(None), config=config,
                     trials=trials, concurrency=concurrency, trigger="api")
    c0 = time.process_time()
    t0 = time.perf_counter()
    summary = engine.start_batch(plan).wait()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    assert summary is not None
    ids = [t.id for run in summary.runs for t in run.trials]
    slots: list[int] = []
    spans: list[int] = []
    failed = 0
    teardowns: list[int] = []
    for trial_id in ids:  # read after the clock stopped
        record: TrialRecord | None = store.get_trial(trial_id)
        assert record is not None and record.timings is not None
        if record.outcome != "pass":
            failed += 1
            if failed <= 3:
                print(f"  warning: engine trial {trial_id} ended {record.outcome}: {record.failure}",
                      file=sys.stderr)
        slots.append(record.timings.slot_ms)
        teardowns.append(record.timings.teardown_ms)
        spans.append(max(s.end_ms for s in record.phases) - min(s.start_ms for s in record.phases))
    if len(ids) != trials:
        print(f"  warning: the engine batch holds {len(ids)} trials, not {trials}", file=sys.stderr)
    return EngineRound(wall, cpu, slots, spans, failed, teardowns)


def raw_batch(client: docker.DockerClient, owner: str, trials: int, concurrency: int) -> RawRound:
    c0 = time.process_time()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="raw") as pool:
        results = list(pool.map(lambda _: raw_trial(client, owner), range(trials)))
    wall = time.perf_counter() - t0
    return RawRound(wall, time.process_time() - c0, [r[0] for r in results],
                    [r[1].get("remove", 0.0) for r in results])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds of each (default 3)")
    parser.add_argument("--trials", type=int, default=32, help="trials per batch (default 32)")
    parser.add_argument("--concurrency", type=int, default=8, help="trials at once (default 8)")
    args = parser.parse_args(argv)
    if min(args.rounds, args.trials, args.concurrency) < 1:
        parser.error("--rounds, --trials and --concurrency must be at least 1")
    n, k = args.trials, args.concurrency

    client = docker.from_env(timeout=120)
    client.ping()
    client.images.get(IMAGE)  # fails loudly when the image is missing
    owner = owner_id()
    log = CallLog(client)
    print(f"{n} trials at concurrency {k}; {args.rounds} rounds of each after one warm-up batch\n")

    engine_rounds: list[EngineRound] = []
    raw_rounds: list[RawRound] = []
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        folder = Path(tmp)
        eval_path = write_suite(folder)
        config = load_config(find_config(eval_path))
        cases = load_cases([eval_path])
        store = Store(folder / "proctor.db")
        engine = Engine(store, client)
        try:
            # The warm-ups double as the check that both sides make the same Docker calls.
            engine_calls = log.record(engine_batch, engine, store, config, cases, n, k)
            raw_calls = log.record(raw_batch, client, owner, n, k)
            same = "the same" if engine_calls == raw_calls else "DIFFERENT"
            print(f"Docker API requests per batch: engine {sum(engine_calls.values())}, "
                  f"raw {sum(raw_calls.values())} ({same})")
            for call in sorted(engine_calls.keys() | raw_calls.keys()):
                if engine_calls[call] != raw_calls[call]:
                    print(f"  {call}: engine {engine_calls[call]}, raw {raw_calls[call]}")
            print()
            for r in range(1, args.rounds + 1):
                e = engine_batch(engine, store, config, cases, n, k)
                w = raw_batch(client, owner, n, k)
                engine_rounds.append(e)
                raw_rounds.append(w)
                print(f"round {r:2d}: engine {e.wall:6.2f} s {n / e.wall:6.2f} trials/s   "
                      f"raw {w.wall:6.2f} s {n / w.wall:6.2f} trials/s   "
                      f"ratio {w.wall / e.wall:.2f}   "
                      f"slot wait {e.slot_share:5.1%} (mean {statistics.mean(e.slot_ms):.0f} ms, "
                      f"max {max(e.slot_ms)} ms)"
                      + (f"   {e.failed} engine trials not passed" if e.failed else ""), flush=True)
        finally:
            store.close()

    e_tp = [n / e.wall for e in engine_rounds]
    r_tp = [n / w.wall for w in raw_rounds]
    med_e, med_r = statistics.median(e_tp), statistics.median(r_tp)
    print()
    print(f"median throughput engine: {med_e:6.2f} trials/s   (best {max(e_tp):.2f})")
    print(f"median throughput raw:    {med_r:6.2f} trials/s   (best {max(r_tp):.2f})")
    print(f"median of per-round ratios: {statistics.median(a / b for a, b in zip(e_tp, r_tp)):.2f}")
    print(f"slot wait, engine batch (median over rounds): "
          f"{statistics.median(e.slot_share for e in engine_rounds):.1%} of the trials' summed spans, "
          f"mean {statistics.median(statistics.mean(e.slot_ms) for e in engine_rounds):.0f} ms, "
          f"max {statistics.median(max(e.slot_ms) for e in engine_rounds):.0f} ms per trial")
    print(f"time holding a slot per trial (median over rounds of the mean): engine "
          f"{statistics.median(statistics.mean(e.busy_ms) for e in engine_rounds):.0f} ms, raw "
          f"{statistics.median(statistics.mean(w.trial_s) * 1000 for w in raw_rounds):.0f} ms")
    print(f"teardown span per trial, engine (median over rounds of the mean): "
          f"{statistics.median(statistics.mean(e.teardown_ms) for e in engine_rounds):.0f} ms, "
          f"max {statistics.median(max(e.teardown_ms) for e in engine_rounds):.0f} ms; raw removal in the slot: "
          f"{statistics.median(statistics.mean(w.remove_s) * 1000 for w in raw_rounds):.0f} ms")
    print(f"Python CPU per trial (this process, all threads; median): engine "
          f"{statistics.median(e.cpu for e in engine_rounds) / n * 1000:.1f} ms, raw "
          f"{statistics.median(w.cpu for w in raw_rounds) / n * 1000:.1f} ms")
    print()
    print(f"throughput engine/raw: {med_e / med_r:.2f} (goal >= 1.3)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
