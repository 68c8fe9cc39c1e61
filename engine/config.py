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

from pydantic import (BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PlainValidator, SerializeAsAny,
                      ValidationError, field_validator, model_validator)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .cost import Price
from .harness.registry import HarnessOptions, UnknownHarness, harness_class
from .options import (MAX_CONCURRENCY, Concurrency, Cpus, Duration, EnvName, Filled, Memory, Pids, Reference, Size, Trials, User,
                      explain, name_list, shown)
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
    # Containers kept started ahead of need per (image, limits) (engine.sandbox.pool);
    # None: the batch's concurrency, 0: none.
    warm: Annotated[int, Field(ge=0, le=MAX_CONCURRENCY)] | None = None
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


DEFAULT_HARNESS = "command"


class Variant(_Section):
    """One agent configuration: a name, a harness, and that harness's options.

    proctor.toml writes the options flat beside `name` and `harness` (so does
    `Variant(name=…, harness="mini", model=…)`); the harness's own `Options` model
    checks them, and a key it does not take is named with the keys it does take.
    """

    name: str
    harness: str = DEFAULT_HARNESS
    options: SerializeAsAny[HarnessOptions]

    @model_validator(mode="wrap")
    @classmethod
    def _flat(cls, data: Any, handler: ModelWrapValidatorHandler[Variant]) -> Variant:
        if not isinstance(data, dict):
            return handler(data)  # a Variant already, or no table: the handler says which
        harness = data.get("harness", DEFAULT_HARNESS)
        try:
            kind = harness_class(harness)
        except UnknownHarness as e:
            raise _invalid([_value_error("harness", str(e), harness)]) from None
        given = data.get("options")
        if isinstance(given, HarnessOptions):  # built in Python with its options model
            if not isinstance(given, kind.Options):
                raise _invalid([_value_error("options", f"must be the {harness} harness's Options, "
                                                         f"not {type(given).__name__}", given)])
            return handler(data)
        try:
            options = kind.Options.model_validate(
                {k: v for k, v in data.items() if k not in ("name", "harness")})
        except ValidationError as e:
            # An unknown key first: a misspelt `modle` is better said than the `model` it lacks.
            errors = sorted(e.errors(include_url=False), key=lambda err: err["type"] != "extra_forbidden")
            raise _invalid([_for_variant(err, data.get("name"), harness, kind.Options)
                            for err in errors]) from None
        common = {k: data[k] for k in ("name",) if k in data}
        return handler({**common, "harness": harness, "options": options})

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", v):
            raise ValueError(f"must be 1-64 letters, digits, '_', '.' or '-', not {shown(v)}")
        return v


# The type of the error a variant gives when its harness needs a key it lacks (said in load_config).
OPTION_MISSING = "harness_option_missing"


def _value_error(key: str, phrase: str, value: Any) -> InitErrorDetails:
    """A value error at `key`, its phrase following the key's name (as `options.explain` says it)."""
    return InitErrorDetails(type=PydanticCustomError("value_error", "{error}", {"error": phrase}),
                            loc=(key,), input=value)


def _invalid(errors: list[InitErrorDetails]) -> ValidationError:
    # Raised in a validator, its locations join the variant's own: variants[1].harness.
    return ValidationError.from_exception_data("Variant", errors)


def _for_variant(error: Any, name: Any, harness: str, options: type[HarnessOptions]
                 ) -> InitErrorDetails:
    """An options error as a variant states it: an unknown key names the harness's keys."""
    loc, kind, value = tuple(error["loc"]), error["type"], error["input"]
    if kind == "extra_forbidden":
        keys = ", ".join(options.model_fields) or "none"
        return _value_error(str(loc[0]), f"is not an option of the {harness} harness "
                                         f"(its options: {keys})", value)
    if kind == "missing" and len(loc) == 1:
        missing = PydanticCustomError(OPTION_MISSING,
                                      "variant {variant} uses the {harness} harness but has no {key}",
                                      {"variant": shown(name), "harness": harness, "key": str(loc[0])})
        return InitErrorDetails(type=missing, loc=loc, input=value)
    same = InitErrorDetails(type=kind, loc=loc, input=value, ctx=error.get("ctx") or {})
    try:
        _invalid([same])
    except (KeyError, TypeError):
        # A harness's PydanticCustomError: a type pydantic does not know, or one of its own
        # without the context pydantic gives it. Kept as it was said.
        return InitErrorDetails(type=PydanticCustomError(kind, error["msg"]), loc=loc, input=value)
    return same


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


def cluster_address(value: Any) -> str:
    """A Ray cluster's address: "auto" (the cluster this machine has joined), "HOST:PORT" (its
    head's GCS) or "ray://HOST:PORT" (Ray Client); ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    if value == "auto":
        return value
    parts = urlsplit(value if "://" in value else f"//{value}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if (parts.scheme not in ("", "ray") or not parts.hostname or port is None or parts.path
            or not value.isprintable() or " " in value):
        raise ValueError(f'must be "auto", "HOST:PORT" or "ray://HOST:10001", not {shown(value)}')
    return value


class ClusterConfig(_Section):
    """`[cluster]`: run the batch's trials on a Ray cluster's nodes (the extra proctor[ray])."""

    engine: Literal["ray"] = "ray"
    address: Annotated[str, PlainValidator(cluster_address)] = "auto"


class Config(_Section):
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: list[HostConfig] = Field(default_factory=list)
    cluster: ClusterConfig | None = None
    variants: list[Variant] = Field(default_factory=list)
    judge: JudgeConfig | None = None
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    prices: dict[str, Price] = Field(default_factory=dict)  # by model name; overrides genai-prices
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
        first = e.errors(include_url=False)[0]
        # A key the harness needs is said with the variant's name, at its table's header.
        missing = first["type"] in ("missing", OPTION_MISSING)
        message = first["msg"] if first["type"] == OPTION_MISSING else explain(e, toml=True)
        raise EvalFileError(message, path, _line_of(text, first["loc"], missing)) from None
    names = [v.name for v in config.variants]
    if len(set(names)) != len(names):
        raise EvalFileError("two variants share a name", path)
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


def _line_of(text: str, loc: tuple, missing: bool = False) -> int | None:
    """Best effort: the line of the key a validation error names, looked for within its own
    table where that has a header (`variants[1].model` in the second [[variants]]); a
    `missing` key is at its table's header. Else the first line the key begins."""
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    lines = text.splitlines()
    table = _table_lines(lines, loc) if len(keys) > 1 else None
    if table is not None:
        start, end = table
        for key in reversed(keys[1:]):
            pattern = re.compile(rf"\s*([\"']?){re.escape(key)}\1\s*[=.]")
            for number in range(start + 1, end):
                if pattern.match(lines[number]):
                    return number + 1
        if missing:
            return start + 1
    for number, line in enumerate(lines, 1):
        if re.match(rf"\s*\[*{re.escape(keys[-1])}\b", line):
            return number
    return None


_HEADER = re.compile(r"\s*\[\[?\s*[\w\"'. -]+\]\]?\s*(#.*)?$")


def _table_lines(lines: list[str], loc: tuple) -> tuple[int, int] | None:
    """(header, next header) line indexes of the table `loc` starts in: `[defaults]`, or the
    `loc[1]`-th `[[variants]]`; None when it has no header (an inline table, a top-level key)."""
    if not isinstance(loc[0], str):
        return None
    name = re.escape(loc[0])
    nth = loc[1] if isinstance(loc[1], int) else None
    header = (rf"\s*\[\[\s*([\"']?){name}\1\s*\]\]" if nth is not None
              else rf"\s*\[\s*([\"']?){name}\1\s*\](?!\])")
    starts = [i for i, line in enumerate(lines) if re.match(header, line) and _HEADER.match(line)]
    if isinstance(loc[1], str):  # a table of tables: [prices."MODEL"]
        sub = rf"\s*\[\s*{name}\s*\.\s*([\"']?){re.escape(loc[1])}\1\s*\](?!\])"
        starts = [i for i, line in enumerate(lines) if re.match(sub, line)] or starts
    if len(starts) <= (nth or 0):
        return None
    start = starts[nth or 0]
    end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    return start, end
