#!/usr/bin/env python3
"""Search over 100,000 trials of 20 items each: the first page's latency, the index's size.

A store is made once and kept in /tmp, named by a hash of what makes it (this script's
item maker, tests/make_store.py, engine/store/search.py and the schema version): the
trials of tests/make_store.py, then 20 engine-shaped trajectory items a trial (commands
with their output, messages, tool calls, file changes; words drawn from a Zipf-like
vocabulary with paths, numbers and hex ids, as real outputs are), written at schema 3,
then opened by `Store` (the migration only adds the index's tables) and indexed
with `index_for_search`, as `proctor search` does (both times are printed).

Then each query's first page (50 hits, `Store.search`) is timed: a common word, a rare
word, a phrase, a scoped query, filters, a filter with no hits, a label (goal <= 100 ms
each, the best of 5 after one cold run), and the index's share of the store's bytes (from
dbstat; goal <= 50 %). If bench/groups.py exists its `measure()` runs too (grouping 10,000
failed trials, goal <= 1 s). Prints `summary:` lines for revs.py. Always exits 0.

    python bench/search.py [--trials N] [--fresh]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sqlite3
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.models import Note  # noqa: E402
from engine.store import SCHEMA_VERSION, Store  # noqa: E402
from engine.store.store import KIND_LETTER  # noqa: E402
from tests.make_store import make_store  # noqa: E402

ITEMS = 20
GOAL_MS = 100.0
GOAL_SHARE = 0.50
RARE = "zanzibarquux"  # in 20 items of the whole store
QUERIES = [
    ("common word", "error"),
    ("rare word", RARE),
    ("phrase", '"no module named"'),
    ("scoped", "in:command pip install"),
    ("filter", "outcome:fail variant:codex-mini pytest"),
    ("filter, no hits", "variant:no-such-variant error"),
    ("label", 'label:"env problem" error'),
    ("page 3", "error"),
]
COMMANDS = ["python3 -m pytest -q", "pip install -r requirements.txt", "pip install requests",
            "cat {f}", "ls -la {d}", "git diff --stat", "sed -n 1,80p {f}", "grep -rn {w} {d}",
            "npm test", "make build", "python3 {f}", "head -n 40 {f}"]
DIRS = ["src", "tests", "lib", "docs", "app", "scripts", "pkg/core", "pkg/util"]
OUTPUT_LINES = ["ModuleNotFoundError: No module named '{w}'", "FAILED tests/test_{w}.py::test_{w2} - AssertionError",
                "{n} passed, {m} failed in {s}s", "error: {w} is not defined at {f}:{n}",
                "Traceback (most recent call last):", '  File "{f}", line {n}, in {w}',
                "Successfully installed {w}-{n}.{m}.{s}", "{f}:{n}: warning: unused variable '{w}'",
                "commit {h}", "{w} {w2} {w3} {w4}", "ok {w} {h}"]
MESSAGES = ["I will look at {f} first.", "The test fails because {w} returns None.",
            "I cannot reach the package index; I will vendor {w}.", "Done: {w} now handles {w2}.",
            "Running the tests again after changing {f}."]


def _vocabulary(rng: random.Random) -> list[str]:
    """6,000 made-up words; drawn Zipf-like, so a few are everywhere and most are rare."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"error", "test", "module", "install", "value", "config", "parser", "cache"}
    while len(words) < 6000:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    return sorted(words)


def _items(rng: random.Random, vocab: list[str], weights: list[float], turns: int) -> list[dict]:
    def fill(template: str) -> str:
        w = rng.choices(vocab, cum_weights=weights, k=4)
        return template.format(w=w[0], w2=w[1], w3=w[2], w4=w[3], n=rng.randint(1, 999),
                               m=rng.randint(0, 9), s=rng.randint(0, 99), h=f"{rng.getrandbits(64):016x}",
                               f=f"{rng.choice(DIRS)}/{w[1]}.py", d=rng.choice(DIRS))
    items = []
    for n in range(ITEMS):
        turn = n * turns // ITEMS
        roll = rng.random()
        if roll < 0.5:
            lines = [fill(rng.choice(OUTPUT_LINES)) for _ in range(rng.randint(1, 8))]
            items.append({"kind": "command", "turn": turn, "command": fill(rng.choice(COMMANDS)),
                          "exit_code": rng.choice([0, 0, 1]), "output": "\n".join(lines)})
        elif roll < 0.75:
            items.append({"kind": "message", "turn": turn, "role": "assistant",
                          "text": " ".join(fill(rng.choice(MESSAGES)) for _ in range(rng.randint(1, 3)))})
        elif roll < 0.9:
            items.append({"kind": "toolCall", "turn": turn, "name": rng.choice(["read_file", "edit", "search"]),
                          "input": {"path": fill("{f}")}, "output": fill(rng.choice(OUTPUT_LINES))})
        else:
            items.append({"kind": "fileChange", "turn": turn, "path": fill("{f}"), "change": "modify"})
    return items


def _source_hash() -> str:
    digest = hashlib.sha256(str(SCHEMA_VERSION).encode())
    for part in (Path(__file__), ROOT / "tests/make_store.py", ROOT / "engine/store/search.py"):
        text = part.read_text()
        if part == Path(__file__):  # only the maker's part: editing the report keeps the store
            text = text.split("def _source_hash")[0]
        digest.update(text.encode())
    return digest.hexdigest()[:10]


def build(path: Path, trials: int) -> float:
    """The store at `path`: trials and items written at schema 3, then migrated and indexed
    (Store.index_for_search, as `proctor search` does); returns the seconds of both."""
    part = path.with_name(path.name + ".part")
    make_store(part, trials, max(1, trials // 100))
    rng = random.Random(11)
    vocab = _vocabulary(rng)
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocab))))
    conn = sqlite3.connect(part)
    conn.execute("PRAGMA synchronous=OFF")
    ids = [r[0] for r in conn.execute("SELECT id FROM trial ORDER BY started_at")]
    rare = set(rng.sample(range(len(ids)), 20))
    for start in range(0, len(ids), 5_000):
        item_rows, layout_rows = [], []
        for k, trial_id in enumerate(ids[start:start + 5_000], start):
            items = _items(rng, vocab, weights, turns=rng.randint(1, 4))
            if k in rare:
                items[rng.randrange(ITEMS)] = {"kind": "command", "turn": 0, "command": "cat build.log",
                                               "exit_code": 0, "output": f"found {RARE} in the log"}
            rows = [(trial_id, p, i["turn"], i["kind"], json.dumps(i)) for p, i in enumerate(items)]
            item_rows += rows
            runs: list[list[int]] = []
            for _, p, turn, _, _ in rows:
                if runs and runs[-1][0] == turn:
                    runs[-1][2] += 1
                else:
                    runs.append([turn, p, 1])
            layout_rows.append((trial_id, json.dumps(runs), "".join(KIND_LETTER[r[3]] for r in rows)))
        conn.executemany("INSERT INTO trajectory_item VALUES (?, ?, ?, ?, ?)", item_rows)
        conn.executemany("INSERT INTO trajectory_layout VALUES (?, ?, ?)", layout_rows)
        conn.commit()
    # As schema 3 left it: no index, so opening the store builds it.
    conn.execute("DROP TABLE search_index")
    conn.execute("DROP TABLE search_trial")
    conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    began = time.perf_counter()
    store = Store(part)
    opened = time.perf_counter() - began
    store.index_for_search()
    store.close()
    seconds = time.perf_counter() - began
    print(f"the store opened in {opened * 1000:.0f} ms; indexing it for search took {seconds:.1f} s")
    conn = sqlite3.connect(part)
    conn.execute("VACUUM")  # the share is of a store at rest, not of pages the build freed
    conn.execute("PRAGMA journal_mode=DELETE")  # one file, so the rename below moves all of it
    conn.close()
    part.rename(path)
    return seconds


def index_share(path: Path) -> tuple[int, int]:
    """(bytes of the index's tables, bytes of the store), from dbstat."""
    with sqlite3.connect(path) as conn:
        total = conn.execute("SELECT sum(pgsize) FROM dbstat").fetchone()[0]
        index = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search_%' "
                             "OR name LIKE 'sqlite_autoindex_search_%'").fetchone()[0]
    return index, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--fresh", action="store_true", help="make the store again")
    args = parser.parse_args()
    path = Path(f"/tmp/proctor-bench-search-{args.trials}-{_source_hash()}.db")
    if args.fresh:
        path.unlink(missing_ok=True)
    if not path.exists():
        print(f"making {path} ({args.trials:,} trials x {ITEMS} items; a few minutes once)", flush=True)
        began = time.perf_counter()
        migrate_s = build(path, args.trials)
        print(f"made in {time.perf_counter() - began:.0f} s; the migration (index build) took "
              f"{migrate_s:.1f} s")
        print(f"summary: index build (migration to schema 4) {migrate_s:.1f} s for {args.trials:,} trials")
    index, total = index_share(path)
    share = index / total
    print(f"store {total / 1e6:.0f} MB, index {index / 1e6:.0f} MB: {share:.0%} of the store "
          f"(goal <= {GOAL_SHARE:.0%})")
    with Store(path) as store:
        labelled = [h.trial_id for h in store.search("error", limit=200, offset=5_000)][::10]
        for trial_id in labelled:  # a few labelled trials, deep in the store
            store.set_note(Note(target=trial_id, label="env problem", updated_at="2026-12-01T00:00:00Z"))
        store.flush()
        print(f"{'query':<18} {'text':<42} {'cold ms':>8} {'best ms':>8} {'hits':>5}")
        missed = 0
        for name, text in QUERIES:
            offset = 100 if name == "page 3" else 0
            times = []
            for _ in range(6):
                began = time.perf_counter()
                hits = store.search(text, limit=50, offset=offset)
                times.append((time.perf_counter() - began) * 1000)
            best = min(times[1:])
            missed += best > GOAL_MS
            print(f"{name:<18} {text:<42} {times[0]:8.1f} {best:8.1f} {len(hits):5}")
            print(f"summary: search {name} {best:.1f} ms (median {statistics.median(times[1:]):.1f} ms, "
                  f"goal <= {GOAL_MS:.0f} ms)")
        for trial_id in labelled:
            store.set_note(Note(target=trial_id, updated_at="x"))
    print(f"summary: index size {index / 1e6:.0f} MB, {share:.1%} of the store's {total / 1e6:.0f} MB "
          f"(goal <= {GOAL_SHARE:.0%})")
    print(f"goals: search first page {'met' if not missed else f'MISSED by {missed} queries'}; "
          f"index share {'met' if share <= GOAL_SHARE else 'MISSED'}")
    if (ROOT / "bench" / "groups.py").exists():
        try:
            from bench.groups import measure

            m = measure()
            print(f"summary: grouping {m['failed']:,} failed trials {m['total_s'] * 1000:.0f} ms "
                  f"(goal <= {m['goal_s'] * 1000:.0f} ms), {m['groups']} groups for {m['causes']} causes: "
                  f"{'met' if m['met'] else 'MISSED'}")
        except Exception:  # another part's benchmark must not cost this one's figures
            print("bench/groups.py's measure() failed:")
            traceback.print_exc(limit=3)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
    sys.exit(0)
