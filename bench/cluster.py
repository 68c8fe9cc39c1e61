#!/usr/bin/env python3
"""Cluster throughput: 32 trials over a 2-node Ray cluster of 4 `proctor_slot`s each, against
the local engine at concurrency 8, in the same run, on the same Docker daemon.

Both sides run the same suite (one case, 32 trials: a one-turn agent that writes a file and
sleeps `--work` seconds, one check). The cluster is `ray.cluster_utils.Cluster` on this
machine (a head with no slots, two worker nodes), started before either side is timed; each
side gets one untimed warm-up batch (the nodes' worker processes, the image lookup).
Prints both walls, `cluster/local throughput: X.XX (goal >= 0.80)`, and the per-trial
overhead Ray adds: scheduling (a trial handed to Ray → its TrialStarted on the node, for the
trials that found a free slot) and event streaming (an event's `at` on the node → its
re-emit on the driver). Always exits 0.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/cluster.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray starts: loopback only

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.batch import BatchPlan, Engine  # noqa: E402
from engine.cluster import runner  # noqa: E402
from engine.config import ClusterConfig, find_config, load_config  # noqa: E402
from engine.events import TrialStarted  # noqa: E402
from engine.sandbox.client import connect  # noqa: E402
from engine.spec import load_cases  # noqa: E402
from engine.store import Store  # noqa: E402

TRIALS, NODES, SLOTS = 32, 2, 4


def suite(folder: Path, work: float) -> Path:
    (folder / "agent.sh").write_text(f"sleep {work}\necho made > out.txt\n"
                                     "echo '{\"type\":\"finished\",\"reason\":\"done\"}'\n")
    (folder / "proctor.toml").write_text(textwrap.dedent(f"""
        [defaults]
        image = "proctor-test-base:bookworm"
        timeout = "5m"
        concurrency = {NODES * SLOTS}

        [[variants]]
        name = "scripted"
        command = "sh .agent/run.sh"
    """))
    path = folder / "bench.eval.py"
    path.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from engine import evaluation

        @evaluation(trials={TRIALS}, files={{".agent/run.sh": Path("agent.sh")}})
        def writes_out(c):
            c.send("write out.txt")
            c.exec("test -f out.txt").to_succeed()
    """))
    return path


def plan_for(path: Path, address: str | None, trials: int | None = None) -> BatchPlan:
    config = load_config(find_config(path))
    if address:
        config = config.model_copy(update={"cluster": ClusterConfig(address=address)})
    return BatchPlan(cases=load_cases([path]), variants=config.select_variants(None), config=config,
                     trials=trials, trigger="api")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=float, default=2.0, help="seconds each agent turn sleeps")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    folder = Path(tempfile.mkdtemp(prefix="proctor-bench-cluster-"))
    path = suite(folder, args.work)
    store = Store(folder / "bench.db")
    engine = Engine(store, connect())
    started = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(NODES):
            # num_cpus: how many idle worker processes Ray keeps; a trial asks for none, and a kept
            # worker spares the next trial a Python start and the engine's import.
            cluster.add_node(num_cpus=SLOTS, resources={runner.SLOT: SLOTS})
        ray.init(address=cluster.address, log_to_driver=False)
        print(f"cluster up in {time.monotonic() - started:.1f} s: {NODES} nodes x {SLOTS} slots")

        handed: dict[str, float] = {}  # trial id -> when the driver handed it to Ray (epoch s)
        run_one = runner.ClusterRunner.run_one

        def timed(self, trial_plan):
            handed[trial_plan.trial_id] = time.time()
            return run_one(self, trial_plan)

        runner.ClusterRunner.run_one = timed  # type: ignore[method-assign]
        latency: list[float] = []
        starts: dict[str, float] = {}

        def sink(event) -> None:
            latency.append(time.time() * 1000 - event.at)
            if isinstance(event, TrialStarted):
                starts[event.trial_id] = event.at / 1000

        engine.run(plan_for(path, None, trials=NODES * SLOTS))  # warm-ups, untimed
        engine.run(plan_for(path, cluster.address, trials=NODES * SLOTS))
        latency.clear()
        handed.clear()

        t = time.monotonic()
        local = engine.run(plan_for(path, None))
        local_s = time.monotonic() - t
        t = time.monotonic()
        remote = engine.run(plan_for(path, cluster.address), sink)
        cluster_s = time.monotonic() - t

        def passed(summary) -> int:
            return sum(t.outcome == "pass" for r in summary.runs for t in r.trials)

        first = sorted(handed, key=handed.get)[:NODES * SLOTS]  # found a free slot at once
        scheduling = [starts[i] - handed[i] for i in first if i in starts]
        print(f"local   concurrency {NODES * SLOTS}: {TRIALS} trials in {local_s:.1f} s "
              f"({passed(local)} passed, {TRIALS / local_s:.2f} trials/s)")
        print(f"cluster {NODES}x{SLOTS} slots:     {TRIALS} trials in {cluster_s:.1f} s "
              f"({passed(remote)} passed, {TRIALS / cluster_s:.2f} trials/s)")
        print(f"cluster/local throughput: {local_s / cluster_s:.2f} (goal >= 0.80)")
        print(f"per-trial overhead: scheduling {statistics.median(scheduling) * 1000:.0f} ms median "
              f"(max {max(scheduling) * 1000:.0f} ms); event streaming {statistics.median(latency):.0f} ms "
              f"median, p95 {sorted(latency)[int(len(latency) * 0.95)]:.0f} ms over {len(latency)} events; "
              f"slot time per trial {(cluster_s - local_s) * NODES * SLOTS / TRIALS * 1000:+.0f} ms")
    finally:
        ray.shutdown()
        cluster.shutdown()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
