#!/usr/bin/env python3
"""Run this example against a stand-in Anthropic API in Docker and screenshot the trajectory.

    python examples/claude-code/make_screenshot.py [--out FILE.png] [--store STORE]

The real Claude Code CLI runs in the sandbox; only the model is scripted (tests/standin): it
runs the tests, reads slug.py, rewrites it, runs the tests again and says what it fixed. The
stand-in listens on loopback and the gateway routes api.anthropic.com to it (`[gateway]
resolve`/`trust`), so nothing leaves the machine. Needs Docker and the host's node and npm."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from tests.standin import AnthropicStandIn, Say, Script, Shell  # noqa: E402
from tests.standin.script import Edit, pick  # noqa: E402

FIXED = '''"""Turn titles into URL slugs."""

import re


def slugify(title: str) -> str:
    """'Hello, World!' -> 'hello-world': lower case, words joined by single hyphens."""
    return "-".join(re.findall(r"\\w+", title)).lower()
'''
# The key the stand-in expects; the sandbox only ever holds a placeholder for it.
STANDIN_KEY = "sk-ant-standin-0000000000000000"


@dataclass(frozen=True)
class Read:
    """A Read tool call: Claude Code rewrites an existing file only after reading it."""

    path: str


class StandIn(AnthropicStandIn):
    """The Anthropic stand-in, plus a scripted Read step."""

    def blocks(self, step: Any, offered: list[str]) -> list[dict[str, Any]]:
        if isinstance(step, Read) and (name := pick(offered, ["Read"])):
            return [self._tool(name, {"file_path": step.path})]
        return super().blocks(step, offered)


SESSION = Script(turns=[[
    Shell("python3 -m unittest"),
    Read("/workspace/slug.py"),
    Edit("/workspace/slug.py", FIXED),
    Shell("python3 -m unittest -v"),
    Say("Fixed `slugify` in slug.py. It split the title on runs of non-word characters, so "
        "\"Hello, World!\" left an empty last word and the slug ended in a hyphen. It now joins "
        "the words `re.findall(r\"\\w+\", title)` finds; both tests pass."),
]])


def config_with(api: AnthropicStandIn) -> str:
    """The example's proctor.toml with its commented [gateway] lines made real for `api`."""
    return (HERE / "proctor.toml").read_text() + "\n" + api.gateway_toml()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=ROOT / "resources" / "screenshots" / "claude-code-trajectory.png")
    parser.add_argument("--store", type=Path,
                        help="keep the batch in this store (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="proctor-claude-example-") as scratch:
        work = Path(scratch)
        store = args.store or work / "proctor.db"
        env = {**os.environ, "ANTHROPIC_API_KEY": STANDIN_KEY}
        with StandIn(script=SESSION, model="claude-sonnet-4-6", tls=work / "tls") as api:
            config = work / "proctor.toml"
            config.write_text(config_with(api))
            run = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(HERE), "--config",
                                  str(config), "--store", str(store), "--json"],
                                 cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode not in (0, 1):
            sys.exit(f"the example's batch did not run: {run.stderr.strip()[-2000:]}")
        [trial] = json.loads(run.stdout)["runs"][0]["trials"]
        if trial["outcome"] != "pass":  # the README shows a fix that worked, or nothing
            sys.exit(f"the example's trial did not pass: {trial['outcome']}, {trial['failure']}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        # A fresh HOME: no saved window layout or theme changes what the picture shows.
        subprocess.run([sys.executable, "-m", "engine.cli", "studio", "--store", str(store),
                        "--open", trial["id"], "--view", "trajectory", "--screenshot",
                        str(args.out), "--size", "1024x700"],
                       check=True, cwd=ROOT, env={"QT_QPA_PLATFORM": "offscreen",
                                                  "PATH": "/usr/bin:/bin", "HOME": scratch})
    return 0


if __name__ == "__main__":
    sys.exit(main())
