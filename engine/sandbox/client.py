"""Connecting to Docker, with one sentence that says what to do when it fails.

With DOCKER_HOST set, that daemon and no other. Without it, the default socket,
then the private daemon `packaging/docker-up` (and so `packaging/launch`) starts:
a bare `proctor run` in a new terminal finds the daemon Proctor itself started.
"""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException

DEFAULT_HOST = "unix:///var/run/docker.sock"
PRIVATE_HOST = "unix:///run/proctor-docker/docker.sock"  # packaging/docker-up's socket
# Tried in order when DOCKER_HOST is unset; the first that answers a ping is used.
CANDIDATES: tuple[str, ...] = (DEFAULT_HOST, PRIVATE_HOST)
PROBE_TIMEOUT_S = 5  # a socket whose daemon hangs must not hold the search for minutes


class DockerUnavailable(Exception):
    pass


def connect(timeout: int = 120) -> docker.DockerClient:
    """A client of the daemon DOCKER_HOST names, or else of the first candidate that answers."""
    if host := os.environ.get("DOCKER_HOST"):
        try:
            client = docker.from_env(timeout=timeout)
            client.ping()
            return client
        except DockerException as e:
            raise DockerUnavailable(
                f"Docker is not reachable at {host} ({cause(e)}): start the daemon "
                "(e.g. `sudo systemctl start docker`, or `sudo bash packaging/docker-up`) "
                f"or set DOCKER_HOST (`export DOCKER_HOST={PRIVATE_HOST}` for Proctor's own)"
            ) from None
    causes = []
    for url in CANDIDATES:
        try:
            return _probe(url, timeout)
        except (DockerException, OSError) as e:
            causes.append(f"{url} ({cause(e)})")
    raise DockerUnavailable(
        f"Docker is not reachable at {' nor at '.join(causes)}: start the daemon "
        "(`sudo systemctl start docker`, or `sudo bash packaging/docker-up` for Proctor's own), "
        f"or name one with `export DOCKER_HOST={PRIVATE_HOST}`"
    )


def _probe(url: str, timeout: int) -> docker.DockerClient:
    """A client of `url` once it answered a ping within PROBE_TIMEOUT_S; then `timeout` applies."""
    client = docker.DockerClient(base_url=url, timeout=min(timeout, PROBE_TIMEOUT_S))
    try:
        client.ping()
    except BaseException:
        client.close()
        raise
    client.api.timeout = timeout
    return client


def cause(error: Exception) -> str:
    """Why a socket did not answer, in a few words."""
    text = str(error)
    if "No such file" in text or "FileNotFoundError" in text:
        return "no socket there"
    if "Connection refused" in text or "ConnectionRefusedError" in text:
        return "nothing listening"
    if "timed out" in text.lower():
        return f"no answer within {PROBE_TIMEOUT_S}s"
    if "Permission denied" in text or "PermissionError" in text:
        return "permission denied: add yourself to the docker group, or use sudo"
    return _short(error)


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:160]
