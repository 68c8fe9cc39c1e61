"""Qt's system libraries (`python -m studio.xcb`): on this host all are there; on a minimal
Debian bookworm in a container they are named with their packages, the studio stops with that
message instead of Qt's abort, and as root they are installed from a local apt repository made
of real Debian packages, after which Qt opens a real window on an X server (Xvfb)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaging.tools import Xvfb, unavailable

from studio import xcb
from tests.conftest import BASE_IMAGE

ROOT = Path(__file__).resolve().parents[2]
DEBS = Path.home() / ".cache" / "proctor" / "debs"  # real .debs, downloaded once, reused offline
NAMED_IN_ISSUE = ["libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0", "libxkbcommon-x11-0"]
# What Qt's Gui library itself links: present on a desktop that lacks only the xcb extras.
GUI_PACKAGES = ["libgl1", "libegl1", "libfontconfig1", "libfreetype6", "libglib2.0-0",
                "libdbus-1-3", "libxkbcommon0"]

LDD = """\
\tlinux-vdso.so.1 (0x00007ffd0b5f2000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x00007f1)
\tlibGL.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f2)
\tlibxcb-icccm.so.4 => not found
\tlibQt6Gui.so.6 => not found
\tlibfoo-unknown.so.3 => not found
\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)
"""


def test_ldd_output_gives_each_missing_library_once_with_its_package():
    assert xcb.parse_ldd(LDD) == ["libGL.so.1", "libxcb-icccm.so.4", "libQt6Gui.so.6",
                                  "libfoo-unknown.so.3"]
    sonames = ["libxcb-icccm.so.4", "libglib-2.0.so.0", "libgthread-2.0.so.0", "libfoo.so.3"]
    missing = [xcb.Missing(s, xcb.PACKAGES.get(s)) for s in sonames]
    assert xcb.packages(missing) == ["libxcb-icccm4", "libglib2.0-0"]
    said = xcb.report(missing, root=False, apt=True)
    assert "  missing libxcb-icccm.so.4 (Debian package libxcb-icccm4)" in said.splitlines()
    assert "  missing libfoo.so.3 (no known Debian package)" in said.splitlines()
    assert said.endswith("\nInstall them with: sudo apt-get install -y libxcb-icccm4 libglib2.0-0")
    as_root = xcb.report(missing, root=True, apt=True)
    assert as_root.endswith(": apt-get install -y libxcb-icccm4 libglib2.0-0")
    elsewhere = xcb.report(missing, root=False, apt=False)
    assert "apt-get" not in elsewhere and "distribution's packages" in elsewhere


@pytest.mark.parametrize(("environ", "used"), [
    ({}, False),
    ({"QT_QPA_PLATFORM": "xcb"}, False),
    ({"DISPLAY": ":0"}, True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb:nograb"}, True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"}, False),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "minimal"}, False),
    ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, False),
    ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11", "WAYLAND_DISPLAY": "wayland-0"}, True),
])
def test_only_an_xcb_start_is_checked(environ, used):
    assert xcb.uses_xcb(environ) is used


def _module(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "QT_QPA_PLATFORM")}
    return subprocess.run([sys.executable, "-m", "studio.xcb"], env={**env, **environ}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_this_host_has_every_library_and_the_check_is_fast(monkeypatch):
    assert xcb.plugin_path() is not None
    done = _module({"DISPLAY": ":0"})
    assert (done.returncode, done.stderr) == (0, "")
    assert _module({}).returncode == 0
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    start = time.perf_counter()
    assert xcb.check(install=False) == 0
    took = time.perf_counter() - start
    assert took < 0.5, f"the check took {took * 1000:.0f} ms at every studio start"


# --- a minimal Debian bookworm in a container -------------------------------------------


def _local_repository(status: bytes, names: list[str], tmp: Path) -> None:
    """Download (once) the packages and the dependencies a system with this dpkg status lacks,
    into DEBS, and index it as a flat apt repository."""
    if os.geteuid() != 0 or not shutil.which("apt-get") or not shutil.which("dpkg-scanpackages"):
        unavailable("root, apt-get and dpkg-scanpackages (dpkg-dev) on the host")
    (tmp / "status").write_bytes(status)
    DEBS.joinpath("partial").mkdir(parents=True, exist_ok=True)
    download = ["apt-get", "install", "--download-only", "-y", "-q", "--no-install-recommends",
                "-o", f"Dir::State::status={tmp / 'status'}", "-o", f"Dir::Cache::archives={DEBS}",
                *names]
    # Only what the cache lacks is fetched (nothing, after the first run).
    if subprocess.run(download, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        done = subprocess.run(download, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=DEBS,
                           capture_output=True, check=True).stdout
    (DEBS / "Packages").write_bytes(index)


@pytest.fixture
def xvfb() -> Iterator[Xvfb]:
    server = Xvfb("640x480x24")
    yield server
    server.stop()


STUDIO = ("import sys; from studio.cli import main; sys.argv[1:] = ['--store', '/tmp/s.db']; "
          "sys.exit(main())")
WINDOW = ("from PySide6.QtWidgets import QApplication, QLabel; app = QApplication([]); "
          "label = QLabel('Proctor'); label.show(); app.processEvents(); "
          "print(app.platformName(), label.isVisible())")


@pytest.mark.docker
@pytest.mark.slow
def test_minimal_bookworm_names_the_libraries_and_root_installs_them(docker_client, tmp_path, xvfb):
    purelib = Path(sysconfig.get_paths()["purelib"])
    sources = tmp_path / "sources.list"
    sources.write_text("deb [trusted=yes] file:/debs ./\n")  # the only apt source
    DEBS.mkdir(parents=True, exist_ok=True)
    volumes = {
        str(purelib): {"bind": "/sp", "mode": "ro"},  # the project venv's PySide6
        str(ROOT / "studio"): {"bind": "/src/studio", "mode": "ro"},
        str(ROOT / "engine"): {"bind": "/src/engine", "mode": "ro"},
        str(DEBS): {"bind": "/debs", "mode": "ro"},
        str(sources): {"bind": "/etc/apt/sources.list", "mode": "ro"},
        str(xvfb.socket): {"bind": "/tmp/.X11-unix/X0", "mode": "rw"},
    }
    container = docker_client.containers.run(
        BASE_IMAGE, ["sleep", "600"], detach=True, network_mode="none", volumes=volumes,
        environment={"PYTHONPATH": "/src:/sp", "DISPLAY": ":0"})

    def run(*command: str, user: str = "nobody", **environ: str) -> tuple[int, str]:
        code, output = container.exec_run(list(command), user=user, environment=environ or None)
        return code, output.decode(errors="replace")

    try:
        check = ("python3", "-m", "studio.xcb")
        code, said = run(*check)
        assert code == 1, said
        packages = said.rsplit("sudo apt-get install -y ", 1)[1].split()
        for package in NAMED_IN_ISSUE:
            assert f"(Debian package {package})" in said and package in packages
        print(said)  # the sonames a minimal bookworm lacks (the README lists them)
        unused = ({"DISPLAY": ""}, {"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": "wayland"})
        for environ in unused:  # libraries missing, but Qt will not start its xcb plugin
            assert run(*check, **environ) == (0, "")

        code, status = container.exec_run(["cat", "/var/lib/dpkg/status"])
        _local_repository(status, packages, tmp_path)

        # Not even Qt's Gui libraries (libGL): the studio's command still lists them all and exits
        # 2, where importing Qt failed before the check could run.
        code, said = run("python3", "-c", STUDIO)
        assert code == 2 and "Traceback" not in said, said
        assert "(Debian package libgl1)" in said and "(Debian package libxcb-icccm4)" in said

        # A desktop that has Qt's Gui libraries but not the xcb extras: the studio stops with
        # the list and exit 2, where Qt would abort blaming xcb-cursor alone.
        assert run("apt-get", "update", "-q", user="root")[0] == 0
        code, said = run("apt-get", "install", "-y", "-q", "--no-install-recommends", *GUI_PACKAGES,
                         user="root", DEBIAN_FRONTEND="noninteractive")
        assert code == 0, said
        code, said = run("python3", "-c", STUDIO)
        assert code == 2, said
        for package in NAMED_IN_ISSUE:
            assert f"(Debian package {package})" in said
        assert "Aborted" not in said and "sudo apt-get install -y" in said

        # As root, from fresh (empty) package lists, like a new container: installed, then clean.
        run("sh", "-c", "rm -rf /var/lib/apt/lists/*", user="root")
        code, said = run(*check, "--install", user="root")
        assert code == 0, said
        assert run(*check) == (0, "")
        code, said = run("python3", "-c", WINDOW, QT_QPA_PLATFORM="xcb")
        assert code == 0 and said.splitlines()[-1] == "xcb True", said
    finally:
        container.remove(force=True)
