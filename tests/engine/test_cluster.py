"""`[cluster]` and `proctor run --cluster` before any trial runs (no Docker, no cluster): a wrong
table names its file, line and key; an address that does not answer is one line and exit 3,
never a hang; without Ray installed, one line names the extra to install."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from engine.cli import main
from engine.cluster.job import pack, sweep_jobs
from engine.config import load_config
from engine.spec import EvalFileError, load_cases

EVAL = """
from engine import evaluation

@evaluation()
def nothing(c):
    c.exec("true").to_succeed()
"""
TOML = """
[defaults]
image = "proctor-test-base:bookworm"

[[variants]]
name = "scripted"
command = "true"
"""


@pytest.mark.parametrize("table, said", [
    ('[cluster]\nengine = "ray"\nadress = "auto"\n', ":3: cluster.adress is not a known key"),
    ('[cluster]\nengine = "dask"\n', ":2: cluster.engine must be 'ray', not 'dask'"),
    ('\n[cluster]\naddress = "head:port"\n', ':3: cluster.address must be "auto", "HOST:PORT" or '
                                             '"ray://HOST:10001", not \'head:port\''),
    ('[cluster]\naddress = 10001\n', ":2: cluster.address must be a string, not 10001"),
])
def test_a_wrong_cluster_table_names_file_line_and_key(tmp_path, table, said):
    path = tmp_path / "proctor.toml"
    path.write_text(TOML + "\n" * 3 + table)
    first = TOML.count("\n") + 3
    with pytest.raises(EvalFileError) as caught:
        load_config(path)
    line = int(said.split(":")[1]) + first
    assert str(caught.value) == f"{path}:{line}:" + said.split(":", 2)[2]


def test_a_cluster_table_is_read(tmp_path):
    path = tmp_path / "proctor.toml"
    path.write_text(TOML + '[cluster]\nengine = "ray"\naddress = "ray://head.example:10001"\n')
    assert load_config(path).cluster.address == "ray://head.example:10001"
    path.write_text(TOML + "[cluster]\n")
    assert load_config(path).cluster.address == "auto"
    path.write_text(TOML)
    assert load_config(path).cluster is None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_cluster_is_one_line_and_exit_3(suite, tmp_path, capsys):
    path = suite(EVAL, toml=TOML)
    port = closed_port()
    started = time.monotonic()
    code = main(["run", str(path), "--cluster", f"127.0.0.1:{port}", "--store", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 3 and time.monotonic() - started < 10
    assert err.splitlines() == [f"proctor: the Ray cluster at 127.0.0.1:{port} is not reachable (Connection "
                                "refused): start its head with `ray start --head` or fix [cluster] address"]


def test_a_cluster_that_never_answers_times_out(tmp_path):
    """A port that takes the connection and says nothing: a timeout, not a hang."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        port = mute.getsockname()[1]
        script = textwrap.dedent(f"""
            import os, sys
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
            from engine.cluster.runner import ClusterUnavailable, connect
            try:
                connect("127.0.0.1:{port}", timeout=2)
            except ClusterUnavailable as e:
                print(e)
                os._exit(3)
        """)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == (f"the Ray cluster at 127.0.0.1:{port} did not answer within 2 s: check "
                                   "[cluster] address and that its head is running (`ray status`)")


def test_without_ray_the_cluster_names_the_extra(suite, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    path = suite(EVAL, toml=TOML + '[cluster]\naddress = "127.0.0.1:6379"\n')
    code = main(["run", str(path), "--store", str(tmp_path / "s.db")])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "proctor: [cluster] needs Ray, which is not installed: pip install 'proctor[ray]'"]
    code = main(["run", str(path), "--cluster", "ray://head:10001", "--store", str(tmp_path / "s.db")])
    assert code == 2 and "proctor[ray]" in capsys.readouterr().err


def test_a_wrong_cluster_flag_is_a_usage_error(suite, tmp_path, capsys):
    path = suite(EVAL, toml=TOML)
    with pytest.raises(SystemExit) as caught:
        main(["run", str(path), "--cluster", "ray//head", "--store", str(tmp_path / "s.db")])
    assert caught.value.code == 2
    assert "--cluster: must be \"auto\", \"HOST:PORT\" or \"ray://HOST:10001\"" in capsys.readouterr().err


def test_the_job_carries_the_eval_its_files_and_config_keyed_by_content(suite, tmp_path):
    path = suite(EVAL, toml=TOML, files={"agent.sh": "echo hi\n", "data/in.txt": "x\n"})
    (path.parent / "__pycache__").mkdir()
    (path.parent / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    config = load_config(path.parent / "proctor.toml")
    job = pack(load_cases([path]), config)
    assert sorted(job.files) == ["agent.sh", "data/in.txt", "proctor.toml", "test.eval.py"]
    assert job.config == "proctor.toml"
    placed = job.place(tmp_path / "node")
    assert (placed / "data" / "in.txt").read_text() == "x\n"
    assert job.place(tmp_path / "node") == placed  # the same content: the same folder, written once
    (path.parent / "data" / "in.txt").write_text("y\n")
    assert pack(load_cases([path]), config).digest != job.digest


def test_the_engine_imports_and_runs_locally_without_ray():
    """Ray is an extra: with it missing, the engine, its CLI and a batch's runner all import."""
    script = ("import sys\nsys.modules['ray'] = None\n"
              "import engine.cli, engine.batch, engine.cluster.runner, engine.cluster.node\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_nodes_sweep_removes_only_job_folders_unused_for_a_week(suite, tmp_path):
    path = suite(EVAL, toml=TOML)
    job = pack(load_cases([path]), load_config(path.parent / "proctor.toml"))
    used, old = job.place(tmp_path), tmp_path / "proctor-job-0123456789abcdef01234567"
    old.mkdir()
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (week_ago, week_ago))
    os.utime(used, (week_ago, week_ago))
    assert job.place(tmp_path) == used  # used again now: kept
    assert sweep_jobs(tmp_path) == 1 and not old.exists() and used.is_dir()


class _FakeRay:
    """The three calls the connection's sharing makes (a unit test of its counting)."""

    def __init__(self, joined: bool = False):
        self.joined, self.inits, self.shutdowns = joined, 0, 0

    def is_initialized(self) -> bool:
        return self.joined

    def init(self, **_kw) -> None:
        self.joined, self.inits = True, self.inits + 1

    def shutdown(self) -> None:
        self.joined, self.shutdowns = False, self.shutdowns + 1


def test_the_last_batch_on_proctors_connection_disconnects_and_a_callers_stays(monkeypatch):
    """Joined after its batches, a studio would be ended by Ray a minute after the cluster's
    head went away; a connection the caller made is theirs to end."""
    from engine.cluster import runner

    fake = _FakeRay()
    monkeypatch.setattr(runner, "require_ray", lambda: fake)
    monkeypatch.setattr(runner._Share, "users", 0)
    first, second = runner.connect("auto"), runner.connect("auto")  # two batches at once
    assert fake.inits == 1
    runner.leave(first)
    assert fake.joined  # the other batch still runs
    runner.leave(second)
    assert not fake.joined and fake.shutdowns == 1

    theirs = _FakeRay(joined=True)
    monkeypatch.setattr(runner, "require_ray", lambda: theirs)
    runner.leave(runner.connect("auto"))
    assert theirs.joined and theirs.inits == theirs.shutdowns == 0
