"""Qt's system libraries, checked before Qt starts: `python -m studio.xcb [--install]`.

Qt's xcb platform plugin links some twenty X, GL and font libraries that a minimal Linux
lacks, and when any is missing Qt aborts with a message that blames only xcb-cursor. So before
the studio starts, `ldd` on the installed PySide6's plugin lists every library the loader cannot
find; each is named with its Debian package, with the one `apt-get` command that installs them
all, or, as root, they are installed. Standard library only: this runs where Qt cannot load.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Every library the plugin and the Qt libraries it loads link from the system, with its
# dependencies (ldd names those only once their parent is found), by Debian package.
PACKAGES: dict[str, str] = {
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6",
    "libXext.so.6": "libxext6",
    "libXrender.so.1": "libxrender1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libGL.so.1": "libgl1",
    "libGLX.so.0": "libglx0",
    "libGLdispatch.so.0": "libglvnd0",
    "libEGL.so.1": "libegl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libpng16.so.16": "libpng16-16",
    "libbrotlidec.so.1": "libbrotli1",
    "libbrotlicommon.so.1": "libbrotli1",
    "libexpat.so.1": "libexpat1",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libpcre2-8.so.0": "libpcre2-8-0",
    "libdbus-1.so.3": "libdbus-1-3",
    "libsystemd.so.0": "libsystemd0",
    "libz.so.1": "zlib1g",
    "libzstd.so.1": "libzstd1",
    "libbsd.so.0": "libbsd0",
    "libmd.so.0": "libmd0",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.MULTILINE)
_PLUGIN = Path("Qt") / "plugins" / "platforms" / "libqxcb.so"


@dataclass(frozen=True)
class Missing:
    """A library the xcb plugin needs that the dynamic loader cannot find."""

    soname: str
    package: str | None  # Debian's, when known


def uses_xcb(environ: Mapping[str, str]) -> bool:
    """Whether Qt will start its xcb platform plugin in this environment."""
    if not environ.get("DISPLAY"):
        return False
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:  # `xcb`, `xcb:option=…`, or a fallback list `wayland;xcb` tried in order
        return platform.split(";")[0].split(":")[0].strip() == "xcb"
    # Unset in a Wayland session, Qt 6 picks its Wayland plugin, which needs none of these.
    return not (environ.get("XDG_SESSION_TYPE") == "wayland" and environ.get("WAYLAND_DISPLAY"))


def plugin_path() -> Path | None:
    """The installed PySide6's xcb platform plugin, found without importing PySide6."""
    folders: list[str] = []
    if meipass := getattr(sys, "_MEIPASS", None):  # the PyInstaller one-folder build
        folders.append(os.path.join(meipass, "PySide6"))
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        folders.extend(spec.submodule_search_locations)
    for folder in folders:
        if (plugin := Path(folder) / _PLUGIN).is_file():
            return plugin
    return None


def parse_ldd(output: str) -> list[str]:
    """The sonames `ldd` reports as not found, each once, in its order."""
    return list(dict.fromkeys(_NOT_FOUND.findall(output)))


def missing_libraries(plugin: Path) -> list[Missing]:
    """What the plugin cannot load on this system; empty when all is there or ldd is absent."""
    ldd = shutil.which("ldd")
    if ldd is None:  # not glibc, or a stripped system: leave the diagnosis to Qt
        return []
    result = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, check=False)
    # A Qt library PySide6 ships itself, when not found, is a broken install, not a system one.
    sonames = [s for s in parse_ldd(result.stdout) if not s.startswith(("libQt6", "libicu"))]
    return [Missing(soname, PACKAGES.get(soname)) for soname in sonames]


def packages(missing: Sequence[Missing]) -> list[str]:
    """The Debian packages that provide the missing libraries, each once."""
    return list(dict.fromkeys(m.package for m in missing if m.package))


def report(missing: Sequence[Missing], *, root: bool, apt: bool) -> str:
    """What a user reads: each missing library with its package, then the fix."""
    lines = [f"proctor: Qt cannot open a window: its xcb platform plugin needs "
             f"{len(missing)} system {'library' if len(missing) == 1 else 'libraries'} "
             f"that this system lacks:"]
    for m in missing:
        where = f"Debian package {m.package}" if m.package else "no known Debian package"
        lines.append(f"  missing {m.soname} ({where})")
    names = packages(missing)
    if apt and names:
        sudo = "" if root else "sudo "
        lines.append(f"Install them with: {sudo}apt-get install -y {' '.join(names)}")
    elif not apt:
        lines.append("Install them from your distribution's packages "
                     "(the package names above are Debian's).")
    return "\n".join(lines)


def _apt_lists_empty() -> bool:
    """A fresh container keeps no package lists: `apt-get install` would find nothing."""
    lists = Path("/var/lib/apt/lists")
    return not any(p.name.endswith("_Packages") or "_Packages." in p.name
                   for p in lists.iterdir()) if lists.is_dir() else True


def install_packages(names: Sequence[str]) -> bool:
    """`apt-get install` the packages, updating the lists first when they are empty or stale."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"proctor: installing {' '.join(names)} for Qt's xcb platform plugin", file=sys.stderr)

    def apt(*args: str) -> bool:
        # apt's progress goes to fd 2: stdout stays for what the caller prints.
        return subprocess.run(["apt-get", *args], env=env, stdout=2, check=False).returncode == 0

    updated = _apt_lists_empty() and apt("update")
    command = ("install", "-y", "--no-install-recommends", *names)
    if apt(*command):
        return True
    return not updated and apt("update") and apt(*command)


def check(install: bool = False) -> int:
    """0 when Qt's xcb plugin has every library it needs or will not be used; with `install`
    and as root, missing Debian packages are installed first; else 1, after printing why."""
    if not uses_xcb(os.environ) or (plugin := plugin_path()) is None:
        return 0
    missing = missing_libraries(plugin)
    if not missing:
        return 0
    root = os.geteuid() == 0
    apt = shutil.which("apt-get") is not None
    if install and root and apt and (names := packages(missing)):
        if not install_packages(names):
            print("proctor: apt-get could not install them (its output is above)", file=sys.stderr)
        missing = missing_libraries(plugin)
        if not missing:
            return 0
    print(report(missing, root=root, apt=apt), file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m studio.xcb",
        description="Check that Qt's xcb platform plugin finds every system library it needs.")
    parser.add_argument("--install", action="store_true",
                        help="as root, install the missing Debian packages with apt-get")
    args = parser.parse_args(argv)
    return check(install=args.install)


if __name__ == "__main__":
    sys.exit(main())
