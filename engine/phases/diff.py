"""Diffs between two workspace trees read from outside the sandbox.

Git-style unified diffs, so the studio and any reader of the record can parse
them; binary files are named, never shown.
"""

from __future__ import annotations

import difflib

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


def tree_diff(before: Tree, after: Tree) -> tuple[str, list[str]]:
    """The unified diff from `before` to `after` and the paths that changed."""
    files = changed_files(before, after)
    out: list[str] = []
    for path in files:
        old, new = before.get(path), after.get(path)
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out.append("new file mode 100644\n")
        elif new is None:
            out.append("deleted file mode 100644\n")
        old_lines = _text(old or b"")
        new_lines = _text(new or b"")
        if old_lines is None or new_lines is None:
            out.append(f"Binary files {'a/' + path if old is not None else '/dev/null'} and "
                       f"{'b/' + path if new is not None else '/dev/null'} differ\n")
            continue
        body = difflib.unified_diff(
            old_lines, new_lines,
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
        for line in body:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out), files
