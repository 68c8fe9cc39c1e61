"""The status bar's Docker line: the daemon the engine would use, and its sandboxes counted in
words (issue 11: "1 sandboxes running"). The daemons are stand-ins on real Unix sockets."""

from __future__ import annotations

import pytest

from engine.sandbox import client as docker_client_module
from studio.views.status import DockerStatus
from tests.docker_api import dead_socket, fake_daemon


@pytest.mark.parametrize(("containers", "words"), [
    (0, "0 sandboxes running"), (1, "1 sandbox running"), (2, "2 sandboxes running")])
def test_sandboxes_are_counted_in_words(tmp_path, monkeypatch, containers, words):
    with fake_daemon(tmp_path / "docker.sock", version="99.0", containers=containers):
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
        text, ok = DockerStatus.check()
    assert ok and text == f"● Docker 99.0 · {words}"


def test_it_finds_the_daemon_proctor_started_without_docker_host(tmp_path, monkeypatch):
    default = dead_socket(tmp_path / "default.sock")
    with fake_daemon(tmp_path / "private.sock", version="99.4", containers=1):
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        monkeypatch.setattr(docker_client_module, "CANDIDATES",
                            (f"unix://{default}", f"unix://{tmp_path / 'private.sock'}"),
                            raising=False)
        text, ok = DockerStatus.check()
    assert ok and text == "● Docker 99.4 · 1 sandbox running"


def test_no_daemon_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker_client_module, "CANDIDATES",
                        (f"unix://{tmp_path / 'none.sock'}",), raising=False)
    text, ok = DockerStatus.check()
    assert not ok and "packaging/docker-up" in text
