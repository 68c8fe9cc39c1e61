"""What every agent-CLI harness shares (Claude Code now; Codex and Gemini CLI next).

A CLI harness names the npm package it needs (`packages`: the trial builds the case's image
plus Node.js and the CLI, engine/sandbox/node_cli.py), the API key it needs as a brokered
secret for its provider's host (`secrets`: the sandbox holds only a placeholder, the
gateway swaps the host's value in), and how one turn's command line is built. Each turn
runs the CLI once in /workspace as the agent's user, the prompt on standard input, its
stdout read line by line into the CLI's stream parser (engine/harness/streams/).
"""

from __future__ import annotations

import json
import shlex
import threading
import weakref
from typing import Any, ClassVar

from pydantic import Field, field_validator

from .. import limits
from ..options import Argument, EnvName, Filled
from ..sandbox.container import ENGINE_DIR, FileTooLarge, Sandbox
from ..sandbox.images import Images
from ..sandbox.node_cli import VERSIONS_FILE, NodeCliImages, parse_package
from ..spec import Secret
from . import OnItem, TurnOutput
from .registry import HarnessOptions
from .streams import StreamParser, failed

_SHARED: weakref.WeakKeyDictionary[Images, NodeCliImages] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def cli_images(images: Images) -> NodeCliImages:
    """One NodeCliImages per Images, so concurrent trials of a batch share one build."""
    with _SHARED_LOCK:
        if images not in _SHARED:
            _SHARED[images] = NodeCliImages(images)
        return _SHARED[images]


def harness_packages(harness: object) -> list[str]:
    """The npm packages a harness needs in its image (its optional `packages`); none for most."""
    return list(getattr(harness, "packages", None) or [])


def harness_secrets(harness: object) -> dict[str, Secret]:
    """The secrets a harness brings (its optional `secrets()`), brokered like the case's own."""
    secrets = getattr(harness, "secrets", None)
    return dict(secrets()) if callable(secrets) else {}


class CliOptions(HarnessOptions):
    """The keys every CLI harness takes; each harness sets its own defaults."""

    version: str  # the npm package's exact version; each harness pins one by default
    model: Filled | None = None  # None: the CLI's own default
    max_turns: int | None = Field(default=None, ge=1, le=10_000)  # the CLI's agent steps per turn
    args: list[Argument] = Field(default_factory=list)  # added to every turn's command line
    env: dict[EnvName, Argument] = Field(default_factory=dict)  # for the CLI's process
    settings: dict[str, Any] = Field(default_factory=dict)  # the CLI's settings file, inline
    # MCP servers by name, each as the CLI's own config writes one ({command, args, env} or {url}).
    mcp: dict[str, dict[str, Any]] = Field(default_factory=dict)  # SPEC.md names it `mcp`
    # The host variable holding the provider key, brokered by the gateway; None: no key.
    api_key_env: EnvName | None = None

    @field_validator("version")
    @classmethod
    def _exact(cls, value: str) -> str:
        try:
            parse_package(f"cli@{value}")
        except ValueError:
            raise ValueError(f"must be an exact version like '2.1.332', not {value!r}") from None
        return value


class CliHarness:
    """A harness that runs an npm-installed agent CLI for each turn. Subclasses set the class
    attributes and `command`/`parser`, and may add `config_files`."""

    name: ClassVar[str]  # as in proctor.toml, and in the record's harness phase
    package: ClassVar[str]  # the npm package
    rules_file: ClassVar[str]
    key_variable: ClassVar[str]  # where the CLI reads its key (the placeholder, in the sandbox)
    key_hosts: ClassVar[tuple[str, ...]]  # where the gateway swaps the real key in
    base_env: ClassVar[dict[str, str]] = {}  # the harness's own defaults; options.env wins

    def __init__(self, options: CliOptions):
        self.options = options
        self.session_id: str | None = None  # the CLI's session, resumed on later turns
        self.version: str = options.version

    # --- what the trial asks before the sandbox exists -------------------------------------

    @property
    def packages(self) -> list[str]:
        """The npm packages the image needs, each `name@version`."""
        return [f"{self.package}@{self.options.version}"]

    def secrets(self) -> dict[str, Secret]:
        """The provider key as a secret brokered for the provider's host."""
        if self.options.api_key_env is None:
            return {}
        return {self.key_variable: Secret(hosts=self.key_hosts, env=self.options.api_key_env)}

    # --- the harness protocol -------------------------------------------------------------

    def start(self, sandbox: Sandbox) -> str:
        files = {path.lstrip("/"): data for path, data in self.config_files().items()}
        if files:
            sandbox.put_files(files, base="/")
        self.version = self._installed_version(sandbox) or self.options.version
        # The trial writes "<name> harness · " before it: the harness span reads
        # "claude-code harness · 2.1.332 · model claude-sonnet-4-6".
        return f"{self.version} · model {self.options.model or 'default'}"

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput:
        prompt_path = f"{ENGINE_DIR}/prompt-{turn}.txt"
        sandbox.put_files({prompt_path.lstrip("/"): prompt.encode()}, base="/")
        parser = self.parser(turn, on_item)
        out = sandbox.exec(shlex.join(self.command(turn)), timeout=timeout, stdin_path=prompt_path,
                           env={**self.base_env, **self.options.env}, on_stdout_line=parser.feed,
                           user="agent")
        result = parser.finish()
        self.session_id = result.session_id or self.session_id
        if result.finished_reason is None and not out.timed_out and out.exit_code != 0:
            # It ended without its final event: a crash or a refusal to start, not the agent's try.
            last = self.last_words(out.stderr, out.stdout)
            why = f": {limits.quote(last, 200)}" if last else ""
            result.finished_reason = failed(f"{self.name} exited {out.exit_code}{why}")
        return result.turn_output(out.exit_code, out.stderr)

    # --- for subclasses -----------------------------------------------------------------------

    def command(self, turn: int) -> list[str]:
        raise NotImplementedError

    def parser(self, turn: int, on_item: OnItem) -> StreamParser:
        raise NotImplementedError

    def last_words(self, stderr: str, stdout: str) -> str | None:
        """The line that says why a CLI that crashed did: by default its last one."""
        last = stderr.strip().splitlines()[-1:] or stdout.strip().splitlines()[-1:]
        return last[0] if last else None

    def config_files(self) -> dict[str, bytes]:
        """Files written (absolute paths) before the first turn, e.g. the inline settings."""
        return {}

    def settings_json(self) -> bytes:
        return json.dumps(self.options.settings, indent=2).encode()

    def _installed_version(self, sandbox: Sandbox) -> str | None:
        """The CLI's `--version` as the image build recorded it (engine/sandbox/node_cli.py)."""
        try:
            versions = json.loads(sandbox.read_file(VERSIONS_FILE, limit=64_000))
        except (FileNotFoundError, FileTooLarge, ValueError):
            return None
        said = versions.get(self.package) if isinstance(versions, dict) else None
        return self.version_in(said) if isinstance(said, str) else None

    @staticmethod
    def version_in(said: str) -> str | None:
        """The version in what `--version` printed: its first word ("2.1.332 (Claude Code)")."""
        return said.split()[0] if said.strip() else None

