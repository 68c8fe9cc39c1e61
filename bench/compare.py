#!/usr/bin/env python3
"""Compare and replay: two big trials aligned and painted against reading them, and a big
trial replayed at full speed with the longest GUI stall.

Two engine-shaped records of `--items` (10,000) trajectory items of all four kinds over
20 turns, with command outputs of a few lines. B is A with `--differences` (100) real
differences spread evenly (a changed command, a deleted step, an inserted step, a renamed
tool, in turn), and with every volatile part redrawn (temp paths, trial ids, timestamps,
hex), which must not count. Both are saved into a temporary store, with A's events as the
engine would have stored them (engine.replay.events_from_record).

1. Alignment (engine/compare.py, no Qt), the least of `--repeat` runs of each:

    read      Store.get_trial of both (what opening a compare must do anyway)
    align     engine.compare.align(a, b)
    beside    turn_files, checks and deltas (the panes beside the alignment)

   It checks that the alignment found exactly the differences made. Goal: align <= 1 s.

2. Compare painted: a CompareView (offscreen Qt, 1024x700, shown), `show_pair(a, b)` (which
   aligns) and the view painted, the least of `--repeat` runs on a fresh view each. Goal:
   <= 1 s, and <= 10x read, measured in the same run.

3. Replay: A opened as the window's Replay opens it (replay_events from the store, a
   ReplayPlayer over its own ReplayTrials, a ReplayView over a timeline and a trajectory,
   1400x860) and played at MAX speed to its end, `--repeat` times, while a 5 ms precise
   timer on the GUI thread beats. Goals: the replay <= 2 s (the least run), the longest
   GUI stall (a beat's gap beyond 5 ms) <= 50 ms (the median run; the worst is printed too).

    QT_QPA_PLATFORM=offscreen python bench/compare.py [--items 10000] [--differences 100] [--repeat 5]

Always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QEvent, QEventLoop, Qt, QTimer, SignalInstance  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from engine.compare import align, checks, deltas, turn_files  # noqa: E402
from engine.models import (  # noqa: E402
    PhaseSpan, TrajectoryItem, TrialRecord, TurnRecord, Usage, Validation,
)
from engine.replay import events_from_record, replay_events  # noqa: E402
from engine.store import Store  # noqa: E402
from studio.app import GC_YOUNG  # noqa: E402
from studio.models.replay import MAX, MAX_RATE, REPLAY_CLOCK_MS, ReplayPlayer, ReplayTrials  # noqa: E402
from studio.views.compare import CompareView  # noqa: E402
from studio.views.replay import ReplayView  # noqa: E402
from studio.views.timeline import TimelineView  # noqa: E402
from studio.views.trajectory import TrajectoryView  # noqa: E402

ALIGN_GOAL_S = 1.0
PAINT_GOAL_S = 1.0
RATIO_GOAL = 10.0
REPLAY_GOAL_S = 2.0
STALL_GOAL_S = 0.050
TICK_MS = 5  # the stall probe's timer, as in bench/studio.py
REPLAY_TIMEOUT_S = 30.0  # a replay that never ends is reported, not waited for
A_ID, B_ID = "t_00000000a1", "t_00000000b2"
TURNS = 20
WORDS = ("parser token module refactor check fixture tests import greet value config path result "
         "error branch diff lint cache build schema").split()


def mark(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trajectory(items: int, rng: random.Random, start: datetime) -> list[TrajectoryItem]:
    """`items` steps of all four kinds, with volatile parts drawn from `rng`."""
    out = []
    for i in range(items):
        turn = 1 + i * TURNS // items
        at = iso(start + timedelta(milliseconds=i * 250 + rng.randint(0, 99)))
        word = WORDS[i % len(WORDS)]
        tmp = f"/tmp/tmp.{rng.getrandbits(32):08x}"
        kind = ("command", "command", "toolCall", "fileChange", "message")[i % 5]
        if kind == "command":
            command = f"python -m pytest -q tests/test_{word}_{i}.py --basetemp {tmp} # at {at}"
            output = "\n".join(f"{tmp}/test_{word}.py::test_{k} PASSED at {at}" for k in range(4))
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, command=command, exit_code=0,
                                      output=output))
        elif kind == "toolCall":
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, name="edit", output="ok",
                                      input={"path": f"src/{word}_{i}.py", "old": f"{word} = {i}",
                                             "new": f"{word} = {i + 1}",
                                             "session": f"t_{rng.getrandbits(40):010x}"}))
        elif kind == "fileChange":
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, path=f"src/{word}_{i}.py",
                                      change="modify"))
        else:
            out.append(TrajectoryItem(kind=kind, turn=turn, at=at, role="assistant",
                                      text=f"Changed {word} (commit {rng.getrandbits(40):010x})."))
    return out


def diverge(items: list[TrajectoryItem], differences: int) -> tuple[list[TrajectoryItem], list[int]]:
    """`items` with `differences` real differences spread evenly; returns them and where each is
    (as an index into `items`, before any shift)."""
    out, where = list(items), []
    step = len(items) // differences
    # From the end, so each edit leaves the indices of the earlier ones alone.
    for n in reversed(range(differences)):
        i = n * step + step // 2
        i -= i % 5  # a command
        where.append(i)
        match n % 4:
            case 0:
                out[i] = out[i].model_copy(update={"command": out[i].command + " -x"})
            case 1:
                del out[i]
            case 2:
                out.insert(i, out[i].model_copy(update={"command": "make clean"}))
            case _:
                out[i + 2] = out[i + 2].model_copy(update={"name": "write"})
                where[-1] = i + 2
    return out, sorted(where)


def record(id: str, batch_id: str, run_id: str, items: list[TrajectoryItem], outcome: str,
           start: datetime, rng: random.Random) -> TrialRecord:
    turns = []
    for n in range(1, TURNS + 1):
        paths = sorted({item.path for item in items if item.turn == n and item.kind == "fileChange"})
        diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x = {n}\n"
                       f"+x = {n + rng.randint(0, 1)}\n" for p in paths)
        turns.append(TurnRecord(index=n, prompt=f"Step {n}.", status="completed", ms=30_000, diff=diff,
                                files_changed=paths))
    phases = [PhaseSpan(phase="turn", status="ok", start_ms=n * 31_000, end_ms=n * 31_000 + 30_000, index=n)
              for n in range(1, TURNS + 1)]
    status = "passed" if outcome == "pass" else "failed"
    return TrialRecord(
        id=id, batch_id=batch_id, run_id=run_id, case_id="refactors_parser", variant="claude-sonnet",
        trial=1 if outcome == "pass" else 2, trigger="cli", outcome=outcome, started_at=iso(start),
        finished_at=iso(start + timedelta(seconds=TURNS * 31 + rng.randint(0, 60))), phases=phases,
        turns=turns, trajectory=items, command_count=sum(i.kind == "command" for i in items),
        usage=Usage(input=rng.randint(10**6, 5 * 10**6), output=rng.randint(10**5, 3 * 10**5)),
        validations=[Validation(kind="command", name="python -m pytest -q", status=status),
                     Validation(kind="judge", name="the change is idiomatic", status="passed")])


def least(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        began = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - began)
    return best, result


def save_pair(args: argparse.Namespace, path: Path) -> list[int]:
    """A and B saved into a new store at `path`, with A's events; returns where B's
    differences are (indices into A)."""
    rng = random.Random(7)
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    a_items = trajectory(args.items, random.Random(1), start)
    # B's own volatile parts, then its real differences.
    b_items, where = diverge(trajectory(args.items, random.Random(2), start + timedelta(minutes=20)),
                             args.differences)
    store = Store(path)
    batch_id, run_id = "b_0000bench", "r_0000bench"
    store.create_batch(batch_id, "cli", "bench", iso(start))
    store.create_run(run_id, batch_id, "refactors_parser", "claude-sonnet", 0)
    for id, items, outcome in ((A_ID, a_items, "pass"), (B_ID, b_items, "fail")):
        trial = record(id, batch_id, run_id, items, outcome, start, rng)
        store.save_trial(trial).result()
    # A trial the engine ran has its events stored, and the window replays those.
    for event in events_from_record(store.get_trial(A_ID)):
        store.add_event(event)
    store.close()
    return where


def alignment(args: argparse.Namespace, path: Path, where: list[int]) -> dict[str, Any]:
    print(f"1. Alignment: two {args.items:,}-step trials differing at {args.differences} places")
    store = Store(path)
    read, (a, b) = least(args.repeat, lambda: (store.get_trial(A_ID), store.get_trial(B_ID)))
    store.close()
    aligned, comparison = least(args.repeat, lambda: align(a, b))
    beside, _ = least(args.repeat, lambda: (turn_files(a, b), checks(a, b), deltas(a, b)))
    found = [row.a if row.a is not None else comparison.rows[i - 1].a + 1
             for i, row in ((i, comparison.rows[i]) for i in comparison.divergences)]
    exact = found == where
    print(f"   store {path.stat().st_size / 1e6:.1f} MB; {len(comparison.rows):,} rows, "
          f"{len(comparison.divergences)} divergences (first at row {comparison.first_divergence}); "
          f"{'exactly the ones made' if exact else f'NOT the ones made: {found[:5]} vs {where[:5]}'}")
    print(f"   read both {ms(read)}, align {ms(aligned)}, beside (files, checks, deltas) {ms(beside)}; "
          f"align/read {aligned / read:.2f}")
    return {"read": read, "align": aligned, "beside": beside, "exact": exact}


# --- the studio half ---------------------------------------------------------------------------

def studio_gc() -> None:
    """The collector as the studio's window sets it (studio/app.py): what exists is frozen and
    young collections are rarer, else a full collection walks every record read so far."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def paint(app: QApplication, widget: QWidget) -> None:
    """Lay out and paint now, as the first frame a user would see."""
    for _ in range(2):  # a view's delayed layout runs in the first pass and repaints in the second
        widget.repaint()
        app.processEvents()


def spin(seconds: float) -> None:
    """Run the event loop for `seconds`, timers and all."""
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()


def wait_for(signal: SignalInstance, timeout_s: float) -> bool:
    """Run the event loop until `signal` is emitted; False if `timeout_s` passed first."""
    loop, seen = QEventLoop(), [False]

    def done() -> None:
        seen[0] = True
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(done)
    return seen[0]


def dispose(app: QApplication, widget: QWidget) -> None:
    """Close and delete a widget now: left to the event loop, its deletion (thousands of rows)
    would land in the next run's measurement."""
    widget.close()
    widget.deleteLater()
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app.processEvents()


class Heartbeat:
    """A precise 5 ms timer on the GUI thread: the longest gap between its beats, beyond its
    interval, is the longest the GUI stood still."""

    def __init__(self) -> None:
        self.beats: list[float] = []
        self.timer = QTimer(interval=TICK_MS, timerType=Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(lambda: self.beats.append(time.perf_counter()))

    def start(self) -> None:
        self.beats = [time.perf_counter()]
        self.timer.start()

    def stop(self) -> tuple[float, float]:
        """Stops; returns the longest stall and when it began, in seconds since the start."""
        self.timer.stop()
        gaps = ((b - a, a) for a, b in zip(self.beats, self.beats[1:]))
        gap, at = max(gaps, default=(0.0, self.beats[0]))
        return max(0.0, gap - TICK_MS / 1000), at - self.beats[0]


def compare_painted(app: QApplication, args: argparse.Namespace, path: Path) -> float:
    """The least time of `show_pair(a, b)` (it aligns) and the first paint after it."""
    print("2. Compare painted: CompareView.show_pair of both, then painted (offscreen)")
    store = Store(path)
    a, b = store.get_trial(A_ID), store.get_trial(B_ID)
    store.close()

    def once() -> float:
        view = CompareView()  # fresh each run: the first paint of its rows, not a repaint
        view.resize(1024, 700)
        view.show()
        paint(app, view)  # its empty state, as the window has it before a compare
        began = time.perf_counter()
        view.show_pair(a, b)
        paint(app, view)
        took = time.perf_counter() - began
        divergences = len(view.comparison.divergences)
        dispose(app, view)
        if divergences != args.differences:
            print(f"   the view shows {divergences} divergences, not {args.differences}")
        return took

    runs = [once() for _ in range(args.repeat)]
    print(f"   show_pair + paint: {', '.join(ms(r) for r in runs)}; least {ms(min(runs))}")
    return min(runs)


def replay_once(app: QApplication, store: Store) -> dict[str, float]:
    """A opened as the window's Replay opens it, played at MAX to its end, with a heartbeat."""
    began = time.perf_counter()
    record, events = store.get_trial(A_ID), replay_events(store, A_ID)
    model = ReplayTrials()  # its own model, as the window's: the replay's clock is its own
    player = ReplayPlayer(model, events, record.id, parent=model)
    trajectory = TrajectoryView(model)
    # The window adds a trial header above (its clock costs nothing measurable).
    view = ReplayView(player, record, [TimelineView(model), trajectory])
    model.setParent(view)
    view.resize(1400, 860)
    view.show()
    paint(app, view)
    opened = time.perf_counter() - began
    heart = Heartbeat()
    player.set_speed(MAX)
    heart.start()
    began = time.perf_counter()
    player.play()
    ended = wait_for(player.finished, REPLAY_TIMEOUT_S)
    took = time.perf_counter() - began if ended else float("inf")
    spin(0.1)  # a stall in the last tick (the record shown at the end) shows as the gap after it
    stall, stall_at = heart.stop()
    # Its items, not the turn headers nor the checks and verdicts that come in at the end.
    items = trajectory.model.counts.total() - trajectory.model.counts["validation"]
    dispose(app, view)
    return {"open": opened, "replay": took, "stall": stall, "stall_at": stall_at, "events": len(events),
            "items": items}


def replay(app: QApplication, args: argparse.Namespace, path: Path) -> dict[str, Any]:
    print(f"3. Replay: the {args.items:,}-item trial played at full speed to its end, {args.repeat} times")
    store = Store(path)
    runs = [replay_once(app, store) for _ in range(args.repeat)]
    store.close()
    first = runs[0]
    print(f"   {first['events']:,} stored events; {first['items']:,} items in the trajectory at the end")
    for k, run in enumerate(runs, 1):
        print(f"   run {k}: open {ms(run['open'])}, replay {ms(run['replay'])}, "
              f"longest GUI stall {ms(run['stall'])} ({ms(run['stall_at'])} in)")
    print(f"   (the views append a trial's new rows on the model's clock, every {REPLAY_CLOCK_MS} ms: at MAX "
          f"about {MAX_RATE * REPLAY_CLOCK_MS // 1000:,} rows a tick, where the stalls fall)")
    stalls = [run["stall"] for run in runs]
    return {"open": min(run["open"] for run in runs), "replay": min(run["replay"] for run in runs),
            "stall": statistics.median(stalls), "worst": max(stalls),
            "complete": all(run["items"] == args.items for run in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--differences", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each figure; the least is kept (the median for the GUI stall)")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compare.db"
        where = save_pair(args, path)
        one = alignment(args, path, where)
        print()
        studio_gc()  # the engine figures above as before; the studio's from here, as in the window
        painted = compare_painted(app, args, path)
        print()
        three = replay(app, args, path)
        print()
    ratio = painted / one["read"]
    print("summary:")
    print(f"  read both records: {ms(one['read'])}")
    print(f"  align {args.items:,} x {args.items:,} steps: {ms(one['align'])}  goal <= 1 s  "
          f"{mark(one['align'] <= ALIGN_GOAL_S and one['exact'])}")
    print(f"  files, checks and deltas: {ms(one['beside'])}")
    print(f"  align/read ratio: {one['align'] / one['read']:.2f}")
    print(f"  align and paint (show_pair + paint): {ms(painted)}  goal <= 1 s  "
          f"{mark(painted <= PAINT_GOAL_S)}")
    print(f"  align and paint/read ratio: {ratio:.2f}  goal <= {RATIO_GOAL:g}  {mark(ratio <= RATIO_GOAL)}")
    print(f"  open the replay: {ms(three['open'])}")
    print(f"  replay {args.items:,} items at full speed: {ms(three['replay'])}  goal <= 2 s  "
          f"{mark(three['replay'] <= REPLAY_GOAL_S and three['complete'])}")
    print(f"  longest GUI stall during the replay: {ms(three['stall'])} (median run; worst "
          f"{ms(three['worst'])})  goal <= 50 ms  {mark(three['stall'] <= STALL_GOAL_S)}")


if __name__ == "__main__":
    main()
