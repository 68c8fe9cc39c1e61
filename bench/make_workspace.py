#!/usr/bin/env python3
"""Builds a workspace of issue 16's shape from files already on the machine: Python's
standard library plus installed site-packages, about 8,000 files and 190 MB, as a git
repository with one commit. Bytecode caches are left out (the diff skips them too).

    python bench/make_workspace.py /tmp/proctor-bench-ws [--files 8000] [--mb 190]

Prints the folder, its files and size. Kept when it exists already (pass --fresh to remake).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sources() -> list[Path]:
    """Folders to copy from, the standard library first, then every site-packages found."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    seen = [stdlib]
    for site in sorted((ROOT / ".venv" / "lib").glob("python3*/site-packages")) + [
            Path("/usr/lib/python3/dist-packages")]:
        if site.is_dir():
            seen.extend(sorted(p for p in site.iterdir() if p.is_dir() and p.name != "__pycache__"))
    return seen


def _files(source: Path) -> list[Path]:
    return sorted(p for p in source.rglob("*")
                  if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def build(dest: Path, files: int, mb: int) -> tuple[int, int]:
    """Copies whole packages (the standard library's top-level modules and folders first, then
    site-packages') into `dest/lib` until it holds about `files` files and `mb` MB, then makes
    it a git repository with one commit."""
    have_files = have_bytes = 0
    units = [p for s in _sources()[:1] for p in sorted(s.iterdir()) if p.name not in ("site-packages", "test")]
    units += _sources()[1:]
    for unit in units:
        chosen = [unit] if unit.is_file() else _files(unit)
        size = sum(p.stat().st_size for p in chosen)
        if have_files + len(chosen) > files * 1.02 or have_bytes + size > mb * 1.02e6:
            continue  # too big for what is left: try a smaller one
        left_files, left_bytes = files - have_files, mb * 1e6 - have_bytes
        if chosen and left_files > 0 and size / len(chosen) < 0.5 * left_bytes / left_files:
            continue  # files too small to reach the size by the count: try bigger ones
        for path in chosen:
            target = dest / "lib" / unit.name / path.relative_to(unit) if unit.is_dir() else dest / "lib" / unit.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        have_files, have_bytes = have_files + len(chosen), have_bytes + size
        if have_files >= files * 0.97 and have_bytes >= mb * 0.97e6:
            break
    git = ["git", "-C", str(dest), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A", "-f"], check=True)
    subprocess.run([*git, "commit", "-q", "--no-verify", "-m", "workspace"], check=True)
    return have_files, have_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", default="/tmp/proctor-bench-ws")
    parser.add_argument("--files", type=int, default=8000)
    parser.add_argument("--mb", type=int, default=190)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    dest = Path(args.dest)
    if args.fresh and dest.exists():
        shutil.rmtree(dest)
    if (dest / ".git").is_dir():
        chosen = _files(dest / "lib")
        n, size = len(chosen), sum(p.stat().st_size for p in chosen)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        n, size = build(dest, args.files, args.mb)
    print(f"workspace: {dest} · {n} files · {size / 1e6:.0f} MB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
