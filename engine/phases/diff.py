"""Diffs between two workspace trees read from outside the sandbox.

Git-style unified diffs, so the studio and any reader of the record can parse
them; binary files are named, never shown. The agent decides how much changes,
so a diff is bounded as it is made: a file larger than DIFF_SOURCE is named, not
diffed; a file's section past `file_limit` becomes one "too large" line; files
past `total_limit` are counted in a last line. Whole sections only, so no cut
falls inside a key before redaction; the record's caps (limits.cap_diff) apply
again after it.
"""

from __future__ import annotations

import difflib

from .. import limits

Tree = dict[str, bytes]


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def changed_files(before: Tree, after: Tree) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def file_diff(path: str, old: bytes | None, new: bytes | None,
              file_limit: int = limits.DIFF_FILE_READ) -> str:
    """One file's section of the diff from `old` to `new` (None: the file is absent)."""
    header = f"diff --git a/{path} b/{path}\n"
    if old is None:
        header += "new file mode 100644\n"
    elif new is None:
        header += "deleted file mode 100644\n"
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


def tree_diff(before: Tree, after: Tree, file_limit: int = limits.DIFF_FILE_READ,
              total_limit: int = limits.DIFF_TOTAL_READ) -> tuple[str, list[str]]:
    """The unified diff from `before` to `after` and the paths that changed."""
    files = changed_files(before, after)
    out: list[str] = []
    length, left_out = 0, 0
    for path in files:
        if length > total_limit:
            left_out += 1
            continue
        section = file_diff(path, before.get(path), after.get(path), file_limit)
        out.append(section)
        length += len(section)
    if left_out:
        out.append(limits.left_out(left_out, total_limit))
    return "".join(out), files
