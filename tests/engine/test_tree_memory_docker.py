"""What reading a workspace costs the engine, with a real Docker daemon: a tree holds names
and hashes in memory and its contents in a per-trial folder on the host's disk, so a big
workspace costs a few MB whatever it holds, its changed files still diff, identical
contents are stored once, and the folder goes at teardown or in the sweep after a kill."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
HEADER = "import glob, os, sqlite3, tempfile\nfrom pathlib import Path\nfrom engine import evaluation, git\n"
AGENT_FILES = 'files={".agent/run.sh": Path("agent.sh")}'
FINISHED = """echo '{"type":"finished","reason":"done"}'\n"""


def this_process_tree_folders() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"proctor-tree-{os.getpid()}-*"))


@pytest.fixture
def workspace_container(bare_container):
    """A plain container whose /workspace the script fills (see `bare_container`)."""
    return lambda script: bare_container(f"mkdir -p /workspace && cd /workspace && {script}")


# A snapshot of 150 text files of 1 MB (150 MB) and a 6 MB binary, a turn that changes the last
# file, copies one and changes a byte of the binary, the tree read again and diffed: traced
# Python memory, and what the diff shows.
READ_AND_DIFF = """
import json, os, sys, tracemalloc
import docker
from engine.phases.diff import tree_diff
from engine.sandbox.container import Sandbox
client = docker.from_env()
box = Sandbox(client, sys.argv[1])
tracemalloc.start()
snapshot = box.read_tree()
client.api.exec_start(client.api.exec_create(box.id, ["sh", "-c",
    "cd /workspace && echo 'a line the agent added' >> zz.txt && cp f001.txt copy.txt"
    " && printf X | dd of=big.bin bs=1 seek=100 conv=notrunc"])["Id"])
after = box.read_tree()
held = tracemalloc.get_traced_memory()[0]
diff, files = tree_diff(snapshot, after)
peak = tracemalloc.get_traced_memory()[1]
folder = getattr(box, "tree_folder", None)
blobs = len(after.blobs) if folder else None
mode = oct(os.stat(folder).st_mode & 0o777) if folder else None
first = snapshot.get("f001.txt", b"")[:40].decode()
big = after.get("big.bin", b"").decode()
box.destroy()
print(json.dumps({"held_mb": held / 1e6, "peak_mb": peak / 1e6, "files": files, "diff": diff[:3000],
                  "folder": str(folder), "blobs": blobs, "mode": mode, "first": first, "big": big,
                  "gone": not os.path.exists(folder) if folder else None}))
"""


def test_a_150_mb_tree_costs_a_few_mb_and_its_changed_files_still_diff(workspace_container):
    made = workspace_container(
        "for i in $(seq -w 1 150); do yes \"file $i: an ordinary line of source text\" | head -c 1000000"
        " > f$i.txt; done && printf 'first\\nsecond\\n' > zz.txt && head -c 6000000 /dev/urandom > big.bin")
    child = subprocess.run([sys.executable, "-c", READ_AND_DIFF, made], capture_output=True, text=True,
                           cwd=ROOT, timeout=240)
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout)
    # Before: 64 MiB of content kept in memory per tree, two trees (held 134 MB, peak 138 MB).
    assert result["peak_mb"] < 12 and result["held_mb"] < 2, result
    # zz.txt comes last in the tar, past 64 MiB: before, its diff was two `<not kept: …>` marks.
    assert result["files"] == ["big.bin", "copy.txt", "zz.txt"], result["files"]
    assert " second\n+a line the agent added\n" in result["diff"], result["diff"]
    # A file over 5 MB shows by its mark; one byte changed in it is seen by its hash (before: not at all).
    assert result["big"] == "<large file: 6000000 bytes>"
    assert "diff of big.bin too large (6,000,000 bytes)" in result["diff"], result["diff"]
    assert result["first"] == "file 001: an ordinary line of source tex"
    # One content stored per sha256: 150 files, zz.txt before and after; copy.txt is f001.txt's.
    assert result["blobs"] == 152 and result["mode"] == "0o700", result
    assert Path(result["folder"]).parent == Path(tempfile.gettempdir())
    assert result["gone"], "destroying the sandbox removes its tree folder"


REWRITES = """
case "$PROCTOR_TURN" in
  1) head -c 300000 /dev/urandom | od -An -tx1 > one.txt ;;
  2) rm one.txt; head -c 300000 /dev/urandom | od -An -tx1 > two.txt ;;
  3) rm two.txt ;;
esac
""" + FINISHED


def test_a_trials_tree_folder_keeps_only_live_trees_and_goes_at_teardown(suite, run_eval):
    # The body runs in the engine's process, so it sees the trial's folder on the host.
    path = suite(HEADER + f"""
def blobs():
    [folder] = glob.glob(os.path.join(tempfile.gettempdir(), f"proctor-tree-{{os.getpid()}}-*"))
    db = sqlite3.connect(f"file:{{folder}}/contents.db?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT hex(digest), length(data) FROM content"))
    finally:
        db.close()

@evaluation(workspace=git(init=True), {AGENT_FILES})
def rewrites(c):
    start = blobs()
    c.send("write one")
    assert len(blobs()) == len(start) + 1
    c.send("replace it")  # one.txt is in neither the snapshot nor the last tree: its blob goes
    assert len(blobs()) == len(start) + 1 and max(blobs().values()) > 800_000
    turn = c.send("undo all")
    assert blobs() == start and turn.files_changed == ["two.txt"]
""", files={"agent.sh": REWRITES})
    before = this_process_tree_folders()
    summary, _, records = run_eval(path)
    [record] = [records[t.id] for run in summary.runs for t in run.trials]
    assert record.outcome == "pass", (record.failure, [v.evidence for v in record.validations])
    assert this_process_tree_folders() == before == []
    # The workspace ends as it began: no turn keeps a stale cumulative diff (before, turn 2's
    # stayed, showing two.txt added).
    assert [t.cumulative_diff for t in record.turns] == ["", "", ""]
    assert [bool(t.diff) for t in record.turns] == [True, True, True]


# An engine that read a tree and then was SIGKILLed: its tree folder stays behind.
KILLED_ENGINE = """
import sys, time
import docker
from engine.sandbox.container import Sandbox
box = Sandbox(docker.from_env(), sys.argv[1])
box.read_tree()
print(box.tree_folder, flush=True)
time.sleep(600)
"""


def test_the_sweep_removes_the_tree_folder_of_a_killed_engine(docker_client, workspace_container):
    from engine.sandbox.cleanup import sweep

    made = workspace_container("echo kept > a.txt")
    engine = subprocess.Popen([sys.executable, "-c", KILLED_ENGINE, made], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        left = Path(engine.stdout.readline().strip())
        assert left.name.startswith(f"proctor-tree-{engine.pid}-"), engine.stderr.read()[-2000:]
        assert (left / "contents.db").is_file() and stat.S_IMODE(left.stat().st_mode) == 0o700
        engine.send_signal(signal.SIGKILL)
        engine.wait(10)
        swept = sweep(docker_client)
        assert not left.exists() and swept.tree_folders >= 1
        assert "tree folders" in str(swept)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        engine.stdout.close()
        engine.stderr.close()


# --- the tree itself, without Docker ------------------------------------------------------------


def test_a_tree_read_again_shares_what_did_not_change_and_releases_what_no_tree_uses(tmp_path):
    from engine.phases.diff import tree_diff
    from engine.sandbox.tree import Blobs, Tree

    blobs = Blobs(tmp_path)

    def read(files: dict[str, bytes], base: Tree | None = None) -> Tree:
        tree = Tree(blobs, base)
        with blobs.batch():
            for path, data in files.items():
                digest = hashlib.sha256(data).digest()
                kept, new = blobs.put(digest, data, write=True)
                tree.add(path, len(data), digest)
                if new:
                    tree.wrote.add(digest)
        return tree

    files = {f"src/m{i:04}.py": f"line {i}\n".encode() for i in range(1000)}
    snapshot = read(files)
    first = read({**files, "new.txt": b"turn one\n"}, base=snapshot)
    del files["src/m0500.py"]  # removed in turn two; the rest stays as it was
    second = read({**files, "new.txt": b"turn two\n"}, base=first)
    assert len(blobs) == 1002
    blobs.release(first, second, snapshot)
    # "turn one" is in no live tree: gone; m0500.py stays, the snapshot has it.
    assert len(blobs) == 1001 and not blobs.has(hashlib.sha256(b"turn one\n").digest())
    shared = [p for p in second if p != "new.txt"]
    assert all(next(k for k in first.entries if k == p) is p for p in shared[::97])
    assert all(second.entries[p] is snapshot.entries[p] for p in shared)
    diff, changed = tree_diff(snapshot, second)
    assert changed == ["new.txt", "src/m0500.py"]
    assert "+turn two\n" in diff and "-line 500\n" in diff
    blobs.remove()
    assert not tmp_path.exists()
