"""The Docker diagnosis (issue 14, item 4): each state made by hand with a real daemon of the
test's own, nothing mocked.

One second private dockerd, started as packaging/docker-up starts Proctor's (no bridge, no
iptables), in its own data-root, exec-root, pidfile and socket: fresh, it has no images
("no base image"); its socket chowned root:root 0660 refuses an unprivileged user ("no
permission"); stopped, nothing answers ("no daemon"), and the fix Proctor offers for its own
daemon starts it again. A one-file image under the base image's name, and the private daemon
the tests run on, are "ready".
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import pytest

from engine import doctor
from engine.doctor import BASE_IMAGE, Diagnosis, diagnose
from engine.sandbox import client as discovery

ROOT = Path(__file__).resolve().parents[2]
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
START_S = 60


class SecondDaemon:
    """A dockerd of the test's own; `url` its socket. Short paths: containerd's socket lives in
    the exec-root, and a Unix socket's path is at most 107 bytes."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pdoc-", dir="/tmp"))
        self.dir.chmod(0o755)  # the unprivileged user must reach the socket to be refused by it
        self.socket = self.dir / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.log = self.dir / "dockerd.log"
        self.process: subprocess.Popen | None = None
        self.has_image = False  # BASE_IMAGE is in its data-root

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                ["dockerd", "--data-root", str(self.dir / "data"), "--exec-root", str(self.dir / "exec"),
                 "-H", self.url, "--pidfile", str(self.dir / "dockerd.pid"),
                 "--iptables=false", "--ip6tables=false", "--bridge=none"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:  # the client asks the API version as it is made: only once the daemon listens
                docker.DockerClient(base_url=self.url, timeout=2).close()
                return
            except Exception:  # not up yet
                time.sleep(0.2)
        self.stop()
        pytest.fail(f"the test's dockerd did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # dockerd stops its containerd and removes its socket
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._stop_restarted()

    def _stop_restarted(self) -> None:
        """The dockerd packaging/docker-up started again on this folder (it writes the same pidfile)."""
        pidfile = self.dir / "dockerd.pid"
        pid = int(pidfile.read_text().strip() or 0) if pidfile.exists() else 0
        if not pid or not Path(f"/proc/{pid}").exists():
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        self.stop()
        subprocess.run(["umount", "-R", str(self.dir / "data")], capture_output=True)  # left mounts, if any
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def second_daemon(docker_client):
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.skip("a daemon of the test's own needs dockerd and root")
    daemon = SecondDaemon()
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.remove()


def give_base_image(daemon: SecondDaemon) -> None:
    """BASE_IMAGE in the daemon: a one-file image imported from a tar made here."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"hi\n"))
    client = docker.DockerClient(base_url=daemon.url, timeout=60)
    try:
        repository, tag = BASE_IMAGE.split(":")
        client.api.import_image_from_data(data.getvalue(), repository=repository, tag=tag)
    finally:
        client.close()
    daemon.has_image = True


def diagnose_as_nobody(**env: str) -> Diagnosis:
    """diagnose() in a process of uid/gid 65534 with no groups: a user outside the docker group."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as another user needs root and setpriv")
    code = "from engine.doctor import diagnose; print(diagnose().model_dump_json())"
    result = subprocess.run([*NOBODY, sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={"PATH": os.environ["PATH"], "HOME": "/tmp", **env})
    assert result.returncode == 0, result.stderr
    return Diagnosis.model_validate_json(result.stdout)


@pytest.mark.slow
def test_a_fresh_daemon_has_no_base_image_and_proctor_offers_to_build_it(second_daemon):
    found = diagnose(second_daemon.url)
    assert found.state == "no_image" and not found.ready
    assert found.version and found.host == second_daemon.url
    assert BASE_IMAGE in found.message and "\n" not in found.message
    # Not docker-up's own socket: the command names this one, and so does the fix.
    assert found.command == f"sudo env PROCTOR_DOCKER_SOCK={second_daemon.socket} bash packaging/docker-up"
    assert f"`{found.command}`" in found.message
    assert found.fix is not None and found.fix.label == "Build the base image"
    assert found.fix.argv == ["bash", "packaging/docker-up"]
    assert found.fix.env == {"PROCTOR_DOCKER_SOCK": str(second_daemon.socket)}


@pytest.mark.slow
def test_the_base_image_there_makes_it_ready(second_daemon):
    """Any image of that name will do for the diagnosis: one file, imported, no download."""
    give_base_image(second_daemon)
    found = diagnose(second_daemon.url)
    assert found.state == "ready" and found.fix is None and found.command is None


@pytest.mark.slow
def test_a_socket_the_user_may_not_open_is_no_permission(second_daemon):
    os.chown(second_daemon.socket, 0, 0)
    second_daemon.socket.chmod(0o660)
    # Found the way a user's `proctor` finds it: through DOCKER_HOST.
    found = diagnose_as_nobody(DOCKER_HOST=second_daemon.url)
    assert found.state == "no_permission"
    assert found.command == "sudo usermod -aG docker $USER"
    assert str(second_daemon.socket) in found.message and "log out and back in" in found.message
    assert found.fix is None  # only the user's administrator can do that
    assert diagnose(second_daemon.url).state != "no_permission"  # root still may


@pytest.mark.slow
def test_a_stopped_daemon_is_no_daemon(second_daemon):
    second_daemon.stop()
    found = diagnose(second_daemon.url)
    assert found.state == "no_daemon"
    assert f"{second_daemon.url} (no socket there)" in found.message
    assert "`sudo systemctl start docker`" in found.message and "`sudo bash packaging/docker-up`" in found.message
    assert found.fix is None  # not docker-up's socket: starting Proctor's would not bring this one back


@pytest.mark.slow
def test_the_start_fix_really_starts_proctors_daemon(second_daemon, monkeypatch):
    """The stopped daemon as Proctor's own (its socket docker-up's): the fix the panel's button
    runs starts it again, and the diagnosis made after says ready."""
    if os.geteuid() != 0:
        pytest.skip("only root may start a daemon")
    if not second_daemon.has_image:  # run alone; else the tests before left it so
        if second_daemon.process is None or second_daemon.process.poll() is not None:
            second_daemon.start()
        give_base_image(second_daemon)  # else docker-up would download Debian to build it
    second_daemon.stop()
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(discovery, "PRIVATE_HOST", second_daemon.url)
    monkeypatch.setattr(discovery, "CANDIDATES", (second_daemon.url,))
    stopped = diagnose(docker_up=str(ROOT / "packaging" / "docker-up"))
    assert stopped.state == "no_daemon" and stopped.fix is not None
    assert stopped.fix.label == "Start Proctor's Docker daemon"
    # As the panel's QProcess runs it, with this test's folder as docker-up's root (never the real one's).
    env = {**os.environ, **stopped.fix.env, "PROCTOR_DOCKER_ROOT": str(second_daemon.dir)}
    done = subprocess.run(stopped.fix.argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"starting dockerd on {second_daemon.socket}" in done.stderr
    assert diagnose().state == "ready"


def test_the_private_daemon_with_its_image_is_ready(docker_client, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", discovery.PRIVATE_HOST)
    found = diagnose()
    assert found.state == "ready" and found.ready
    assert found.host == discovery.PRIVATE_HOST and found.fix is None and found.command is None
    assert found.version == docker_client.version()["Version"]


def test_without_docker_host_it_looks_where_connect_looks(docker_client, tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(discovery, "CANDIDATES", (f"unix://{tmp_path / 'none.sock'}", discovery.PRIVATE_HOST))
    assert diagnose().host == discovery.PRIVATE_HOST


def test_no_daemon_at_the_private_socket_offers_to_start_it_as_root(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    dead = tmp_path / "dead.sock"
    import socket

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(dead))  # a socket file that nothing listens on: a daemon that died
    stale.close()
    private = f"unix://{dead}"
    monkeypatch.setattr(discovery, "PRIVATE_HOST", private)
    monkeypatch.setattr(discovery, "CANDIDATES", (f"unix://{tmp_path / 'default.sock'}", private))
    found = diagnose(docker_up="/opt/proctor/packaging/docker-up")
    assert found.state == "no_daemon"
    assert f"unix://{tmp_path / 'default.sock'} (no socket there) nor at {private} (nothing listening)" \
        in found.message
    assert found.command == "sudo bash /opt/proctor/packaging/docker-up"
    if os.geteuid() == 0:
        assert found.fix is not None and found.fix.label == "Start Proctor's Docker daemon"
        assert found.fix.argv == ["bash", "/opt/proctor/packaging/docker-up"]
        assert found.fix.env == {"PROCTOR_DOCKER_SOCK": str(dead)}
    monkeypatch.setattr(doctor, "_root", lambda: False)
    assert diagnose().fix is None  # a user cannot start a daemon: the sentence says who can
