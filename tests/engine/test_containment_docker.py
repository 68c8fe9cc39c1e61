"""Containment with a real Docker daemon: the sandbox's limits (memory, processes,
disk), the unprivileged agent, the capabilities left to root, the gateway folder
(no way onto the host), its sweep, and reading a hostile tree at a bounded cost."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE

HEADER = "from pathlib import Path\nfrom engine import evaluation, git, Step\n"
AGENT_FILES = 'files={".agent/run.sh": Path("agent.sh")}'
FINISHED = """echo '{"type":"finished","reason":"done"}'\n"""
NOBODY = 65534
# CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID: bits 0, 1, 3, 4, 5, 6, 7.
ROOT_CAPS = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7)


def by_case(summary, records):
    return {run.case_id: records[run.trials[0].id] for run in summary.runs}


# --- limits ---------------------------------------------------------------------------


LIMIT_AGENT = """
case "$PROCTOR_PROMPT" in
  memory) python3 -c 'b = b"x" * (300 << 20)' ;;
  fork) for i in $(seq 100); do sleep 3 & done; wait ;;
  disk) head -c 60m /dev/zero > /var/tmp/fill-1; head -c 60m /dev/zero > /var/tmp/fill-2 ;;
  *) true ;;
esac
""" + FINISHED


@pytest.mark.slow
def test_an_agent_past_a_limit_fails_on_that_limit_and_setup_past_it_is_void(suite, run_eval):
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, memory="128m")
def eats_memory(c):
    c.send("memory")

@evaluation({AGENT_FILES}, pids=64)
def forks(c):
    c.send("fork")

@evaluation({AGENT_FILES}, disk="100m")
def fills_the_disk(c):
    c.send("disk")

@evaluation({AGENT_FILES}, memory="128m", setup=["python3 -c 'b = b\\"x\\" * (300 << 20)'"])
def setup_eats_memory(c):
    c.send("nothing")
""", files={"agent.sh": LIMIT_AGENT})
    records = by_case(*run_eval(path)[::2])
    expected = {"eats_memory": "memory limit 128 MiB reached", "forks": "process limit 64 reached",
                "fills_the_disk": "disk limit 100 MiB reached"}
    for case, reason in expected.items():
        record = records[case]
        kind = record.failure and record.failure.kind
        assert (record.outcome, kind) == ("fail", "limit"), (case, record.failure)
        assert record.failure.reason == reason and record.failure.where == "turn 1", record.failure
        assert [t.status for t in record.turns] == ["aborted"]
    void = records["setup_eats_memory"]
    assert void.outcome == "infra_error" and "memory limit 128 MiB reached" in void.failure.reason
    assert not void.turns


def test_the_sandbox_is_created_with_its_limits_and_disk_is_bounded_or_watched(docker_client):
    from engine.config import Resources
    from engine.sandbox.cleanup import labels, owner_id
    from engine.sandbox.container import ROOT_CAPABILITIES, Sandbox
    from engine.sandbox.watchdog import Watchdog

    resources = Resources(memory=256 << 20, pids=100, cpus=64.0, disk=1 << 30, user="agent")
    box = Sandbox.create(docker_client, BASE_IMAGE, labels("b_limits", "t_limits", owner_id()), resources)
    try:
        host = docker_client.api.inspect_container(box.id)["HostConfig"]
        assert (host["Memory"], host["MemorySwap"], host["PidsLimit"]) == (256 << 20, 256 << 20, 100)
        assert host["NanoCpus"] == docker_client.info()["NCPU"] * 10**9  # 64 CPUs asked, the host's given
        assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == sorted(ROOT_CAPABILITIES)
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert [(u["Name"], u["Hard"]) for u in host["Ulimits"]] == [("fsize", 1 << 30)]
        if box.disk_bounded:
            assert host["StorageOpt"] == {"size": str(1 << 30)}
        else:  # the daemon refuses storage_opt (overlay2 on ext4 here): the watchdog measures instead
            api = docker_client.api
            with pytest.raises(Exception, match="(?i)storage.?opt"):
                api.create_container(BASE_IMAGE, ["true"], labels=labels("b_l", "t_l", owner_id()),
                                     host_config=api.create_host_config(storage_opt={"size": "1G"}))
        watchdog = Watchdog(box, resources, lambda reason: None)
        assert watchdog.local and watchdog.check() is None  # cgroup and layer read on this host
    finally:
        box.destroy()


# --- the agent's user and root's capabilities -----------------------------------------


USER_AGENT = """
if [ "$PROCTOR_TURN" = 1 ]; then
  id -u > uid.txt
  echo "$HOME" > home.txt
  echo home > "$HOME/note" && cat "$HOME/note" > home-ok.txt
  echo tmp > /tmp/note && cat /tmp/note > tmp-ok.txt
  echo edited >> placed.txt && echo edited >> from-setup.txt && mkdir -p made/by && echo x > made/by/agent
  grep -E '^(CapEff|NoNewPrivs)' /proc/self/status > status.txt
  git add -A && git commit -qm "agent" && echo committed > git-ok.txt
else
  echo again >> later.txt && echo again >> sub/deep.txt && echo again >> root-made.txt && echo ok > turn2.txt
fi
""" + FINISHED


@pytest.mark.slow
def test_the_agent_runs_unprivileged_and_owns_its_workspace_and_home(suite, run_eval):
    path = suite(HEADER + f"""
@evaluation(workspace=git(init=True), files={{".agent/run.sh": Path("agent.sh"), "placed.txt": "p\\n"}},
            setup=["echo s > from-setup.txt", "mkdir -p /opt/tool && touch /opt/tool/x"])
def unprivileged(c):
    c.send("one")
    assert c.read_file("uid.txt").strip() not in ("", "0"), c.read_file("uid.txt")
    for name in ("home-ok.txt", "tmp-ok.txt", "git-ok.txt"):
        assert c.read_file(name).strip(), name
    assert c.read_file("placed.txt") == "p\\nedited\\n" and c.read_file("made/by/agent") == "x\\n"
    status = c.read_file("status.txt")
    assert "CapEff:\\t0000000000000000" in status and "NoNewPrivs:\\t1" in status, status
    # Checks stay root, with only the listed capabilities, and git trusts the agent's repository.
    c.exec("id -u").stdout.to_equal("0")
    c.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").stdout.to_equal(
        "CapEff:\\t{ROOT_CAPS:016x}\\nNoNewPrivs:\\t1")
    c.exec("git log -1 --format=%s").stdout.to_equal("agent")
    c.write_file("later.txt", "w\\n")
    c.write_file("sub/deep.txt", "w\\n")
    c.exec("echo r > root-made.txt").to_succeed()
    c.send("two")
    assert c.read_file("turn2.txt") == "ok\\n", "the agent could not edit what the eval wrote between turns"
    assert c.read_file("later.txt") == "w\\nagain\\n" and c.read_file("root-made.txt") == "r\\nagain\\n"

@evaluation({AGENT_FILES}, user="root")
def as_root(c):
    c.send("one")
    assert c.read_file("uid.txt").strip() == "0"
    assert c.read_file("home.txt").strip() == "/root"
""", files={"agent.sh": USER_AGENT})
    records = by_case(*run_eval(path)[::2])
    for case, record in records.items():
        assert record.outcome == "pass", (case, record.failure, record.validations)


def test_setup_steps_can_install_packages_with_the_capabilities_left(suite, run_eval):
    """apt (its partial folders chowned and chmodded for `_apt`, its drop to `_apt`) and
    dpkg still work as root, from a local repository: nothing leaves the sandbox. Without
    any one of CHOWN, DAC_OVERRIDE, FOWNER, SETUID or SETGID a step fails or apt warns."""
    deb = ("mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/share/hello && echo hi > /tmp/pkg/usr/share/hello/hi"
           " && printf 'Package: proctor-hello\\nVersion: 1.0\\nArchitecture: all\\n"
           "Maintainer: P <p@example.test>\\nDescription: test\\n' > /tmp/pkg/DEBIAN/control"
           " && dpkg-deb -b /tmp/pkg /tmp/hello.deb >/dev/null && chmod 644 /tmp/hello.deb")
    local = ("rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && mkdir -p /tmp/repo"
             " && touch /tmp/repo/Packages"
             " && echo 'deb [trusted=yes] file:/tmp/repo ./' > /etc/apt/sources.list.d/local.list"
             " && apt-get update -q")
    path = suite(HEADER + f"""
@evaluation(setup=[{deb!r}, {local!r}, "apt-get install -y -q /tmp/hello.deb"])
def installs(c):
    c.exec("cat /usr/share/hello/hi").stdout.to_equal("hi")
""")
    [record] = by_case(*run_eval(path)[::2]).values()
    assert record.outcome == "pass", (record.failure, record.setup_log)
    for trouble in ("not permitted", "Permission denied", "unsandboxed"):
        assert trouble not in record.setup_log, record.setup_log


# --- the gateway folder -----------------------------------------------------------------


ESCAPE_AGENT = """
cp /usr/bin/id /run/proctor-gateway/id 2>/dev/null && chmod 4755 /run/proctor-gateway/id 2>/dev/null
grep ' /run/proctor-gateway ' /proc/self/mountinfo > mount.txt
""" + FINISHED


@pytest.mark.skipif(os.geteuid() != 0, reason="running a file as another user needs root on the host")
def test_the_gateway_folder_is_no_way_onto_the_host(suite, run_eval):
    """A root agent once wrote a setuid-root binary into the gateway folder; `nobody` ran it
    on the host and got euid 0. Now the folder is read-only, nosuid and nodev inside, and
    on the host only Proctor's user can reach it (and its socket)."""
    path = suite(HEADER + f"""
import os, subprocess

@evaluation({AGENT_FILES}, user="root", allow=["example.test"])
def escapes(c):
    c.send("escape")
    # The host side of the mount, while the trial runs: the bind volume's device is its sock/.
    box = c._runtime.sandbox
    mounts = box.client.api.inspect_container(box.id)["Mounts"]
    [name] = [m["Name"] for m in mounts if m["Type"] == "volume"]
    folder = os.path.dirname(box.client.api.inspect_volume(name)["Options"]["device"])
    for root, _, names in os.walk(folder):
        for name in names:
            file = os.path.join(root, name)
            if os.path.isfile(file):
                ran = subprocess.run([file], user={NOBODY}, capture_output=True, text=True)
                assert "euid=0" not in ran.stdout, ("escaped", file, ran.stdout)
                raise AssertionError(f"the agent wrote {{file}} into the gateway folder")
            else:  # the socket: no other host user may use the gateway
                probe = "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"
                ran = subprocess.run(["/usr/bin/python3", "-c", probe, file], user={NOBODY},
                                     capture_output=True)
                assert ran.returncode != 0, "another host user reached the gateway's socket"
    assert os.stat(folder).st_mode & 0o777 == 0o700
    options = c.read_file("mount.txt").split()[5].split(",")
    assert {{"ro", "nosuid", "nodev"}} <= set(options), options
""", files={"agent.sh": ESCAPE_AGENT})
    [record] = by_case(*run_eval(path)[::2]).values()
    assert record.outcome == "pass", (record.failure, record.validations)


def test_the_sweep_removes_gateway_and_git_folders_of_owners_that_are_gone(docker_client, tmp_path):
    from engine.sandbox.cleanup import GIT_PREFIX, gateway_folder, owner_folder, owner_id, sweep, sweep_folders

    host_tmp = Path(tempfile.gettempdir())
    dead_owner = f"{socket.gethostname()}:{os.getpid()}:1"  # our pid, another start: a process now gone
    dead, live = gateway_folder(dead_owner), gateway_folder(owner_id())
    dead_git, live_git = owner_folder(GIT_PREFIX, dead_owner), owner_folder(GIT_PREFIX, owner_id())
    old = Path(tempfile.mkdtemp(prefix="proctor-gw-", dir=host_tmp))  # an earlier Proctor's, two days old
    os.utime(old, (old.stat().st_atime - 2 * 86400, old.stat().st_mtime - 2 * 86400))
    try:
        for folder in (dead, live):
            assert folder.parent == host_tmp and stat.S_IMODE(folder.stat().st_mode) == 0o700
        (dead / "sock").mkdir()
        (dead / "sock" / "left.txt").write_text("x")
        (dead_git / "1" / "source.git").mkdir(parents=True)
        swept = sweep(docker_client)
        assert not dead.exists() and not old.exists() and live.exists()
        assert not dead_git.exists() and live_git.exists()
        assert swept.folders >= 2 and swept.git_folders >= 1
        assert "gateway folders" in str(swept) and "git folders" in str(swept)
        # `proctor cleanup --all` takes live owners' folders too (in a folder of our own here,
        # so that other engines on this machine keep theirs).
        mine = gateway_folder(owner_id(), tmp_path)
        assert sweep_folders(everything=True, tmp=tmp_path) == 1 and not mine.exists()
    finally:
        for folder in (dead, live, old, dead_git, live_git):
            subprocess.run(["rm", "-rf", str(folder)])


# --- reading the sandbox ------------------------------------------------------------------


# The child's own peak (VmHWM): ru_maxrss would also count the parent it was forked from.
READ_CHILD = """
import json, re, sys, time
import docker
from engine.sandbox.container import FileTooLarge, Sandbox
box = Sandbox(docker.from_env(), sys.argv[1])
started = time.monotonic()
tree = box.read_tree()
try:
    box.read_file("big")
    too_large = False
except FileTooLarge:
    too_large = True
peak = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({"rss_mb": peak // 1024,
                  "s": round(time.monotonic() - started, 2), "too_large": too_large,
                  "big": tree.get("big", b"").decode(), "after": tree.get("zz.txt", b"").decode()}))
"""


def test_reading_a_tree_with_a_huge_sparse_file_stays_cheap(bare_container):
    container = bare_container("mkdir -p /workspace && cd /workspace && echo a > a.txt"
                               " && truncate -s 256M big && echo z > zz.txt")
    child = subprocess.run([sys.executable, "-c", READ_CHILD, container], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout)
    # Before: the whole stream joined in memory, twice the file in RSS (2 GB for 1 GiB).
    assert result["rss_mb"] < 150, result
    assert result["big"] == "<large file: 268435456 bytes>" and result["after"] == "z\n", result
    assert result["too_large"], result


def test_a_tree_keeps_a_bounded_number_of_bytes_and_files(docker_client, bare_container, monkeypatch):
    from engine.sandbox import container as container_module
    from engine.sandbox.container import Sandbox

    made = bare_container("mkdir -p /workspace/d && cd /workspace && head -c 3000 /dev/urandom > a.bin"
                          " && head -c 3000 /dev/urandom > b.bin"
                          " && for i in $(seq 1 40); do echo $i > d/f$i; done")
    monkeypatch.setattr(container_module, "TREE_TOTAL_MAX", 4000)
    monkeypatch.setattr(container_module, "TREE_FILES_MAX", 20)
    tree = Sandbox(docker_client, made).read_tree()
    kept = [v for k, v in tree.items() if not v.startswith(b"<")]
    assert sum(map(len, kept)) <= 4000
    assert any(v.startswith(b"<not kept:") for v in tree.values()), tree
    assert len(tree) == 21 and b"files not read" in tree[container_module.TREE_NOTE], tree


def test_docker_info_decides_the_disk_bound_without_a_refused_create(docker_client):
    from engine.sandbox.container import _storage_opt_known

    assert _storage_opt_known({"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}) is False
    assert _storage_opt_known({"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}) is None
    assert _storage_opt_known({"Driver": "btrfs", "DriverStatus": []}) is None
    # This machine's daemon: what it says decides, and creating a sandbox makes one request.
    info = docker_client.api.info()
    assert _storage_opt_known(info) in (False, None)


def test_the_hand_over_asks_again_when_docker_lost_its_output(docker_client, bare_container, monkeypatch):
    """moby#27289: under load an exec's stream can end before its output (exit 0, nothing said);
    the 200-trial load test saw one trial void as "could not make the agent's user (exit 0)"."""
    from engine.sandbox.container import ExecOutput, Sandbox

    monkeypatch.setenv("PROCTOR_HOST_WRITES", "0")  # the exec route: a local daemon's needs no exec
    sandbox = Sandbox(docker_client, bare_container("mkdir -p /workspace"))
    real, calls = sandbox.exec, []

    def lossy(command, **kw):
        calls.append(command)
        out = real(command, **kw)
        return ExecOutput(0, "", "", out.ms) if len(calls) == 1 else out  # the first answer lost

    monkeypatch.setattr(sandbox, "exec", lossy)
    said = sandbox.hand_over()
    assert len(calls) == 2 and said.startswith("agent runs as agent")
