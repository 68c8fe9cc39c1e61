"""A person's note and label on one trial or failure group (engine.models.Note), edited in
place: a label field offering the labels already in use, a short text, and a line that says
whether what is shown is saved.

An edit is saved once typing pauses (or on `flush`, when the editor is left); the store's
writer commits it and a worker thread waits for that, so the GUI thread never does. What is
past the model's bounds is refused, not cut: the line says why in red and nothing is stored.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime, timezone
from functools import cache

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from engine.models import NOTE_LABEL_MAX, NOTE_TEXT_MAX, Note
from engine.redact import Redactor
from engine.store import Store, StoreError

from ..off_gui import STORE_WAIT_S, OffGuiThread
from ..theme import VALIDATION_COLOUR

SAVE_DEBOUNCE_MS = 600  # a save once typing pauses, not one a key
TEXT_LINES = 3
REFUSED_STYLE = f"color: {VALIDATION_COLOUR['failed']}; font-weight: 600;"


@cache
def _redactor() -> Redactor:
    """One for the studio: building one compiles its patterns (and it is thread-safe)."""
    return Redactor()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _saved(note: Note) -> str:
    return f"Saved {note.updated_at[:16].replace('T', ' ')} UTC"


class NoteEditor(QWidget):
    """`NoteEditor(store, target)`: the note on `target`, a trial id or "group:" and a failure
    group's key. `saved` carries the Note now stored, or None when the edit took it away."""

    saved = Signal(object)

    def __init__(self, store: Store, target: str, parent: QWidget | None = None,
                 debounce_ms: int = SAVE_DEBOUNCE_MS) -> None:
        super().__init__(parent)
        self.store = store
        self.target = target
        self.refused = False  # what is shown is past a bound and was not saved
        self._worker = OffGuiThread(self)
        self._stored: tuple[str | None, str] = (None, "")  # label and text the store holds
        self._debounce = QTimer(self, singleShot=True, interval=debounce_ms, timeout=self.save)

        self.label = QComboBox(editable=True, toolTip=f"A label, at most {NOTE_LABEL_MAX} "
                               "characters; the browser filters by it")
        self.label.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.label.lineEdit().setPlaceholderText("Label, e.g. env problem")
        self.label.setMinimumContentsLength(16)
        self.text = QPlainTextEdit(placeholderText="A note: what went wrong, what to try next…",
                                   tabChangesFocus=True)
        line = self.text.fontMetrics().lineSpacing()
        self.text.setFixedHeight(line * TEXT_LINES + 2 * self.text.frameWidth() + 8)
        self.status = QLabel(wordWrap=True)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("Note"))
        top.addWidget(self.label, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.text)
        layout.addWidget(self.status)
        self._load()
        self.label.editTextChanged.connect(self._edited)
        self.text.textChanged.connect(self._edited)

    def _load(self) -> None:
        """The labels in use to choose from, and the target's note as the store holds it."""
        try:
            labels, note = self.store.labels(), self.store.notes([self.target]).get(self.target)
        except StoreError as exc:
            labels, note = {}, None
            self._say(f"Cannot read the note: {exc}", refused=True)
        self.label.addItem("")
        self.label.addItems(sorted(labels))
        if note is not None:
            self._stored = (note.label, note.text)
            self.label.setEditText(note.label or "")
            self.text.setPlainText(note.text)
            self._say(_saved(note))
        else:
            self.label.setEditText("")
            self._say("No note yet: type one, it is saved as you go")

    def _shown(self) -> tuple[str | None, str]:
        label = " ".join(self.label.currentText().split()) or None
        return label, self.text.toPlainText()

    def _problem(self) -> str | None:
        """Why what is shown cannot be saved, in one sentence; None when it can."""
        label, text = self._shown()
        if label is not None and len(label) > NOTE_LABEL_MAX:
            return (f"The label is {len(label):,} characters; at most {NOTE_LABEL_MAX:,} — "
                    "shorten it to save.")
        if len(text) > NOTE_TEXT_MAX:
            return (f"The note is {len(text):,} characters; at most {NOTE_TEXT_MAX:,} — "
                    "shorten it to save.")
        return None

    def _edited(self) -> None:
        if problem := self._problem():
            self._debounce.stop()
            self._say(problem, refused=True)
            return
        self._say("Editing…")
        self._debounce.start()

    def flush(self) -> None:
        """Save now what waits for a pause in typing (the editor is being left)."""
        if self._debounce.isActive():
            self.save()

    def save(self) -> None:
        self._debounce.stop()
        if problem := self._problem():
            self._say(problem, refused=True)
            return
        label, text = self._shown()
        # Stored text is redacted like everything else: a key pasted into a note is not kept.
        label = _redactor().text(label)[:NOTE_LABEL_MAX] if label else None
        text = _redactor().text(text)[:NOTE_TEXT_MAX]
        if (label, text) == self._stored:
            self._say("Saved")
            return
        note = Note(target=self.target, label=label, text=text, updated_at=_now())
        try:
            done: Future[None] = self.store.set_note(note)
        except StoreError as exc:
            self._say(f"Not saved: {exc}", refused=True)
            return
        self._say("Saving…")
        kept = note if (label or text.strip()) else None
        self._worker.run(lambda: done.result(timeout=STORE_WAIT_S),
                         lambda result: self._done(kept, result))

    def _done(self, note: Note | None, result: object) -> None:
        if isinstance(result, Exception):
            self._say(f"Not saved: {result or type(result).__name__}", refused=True)
            return
        self._stored = (note.label, note.text) if note else (None, "")
        if self._shown() == self._stored or not self._debounce.isActive():
            self._say(_saved(note) if note else "Saved: no note")
        self.saved.emit(note)

    def _say(self, words: str, refused: bool = False) -> None:
        self.refused = refused
        self.status.setText(words)
        self.status.setStyleSheet(REFUSED_STYLE if refused else "color: palette(placeholder-text);")
