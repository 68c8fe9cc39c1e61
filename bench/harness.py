#!/usr/bin/env python3
"""CLI harness overhead: each CLI's turn through the engine vs. the same command in a plain exec.

For each CLI harness (`claude-code`, `codex`, `gemini-cli`) one real trial runs through
`Engine.run` against its stand-in provider API (tests/standin/, HTTPS on loopback, reached
through the trial's gateway with `[gateway] resolve`/`trust`, as the Docker tests do). The
stand-in's script gives every turn the same work: a shell command, a file edit, a final
message. The eval sends `--turns` prompts. Around each engine turn the bench runs the raw side
in the same container: the harness's own `command(turn)` (same arguments, same session to
resume, same environment and user) through a plain docker-py `exec_run`, its prompt on stdin
from a file written beforehand, its output only collected. Raw runs before the engine's turn
on even turns and after it on odd ones, so drift hits both alike.

Why the same container: the raw CLI must reach the same stand-in the same way, and only the
trial's gateway can (sandboxes have no network but it); the gateway's brokering and the
CLI's own work are then in both sides, and the difference is the harness's: the prompt's
upload, the `timeout`/`sh` wrapper, stream parsing and item callbacks, events and the
record. The engine figure is the record's `turn` phase span less everything the raw side did
inside it (its prompt's upload, the exec); the diff is its own phase and is not in it. Turn 1 (a cold CLI and a new session) is left out of the medians.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/harness.py

Prints per CLI the median turn time of both sides, the difference, the ratio and a `summary:`
line each (for bench/revs.py). The CLI images are cached by tag; the first run builds them
(npm installs on the host, a few minutes). Always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.batch import BatchPlan, Engine  # noqa: E402
from engine.config import find_config, load_config  # noqa: E402
from engine.harness.cli import CliHarness  # noqa: E402
from engine.sandbox.cleanup import owner_id  # noqa: E402
from engine.sandbox.container import ENGINE_DIR  # noqa: E402
from engine.spec import load_cases  # noqa: E402
from engine.store import Store  # noqa: E402
from tests.standin import (AnthropicStandIn, Edit, GeminiStandIn,  # noqa: E402
                           OpenAIResponsesStandIn, Say, Script, Shell)

IMAGE = "proctor-test-base:bookworm"
KEY_ENV = "PROCTOR_BENCH_PROVIDER_KEY"
KEY = "sk-proctor-bench-5e2a9c1f7b3d4e6a8c0b2d4f6a8c0e2b"


@dataclass
class Cli:
    harness: str
    model: str
    standin: type
    max_turns: bool  # whether the harness takes `max_turns`


CLIS = [Cli("claude-code", "claude-sonnet-4-6", AnthropicStandIn, True),
        Cli("codex", "gpt-5-codex", OpenAIResponsesStandIn, False),
        Cli("gemini-cli", "gemini-2.5-pro", GeminiStandIn, True)]


@dataclass
class Timings:
    raw_ms: dict[int, float] = field(default_factory=dict)  # turn -> ms, the exec alone
    inside_ms: dict[int, float] = field(default_factory=dict)  # turn -> ms, all the raw side took
    raw_failed: list[str] = field(default_factory=list)


def script(turns: int) -> Script:
    """Every turn the same work, so the engine's turn and the raw run beside it compare."""
    return Script(turns=[[Shell(f"echo bench-{i}"), Edit(f"/workspace/bench{i}.txt", f"turn {i}\n"),
                          Say(f"I created bench{i}.txt.")] for i in range(2 * turns + 4)])


def suite(folder: Path, cli: Cli, api, turns: int) -> Path:
    sends = "\n".join(f'    c.send("Run the command, then create the file ({i}).")'
                      for i in range(1, turns + 1))
    (folder / "bench.eval.py").write_text(
        "from engine import evaluation\n\n@evaluation()\ndef harness_turns(c):\n" + sends + "\n")
    (folder / "proctor.toml").write_text(textwrap.dedent(f"""
        [defaults]
        image = "{IMAGE}"
        timeout = "10m"

        [[variants]]
        name = "{cli.harness}"
        harness = "{cli.harness}"
        model = "{cli.model}"
        api_key_env = "{KEY_ENV}"
        """) + ("max_turns = 10\n" if cli.max_turns else "") + "\n" + api.gateway_toml())
    return folder / "bench.eval.py"


def raw_turn(client: docker.DockerClient, harness: CliHarness, sandbox, turn: int, prompt: str,
             timings: Timings) -> None:
    """The harness's command for this turn in a plain `exec_run`, timed around the exec alone."""
    begun = time.monotonic()
    path = f"{ENGINE_DIR}/raw-prompt-{turn}.txt"
    sandbox.put_files({path.lstrip("/"): prompt.encode()}, base="/")
    env = {**sandbox.env, **harness.base_env, **harness.options.env}
    agent = sandbox.agent
    if agent is not None and env.get("HOME", "/root") == "/root":
        env["HOME"] = agent.home
    argv = ["sh", "-c", 'p=$1; shift; exec "$@" < "$p"', "sh", path, *harness.command(turn)]
    container = client.containers.get(sandbox.id)
    started = time.monotonic()
    result = container.exec_run(argv, workdir="/workspace", environment=env, demux=True,
                                user=agent.spec if agent is not None else "0:0")
    timings.raw_ms[turn] = (time.monotonic() - started) * 1000
    if result.exit_code != 0:
        err = (result.output[1] or b"").decode(errors="replace").strip().splitlines()[-1:]
        timings.raw_failed.append(f"turn {turn}: exit {result.exit_code} {' '.join(err)}")
    timings.inside_ms[turn] = (time.monotonic() - begun) * 1000


def measure(client: docker.DockerClient, cli: Cli, turns: int, workdir: Path):
    """One engine trial of `turns` turns with a raw run beside each; (engine ms, raw ms) per turn."""
    timings = Timings()
    original = CliHarness.run_turn

    def run_turn(self, sandbox, prompt, turn, timeout, on_item):
        if turn % 2 == 0:
            raw_turn(client, self, sandbox, turn, prompt, timings)
        out = original(self, sandbox, prompt, turn, timeout, on_item)
        if turn % 2 == 1:
            raw_turn(client, self, sandbox, turn, prompt, timings)
        return out

    folder = workdir / cli.harness
    folder.mkdir()
    CliHarness.run_turn = run_turn  # type: ignore[method-assign]
    try:
        with cli.standin(script(turns), tls=folder / "tls") as api:
            path = suite(folder, cli, api, turns)
            config = load_config(find_config(path))
            plan = BatchPlan(cases=load_cases([path]), variants=config.select_variants(None),
                             config=config, trials=1, trigger="api")
            store = Store(folder / "proctor.db")
            try:
                summary = Engine(store, client).run(plan, lambda event: None)
                [record] = [store.get_trial(t.id) for r in summary.runs for t in r.trials]
            finally:
                store.close()
    finally:
        CliHarness.run_turn = original  # type: ignore[method-assign]
    # The raw run happens inside the engine's turn phase: its whole time is taken out of it.
    engine = {p.index: p.end_ms - p.start_ms - timings.inside_ms.get(p.index, 0.0)
              for p in record.phases if p.phase == "turn" and p.index is not None}
    return record, engine, timings


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=15, help="turns per CLI (default 15; turn 1 is "
                                                                "a warm-up)")
    parser.add_argument("--only", help="comma-separated harness names (default: all three)")
    args = parser.parse_args()
    os.environ[KEY_ENV] = KEY
    client = docker.from_env()
    chosen = [c for c in CLIS if not args.only or c.harness in args.only.split(",")]
    results: list[tuple[str, float, float]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="proctor-bench-harness-") as tmp:
        for cli in chosen:
            print(f"{cli.harness}: {args.turns} turns, raw beside each …", flush=True)
            t0 = time.monotonic()
            try:
                record, engine, timings = measure(client, cli, args.turns, Path(tmp))
            except Exception as exc:  # one CLI's failure should not hide the others' figures
                print(f"   could not measure {cli.harness}: {type(exc).__name__}: {exc}")
                continue
            if record.outcome != "pass":
                why = record.failure.reason if record.failure else record.outcome
                print(f"   the engine's trial ended {record.outcome}: {why}")
            for line in timings.raw_failed:
                print(f"   raw run failed, {line}")
            print(f"   {'turn':>4} {'engine ms':>10} {'raw ms':>8} {'first':>6}")
            for turn in sorted(engine):
                first = "raw" if turn % 2 == 0 else "engine"
                print(f"   {turn:>4} {engine[turn]:>10.0f} {timings.raw_ms.get(turn, float('nan')):>8.0f}"
                      f" {first:>6}")
            later = [t for t in engine if t > 1 and t in timings.raw_ms]
            e = median([engine[t] for t in later])
            r = median([timings.raw_ms[t] for t in later])
            print(f"   median of turns 2-{args.turns}: engine {e:.0f} ms, raw {r:.0f} ms, "
                  f"difference {e - r:+.0f} ms, ratio {e / r:.2f}  ({time.monotonic() - t0:.0f} s)")
            results.append((cli.harness, e, r))
    left = client.containers.list(all=True, filters={"label": f"proctor.owner={owner_id()}"})
    print(f"containers left behind: {len(left)}; took {time.monotonic() - started:.0f} s")
    print()
    print("summary:")
    for name, e, r in results:
        # The engine's median first: revs.py reads a line's first figure, and reads no sign.
        print(f"  {name} turn: engine {e:.0f} ms, raw {r:.0f} ms, overhead {e - r:+.0f} ms, "
              f"ratio {e / r:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
