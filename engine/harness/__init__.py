"""Harnesses: how an agent is driven for one turn. One module per harness, each registered
by name with its own options model (`registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Callable, Protocol

from ..models import TrajectoryItem, Usage
from .registry import HarnessClass, harness_class

if TYPE_CHECKING:  # engine.config imports the registry: kept light, and free of a cycle
    from ..config import Variant
    from ..sandbox.container import Sandbox


class HarnessFailed(Exception):
    """The harness reported `finished: failed:…`: the engine could not give the agent a fair try."""


@dataclass
class TurnOutput:
    items: list[TrajectoryItem] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str | None = None  # the model that served the turn, as the API or CLI said
    finished_reason: str | None = None
    exit_code: int | None = None
    raw_output: str = ""

    @property
    def final_message(self) -> str:
        messages = [i.text or "" for i in self.items if i.kind == "message" and i.role != "user"]
        return messages[-1] if messages else ""


OnItem = Callable[[TrajectoryItem], None]


class Harness(Protocol):
    """One trial's agent, built from its class's `Options` (registry.HarnessClass): `start` once,
    before the body (its text joins the harness phase), then `run_turn` for each `c.send`."""

    rules_file: str  # where the eval's `rules` are written, relative to the workspace

    def start(self, sandbox: Sandbox) -> str: ...

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput: ...


@cache
def _class_of(name: str) -> HarnessClass:
    # Once per name: finding a plugin's class scans every installed package's entry points.
    return harness_class(name)


def make_harness(variant: Variant) -> Harness:
    """A fresh harness for one trial, from the options its variant was validated with."""
    return _class_of(variant.harness)(variant.options)
