"""Host-side writes into a sandbox (engine/sandbox/hostfs.py), with a real Docker daemon: a
tree the agent has planted links, FIFOs and hard links in never makes the engine write
outside the container or hang; files, folders, the placed workspace and the agent's user
come out with the same owners, modes and contents as through the daemon's archive and exec."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from docker.errors import NotFound

from engine.phases import workspace as workspace_phase
from engine.phases.git_source import GitSources
from engine.sandbox import host_user, hostfs, layer, placement
from engine.sandbox.container import AgentUser, Sandbox, SandboxGone
from engine.spec import git

AGENT = AgentUser("agent", 1000, 1000, "/home/agent")


@pytest.fixture
def fresh_container(docker_client):
    """`fresh_container(script)`: a new plain container (no network) each call, the script
    run in it as root; all removed after the test."""
    from engine.sandbox.cleanup import labels, owner_id

    api, made = docker_client.api, []

    def run(script: str) -> str:
        made.append(api.create_container("proctor-test-base:bookworm", command=["sleep", "infinity"],
                                         labels=labels("b_hostfs", "t_hostfs", owner_id()),
                                         host_config=api.create_host_config(network_mode="none"))["Id"])
        api.start(made[-1])
        api.exec_start(api.exec_create(made[-1], ["sh", "-c", script])["Id"])
        return made[-1]

    yield run
    for container in made:
        with contextlib.suppress(NotFound):  # the test destroyed it
            api.remove_container(container, force=True)


def _sh(box: Sandbox, script: str) -> str:
    out = box.exec(script, timeout=30, workdir="/")
    assert out.exit_code == 0, out.output
    return out.stdout


def _archive_calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    put = Sandbox.put_archive
    monkeypatch.setattr(Sandbox, "put_archive", lambda self, path, data: calls.append(path) or put(self, path, data))
    return calls


def _put(box: Sandbox, files: dict[str, bytes], **kw) -> None:
    """put_files in a thread: a write that opens a planted FIFO would block forever."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.put_files(files, **kw)
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the write hung on something the agent planted"
    if errors:
        raise errors[0]


def test_planted_links_fifos_and_hard_links_are_replaced_never_written_through(
        docker_client, fresh_container, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("host\n")
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    box = Sandbox(docker_client, fresh_container(
        "mkdir -p /workspace/deep && cd /workspace && echo kept > kept.txt && "
        f"ln -s {victim} out.txt && ln -s {tmp_path} deep/tree && mkfifo pipe.txt && "
        "ln kept.txt hard.txt && mkdir -p /tmp && "
        f"ln -s {host_dir} /tmp/.proctor"))
    assert hostfs.root(box) is not None, "a local overlay2 daemon: the host route applies"
    box.agent = AGENT
    archive = _archive_calls(monkeypatch)

    _put(box, {"out.txt": b"agent's\n", "hard.txt": b"new\n"})
    assert victim.read_text() == "host\n"
    _put(box, {"pipe.txt": b"prompt\n"})
    assert archive == []  # written from the host
    assert _sh(box, "cd /workspace && stat -c '%n %F %u %s' out.txt pipe.txt hard.txt && cat kept.txt") \
        .splitlines() == ["out.txt regular file 1000 8", "pipe.txt regular file 1000 7",
                          "hard.txt regular file 1000 4", "kept"]

    # A link on the way: the host never follows it; the daemon resolves it inside the container.
    with contextlib.suppress(SandboxGone):  # the daemon refuses a link to a folder it lacks
        _put(box, {"tmp/.proctor/prompt-1.txt": b"hello\n"}, base="/")
    with contextlib.suppress(SandboxGone):
        _put(box, {"deep/tree/victim.txt": b"agent's\n"})
    assert archive == ["/", "/"]
    assert victim.read_text() == "host\n" and list(host_dir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostdir", "victim.txt"]


def test_a_link_swapped_in_while_writing_is_not_followed(docker_client, fresh_container, tmp_path):
    """The agent keeps swapping a folder for a link to the host: each write lands in the
    container or falls back, never on the host."""
    target = tmp_path / "target"
    target.mkdir()
    box = Sandbox(docker_client, fresh_container(
        "mkdir -p /workspace/d && cd /workspace && "
        f"(while true; do rm -rf d; ln -s {target} d; sleep 0.001; rm -f d; mkdir d; done) "
        ">/dev/null 2>&1 & sleep 0.2"))
    for n in range(100):
        try:
            _put(box, {f"d/f{n}.txt": b"x"})
        except Exception:  # noqa: BLE001  (the daemon's own race with the loop)
            pass
    assert list(target.iterdir()) == []


STAT = "stat -c '%n %a %u %g %F %s' "


def _files_both_ways(docker_client, fresh_container, monkeypatch, host: bool) -> str:
    monkeypatch.setenv(hostfs.ENV_SWITCH, "1" if host else "0")
    box = Sandbox(docker_client, fresh_container(
        "mkdir -p /workspace/old && chmod 700 /workspace/old && echo x > /workspace/old/f.txt"))
    assert (hostfs.root(box) is not None) == host
    box.put_files({"top.txt": b"top\n", "old/f.txt": b"again\n"})
    box.agent = AGENT
    box.put_files({"a/b/c.txt": b"c\n", "old/g.txt": b""}, mode=0o755)
    box.put_files({"tmp/.proctor/x/y.txt": b"y\n"}, base="/")
    return _sh(box, STAT + "/workspace /workspace/top.txt /workspace/old /workspace/old/f.txt "
               "/workspace/old/g.txt /workspace/a /workspace/a/b /workspace/a/b/c.txt /tmp "
               "/tmp/.proctor /tmp/.proctor/x /tmp/.proctor/x/y.txt && cat /workspace/old/f.txt")


def test_files_have_the_owners_and_modes_of_the_archive_route(docker_client, fresh_container, monkeypatch):
    archived = _files_both_ways(docker_client, fresh_container, monkeypatch, host=False)
    hosted = _files_both_ways(docker_client, fresh_container, monkeypatch, host=True)
    assert hosted == archived
    assert "/workspace/a/b/c.txt 755 1000 1000 regular file 2" in hosted


@pytest.fixture
def repo(tmp_path) -> Path:
    folder = tmp_path / "repo"
    (folder / "pkg" / "sub").mkdir(parents=True)
    (folder / "pkg" / "mod.py").write_text("x = 1\n")
    (folder / "pkg" / "sub" / "run.sh").write_text("echo run\n")
    (folder / "pkg" / "sub" / "run.sh").chmod(0o755)
    (folder / "README").write_text("readme\n")
    os.symlink("pkg/mod.py", folder / "link.py")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, env=env)
    return folder


FIND = "cd / && find workspace -printf '%p %m %U %G %y %s %T@ %l\\n' | sort"
# Written at placement time on both routes (a folder gains .git, git writes its index).
NOW = ("workspace", "workspace/.git", "workspace/.git/index")


def _listing(box: Sandbox) -> list[str]:
    lines = _sh(box, FIND).splitlines()
    return [" ".join(f[:6] + ["now"] + f[7:]) if (f := line.split(" "))[0] in NOW else line
            for line in lines]


def _placed(docker_client, fresh_container, monkeypatch, spec, host: bool) -> tuple[list[str], object]:
    monkeypatch.setenv(hostfs.ENV_SWITCH, "1" if host else "0")
    box = Sandbox(docker_client, fresh_container("true"))
    sources = GitSources()
    try:
        workspace_phase.place(box, spec, sources)
        snapshot = layer.snapshot(box)
        return _listing(box), snapshot
    finally:
        sources.close()


@pytest.mark.parametrize("init", [False, True])
def test_a_git_workspace_placed_from_the_host_equals_the_archive_one(
        docker_client, fresh_container, monkeypatch, repo, init):
    archived, snap_a = _placed(docker_client, fresh_container, monkeypatch, git(str(repo), init=init), False)
    archive = _archive_calls(monkeypatch)
    hosted, snap_h = _placed(docker_client, fresh_container, monkeypatch, git(str(repo), init=init), True)
    assert archive == []
    assert hosted == archived
    assert snap_h.entries == snap_a.entries and snap_h.held == snap_a.held
    assert snap_h["pkg/mod.py"] == b"x = 1\n"


def test_a_folder_workspace_placed_from_the_host_equals_the_archive_one(
        docker_client, fresh_container, monkeypatch, repo):
    archived, snap_a = _placed(docker_client, fresh_container, monkeypatch, str(repo), False)
    archive = _archive_calls(monkeypatch)
    hosted, snap_h = _placed(docker_client, fresh_container, monkeypatch, str(repo), True)
    assert archive == []
    assert hosted == archived
    assert snap_h.entries == snap_a.entries



def test_the_snapshot_takes_the_placed_hashes_and_still_sees_every_change(
        docker_client, fresh_container, repo):
    """What setup changed after placement (same size, mtime forged back) is read again; the
    rest keeps placement's hashes, with no copy of its content, read from the host's tar
    when a diff shows it."""
    box = Sandbox(docker_client, fresh_container("true"))
    sources = GitSources()
    try:
        workspace_phase.place(box, git(str(repo)), sources)
        placed = placement.placed(box)
        assert placed is not None
        # Files placed in the last RACY_NS before placement ended are read again (racily
        # clean); this placement takes a few ms, so it is made to have ended a second later.
        placed.done_ns += 10**9
        _sh(box, "cd /workspace && m=$(stat -c %y pkg/mod.py) && printf 'x = 2\\n' > pkg/mod.py && "
                 "touch -d \"$m\" pkg/mod.py && sleep 0.1")
        snapshot = layer.snapshot(box)
        assert len(snapshot.blobs) == 1  # only what setup changed was copied to the tree folder
        archived = box.read_tree()
        assert snapshot.entries == archived.entries and snapshot.held == archived.held
        assert snapshot["pkg/mod.py"] == b"x = 2\n" and snapshot["README"] == b"readme\n"
        _sh(box, "cd /workspace && echo more >> README")
        tree = layer.turn_tree(box, snapshot)
        assert tree.changed(snapshot) == ["README"]
        assert snapshot["README"] == b"readme\n" and tree["README"] == b"readme\nmore\n"
    finally:
        box.destroy()
        sources.close()


def test_giving_the_workspace_back_changes_links_never_what_they_point_to(
        docker_client, fresh_container, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("host\n")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "f.txt").write_text("host\n")
    box = Sandbox(docker_client, fresh_container(
        f"mkdir -p /workspace/sub && ln -s {victim} /workspace/evil && ln -s {tmp_path} /workspace/sub/d && "
        "echo x > /workspace/sub/mine.txt && mkfifo /workspace/pipe"))
    box.agent, box.workspace_dirty = AGENT, True
    execs: list[str] = []
    run = Sandbox.exec
    monkeypatch.setattr(Sandbox, "exec", lambda self, cmd, **kw: execs.append(cmd) or run(self, cmd, **kw))
    box.give_back_workspace()
    assert execs == []  # from the host
    assert [p.stat().st_uid for p in (victim, tmp_path / "inner", tmp_path / "inner" / "f.txt")] == [0, 0, 0]
    assert _sh(box, "cd /workspace && stat -c '%n %u' . evil sub sub/d sub/mine.txt pipe").split("\n")[:6] == [
        ". 1000", "evil 1000", "sub 1000", "sub/d 1000", "sub/mine.txt 1000", "pipe 1000"]


HAND_OVER_VIEW = ("cat /etc/passwd /etc/group; stat -c '%n %a %u %g' /etc/passwd /etc/group /home /home/* "
                  "/workspace /workspace/f.txt; cat /root/.gitconfig; stat -c '%n %a %u %g %s' /root/.gitconfig")


def turn_tree_reading(box, snapshot, monkeypatch) -> tuple:
    """The turn's tree, and the files it read (each file's content is read only when its
    host-side stat changed)."""
    read: list[str] = []
    add = layer._add_file
    monkeypatch.setattr(layer, "_add_file", lambda tree, prev, rel, *a: read.append(rel) or add(tree, prev, rel, *a))
    return layer.turn_tree(box, snapshot), read


@pytest.mark.parametrize("setup,from_host", [
    ("true", True),  # no agent user: one is added
    ("echo 'agent:x:1001:1002::/nonexistent:/bin/sh' >> /etc/passwd", True),  # the image's own
    ("printf '[user]\\n\\tname = x\\n' > /root/.gitconfig", False),  # git adds to it: the script
])
def test_the_hand_over_from_the_host_equals_the_script(docker_client, fresh_container, monkeypatch,
                                                       setup, from_host):
    seen, execs = [], []
    run = Sandbox.exec
    monkeypatch.setattr(Sandbox, "exec", lambda self, cmd, **kw: execs.append(cmd) or run(self, cmd, **kw))
    for host in (False, True):
        monkeypatch.setenv(hostfs.ENV_SWITCH, "1" if host else "0")
        box = Sandbox(docker_client, fresh_container(f"mkdir -p /workspace && echo x > /workspace/f.txt && {setup}"))
        execs.clear()
        shown = box.hand_over()
        assert len(execs) == (0 if host and from_host else 1)
        seen.append((shown, box.agent, _sh(box, HAND_OVER_VIEW)))
    assert seen[1] == seen[0]


def test_the_first_turn_after_the_hand_over_reads_only_what_changed(
        docker_client, fresh_container, repo, monkeypatch):
    """The hand-over's chown gives every file a new ctime: the first turn's tree takes the
    chown's own stats instead of reading the whole workspace again, and still sees a change
    made after it with the same size and a forged mtime."""
    box = Sandbox(docker_client, fresh_container("true"))
    sources = GitSources()
    try:
        workspace_phase.place(box, git(str(repo)), sources)
        time.sleep(layer.RACY_NS / 1e9)  # as setup would: the snapshot does not find them racy
        snapshot = layer.snapshot(box)
        box.hand_over()
        seen, ended = host_user._REKEYED[box]
        assert set(seen) == {"README", "pkg/mod.py", "pkg/sub/run.sh"}
        host_user._REKEYED[box] = (seen, ended + 10**9)  # as if the chown had ended a second later
        _sh(box, "cd /workspace && m=$(stat -c %y README) && printf 'README\\n' > README && touch -d \"$m\" README")
        tree, read = turn_tree_reading(box, snapshot, monkeypatch)
        assert tree.changed(snapshot) == ["README"] and read == ["README"]
        assert snapshot["README"] == b"readme\n" and tree["README"] == b"README\n"
    finally:
        box.destroy()
        sources.close()


def test_the_empty_workspace_placed_from_the_host_equals_the_archive_one(
        docker_client, fresh_container, monkeypatch):
    seen = []
    archive = _archive_calls(monkeypatch)
    for host in (False, True):
        monkeypatch.setenv(hostfs.ENV_SWITCH, "1" if host else "0")
        box = Sandbox(docker_client, fresh_container("true"))
        workspace_phase.place(box, None)
        seen.append(_sh(box, FIND))
    assert archive == ["/"]  # the archive route's only
    assert seen[1] == seen[0] == "workspace 755 0 0 d 4096 0.0000000000 \n"


@pytest.mark.parametrize("host", [False, True])
def test_a_workspace_placed_from_the_host_still_counts_against_the_disk_limit(
        suite, run_eval, tmp_path, monkeypatch, host):
    monkeypatch.setenv(hostfs.ENV_SWITCH, "1" if host else "0")
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "blob.bin").write_bytes(os.urandom(3 << 20))
    path = suite(f"""from engine import evaluation

@evaluation(workspace={str(folder)!r}, disk="2m")
def too_big(c):
    c.exec("true")
""")
    _, _, records = run_eval(path)
    [record] = records.values()
    assert (record.outcome, record.failure.kind, record.failure.reason) == (
        "fail", "limit", "disk limit 2 MiB reached"), record.failure  # as through the archive


def test_giving_the_workspace_back_leaves_the_agents_own_files_unchanged(docker_client, fresh_container):
    """Only what root made is chowned: the agent's files keep their ctime, so the next turn's
    tree does not read them again; a setgid bit goes as `chown -R` drops it."""
    box = Sandbox(docker_client, fresh_container(
        "mkdir -p /workspace/a && echo x > /workspace/a/mine.txt && echo s > /workspace/sgid && "
        "chown -R 1000:1000 /workspace && chmod 2755 /workspace/sgid"))
    box.agent = AGENT
    before = _sh(box, "stat -c '%n %u %Z.%z' /workspace/a/mine.txt /workspace/a /workspace")
    _sh(box, "sleep 0.05; echo root > /workspace/a/roots.txt")
    box.give_back_workspace()
    assert _sh(box, "stat -c '%n %u %Z.%z' /workspace/a/mine.txt /workspace") == \
        "\n".join(before.splitlines()[::2]) + "\n"
    assert _sh(box, "stat -c '%n %u %a' /workspace/a/roots.txt /workspace/sgid") == \
        "/workspace/a/roots.txt 1000 644\n/workspace/sgid 1000 755\n"


def test_a_big_hand_over_waits_out_the_clock_tick_so_the_first_turn_reads_only_the_change(
        docker_client, fresh_container, tmp_path, monkeypatch):
    folder = tmp_path / "ws"
    folder.mkdir()
    for n in range(host_user.SETTLE_FILES + 100):
        (folder / f"f{n:04}.py").write_text(f"x = {n}\n")
    box = Sandbox(docker_client, fresh_container("true"))
    try:
        workspace_phase.place(box, str(folder))
        time.sleep(layer.RACY_NS / 1e9)
        snapshot = layer.snapshot(box)
        box.hand_over()
        _sh(box, "cd /workspace && m=$(stat -c %y f0007.py) && echo 'x = 8' > f0007.py && touch -d \"$m\" f0007.py")
        tree, read = turn_tree_reading(box, snapshot, monkeypatch)
        assert tree.changed(snapshot) == ["f0007.py"] and read == ["f0007.py"]
    finally:
        box.destroy()
