"""Eval-file options and `proctor.toml` values, checked by type.

Strict checks (pydantic: "abc" is no list, True no number) with every bound
in one place, each mistake one phrase that follows the option's name:
"setup must be a list of commands, not a string: setup=['echo hi']".
`explain()` turns a ValidationError into that sentence; `shown()` and `clip()`
elide what the user wrote. `engine.spec` (the eval-file API) and
`engine.config` (proctor.toml) build their models from these types.
"""

from __future__ import annotations

import ipaddress
import re
import reprlib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainValidator, ValidationError, ValidationInfo

MAX_CASE_ID = 100
MAX_TIMEOUT_S = 7 * 24 * 3600  # any timeout, a case's, a step's or proctor.toml's: past a week it is a typo
MAX_TRIALS = 10_000  # per run; each is a row in the store before the batch starts
MAX_CONCURRENCY = 1024
MAX_PIDS = 4_194_304  # the kernel's PID_MAX_LIMIT
MIN_MEMORY = 6 << 20  # Docker refuses a smaller memory limit
MAX_SIZE = 1 << 60
MAX_ARGUMENT = 100_000  # a command or env value: the kernel takes at most 128 KiB per argument
MAX_FILE = 64 << 20  # a Path read into `files` when the eval file loads
MAX_MESSAGE = 500  # an error's message (after file and line) is elided past this


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` as one line (line breaks become spaces), elided past `limit` characters."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 2, 40, 40, 24


def shown(value: Any, limit: int = 40) -> str:
    """A user's value as a message shows it: its repr, elided past about `limit` characters."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit] + "…")
    text = _REPR.repr(value)  # bounded in depth and length; a broken __repr__ is caught
    return text if len(text) <= limit + 10 else text[:limit] + "…"


def clip(text: str, limit: int = 40) -> str:
    """A name from the user, elided past `limit` characters, control characters escaped."""
    text = text if len(text) <= limit else text[:limit] + "…"
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def name_list(items: list[str], most: int = 20) -> str:
    """Names for a message: each elided, at most `most` of them."""
    text = ", ".join(clip(str(item)) for item in items[:most])
    return text + (f", … ({len(items) - most} more)" if len(items) > most else "")


# --- values, checked ---------------------------------------------------------------
# Each check returns the value (converted) or raises ValueError with a phrase that
# follows the option's name: "timeout" + " must be …, not 'fast'".

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_A_DURATION = "a duration such as '90s', '15m' or '1h30m'"


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be {_A_DURATION}, not {shown(value)}")
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"must be {_A_DURATION}, not {shown(value)}")
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        seconds: float = sum(float(n) * scale[u] for n, u in parts)  # too many digits: inf, refused below
    else:
        seconds = value
    if seconds <= 0:
        raise ValueError(f"must be more than zero, not {shown(value)}")
    if not seconds <= MAX_TIMEOUT_S:  # also nan and inf
        raise ValueError(f"must be finite and at most 7 days ('168h'), not {shown(value)}")
    return float(seconds)


def parse_duration(value: str | int | float, what: str = "timeout") -> float:
    """'15m', '2m30s', '8s', '500ms', '1h' or a number of seconds -> seconds, more than
    zero and at most 7 days; otherwise ValueError naming `what`."""
    try:
        return _duration(value)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.IGNORECASE)
_A_SIZE = "a size such as '512m' or '4g'"


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"must be {_A_SIZE}, not {shown(value)}")
    if isinstance(value, int):
        size: float = value
    else:
        match = _SIZE.fullmatch(value.strip())
        if not match:
            raise ValueError(f"must be {_A_SIZE}, not {shown(value)}")
        size = float(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
    if not 1 <= size <= MAX_SIZE:  # too many digits made inf
        raise ValueError(f"must be at least one byte and at most 1 EiB, not {shown(value)}")
    return int(size)


def _memory(value: Any) -> int:
    size = _size(value)
    if size < MIN_MEMORY:
        raise ValueError(f"must be at least 6 MiB (Docker's least), not {shown(value)}")
    return size


def parse_size(value: str | int, what: str = "size") -> int:
    """'4g', '512m', '10GiB', '100k' or a number of bytes -> bytes (binary units)."""
    try:
        return _size(value)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None


def format_size(size: int) -> str:
    """Bytes as a limit is written: 4 GiB, 512 MiB, 100 KiB."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


def _text(value: Any) -> str:
    """A string that can be written as UTF-8 (a lone surrogate cannot)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    try:
        value.encode()
    except UnicodeEncodeError as e:
        raise ValueError(f"must be valid Unicode, but holds the lone surrogate {value[e.start]!r}") from None
    return value


def _filled(value: Any) -> str:
    text = _text(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _argument(value: Any) -> str:
    """Text passed to a process (a command, an env value): the kernel ends it at a NUL."""
    text = _text(value)
    if "\0" in text:
        raise ValueError("must not hold a NUL character")
    if len(text) > MAX_ARGUMENT:
        raise ValueError(f"must be at most {MAX_ARGUMENT:,} characters, not {len(text):,}")
    return text


def shell_command(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a shell command (a string), not {shown(value)}")
    return _argument(_filled(value))


def _one_line_command(value: Any) -> str:
    command = shell_command(value)
    if "\n" in command or "\r" in command:  # each is one RUN line of a Dockerfile
        raise ValueError("must be one line: join commands with && or give each as its own item")
    return command


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def _env_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"must be a variable name (letters, digits and '_', not starting with a digit), "
                         f"not {shown(value)}")
    return value


# A name, or "*." and a name; labels of letters, digits, '-' and '_', without a '-' at either end.
_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*\.?")


def _host(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    if len(value) <= 253 and _HOST_NAME.fullmatch(value):
        return value
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        raise ValueError(f"must be a host name such as 'pypi.org' or '*.pythonhosted.org', "
                         f"not {shown(value)}") from None


def image_reference(value: Any) -> str:
    """An image reference: checked against the daemon before the batch; here only its shape."""
    text = _filled(value)
    if any(ch.isspace() or not ch.isprintable() for ch in text) or len(text) > 255:
        raise ValueError(f"must be an image reference such as 'debian:bookworm' (no whitespace), "
                         f"not {shown(value)}")
    return text


def path_text(value: Any) -> str:
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a path, not {shown(value)}")
    return _argument(_filled(value))


def _file_path(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    path = Path(path_text(value))
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"must be relative to the workspace, not {shown(value)}")
    if not path.parts:
        raise ValueError(f"must be a file path such as 'data/input.txt', not {shown(value)}")
    if len(value.encode()) > 4096 or any(len(part.encode()) > 255 for part in path.parts):
        raise ValueError(f"must be a path the kernel takes (names of at most 255 bytes), not {shown(value)}")
    return value


def _file_content(value: Any) -> str | bytes | Path:
    if isinstance(value, (bytes, Path)):
        return value
    if isinstance(value, str):
        return _text(value)
    raise ValueError(f"must be str, bytes or a Path, not {shown(value)}")


def _tag(value: Any) -> str:
    tag = _filled(value)
    if len(tag) > 100 or not tag.isprintable():
        raise ValueError(f"must be at most 100 printable characters, not {shown(value)}")
    return tag


def _user(value: Any) -> str:
    if not isinstance(value, str) or value not in ("agent", "root"):
        raise ValueError(f"must be 'agent' (an unprivileged user, the default) or 'root', not {shown(value)}")
    return value


def listed(what: str, into: type = list) -> BeforeValidator:
    """A list (or tuple) of `what`. A bare string would be taken character by character:
    refused, with the fix."""
    def check(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            raise ValueError(f"must be a list of {what}, not a string: {info.field_name}=[{shown(value)}]")
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"must be a list of {what}, not {shown(value)}")
        return into(value)
    return BeforeValidator(check)


def mapping(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"must be a dict of {what}, not {shown(value)}")
        return value
    return BeforeValidator(check)


Duration = Annotated[float, PlainValidator(_duration)]
Size = Annotated[int, PlainValidator(_size)]
Memory = Annotated[int, PlainValidator(_memory)]
Trials = Annotated[int, Field(ge=1, le=MAX_TRIALS)]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
Pids = Annotated[int, Field(ge=16, le=MAX_PIDS)]
Cpus = Annotated[float, Field(ge=0.01, le=1024, allow_inf_nan=False)]
User = Annotated[str, PlainValidator(_user)]
Command = Annotated[str, PlainValidator(shell_command)]
EnvName = Annotated[str, PlainValidator(_env_name)]
Reference = Annotated[str, PlainValidator(image_reference)]
Filled = Annotated[str, PlainValidator(_filled)]
Text = Annotated[str, PlainValidator(_text)]
Argument = Annotated[str, PlainValidator(_argument)]
Host = Annotated[str, PlainValidator(_host)]
Tag = Annotated[str, PlainValidator(_tag)]
PathText = Annotated[str, PlainValidator(path_text)]
FilePath = Annotated[str, PlainValidator(_file_path)]
FileContent = Annotated[Any, PlainValidator(_file_content)]
OneLineCommand = Annotated[str, PlainValidator(_one_line_command)]

# What a type error says a value must be.
_EXPECTED = {"string_type": "a string", "int_type": "a whole number", "float_type": "a number",
             "bool_type": "True or False", "list_type": "a list", "dict_type": "a dict",
             "model_type": "a dict", "bytes_type": "bytes", "finite_number": "a finite number"}


def explain(error: ValidationError, owner: str = "", fields: list[str] | None = None,
            toml: bool = False) -> str:
    """The first mistake in `error` as one sentence naming where it is:
    "env['LANG'] must be a string, not 1", "Step timeout must be …", "variants[0].name …".

    `owner` prefixes the name (a class); `fields` names positional arguments by index;
    `toml` writes paths as proctor.toml does (defaults.timeout) and says "table" for dict.
    """
    first = error.errors(include_url=False)[0]
    loc, kind, ctx, value = list(first["loc"]), first["type"], first.get("ctx") or {}, first.get("input")
    if loc and isinstance(loc[0], int) and fields and loc[0] < len(fields):
        loc[0] = fields[loc[0]]  # a positional argument
    key = loc[-1:] == ["[key]"]
    where = _where(loc[:-2] if key else loc, toml)  # a dict key's own value is shown after "not"
    where = " ".join(w for w in (owner, where, "key" if key else "") if w)
    if kind == "value_error":
        phrase = str(ctx.get("error", first["msg"]))
    elif kind in _EXPECTED:
        expected = _EXPECTED[kind].replace("a dict", "a table") if toml else _EXPECTED[kind]
        phrase = f"must be {expected}, not {shown(value)}"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"ge": "at least", "le": "at most", "gt": "more than", "lt": "less than"}
        name = next(k for k in bound if k in ctx)
        limit = f"{ctx[name]:,}" if isinstance(ctx[name], int) else ctx[name]
        phrase = f"must be {bound[name]} {limit}, not {shown(value)}"
    elif kind == "literal_error":
        phrase = f"must be {ctx['expected']}, not {shown(value)}"
    elif kind == "missing":
        phrase = "is missing"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        phrase = "is not a known key" if toml else "is not a known option"
    elif kind == "unexpected_positional_argument":
        where, phrase = owner, f"was given too many arguments ({shown(value)} is one too many)"
    elif kind == "is_instance_of":
        phrase = f"must be a {ctx['class']}, not {shown(value)}"
    else:
        phrase = f"is wrong: {first['msg']}, not {shown(value)}"
    return one_line(f"{where} {phrase}" if where else phrase)


def _where(loc: list[Any], toml: bool) -> str:
    """('env', 'LANG') -> env['LANG']; ('tags', 1) -> tags[1]; in TOML ('variants', 0, 'name') -> variants[0].name."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not text:
            text = clip(str(part))
        else:
            text += f".{clip(str(part))}" if toml else f"[{shown(part)}]"
    return text
