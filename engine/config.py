"""`proctor.toml`: defaults, variants, the judge and the gateway.

Found next to the eval file or in a parent folder, or given by `--config`.
A file that is wrong ends in `EvalFileError` naming the file (and line, where
TOML gives one).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from .spec import Case, EvalFileError, parse_duration, parse_size

CONFIG_NAME = "proctor.toml"


# "15m", "90s", "1h30m" or a number of seconds, as everywhere else in Proctor.
Duration = Annotated[float, BeforeValidator(lambda v: parse_duration(v))]
# "4g", "512m" or a number of bytes.
Size = Annotated[int, BeforeValidator(lambda v: parse_size(v))]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Defaults(_Section):
    image: str | None = None
    timeout: Duration = 15 * 60
    concurrency: int = Field(default=4, ge=1)
    trials: int = Field(default=1, ge=1)
    # The sandbox's limits (SPEC.md additions); each case may override them.
    memory: Size = 4 << 30
    pids: int = Field(default=1024, ge=16)
    cpus: float = Field(default=2.0, gt=0, le=1024)
    disk: Size = 10 << 30
    user: Literal["agent", "root"] = "agent"

    def resources(self, case: Case) -> "Resources":
        """This case's limits: its own where it sets them, these defaults elsewhere."""
        def pick(name: str):
            own = getattr(case, name)
            return own if own is not None else getattr(self, name)
        return Resources(memory=pick("memory"), pids=pick("pids"), cpus=pick("cpus"),
                         disk=pick("disk"), user=pick("user"))


class Resources(BaseModel):
    """What one trial's sandbox may use, resolved from the case and [defaults]."""

    model_config = ConfigDict(frozen=True)

    memory: int
    pids: int
    cpus: float
    disk: int
    user: Literal["agent", "root"]


class Variant(_Section):
    name: str
    harness: Literal["command", "mini"] = "command"
    command: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    max_steps: int = Field(default=30, ge=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", v):
            raise ValueError("a variant name is 1-64 letters, digits, '_', '.' or '-'")
        return v


class JudgeConfig(_Section):
    base_url: str
    model: str
    api_key_env: str | None = None
    retries: int = Field(default=2, ge=0)
    timeout: Duration = 60


class GatewayConfig(_Section):
    resolve: dict[str, str] = Field(default_factory=dict)
    trust: list[str] = Field(default_factory=list)
    # Private or loopback "ip:port" an allow entry may reach; none by default.
    private: list[str] = Field(default_factory=list)


class HostConfig(_Section):
    """One Docker daemon of the pool: `unix:///…`, `tcp://…` (with TLS) or `ssh://…`."""

    url: str
    slots: int = Field(default=4, ge=1)
    tls: bool = False
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^(unix|tcp|ssh|npipe)://", v):
            raise ValueError("a host url starts with unix://, tcp:// or ssh://")
        return v


class Config(_Section):
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: list[HostConfig] = Field(default_factory=list)
    variants: list[Variant] = Field(default_factory=list)
    judge: JudgeConfig | None = None
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    path: Path | None = Field(default=None, exclude=True)

    def select_variants(self, names: list[str] | None) -> list[Variant]:
        if not self.variants:
            where = self.path or CONFIG_NAME
            raise EvalFileError(f"no [[variants]] declared: add one to {where} (see SPEC.md)")
        if not names:
            return list(self.variants)
        known = {v.name: v for v in self.variants}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise EvalFileError(
                f"no variant named {', '.join(unknown)} (variants: {', '.join(known)})", self.path)
        return [known[n] for n in dict.fromkeys(names)]  # `--variant a --variant a` runs a once


def find_config(start: Path) -> Path | None:
    folder = start if start.is_dir() else start.parent
    for candidate in [folder, *folder.parents]:
        path = candidate / CONFIG_NAME
        if path.is_file():
            return path
    return None


def load_config(path: Path | None) -> Config:
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise EvalFileError(f"cannot read: {e.strerror}", path) from None
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        raise EvalFileError(f"not valid TOML: {e}", path, int(line.group(1)) if line else None) from None
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise EvalFileError(f"{where}: {err['msg']}", path, _line_of(path, err["loc"])) from None
    names = [v.name for v in config.variants]
    if len(set(names)) != len(names):
        raise EvalFileError("two variants share a name", path)
    for variant in config.variants:
        if variant.harness == "command" and not variant.command:
            raise EvalFileError(f"variant {variant.name!r} uses the command harness but has no command", path)
    return config.model_copy(update={"path": path})


def _line_of(path: Path, loc: tuple) -> int | None:
    """Best effort: the line of the last key named in a validation error."""
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if re.match(rf"\s*\[*{re.escape(keys[-1])}\b", text):
            return number
    return None
