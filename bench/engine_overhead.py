#!/usr/bin/env python3
"""Engine overhead: one minimal trial through the engine vs. raw docker-py.

Both sides make the same Docker calls for a one-turn, one-check trial on a
cached image with an empty workspace:

    images.get · create_container · start · put_archive (workspace)
    · get_archive (snapshot) · put_archive (prompt) · exec create/start/inspect (agent)
    · get_archive (diff) · exec create/start/inspect (check) · remove(force=True)

The engine side is timed from `Engine.run(...)`'s call to the summary it
returns (store writes, threads, events, redaction and the record included).
Its `plan` span is `Engine.plan` alone; the batch thread's start-up is in
`run → trial_started`, so the split means the same on every commit.
Rounds alternate engine, raw, engine, raw, … after one warm-up of each, so drift
in the daemon hits both sides alike. Prints per-round times, the medians, a
per-phase breakdown, and `engine/raw ratio: X.XX (goal <= 1.25)`. Always exits 0.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/engine_overhead.py --rounds 10
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import docker

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.batch import BatchPlan, Engine, new_id  # noqa: E402
from engine.config import find_config, load_config  # noqa: E402
from engine.sandbox.cleanup import labels as proctor_labels, owner_id  # noqa: E402
from engine.spec import load_cases  # noqa: E402
from engine.store import Store  # noqa: E402

IMAGE = "proctor-test-base:bookworm"
PROMPT = "Create out.txt."
AGENT = "touch out.txt && echo '{\"type\":\"finished\",\"reason\":\"done\"}'"
CHECK = "test -f out.txt"
TIMEOUT_S = 120.0  # the case's timeout; the engine passes what remains of it to each exec
KILL_GRACE_S = 3

EVAL_SOURCE = f'''
from engine import evaluation


@evaluation(image="{IMAGE}", timeout="2m")
def touches_out(c):
    c.send({PROMPT!r})
    c.exec({CHECK!r}).to_succeed()
'''

# json.dumps of an ASCII string is a valid TOML basic string.
TOML = f"""
[defaults]
image = "{IMAGE}"
timeout = "2m"
concurrency = 1

[[variants]]
name = "bench"
harness = "command"
command = {json.dumps(AGENT)}
"""

# Engine phases and the raw steps that make the same Docker calls.
PHASE_STEPS = {
    "image": ["image_get"],
    "container": ["create", "start"],
    "workspace": ["put_workspace"],
    "snapshot": ["get_snapshot"],
    "turn": ["put_prompt", "exec_agent"],
    "diff": ["get_diff"],
    "check": ["exec_check"],
    "teardown": ["remove"],
}


class CallLog:
    """Counts the Docker API requests made through one client (every docker-py call
    ends in `APIClient.request`), to check both sides make the same ones."""

    def __init__(self, client: docker.DockerClient):
        self.calls: list[str] | None = None
        self.lock = threading.Lock()
        api = client.api
        original = api.request

        def request(method, url, *args, **kwargs):
            if self.calls is not None:
                path = re.sub(r"^/v[0-9.]+", "", urlparse(url).path)
                path = re.sub(r"/[0-9a-f]{64}", "/{id}", path)
                with self.lock:
                    self.calls.append(f"{method} {path}")
            return original(method, url, *args, **kwargs)

        api.request = request  # instance attribute: shadows Session.request

    def record(self, fn, *args):
        self.calls = []
        try:
            fn(*args)
            return Counter(self.calls)
        finally:
            self.calls = None


# --- the raw side ---------------------------------------------------------------------

def _workspace_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("workspace")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    return buffer.getvalue()


def _prompt_tar(turn: int) -> tuple[str, bytes]:
    path = f"tmp/.proctor/prompt-{turn}.txt"
    data = PROMPT.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for parent in ("tmp", "tmp/.proctor"):
            info = tarfile.TarInfo(parent)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return "/" + path, buffer.getvalue()


def _exec(api, container_id: str, command: str, env: dict[str, str], stdin_path: str | None,
          timeout: float) -> tuple[int | None, bytes, bytes]:
    script = 'exec sh -c "$1" < "$2"' if stdin_path else 'exec sh -c "$1" < /dev/null'
    argv = ["timeout", "-k", str(KILL_GRACE_S), f"{timeout:.1f}",
            "sh", "-c", script, "sh", command, stdin_path or ""]
    exec_id = api.exec_create(container_id, argv, stdout=True, stderr=True,
                              workdir="/workspace", environment=env)["Id"]
    out, err = [], []
    for o, e in api.exec_start(exec_id, stream=True, demux=True):
        if o:
            out.append(o)
        if e:
            err.append(e)
    return api.exec_inspect(exec_id).get("ExitCode"), b"".join(out), b"".join(err)


def raw_trial(client: docker.DockerClient, owner: str) -> tuple[float, dict[str, float]]:
    """The engine's Docker calls for this trial, with docker-py directly."""
    steps: dict[str, float] = {}
    api = client.api
    trial_id = new_id("t")
    env = {"HOME": "/root", "PROCTOR": "1", "PROCTOR_TRIAL": trial_id}
    container = None

    def step(name: str, started: float) -> float:
        now = time.perf_counter()
        steps[name] = now - started
        return now

    t0 = t = time.perf_counter()
    try:
        client.images.get(IMAGE)
        t = step("image_get", t)
        container = api.create_container(
            IMAGE, command=["sleep", "infinity"], labels=proctor_labels(new_id("b"), trial_id, owner),
            working_dir="/", hostname="sandbox", stop_timeout=2,
            host_config=api.create_host_config(init=True, network_mode="none"))["Id"]
        t = step("create", t)
        api.start(container)
        t = step("start", t)
        api.put_archive(container, "/", _workspace_tar())
        t = step("put_workspace", t)
        chunks, _ = api.get_archive(container, "/workspace")
        b"".join(chunks)
        t = step("get_snapshot", t)
        prompt_path, prompt_tar = _prompt_tar(1)
        api.put_archive(container, "/", prompt_tar)
        t = step("put_prompt", t)
        code, out, _ = _exec(api, container, AGENT, {**env, "PROCTOR_PROMPT": PROMPT, "PROCTOR_TURN": "1"},
                             prompt_path, TIMEOUT_S)
        if code != 0 or b'"finished"' not in out:
            print(f"  warning: raw agent exec exited {code}: {out!r}", file=sys.stderr)
        t = step("exec_agent", t)
        chunks, _ = api.get_archive(container, "/workspace")
        b"".join(chunks)
        t = step("get_diff", t)
        code, _, _ = _exec(api, container, CHECK, env, None, TIMEOUT_S)
        if code != 0:
            print(f"  warning: raw check exited {code}", file=sys.stderr)
        t = step("exec_check", t)
        api.remove_container(container, force=True)
        container = None
        t = step("remove", t)
    finally:
        if container is not None:
            api.remove_container(container, force=True)
    return time.perf_counter() - t0, steps


# --- the engine side ------------------------------------------------------------------

def engine_trial(engine: Engine, config, cases) -> tuple[float, dict[str, float]]:
    """One batch of one trial through the engine; returns the wall time and a timeline
    split from the events' arrival times (perf_counter, sub-millisecond)."""
    plan = BatchPlan(cases=cases, variants=config.select_variants(None), config=config,
                     trigger="api")
    marks: list[tuple[float, object]] = []
    planned: list[float] = []
    plan_batch = engine.plan

    def timed_plan(batch_plan: BatchPlan):
        # `plan` is Engine.plan alone (the rows stored), as the commits before start_batch
        # measured it; the batch thread's start-up falls in "run → trial_started".
        handle = plan_batch(batch_plan)
        planned.append(time.perf_counter())
        return handle

    engine.plan = timed_plan  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        summary = engine.run(plan, lambda event: marks.append((time.perf_counter(), event)))
    finally:
        del engine.plan  # the instance attribute; Engine.plan shows again
    t_end = time.perf_counter()
    (t_planned,) = planned

    trial = summary.runs[0].trials[0]
    if trial.outcome != "pass":
        print(f"  warning: engine trial {trial.id} ended {trial.outcome}: {trial.failure}", file=sys.stderr)

    spans: dict[str, float] = {"plan": t_planned - t0}
    started: dict[tuple[str, int | None], float] = {}
    last_end = None
    trial_start = trial_end = None
    gaps = 0.0
    for at, event in marks:
        kind = event.type
        if kind == "trial_started":
            trial_start = last_end = at
        elif kind == "phase_started":
            started[(event.phase, event.index)] = at
            if last_end is not None:
                gaps += at - last_end
        elif kind == "phase_ended":
            begin = started.pop((event.phase, event.index))
            spans[event.phase] = spans.get(event.phase, 0.0) + (at - begin)
            last_end = at
        elif kind == "trial_finished":
            trial_end = at
            if last_end is not None:
                gaps += at - last_end
    assert trial_start is not None and trial_end is not None
    spans["run → trial_started"] = trial_start - t_planned
    spans["between phases"] = gaps
    spans["trial_finished → summary"] = t_end - trial_end
    return t_end - t0, spans


def write_suite(folder: Path) -> Path:
    (folder / "proctor.toml").write_text(textwrap.dedent(TOML))
    path = folder / "bench.eval.py"
    path.write_text(textwrap.dedent(EVAL_SOURCE))
    return path


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds of each (default 10)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    client = docker.from_env(timeout=120)
    client.ping()
    client.images.get(IMAGE)  # fails loudly when the image is missing
    owner = owner_id()
    log = CallLog(client)

    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        folder = Path(tmp)
        eval_path = write_suite(folder)
        config = load_config(find_config(eval_path))
        cases = load_cases([eval_path])
        store = Store(folder / "proctor.db")
        engine = Engine(store, client)
        try:
            # The warm-ups double as the check that both sides make the same Docker calls.
            engine_calls = log.record(engine_trial, engine, config, cases)
            raw_calls = log.record(raw_trial, client, owner)
            same = "the same" if engine_calls == raw_calls else "DIFFERENT"
            print(f"Docker API requests per trial: engine {sum(engine_calls.values())}, "
                  f"raw {sum(raw_calls.values())} ({same})")
            for call in sorted(engine_calls.keys() | raw_calls.keys()):
                if engine_calls[call] != raw_calls[call]:
                    print(f"  {call}: engine {engine_calls[call]}, raw {raw_calls[call]}")
            print()
            engine_times: list[float] = []
            raw_times: list[float] = []
            engine_cpu: list[float] = []  # this process's CPU time (all threads) per trial
            raw_cpu: list[float] = []
            engine_spans: list[dict[str, float]] = []
            raw_steps: list[dict[str, float]] = []
            for n in range(1, args.rounds + 1):
                c0 = time.process_time()
                e, spans = engine_trial(engine, config, cases)
                c1 = time.process_time()
                r, steps = raw_trial(client, owner)
                c2 = time.process_time()
                engine_cpu.append(c1 - c0)
                raw_cpu.append(c2 - c1)
                engine_times.append(e)
                raw_times.append(r)
                engine_spans.append(spans)
                raw_steps.append(steps)
                print(f"round {n:2d}: engine {ms(e)} ms   raw {ms(r)} ms   ratio {e / r:.2f}", flush=True)
        finally:
            store.close()

    med_e, med_r = statistics.median(engine_times), statistics.median(raw_times)
    print()
    print(f"median engine: {ms(med_e)} ms   (min {ms(min(engine_times)).strip()} ms)")
    print(f"median raw:    {ms(med_r)} ms   (min {ms(min(raw_times)).strip()} ms)")
    print(f"median Python CPU per trial (this process, all threads): engine {ms(statistics.median(engine_cpu)).strip()} ms, "
          f"raw {ms(statistics.median(raw_cpu)).strip()} ms")
    print(f"median of per-round ratios: {statistics.median(e / r for e, r in zip(engine_times, raw_times)):.2f}")

    def median_of(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row.get(key, 0.0) for row in rows)

    print()
    print("where the time goes (medians, ms):")
    print(f"  {'engine phase':<26}{'engine':>9}{'raw':>9}{'extra':>9}   raw steps")
    total_extra = 0.0
    for phase, names in PHASE_STEPS.items():
        e = median_of(engine_spans, phase)
        r = statistics.median(sum(row[s] for s in names) for row in raw_steps)
        total_extra += e - r
        print(f"  {phase:<26}{ms(e):>9}{ms(r):>9}{ms(e - r):>9}   {' + '.join(names)}")
    others = [k for k in engine_spans[0] if k not in PHASE_STEPS]
    for key in others:
        e = median_of(engine_spans, key)
        total_extra += e
        print(f"  {key:<26}{ms(e):>9}{'-':>9}{ms(e):>9}   (engine only)")
    print(f"  {'sum of medians':<26}{'':>9}{'':>9}{ms(total_extra):>9}"
          f"   vs median difference {ms(med_e - med_r).strip()} ms")
    print()
    print(f"engine/raw ratio: {med_e / med_r:.2f} (goal <= 1.25)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
