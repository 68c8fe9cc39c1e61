"""`proctor studio --screenshot`, for every view: what a user would see in the picture.

A failed trial of the recorded batch is opened with each `--view`. Each picture shows the
trial's header with its outcome pill, and the chosen tab drawing that trial: its own content,
in the colours the view uses for it, different from every other tab's."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from studio.cli import TABS
from studio.theme import GROUP_COLOUR, OUTCOME_COLOUR, REDACTED_BADGE_BG

pytestmark = pytest.mark.slow  # eight studios started and drawn

WIDTH, HEIGHT = 1400, 860  # the default --size
# Parts of the window as fractions of its size (the browser on the left, the record on the
# right): the header above the tabs, and the inside of the current tab.
HEADER = (0.46, 0.99, 0.0, 0.12)
CONTENT = (0.46, 0.98, 0.16, 0.94)

# What each tab draws for the failed trial `adds_numbers`, in a colour a user sees there.
SEEN = {
    "overview": [OUTCOME_COLOUR["fail"]],                   # how it ended
    "timeline": [GROUP_COLOUR["prep"], GROUP_COLOUR["agent"], GROUP_COLOUR["check"]],  # bars
    "trajectory": [OUTCOME_COLOUR["pass"]],                 # "exit 0" of its one command
    "diff": ["#e6ffec"],                                    # the added lines of calc.py
    "evidence": [OUTCOME_COLOUR["fail"], REDACTED_BADGE_BG],  # the failed check, the token
    "egress": [],                                           # the empty state's sentence only
    "source": [],                                           # the eval file's text
}


def part(image: QImage, where: tuple[float, float, float, float]) -> np.ndarray:
    """The pixels of a part of a picture, each as one 0xRRGGBB number."""
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint32).reshape(image.height(), -1)
    x0, x1, y0, y1 = where
    h, w = image.height(), image.width()
    return pixels[int(y0 * h):int(y1 * h), int(x0 * w):int(x1 * w)] & 0xFFFFFF


def count(pixels: np.ndarray, colour: str) -> int:
    return int((pixels == QColor(colour).rgb() & 0xFFFFFF).sum())


def screenshot(store: Path, open_id: str, view: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", "studio", "--store", str(store),
                           "--open", open_id, "--view", view, "--screenshot", str(out)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def pictures(recorded, tmp_path_factory) -> dict[str, QImage]:
    """One screenshot per view of the failed trial, three studios at a time."""
    folder = tmp_path_factory.mktemp("screenshots")
    views = ["browser", *TABS]
    with ThreadPoolExecutor(3) as pool:
        trial = recorded.trials["adds_numbers"]
        done = list(pool.map(
            lambda v: screenshot(recorded.store_path, trial, v, folder / f"{v}.png"), views))
    for view, result in zip(views, done):
        assert result.returncode == 0, f"--view {view}: {result.stderr}"
    return {view: QImage(str(folder / f"{view}.png")) for view in views}


@pytest.mark.parametrize("view", ["browser", *TABS])
def test_every_view_shows_the_trials_outcome_pill_in_its_header(pictures, view):
    image = pictures[view]
    assert (image.width(), image.height()) == (WIDTH, HEIGHT)
    # The pill "✗ FAIL assertion" is filled with the fail colour: hundreds of pixels of it.
    assert count(part(image, HEADER), OUTCOME_COLOUR["fail"]) > 500


@pytest.mark.parametrize("view", TABS)
def test_each_tab_draws_the_trial_in_the_colours_a_user_sees_there(pictures, view):
    inside = part(pictures[view], CONTENT)
    # Anything drawn, text at least, is anti-aliased into many shades; a blank tab has one.
    assert len(np.unique(inside)) > 20, f"the {view} tab is blank"
    for colour in SEEN[view]:
        assert count(inside, colour) > 100, f"the {view} tab shows no {colour}"


def test_no_two_tabs_draw_the_same_picture(pictures):
    insides = {view: part(pictures[view], CONTENT) for view in TABS}
    for i, a in enumerate(TABS):
        for b in TABS[i + 1:]:
            same = np.array_equal(insides[a], insides[b])
            assert not same, f"the {a} and {b} tabs show the same thing"


def test_an_unknown_id_is_one_line_and_exit_2(recorded, tmp_path):
    done = screenshot(recorded.store_path, "t_nope", "overview", tmp_path / "x.png")
    assert done.returncode == 2 and "no batch or trial t_nope" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x.png").exists()


def test_the_groups_view_shows_the_batch_overview_at_its_failure_groups(recorded, tmp_path):
    shots = {}
    for view in ("overview", "groups"):
        done = screenshot(recorded.store_path, recorded.batch_id, view, tmp_path / f"{view}.png")
        assert done.returncode == 0, done.stderr
        shots[view] = part(QImage(str(tmp_path / f"{view}.png")), CONTENT)
    assert not np.array_equal(shots["overview"], shots["groups"]), "--view groups did not scroll to them"
    # The groups' counts and kinds are written in the fail colour (the batch's failed trials),
    # anti-aliased: count the pixels near it, in the top third where the groups now stand.
    top = shots["groups"][: shots["groups"].shape[0] // 3]
    want = QColor(OUTCOME_COLOUR["fail"])
    red, green, blue = (top >> 16) & 0xFF, (top >> 8) & 0xFF, top & 0xFF
    near = (abs(red.astype(int) - want.red()) + abs(green.astype(int) - want.green())
            + abs(blue.astype(int) - want.blue())) < 60
    assert int(near.sum()) > 30, "no failure group drawn at the top of the Overview"
