"""Importing a 10,000-step Inspect AI log against Inspect's own `read_eval_log` of it.

The log is ../shared/data/inspect/n10000/*.eval (Inspect 0.3.285, one sample, 10,000 bash
steps, 7.8 MB; `--log` picks another). Each side runs in a fresh child process, so its peak
RSS (ru_maxrss) is its own, and modules are imported before the clock starts:

1. Inspect: `inspect_ai.log.read_eval_log(path)` in a venv this script makes once
   (~/.cache/proctor-bench/inspect-VERSION, `pip install inspect-ai==VERSION` from PyPI, the
   version the log names). It takes seconds, so it runs `--inspect-rounds` times (default 1).
2. Proctor: `engine.importer.import_file(store, path)` into an empty store, as `proctor
   import` does (read with engine/inspect_log.py, redact, `Store.import_portable`), `--rounds`
   times (default 3), and once more with each step timed apart.
3. The studio: the imported trial opened in `MainWindow` (offscreen, 1,024 x 700), timed from
   `open_trial` to painted (`repaint()` + `processEvents()`, twice, as bench/studio.py's
   `paint`), first with the window's own first tab, then with each tab current.

Goals: import <= 0.1x Inspect's read time and <= 300 MB peak; open in the studio <= 0.5 s.
Run it with `QT_QPA_PLATFORM=offscreen python bench/import_inspect.py` (about 30 s, plus a
minute the first time for Inspect's venv). It always exits 0 once the summary is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG_GLOB = ROOT.parent / "shared" / "data" / "inspect" / "n10000"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proctor-bench"
TIME_GOAL = 0.1  # of Inspect's read time
MEMORY_GOAL_MB = 300
OPEN_GOAL_S = 0.5

INSPECT_READ = textwrap.dedent("""
    import json, resource, sys, time
    from inspect_ai.log import read_eval_log
    started = time.perf_counter()
    log = read_eval_log(sys.argv[1])
    took = time.perf_counter() - started
    steps = sum(len(m.tool_calls or []) for s in log.samples for m in s.messages if m.role == "assistant")
    print(json.dumps({"s": took, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "steps": steps}))
""")

PROCTOR_IMPORT = textwrap.dedent("""
    import json, resource, sys, time
    from engine.importer import import_file
    from engine.inspect_log import read_inspect  # imported before the clock, as the CLI has it
    from engine.store import Store
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with Store(sys.argv[2]) as store:
        started = time.perf_counter()
        report = import_file(store, sys.argv[1])
        took = time.perf_counter() - started
    print(json.dumps({"s": took, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "base_mb": base, "trials": report.trials_added}))
""")

PROCTOR_STEPS = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from engine import importer
    from engine.inspect_log import read_inspect
    from engine.store import Store
    spent = {}
    started = time.perf_counter()
    portable = read_inspect(sys.argv[1])
    spent["read (engine/inspect_log.py)"] = time.perf_counter() - started
    started = time.perf_counter()
    clean = importer.redacted(portable, Path(sys.argv[1]))
    spent["redact again (importer.redacted)"] = time.perf_counter() - started
    with Store(sys.argv[2]) as store:
        started = time.perf_counter()
        store.import_portable(clean)
        spent["store (Store.import_portable)"] = time.perf_counter() - started
        started = time.perf_counter()
        again = store.import_portable(clean)
        spent["store again (nothing added)"] = time.perf_counter() - started
    [trial] = portable.batches[0].trials
    kinds = {}
    for item in trial.trajectory:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    print(json.dumps({"spent": spent, "kinds": kinds, "id": trial.id, "same": again.trials_same,
                      "record_mb": len(json.dumps(trial.to_json())) / 2**20}))
""")

STUDIO_OPEN = textwrap.dedent("""
    import json, sys, time
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from engine.store import Store
    from studio.app import MainWindow
    from studio.cli import TABS

    def paint(app, window):  # as bench/studio.py's paint: a view's delayed layout, then its repaint
        for _ in range(2):
            window.repaint()
            app.processEvents()

    app = QApplication.instance() or QApplication([])
    store = Store(sys.argv[1])
    window = MainWindow(store, QSettings(sys.argv[2], QSettings.Format.IniFormat), watch_docker=False)
    window.resize(1024, 700)
    window.show()
    paint(app, window)
    times = {}
    started = time.perf_counter()
    window.open_trial(sys.argv[3])
    paint(app, window)
    times["first open, " + TABS[window.tabs.currentIndex()]] = time.perf_counter() - started
    for tab in ("overview", "trajectory", "timeline", "evidence", "compare", "replay"):
        if tab not in TABS:
            continue
        window.show_view(tab)
        paint(app, window)
        window.open_trial(sys.argv[3])  # opened again with this tab current
        paint(app, window)
        started = time.perf_counter()
        window.open_trial(sys.argv[3])
        paint(app, window)
        times[tab] = time.perf_counter() - started
    print(json.dumps(times))
""")


def child(python: str, script: str, *args: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([python, "-c", script, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def inspect_version(log: Path) -> str:
    with zipfile.ZipFile(log) as zf:
        name = "header.json" if "header.json" in zf.namelist() else "_journal/start.json"
        from engine.inspect_log import LIMITS  # the zstd members zipfile cannot open
        from engine.safezip import SafeZip
        header = json.loads(bytes(SafeZip(zf, LIMITS).read(zf.getinfo(name))))
    return header["eval"]["packages"]["inspect_ai"]


def inspect_python(version: str) -> str:
    """A venv with inspect-ai VERSION, made once and kept under CACHE."""
    home = CACHE / f"inspect-{version}"
    python = home / "bin" / "python"
    ready = home / ".ready"
    if not ready.exists():
        print(f"   making {home} (pip install inspect-ai=={version}; once)")
        venv.create(home, with_pip=True, clear=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", f"inspect-ai=={version}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip install inspect-ai=={version} failed: {done.stderr.strip()[-500:]}")
        ready.write_text(version)
    return str(python)


def mark(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="an Inspect .eval log (default: the 10,000-step one)")
    parser.add_argument("--rounds", type=int, default=3, help="Proctor imports (default 3)")
    parser.add_argument("--inspect-rounds", type=int, default=1, help="Inspect reads (default 1)")
    args = parser.parse_args()
    log = args.log or next(LOG_GLOB.glob("*.eval"))
    sys.path.insert(0, str(ROOT))
    version = inspect_version(log)
    print(f"log: {log.name}, {log.stat().st_size / 2**20:.1f} MB, written by Inspect {version}")
    folder = Path(tempfile.mkdtemp(prefix="proctor-bench-inspect-"))

    print("1. Inspect's read_eval_log")
    python = inspect_python(version)
    inspect = []
    for n in range(args.inspect_rounds):
        inspect.append(child(python, INSPECT_READ, str(log), env={"PYTHONPATH": ""}))
        print(f"   round {n + 1}: {inspect[-1]['s']:.2f} s, peak RSS {inspect[-1]['peak_mb']:.0f} MB, "
              f"{inspect[-1]['steps']:,} tool calls")
    inspect_s = statistics.median(r["s"] for r in inspect)
    inspect_mb = max(r["peak_mb"] for r in inspect)

    print("2. Proctor's import (engine.importer.import_file into an empty store)")
    ours = []
    for n in range(args.rounds):
        ours.append(child(sys.executable, PROCTOR_IMPORT, str(log), str(folder / f"import{n}.db")))
        print(f"   round {n + 1}: {ours[-1]['s'] * 1000:.0f} ms, peak RSS {ours[-1]['peak_mb']:.0f} MB "
              f"({ours[-1]['base_mb']:.0f} MB with the modules imported, before the import)")
    steps = child(sys.executable, PROCTOR_STEPS, str(log), str(folder / "steps.db"))
    print(f"   the trial: {', '.join(f'{n:,} {k}' for k, n in steps['kinds'].items())}; "
          f"its record {steps['record_mb']:.1f} MB of JSON")
    for step, took in steps["spent"].items():
        print(f"   {step:<36} {took * 1000:>6.0f} ms")
    import_s = statistics.median(r["s"] for r in ours)
    import_mb = max(r["peak_mb"] for r in ours)
    ratio = import_s / inspect_s

    print("3. The imported trial opened in the studio (1,024 x 700, offscreen)")
    opened: dict[str, float] = {}
    try:
        opened = child(sys.executable, STUDIO_OPEN, str(folder / "import0.db"),
                       str(folder / "studio.ini"), steps["id"],
                       env={"QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")})
        for tab, took in opened.items():
            print(f"   {tab:<28} {took * 1000:>6.0f} ms")
    except RuntimeError as exc:
        print(f"   could not open the studio: {exc}")
    worst = max(opened.values(), default=float("nan"))
    worst_tab = max(opened, key=opened.__getitem__) if opened else "-"

    print()
    print("summary:")
    print(f"  inspect read_eval_log: {inspect_s:.2f} s, peak {inspect_mb:.0f} MB")
    print(f"  proctor import: {import_s * 1000:.0f} ms = {ratio:.3f}x Inspect's read  goal <= "
          f"{TIME_GOAL}x  {mark(ratio <= TIME_GOAL)}")
    print(f"  proctor import peak RSS: {import_mb:.0f} MB  goal <= {MEMORY_GOAL_MB} MB  "
          f"{mark(import_mb <= MEMORY_GOAL_MB)}")
    print(f"  studio open, worst tab ({worst_tab}): {worst * 1000:.0f} ms  goal <= {OPEN_GOAL_S} s  "
          f"{mark(worst <= OPEN_GOAL_S)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
