"""Diffs that cost what changed, with a real Docker daemon: on a local daemon the snapshot
and each turn's tree are read from the container's file system as the host sees it, not
through the archive; a change whose mtime and size the agent forged back still shows; what
the host reads equals what the archive read gives, links included, never followed."""

from __future__ import annotations

from engine.phases.diff import tree_diff
from engine.sandbox import layer
from engine.sandbox.container import Sandbox

HEADER = "from pathlib import Path\nfrom engine import evaluation, git\n"
AGENT_FILES = 'files={".agent/run.sh": Path("agent.sh")}'

# Each turn rewrites a file with other bytes of the same size and sets its mtime back to what
# it was (as `touch -d` to the snapshot's time would), then says it is done.
FORGER = r"""
forge() { m=$(stat -c %y "$1"); printf "$2" > "$1"; touch -d "$m" "$1"; }
case "$PROCTOR_TURN" in
  1) forge a.txt 'BBBB\n' ;;
  2) forge sub/b.txt 'DDDD\n'; forge a.txt 'EEEE\n' ;;
esac
echo '{"type":"finished","reason":"done"}'
"""


def test_forged_mtimes_do_not_hide_a_change_and_no_turn_reads_the_archive(
        suite, run_eval, tmp_path, monkeypatch):
    folder = tmp_path / "ws"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("AAAA\n")
    (folder / "sub" / "b.txt").write_text("CCCC\n")
    for n in range(200):
        (folder / "sub" / f"f{n:03}.py").write_text(f"x = {n}\n")
    archive_reads: list[str] = []
    read_tree = Sandbox.read_tree
    monkeypatch.setattr(Sandbox, "read_tree",
                        lambda self, *a, **k: archive_reads.append("tree") or read_tree(self, *a, **k))
    path = suite(HEADER + f"""
@evaluation(workspace={str(folder)!r}, {AGENT_FILES})
def forges(c):
    first = c.send("one")
    second = c.send("two")
    assert first.files_changed == ["a.txt"], first.files_changed
    assert second.files_changed == ["a.txt", "sub/b.txt"], second.files_changed
""", files={"agent.sh": FORGER})
    summary, _, records = run_eval(path)
    [record] = records.values()
    assert record.outcome == "pass", record.failure
    first, second = record.turns
    assert "-AAAA" in first.diff and "+BBBB" in first.diff
    assert "-BBBB" in second.diff and "+EEEE" in second.diff and "+DDDD" in second.diff
    assert "-AAAA" in second.cumulative_diff and "-CCCC" in second.cumulative_diff
    assert archive_reads == []  # snapshot and turns read from the host's side of the layer


SCRIPT = r"""
mkdir -p sub/deep .git __pycache__ sub/__pycache__ && cd /workspace
printf 'one\n' > a.txt; printf 'two\n' > sub/deep/b.txt; : > empty.txt
head -c 2000000 /dev/zero | tr '\0' 'x' > big.txt
printf 'bin\0ary' > bin.dat; echo ref > .git/HEAD; echo c > sub/__pycache__/m.pyc
ln -s /etc/shadow shadow; ln -s / root; ln -s a.txt a-link; mkfifo pipe
"""

TURN = r"""
cd /workspace
m=$(stat -c %y a.txt); printf 'ONE\n' > a.txt; touch -d "$m" a.txt
rm sub/deep/b.txt; printf 'new\n' > c.txt; touch empty.txt
printf 'y' | dd of=big.txt bs=1 seek=10 conv=notrunc 2>/dev/null
rm root && ln -s /etc root; rm -r sub/deep && ln -s /etc sub/deep
"""


def test_the_host_read_equals_the_archive_read_and_follows_no_link(docker_client, bare_container):
    box = Sandbox(docker_client, bare_container("mkdir -p /workspace && cd /workspace && " + SCRIPT))
    try:
        snapshot = layer.snapshot(box)
        assert snapshot.layer is not None, "the local daemon's layer should be read from the host"
        archived = box.read_tree()
        assert snapshot.entries == archived.entries and snapshot.held == archived.held
        assert snapshot["shadow"] == b"-> /etc/shadow" and snapshot["root"] == b"-> /"
        assert ".git/HEAD" not in snapshot and "big.txt" in snapshot.sized
        box.exec(TURN, timeout=30)
        after = layer.turn_tree(box, snapshot)
        assert after.layer is not None
        again = box.read_tree()
        assert after.entries == again.entries and after.held == again.held
        diff, changed = tree_diff(snapshot, after)
        assert changed == ["a.txt", "big.txt", "c.txt", "root", "sub/deep", "sub/deep/b.txt"]
        assert "-one" in diff and "+ONE" in diff and "-> /etc" in diff
        assert not any(p.startswith("sub/deep/") and p != "sub/deep/b.txt" for p in after)
    finally:
        box.destroy()


def test_a_same_size_rewrite_with_its_mtime_put_back_is_seen(docker_client, bare_container):
    box = Sandbox(docker_client, bare_container("mkdir -p /workspace && cd /workspace && printf 'AAAA' > a.txt"))
    try:
        snapshot = layer.snapshot(box)
        assert snapshot.layer is not None
        box.exec("cd /workspace && m=$(stat -c %y a.txt) && printf 'BBBB' > a.txt && touch -d \"$m\" a.txt", timeout=30)
        after = layer.turn_tree(box, snapshot)
        assert after["a.txt"] == b"BBBB" and tree_diff(snapshot, after)[1] == ["a.txt"]
    finally:
        box.destroy()


class _Elsewhere:
    """The same daemon, as docker-py names one reached over ssh://."""

    base_url = "http+docker://ssh"

    def __init__(self, api):
        self._api = api

    def __getattr__(self, name):
        return getattr(self._api, name)


def test_a_daemon_on_another_host_is_read_through_the_archive(docker_client, bare_container):
    box = Sandbox(docker_client, bare_container("mkdir -p /workspace && printf 'one' > /workspace/a.txt"))
    box.api = _Elsewhere(box.api)
    try:
        snapshot = layer.snapshot(box)
        assert snapshot.layer is None and snapshot["a.txt"] == b"one"
        box.exec("printf 'two' > /workspace/a.txt", timeout=30)
        after = layer.turn_tree(box, snapshot)
        assert after.layer is None and tree_diff(snapshot, after)[1] == ["a.txt"]
    finally:
        box.destroy()
