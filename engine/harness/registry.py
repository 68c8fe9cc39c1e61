"""Harnesses by name: each is a class with its own `Options` model, which checks a variant's keys.

The built-ins are one line each in `BUILT_IN`; an installed package adds one
under the `proctor.harnesses` entry point (`name = "module:Class"`). A class is
imported only when a variant names it, so a broken package harms only the
variants that use it. A package cannot take over a built-in's name.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from ..options import shown

if TYPE_CHECKING:
    from . import Harness

GROUP = "proctor.harnesses"

# name in proctor.toml -> where its class is; adding a harness is one module and one line here.
BUILT_IN: dict[str, str] = {
    "command": "engine.harness.command:CommandHarness",
    "mini": "engine.harness.mini:MiniHarness",
    "claude-code": "engine.harness.claude_code:ClaudeCodeHarness",
    "codex": "engine.harness.codex:CodexHarness",
    "gemini-cli": "engine.harness.gemini_cli:GeminiCliHarness",
}


class HarnessOptions(BaseModel):
    """A harness's keys in a `[[variants]]` table beside `name` and `harness`. Strict like all of
    proctor.toml, and closed: a key the harness does not take is an error, never ignored."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class HarnessClass(Protocol):
    """What is registered: a class that declares its `Options` and is built from them per trial."""

    Options: type[HarnessOptions]

    def __call__(self, options: Any) -> Harness: ...


class UnknownHarness(ValueError):
    """No usable harness by that name; the message is a phrase that follows "harness"."""


def _entries() -> dict[str, EntryPoint]:
    """Every harness: the built-ins in their order, then the installed packages' by name."""
    plugins = {e.name: e for e in entry_points(group=GROUP) if e.name not in BUILT_IN}
    built_in = {name: EntryPoint(name, value, GROUP) for name, value in BUILT_IN.items()}
    return built_in | dict(sorted(plugins.items()))


def harness_names() -> list[str]:
    return list(_entries())


def harness_class(name: Any) -> HarnessClass:
    """The class registered as `name`; UnknownHarness says why there is none."""
    if isinstance(name, str) and name in BUILT_IN:  # no scan of installed packages for a built-in
        entry: EntryPoint | None = EntryPoint(name, BUILT_IN[name], GROUP)
    else:
        entry = _entries().get(name) if isinstance(name, str) else None
    if entry is None:
        *most, last = [repr(n) for n in harness_names()]
        raise UnknownHarness(f"must be {', '.join(most)} or {last}, not {shown(name)}")
    try:
        loaded = entry.load()
    except Exception as e:  # whatever the package's import raises, it is one line here
        raise UnknownHarness(f"{name!r} could not be loaded ({type(e).__name__}: {e}): "
                             "reinstall the package that registers it") from None
    options = getattr(loaded, "Options", None)
    if not (isinstance(options, type) and issubclass(options, HarnessOptions)):
        raise UnknownHarness(f"{name!r} ({entry.value}) declares no Options model")
    return loaded
