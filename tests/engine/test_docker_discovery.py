"""Which Docker daemon the CLI and the engine find (issue 11, item 7).

DOCKER_HOST, when set, is the one daemon used. Without it the default socket is
tried, then the private daemon `packaging/docker-up` starts; when none answers,
the one-line error names both and the export line. The stand-in daemons answer
the Docker API on real Unix sockets (tests/docker_api.py).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.sandbox import client as docker_client_module
from engine.sandbox.client import DockerUnavailable, connect
from tests.docker_api import dead_socket, fake_daemon
from tests.engine.test_cli import cli_env, write_suite

PRIVATE_SOCKET = "/run/proctor-docker/docker.sock"  # packaging/docker-up's
PRIVATE_HOST = f"unix://{PRIVATE_SOCKET}"


@pytest.fixture
def no_docker_host(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)


def test_without_docker_host_a_dead_default_socket_falls_back_to_the_next(
        tmp_path, monkeypatch, no_docker_host):
    default, private = dead_socket(tmp_path / "default.sock"), tmp_path / "private.sock"
    with fake_daemon(private, version="99.1-private") as daemon:
        monkeypatch.setattr(docker_client_module, "CANDIDATES",
                            (f"unix://{default}", f"unix://{private}"), raising=False)
        client = connect()
        assert client.version()["Version"] == "99.1-private"
        assert client.api.timeout == 120  # the probe's short timeout is not kept
        assert any(p.endswith("/_ping") for p in daemon.seen)
        client.close()


def test_without_docker_host_the_default_socket_comes_first(tmp_path, monkeypatch, no_docker_host):
    with fake_daemon(tmp_path / "default.sock", version="99.2-default"), \
            fake_daemon(tmp_path / "private.sock", version="99.3-private") as private:
        monkeypatch.setattr(docker_client_module, "CANDIDATES",
                            (f"unix://{tmp_path / 'default.sock'}",
                             f"unix://{tmp_path / 'private.sock'}"), raising=False)
        assert connect().version()["Version"] == "99.2-default"
        assert private.seen == []


def test_none_reachable_names_each_socket_and_the_export_line(tmp_path, monkeypatch,
                                                             no_docker_host):
    missing, dead = tmp_path / "missing.sock", dead_socket(tmp_path / "dead.sock")
    monkeypatch.setattr(docker_client_module, "CANDIDATES",
                        (f"unix://{missing}", f"unix://{dead}"), raising=False)
    with pytest.raises(DockerUnavailable) as caught:
        connect()
    message = str(caught.value)
    assert "\n" not in message
    assert f"unix://{missing}" in message and f"unix://{dead}" in message
    assert f"export DOCKER_HOST={PRIVATE_HOST}" in message
    assert "packaging/docker-up" in message


def test_a_set_docker_host_is_the_only_one_tried(tmp_path, monkeypatch):
    with fake_daemon(tmp_path / "private.sock") as private:
        monkeypatch.setattr(docker_client_module, "CANDIDATES",
                            (f"unix://{tmp_path / 'private.sock'}",), raising=False)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nothing.sock'}")
        with pytest.raises(DockerUnavailable) as caught:
            connect()
        assert private.seen == []  # an explicit choice is never overridden
    assert f"unix://{tmp_path / 'nothing.sock'}" in str(caught.value)


def _private_daemon_answers() -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(PRIVATE_SOCKET)
        return not Path("/var/run/docker.sock").exists()
    except OSError:
        return False


@pytest.mark.skipif(not _private_daemon_answers(),
                    reason="needs Proctor's private daemon and no default socket")
def test_a_bare_proctor_run_finds_the_private_daemon(tmp_path, docker_client):
    """The issue as a user met it: after packaging/launch, `proctor run` in a new shell."""
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation


        @evaluation()
        def finds_docker(c):
            c.exec("true").to_succeed()
    """)
    env = {k: v for k, v in cli_env().items() if k != "DOCKER_HOST"}
    done = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(path),
                           "--store", str(tmp_path / "proctor.db")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "finds_docker" in done.stdout
