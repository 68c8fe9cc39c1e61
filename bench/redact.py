#!/usr/bin/env python3
"""Redaction throughput, before and after, side by side in one run.

"Before" is `engine/redact.py` as committed at a git revision (HEAD by default),
loaded from `git show` as its own module; "after" is the working tree's. Both
redact the same texts with the same trial secrets and host variables:

    ordinary text   the standard library's Python sources (mixed ASCII and not)
    big diff        the same as `+` lines, with a key, a URL password and a
                    password assignment every few hundred lines
    adversarial     each input that made a pattern backtrack, or that is dense
                    in what the patterns start with, repeated to the size asked;
                    then mixes, drawn at random (fixed seed) from pieces of what
                    the patterns look for (they made RE2's DFA build a state per
                    byte, or hold a match every few bytes)

Time is CPU time of the redacting thread, the least of `--repeat` runs. The
"before" side is measured on a smaller copy of an input when the full size
would take too long (it was quadratic): its size is printed beside it. Then
the cap: the first 16,000 characters of a big text through `Redactor.head`,
against redacting it all. Goal: >= 100 MB/s on any input. Always exits 0.

    python bench/redact.py [--mb 8] [--repeat 3] [--rev HEAD]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import redact as after  # noqa: E402

SECRETS = ["trial-secret-Zq8Rw2Lx5Vn7Kp3T", "hunter2-hunter2"]
HOST = {"OPENAI_API_KEY": "sk-proj-abc123-not-a-standard-shape",
        "GITHUB_TOKEN": "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "DB_PASSWORD": "correct horse battery", "PATH": "/usr/local/bin:/usr/bin", "LANG": "C.UTF-8"}
ADVERSARIAL = {  # name: (written once, then repeated)
    "-eyJ (the issue)": ("", "-eyJ"),
    "_eyJa": ("", "_eyJa"),
    "eyJ.": ("", "eyJ."),
    "PEM header, no end": ("-----BEGIN ", "PRIVATE KEY "),
    "PEM BEGIN, no END": ("", "-----BEGIN PRIVATE KEY-----\n"),
    "://a:": ("", "://a:"),
    "://:@@": ("", "://:@@"),
    "Bearer ": ("", "Bearer "),
    "password": ("", "password"),
    "pwd=a( (code)": ("", "pwd=a("),
    'secret": "': ("", '"secret": "'),
    "sk- keys, dense": ("", "sk-abcdefgh\n"),
    "a secret, dense": ("", "hunter2-hunter2 "),
    "a secret overlapping": ("", "hunter2-"),
}
MIXES = {  # name: the pieces drawn at random
    "key prefixes mixed": ["AIza", "-AIza", "b", "c", "d", "e"],
    "kinds of keys mixed": ["-sk-", "-xox", "-eyJ", "-ghp_", "-anp_", "-am_sk_", "a", "B", "1", "-",
                            "_", "-AIza", "-AKIA", "."],
    "Bearer mixed": ["Bearer ", "bearer\t", "BEARER ", "a", "b", ".", "-", "Bearer"],
    "URL parts mixed": ["://", ":", "@", "a", "/", "?", "#", " "],
    "PEM parts mixed": ["-----BEGIN ", "RSA ", "PRIVATE KEY", "-----", "END ", "A", " ", "\n"],
    "assignments mixed": ["pwd=", "Pwd=", "PWD=", "secret=", "Secret:", "password=", "PASSWORD:",
                          "passwd=", "a", "b", '"', "'", '\\"', " ", "=", ":"],
    "everything mixed": ["-sk-", "-xox", "-eyJ", "-AIza", "Bearer ", "pwd=", "Secret=", "password:",
                         "://", ":", "@", "a", "B", "-", "_", '"', " ", "=", "-----BEGIN ",
                         "PRIVATE KEY", "-----"],
}
BEFORE_BUDGET_S = 2.0  # the before side stops growing an input once one run takes this long


def load_before(rev: str) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:engine/redact.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("engine.redact_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "engine"
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    exec(compile(source, f"{rev}:engine/redact.py", "exec"), module.__dict__)
    return module


def ordinary(size: int) -> str:
    parts, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        parts.append(path.read_text(errors="replace"))
        total += len(parts[-1])
        if total >= size:
            break
    text = "".join(parts)
    while len(text) < size:
        text += text
    return text[:size]


def big_diff(size: int) -> str:
    lines = ordinary(size).splitlines()
    for i in range(0, len(lines), 400):
        lines[i] = f"export OPENAI_API_KEY=sk-proj-{i:08d}abcdefghijklmnop"
    for i in range(150, len(lines), 400):
        lines[i] = f'DATABASE_URL = "postgres://app:s3cr3t{i}@db:5432/app"; password = "pw-{i}-xyz"'
    header = "diff --git a/lib.py b/lib.py\n--- a/lib.py\n+++ b/lib.py\n@@ -0,0 +1 @@\n"
    return (header + "".join(f"+{line}\n" for line in lines))[:size]


def repeated(head: str, unit: str) -> Callable[[int], str]:
    return lambda size: head + unit * (size // len(unit))


def mixed(parts: list[str]) -> Callable[[int], str]:
    def make(size: int) -> str:
        rnd, out, total = random.Random(1), [], 0
        while total < size:
            out.append(rnd.choice(parts))
            total += len(out[-1])
        return "".join(out)
    return make


def seconds(redactor, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        redactor.text(text)
        best = min(best, time.thread_time() - start)
    return best


def rate(size: int, secs: float) -> float:
    return size / max(secs, 1e-9) / 1e6


def measure_before(redactor, make: Callable[[int], str], size: int,
                   repeat: int) -> tuple[float, int]:
    """MB/s at the largest size up to `size` that stays within the budget, and that size."""
    n = min(size, 16_384)
    while True:
        text = make(n)
        secs = seconds(redactor, text, 1)
        if secs > BEFORE_BUDGET_S or n >= size:
            return rate(len(text), secs if n < size else min(secs, seconds(redactor, text, repeat))), len(text)
        n = min(size, n * 4 if secs < BEFORE_BUDGET_S / 16 else n * 2)


def mbs(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def human(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size // 1024} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=8, help="size of each input (MB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rev", default="HEAD", help="git revision of the before side")
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    before_module = load_before(args.rev)
    old = before_module.Redactor(secrets=SECRETS, host_env=HOST)
    new = after.Redactor(secrets=SECRETS, host_env=HOST)

    print(f"redaction throughput, CPU time, least of {args.repeat}; before = {args.rev}:engine/redact.py")
    print(f"{'input':24} {'size':>9}  {'before MB/s':>12} {'(at size)':>10}  {'after MB/s':>10}  {'x':>7}")
    worst, below = float("inf"), []
    rows = [("ordinary text", ordinary(size)), ("big diff", big_diff(size))]
    for name, text in rows:
        b, a = rate(len(text), seconds(old, text, args.repeat)), rate(len(text), seconds(new, text, args.repeat))
        worst = min(worst, a)
        below += [name] if a < 100 else []
        print(f"{name:24} {human(len(text)):>9}  {mbs(b):>12} {'':>10}  {mbs(a):>10}  {a / b:7.1f}")
    inputs = {name: repeated(*written) for name, written in ADVERSARIAL.items()}
    inputs.update({name: mixed(parts) for name, parts in MIXES.items()})
    for name, make in inputs.items():
        text = make(size)
        b, at = measure_before(old, make, size, args.repeat)
        a = rate(len(text), seconds(new, text, args.repeat))
        worst = min(worst, a)
        below += [name] if a < 100 else []
        note = "" if at >= len(text) else human(at)
        print(f"{name:24} {human(len(text)):>9}  {mbs(b):>12} {note:>10}  {mbs(a):>10}  {a / b:7.1f}")
    print(f"slowest input after: {worst:.1f} MB/s (goal >= 100); "
          f"below it: {', '.join(below) or 'none'}")

    text = big_diff(size) * 8
    start = time.thread_time()
    old.text(text)
    whole = time.thread_time() - start
    start = time.thread_time()
    new.head(text, 16_000)
    capped = time.thread_time() - start
    print(f"a {human(len(text))} text kept to 16,000 chars: before {whole:.2f} s (all of it redacted), "
          f"after {capped * 1000:.1f} ms (Redactor.head)")


if __name__ == "__main__":
    main()
