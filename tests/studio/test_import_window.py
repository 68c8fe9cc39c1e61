"""Import and export in the window: File → Import… and Export selected… (Ctrl+I, Ctrl+E), files
dropped on the window, a progress bar for large files, one line in the banner for a refused
file; imported batches say where they came from; compare and replay work on their trials."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QFileDialog

from engine.bundle import export_bundle, read_bundle
from engine.models import BatchSummary
from engine.portable import Portable, PortableBatch, PortableRun
from engine.store import Store
from studio.models.browser import ItemRole
from studio.transfer import Imported
from tests.studio.conftest import compact

ToolTipRole = Qt.ItemDataRole.ToolTipRole

ORIGIN = "Inspect AI log run.eval · task greet · model mockllm/model"


def new_id(old: str) -> str:
    """Another id of the same kind and length: the batch as another machine made it."""
    return f"{old[:2]}imp{old[5:]}"


def copy_of_recorded(store_path: Path, origin: str | None = ORIGIN) -> Portable:
    """The recorded batch under new ids, its records without events, as an Inspect log's are."""
    with Store(store_path) as store:
        [summary] = [b for b in store.list_batches() if not b.batch_id.startswith("b_imp")]
        records = [store.get_trial(t.id) for run in summary.runs for t in run.trials]
    batch_id = new_id(summary.batch_id)
    trials = [r.model_copy(update=dict(id=new_id(r.id), batch_id=batch_id, run_id=new_id(r.run_id)))
              for r in records]
    runs = [PortableRun(id=new_id(run.run_id), case_id=run.case_id, variant=run.variant, position=i)
            for i, run in enumerate(summary.runs)]
    return Portable(batches=[PortableBatch(
        id=batch_id, trigger=summary.trigger, status=summary.status, started_at=summary.started_at,
        finished_at=summary.finished_at, config={"origin": origin} if origin else {},
        runs=runs, trials=trials)])


@pytest.fixture
def window(make_window, recorded, tmp_path, qtbot):
    """A main window over its own copy of the recorded batch: an import changes its store."""
    w = make_window(compact(recorded.store_path, tmp_path / "proctor.db"))
    w.resize(1400, 860)
    qtbot.waitExposed(w)
    return w


@pytest.fixture
def importable(tmp_path, recorded) -> Path:
    """A real bundle of the recorded batch under new ids, as another machine exports it."""
    portable = copy_of_recorded(recorded.store_path)
    with Store(tmp_path / "elsewhere.db") as elsewhere:
        elsewhere.import_portable(portable)
        path = tmp_path / "from-ci.zip"
        export_bundle(elsewhere, [portable.batches[0].id], path)
    return path


def imported_id(recorded) -> str:
    return new_id(recorded.batch_id)


def wait_idle(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.transfers.busy, timeout=20_000)


def batch_count(window) -> int:
    return len(window.store.list_batches())


def test_the_file_menu_has_import_and_export_with_their_keys(window):
    menus = {a.text().replace("&", ""): a.menu() for a in window.menuBar().actions()}
    assert "File" in menus
    actions = {a.text(): a for a in menus["File"].actions() if not a.isSeparator()}
    assert actions["Import…"] is window.import_action
    assert actions["Export selected…"] is window.export_action
    assert window.import_action.shortcut() == QKeySequence("Ctrl+I")
    assert window.export_action.shortcut() == QKeySequence("Ctrl+E")


def test_import_through_the_menu_adds_the_batch_selects_it_and_says_so(window, recorded, importable,
                                                                       qtbot, monkeypatch):
    asked = []

    def choose(*args, **kwargs):
        asked.append(args[3] if len(args) > 3 else kwargs.get("filter", ""))
        return [str(importable)], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", choose)
    before = batch_count(window)
    window.import_action.trigger()
    wait_idle(qtbot, window)
    assert ".eval" in asked[0] and ".json" in asked[0], "the dialog offers Inspect logs too"
    assert batch_count(window) == before + 1
    qtbot.waitUntil(lambda: window.selected_batch == imported_id(recorded))
    assert window.browser.tree.currentIndex().data(ItemRole).id == imported_id(recorded)
    assert window.statusBar().currentMessage() == f"imported 4 trials of {imported_id(recorded)}"
    assert not window.banner.isVisible()

    window.import_files([importable])  # the same file again: nothing new, said so
    wait_idle(qtbot, window)
    assert batch_count(window) == before + 1
    assert window.statusBar().currentMessage() == "nothing new: already in the store"
    assert window.selected_batch == imported_id(recorded), "the batch it holds is selected"


def test_a_refused_file_is_one_line_in_the_banner_and_adds_nothing(window, recorded, tmp_path, qtbot):
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04 this is not a zip at all")
    before = batch_count(window)
    window.import_files([broken])
    wait_idle(qtbot, window)
    assert window.banner.isVisible()
    text = window.banner.text()
    assert "broken.zip" in text and "\n" not in text and "Traceback" not in text
    assert batch_count(window) == before


def drop(window, paths: list[Path], urls: list[QUrl] | None = None) -> tuple[bool, bool]:
    """Drag files from a file manager onto the browser's rows and drop them there (the window
    takes what its panels do not): (the drag was accepted, the drop was)."""
    target = window.browser.tree.viewport()
    mime = QMimeData()
    mime.setUrls(urls if urls is not None else [QUrl.fromLocalFile(str(p)) for p in paths])
    action = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(QPoint(50, 50), action, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False, False
    event = QDropEvent(QPointF(50, 50), action, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, event)
    return True, event.isAccepted()


def test_a_dropped_file_is_imported(window, recorded, importable, qtbot, tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert drop(window, [other]) == (False, False), "only bundles and Inspect logs"
    assert drop(window, [], [QUrl("https://example.com/run.eval")]) == (False, False), "local files only"
    before = batch_count(window)
    assert drop(window, [importable]) == (True, True)
    wait_idle(qtbot, window)
    assert batch_count(window) == before + 1
    qtbot.waitUntil(lambda: window.selected_batch == imported_id(recorded))


def test_a_large_file_shows_a_progress_bar_that_goes_away(window, recorded, importable, qtbot,
                                                          monkeypatch):
    import studio.transfer as transfer

    monkeypatch.setattr(transfer, "LARGE_BYTES", 1)  # the fixture's file counts as large
    bar = window.transfers.bar
    seen: list[int] = []
    bar.valueChanged.connect(seen.append)
    assert not bar.isVisible()
    window.import_files([importable])
    assert bar.isVisible(), "shown as the import starts"
    assert importable.name in bar.format()
    wait_idle(qtbot, window)
    assert not bar.isVisible(), "gone once it is done"
    assert seen and seen[-1] == bar.maximum(), "it moved to the end"
    assert window.selected_batch == imported_id(recorded)


def test_a_small_file_shows_no_progress_bar(window, importable, qtbot):
    shown = []
    window.transfers.started.connect(lambda: shown.append(window.transfers.bar.isVisible()))
    window.import_files([importable])
    wait_idle(qtbot, window)
    assert shown == [False]


def test_an_imported_batch_shows_its_origin(window, recorded, importable, qtbot):
    window.import_files([importable])
    wait_idle(qtbot, window)
    qtbot.waitUntil(lambda: window.selected_batch == imported_id(recorded))
    index = window.browser.model.index_of("batch", imported_id(recorded))
    assert index.data(ItemRole).origin == ORIGIN
    assert ORIGIN in index.data(ToolTipRole)
    assert "imported" in index.data()  # the name column marks it
    ours = window.browser.model.index_of("batch", recorded.batch_id)
    assert ours.data(ItemRole).origin is None and "imported" not in ours.data()
    assert "imported" not in ours.data(ToolTipRole)

    overview = window.overview_page.batch
    qtbot.waitUntil(lambda: overview.batch_id == imported_id(recorded))
    assert overview.origin.isVisible() and ORIGIN in overview.origin.text()
    assert ORIGIN in window.header.reason.full_text() or ORIGIN in window.header.origin.text()

    window.browser.select_id(recorded.batch_id)  # one of our own: no origin line
    qtbot.waitUntil(lambda: overview.batch_id == recorded.batch_id)
    assert not overview.origin.isVisible()
    assert ORIGIN not in window.header.reason.full_text()


def test_summaries_carry_the_origin(tmp_path, recorded):
    with Store(tmp_path / "s.db") as store:
        store.import_portable(copy_of_recorded(recorded.store_path))
        summary = store.batch_summary(imported_id(recorded))
        assert isinstance(summary, BatchSummary) and summary.origin == ORIGIN
        assert [b.origin for b in store.list_batches()] == [ORIGIN]


def test_an_origin_that_is_not_a_sentence_is_not_shown(tmp_path, recorded):
    """A hand-written file may put anything in the config: only a string is an origin."""
    from engine.store.browse import batches_page

    portable = copy_of_recorded(recorded.store_path)
    portable.batches[0].config["origin"] = {"tool": "inspect_ai"}
    with Store(tmp_path / "s.db") as store:
        store.import_portable(portable)
        assert [b.origin for b in batches_page(store)] == [None]
        assert store.batch_summary(imported_id(recorded)).origin is None


def test_compare_and_replay_work_on_imported_trials(window, recorded, importable, qtbot):
    window.import_files([importable])
    wait_idle(qtbot, window)
    a, b = new_id(recorded.trials["writes_greet"]), new_id(recorded.trials["adds_numbers"])
    assert window.open_compare(a, b) is None
    assert (window.compare.a.id, window.compare.b.id) == (a, b)
    assert window.compare.model.rowCount() > 0
    assert not window.banner.isVisible()
    window.show_tabs()

    record = window.store.get_trial(a)
    assert list(window.store.trial_events(a)) == [], "no events: replayed from its record"
    assert window.browser.select_id(a)
    qtbot.waitUntil(window.replay_action.isEnabled)
    window.replay_action.trigger()
    assert window.pages.currentWidget() is window.replay_page
    player = window.replay.player
    player.set_speed(0)
    player.play()
    qtbot.waitUntil(lambda: player.at_end and not player.playing, timeout=10_000)
    trajectory = window.replay_page.trajectory
    # Every item under its turn's header (and the checks among them, where the chips show them).
    assert trajectory.model.rowCount() >= len(record.trajectory) + len(record.turns) > 2


def test_export_selected_writes_a_bundle_of_the_selection(window, recorded, tmp_path, qtbot,
                                                          monkeypatch):
    target = tmp_path / "out.zip"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    a = recorded.trials["writes_greet"]
    assert window.browser.select_id(a)
    window.export_action.trigger()
    wait_idle(qtbot, window)
    assert not window.banner.isVisible(), window.banner.text()
    assert window.statusBar().currentMessage() == f"exported 1 trial to {target}"
    [batch] = read_bundle(target).batches
    assert [t.id for t in batch.trials] == [a]

    assert window.browser.select_id(recorded.batch_id)
    window.export_action.trigger()
    wait_idle(qtbot, window)
    assert len(read_bundle(target).batches[0].trials) == 4


def test_export_with_nothing_selected_says_so(window, qtbot, monkeypatch):
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *a, **k: pytest.fail("no dialog when nothing is selected"))
    window.browser.tree.clearSelection()
    window.export_action.trigger()
    assert "select" in window.statusBar().currentMessage()


def test_an_export_that_cannot_be_written_is_one_line(window, recorded, tmp_path, qtbot, monkeypatch):
    target = tmp_path / "no such folder" / "out.zip"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    assert window.browser.select_id(recorded.batch_id)
    window.export_action.trigger()
    wait_idle(qtbot, window)
    assert window.banner.isVisible()
    text = window.banner.text()
    assert str(target) in text and "\n" not in text and "Traceback" not in text


def test_a_second_job_waits_for_the_first(window, importable, qtbot):
    window.import_files([importable])
    window.import_files([importable])  # at once, while the first still runs
    assert window.statusBar().currentMessage().startswith("an import or export is still running")
    wait_idle(qtbot, window)
    assert window.statusBar().currentMessage().startswith("imported 4 trials")


INSPECT_LOG = '''
import sys
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

def out(text):
    output = ModelOutput.from_content(model="mockllm/model", content=text)
    output.usage = ModelUsage(input_tokens=10, output_tokens=2, total_tokens=12)  # no tokenizer
    return output

task = Task(name="greets", dataset=[Sample(input="Say hi", target="hi"),
                                    Sample(input="Say bye", target="bye")],
            solver=generate(), scorer=match())
model = get_model("mockllm/model", custom_outputs=[out("hi"), out("nope")])
[log] = inspect_eval(task, model=model, log_dir=sys.argv[1], display="none")
print(log.location)
'''


@pytest.fixture(scope="module")
def inspect_log(tmp_path_factory) -> Path:
    """A log Inspect AI itself writes: task greets, two samples, one right and one wrong."""
    pytest.importorskip("inspect_ai")
    folder = tmp_path_factory.mktemp("inspect")
    done = subprocess.run([sys.executable, "-c", INSPECT_LOG, str(folder)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "INSPECT_LOG_DIR": str(folder)})
    assert done.returncode == 0, done.stderr
    [path] = folder.glob("*.eval")
    return path


@pytest.mark.slow
def test_a_dropped_inspect_log_opens_as_a_batch_whose_trials_compare_and_replay(window, inspect_log,
                                                                              qtbot):
    before = {b.batch_id for b in window.store.list_batches()}
    assert drop(window, [inspect_log]) == (True, True)
    wait_idle(qtbot, window)
    assert not window.banner.isVisible(), window.banner.text()
    [batch] = [b for b in window.store.list_batches() if b.batch_id not in before]
    qtbot.waitUntil(lambda: window.selected_batch == batch.batch_id)
    assert batch.origin and inspect_log.name in batch.origin and "greets" in batch.origin
    index = window.browser.model.index_of("batch", batch.batch_id)
    assert batch.origin in index.data(ToolTipRole) and "imported" in index.data()
    overview = window.overview_page.batch
    qtbot.waitUntil(lambda: overview.batch_id == batch.batch_id)
    assert overview.origin.isVisible() and inspect_log.name in overview.origin.text()
    assert "imported" in window.header.title.full_text()

    trials = {t.outcome: t.id for run in batch.runs for t in run.trials}
    assert set(trials) == {"pass", "fail"}, "hi matches its target, nope does not"
    assert window.open_compare(trials["pass"], trials["fail"]) is None
    assert window.compare.model.rowCount() > 0
    window.show_tabs()
    assert window.browser.select_id(trials["pass"])
    qtbot.waitUntil(window.replay_action.isEnabled)
    window.replay_action.trigger()
    player = window.replay.player
    player.set_speed(0)
    player.play()
    qtbot.waitUntil(lambda: player.at_end and not player.playing, timeout=10_000)
    assert not window.banner.isVisible(), window.banner.text()


@pytest.mark.parametrize("done, message", [
    (Imported(["b_1"], added=3), "imported 3 trials of b_1"),
    (Imported(["b_1", "b_2"], added=1, same=2), "imported 1 trial of 2 batches (2 already in the store)"),
    (Imported(["b_1"], same=4), "nothing new: already in the store"),
    (Imported(["b_1"], new_batches=1), "imported 0 trials of b_1"),
    (Imported([], refused=["x.zip: not a zip file"]), None),
])
def test_what_an_import_says(done, message):
    assert done.message == message
