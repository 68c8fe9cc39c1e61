"""`proctor.toml`: defaults, variants, the judge and the gateway.

Found next to the eval file or in a parent folder, or given by `--config`.
A file that is wrong ends in `EvalFileError` naming the file (and line, where
TOML gives one), in one line: values are checked by type (strict, so `true` is
no number), and every bound is the eval file's (`engine.spec`).
"""

from __future__ import annotations

import re
import tomllib
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, field_validator

from .options import (Command, Concurrency, Cpus, Duration, EnvName, Filled, Memory, Pids, Reference, Size,
                      Trials, User, explain, name_list, shown)
from .spec import Case, EvalFileError

CONFIG_NAME = "proctor.toml"


def _http_url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    parts = urlsplit(value) if value.isprintable() and " " not in value else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http:// or https:// URL such as 'https://api.openai.com/v1', "
                         f"not {shown(value)}")
    return value


HttpUrl = Annotated[str, PlainValidator(_http_url)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Defaults(_Section):
    image: Reference | None = None
    timeout: Duration = 15 * 60
    concurrency: Concurrency = 4
    trials: Trials = 1
    # The sandbox's limits (SPEC.md additions); each case may override them.
    memory: Memory = 4 << 30
    pids: Pids = 1024
    cpus: Cpus = 2.0
    disk: Size = 10 << 30
    user: User = "agent"

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
    command: Command | None = None
    model: Filled | None = None
    base_url: HttpUrl | None = None
    api_key_env: EnvName | None = None
    max_steps: int = Field(default=30, ge=1, le=10_000)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", v):
            raise ValueError(f"must be 1-64 letters, digits, '_', '.' or '-', not {shown(v)}")
        return v


class JudgeConfig(_Section):
    base_url: HttpUrl
    model: Filled
    api_key_env: EnvName | None = None
    retries: int = Field(default=2, ge=0, le=10)
    timeout: Duration = 60


def parse_endpoint(text: str) -> tuple[IPv4Address | IPv6Address, int]:
    """`"127.0.0.1:8080"` or `"[::1]:8080"` as an address and a port; ValueError otherwise."""
    host, colon, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    try:
        # An IPv6 address is bracketed: "::1:80" could be either.
        if not colon or not port.isdigit() or not 0 < int(port) < 65536 or (":" in host) != bracketed:
            raise ValueError
        return ip_address(host), int(port)
    except ValueError:
        raise ValueError(f'{text!r} is not ip:port, such as "127.0.0.1:8080" or "[::1]:8080"') from None


class GatewayConfig(_Section):
    resolve: dict[str, str] = Field(default_factory=dict)
    trust: list[str] = Field(default_factory=list)
    # Private or loopback "ip:port" an allow entry may reach; none by default.
    private: list[str] = Field(default_factory=list)

    @field_validator("private")
    @classmethod
    def _private(cls, v: list[str]) -> list[str]:
        for entry in v:
            parse_endpoint(entry)
        return v


class HostConfig(_Section):
    """One Docker daemon of the pool: `unix:///…`, `tcp://…` (with TLS) or `ssh://…`."""

    url: str
    slots: Concurrency = 4
    tls: bool = False
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^(unix|tcp|ssh|npipe)://", v):
            raise ValueError(f"must start with unix://, tcp:// or ssh://, not {shown(v)}")
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
                f"no variant named {name_list(unknown)} (variants: {name_list(list(known))})", self.path)
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
    text = _read(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        raise EvalFileError(f"not valid TOML: {e}", path, int(line.group(1)) if line else None) from None
    except RecursionError:  # tomllib recurses for each level of nesting
        raise EvalFileError("tables or arrays nested too deeply to read", path) from None
    if "path" in data:  # Config.path is where the file was found, never read from it
        raise EvalFileError("path is not a known key", path, _line_of(text, ("path",)))
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        loc = e.errors(include_url=False)[0]["loc"]
        raise EvalFileError(explain(e, toml=True), path, _line_of(text, loc)) from None
    names = [v.name for v in config.variants]
    if len(set(names)) != len(names):
        raise EvalFileError("two variants share a name", path)
    for variant in config.variants:
        if variant.harness == "command" and not variant.command:
            raise EvalFileError(f"variant {variant.name!r} uses the command harness but has no command", path)
    return config.model_copy(update={"path": path})


def _read(path: Path) -> str:
    """The file as text: UTF-8, as TOML requires."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EvalFileError(f"cannot read: {e.strerror}", path) from None
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise EvalFileError(f"not UTF-8 text (byte 0x{data[e.start]:02x}): save it as UTF-8",
                            path, data.count(b"\n", 0, e.start) + 1) from None
    return text


def _line_of(text: str, loc: tuple) -> int | None:
    """Best effort: the line of the last key named in a validation error."""
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*\[*{re.escape(keys[-1])}\b", line):
            return number
    return None
