"""Failure groups in the batch Overview (issue 17, item 2), over a batch recorded now in a
real Docker daemon: two variants of one agent, `good` passing and `bad` failing two cases
for two causes, its reasons carrying volatile parts (a random number, a temp path, hex)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import QModelIndex

from engine.groups import failure_groups
from engine.store import Store
from studio.models.browser import TrialIdRole
from studio.views.groups import FailureGroupsView
from tests.conftest import suite_toml

pytestmark = pytest.mark.slow

GOOD = """
echo 42 > answer.txt
touch listed.txt
echo '{"type":"command","command":"echo 42 > answer.txt","exitCode":0,"output":""}'
echo '{"type":"finished","reason":"done"}'
"""
BAD = """
echo $(( $(od -An -N2 -tu2 /dev/urandom) % 40 + 100 )) > answer.txt
echo '{"type":"command","command":"echo 7 > answer.txt","exitCode":0,"output":""}'
echo '{"type":"command","command":"ls","exitCode":0,"output":"answer.txt"}'
echo '{"type":"finished","reason":"done"}'
"""
# The last stderr line is the reason's tail: a different number, folder and hex each trial.
CHECK = ("grep -qx 42 answer.txt || { echo \"wrong answer $(cat answer.txt) in "
         "/tmp/run-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')/answer.txt\" >&2; exit 1; }")
EVAL = f"""
from pathlib import Path
from engine import evaluation, git

@evaluation(workspace=git(init=True), files={{".agent/good.sh": Path("good.sh"),
            ".agent/bad.sh": Path("bad.sh")}}, trials=3)
def writes_the_answer(c):
    c.send("Write the answer")
    c.exec({CHECK!r}).to_succeed()

@evaluation(workspace=git(init=True), files={{".agent/good.sh": Path("good.sh"),
            ".agent/bad.sh": Path("bad.sh")}}, trials=2)
def lists_a_file(c):
    c.send("Make listed.txt")
    c.exec("test -f listed.txt").to_succeed()
"""
TOML = suite_toml({"good": "sh .agent/good.sh", "bad": "sh .agent/bad.sh"}, concurrency=3)


@pytest.fixture(scope="module")
def batch(docker_client, tmp_path_factory) -> tuple[Path, str]:
    """The batch, recorded once for this module: its store and its id."""
    from engine.batch import BatchPlan, Engine
    from engine.config import load_config
    from engine.spec import load_cases

    folder = tmp_path_factory.mktemp("groups-suite")
    (folder / "good.sh").write_text(GOOD)
    (folder / "bad.sh").write_text(BAD)
    (folder / "groups.eval.py").write_text(textwrap.dedent(EVAL))
    (folder / "proctor.toml").write_text(textwrap.dedent(TOML))
    with Store(folder / "proctor.db") as store:
        config = load_config(folder / "proctor.toml")
        plan = BatchPlan(cases=load_cases([folder / "groups.eval.py"]), variants=config.variants,
                         config=config, trigger="api")
        summary = Engine(store, docker_client).run(plan)
    return folder / "proctor.db", summary.batch_id


def shown_trials(browser) -> set[str]:
    """Every trial row under every batch and run the browser lists now."""
    model, found = browser.model, set()

    def walk(parent: QModelIndex) -> None:
        while model.canFetchMore(parent):
            model.fetchMore(parent)
        for row in range(model.rowCount(parent)):
            index = model.index(row, 0, parent)
            if (trial_id := index.data(TrialIdRole)) is not None:
                found.add(trial_id)
            else:
                browser.expand(index)
                walk(index)

    walk(QModelIndex())
    return found


def open_groups(window, qtbot, batch_id: str) -> FailureGroupsView:
    assert window.browser.select_id(batch_id)
    window.tabs.setCurrentWidget(window.overview_page)
    view = window.overview_page.groups
    qtbot.waitUntil(lambda: view.model.batch_id == batch_id and not view.model.reading,
                    timeout=10_000)
    return view


def test_the_overview_shows_the_groups_and_opens_one_in_the_browser(batch, make_window, qtbot):
    path, batch_id = batch
    with Store(path) as store:
        expected = failure_groups(store, batch_id)
    # Three wrong answers, each with its own number and folder, are one cause; two missing
    # files another.
    assert [(g.count, g.variants, g.cases) for g in expected] == [
        (3, ["bad"], ["writes_the_answer"]), (2, ["bad"], ["lists_a_file"])]
    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    view = open_groups(window, qtbot, batch_id)
    table = view.table
    assert table.isVisible() and table.rowCount() == 2
    assert [table.item(r, 0).text() for r in range(2)] == ["3", "2"]
    assert "wrong answer" in table.item(0, 2).text() and table.item(0, 3).text() == "bad"
    assert table.item(0, 4).text() == "check 1 of 1"
    assert "5 failed or void trials in 2 groups" in view.status.text()

    view.table.setCurrentCell(1, 0)
    with qtbot.waitSignal(view.group_opened) as opened:
        view.open_button.click()
    assert opened.args[0].trial_ids == expected[1].trial_ids
    # The picked group's note is the note editor on "group:<key>".
    assert view.note is not None and view.note.target == f"group:{expected[1].key}"
    # The browser shows exactly its trials, and keeps showing them.
    qtbot.waitUntil(lambda: shown_trials(window.browser) == set(expected[1].trial_ids), timeout=10_000)
    qtbot.wait(1_000)
    assert shown_trials(window.browser) == set(expected[1].trial_ids)
    assert window.browser.trial_set.isVisible()



def test_compare_a_pass_with_one_of_these_picks_the_same_cases_pass(batch, make_window, qtbot):
    path, batch_id = batch
    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    view = open_groups(window, qtbot, batch_id)
    view.table.setCurrentCell(0, 0)
    with qtbot.waitSignal(view.compare_requested) as signal:
        view.compare_button.click()
    a_id, b_id = signal.args
    with Store(path) as store:
        a, b = store.get_trial(a_id), store.get_trial(b_id)
    assert a.outcome == "pass" and a.case_id == "writes_the_answer" and a.variant == "good"
    assert b.outcome == "fail" and b.id == view.model.groups[0].trial_ids[0]
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.compare_page, timeout=10_000)
