"""A batch's failure groups in its Overview (engine.groups): largest first, each with its
count, kind, an example reason, the variants it hit and its first trial as a link.

`FailureGroupsModel` reads a batch's groups off the GUI thread and says `changed`;
`FailureGroupsView` takes the model and subscribes to it. A picked group offers "Show
these trials" (the browser shows exactly its trials: `group_opened`), "Compare a pass
with one of these" (its first trial against the nearest passing trial of the same case:
`compare_requested`), and its note (the page's note editor, on "group:<key>").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout, QHeaderView, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget,
)

from engine.groups import FailureGroup, failure_groups, nearest_pass, note_target
from engine.store import Store, StoreError
from engine.text import plural
from studio.off_gui import OffGuiThread
from studio.theme import OUTCOME_COLOUR, amber_text
from studio.widgets import MUTED, make_table, table_item

GroupRole = Qt.ItemDataRole.UserRole  # a row's group index
ROWS_VISIBLE = 8  # rows of the table before it scrolls
VARIANTS_PX = 120  # the variants' column at most, elided (the reason needs the width more)
NONE_TEXT = "No failed or void trial: nothing to group."


class FailureGroupsModel(QObject):
    """`show_batch(batch_id)`: that batch's groups, read on a worker thread; `changed` once
    they are in (or the read failed: `error`)."""

    changed = Signal()

    def __init__(self, store: Store, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.batch_id: str | None = None
        self.groups: list[FailureGroup] = []
        self.error: str | None = None
        self.reading = False
        self._generation = 0  # a read that lands for a batch no longer shown is dropped
        self._off_gui = OffGuiThread(self)

    def show_batch(self, batch_id: str) -> None:
        self._generation += 1
        generation, store = self._generation, self.store
        if batch_id != self.batch_id:
            self.groups, self.error = [], None
        self.batch_id, self.reading = batch_id, True

        def done(result: list[FailureGroup] | Exception) -> None:
            if generation != self._generation:
                return
            self.reading = False
            if isinstance(result, Exception):
                self.groups, self.error = [], f"Could not group the failures: {result}"
            else:
                self.groups, self.error = result, None
            self.changed.emit()

        self._off_gui.run(lambda: failure_groups(store, batch_id), done)

    def clear(self) -> None:
        self._generation += 1
        self.batch_id, self.groups, self.error, self.reading = None, [], None, False
        self.changed.emit()

    def compare_pair(self, group: FailureGroup) -> tuple[str, str] | None:
        """A passing trial (A) and the first of the group's trials that has one (B)."""
        for trial_id in group.trial_ids[:20]:  # a few queries each: the first that has a pass
            if (found := nearest_pass(self.store, trial_id)) is not None:
                return found, trial_id
        return None


class FailureGroupsView(QWidget):
    """The groups as a table; a picked group's actions and note below it."""

    group_opened = Signal(object)  # a FailureGroup: show exactly its trials
    trial_activated = Signal(str)  # its first trial's link
    compare_requested = Signal(str, str)  # a pass, then one of the group's trials

    def __init__(self, model: FailureGroupsModel, note_editor: Callable[[str], Any] | None = None,
                 parent: QWidget | None = None) -> None:
        """`note_editor(target)`: the page's note editor for a group (panels import no panel)."""
        super().__init__(parent)
        self.model = model
        self._note_editor = note_editor
        self._picked_key: str | None = None  # kept while the groups are read again
        self.note: Any = None  # a NoteEditor: its `target`, `flush()`
        self.note_at = QVBoxLayout()  # where the picked group's note editor goes
        self.note_at.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel(wordWrap=True)
        self.status.setStyleSheet(MUTED)
        self.table = make_table(["Trials", "Kind", "Reason", "Variants", "First check", "First"])
        self.table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # The reason takes the width the others leave, elided (whole in its tooltip): at
        # 1,024 px a scroll bar across the table hid its last row.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)  # variants: capped
        header.setStretchLastSection(False)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setCursor(Qt.CursorShape.PointingHandCursor)
        self.table.cellClicked.connect(self._clicked)
        self.table.currentCellChanged.connect(lambda *_cells: self._picked())  # the keyboard's pick too
        self.table.cellDoubleClicked.connect(lambda row, _c: self.open_group(row))
        self.open_button = QPushButton("Show these trials", clicked=lambda: self.open_group())
        self.open_button.setToolTip("The browser shows exactly this group's trials")
        self.compare_button = QPushButton("Compare a pass with one of these",
                                          clicked=lambda: self.compare_group())
        self.compare_button.setToolTip("Its first trial against the nearest passing trial of the "
                                       "same case: same variant first, then the most alike commands")
        self.picked = QLabel()
        self.picked.setStyleSheet(MUTED)
        actions = QHBoxLayout()
        actions.setContentsMargins(0, 0, 0, 0)
        actions.addWidget(self.picked, 1)
        actions.addWidget(self.open_button)
        actions.addWidget(self.compare_button)
        self.actions = QWidget()
        column = QVBoxLayout(self.actions)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(actions)
        column.addLayout(self.note_at)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.status)
        layout.addWidget(self.table)
        layout.addWidget(self.actions)
        model.changed.connect(self._show)
        self._show()

    @property
    def current(self) -> FailureGroup | None:
        row = self.table.currentRow()
        return self.model.groups[row] if 0 <= row < len(self.model.groups) else None

    def _show(self) -> None:
        groups = self.model.groups
        key = self._picked_key  # read before the rows change: the model may have been cleared meanwhile
        self.table.setRowCount(len(groups))
        for row, g in enumerate(groups):
            void = g.outcome == "infra_error"
            colour = amber_text() if void else OUTCOME_COLOUR["fail"]
            first = table_item(g.trial_ids[0], mono=True, tip=f"Open {g.trial_ids[0]}")
            first.setForeground(self.palette().link())
            font = first.font()
            font.setUnderline(True)
            first.setFont(font)
            items = [table_item(f"{g.count:,}", colour=colour, align_right=True,
                                tip=f"{plural(g.count, 'trial')} in {plural(len(g.cases), 'case')}"),
                     table_item(f"{g.kind} (void)" if void else g.kind, colour=colour),
                     table_item(g.reason, tip=f"{g.reason}\n\nsignature: {g.signature}"),
                     table_item(", ".join(g.variants)), table_item(g.where or "—"), first]
            for column, item in enumerate(items):
                item.setData(GroupRole, row)
                self.table.setItem(row, column, item)
        self.table.setColumnWidth(3, min(self.table.sizeHintForColumn(3), VARIANTS_PX))
        rows = min(len(groups), ROWS_VISIBLE)
        height = self.table.horizontalHeader().height() + 2 * self.table.frameWidth() + 2
        height += sum(self.table.rowHeight(r) for r in range(rows))
        self.table.setFixedHeight(height)
        self.table.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAsNeeded if len(groups) > ROWS_VISIBLE
            else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setVisible(bool(groups))
        if self.model.error:
            self.status.setText(self.model.error)
        elif self.model.reading and not groups:
            self.status.setText("grouping failures…")
        elif not groups:
            self.status.setText(NONE_TEXT)
        else:
            failed = sum(g.count for g in groups)
            self.status.setText(f"{plural(failed, 'failed or void trial')} in "
                                f"{plural(len(groups), 'group')}, the largest first; a group's "
                                "reason is one of its trials' own.")
        # The group picked before stays picked when its key is still there (a refresh).
        row = next((r for r, g in enumerate(groups) if g.key == key), 0 if groups else -1)
        self.table.setCurrentCell(row, 0) if row >= 0 else self.table.clearSelection()
        self._picked()

    def _clicked(self, row: int, column: int) -> None:
        self._picked()
        if column == 5 and 0 <= row < len(self.model.groups):
            self.trial_activated.emit(self.model.groups[row].trial_ids[0])

    def _picked(self) -> None:
        """The picked group's actions and its note editor (made anew for another group)."""
        group = self.current
        self.actions.setVisible(group is not None)
        if group is None:
            if self.model.groups:  # an empty table while it reads again forgets nothing
                self._picked_key = None
            self._drop_note()
            return
        self._picked_key = group.key
        self.picked.setText(f"{plural(group.count, 'trial')} · group {group.key}")
        if self._note_editor is not None and (self.note is None or self.note.target not in group.targets):
            self._drop_note()
            try:  # a note made while another of its signatures was the largest is still its note
                target = note_target(self.model.store, group)
            except StoreError:
                target = group.target
            self.note = self._note_editor(target)
            self.note_at.addWidget(self.note)

    def _drop_note(self) -> None:
        if self.note is not None:
            self.note.flush()  # an edit waiting for a pause in typing is saved, not lost
            self.note.setParent(None)
            self.note.deleteLater()
            self.note = None

    def open_group(self, row: int | None = None) -> None:
        if row is not None and row != self.table.currentRow():
            self.table.setCurrentCell(row, 0)
        if (group := self.current) is not None:
            self.group_opened.emit(group)

    def compare_group(self) -> str | None:
        """Compare the picked group's first trial with a pass; the sentence that says why
        not, else None."""
        group = self.current
        if group is None:
            return "pick a failure group first"
        try:
            pair = self.model.compare_pair(group)
        except StoreError as e:
            return str(e)
        if pair is None:
            message = (f"no trial of {', '.join(group.cases)} passed: there is no pass to "
                       "compare these with")
            self.picked.setText(message)
            return message
        self.compare_requested.emit(*pair)
        return None

