"""Connecting to Docker, with one sentence that says what to do when it fails."""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException



class DockerUnavailable(Exception):
    pass


def connect(timeout: int = 120) -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except DockerException as e:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailable(
            f"Docker is not reachable at {host} ({_short(e)}): start the daemon "
            "(e.g. `sudo systemctl start docker`, or `sudo bash packaging/docker-up`) "
            "or set DOCKER_HOST"
        ) from None


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:160]
