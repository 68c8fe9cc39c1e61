"""Shared fixtures. Docker tests need a real daemon and proctor-test-base:bookworm;
with PROCTOR_REQUIRE_DOCKER=1 (as .ci/run sets) a missing daemon fails them
instead of skipping them."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import settings

BASE_IMAGE = "proctor-test-base:bookworm"
REQUIRE_DOCKER = os.environ.get("PROCTOR_REQUIRE_DOCKER") == "1"

# Timing on a loaded 2-CPU machine says nothing of the code, so no deadline. CI draws the same
# examples every run, so a landing never hinges on a new draw; local runs keep exploring.
settings.register_profile("proctor", deadline=None)
settings.register_profile("proctor-ci", deadline=None, derandomize=True)
settings.load_profile("proctor-ci" if REQUIRE_DOCKER else "proctor")


def _unavailable(reason: str):
    if REQUIRE_DOCKER:
        pytest.fail(f"Docker is required (PROCTOR_REQUIRE_DOCKER=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:  # any failure to reach the daemon
        _unavailable(f"Docker is not reachable: {e}")
    try:
        client.images.get(BASE_IMAGE)
    except Exception:
        _unavailable(f"{BASE_IMAGE} is missing: run `bash packaging/docker-up`")
    return client


@pytest.fixture
def store(tmp_path):
    from engine.store import Store

    s = Store(tmp_path / "proctor.db")
    yield s
    s.close()


@pytest.fixture
def suite(tmp_path):
    """Write an eval file (and proctor.toml, agent files) into a fresh folder."""

    def make(eval_source: str, toml: str | None = None, files: dict[str, str] | None = None) -> Path:
        folder = tmp_path / "suite"
        folder.mkdir(exist_ok=True)
        (folder / "test.eval.py").write_text(textwrap.dedent(eval_source))
        (folder / "proctor.toml").write_text(textwrap.dedent(toml if toml is not None else DEFAULT_TOML))
        for name, text in (files or {}).items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        return folder / "test.eval.py"

    return make


def suite_toml(variants: dict[str, str], concurrency: int = 2, timeout: str = "2m") -> str:
    """proctor.toml as most Docker tests write it: the base image, and one command-harness
    variant a name (`variants`: name -> command)."""
    parts = [f'[defaults]\nimage = "{BASE_IMAGE}"\ntimeout = "{timeout}"\nconcurrency = {concurrency}\n']
    parts += [f'[[variants]]\nname = {json.dumps(name)}\nharness = "command"\ncommand = {json.dumps(command)}\n'
              for name, command in variants.items()]
    return "\n".join(parts)


DEFAULT_TOML = suite_toml({"scripted": "sh .agent/run.sh"})


def pytest_configure(config):
    # Tests send Ctrl-C to the processes they start, as a terminal would. A run started as a
    # script's background job (`pytest … &`) ignores SIGINT, every child would inherit that,
    # and proctor (like Python) leaves an ignored signal ignored. A handler, unlike SIG_IGN,
    # is reset to the default in a child, so the children start as from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class JsonHandler(BaseHTTPRequestHandler):
    """A loopback stand-in's handler (an upstream, a judge): `reply` answers 200 with JSON."""

    def reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass  # no request lines in the test output


class EchoUpstream(JsonHandler):
    """api.example.test's stand-in: /v1/headers answers with the request's own headers (a
    hostile upstream); `seen` keeps each request's path and Authorization."""

    seen: list[dict] = []

    def do_GET(self):
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
        body = json.dumps({"ok": True, "path": self.path.split("?")[0]}).encode()
        if self.path.startswith("/v1/headers"):
            body = json.dumps(dict(self.headers)).encode()
        self.reply(body)


class HostService(JsonHandler):
    """A service of the host's own on 127.0.0.1, which no sandbox may reach."""

    seen: list[str] = []

    def do_GET(self):
        type(self).seen.append(self.path)
        self.reply(b"private")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "docker_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)


@pytest.fixture
def run_eval(docker_client, store):
    """Run an eval file's batch through the engine; returns (summary, events, records)."""
    from engine.batch import BatchPlan, Engine
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    def run(path: Path, trials: int | None = None, variants: list[str] | None = None, **kw):
        config = load_config(find_config(path))
        plan = BatchPlan(cases=load_cases([path]), variants=config.select_variants(variants),
                         config=config, trials=trials, trigger="api", **kw)
        engine = Engine(store, docker_client)
        events: list = []
        summary = engine.run(plan, events.append)
        records = {t.id: store.get_trial(t.id) for r in summary.runs for t in r.trials}
        return summary, events, records

    return run


@pytest.fixture
def bare_container(docker_client):
    """A plain container (no engine, no network): `bare_container(script)` runs the script in it
    as root and returns its id, for tests that read its tree; removed after the test."""
    from engine.sandbox.cleanup import labels, owner_id

    api = docker_client.api
    made = api.create_container(BASE_IMAGE, command=["sleep", "infinity"],
                                labels=labels("b_bare", "t_bare", owner_id()),
                                host_config=api.create_host_config(network_mode="none"))["Id"]
    api.start(made)

    def run(script: str) -> str:
        api.exec_start(api.exec_create(made, ["sh", "-c", script])["Id"])
        return made

    yield run
    try:
        api.remove_container(made, force=True)
    except Exception:
        pass  # the test destroyed it
