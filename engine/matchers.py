"""What `c.exec` returns: soft matchers that record their result and never raise."""

from __future__ import annotations

import re
from typing import Any

from .models import Validation


class ExecResult:
    def __init__(self, validation: Validation, exit_code: int | None, stdout: str, stderr: str):
        self._validation = validation
        self.exit_code = exit_code
        self.stdout = TextMatcher(self, "stdout", stdout)
        self.stderr = TextMatcher(self, "stderr", stderr)

    def _record(self, matcher: str, passed: bool, message: str) -> "ExecResult":
        v = self._validation
        v.evidence.setdefault("assertions", []).append(
            {"matcher": matcher, "passed": passed, "message": message})
        # A command that could not run (error) keeps that status whatever matchers say.
        if not passed and v.status == "passed":
            v.status = "failed"
        return self

    def to_succeed(self) -> "ExecResult":
        ok = self.exit_code == 0
        return self._record("to_succeed", ok, "exited 0" if ok else f"exited {self.exit_code}")

    def to_fail(self) -> "ExecResult":
        ok = self.exit_code not in (0, None)
        return self._record("to_fail", ok, f"exited {self.exit_code}")

    def __repr__(self) -> str:
        return f"ExecResult(exit_code={self.exit_code})"


class TextMatcher(str):
    """A command's stdout or stderr: a str with matchers that record into its validation."""

    def __new__(cls, result: ExecResult, stream: str, text: str) -> "TextMatcher":
        obj = super().__new__(cls, text)
        obj._result, obj._stream = result, stream  # type: ignore[attr-defined]
        return obj

    def _check(self, matcher: str, ok: bool, expected: Any) -> ExecResult:
        shown = str(self)
        preview = shown if len(shown) <= 200 else shown[:200] + "…"
        message = f"{self._stream} {matcher}({expected!r})" + ("" if ok else f": got {preview!r}")
        return self._result._record(f"{self._stream}.{matcher}", ok, message)  # type: ignore[attr-defined]

    def to_contain(self, text: str) -> ExecResult:
        return self._check("to_contain", text in self, text)

    def to_match(self, pattern: str) -> ExecResult:
        return self._check("to_match", re.search(pattern, self, re.MULTILINE) is not None, pattern)

    def to_equal(self, text: str) -> ExecResult:
        return self._check("to_equal", str(self).strip() == text.strip(), text)
