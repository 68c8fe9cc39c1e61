#!/usr/bin/env python3
"""Any benchmark on two revisions, side by side in one run: `before` is a git
revision exported with `git archive`, `after` the working tree (or a second
revision). Rounds alternate before, after, … so the machine's drift hits both
alike; each round runs the benchmark in a fresh process inside that tree.

    python bench/revs.py --before HEAD~3 [--after REV] [--rounds 3] -- bench/studio.py --quick

The figures compared are the benchmark's `summary:` lines: each line's label
and its first duration (`262 ms`, `1.2 s`) or size (`186 MB`). It prints every
round, then per figure the median of each side and after/before (below 1 is
faster or smaller). Always exits 0 once the table is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"^\s*(?P<label>[^:]+?):\s.*?(?P<value>[\d.,]+)\s*(?P<unit>ms|s|MB)\b")


def export(rev: str, into: Path) -> str:
    """The tree at `rev` into `into`; returns the short commit id."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", rev], check=True,
                          capture_output=True, text=True).stdout.strip()


def figures(output: str) -> dict[str, float]:
    """`label -> value` (ms, or MB) from the lines after `summary:`."""
    found: dict[str, float] = {}
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "summary:"), None)
    for line in lines[start + 1:] if start is not None else []:
        match = FIGURE.match(line)
        if match is None:
            continue
        value = float(match["value"].replace(",", ""))
        unit = match["unit"]
        label = match["label"].strip() + (" (MB)" if unit == "MB" else " (ms)")
        found[label] = value * 1000 if unit == "s" else value
    return found


def run(tree: Path, command: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run([sys.executable, *command], cwd=tree, env=env, capture_output=True, text=True)
    found = figures(result.stdout)
    if not found:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        print(f"   no summary figures from {tree.name}: " + " | ".join(tail))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the revision measured first (git rev)")
    parser.add_argument("--after", help="a second revision (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side (default 3)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- the benchmark script and its arguments, relative to the tree")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the benchmark after --, e.g. -- bench/studio.py --quick")
    scratch = Path(tempfile.mkdtemp(prefix="proctor-revs-"))
    try:
        before_id = export(args.before, scratch / "before")
        if args.after:
            after_id, after = export(args.after, scratch / "after"), scratch / "after"
        else:
            after_id, after = "working tree", ROOT
        sides = {"before": (scratch / "before", before_id), "after": (after, after_id)}
        for tree, tree_id in sides.values():  # a benchmark newer than a revision: the working tree's
            script = Path(command[0])
            if not script.is_absolute() and not (tree / script).exists() and (ROOT / script).exists():
                (tree / script).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / script, tree / script)
                print(f"{script} is not in {tree_id}: the working tree's copy runs there")
        print(f"{' '.join(command)}: before {before_id}, after {after_id}, {args.rounds} rounds")
        results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for n in range(1, args.rounds + 1):
            for side, (tree, _) in sides.items():
                found = run(tree, command)
                results[side].append(found)
                shown = ", ".join(f"{k} {v:.0f}" for k, v in found.items())
                print(f"  round {n} {side:<6} {shown}")
        labels = [label for label in results["after"][0] if any(label in r for r in results["before"])] \
            if results["after"] and results["after"][0] else []
        print()
        print(f"  {'figure':<72}{'before':>9}{'after':>9}{'ratio':>7}")
        for label in labels:
            before = statistics.median(r[label] for r in results["before"] if label in r)
            after_value = statistics.median(r[label] for r in results["after"] if label in r)
            ratio = after_value / before if before else float("nan")
            print(f"  {label:<72}{before:>9.0f}{after_value:>9.0f}{ratio:>7.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
