"""Proctor installed like an app: a wheel built from this checkout, installed into a fresh venv
under a path with a space, registered with `proctor desktop install` for a temporary user, then
started the way a desktop starts it (`gio launch`) on a real X server (Xvfb).

The venv borrows the project venv's site-packages for its dependencies (a .pth line), so
PySide6 is not downloaded again; the wheel itself is installed with --no-deps.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tests.packaging.tools import Xvfb, need

from studio import desktop

ROOT = Path(__file__).resolve().parents[2]
NEEDS = ["desktop-file-validate", "gio"]
WINDOW_TOOLS = ["Xvfb", "xprop", "xwininfo"]
PROCTOR = str(Path(sys.executable).parent / "proctor")  # the project venv's, for the Qt-free checks
HICOLOR_INDEX = Path("/usr/share/icons/hicolor/index.theme")  # hicolor-icon-theme: the theme's own index


def _shipped() -> set[str]:
    """What the wheel must carry under share/proctor: the checkout's resources (not the README's
    screenshots), the demo suite and the private-daemon script."""
    found = {"packaging/docker-up"}
    for top in ("resources", "examples/demo"):
        for path in (ROOT / top).rglob("*"):
            relative = path.relative_to(ROOT)
            if path.is_file() and "__pycache__" not in relative.parts and path.suffix != ".pyc" \
                    and relative.parts[:2] != ("resources", "screenshots"):
                found.add(relative.as_posix())
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from a copy of the checkout (the build writes build/ and
    egg-info beside the sources, which must not race other work in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("engine", "studio", "resources", "examples", "packaging"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(out)],
                   check=True, timeout=240)
    (built,) = out.glob("proctor-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel, at a path with a space."""
    where = tmp_path_factory.mktemp("apps") / "my apps" / "proctor venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Appended after the venv's own site-packages, so the wheel's modules win over the checkout's.
    (Path(purelib) / "project-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=120, cwd=where.parent)
    return where


def _user(tmp_path: Path) -> dict[str, str]:
    """A temporary user: HOME and the XDG folders, with the system's shared data for hicolor's index."""
    home = tmp_path / "home dir"
    home.mkdir()
    # Nor PYTHONPATH: a run of the tests from another checkout must not lend the wheel its code.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "QT_", "DISPLAY", "WAYLAND", "PYTHONPATH"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"), XDG_DATA_DIRS="/usr/share",
               XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    return env


def _tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@pytest.mark.slow
def test_the_wheel_ships_the_resources_and_finds_them_under_share(wheel, venv):
    with zipfile.ZipFile(wheel) as archive:
        prefix = "proctor-0.1.0.data/data/share/proctor/"
        data = {n.removeprefix(prefix) for n in archive.namelist() if n.startswith(prefix)}
    assert data == _shipped()
    found = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import studio, studio.assets as a; print(a.root()); print(studio.__file__)"],
                           capture_output=True, text=True, check=True, cwd=venv,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout.split("\n")
    assert found[0] == str(venv / "share" / "proctor")
    assert found[1].startswith(str(venv))  # the wheel's studio, not the checkout's


def _started_from(venv: Path) -> list[int]:
    """Processes whose command line names the venv (the studio the test started, however detached)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(venv).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:  # gone meanwhile
            pass
    return pids


def _icon_found(venv: Path, env: dict[str, str], display: str) -> bool:
    """Qt's own icon-theme lookup (hicolor, over XDG_DATA_HOME and XDG_DATA_DIRS) finds `proctor`."""
    probe = ("from PySide6.QtGui import QGuiApplication, QIcon; app = QGuiApplication([]); "
             "icon = QIcon.fromTheme('proctor'); print(icon.isNull() is False and QIcon.themeName())")
    said = subprocess.run([str(venv / "bin" / "python"), "-c", probe], env={**env, "DISPLAY": display},
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    return said == "hicolor"


@pytest.mark.slow
def test_desktop_install_puts_a_launchable_entry_and_its_icon_in_the_menu(venv, tmp_path):
    need(*NEEDS, *WINDOW_TOOLS)
    if not HICOLOR_INDEX.is_file():
        pytest.fail(f"needs {HICOLOR_INDEX}: apt-get install hicolor-icon-theme")
    env = _user(tmp_path)
    data_home = Path(env["XDG_DATA_HOME"])
    x = Xvfb()
    try:
        assert not _icon_found(venv, env, x.display)
        done = subprocess.run([str(venv / "bin" / "proctor"), "desktop", "install"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        entry = data_home / "applications" / "proctor.desktop"
        valid = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
        assert valid.returncode == 0 and not valid.stdout.strip(), valid.stdout
        text = entry.read_text()
        assert f'Exec="{venv}/bin/proctor-studio"\n' in text
        assert _icon_found(venv, env, x.display)

        store = tmp_path / "store dir" / "proctor.db"
        store.parent.mkdir()
        # No pipes: the studio would inherit them and keep them open past gio's own exit.
        log = tmp_path / "gio.log"
        with log.open("w") as sink:
            launched = subprocess.run(["gio", "launch", str(entry)], timeout=30, stdout=sink, stderr=sink,
                                      stdin=subprocess.DEVNULL,
                                      env={**env, "DISPLAY": x.display, "PROCTOR_STORE": str(store)})
        assert launched.returncode == 0, log.read_text()
        deadline, windows = time.monotonic() + 60, []
        while time.monotonic() < deadline and not (store.exists() and windows):
            time.sleep(0.5)
            windows = [w for w in x.properties() if w["WM_CLASS"].endswith('"Proctor"')]
        assert store.exists() and windows, f"no studio window or store after 60 s: {log.read_text()}"
        (window,) = windows
        wm_class = re.search(r"^StartupWMClass=(.*)$", text, re.M)[1]
        assert window["WM_CLASS"].endswith(f'"{wm_class}"')
        assert window["_KDE_NET_WM_DESKTOP_FILE"] == f'"{entry.stem}"'  # QGuiApplication.desktopFileName
        assert "_NET_WM_ICON" in window  # the window icon the taskbar shows
        pid = int(window["_NET_WM_PID"])
        assert str(venv / "bin" / "proctor-studio") in Path(f"/proc/{pid}/cmdline").read_text()
    finally:
        for pid in _started_from(venv):
            os.kill(pid, signal.SIGTERM)
        x.stop()

    done = subprocess.run([str(venv / "bin" / "proctor"), "desktop", "uninstall"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(data_home.rglob("*")) == []  # the studio keeps its settings in ~/.config


def _recorder(path: Path) -> None:
    """An executable at `path` that writes the arguments it was started with beside itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\nprintf "%s\\n" "$0" "$@" > "$(dirname "$0")/argv"\n')
    path.chmod(0o755)


def _launched_argv(entry: Path, recorder: Path, env: dict[str, str]) -> list[str]:
    """The arguments `gio launch` gives the entry's program, as GLib parses its Exec line."""
    result = recorder.parent / "argv"
    result.unlink(missing_ok=True)
    subprocess.run(["gio", "launch", str(entry)], env=env, check=True, timeout=30,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return result.read_text().splitlines() if result.exists() else []


# No % here: GLib (2.74) looks for the program before it turns %% back into %, so it refuses such
# an entry although the spec says %%; test_a_percent_is_doubled checks what the spec says.
@pytest.mark.parametrize("folder", ["my checkout", "it's \"odd\" $HOME `x` \\ #1 ;&|<>*?()~"])
def test_an_entry_starts_its_program_at_any_path(folder, tmp_path):
    need(*NEEDS)
    env = _user(tmp_path)
    launch = tmp_path / folder / "packaging" / "launch"
    _recorder(launch)
    layout = desktop.install(launch=launch, home=Path(env["XDG_DATA_HOME"]))
    valid = subprocess.run(["desktop-file-validate", str(layout.entry)], capture_output=True, text=True)
    assert valid.returncode == 0 and not valid.stdout.strip(), valid.stdout
    assert _launched_argv(layout.entry, launch, env) == [str(launch), "studio"]


def test_a_percent_is_doubled():
    assert desktop.exec_value(["/opt/100% sure/run", "50%"]) == '"/opt/100%% sure/run" 50%%'


def test_install_desktop_from_a_checkout_with_a_space_writes_a_quoted_entry(tmp_path):
    need(*NEEDS)
    checkout = tmp_path / "my projects" / "proctor"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "screenshots", "pyinstaller")
    for name in ("studio", "packaging", "resources"):
        shutil.copytree(ROOT / name, checkout / name, ignore=ignore)
    launch = checkout / "packaging" / "launch"
    _recorder(launch)  # stands in for the launcher, which would set up a venv
    env = _user(tmp_path)
    done = subprocess.run(["bash", str(checkout / "packaging" / "install-desktop")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    entry = Path(env["XDG_DATA_HOME"]) / "applications" / "proctor.desktop"
    valid = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
    assert valid.returncode == 0 and not valid.stdout.strip(), valid.stdout
    assert _launched_argv(entry, launch, env) == [str(launch), "studio"]
    assert "Icon=proctor\n" in entry.read_text()
    assert (Path(env["XDG_DATA_HOME"]) / "icons/hicolor/scalable/apps/proctor.svg").is_file()


def test_uninstall_removes_what_install_wrote_and_keeps_the_rest(tmp_path):
    home = tmp_path / "share"
    other = home / "icons" / "hicolor" / "48x48" / "apps" / "other.png"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another app's icon")
    launch = tmp_path / "launch"
    _recorder(launch)
    before = _tree(tmp_path)
    desktop.install(launch=launch, home=home)
    assert len(desktop.uninstall(home=home)) == 1 + 1 + len(desktop.ICON_SIZES)
    assert _tree(tmp_path) == before


def test_an_icon_cache_that_exists_is_refreshed_and_none_is_made(tmp_path):
    need("gtk-update-icon-cache")
    home = tmp_path / "share"
    cache = home / "icons" / "hicolor" / "icon-theme.cache"
    launch = tmp_path / "launch"
    _recorder(launch)
    desktop.install(launch=launch, home=home)
    assert not cache.exists()
    desktop.uninstall(home=home)
    other = cache.parent / "48x48" / "apps" / "other.png"  # another app's icon, cached
    other.parent.mkdir(parents=True)
    shutil.copy(ROOT / desktop.ICON_SOURCE / "48x48/apps/proctor.png", other)
    subprocess.run(["gtk-update-icon-cache", "-q", "-f", "-t", str(cache.parent)], check=True, timeout=60)
    assert b"proctor" not in cache.read_bytes()
    desktop.install(launch=launch, home=home)
    assert b"proctor" in cache.read_bytes()  # else GTK menus, trusting the cache, show no icon
    desktop.uninstall(home=home)
    assert b"other" in cache.read_bytes() and b"proctor" not in cache.read_bytes()


def test_the_committed_icons_are_the_svg_at_every_size():
    from PySide6.QtGui import QImage

    theme = ROOT / desktop.ICON_SOURCE
    assert (theme / "scalable/apps/proctor.svg").read_bytes() == (ROOT / "resources/proctor.svg").read_bytes()
    for size in desktop.ICON_SIZES:
        image = QImage(str(theme / f"{size}x{size}/apps/proctor.png"))
        assert (image.width(), image.height()) == (size, size)
    make_icons = (ROOT / "packaging/make-icons").read_text()
    assert f"SIZES = {desktop.ICON_SIZES}" in make_icons


@pytest.mark.parametrize("args, says", [
    (["install", "--launch", "/nonexistent/launch"], "/nonexistent/launch is not an executable file"),
])
def test_a_user_mistake_is_one_line(args, says, tmp_path):
    done = subprocess.run([PROCTOR, "desktop", *args], capture_output=True,
                          text=True, env={**_user(tmp_path)}, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_an_unwritable_data_home_is_one_line(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    launch = tmp_path / "launch"
    _recorder(launch)
    env = {**_user(tmp_path), "XDG_DATA_HOME": str(blocker / "share")}
    done = subprocess.run([sys.executable, "-m", "studio.desktop", "install", "--launch", str(launch)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot write" in done.stderr and str(blocker) in done.stderr


def test_desktop_commands_never_import_qt(tmp_path):
    probe = ("import sys; from engine.cli import main; code = main(['desktop', 'uninstall']); "
             "print(code, any(m.startswith('PySide6') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=_user(tmp_path), cwd=ROOT, timeout=60)
    assert done.stdout.split("\n")[-2] == "0 False", done.stdout + done.stderr


def test_launch_from_the_menu_shows_a_failed_first_run_and_its_log(tmp_path):
    """packaging/launch started without a terminal: its first run says what it does, and when a
    step fails, the dialog holds the error and the log's path (a recording stand-in for zenity:
    the real one needs WebKitGTK, too big for CI)."""
    checkout = tmp_path / "my checkout"
    (checkout / "packaging").mkdir(parents=True)
    shutil.copy(ROOT / "packaging" / "launch", checkout / "packaging" / "launch")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    tools = tmp_path / "bin"
    tools.mkdir()
    calls = tmp_path / "zenity-calls"
    (tools / "zenity").write_text(f'#!/bin/sh\n{{ printf "%s|" "$@"; echo; cat; }} >> "{calls}"\n')
    (tools / "python3").write_text(  # a Python without venv (Debian's python3 without python3-venv)
        f'#!/bin/sh\ncase "$*" in *"-m venv"*) echo "Error: ensurepip is not available" >&2; exit 1;; esac\n'
        f'exec "{sys.executable}" "$@"\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    env = {**_user(tmp_path), "PATH": f"{tools}:{os.environ['PATH']}", "DISPLAY": ":99"}
    with (tmp_path / "stdout").open("w") as not_a_terminal:
        done = subprocess.run(["bash", str(checkout / "packaging" / "launch")], env=env, timeout=60,
                              stdout=not_a_terminal, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    log = Path(env["XDG_CACHE_HOME"]) / "proctor" / "launch.log"
    said = calls.read_text()
    assert "--progress|" in said and "--text=Setting up Proctor: creating" in said
    (error,) = [line for line in said.split("\n") if line.startswith("--error|")]
    assert "could not create the virtual environment" in error
    assert "ensurepip is not available" in said and f"The whole log: {log}" in said
    assert "ensurepip is not available" in log.read_text()
    assert f"(log: {log})" in done.stderr
