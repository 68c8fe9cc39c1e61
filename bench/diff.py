#!/usr/bin/env python3
"""Workspaces of real size (issue 16, part 3): placement, snapshot, per-turn diff and the
engine's peak RSS for one trial on a workspace of ~8,000 files and ~190 MB (made by
bench/make_workspace.py), against `git diff` of the same change on the host.

Each round runs one trial's workspace work in a fresh child process, so its peak RSS
(`ru_maxrss`) is that trial's: a sandbox on `proctor-test-base:bookworm`, the workspace
placed as `git(WS)` (the first placement fetches on the host; a second sandbox is placed
from the cached fetch), the snapshot, the hand-over to the agent's user (a chown of the
whole workspace, as a trial makes; `--no-hand-over` skips it), then `--turns` turns each changing one file and
adding one (an exec in the sandbox), each followed by the per-turn and cumulative diffs
as `engine/context.py` makes them. Three paths alternate round by round:
- `tar`: the archive read of the whole workspace each time (`Sandbox.read_tree`), which
  is also the fallback on a remote daemon;
- `layer`: the workspace placed through the daemon's archive, then the container's file
  system read from the host (engine/sandbox/layer.py): the path before host writes;
- `host`: the workspace copied from the host's tar into the container's file system
  (engine/sandbox/hostfs.py), the snapshot trusting the placed hashes, diffs as `layer`.
The same change is then made to the host repository and `git diff` timed there.
Prints each round, the medians per path, `summary:` lines and the goals. Always exits 0.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/diff.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

IMAGE = "proctor-test-base:bookworm"
CHANGED = "lib/json/decoder.py"  # the one file each turn edits; plus one new file


def _change(n: int) -> str:
    return (f"printf '\\n# turn {n}\\n' >> {CHANGED} && "
            f"printf 'def turn_{n}():\\n    return {n}\\n' > lib/turn_{n}.py")


def child(path: str, ws: str, turns: int, hand_over: bool = True) -> dict:
    """One trial's workspace work; returns its figures."""
    import docker

    from engine.phases import workspace as workspace_phase
    from engine.phases.diff import tree_diff
    from engine.phases.git_source import GitSources
    from engine.sandbox.cleanup import labels, owner_id
    from engine.sandbox.container import Sandbox
    from engine.spec import git

    layer = None
    if path in ("layer", "host"):
        from engine.sandbox import layer
    client = docker.from_env()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out: dict = {"path": path}
    sources = GitSources()
    boxes = []
    try:
        for key in ("place_cold_s", "place_s"):
            box = Sandbox.create(client, IMAGE, labels("bench-diff", "bench-diff", owner_id()))
            boxes.append(box)
            t, cpu = time.perf_counter(), time.process_time()
            workspace_phase.place(box, git(ws), sources)
            out[key] = time.perf_counter() - t
            out[key.replace("_s", "_cpu_s")] = time.process_time() - cpu  # host placement: its copy
        box = boxes[-1]
        t, cpu = time.perf_counter(), time.process_time()
        snapshot = layer.snapshot(box) if layer else box.read_tree()
        out["host"] = snapshot.layer is not None
        out["snapshot_s"] = time.perf_counter() - t
        out["snapshot_cpu_s"] = time.process_time() - cpu
        if hand_over:  # as a trial does next: /workspace chowned to the agent, every ctime new
            t = time.perf_counter()
            box.hand_over()
            out["hand_over_s"] = time.perf_counter() - t
        previous, diffs, cpus, sizes = snapshot, [], [], []
        for n in range(1, turns + 1):
            result = box.exec(_change(n), timeout=60)
            assert result.exit_code == 0, result.output
            t, cpu = time.perf_counter(), time.process_time()
            tree = layer.turn_tree(box, previous) if layer else box.read_tree(base=previous)
            diff, changed = tree_diff(previous, tree)
            if previous is not snapshot:
                tree_diff(snapshot, tree)
                if tree.blobs is not None:
                    tree.blobs.release(previous, tree, snapshot)
            diffs.append(time.perf_counter() - t)
            cpus.append(time.process_time() - cpu)
            sizes.append(len(changed))
            previous = tree
        out["diff_ms"] = [round(d * 1000, 1) for d in diffs]
        out["diff_cpu_ms"] = [round(d * 1000, 1) for d in cpus]
        out["changed"] = sizes
    finally:
        for box in boxes:
            box.destroy()
        sources.close()
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["rss_import_mb"] = rss0
    return out


def git_diff_ms(ws: Path, turns: int) -> tuple[list[float], list[float]]:
    """`git diff` of the same changes in the host repository (then undone): wall and CPU ms."""
    times, cpus = [], []
    try:
        for n in range(1, turns + 1):
            subprocess.run(["sh", "-c", _change(n)], cwd=ws, check=True)
            t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(["git", "-C", str(ws), "diff"], check=True, stdout=subprocess.DEVNULL)
            times.append((time.perf_counter() - t) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    finally:
        subprocess.run(["git", "-C", str(ws), "checkout", "-q", "--", "."], check=True)
        subprocess.run(["git", "-C", str(ws), "clean", "-qfd"], check=True)
    return times, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--ws", default="/tmp/proctor-bench-ws")
    parser.add_argument("--paths", default="tar,layer,host")
    parser.add_argument("--no-hand-over", action="store_true",
                        help="skip the hand-over to the agent's user between snapshot and turns")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ws, args.turns, not args.no_hand_over)))
        return
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_workspace.py"), args.ws], check=True)
    paths = args.paths.split(",")
    results: dict[str, list[dict]] = {p: [] for p in paths}
    git_ms: list[float] = []
    git_cpu: list[float] = []
    for r in range(args.rounds):
        for path in paths:
            proc = subprocess.run([sys.executable, __file__, "--child", path, "--ws", args.ws,
                                   "--turns", str(args.turns)] + ["--no-hand-over"] * args.no_hand_over,
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT),
                                       "PROCTOR_HOST_WRITES": "1" if path == "host" else "0"})
            if proc.returncode != 0:
                print(f"round {r + 1} {path}: failed\n{proc.stderr[-2000:]}")
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            results[path].append(res)
            print(f"round {r + 1} {path:5}: place cold {res['place_cold_s']:.2f} s, cached "
                  f"{res['place_s']:.2f} s (engine CPU {res['place_cpu_s']:.2f}) · snapshot {res['snapshot_s']:.2f} s (CPU "
                  f"{res['snapshot_cpu_s']:.2f}) · hand-over {res.get('hand_over_s', 0):.2f} s · diffs {res['diff_ms']} ms (CPU {res['diff_cpu_ms']}; "
                  f"{res['changed']} files) · peak RSS {res['rss_mb']:.0f} MB "
                  f"(after imports {res['rss_import_mb']:.0f} MB)", flush=True)
        wall, cpu = git_diff_ms(Path(args.ws), args.turns)
        git_ms, git_cpu = git_ms + wall, git_cpu + cpu
    git_med, git_cpu_med = statistics.median(git_ms), statistics.median(git_cpu)
    print(f"\nhost git diff of the same change: median {git_med:.1f} ms "
          f"(range {min(git_ms):.1f}–{max(git_ms):.1f}), CPU {git_cpu_med:.1f} ms")
    for path, rows in results.items():
        if not rows:
            continue
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("place_cold_s", "place_s", "snapshot_s", "snapshot_cpu_s", "rss_mb")}
        diffs = [d for r in rows for d in r["diff_ms"]]
        dmed = statistics.median(diffs)
        dcpu = statistics.median(d for r in rows for d in r["diff_cpu_ms"])
        print(f"{path:5}: placement {med['place_s']:.2f} s (first, with the fetch: {med['place_cold_s']:.2f} s) · "
              f"snapshot {med['snapshot_s']:.2f} s (CPU {med['snapshot_cpu_s']:.2f} s) · per-turn diff "
              f"median {dmed:.0f} ms (range {min(diffs):.0f}–{max(diffs):.0f}; CPU {dcpu:.0f} ms), "
              f"{dmed / git_med:.1f}× git diff (CPU {dcpu / git_cpu_med:.1f}×) · "
              f"peak RSS {med['rss_mb']:.0f} MB")
        print(f"summary: {path} placement {med['place_s']:.2f} s")
        print(f"summary: {path} snapshot {med['snapshot_s']:.2f} s")
        print(f"summary: {path} turn diff {dmed:.0f} ms")
        print(f"summary: {path} peak RSS {med['rss_mb']:.0f} MB")
    goal = "host" if results.get("host") else "layer"
    if results.get(goal):
        rows = results[goal]
        place = statistics.median(r["place_s"] for r in rows)
        snap = statistics.median(r["snapshot_s"] for r in rows)
        dmed = statistics.median(d for r in rows for d in r["diff_ms"])
        dcpu = statistics.median(d for r in rows for d in r["diff_cpu_ms"])
        rss = statistics.median(r["rss_mb"] for r in rows)
        if goal == "host" and results.get("layer"):
            old = results["layer"]
            old_place = statistics.median(r["place_s"] for r in old)
            old_snap = statistics.median(r["snapshot_s"] for r in old)
            print(f"host vs layer (archive placement) in the same run: placement {place:.2f} s vs "
                  f"{old_place:.2f} s ({place / old_place:.2f}×) · snapshot {snap:.2f} s vs "
                  f"{old_snap:.2f} s ({snap / old_snap:.2f}×)")
        print(f"goals ({goal}): placement {place:.2f} s (<= 1.5) · snapshot {snap:.2f} s (<= 0.5) · "
              f"turn diff {dmed:.0f} ms (<= 300) and {dmed / git_med:.1f}× git diff, "
              f"CPU {dcpu / git_cpu_med:.1f}× (<= 10) · "
              f"peak RSS {rss:.0f} MB (<= 250)")


if __name__ == "__main__":
    main()
