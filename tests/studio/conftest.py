"""Studio tests run on a real Qt event loop (offscreen) over records the engine
made in a real Docker daemon: one session-wide batch with every kind of trial.
Without Docker they run over the same batch as checked in (tests/data/recorded.db),
which tests/studio/test_recorded.py regenerates."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import textwrap
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_TOML, JsonHandler

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

AGENT = r"""
set -e
say() { printf '%s\n' "$1"; }
case "$PROCTOR_PROMPT" in
  *greet*)
    if [ "$PROCTOR_TURN" = 1 ]; then
      printf 'def greet(name):\n    return "Hi " + name\n' > greet.py
      say '{"type":"fileChange","path":"greet.py","change":"add"}'
    else
      printf 'def greet(name):\n    # Greet someone.\n    return f"Hello, {name}!"\n' > greet.py
      printf 'from greet import greet\n\ndef test_greet():\n    assert greet("Ada") == "Hello, Ada!"\n' > test_greet.py
      head -c 300 /dev/urandom > logo.bin
      say '{"type":"fileChange","path":"greet.py","change":"modify"}'
      say '{"type":"toolCall","name":"edit","input":{"path":"test_greet.py"},"output":"ok"}'
    fi
    say '{"type":"command","command":"python3 -c \"import greet\"","exitCode":0,"output":"ok"}'
    say '{"type":"message","role":"assistant","text":"Turn done. My key is sk-proj-ABCDEFGH12345678abcdefgh."}'
    say '{"type":"usage","input":1500,"output":200,"cacheRead":1200,"cacheWrite":0}'
    ;;
  *add*)
    printf 'def add(a, b):\n    return a - b\n' > calc.py
    say '{"type":"command","command":"cat calc.py","exitCode":0,"output":"def add(a, b): return a - b"}'
    say '{"type":"usage","input":25000,"output":300}'
    ;;
  *sleep*)
    say '{"type":"message","role":"assistant","text":"thinking slowly"}'
    sleep 60
    ;;
esac
say '{"type":"finished","reason":"done"}'
"""

EVAL = """
from pathlib import Path
from engine import evaluation, git, Step

AGENT = {".agent/run.sh": Path("agent.sh")}


@evaluation(workspace=git(init=True), files=AGENT, rules="Write tests.", tags=["smoke"])
def writes_greet(c):
    c.send("Create greet.py with greet(name).")
    c.send("Now make greet say 'Hello, <name>!' and add a test.")
    c.exec("python3 -c 'from greet import greet; assert greet(\\"Ada\\") == \\"Hello, Ada!\\"'").to_succeed()
    c.exec("cat greet.py").stdout.to_contain("def greet")
    c.judge("greet.py is idiomatic and tested", threshold=0.5)
    c.capture("greet.py")


@evaluation(workspace=git(init=True), files=AGENT, tags=["math"])
def adds_numbers(c):
    c.send("Create calc.py with add(a, b).")
    c.exec("python3 -c 'from calc import add; assert add(2, 3) == 5, add(2, 3)'").to_succeed()
    c.exec("echo token=ghp_16C7e42F292c6912E7710c838347Ae178B4a").stdout.to_contain("token")


@evaluation(files=AGENT, setup=["echo preparing", "exit 3"])
def needs_a_lockfile(c):
    c.send("Install the locked requirements.")


@evaluation(files=AGENT, timeout="3s")
def sleeps(c):
    c.send("sleep on it")
    c.exec("true").to_succeed()
"""


class _Judge(JsonHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps({"id": "j1", "model": "judge-stand-in", "usage": {"prompt_tokens": 42},
                           "choices": [{"message": {"role": "assistant",
                                                    "content": '{"score": 0.9, "reasoning": "Clear and tested."}'}}]}).encode()
        self.reply(data)


@dataclass
class Recorded:
    store_path: Path
    batch_id: str
    trials: dict[str, str]  # case id -> trial id
    suite: Path | None
    # The batch as Docker made it now, compacted before any test opened it; None when the
    # tests run over the checked-in batch.
    made_now: Path | None = None


CHECKED_IN = Path(__file__).resolve().parents[1] / "data" / "recorded.db"


@pytest.fixture(scope="session")
def recorded(request, tmp_path_factory) -> Recorded:
    """The studio's batch, made now in a real Docker daemon; without one, or with
    PROCTOR_RECORDED=checked-in, a copy of the same batch as checked in."""
    folder = tmp_path_factory.mktemp("studio-suite")
    if os.environ.get("PROCTOR_RECORDED") != "checked-in":
        try:
            return _record_batch(request.getfixturevalue("docker_client"), folder)
        except pytest.skip.Exception:
            pass  # no Docker here (a Docker test skips): the checked-in batch
    return _checked_in(folder)


def compact(store_path: Path, target: Path) -> Path:
    """A copy of a closed store as small as SQLite makes it, in one file (no -wal)."""
    target.unlink(missing_ok=True)
    with sqlite3.connect(store_path) as conn:
        conn.execute("PRAGMA page_size=1024")  # a third smaller than 4,096 for this little data
        conn.execute("VACUUM INTO ?", (str(target),))
    conn.close()
    with sqlite3.connect(target) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    return target


def _checked_in(folder: Path) -> Recorded:
    """The checked-in batch, copied: opening a store may write to it."""
    from engine.store import Store

    assert CHECKED_IN.is_file(), (f"{CHECKED_IN} is missing: with Docker, run "
                                  "PROCTOR_REGENERATE=1 pytest tests/studio/test_recorded.py")
    store_path = shutil.copyfile(CHECKED_IN, folder / "proctor.db")
    store = Store(store_path)
    try:
        [summary] = store.list_batches()
    finally:
        store.close()
    trials = {run.case_id: run.trials[0].id for run in summary.runs}
    return Recorded(store_path, summary.batch_id, trials, None)


def _record_batch(docker_client, folder: Path) -> Recorded:
    """One real batch: pass (2 turns, judge, binary file), fail, infra_error, timeout."""
    from engine.batch import BatchPlan, Engine
    from engine.config import load_config
    from engine.spec import load_cases
    from engine.store import Store

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (folder / "agent.sh").write_text(AGENT)
    (folder / "suite.eval.py").write_text(textwrap.dedent(EVAL))
    (folder / "proctor.toml").write_text(DEFAULT_TOML + textwrap.dedent(f"""
        [judge]
        base_url = "http://127.0.0.1:{server.server_address[1]}/v1"
        model = "judge-stand-in"
    """))
    store_path = folder / "proctor.db"
    store = Store(store_path)
    try:
        config = load_config(folder / "proctor.toml")
        plan = BatchPlan(cases=load_cases([folder / "suite.eval.py"]), variants=config.variants,
                         config=config, trigger="api")
        engine = Engine(store, docker_client)
        summary = engine.run(plan)
    finally:
        store.close()
        server.shutdown()
    trials = {run.case_id: run.trials[0].id for run in summary.runs}
    return Recorded(store_path, summary.batch_id, trials, folder / "suite.eval.py",
                    made_now=compact(store_path, folder / "made-now.db"))


@pytest.fixture
def records(recorded):
    """The recorded trials as TrialRecords, by case id."""
    from engine.store import Store

    store = Store(recorded.store_path)
    try:
        yield {case: store.get_trial(trial_id) for case, trial_id in recorded.trials.items()}
    finally:
        store.close()


@pytest.fixture
def make_window(qtbot, tmp_path):
    """`make_window(store_path)`: a main window over that store, closed after the test."""
    from PySide6.QtCore import QSettings, Qt

    from engine.store import Store
    from studio.app import MainWindow

    made = []

    def make(store_path):
        store = Store(store_path)
        window = MainWindow(store, QSettings(str(tmp_path / "studio.ini"), QSettings.Format.IniFormat),
                            watch_docker=False)
        qtbot.addWidget(window)
        window.show()
        # A Ctrl+key or Ctrl-click in an earlier test can leave Qt's offscreen keyboard holding
        # Ctrl, and a click would then add to the selection: let go of it, as a hand would.
        qtbot.keyRelease(window, Qt.Key.Key_Control)
        made.append(window)
        return window

    yield make
    for window in made:
        window.close()
        window.store.close()


@pytest.fixture
def window(make_window, recorded, qtbot):
    """The main window over a copy of the recorded batch, at 1,400 x 860."""
    w = make_window(recorded.store_path)
    w.resize(1400, 860)
    qtbot.waitExposed(w)
    return w
