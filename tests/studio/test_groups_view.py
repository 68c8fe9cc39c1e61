"""Failure groups in the batch Overview (issue 17, item 2) over a store written through the
store's API (the Docker-recorded batch is test_groups_docker.py): the groups shown, a group
opened in the browser, a pass compared with one of them."""

from __future__ import annotations

import pytest

from engine.store import Store
from tests.engine.test_groups import ONE_CAUSE, save
from tests.studio.test_groups_docker import open_groups


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "groups.db"
    with Store(path) as store:
        store.create_batch("b_g", "cli", "", "2026-11-30T10:00:00.000Z")
        store.create_run("r_good", "b_g", "greet", "good", 0)
        store.create_run("r_bad", "b_g", "greet", "bad", 1)
        for i, reason in enumerate(ONE_CAUSE[:4]):
            save(store, f"t_f{i}", "r_bad", "greet", "bad", i + 1, "fail", reason, commands=("ls",))
        for i in range(2):
            save(store, f"t_v{i}", "r_bad", "greet", "bad", 10 + i, "infra_error",
                 "image build failed: apt-get exited 100", kind="infra")
        save(store, "t_p", "r_good", "greet", "good", 1, "pass", commands=("ls",))
        store.flush()
    return path


def test_groups_shown_opened_and_compared(path, make_window, qtbot):
    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    view = open_groups(window, qtbot, "b_g")
    assert [view.table.item(r, 0).text() for r in range(view.table.rowCount())] == ["4", "2"]
    assert view.table.item(1, 1).text() == "infra (void)"
    view.table.setCurrentCell(0, 0)
    with qtbot.waitSignal(view.group_opened) as opened:
        view.open_button.click()
    assert opened.args[0].trial_ids == [f"t_f{i}" for i in range(4)]
    assert view.note is not None and view.note.target.startswith("group:")
    with qtbot.waitSignal(view.compare_requested) as signal:
        view.compare_button.click()
    assert signal.args == ["t_p", "t_f0"]


def test_a_groups_note_follows_it_when_another_signature_leads(path, make_window, qtbot):
    """A note is made on a group of two judge failures; three more fail with that reason cut
    short (as a log quotes it), which now leads the group: the editor still shows the note."""
    from engine.groups import failure_groups
    from engine.models import Note

    reason = ("the judge scored 0.2 below 0.7: greet.py has no docstring, no type hints and "
              "prints instead of returning the greeting it builds")
    with Store(path) as store:
        for i in range(2):
            save(store, f"t_j{i}", "r_bad", "greet", "bad", 20 + i, "fail", reason, kind="judge")
        store.flush()
        [judged] = [g for g in failure_groups(store, "b_g") if g.kind == "judge"]
        store.set_note(Note(target=judged.target, label="agent gave up", text="never documents",
                            updated_at="2026-12-01T10:00:00Z")).result()
        for i in range(3):
            save(store, f"t_k{i}", "r_bad", "greet", "bad", 30 + i, "fail", reason[:-14], kind="judge")
        store.flush()
        [grown] = [g for g in failure_groups(store, "b_g") if g.kind == "judge"]
        assert grown.count == 5 and grown.key != judged.key
    window = make_window(path)
    qtbot.waitExposed(window)
    view = open_groups(window, qtbot, "b_g")
    row = next(r for r in range(view.table.rowCount()) if view.table.item(r, 0).text() == "5")
    view.table.setCurrentCell(row, 0)
    qtbot.waitUntil(lambda: view.note is not None and "never documents" in view.note.text.toPlainText(),
                    timeout=5000)
    assert view.note.target == judged.target


def test_view_groups_shows_them_with_a_picked_groups_note_in_view(path, make_window, qtbot):
    """`--view groups` at 1,024 x 700: the groups' heading, table, actions and note editor are
    all inside the pane once read (they sat under the phases, and a 300 ms timer scrolled to
    where they were before the figures above them grew)."""
    from studio.app import open_from_args

    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    assert open_from_args(window, "b_g", "groups", None) is None
    page = window.overview_page
    view = page.groups
    qtbot.waitUntil(lambda: not view.model.reading and bool(view.model.groups), timeout=5000)
    view.table.setCurrentCell(0, 0)
    area = page.batch.scroll

    def shown_whole(widget) -> bool:
        top = widget.mapTo(area.viewport(), widget.rect().topLeft()).y()
        return top >= 0 and top + widget.height() <= area.viewport().height()

    qtbot.waitUntil(lambda: all(shown_whole(w) for w in (view.table, view.open_button, view.note)),
                    timeout=5000)
