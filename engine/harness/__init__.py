"""Harnesses: how an agent is driven for one turn. One module per harness."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..config import Variant
from ..models import TrajectoryItem, Usage
from ..sandbox.container import Sandbox


class HarnessFailed(Exception):
    """The harness reported `finished: failed:…`: the engine could not give the agent a fair try."""


@dataclass
class TurnOutput:
    items: list[TrajectoryItem] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finished_reason: str | None = None
    exit_code: int | None = None
    raw_output: str = ""

    @property
    def final_message(self) -> str:
        messages = [i.text or "" for i in self.items if i.kind == "message" and i.role != "user"]
        return messages[-1] if messages else ""


OnItem = Callable[[TrajectoryItem], None]


class Harness(Protocol):
    rules_file: str

    def start(self, sandbox: Sandbox) -> str: ...

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput: ...


def make_harness(variant: Variant) -> Harness:
    if variant.harness == "command":
        from .command import CommandHarness
        return CommandHarness(variant)
    if variant.harness == "mini":
        from .mini import MiniHarness
        return MiniHarness(variant)
    raise ValueError(f"harness {variant.harness!r} is not available yet")
