"""The Egress panel: every request that left the sandbox through the gateway.

The sandbox has no network of its own; the gateway logs each request it
passes or refuses, and this table is that log.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QLabel, QStackedWidget, QVBoxLayout, QWidget

from engine.models import TrialRecord
from engine.text import fmt_ms, plural
from studio.theme import VALIDATION_COLOUR
from studio.widgets import empty_state, fmt_bytes, make_table, table_item

EMPTY = ("No requests left this sandbox (it has no network; the egress gateway logs what goes "
         "through it).")
COLUMNS = ["method", "host", "path", "allowed", "brokered", "status", "bytes", "duration"]


class EgressView(QWidget):
    """`show_record(record)`; None, or a trial with no requests, shows an empty state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setContentsMargins(12, 8, 12, 6)
        self.table = make_table(COLUMNS)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.table.setSortingEnabled(False)
        header = self.table.horizontalHeader()
        for c in range(len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.empty = empty_state()
        table_page = QWidget()
        page = QVBoxLayout(table_page)
        page.setContentsMargins(0, 0, 0, 0)
        page.setSpacing(0)
        page.addWidget(self.summary)
        page.addWidget(self.table, 1)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.empty)
        self.pages.addWidget(table_page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.pages)
        self.show_record(None)

    def show_record(self, record: TrialRecord | None) -> None:
        entries = record.egress if record is not None else []
        self.table.setRowCount(len(entries))
        if not entries:
            self.empty.setText(EMPTY if record is not None
                               else "Select a trial to see the requests its sandbox made.")
            self.pages.setCurrentWidget(self.empty)
            return
        blocked = sum(not e.allowed for e in entries)
        total = sum(e.bytes for e in entries)
        failed = VALIDATION_COLOUR["failed"]
        self.summary.setText(f"<b>{plural(len(entries), 'request')}</b> · "
                             f"{len(entries) - blocked} allowed · "
                             f"<span style='color:{failed}'>{blocked} blocked</span>"
                             f" · {fmt_bytes(total)}")
        for r, e in enumerate(entries):
            allowed = VALIDATION_COLOUR["passed" if e.allowed else "failed"]
            cells = [
                table_item(e.method, mono=True),
                table_item(e.host),
                table_item(e.path, mono=True),
                table_item("✓ allowed" if e.allowed else "✗ blocked", colour=allowed),
                table_item(", ".join(e.brokered) or "—",
                           tip="secrets the gateway put in this request" if e.brokered else None),
                table_item("—" if e.status is None else str(e.status), align_right=True,
                           colour=VALIDATION_COLOUR["failed"] if (e.status or 0) >= 400 else None),
                table_item(fmt_bytes(e.bytes), align_right=True),
                table_item(fmt_ms(e.ms), align_right=True),
            ]
            for c, item in enumerate(cells):
                self.table.setItem(r, c, item)
        self.pages.setCurrentIndex(1)
