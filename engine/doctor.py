"""Why Docker cannot run a trial here, in one sentence that says how to fix it.

`diagnose()` looks where `engine.sandbox.client.connect` looks (DOCKER_HOST when set, else the
default socket and then the private daemon `packaging/docker-up` starts) and ends in one of
four states: ready; no daemon (no socket, or nothing answers on it); no permission on the
socket (the user is not in the `docker` group); or a daemon without the base image. Each
carries the command that fixes it, and, where Proctor can run that fix itself, the command
line to run: `packaging/docker-up` starts the private daemon (as root) and builds the image.
"""

from __future__ import annotations

import os
import socket
from typing import Literal

import docker
from docker.errors import DockerException, NotFound
from pydantic import BaseModel, ConfigDict

from .sandbox import client as discovery

State = Literal["ready", "no_daemon", "no_permission", "no_image"]
BASE_IMAGE = "proctor-test-base:bookworm"  # examples/demo's image, and the tests'
DOCKER_UP = "packaging/docker-up"  # as a checkout names it; the studio passes the shipped path
START_DOCKER = "sudo systemctl start docker"
JOIN_GROUP = "sudo usermod -aG docker $USER"


class Fix(BaseModel):
    """A fix Proctor can run itself: `env` added to the environment, then `argv`."""

    model_config = ConfigDict(frozen=True)

    label: str  # what the button says
    argv: list[str]
    env: dict[str, str]


class Diagnosis(BaseModel):
    model_config = ConfigDict(frozen=True)

    state: State
    host: str  # the daemon found, or the socket (or sockets) looked at
    title: str  # a few words: "Docker is ready", "No Docker daemon is running", …
    message: str  # one sentence: what is missing and the command that fixes it
    command: str | None = None  # that command alone, to copy
    version: str | None = None  # the daemon's, when one answered
    fix: Fix | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def diagnose(host: str | None = None, image: str = BASE_IMAGE, *,
             docker_up: str = DOCKER_UP) -> Diagnosis:
    """Docker's state for a run on `image`: at `host`, or wherever `connect()` would look."""
    hosts = [host] if host else _discovered_hosts()
    refused: list[tuple[str, str]] = []  # (host, why) of each that did not answer
    denied: str | None = None
    for url in hosts:
        error = _unix_error(url)
        if isinstance(error, PermissionError):
            denied = denied or url
            refused.append((url, "permission denied"))
            continue
        if error is not None:
            refused.append((url, discovery.cause(error)))
            continue
        try:
            client = docker.DockerClient(base_url=url, timeout=discovery.PROBE_TIMEOUT_S)
        except DockerException as e:
            refused.append((url, discovery.cause(e)))
            continue
        try:
            return _with_daemon(client, url, image, docker_up)
        except (DockerException, OSError) as e:
            refused.append((url, discovery.cause(e)))
        finally:
            client.close()
    if denied is not None:
        path = _socket_path(denied)
        return Diagnosis(
            state="no_permission", host=denied, title="Docker's socket refuses you",
            message=(f"Docker's socket {path} refuses you (permission denied): add yourself to the "
                     f"docker group with `{JOIN_GROUP}`, then log out and back in."),
            command=JOIN_GROUP)
    return _no_daemon(refused, docker_up)


def _discovered_hosts() -> list[str]:
    """The daemons `connect()` tries, in its order."""
    if env := os.environ.get("DOCKER_HOST"):
        return [env]
    return list(discovery.CANDIDATES)


def _with_daemon(client: docker.DockerClient, url: str, image: str, docker_up: str) -> Diagnosis:
    """A daemon answered at `url`: ready, or the base image is missing."""
    version = client.version().get("Version", "?")
    try:
        client.images.get(image)
    except NotFound:  # ImageNotFound, or a 404 without the daemon's usual words
        path = _socket_path(url)
        command = f"sudo bash {docker_up}"
        if path is not None and url != discovery.PRIVATE_HOST:  # docker-up's own socket needs no word
            command = f"sudo env PROCTOR_DOCKER_SOCK={path} bash {docker_up}"
        fix = None
        if path is not None and _root():  # mmdebstrap builds the image's root file system as root
            fix = Fix(label="Build the base image", argv=["bash", docker_up],
                      env={"PROCTOR_DOCKER_SOCK": path})
        return Diagnosis(
            state="no_image", host=url, version=version, title="The base image is missing",
            message=(f"Docker {version} at {url} has no base image {image}: build it with "
                     f"`{command}` (about a minute; it downloads Debian packages)."),
            command=command, fix=fix)
    return Diagnosis(state="ready", host=url, version=version, title="Docker is ready",
                     message=f"Docker {version} at {url} is ready: it has the base image {image}.")


def _no_daemon(refused: list[tuple[str, str]], docker_up: str) -> Diagnosis:
    where = " nor at ".join(f"{url} ({why})" for url, why in refused)
    command = f"sudo bash {docker_up}"
    private = _socket_path(discovery.PRIVATE_HOST)
    fix = None
    if _root() and private is not None and any(url == discovery.PRIVATE_HOST for url, _ in refused):
        fix = Fix(label="Start Proctor's Docker daemon", argv=["bash", docker_up],
                  env={"PROCTOR_DOCKER_SOCK": private})
    return Diagnosis(
        state="no_daemon", host=", ".join(url for url, _ in refused),
        title="No Docker daemon is running",
        message=(f"No Docker daemon answers at {where}: start one with `{START_DOCKER}`, "
                 f"or Proctor's own with `{command}`."),
        command=command, fix=fix)


def _unix_error(url: str) -> OSError | None:
    """Why a Unix socket cannot be connected to (the errno says it exactly); None when it
    can, or when `url` is not a Unix socket (the client finds out)."""
    path = _socket_path(url)
    if path is None:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(discovery.PROBE_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as e:
            return e
    return None


def _socket_path(url: str) -> str | None:
    return url.removeprefix("unix://") if url.startswith("unix://") else None


def _root() -> bool:
    return os.geteuid() == 0
