"""Diffs between two workspace trees read from outside the sandbox.

Git-style unified diffs, so the studio and any reader of the record can parse
them; binary files are named, never shown. The agent decides how much changes,
so a diff is bounded as it is made: a file larger than DIFF_SOURCE is named, not
diffed; a file's section past `file_limit` becomes one "too large" line; files
past `total_limit` are counted in a last line. Whole sections only, so no cut
falls inside a key before redaction; the record's caps (limits.cap_diff) apply
again after it. Trees read from a sandbox (`Tree`) are compared by size and hash,
and only the changed files the diff shows are read from disk, each at most
DIFF_SOURCE bytes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from .. import limits
from ..sandbox.tree import Tree

Files = Mapping[str, bytes]  # a Tree, or plain path -> content


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def changed_files(before: Files, after: Files) -> list[str]:
    if isinstance(before, Tree) and isinstance(after, Tree):
        return before.changed(after)
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def _header(path: str, old: bool, new: bool) -> str:
    header = f"diff --git a/{path} b/{path}\n"
    if not old:
        header += "new file mode 100644\n"
    elif not new:
        header += "deleted file mode 100644\n"
    return header


def file_diff(path: str, old: bytes | None, new: bytes | None,
              file_limit: int = limits.DIFF_FILE_READ) -> str:
    """One file's section of the diff from `old` to `new` (None: the file is absent)."""
    header = _header(path, old is not None, new is not None)
    size = max(len(old or b""), len(new or b""))
    if size > limits.DIFF_SOURCE:  # difflib's time grows faster than the file
        return limits.too_large(path, size, header)
    old_lines = _text(old or b"")
    new_lines = _text(new or b"")
    if old_lines is None or new_lines is None:
        return (header + f"Binary files {'a/' + path if old is not None else '/dev/null'} and "
                f"{'b/' + path if new is not None else '/dev/null'} differ\n")
    out = [header]
    body = difflib.unified_diff(
        old_lines, new_lines,
        fromfile=f"a/{path}" if old is not None else "/dev/null",
        tofile=f"b/{path}" if new is not None else "/dev/null",
    )
    length = len(header)
    for line in body:
        line = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        out.append(line)
        length += len(line)
        if length > file_limit:
            return limits.too_large(path, size, header)
    return "".join(out)


def _shown_size(files: Files, path: str) -> int:
    if path not in files:
        return 0
    return files.shown_size(path) if isinstance(files, Tree) else len(files[path])


def _file_size(files: Files, path: str) -> int:
    """A file's own size, kept or not."""
    if path not in files:
        return 0
    return (files.size(path) or 0) if isinstance(files, Tree) else len(files[path])


def _section(path: str, before: Files, after: Files, file_limit: int) -> str:
    """A changed file's section, its contents read only when the diff can show them."""
    size = max(_shown_size(before, path), _shown_size(after, path))
    if size > limits.DIFF_SOURCE:
        return limits.too_large(path, size, _header(path, path in before, path in after))
    old, new = before.get(path), after.get(path)
    if old == new:  # both shown by the same mark (`<large file: N bytes>`), though their hashes differ
        size = max(_file_size(before, path), _file_size(after, path))
        return limits.too_large(path, size, _header(path, old is not None, new is not None))
    return file_diff(path, old, new, file_limit)


def tree_diff(before: Files, after: Files, file_limit: int = limits.DIFF_FILE_READ,
              total_limit: int = limits.DIFF_TOTAL_READ) -> tuple[str, list[str]]:
    """The unified diff from `before` to `after` and the paths that changed. The diff stops
    reading once it passes `total_limit`: what is read is bounded too."""
    files = changed_files(before, after)
    out: list[str] = []
    length, left_out = 0, 0
    for path in files:
        if length > total_limit:
            left_out += 1
            continue
        section = _section(path, before, after, file_limit)
        out.append(section)
        length += len(section)
    if left_out:
        out.append(limits.left_out(left_out, total_limit))
    return "".join(out), files
