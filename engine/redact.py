"""The one place secrets are recognised (SPEC.md "Redaction").

Everything stored, shown, printed or exported passes through a `Redactor`
first, before any truncation (see `engine.limits`), so no fragment of a key
survives a cut. Two compiled regexes find what to replace:

1. the literal values of the trial's secrets and of secret-looking host
   variables, also as they appear JSON-escaped or URL-encoded;
2. the static patterns: prefixed API keys, JSON web tokens, PEM private key
   blocks, the token after `Bearer`, the password in a URL.

Each run of overlapping or touching matches becomes one `MARK`.

Redaction never changes a verdict: checks read the raw data, never this.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from pydantic import BaseModel

MARK = "[redacted]"

# Shorter values would redact ordinary words and numbers all over a diff.
MIN_SECRET = 4
MIN_HOST_SECRET = 6

_BODY = r"[A-Za-z0-9_-]"
# Written just after a word's first character: a key prefix inside a word ("task-…",
# "disk-…") is not a key; after an escape such as "\n" in JSON, or the end of a terminal
# colour code ("\x1b[32m"), it is.
_STARTED = r"(?:(?<![A-Za-z0-9].)|(?<=\\[bfnrt].)|(?<=[0-9;\[]m.))"


def _word(prefix: str, rest: str) -> str:
    return re.escape(prefix[0]) + _STARTED + re.escape(prefix[1:]) + rest


# A match is masked whole, or only its one group when it has one: the part before stays
# readable. Every alternative starts with a plain character outside any group, so re skips
# ahead to the few characters that can start a match; that makes it fast on big diffs.
_PATTERNS = re.compile("|".join([
    # A PEM block without its END (a cut log) is redacted to the end of the text.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?s:.*?)"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\Z)",
    _word("eyJ", rf"{_BODY}+\.eyJ{_BODY}+\.{_BODY}*"),
    # Only the password goes: `postgres://app:[redacted]@db` keeps the address readable.
    r"://[^\s:/@?#]*:([^\s/?#\"'`<>]+)@",
    *[_word(b, r"(?i:earer)[ \t]+([A-Za-z0-9._~+/-]{8,}=*)") for b in "Bb"],
    # At least 8 body characters, so "sk-learn" stays; then the whole rest of the token.
    *[_word(prefix, rf"{_BODY}{{8}}{_BODY}*")
      for prefix in ["sk-", "sk_live_", "am_sk_", "anp_", "ghp_", "github_pat_", "xox"]],
    _word("AKIA", rf"[A-Z0-9]{{16}}{_BODY}*"),
    _word("AIza", rf"{_BODY}{{35}}{_BODY}*"),
]))

_SECRET_NAME = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET)$|PASSWORD", re.IGNORECASE)
# Belt and braces: these are never secrets, whatever their values look like.
_NEVER = {"PATH", "HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "TERM", "LANG",
          "HOSTNAME", "SHLVL", "TMPDIR", "EDITOR", "PAGER", "DISPLAY", "_"}
_ORDINARY = {"true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled",
             "default"}
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-+/=.]{20,}")
_HEX = re.compile(r"[0-9A-Fa-f-]+")
_WORD = re.compile(r"[A-Za-z0-9]+")


def _is_path(value: str) -> bool:
    return value.startswith(("/", "~", "./", "../"))


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def looks_like_token(value: str) -> bool:
    """True for a value such as an API key: long, random, one unbroken word."""
    if not _TOKEN_CHARS.fullmatch(value) or _is_path(value):
        return False
    # Commit ids, digests and UUIDs are hex; they are everywhere in diffs and logs.
    if _HEX.fullmatch(value):
        return False
    if not (re.search(r"[A-Za-z]", value) and re.search(r"[0-9]", value)):
        return False
    # Hostnames and version strings are made of short words; a token has a long random run.
    if max(len(w) for w in _WORD.findall(value)) < 16:
        return False
    return _entropy(value) >= 3.5


def host_secrets(host_env: Mapping[str, str]) -> list[str]:
    """The values of host variables whose names say secret or whose values look like tokens."""
    found = []
    for name, value in host_env.items():
        if name.upper() in _NEVER or name.upper().startswith(("LC_", "XDG_")):
            continue
        value = value.strip()
        if _SECRET_NAME.search(name):
            ordinary = value.lower() in _ORDINARY or _is_path(value)
            if len(value) >= MIN_HOST_SECRET and not ordinary:
                found.append(value)
        elif looks_like_token(value):
            found.append(value)
    return found


def _encodings(value: str) -> set[str]:
    """The forms a value takes inside JSON (also JSON in JSON) and inside URLs."""
    in_json = json.dumps(value)[1:-1]
    return {
        value,
        in_json,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(in_json)[1:-1],
        quote(value),
        quote(value, safe=""),
        quote_plus(value),
    }


class Redactor:
    """Replaces secrets with `MARK`; build one per trial and reuse it."""

    def __init__(self, secrets: Iterable[str] = (), host_env: Mapping[str, str] | None = None):
        values = [s for s in secrets if s and len(s.strip()) >= MIN_SECRET]
        values += host_secrets(host_env or {})
        forms = {form for v in values for form in _encodings(v)}
        # Longest first, so a secret that contains another is replaced whole.
        alternatives = sorted(forms, key=lambda f: (-len(f), f))
        self._secrets = re.compile("|".join(map(re.escape, alternatives))) if forms else None

    def text(self, s: str) -> str:
        # Both passes find their spans in the original text and the union is masked: replacing
        # a secret first could break a key around it ("sk-proj-[redacted]4") and leave a piece.
        spans = _pattern_spans(s)
        if self._secrets is not None:
            spans += self._value_spans(s)
        return _mask(s, spans)

    def value(self, obj: Any) -> Any:
        """`obj` with every string redacted: dict keys and values, lists, tuples, models."""
        if isinstance(obj, str):
            redacted = self.text(obj)
            return obj if redacted == obj else redacted  # keeps a str enum's type
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.value(v) for v in obj)
        if isinstance(obj, BaseModel):
            # Field by field, so nested models stay models and frozen or aliased models copy fine.
            return obj.model_copy(update={name: self.value(v) for name, v in obj})
        return obj

    def _value_spans(self, s: str) -> list[tuple[int, int]]:
        # Every occurrence, overlapping ones too: a plain sub() skips an occurrence that
        # overlaps the one before it and would leave its tail readable.
        spans = []
        match = self._secrets.search(s)
        while match:
            spans.append(match.span())
            match = self._secrets.search(s, match.start() + 1)
        return spans


def _pattern_spans(s: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    spans = []
    for match in _PATTERNS.finditer(s, start, len(s) if end is None else end):
        masked = match.lastindex or 0
        if match.group().startswith("://"):
            # The user part may itself be a key (https://ghp_…:x-oauth-basic@github.com).
            spans += _pattern_spans(s, match.start() + 3, match.start(masked))
        spans.append(match.span(masked))
    return spans


def _mask(s: str, spans: list[tuple[int, int]]) -> str:
    """`s` with each run of overlapping or touching spans replaced by one MARK."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts, kept = [], 0
    for start, end in merged:
        parts += [s[kept:start], MARK]
        kept = end
    parts.append(s[kept:])
    return "".join(parts)


def redact(s: str, secrets: Iterable[str] = ()) -> str:
    return Redactor(secrets).text(s)
