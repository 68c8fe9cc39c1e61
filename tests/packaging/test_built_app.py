"""The one-folder build (packaging/build-app) starts the studio on a machine without Python or pip.

The build is made once per content of its sources and kept in ~/.cache/proctor/built-app (CI on
the same machine reuses it). It runs in a container of proctor-test-base:bookworm with Python
deleted and, installed from real Debian packages, only what the README says the build needs from
the system: libGL/libEGL's dispatch libraries, libxcb and a font. Off screen, on an empty store,
it draws the same window as the checkout's `proctor studio` (the welcome panel).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BASE_IMAGE
from tests.packaging.tools import Xvfb, need

# A first build takes a minute, and several on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "proctor"
SIZE = (1024, 700)
# What goes into the build (packaging/pyinstaller/proctor.spec), by folder.
SOURCES = ("engine", "studio", "resources", "examples/demo", "packaging/pyinstaller",
           "packaging/build-app", "packaging/docker-up", "pyproject.toml")
# The README's list ("A self-contained build"), with the packages they need that a minimal
# bookworm lacks; not the Mesa drivers libgl1 asks for: drawing off screen uses none.
RUNTIME_PACKAGES = ("libgl1", "libglvnd0", "libglx0", "libegl1", "libxcb1", "libxau6",
                    "libxdmcp6", "libbsd0", "fontconfig-config", "fonts-dejavu-core")
RUNTIME_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
COPY *.deb /tmp/debs/
RUN dpkg -i --force-depends /tmp/debs/*.deb && rm -rf /tmp/debs \\
 && rm -rf /usr/bin/python3* /usr/bin/pip* /usr/lib/python3* /usr/local/lib/python3*
"""
# In the container: no Python or pip on PATH, the CLI answers, then the studio draws.
NO_PYTHON = "for tool in python3 python pip3 pip; do command -v $tool && exit 97; done; true"
TILE = 32  # screenshots are compared tile by tile
MOST_MB = 250  # the folder's size (the README says about 220 MB)


def _sources(root: Path) -> list[Path]:
    """The files under `root` that go into the build, by their path in the checkout."""
    found = []
    for source in SOURCES:
        path = root / source
        for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
            relative = file.relative_to(root)
            if not ("__pycache__" in relative.parts
                    or relative.is_relative_to("resources/screenshots")):
                found.append(relative)
    return found


def _content_hash(root: Path) -> str:
    """The sources' bytes and the installed packages' versions: what decides the build."""
    digest = hashlib.sha256()
    for relative in _sources(root):
        digest.update(str(relative).encode() + b"\0" + (root / relative).read_bytes() + b"\0")
    installed = importlib.metadata.distributions()
    digest.update("\n".join(sorted(f"{d.metadata['Name']}=={d.version}" for d in installed)).encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def built_app() -> Path:
    """The folder packaging/build-app makes, built once per content of its sources."""
    home = CACHE / "built-app"
    if (cached := home / _content_hash(ROOT) / "proctor").joinpath("proctor-studio").is_file():
        return cached
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=home, prefix="building-"))
    # A copy is built, so a file edited meanwhile cannot make the build differ from its key.
    for relative in _sources(ROOT):
        (scratch / "src" / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, scratch / "src" / relative)
    folder = home / _content_hash(scratch / "src") / "proctor"
    start = time.monotonic()
    # From scratch (an empty work folder): PyInstaller's own cache goes by mtimes.
    done = subprocess.run(["bash", str(scratch / "src" / "packaging" / "build-app"), str(scratch),
                           str(scratch / "work")], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    print(f"built in {time.monotonic() - start:.0f} s: {done.stderr.strip()}")
    for old in home.iterdir():  # one build is kept: each is 200+ MB
        if old != scratch:
            shutil.rmtree(old, ignore_errors=True)
    folder.parent.mkdir()
    (scratch / "proctor").rename(folder)
    shutil.rmtree(scratch)
    return folder


@pytest.fixture(scope="session")
def runtime_image(docker_client) -> str:
    """proctor-test-base:bookworm without Python, plus the packages the README names; built
    offline from .debs downloaded once on the host, tagged by its content."""
    recipe = RUNTIME_DOCKERFILE + " ".join(RUNTIME_PACKAGES)
    tag = f"proctor-app-runtime:{hashlib.sha256(recipe.encode()).hexdigest()[:16]}"
    if docker_client.images.list(name=tag):
        return tag
    need("apt-get")  # to fetch the packages, once per machine
    download = ["apt-get", "download", "-q", *RUNTIME_PACKAGES]
    with tempfile.TemporaryDirectory() as context:
        if subprocess.run(download, cwd=context, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True)  # stale package lists
            done = subprocess.run(download, cwd=context, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        Path(context, "Dockerfile").write_text(RUNTIME_DOCKERFILE)
        docker_client.images.build(path=context, tag=tag, network_mode="none", rm=True,
                                   forcerm=True)
    return tag


def _environment(tmp: Path) -> dict[str, str]:
    """Alike in and out of the container: off screen, a fresh home, a Docker that is not there."""
    return {"QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp / "home"), "LANG": "C.UTF-8",
            "DOCKER_HOST": f"unix://{tmp}/no-docker.sock"}


def _pixels(png: Path) -> np.ndarray:
    from PySide6.QtGui import QImage

    image = QImage(str(png))
    assert not image.isNull(), f"{png} is not a PNG Qt can read"
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    height, width = image.height(), image.width()
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(height, image.bytesPerLine())
    return rows[:, :width * 3].reshape(height, width, 3).astype(np.int16)


def _differing_tiles(a: np.ndarray, b: np.ndarray) -> float:
    """The share of TILE x TILE squares whose pixels differ on average by more than 2 levels."""
    height, width, _ = a.shape
    diff = np.abs(a - b)
    tiles = [diff[y:y + TILE, x:x + TILE].mean() > 2
             for y in range(0, height, TILE) for x in range(0, width, TILE)]
    return sum(tiles) / len(tiles)


def _studio(store: Path, shot: Path) -> str:
    return f"--store {store} --screenshot {shot} --size {SIZE[0]}x{SIZE[1]}"


def test_the_build_starts_the_studio_without_python(built_app, runtime_image, docker_client,
                                                    tmp_path):
    store, shot = tmp_path / "store.db", tmp_path / "built.png"
    (tmp_path / "home").mkdir()
    script = (f"{NO_PYTHON} && /app/proctor --help > {tmp_path}/cli.txt && "
              f"exec /app/proctor-studio {_studio(store, shot)}")
    start = time.monotonic()
    container = docker_client.containers.run(
        runtime_image, ["sh", "-c", script], detach=True, network_mode="none",
        environment=_environment(tmp_path), mem_limit="1g", volumes={
            str(built_app): {"bind": "/app", "mode": "ro"},
            str(tmp_path): {"bind": str(tmp_path), "mode": "rw"},  # the same paths as on the host
        })
    try:
        code = container.wait(timeout=120)["StatusCode"]
        said = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    print(f"the studio drew its window in a container in {time.monotonic() - start:.1f} s")
    assert code != 97, f"Python or pip is reachable in the container: {said}"
    assert code == 0 and shot.is_file(), said
    assert "studio" in (tmp_path / "cli.txt").read_text()  # commands found without pip's metadata
    size = sum(p.stat().st_size for p in built_app.rglob("*") if not p.is_symlink() and p.is_file())
    assert size < MOST_MB * 1e6, f"the folder grew to {size / 1e6:.0f} MB: what joined it?"

    built = _pixels(shot)
    assert (built.shape[1], built.shape[0]) == SIZE
    colours = np.unique(built.reshape(-1, 3), axis=0)
    assert len(colours) > 16, f"the screenshot is nearly blank: {len(colours)} colours"

    # The checkout's studio on the same (still empty) store, started alike: the same window.
    reference = tmp_path / "checkout.png"
    desktop = ("DISPLAY", "WAYLAND", "XDG_")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(desktop)}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("proctor")), "studio", *_studio(store, reference).split()],
        env={**environ, **_environment(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    differing = _differing_tiles(built, _pixels(reference))
    print(f"{differing:.1%} of the screenshot's tiles differ from the checkout's")
    # Only where the folders' paths are written (the docker-up command) may they differ.
    assert differing < 0.03, f"the build draws another window than the checkout's ({differing:.0%})"


def test_the_build_opens_on_an_x_display_with_only_libxcb_from_the_system(
        built_app, runtime_image, docker_client, tmp_path):
    xvfb = Xvfb()
    (tmp_path / "home").mkdir()
    shot = tmp_path / "x11.png"
    environ = {**_environment(tmp_path), "DISPLAY": ":0"}
    del environ["QT_QPA_PLATFORM"]  # Qt's default: xcb, whose libraries but libxcb the folder has
    script = f"{NO_PYTHON} && exec /app/proctor-studio {_studio(tmp_path / 'store.db', shot)}"
    try:
        said = docker_client.containers.run(
            runtime_image, ["sh", "-c", script], network_mode="none", environment=environ,
            mem_limit="1g", remove=True, stderr=True, volumes={
                str(built_app): {"bind": "/app", "mode": "ro"},
                str(tmp_path): {"bind": str(tmp_path), "mode": "rw"},
                str(xvfb.socket): {"bind": "/tmp/.X11-unix/X0", "mode": "rw"},
            }).decode(errors="replace")
    finally:
        xvfb.stop()
    assert shot.is_file(), said
    drawn = _pixels(shot)
    assert (drawn.shape[1], drawn.shape[0]) == SIZE


def test_the_built_folder_puts_itself_in_the_menu(built_app, tmp_path):
    """`proctor desktop install` run from the folder: the entry starts the folder's studio."""
    need("desktop-file-validate")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "share")}
    done = subprocess.run([str(built_app / "proctor"), "desktop", "install"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    entry = tmp_path / "share" / "applications" / "proctor.desktop"
    assert f'Exec={built_app / "proctor-studio"}\n' in entry.read_text()  # no reserved characters: unquoted
    checked = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
