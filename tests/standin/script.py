"""What a stand-in model says: a script of turns, each a list of steps.

A stand-in keeps no state between requests to decide what to answer: like a real model it
reads the conversation it is sent. The turn is the number of final answers already in it
(an assistant text with no tool call after it before the next user prompt); the step is
the number of tool results since then. So a CLI that resumes its session gets turn 2's
script, and one that lost its history gets turn 1's again, which a test can see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Token = Literal["prompt", "text", "call", "result"]


@dataclass(frozen=True)
class Shell:
    """A tool call that runs a shell command."""

    command: str


@dataclass(frozen=True)
class Edit:
    """A tool call that writes a new file (`path` as the CLI expects it: absolute for
    Claude Code and Gemini CLI, relative to the workspace for Codex's apply_patch)."""

    path: str
    content: str


@dataclass(frozen=True)
class Say:
    """A final assistant message: the turn ends."""

    text: str


@dataclass(frozen=True)
class Fail:
    """An API error instead of a response: the provider's error body with this HTTP status
    (a CLI that retries meets it again, since the conversation it resends is the same)."""

    status: int = 500
    message: str = "scripted failure"


Step = Shell | Edit | Say | Fail


@dataclass(frozen=True)
class Usage:
    """Tokens reported for each response, in Anthropic's meanings: `input` excludes cache
    reads and writes, `output` excludes reasoning. OpenAI and Gemini count cached input in
    their input, and OpenAI counts reasoning in its output, so those stand-ins add them.
    Anthropic reports no reasoning count; OpenAI and Gemini no cache writes."""

    input: int = 1200
    output: int = 80
    cache_read: int = 1000
    cache_write: int = 100
    reasoning: int = 20


@dataclass
class Script:
    turns: list[list[Step]]
    usage: Usage = field(default_factory=Usage)
    # What requests that carry no tools get (a CLI's side queries: titles, quota checks).
    aside: str = "ok"

    def step(self, turn: int, results: int) -> Step:
        """The step to answer with `results` tool results into turn `turn` (both from 0).
        Past the end of the script the last turn's final message is repeated."""
        if turn >= len(self.turns):
            return self.turns[-1][-1]
        steps = self.turns[turn]
        return steps[min(results, len(steps) - 1)]


def position(tokens: list[Token]) -> tuple[int, int]:
    """(turn, step) of a conversation given as a sequence of tokens in order: a final answer
    is an assistant `text` whose next non-text token is a user `prompt`."""
    turn = results = 0
    pending_text = False
    for token in tokens:
        if token == "text":
            pending_text = True
            continue
        if token == "prompt" and pending_text:
            turn, results = turn + 1, 0
        elif token == "result":
            results += 1
        pending_text = False
    return turn, results


def pick(offered: list[str] | None, preferred: list[str]) -> str | None:
    """The first of `preferred` the request offers; the first preferred if it lists no tools;
    None if it lists tools but none of these."""
    if offered is None:
        return preferred[0]
    return next((name for name in preferred if name in offered), None)


def two_turns(workdir: str = "/workspace", relative_paths: bool = False) -> Script:
    """The scripted session of issue 13: in each turn a shell command, a file edit, a
    final message. Turn 2 writes a new file, since Claude Code edits existing ones only
    after reading them."""
    root = "" if relative_paths else workdir.rstrip("/") + "/"
    return Script(turns=[
        [Shell("echo standin-turn-1"), Edit(root + "hello.txt", "hello from turn 1\n"),
         Say("I created hello.txt.")],
        [Shell(f"cat {root or ''}hello.txt"), Edit(root + "second.txt", "hello from turn 2\n"),
         Say("I created second.txt.")],
    ])
