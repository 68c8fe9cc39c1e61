"""The studio's settings: a typed, validated model over QSettings("Proctor", "studio").

What each one means:
- `store`: the store the studio opens at its next start, after `--store` and $PROCTOR_STORE.
- `docker_hosts`: the Docker daemons a run started from the studio uses when its
  proctor.toml names no `[[hosts]]` (each as one `[[hosts]]` entry with its default slots);
  with none, the engine's own choice (DOCKER_HOST, else the local daemon).
- `judge_*`: the `[judge]` of a run started from the studio when its proctor.toml has none.
- `concurrency`: the Run dialog's default when proctor.toml does not say; None: the engine's.
- `theme`: light, dark, or as the desktop says.

API keys are not settings: they live in the environment or the system keyring (engine.keys).
A value stored by hand that does not validate is ignored (its default applies), never a crash.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from PySide6.QtCore import QSettings

from engine.config import Config, HostConfig, JudgeConfig
from engine.options import explain
from engine.spec import MAX_CONCURRENCY
from engine.store import default_store_path

from .theme import CHOICES, Choice

log = logging.getLogger(__name__)

# QSettings keys, in a group of their own beside the window's geometry and last eval.
KEYS = {"store": "settings/store", "docker_hosts": "settings/docker_hosts",
        "judge_base_url": "settings/judge_base_url", "judge_model": "settings/judge_model",
        "judge_api_key_env": "settings/judge_api_key_env", "concurrency": "settings/concurrency",
        "theme": "settings/theme"}
# How the dialog names each field, so a bad value is one sentence a user recognises.
LABELS = {"store": "The store location", "docker_hosts": "A Docker host",
          "judge_base_url": "The judge endpoint", "judge_model": "The judge model",
          "judge_api_key_env": "The judge's key variable", "concurrency": "The default concurrency",
          "theme": "The theme"}


class SettingsError(ValueError):
    """A value the dialog cannot keep, said in one sentence."""


class StudioSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    store: Path | None = None
    docker_hosts: list[str] = Field(default_factory=list)
    judge_base_url: str = ""
    judge_model: str = ""
    judge_api_key_env: str = ""
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    theme: Choice = "system"

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        path = Path(str(v).strip()).expanduser()
        if not path.is_absolute():
            raise ValueError(f"must be an absolute path such as ~/proctor.db, not {str(v)!r}")
        if path.is_dir():
            raise ValueError(f"must be a file, not the folder {path} (add a name such as proctor.db)")
        return path

    @field_validator("docker_hosts", mode="before")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.splitlines()
        hosts = [h.strip() for h in v if isinstance(h, str) and h.strip()]
        for host in hosts:
            try:
                HostConfig(url=host)
            except ValidationError as e:
                raise ValueError(e.errors(include_url=False)[0]["ctx"]["error"]) from None
        return list(dict.fromkeys(hosts))  # one entry per daemon

    @field_validator("judge_base_url")
    @classmethod
    def _judge_url(cls, v: str) -> str:
        if v.strip():
            _check_judge(base_url=v.strip())
        return v.strip()

    @field_validator("judge_model")
    @classmethod
    def _judge_model(cls, v: str) -> str:
        return v.strip()

    @field_validator("judge_api_key_env")
    @classmethod
    def _judge_key(cls, v: str) -> str:
        if v.strip():
            _check_judge(api_key_env=v.strip())
        return v.strip()

    @model_validator(mode="after")
    def _judge_whole(self) -> StudioSettings:
        if bool(self.judge_base_url) != bool(self.judge_model):
            missing = "judge_model" if self.judge_base_url else "judge_base_url"
            raise ValueError(f"{missing}: is missing: the judge needs both an endpoint and a model, or neither")
        return self

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> StudioSettings:
        """Settings from a user's values; SettingsError says the first wrong one in one sentence."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as e:
            raise SettingsError(_sentence(e)) from None

    # --- Qt's store of them ------------------------------------------------------------

    @classmethod
    def load(cls, qsettings: QSettings) -> StudioSettings:
        """What was saved; a value that no longer validates (edited by hand) falls back to its default."""
        values = {name: _from_qt(name, qsettings.value(key)) for name, key in KEYS.items()
                  if qsettings.contains(key)}
        while True:
            try:
                return cls.model_validate(values)
            except ValidationError as e:
                loc = e.errors(include_url=False)[0]["loc"]
                # The model's own check is the judge's two halves: both go.
                wrong = [str(loc[0])] if loc else ["judge_base_url", "judge_model"]
                log.warning("ignoring the saved setting %s: %s", ", ".join(wrong), _sentence(e))
                for name in wrong:
                    values.pop(name, None)

    def save(self, qsettings: QSettings) -> None:
        for name, key in KEYS.items():
            value = getattr(self, name)
            if name == "store":
                value = str(value) if value else ""
            elif name == "docker_hosts":
                value = "\n".join(value)  # one string: INI gives a one-item list back as a str
            elif name == "concurrency":
                value = value or 0
            qsettings.setValue(key, value)
        qsettings.sync()

    # --- what they change --------------------------------------------------------------

    def judge(self) -> JudgeConfig | None:
        if not (self.judge_base_url and self.judge_model):
            return None
        return JudgeConfig(base_url=self.judge_base_url, model=self.judge_model,
                           api_key_env=self.judge_api_key_env or None)

    def defaults_for(self, config: Config) -> Config:
        """`config` with what it leaves out filled from these settings: [[hosts]] and [judge]."""
        update: dict[str, Any] = {}
        if not config.hosts and self.docker_hosts:
            update["hosts"] = [HostConfig(url=url) for url in self.docker_hosts]
        if config.judge is None and (judge := self.judge()) is not None:
            update["judge"] = judge
        return config.model_copy(update=update) if update else config

    def concurrency_for(self, config: Config) -> tuple[int, str]:
        """The Run dialog's concurrency and why: proctor.toml's when it says, else these settings'."""
        value = config.defaults.concurrency
        if config.path and "concurrency" in config.defaults.model_fields_set:
            return value, f"proctor.toml says {value:,}"
        if self.concurrency is not None:
            return self.concurrency, f"your Settings say {self.concurrency:,}"
        return value, f"the default is {value:,}"


def store_location(given: Path | None, settings: StudioSettings,
                   environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The store to open and what chose it: --store, then $PROCTOR_STORE, then Settings, then the default."""
    environ = os.environ if environ is None else environ
    if given:
        return given, "--store"
    if env := environ.get("PROCTOR_STORE"):
        return Path(env).expanduser(), "$PROCTOR_STORE"
    if settings.store:
        return settings.store, "Settings"
    return default_store_path(), "the default"


def _check_judge(**given: str) -> None:
    """One field as proctor.toml's [judge] checks it; ValueError with its phrase."""
    try:
        JudgeConfig.model_validate({"base_url": "https://judge.invalid/v1", "model": "m", **given})
    except ValidationError as e:
        key = next(iter(given))
        raise ValueError(explain(e).removeprefix(f"{key} ")) from None


def _from_qt(name: str, value: Any) -> Any:
    """A QSettings value as the model takes it: INI files give every scalar back as a string."""
    if name == "concurrency":
        try:
            return int(value) or None
        except (TypeError, ValueError):
            return value
    if name == "docker_hosts" and isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else value


def _sentence(error: ValidationError) -> str:
    """The first mistake as one sentence naming the field as the dialog labels it."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    message = str((first.get("ctx") or {}).get("error", "")) or explain(error)
    if not loc:  # the model's own check: "field: phrase"
        field, _, message = message.partition(": ")
        loc = [field]
    name = loc[0]
    message = message.removeprefix(f"{'.'.join(loc)} ").removeprefix(f"{name} ")
    if name == "theme":
        message = f"must be one of {', '.join(CHOICES)}, not {first.get('input')!r}"
    return f"{LABELS.get(name, name)} {message}".rstrip(".") + "."
