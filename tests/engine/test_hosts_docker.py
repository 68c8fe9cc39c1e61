"""A pool of two Docker daemons on two Unix sockets: trials spread over both, and a
daemon that goes away mid-batch takes only its in-flight trials with it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, REQUIRE_DOCKER

ROOT = Path("/var/lib/proctor-docker-2")
RUN = Path("/run/proctor-docker-2")
SOCKET = RUN / "docker.sock"


@pytest.fixture
def second_daemon(docker_client):
    """A second private dockerd (no bridge, no iptables) with the base image loaded."""
    import docker

    if os.geteuid() != 0 or not shutil.which("dockerd"):
        reason = "a second Docker daemon needs root and dockerd"
        if REQUIRE_DOCKER:
            pytest.fail(reason)
        pytest.skip(reason)
    (ROOT / "data").mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    pidfile = RUN / "dockerd.pid"
    if pidfile.exists() and not Path(f"/proc/{pidfile.read_text().strip() or 0}").exists():
        pidfile.unlink()  # left by a daemon that was killed: dockerd would refuse to start
    log = open(ROOT / "dockerd.log", "ab")
    daemon = subprocess.Popen(
        ["dockerd", "--data-root", str(ROOT / "data"), "--exec-root", str(RUN / "exec"),
         "-H", f"unix://{SOCKET}", "--pidfile", str(RUN / "dockerd.pid"),
         "--iptables=false", "--ip6tables=false", "--bridge=none"],
        stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        try:  # the client asks the daemon's API version as it is made: only once it listens
            client = docker.DockerClient(base_url=f"unix://{SOCKET}", timeout=120)
            client.ping()
            break
        except Exception:
            if time.monotonic() > deadline or daemon.poll() is not None:
                daemon.kill()
                pytest.fail(f"the second dockerd did not start (see {ROOT / 'dockerd.log'})")
            time.sleep(0.3)
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        client.images.load(b"".join(docker_client.images.get(BASE_IMAGE).save(named=True)))
    yield f"unix://{SOCKET}", daemon, client
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    client.close()
    log.close()


def test_a_host_that_goes_away_voids_only_its_trials(suite, store, docker_client, second_daemon):
    from engine.batch import BatchPlan, Engine
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    url, daemon, client2 = second_daemon
    first = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    toml = f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "2m"

[[variants]]
name = "scripted"
command = "sh .agent/run.sh"

[[hosts]]
url = "{first}"
slots = 2

[[hosts]]
url = "{url}"
slots = 2
"""
    path = suite("""
from pathlib import Path
from engine import evaluation

@evaluation(files={".agent/run.sh": Path("agent.sh")}, trials=8)
def steady(c):
    c.send("work")
    c.exec("test -f done.txt").to_succeed()
""", toml=toml, files={"agent.sh": 'sleep 3\ntouch done.txt\necho \'{"type":"finished","reason":"done"}\'\n'})
    config = load_config(find_config(path))
    plan = BatchPlan(cases=load_cases([path]), variants=config.variants, config=config, trigger="api")
    engine = Engine(store, docker_client)
    handle = engine.start_batch(plan)

    # Both daemons take trials; then the second one goes away with trials in flight.
    deadline = time.monotonic() + 60
    while not client2.containers.list(filters={"label": f"proctor.batch={handle.batch_id}"}):
        assert time.monotonic() < deadline, "no trial reached the second daemon"
        time.sleep(0.2)
    time.sleep(1.0)
    daemon.send_signal(signal.SIGTERM)

    summary = handle.wait(timeout=180)
    assert summary is not None
    records = [store.get_trial(t.id) for t in summary.runs[0].trials]
    void = [r for r in records if r.outcome == "infra_error"]
    passed = [r for r in records if r.outcome == "pass"]
    assert void and passed and len(void) + len(passed) == 8, [(r.outcome, r.host, r.failure) for r in records]
    assert all(r.host == url for r in void), "only the trials on the host that went away are void"
    assert all(r.host == first for r in passed[-2:]), "the rest of the batch went on on the first host"
    assert summary.status == "finished"
