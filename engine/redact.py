"""The one place secrets are recognised (SPEC.md "Redaction").

Everything stored, shown, printed or exported passes through a `Redactor`
first, before any truncation (see `engine.limits`), so no fragment of a key
survives a cut. What is replaced:

1. the literal values of the trial's secrets and of secret-looking host
   variables, also as they appear JSON-escaped, URL-encoded, in base64 or
   base64url (at each of the three alignments), in hex and reversed;
2. the static patterns: prefixed API keys, JSON web tokens (and anything that
   starts like one), PEM private key blocks, the token after `Bearer`, the
   password in a URL, and the value of a password assignment
   (`password=…`, `"secret": "…"`, `passwd: …`).

Each run of overlapping or touching matches becomes one `MARK`.

Time is linear in the text whatever it holds: every pattern is written so that
a failed attempt costs a bounded number of steps (bounded or possessive
repeats), and a match that can grow without bound is a possessive run. The text
is read as UTF-8 in windows of `WINDOW` bytes; RE2 (a DFA, linear by
construction) tells which patterns and values occur in a window, and only those
are looked for with `re`. A match that runs past a window is continued into the
next, so memory stays bounded and `Redactor.stream` or `Redactor.head` give
exactly what `Redactor.text` gives, without reading what a cap drops.

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
from dataclasses import dataclass, field
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

_MARK = MARK.encode()
_BODY = rb"[A-Za-z0-9_\-]"
_RUN = re.compile(_BODY + rb"*+")


def _started(k: int) -> bytes:
    """Written just after a k-byte prefix: a key prefix inside a word ("task-…", "disk-…") is
    not a key; after an escape such as "\\n" in JSON, or a terminal colour code, it is."""
    return rb"(?:(?<![A-Za-z0-9].{%d})|(?<=\\[bfnrt].{%d})|(?<=[0-9;\[]m.{%d}))" % (k, k, k)


def _re2_literal(data: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in data)


@dataclass(frozen=True)
class _Rule:
    """One static pattern: a cheap test for RE2 first, then the pattern itself for re."""

    needs: bytes  # RE2 (Latin-1): holds wherever `pattern` matches; mostly absent from a window
    example: bytes  # a text that meets `needs`, to check that RE2 runs the set
    pattern: re.Pattern[bytes]
    group: int | None = 0  # the group masked; None: the first that took part, unless code
    tails: dict[int, re.Pattern[bytes]] = field(default_factory=dict)  # group -> its continuation
    back: int = 0  # the continuation restarts this far before the end of what was seen

    def masked(self, match: re.Match[bytes]) -> int | None:
        if self.group is not None:
            return self.group
        # The value's group is the one that took part; "code", the last group, marks code.
        return None if match.lastindex == self.pattern.groups else match.lastindex


def _key(prefix: bytes, body: bytes, needs: bytes) -> _Rule:
    # The body says how much makes a key ("sk-learn" is not one); then the whole rest of the word.
    pattern = re.compile(re.escape(prefix) + _started(len(prefix)) + body + _BODY + rb"*+")
    return _Rule(_re2_literal(prefix) + needs, prefix + b"A" * 40, pattern, tails={0: _RUN})


_CHAIN = _BODY + rb"*+(?:\." + _BODY + rb"++)*+"  # the rest of a dotted token: "…x.y.z"
_TOKEN = rb"[A-Za-z0-9._~+/=\-]"
_PEM_HEADER = rb"[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,20}-----"
# A PEM block without its END (a cut log) is redacted to the end of the text. Possessive, a
# run of dashes at a time.
_PEM_END = rb"(?<=-----)END " + _PEM_HEADER
_PEM_REST = rb"(?:[^-]++|-++(?!" + _PEM_END + rb"))*+(?:-++" + _PEM_END + rb"|\Z)"
_PEM_TAIL = re.compile(_PEM_REST)

# A value that is a word of these, not a path, variable, template, placeholder or list.
_VALUE_CHAR = rb"[^\s\"'`,;&|<>(){}\[\]\\]"
_VALUE_FIRST = rb"[^\s\"'`,;&|<>(){}\[\]\\$%=:#*/~.]"
_NOT_A_VALUE = (rb"(?i:true|false|yes|no|on|off|none|null|nil|undefined|enabled|disabled|default|"
                rb"required|optional|string|bytes|password|passwd|secret)(?!" + _VALUE_CHAR + rb")")
_IN_QUOTES = {q: rb"(?:[^%s\\\n]|\\.)" % q for q in (b'"', b"'")}
_IN_ESCAPED_QUOTES = rb'(?:[^"\\\n]|\\[^"\n])'  # JSON inside JSON: \"…\"
_ASSIGNED = (
    rb"(?:[_.\-][A-Za-z0-9_.\-]{0,64}+|[A-Z][A-Za-z0-9_.\-]{0,64}+)?"  # DB_PASSWORD_FILE, secretKey
    rb"(?:\\?[\"'])?[ \t]{0,16}+(?::=|=>|[:=])[ \t]{0,16}+"
    rb"(?:"
    + rb'\\"(' + _IN_ESCAPED_QUOTES + rb"{4}" + _IN_ESCAPED_QUOTES + rb"*+)"
    + rb'|"(' + _IN_QUOTES[b'"'] + rb"{4}" + _IN_QUOTES[b'"'] + rb"*+)"
    + rb"|'(" + _IN_QUOTES[b"'"] + rb"{4}" + _IN_QUOTES[b"'"] + rb"*+)"
    # A value followed by "(" or "[" is code (`password = getpass()`): matched, so that re moves
    # past it in one step, but left readable.
    + rb"|(?!" + _NOT_A_VALUE + rb")(" + _VALUE_FIRST + _VALUE_CHAR + rb"{3}" + _VALUE_CHAR
    + rb"*+)(?P<code>(?=[(\[]))?"
    rb")"
)
_ASSIGNED_NEEDS = rb"[A-Za-z0-9_.\-]*(?:\\?[\"'])?[ \t]*(?::=|=>|[:=])[ \t]*[^\t\n\f\r ]"
_ASSIGNED_TAILS = {1: re.compile(_IN_ESCAPED_QUOTES + rb"*+"),
                   2: re.compile(_IN_QUOTES[b'"'] + rb"*+"),
                   3: re.compile(_IN_QUOTES[b"'"] + rb"*+"),
                   4: re.compile(_VALUE_CHAR + rb"*+")}


def _assignment(keyword: bytes, rest: bytes, example: bytes) -> _Rule:
    """`keyword` as written (re finds a literal start quickly), `rest` in any case, then a value."""
    needs = _re2_literal(keyword) + b"(?i:" + rest + b")" + _ASSIGNED_NEEDS
    pattern = re.compile(re.escape(keyword) + b"(?i:" + rest + b")" + _ASSIGNED)
    return _Rule(needs, keyword + example + b"=abcd", pattern, None, _ASSIGNED_TAILS)


# "password", "Password", "PASSWORD" and the others, each its own rule: a rule that starts with
# a character class ([Pp]) makes re try every "p" of a text, five times slower.
_PASSWORDS = tuple(
    _assignment(written(keyword), rest, example)
    for keyword, rest, example in ((b"pass", rb"w(?:or)?d|phrase", b"word"), (b"pwd", b"", b""),
                                   (b"secret", b"", b""))
    for written in (bytes.lower, bytes.capitalize, bytes.upper)
)

_RULES: tuple[_Rule, ...] = (
    _Rule(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY", b"-----BEGIN PRIVATE KEY",
          re.compile(rb"-----BEGIN " + _PEM_HEADER + _PEM_REST), tails={0: _PEM_TAIL}, back=128),
    # JSON web tokens ("eyJ….eyJ….…"), and anything that starts like one: a cut one still goes.
    _Rule(rb"eyJ[A-Za-z0-9_\-]{8}|eyJ[A-Za-z0-9_\-]{1,7}\.eyJ[A-Za-z0-9_\-]", b"eyJabcdefgh",
          re.compile(rb"eyJ" + _started(3) + rb"(?:%s{8}|%s{1,7}+\.eyJ(?:%s{8}|%s{1,7}+\.))"
                     % ((_BODY,) * 4) + _CHAIN), tails={0: re.compile(_CHAIN)}),
    # Only the password goes: `postgres://app:[redacted]@db` keeps the address readable. A user
    # past 256 characters or a password past 1,024 is no URL's.
    _Rule(rb"://[^\t\n\f\r :/@?#]*:[^\t\n\f\r /?#\"'`<>]+@", b"://a:b@",
          re.compile(rb"://[^\s:/@?#]{0,256}+:([^\s/?#\"'`<>]{1,1024})@"), 1),
    _Rule(rb"(?i)bearer[ \t]+[A-Za-z0-9._~+/=\-]{8}", b"Bearer abcdefgh",
          re.compile(rb"[Bb][Ee][Aa][Rr][Ee][Rr]" + _started(6) + rb"[ \t]{1,16}+("
                     + _TOKEN + rb"{8}" + _TOKEN + rb"*+)"), 1, {1: re.compile(_TOKEN + rb"*+")}),
    # At least 8 body characters, so "sk-learn" stays; then the whole rest of the token.
    *[_key(prefix, _BODY + rb"{8}", rb"[A-Za-z0-9_\-]{8}")
      for prefix in (b"sk-", b"sk_live_", b"am_sk_", b"anp_", b"ghp_", b"github_pat_", b"xox")],
    _key(b"AKIA", rb"[A-Z0-9]{16}", rb"[A-Z0-9]{16}"),
    _key(b"AIza", _BODY + rb"{35}", rb"[A-Za-z0-9_\-]{35}"),
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


@functools.lru_cache(maxsize=64)
def _prefilter(forms: tuple[bytes, ...]) -> re2.Set | None:
    """One DFA pass telling which rules' anchors and which forms occur in a window.

    None if RE2 cannot run it (out of memory): then every rule and form is looked for."""
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.log_errors = False
    found = re2.Set.SearchSet(options)
    probe = []
    for rule in _RULES:
        found.Add(rule.needs)
        probe.append(rule.example)
    for form in forms:
        found.Add(_re2_literal(form))
    found.Compile()
    expected = len(_RULES) + len(forms)
    seen = found.Match(b"\n".join(probe + list(forms))) or []
    return found if len(set(seen)) == expected else None


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
            if not self._prefilter.Match(s.encode("utf-8", "surrogatepass")):
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

    def _present(self, view: memoryview) -> tuple[list[_Rule], list[bytes]]:
        """The rules and forms that can match in `view`."""
        if self._prefilter is None:
            return list(_RULES), list(self._forms)
        found = self._prefilter.Match(view) or ()
        rules = [_RULES[i] for i in sorted(found) if i < len(_RULES)]
        return rules, [self._forms[i - len(_RULES)] for i in sorted(found) if i >= len(_RULES)]


class RedactedStream:
    """Redacts a text arriving in pieces, one window of `WINDOW` bytes at a time.

    Windows lie at fixed offsets of the UTF-8 text, so the output never depends on how the
    text was cut into pieces. Memory holds one window and its look-ahead, whatever the text."""

    def __init__(self, redactor: Redactor):
        self._redactor = redactor
        self._buf = b""  # the text from byte offset _base on
        self._base = 0
        self._done = 0  # offset of the first byte not yet written
        self._spans: list[tuple[int, int]] = []  # masks found so far that reach past _done
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
        spans = [(begin - base, end - base) for begin, end in self._spans]
        opened = set()

        def keep_open(tail: re.Pattern[bytes] | None, end: int, back: int) -> None:
            if tail is not None and not ends and end >= hi - _SLACK:
                opened.add((tail, base + end - back, back))  # once: those inside a match end alike

        in_pem = False
        for tail, at, back in self._open:
            match = tail.match(buf, at - base, hi)
            spans.append(match.span())
            keep_open(tail, match.end(), back)
            in_pem |= tail is _PEM_TAIL and (tail, base + match.end() - back, back) in opened
        rules, forms = self._redactor._present(memoryview(buf)[first:hi])
        for rule in rules:
            if in_pem and rule.tails.get(0) is _PEM_TAIL:
                continue  # a block inside a block still open: its END is the same, or none
            matches = rule.pattern.finditer(buf, first, hi)
            if rule.group == 0:
                found = [m.span() for m in matches]
                found = found[:bisect.bisect_left(found, (last,))]  # the rest: the next window's
                spans += found
                group = 0
            else:
                if rule.group is None:
                    code = rule.pattern.groups
                    masked = [(m.start(), g, m) for m in matches if (g := m.lastindex) != code]
                else:
                    masked = [(m.start(), rule.group, m) for m in matches]
                masked = masked[:bisect.bisect_left(masked, (last,))]
                found = [m.span(g) for _, g, m in masked]
                spans += found
                group = masked[-1][1] if masked else 0
            if found:  # matches do not overlap: only the last can reach the end of the view
                keep_open(rule.tails.get(group), found[-1][1], rule.back)
        for form in forms:
            # Every occurrence, overlapping ones too: each may leave a different tail readable.
            limit = min(last + len(form) - 1, hi)
            found_at = buf.find(form, first, limit)
            while found_at >= 0:
                spans.append((found_at, found_at + len(form)))
                found_at = buf.find(form, found_at + 1, limit)
        self._open = sorted(opened, key=lambda o: o[1])

        out, written, carried = [], first, []
        masked_to = self._masked_to - base
        for begin, end in sorted(spans):
            if begin < first:
                begin = first
            if end <= begin:
                continue
            if begin >= last:
                carried.append((base + begin, base + end))
                continue
            if end > last:
                carried.append((stop, base + end))
                end = last
            if begin > masked_to:  # neither overlapping nor touching the last mark
                out.append(buf[written:begin])
                out.append(_MARK)
                masked_to = written = end
            elif end > masked_to:
                masked_to = written = end
        out.append(buf[written:last])
        self._spans, self._done, self._masked_to = carried, stop, base + masked_to
        return b"".join(out)


def holds_password_assignment(text: str) -> bool:
    """True when `text` assigns a password or secret a value other than `MARK`."""
    data = text.encode("utf-8", "surrogatepass")
    for rule in _PASSWORDS:
        for match in rule.pattern.finditer(data):
            group = rule.masked(match)
            if group is not None and match.group(group) != _MARK:
                return True
    return False


def redact(s: str, secrets: Iterable[str] = ()) -> str:
    return Redactor(secrets).text(s)
