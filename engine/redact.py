"""The one place secrets are recognised (SPEC.md "Redaction").

Everything stored, shown, printed or exported passes through a `Redactor`
first, before any truncation (see `engine.limits`), so no fragment of a key
survives a cut. What is replaced:

1. the literal values of the trial's secrets and of secret-looking host
   variables, also as they appear JSON-escaped, URL-encoded, in base64 or
   base64url (at each of the three alignments), in hex and reversed;
2. the static patterns: prefixed API keys, JSON web tokens (and anything that
   starts like one), PEM private key blocks, the token after `Bearer`, the
   password in a URL, the value of a password assignment (`password=…`,
   `"secret": "…"`, `passwd: …`) and a password flag's next word
   (`--password hunter2`, `--client-secret "…"`).

Each run of overlapping or touching matches becomes one `MARK`.

Time is linear in the text whatever it holds: every pattern is written so that
a failed attempt costs a bounded number of steps (bounded or possessive
repeats), and a match that can grow without bound is a possessive run. The text
is read as UTF-8 in windows of `WINDOW` bytes; RE2 (a DFA, linear by
construction) tells which patterns and values occur in a window, and only those
are looked for with `re`. A match that runs past a window is continued into the
next, so memory stays bounded and `Redactor.stream` or `Redactor.head` give
exactly what `Redactor.text` gives, without reading what a cap drops.

A window with many matches costs no Python code per match: past `_SPARSE`
matches of a rule, the rest come from one `re.split` (the pattern's groups cover
each match, so the pieces' lengths give the positions), a value's occurrences
from one `bytes.replace`, and each is painted over a copy of the window (0xFF,
then 0xFE: bytes UTF-8 never holds); the copies are merged with one OR of big
integers and each painted run becomes one `MARK` in a `bytes.split` and a join.
RE2 is asked only questions whose automaton stays small (no counted repeats that
can run side by side), so no text makes its DFA build a state per byte.

Redaction never changes a verdict: checks read the raw data, never this.
"""

from __future__ import annotations

import base64
import bisect
import codecs
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate, islice
from operator import length_hint
from typing import Any
from urllib.parse import quote, quote_plus

import re2
from pydantic import BaseModel

MARK = "[redacted]"

# Shorter values would redact ordinary words and numbers all over a diff.
MIN_SECRET = 4
MIN_HOST_SECRET = 6
# Shorter values are not looked for in base64, hex or reversed: "abcd" is "61626364" in hex.
MIN_ENCODED = 8

WINDOW = 1 << 16  # bytes decided at a time
# The longest a bounded pattern can match, plus what deciding it needs to see (URL: 1.3 KB).
_LOOKAHEAD = 4096
_BACK = 16  # bytes kept before a window for the patterns' look-behinds
_SLACK = 2  # a run ending this close to what was seen may go on ("…ab." may become "…ab.cd")
_CHUNK = WINDOW  # characters encoded at a time
# Up to this many matches of one rule or value in a window are masked one by one; past it, the
# window is painted in one pass (fewer matches do not pay for copying the window).
_SPARSE = 64

_MARK = MARK.encode()
# A mask painted over the text: its first byte 0xFF, the rest 0xFE; no UTF-8 text holds either.
# An OR of a painted byte with anything is 0xFE or 0xFF, and a run of them starts with 0xFF.
_PAINT, _MORE = b"\xff", b"\xfe"


class _Paints(dict[int, bytes]):
    """The painting of a mask of each length (none for 0), the short ones kept."""

    def __missing__(self, size: int) -> bytes:
        painting = _PAINT + _MORE * (size - 1) if size else b""
        if size <= 256:
            self[size] = painting
        return painting


_PAINTS = _Paints()
_IS_PAINTED = bytes(int(b >= _MORE[0]) for b in range(256))  # translate: 1 where painted, else 0
_TO_MORE = bytes(_MORE[0] if b >= _MORE[0] else b for b in range(256))  # painted bytes: all _MORE
_RUNS = re.compile(rb"[\xfe\xff]+")
_BODY = rb"[A-Za-z0-9_\-]"
_RUN = re.compile(_BODY + rb"*+")
# What `_started` accepts before a prefix, for RE2 (which has no look-behind): the start of the
# window stands for whatever came before, so RE2 may say yes where re then finds nothing.
_STARTED_RE2 = rb"(?:^|[^A-Za-z0-9]|\\[bfnrt]|[0-9;\[]m)"


def _started(k: int) -> bytes:
    """Written just after a k-byte prefix: a key prefix inside a word ("task-…", "disk-…") is
    not a key; after an escape such as "\\n" in JSON, or a terminal colour code, it is."""
    return rb"(?:(?<![A-Za-z0-9].{%d})|(?<=\\[bfnrt].{%d})|(?<=[0-9;\[]m.{%d}))" % (k, k, k)


def _re2_literal(data: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in data)


@dataclass(frozen=True)
class _Rule:
    """One static pattern: a cheap test for RE2 first, then the pattern itself for re.

    The pattern's groups lie side by side and cover every match, so `split` returns each match
    whole, in pieces; one of them is masked."""

    # RE2 (Latin-1): each holds wherever `pattern` masks something; rules may share one. Counted
    # repeats only where two of them cannot run at once: the DFA of all rules together holds
    # the product of their states, and some texts would make it build a state per byte.
    needs: tuple[bytes, ...]
    example: bytes  # a text that meets `needs`, to check that RE2 runs the set
    pattern: re.Pattern[bytes]
    shortest: int  # the fewest bytes a match has
    masked: int = 1  # the group masked; a match where it takes no part is code, left readable
    optional: bool = False  # some group may take no part in a match (split gives None)
    # How the match goes on past what was seen, chosen by how the piece before the masked one
    # ends (a quote or not); the first suffix that fits.
    tails: tuple[tuple[bytes, re.Pattern[bytes]], ...] = ()
    back: int = 0  # the continuation restarts this far before the end of what was seen

    def tail(self, before: bytes | None) -> re.Pattern[bytes] | None:
        return next((tail for suffix, tail in self.tails if (before or b"").endswith(suffix)), None)


def _key(prefix: bytes, body: bytes, first: bytes, shortest: int) -> _Rule:
    # The body says how much makes a key ("sk-learn" is not one); then the whole rest of the word.
    pattern = re.compile(rb"(" + re.escape(prefix) + _started(len(prefix)) + body + _BODY + rb"*+)")
    return _Rule((_re2_literal(prefix) + first,), prefix + b"A" * 40, pattern,
                 len(prefix) + shortest, tails=((b"", _RUN),))


_CHAIN = _BODY + rb"*+(?:\." + _BODY + rb"++)*+"  # the rest of a dotted token: "…x.y.z"
_TOKEN = rb"[A-Za-z0-9._~+/=\-]"
_PEM_HEADER = rb"[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,20}-----"
# A PEM block without its END (a cut log) is redacted to the end of the text. Possessive, a
# run of dashes at a time.
_PEM_END = rb"(?<=-----)END " + _PEM_HEADER
_PEM_REST = rb"(?:[^-]++|-++(?!" + _PEM_END + rb"))*+(?:-++" + _PEM_END + rb"|\Z)"
_PEM_TAIL = re.compile(_PEM_REST)

# A value that is a word of these, not a path, variable, template, placeholder or list; a
# terminal's escape (ESC) ends it, as a colour code often follows.
_VALUE_CHAR = rb"[^\s\"'`,;&|<>(){}\[\]\\\x1b]"
_VALUE_FIRST = rb"[^\s\"'`,;&|<>(){}\[\]\\\x1b$%=:#*/~.]"
# Words that are no value: placeholders, type names (`password: str`) and numbers up to 3
# digits (`MIN_SECRET = 4`); a 1-character password is still one (`PASSWORD: x`).
_NO_VALUE = (rb"(?i:true|false|yes|no|on|off|none|null|nil|undefined|enabled|disabled|default|"
             rb"required|optional|string|bytes|password|passwd|secret|str|int|float|bool|"
             rb"boolean|any|object|number|char|dict|list|tuple|[iu](?:8|16|32|64|size)|"
             rb"[0-9]{1,3})")
_NOT_A_VALUE = _NO_VALUE + rb"(?!" + _VALUE_CHAR + rb")"
_STRING_PREFIX = rb"(?i:[fbru]|rb|br|fr|rf)[\"']"  # `password = f"{…}"` is code
# Blanks and terminal codes (colours, erase line) where a name meets its operator or value:
# `grep --color` prints `\x1b[01;31m\x1b[Kpassword\x1b[m\x1b[K=…`; source and JSON text write
# the escape as `\033`, `\x1b`, `\e` or `\u001b`. Bounded, each possessive.
_ESC = rb"(?:\x1b|\\(?:033|x1[bB]|e|u001[bB]))"
_CSI = _ESC + rb"\[[0-9;]{0,16}+[A-Za-z]"
_GAP = rb"(?:[ \t]{0,16}+" + _CSI + rb"){0,4}+[ \t]{0,16}+"
_GAP_RE2 = rb"(?:[ \t]|" + _ESC + rb"\[[0-9;]*[A-Za-z])*"
_OPERATOR = rb"(?::=|=>|[:=]|%3[Dd])"  # %3D: a query inside a URL-encoded one
_IN_QUOTES = {q: rb"(?:[^%s\\\n]|\\.)" % q for q in (b'"', b"'")}
_IN_ESCAPED_QUOTES = rb'(?:[^"\\\n]|\\[^"\n])'  # JSON inside JSON: \"…\"
# A value of 4 characters or more; a shorter one only where it ends the assignment: its closing
# quote, or for a word the end of the line or a delimiter, not more words (`secret: The key`).
_WORD_VALUE = (rb"(?<![\"'])(?!" + _NOT_A_VALUE + rb")(?!" + _STRING_PREFIX + rb")" + _VALUE_FIRST
               + rb"(?:" + _VALUE_CHAR + rb"{3}" + _VALUE_CHAR + rb"*+|" + _VALUE_CHAR
               + rb"{0,2}+(?!" + _VALUE_CHAR + rb")(?![ \t]++[^\s]))")


def _quoted(char: bytes, close: bytes) -> bytes:
    """A quoted value of `char`s: 4 or more, or 1 to 3 that its closing quote ends."""
    return (char + rb"{4}" + char + rb"*+|(?!" + _NO_VALUE + close + rb")" + char + rb"{1,3}+(?="
            + close + rb")")


# Group 1: the name's rest, the operator and an opening quote; group 2: the value; group 3: a
# value followed by "(" or "[", which is code (`password = getpass()`): matched, so that re
# moves past it in one step, but left readable. A value's look-behind checks the quote group 1
# ended with.
_ASSIGNED = (
    rb"(?:[_.\-][A-Za-z0-9_.\-]{0,64}+|[A-Z][A-Za-z0-9_.\-]{0,64}+)?"  # DB_PASSWORD_FILE, secretKey
    rb"(?:\\?[\"'])?" + _GAP + _OPERATOR + _GAP + rb"(?:\\\"|\"|'|))"
    rb"(?:("
    + rb'(?<=\\")(?:' + _quoted(_IN_ESCAPED_QUOTES, rb'\\"') + rb")"
    + rb'|(?<!\\")(?<=")(?:' + _quoted(_IN_QUOTES[b'"'], b'"') + rb")"
    + rb"|(?<=')(?:" + _quoted(_IN_QUOTES[b"'"], b"'") + rb")"
    + rb"|" + _WORD_VALUE + rb"(?![(\[])"
    rb")|(" + _WORD_VALUE + rb"(?=[(\[])))"
)
# The same for RE2, without what it lacks (look-behind, possessive and bounded repeats, the
# words that are no value) and without code: a word value must end in something else than "(".
_VALUE_CHAR_RE2 = rb"[^\t\n\v\f\r \"'`,;&|<>(){}\[\]\\\x1b]"
_ASSIGNED_NEEDS = (
    rb"(?:[_.\-][A-Za-z0-9_.\-]*|[A-Z][A-Za-z0-9_.\-]*)?(?:\\?[\"'])?" + _GAP_RE2
    + rb"(?::=|=>|[:=]|%3[Dd])" + _GAP_RE2
    + rb"(?:\\\"(?:[^\"\\\n]|\\[^\"\n])|\"(?:[^\"\\\n]|\\[^\n])|'(?:[^'\\\n]|\\[^\n])"
    rb"|[^\t\n\v\f\r \"'`,;&|<>(){}\[\]\\\x1b$%=:#*/~.]"
    rb"(?:" + _VALUE_CHAR_RE2 + rb"{3}" + _VALUE_CHAR_RE2 + rb"*(?:[\t\n\v\f\r \"'`,;&|<>){}\]\\\x1b]|$)"
    rb"|" + _VALUE_CHAR_RE2 + rb"{0,2}(?:[\n\v\f\r\"'`,;&|<>){}\]\\\x1b]|[ \t]*(?:[\n\v\f\r]|$))))"
)
_ASSIGNED_TAILS = ((b'\\"', re.compile(_IN_ESCAPED_QUOTES + rb"*+")),
                   (b'"', re.compile(_IN_QUOTES[b'"'] + rb"*+")),
                   (b"'", re.compile(_IN_QUOTES[b"'"] + rb"*+")),
                   (b"", re.compile(_VALUE_CHAR + rb"*+")))


def _assignment(keyword: bytes, rest: bytes, example: bytes) -> _Rule:
    """`keyword` as written (re finds a literal start quickly), `rest` in any case, then a value."""
    # The whole test is shared by all nine (the counted repeats of nine would multiply); the
    # keyword as written, up to the operator, says which of them to run.
    needs = (_re2_literal(keyword) + b"(?i:" + rest + rb")[A-Za-z0-9_.\-]*(?:\\?[\"'])?" + _GAP_RE2
             + rb"(?:[:=]|%3[Dd])",
             rb"(?i:pass(?:w(?:or)?d|phrase)|pwd|secret)" + _ASSIGNED_NEEDS)
    pattern = re.compile(b"(" + re.escape(keyword) + b"(?i:" + rest + b")" + _ASSIGNED)
    return _Rule(needs, keyword + example + b"=abcd", pattern, len(keyword) + 2, masked=2,
                 optional=True, tails=_ASSIGNED_TAILS)


# "password", "Password", "PASSWORD" and the others, each its own rule: a rule that starts with
# a character class ([Pp]) makes re try every "p" of a text, five times slower.
_KEYWORD = rb"(?i:pass(?:w(?:or)?d|phrase)|pwd|secret)"
# A flag's next word: `mysql --password hunter2`, `--client-secret "two words"`. Up to four
# words before the keyword (`--db-admin-password`), each bounded, so a failed try is bounded;
# a value starting with "-" is the next flag (`--password-stdin -u bob`).
_FLAG = _Rule(
    (rb"--(?:[A-Za-z0-9]+[_\-])*" + _KEYWORD + rb"(?:[_\-][A-Za-z0-9_\-]*)?[ \t]+[\"']?"
     rb"[^\t\n\v\f\r \"'`,;&|<>(){}\[\]\\\x1b$%=:#*/~.\-]",),
    b"--password abcd",
    re.compile(rb"(--(?:[A-Za-z0-9]{1,32}+[_\-]){0,4}?" + _KEYWORD
               + rb"(?:[_\-][A-Za-z0-9_\-]{0,64}+)?[ \t]{1,16}+[\"']?)("
               + rb'(?<=")(?:' + _quoted(_IN_QUOTES[b'"'], b'"') + rb")"
               + rb"|(?<=')(?:" + _quoted(_IN_QUOTES[b"'"], b"'") + rb")"
               + rb"|(?!-)" + _WORD_VALUE + rb"(?![(\[]))"),
    len(b"--pwd a"), masked=2, tails=_ASSIGNED_TAILS)
_PASSWORDS = (
    *(_assignment(written(keyword), rest, example)
      for keyword, rest, example in ((b"pass", rb"w(?:or)?d|phrase", b"word"), (b"pwd", b"", b""),
                                     (b"secret", b"", b""))
      for written in (bytes.lower, bytes.capitalize, bytes.upper)),
    _FLAG,
)

_PEM = _Rule((rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----",), b"-----BEGIN PRIVATE KEY-----",
             re.compile(rb"(-----BEGIN " + _PEM_HEADER + _PEM_REST + rb")"), 27,
             tails=((b"", _PEM_TAIL),), back=128)
_RULES: tuple[_Rule, ...] = (
    _PEM,
    # JSON web tokens ("eyJ….eyJ….…"), and anything that starts like one: a cut one still goes.
    _Rule((rb"eyJ[A-Za-z0-9_\-]",), b"eyJabcdefgh",
          re.compile(rb"(eyJ" + _started(3) + rb"(?:%s{8}|%s{1,7}+\.eyJ(?:%s{8}|%s{1,7}+\.))"
                     % ((_BODY,) * 4) + _CHAIN + rb")"), 11, tails=((b"", re.compile(_CHAIN)),)),
    # Only the password goes: `postgres://app:[redacted]@db` keeps the address readable. A user
    # past 256 characters or a password past 1,024 is no URL's.
    _Rule((rb"://[^\t\n\v\f\r :/@?#]*:[^\t\n\v\f\r /?#\"'`<>]+@",), b"://a:b@",
          re.compile(rb"(://[^\s:/@?#]{0,256}+:)([^\s/?#\"'`<>]{1,1024})(?=@)"), 5, masked=2),
    # A token cannot hold the blank after another "Bearer": one count runs at a time.
    _Rule((_STARTED_RE2 + rb"(?i:bearer)[ \t]+[A-Za-z0-9._~+/=\-]{8}",), b"Bearer abcdefgh",
          re.compile(rb"([Bb][Ee][Aa][Rr][Ee][Rr]" + _started(6) + rb"[ \t]{1,16}+)("
                     + _TOKEN + rb"{8}" + _TOKEN + rb"*+)"), 15, masked=2,
          tails=((b"", re.compile(_TOKEN + rb"*+")),)),
    # At least 8 body characters, so "sk-learn" stays; then the whole rest of the token.
    *[_key(prefix, _BODY + rb"{8}", _BODY, 8)
      for prefix in (b"sk-", b"sk_live_", b"am_sk_", b"anp_", b"ghp_", b"github_pat_", b"xox")],
    _key(b"AKIA", rb"[A-Z0-9]{16}", rb"[A-Z0-9]", 16),
    _key(b"AIza", _BODY + rb"{35}", _BODY, 35),
    *_PASSWORDS,
)

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


def _base64_forms(data: bytes) -> set[str]:
    """`data` inside a longer base64 stream: the characters only its own bits decide, at each
    of the three byte alignments, in both alphabets. The edge characters mix in bits of the
    bytes around it and are left; they hold at most 4 bits of the value each."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode()
        stable = encoded[-(-8 * offset // 6): 8 * (offset + len(data)) // 6]
        forms |= {stable, stable.replace("+", "-").replace("/", "_")}
    return forms


def _encodings(value: str) -> set[str]:
    """The forms a value takes inside JSON (also JSON in JSON), URLs, base64, hex, or reversed."""
    in_json = json.dumps(value)[1:-1]
    forms = {value, in_json, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(in_json)[1:-1]}
    data = value.encode("utf-8", "surrogatepass")
    try:
        forms |= {quote(value), quote(value, safe=""), quote_plus(value)}
    except UnicodeEncodeError:  # a lone surrogate (an undecodable byte in the environment)
        pass
    if len(value) >= MIN_ENCODED:
        forms |= _base64_forms(data) | {data.hex(), data.hex().upper(), value[::-1]}
    return forms


# Each test is one entry of the set; a rule runs where all of its tests hold.
_NEEDS = tuple(dict.fromkeys(needs for rule in _RULES for needs in rule.needs))
_RULE_NEEDS = tuple((rule, {_NEEDS.index(needs) for needs in rule.needs}) for rule in _RULES)


# Few sets: each may grow a DFA of up to RE2's max_mem (8 MB), and a batch's trials share one
# set of secret values; a long-running studio must not keep dozens.
@functools.lru_cache(maxsize=8)
def _prefilter(forms: tuple[bytes, ...]) -> re2.Set | None:
    """One DFA pass telling which rules may match and which forms occur in a window.

    None if RE2 cannot run it (out of memory): then every rule and form is looked for."""
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.log_errors = False
    found = re2.Set.SearchSet(options)
    for needs in _NEEDS:
        found.Add(needs)
    for form in forms:
        found.Add(_re2_literal(form))
    found.Compile()
    probe = [rule.example for rule in _RULES] + list(forms)
    seen = found.Match(b"\n".join(probe)) or []
    return found if len(set(seen)) == len(_NEEDS) + len(forms) else None


class Redactor:
    """Replaces secrets with `MARK`; build one per trial and reuse it (it is thread-safe)."""

    def __init__(self, secrets: Iterable[str] = (), host_env: Mapping[str, str] | None = None):
        values = [s for s in secrets if s and len(s.strip()) >= MIN_SECRET]
        values += host_secrets(host_env or {})
        forms = {form.encode("utf-8", "surrogatepass") for v in values for form in _encodings(v)}
        # Longest first, so that a form holding another is the one reported when both occur.
        self._forms = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        self._prefilter = _prefilter(self._forms)
        self._lookahead = max([_LOOKAHEAD, *(len(f) + _SLACK for f in self._forms)])

    def text(self, s: str) -> str:
        if len(s) < MIN_SECRET:
            return s
        if len(s) <= _CHUNK and self._prefilter is not None:
            # Most strings hold nothing to redact: one RE2 pass says so.
            if self._present(s.encode("utf-8", "surrogatepass")) == ([], []):
                return s
        stream = self.stream()
        pieces = [stream.feed(s[i:i + _CHUNK]) for i in range(0, len(s), _CHUNK)]
        pieces.append(stream.close())
        return "".join(pieces)

    def head(self, s: str, limit: int, complete: bool = True) -> tuple[str, bool]:
        """`text(s)[:limit]` and whether more follows, redacting only about as much as it keeps.

        With `complete=False`, `s` is the start of a longer text (cut while reading): what only
        the rest could decide (a key that may go on past the cut) is left out, never shown."""
        stream, pieces, size = self.stream(), [], 0
        for i in range(0, len(s), _CHUNK):
            pieces.append(stream.feed(s[i:i + _CHUNK]))
            size += len(pieces[-1])
            if size > limit:
                return "".join(pieces)[:limit], True
        pieces.append(stream.close() if complete else stream.cut())
        out = "".join(pieces)
        return out[:limit], len(out) > limit or not complete

    def stream(self) -> RedactedStream:
        """Redacts one text given in pieces: what `feed` and `close` return, joined, is `text`."""
        return RedactedStream(self)

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

    def _present(self, view: bytes | memoryview) -> tuple[list[_Rule], list[bytes]]:
        """The rules and forms that can match in `view`."""
        if self._prefilter is None:
            return list(_RULES), list(self._forms)
        found = set(self._prefilter.Match(view) or ())
        rules = [rule for rule, needs in _RULE_NEEDS if needs <= found]
        return rules, [form for i, form in enumerate(self._forms, len(_NEEDS)) if i in found]


class _Canvas:
    """The masks of one window, buf[first:last] with its look-ahead up to hi, and its output.

    A few masks are kept as spans and written as the window always was. A rule or value with
    many matches hands in a painted copy of the view instead (a layer); then the spans are
    painted too, the layers merged in one OR of big integers, and each run of painted bytes
    becomes one MARK."""

    def __init__(self, buf: bytes, first: int, last: int, hi: int):
        self._buf, self._first, self._last, self._hi = buf, first, last, hi
        self.spans: list[tuple[int, int]] = []  # masks in buf; empty or reversed ones mask nothing
        self._layers: list[bytes] = []

    def layer(self, begin: int, painted: bytes) -> None:
        """`painted` is buf[begin:begin + len(painted)] with its masks painted."""
        buf, first = self._buf, self._first
        self._layers.append(buf[first:begin] + painted + buf[begin + len(painted):self._hi])

    def write(self, masked_to: int) -> tuple[bytes, int, list[tuple[int, int]]]:
        """The masked text from first to last; where its last MARK ends (`masked_to`: where
        the one before ended); and the masks that go on past last."""
        if self._layers:
            return self._write_painted(masked_to)
        buf, first, last = self._buf, self._first, self._last
        out, written, carried = [], first, []
        for begin, end in sorted(self.spans):
            begin = max(begin, first)
            if end <= begin:
                continue
            if begin >= last:
                carried.append((begin, end))
                continue
            if end > last:
                carried.append((last, end))
                end = last
            if begin > masked_to:  # neither overlapping nor touching the last mark
                out.append(buf[written:begin])
                out.append(_MARK)
                masked_to = written = end
            elif end > masked_to:
                masked_to = written = end
        out.append(buf[written:last])
        return b"".join(out), masked_to, carried

    def _write_painted(self, masked_to: int) -> tuple[bytes, int, list[tuple[int, int]]]:
        first, size = self._first, self._last - self._first
        painted = self._layers[0] if len(self._layers) == 1 else _union(self._layers)
        if self.spans:
            # Over painted bytes too: a run that gets a second `_PAINT` is still one run.
            painted = bytearray(painted)
            for begin, end in self.spans:
                begin = max(begin, first)
                if end > begin:
                    painted[begin - first:end - first] = _PAINTS[end - begin]
        out = _marked(painted[:size], going_on=masked_to == first)
        # Past last only what starts before it is painted: a match of each rule, a few values.
        carried = [(first + m.start(), first + m.end()) for m in _RUNS.finditer(painted, size)]
        return out, (self._last if painted[size - 1] >= _MORE[0] else first - 1), carried


def _union(layers: list[bytes]) -> bytes:
    """The layers painted over each other: a byte painted in one is painted, and each run of
    painted bytes starts with `_PAINT` again (an OR with text may have turned `_MORE` into it)."""
    size = len(layers[0])
    # OR sets every bit of a painted byte (0xFE or 0xFF), and the text is the same in all layers.
    union = functools.reduce(int.__or__, (int.from_bytes(layer, "big") for layer in layers))
    painted = union.to_bytes(size, "big")
    flags = int.from_bytes(painted.translate(_IS_PAINTED), "big")
    starts = flags & ~(flags >> 8)  # painted, and the byte before is not (big-endian: >> 8 is +1)
    return (int.from_bytes(painted.translate(_TO_MORE), "big") | starts).to_bytes(size, "big")


def _marked(painted: bytes, going_on: bool) -> bytes:
    """`painted` with each run of painted bytes as one MARK; `going_on`: a run at its very start
    continues the MARK already written (it may start with `_MORE`)."""
    painted = painted.translate(None, _MORE)  # each run keeps its first byte, and maybe more
    pieces = painted.split(_PAINT)
    if len(pieces) == 1:
        return painted
    text = _MARK.join(filter(None, pieces))  # touching or overlapping masks: one run, one MARK
    if not text:
        return b"" if going_on else _MARK
    lead = b"" if pieces[0] or going_on else _MARK
    return lead + text + (b"" if pieces[-1] else _MARK)


def _mask_rule(rule: _Rule, buf: bytes, first: int, last: int, hi: int,
               canvas: _Canvas) -> tuple[re.Pattern[bytes] | None, int] | None:
    """Masks the matches of `rule` in buf[first:hi] that start before `last`; returns the
    continuation of the last masked one and where it ends (to go on in the next window)."""
    found = list(islice(rule.pattern.finditer(buf, first, hi), _SPARSE + 1))
    while found and found[-1].start() >= last:  # the next window's
        found.pop()
    masked = rule.masked
    canvas.spans += [match.span(masked) for match in found[:_SPARSE]]  # code: (-1, -1)
    if len(found) > _SPARSE:  # many: the rest in one pass
        return _paint_rule(rule, buf, found[-1].start(), last, hi, canvas)
    if not found or found[-1].start(masked) < 0:
        return None
    return rule.tail(found[-1].group(masked - 1)), found[-1].end(masked)


def _paint_rule(rule: _Rule, buf: bytes, start: int, last: int, hi: int,
                canvas: _Canvas) -> tuple[re.Pattern[bytes] | None, int] | None:
    """`_mask_rule` from a match at `start` on, for many matches: one split, no code per match."""
    # Past a match's start every look-behind sees what it needs (a match starts after a whole
    # prefix), so splitting from there gives finditer's matches, each cut into its groups.
    pieces = rule.pattern.split(memoryview(buf)[start:hi])
    step = rule.pattern.groups + 1  # a gap, then a match's groups
    count = (len(pieces) - 1) // step
    # Where pieces start, counted from the end, for the matches that may start at or past `last`
    # (the next window's) and the one before: matches are at least `shortest` long.
    known = step * ((hi - last) // rule.shortest + 2) + 1
    starts = [hi - n for n in accumulate(map(length_hint, islice(reversed(pieces), known)))]

    def at(i: int) -> int:  # where piece i starts
        return starts[len(pieces) - 1 - i]

    lowest = max(0, -(-(len(pieces) - len(starts) - 1) // step))  # first match with a known start
    kept = bisect.bisect_left(range(lowest, count), last, key=lambda j: at(j * step + 1)) + lowest
    if kept == lowest > 0:  # a match shorter than `shortest`: never expected, but count them all
        starts = [hi - n for n in accumulate(map(length_hint, reversed(pieces)))]
        kept = bisect.bisect_left(range(count), last, key=lambda j: at(j * step + 1))
    masked = slice(rule.masked, (kept - 1) * step + rule.masked + 1, step)
    pieces[masked] = map(_PAINTS.__getitem__, map(length_hint, pieces[masked]))  # None (code): 0
    canvas.layer(start, b"".join(filter(None, pieces) if rule.optional else pieces))
    i = masked.stop - 1  # the last kept match's masked group
    if not pieces[i]:
        return None  # code: nothing masked goes on
    return rule.tail(pieces[i - 1]), at(i) + len(pieces[i])


@functools.lru_cache(maxsize=256)
def _overlaps(form: bytes) -> tuple[tuple[bytes, ...], re.Pattern[bytes]]:
    """What two overlapping occurrences of `form` read as (one per period of `form`), and a
    pattern that stops at every occurrence, overlapping ones too."""
    n = len(form)
    periods = [d for d in range(1, n) if form[d:] == form[:n - d]]
    at_each = re.compile(re.escape(form[:1]) + b"(?=" + re.escape(form[1:]) + b")")
    return tuple(form[:d] + form for d in periods), at_each


def _mask_form(form: bytes, buf: bytes, first: int, stop: int, canvas: _Canvas) -> None:
    """Masks every occurrence of `form` in buf[first:stop], overlapping ones too."""
    region = buf[first:stop]
    count = region.count(form)
    if not count:
        return
    if count <= _SPARSE:
        found_at = region.find(form)
        while found_at >= 0:
            canvas.spans.append((first + found_at, first + found_at + len(form)))
            found_at = region.find(form, found_at + 1)
        return
    doubles, at_each = _overlaps(form)
    if not any(double in region for double in doubles):
        canvas.layer(first, region.replace(form, _PAINTS[len(form)]))
        return
    # Split after the first byte of every occurrence: each piece is the rest of one, covered
    # for len(form) - 1 bytes or up to the next occurrence, whichever comes first.
    pieces = at_each.split(region)
    size, whole = len(form), _PAINTS[len(form)]
    canvas.layer(first, pieces[0] + b"".join([
        _PAINTS[len(piece) + 1] if len(piece) < size else whole + piece[size - 1:]
        for piece in pieces[1:]]))


class RedactedStream:
    """Redacts a text arriving in pieces, one window of `WINDOW` bytes at a time.

    Windows lie at fixed offsets of the UTF-8 text, so the output never depends on how the
    text was cut into pieces. Memory holds one window and its look-ahead, whatever the text."""

    def __init__(self, redactor: Redactor):
        self._redactor = redactor
        self._buf = b""  # the text from byte offset _base on
        self._base = 0
        self._done = 0  # offset of the first byte not yet written
        # What earlier matches mask from _done on.
        self._carried: list[tuple[int, int]] = []
        self._open: list[tuple[re.Pattern[bytes], int, int]] = []  # (tail, resume at, back)
        self._masked_to = -1  # end of the last MARK written
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")

    def feed(self, text: str) -> str:
        """The redacted text that what was fed so far decides."""
        self._buf += text.encode("utf-8", "surrogatepass")
        out = []
        while self._end >= self._done + WINDOW + self._redactor._lookahead:
            out.append(self._window(self._done + WINDOW, complete=False))
        self._compact()
        return self._decoder.decode(b"".join(out))

    def close(self) -> str:
        """The rest of the redacted text: the text ends here."""
        out = []
        while self._done < self._end:
            out.append(self._window(min(self._done + WINDOW, self._end), complete=True))
        return self._decoder.decode(b"".join(out), final=True)

    def cut(self) -> str:
        """The rest that is decided when the text goes on but is read no further: the last
        look-ahead's worth is left out, and a mask still open ends the output."""
        out, stop = [], self._end - self._redactor._lookahead
        while self._done < stop:
            out.append(self._window(min(self._done + WINDOW, stop), complete=False))
        return self._decoder.decode(b"".join(out))  # a character cut in half is left out

    @property
    def _end(self) -> int:
        return self._base + len(self._buf)

    def _compact(self) -> None:
        drop = self._done - _BACK - self._base
        if drop > 0:
            self._buf, self._base = self._buf[drop:], self._base + drop

    def _window(self, stop: int, complete: bool) -> bytes:
        """Writes the text from _done to `stop`, masked; keeps what goes on past it.

        Offsets are in `_buf` here, absolute (from the text's start) in what is kept."""
        buf, base = self._buf, self._base
        first, last = self._done - base, stop - base
        hi = min(last + self._redactor._lookahead, len(buf))
        ends = complete and hi == len(buf)  # nothing past the view: no match goes on
        canvas = _Canvas(buf, first, last, hi)
        canvas.spans += [(begin - base, end - base) for begin, end in self._carried]
        opened = set()

        def keep_open(tail: re.Pattern[bytes] | None, end: int, back: int) -> None:
            if tail is not None and not ends and end >= hi - _SLACK:
                opened.add((tail, base + end - back, back))  # once: those inside a match end alike

        in_pem = False
        for tail, at, back in self._open:
            match = tail.match(buf, at - base, hi)
            canvas.spans.append(match.span())
            keep_open(tail, match.end(), back)
            in_pem |= tail is _PEM_TAIL and (tail, base + match.end() - back, back) in opened
        rules, forms = self._redactor._present(memoryview(buf)[first:hi])
        for rule in rules:
            if in_pem and rule is _PEM:
                continue  # a block inside a block still open: its END is the same, or none
            going_on = _mask_rule(rule, buf, first, last, hi, canvas)
            if going_on is not None:  # matches do not overlap: only the last can reach the end
                keep_open(*going_on, rule.back)
        for form in forms:
            # Every occurrence that starts in this window, overlapping ones too: each may leave
            # a different tail readable.
            _mask_form(form, buf, first, min(last + len(form) - 1, hi), canvas)
        self._open = sorted(opened, key=lambda o: o[1])

        out, masked_to, carried = canvas.write(self._masked_to - base)
        self._done, self._masked_to = stop, base + masked_to
        self._carried = [(base + begin, base + end) for begin, end in carried]
        return out


def holds_password_assignment(text: str) -> bool:
    """True when `text` assigns a password or secret a value other than `MARK`."""
    data = text.encode("utf-8", "surrogatepass")
    for rule in _PASSWORDS:
        for match in rule.pattern.finditer(data):
            value = match.group(rule.masked)
            if value is not None and value != _MARK:
                return True
    return False


def redact(s: str, secrets: Iterable[str] = ()) -> str:
    return Redactor(secrets).text(s)
