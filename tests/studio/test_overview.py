"""The Overview, Egress and header over real records: how a trial ended, and what it used."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextDocumentFragment
from PySide6.QtWidgets import QLabel, QWidget

from engine.models import EgressEntry
from studio.views.egress import EgressView
from studio.views.header import TrialHeader
from studio.views.overview import OverviewView


def shown(label: QLabel) -> str:
    return QTextDocumentFragment.fromHtml(label.text()).toPlainText()


def seen(widget: QWidget) -> str:
    return "\n".join(shown(label) for label in widget.findChildren(QLabel))


@pytest.fixture
def overview(qtbot):
    w = OverviewView()
    qtbot.addWidget(w)
    w.resize(1100, 700)
    w.show()
    return w


def test_a_failed_trial_says_why_and_where(overview, records):
    overview.show_record(records["adds_numbers"])
    text = seen(overview)
    assert "✗ FAIL assertion" in text
    assert shown(overview.reason) == ("python3 -c 'from calc import add; assert add(2, 3) == 5, "
                                      "add(2, 3)' exited 1: AssertionError: -1")
    assert "where: check 1 of 2" in text
    assert overview.void_fields is None
    table = overview.phases_table
    failed = [table.item(r, 0).text() for r in range(table.rowCount())
              if table.item(r, 1).text() == "failed"]
    assert failed == ["check 1"]


def test_a_void_trial_names_its_void_fields(overview, records):
    overview.show_record(records["needs_a_lockfile"])
    assert "○ INFRA ERROR" in seen(overview)
    assert "setup step 2" in shown(overview.reason)
    assert overview.void_fields is not None
    assert "Void: no turns, trajectory, validations were recorded" in shown(overview.void_fields)


def test_a_passed_trial_shows_its_phases_timings_usage_and_artifacts(overview, records):
    record = records["writes_greet"]
    overview.show_record(record)
    assert "✓ PASS" in seen(overview)
    table = overview.phases_table
    assert table.rowCount() == len(record.phases)
    assert [table.item(r, 0).text() for r in range(3)] == ["image", "container", "env"]
    legend = shown(overview.timing_legend)
    for part in ("setup", "agent", "diff", "checks", "judge"):
        assert part in legend
    # Teardown removes the container in the background now (issue 16): what the slot waited
    # for may round to 0 ms, and a part of no time is left out of the legend.
    assert ("teardown" in legend) == (record.timings.teardown_ms > 0)
    assert [label for label, _, _ in overview.timing_bar.parts][:3] == ["setup", "agent", "diff"]
    assert overview.usage_values["input"].text() == "3,000"
    assert overview.usage_values["cache read"].text() == "2,400"
    assert overview.usage_values["reasoning"].text() == "—"
    assert "smoke" in seen(overview)
    # The captured file: its row, and its text shown once it is selected.
    assert overview.artifacts_table.item(0, 0).text() == "greet.py"
    assert overview.artifacts_table.item(0, 2).text() == record.artifacts[0].sha256[:12] + "…"
    assert overview.artifact_text is not None
    assert "def greet(name):" in overview.artifact_text.toPlainText()


def test_usage_warnings_the_engine_made_are_shown(overview, records):
    # adds_numbers' agent reported 25,000 input tokens and no cache read: the engine warned.
    overview.show_record(records["adds_numbers"])
    assert "⚠ nothing came from cache: 25,000 input tokens, none cached" in seen(overview)
    overview.show_record(records["writes_greet"])  # well cached: no warning
    assert "⚠" not in seen(overview)


def test_no_record_is_an_empty_state(overview):
    overview.show_record(None)
    assert "Select a trial" in seen(overview)


NO_REQUESTS = ("No requests left this sandbox (it has no network; the egress gateway logs what "
               "goes through it).")


def visible_text(widget: QWidget) -> list[str]:
    return [shown(label) for label in widget.findChildren(QLabel) if label.isVisible()]


def test_egress_empty_state_and_table(qtbot, records):
    view = EgressView()
    qtbot.addWidget(view)
    view.show()
    view.show_record(records["writes_greet"])
    assert visible_text(view) == [NO_REQUESTS]
    record = records["writes_greet"].model_copy(update={"egress": [
        EgressEntry(method="POST", host="api.openai.com", path="/v1/chat/completions", allowed=True,
                    brokered=["OPENAI_API_KEY"], status=200, bytes=2048, ms=800),
        EgressEntry(method="CONNECT", host="evil.example", path="/", allowed=False, status=403),
    ]})
    view.show_record(record)
    assert view.pages.currentIndex() == 1
    rows = [[view.table.item(r, c).text() for c in range(8)] for r in range(view.table.rowCount())]
    assert rows == [["POST", "api.openai.com", "/v1/chat/completions", "✓ allowed",
                     "OPENAI_API_KEY", "200", "2.0 KB", "800ms"],
                    ["CONNECT", "evil.example", "/", "✗ blocked", "—", "403", "0 B", "0ms"]]
    assert "2 requests" in shown(view.summary) and "1 blocked" in shown(view.summary)
    view.show_record(records["adds_numbers"])  # none again: the sentence, no table left over
    assert visible_text(view) == [NO_REQUESTS] and not view.table.isVisible()


def test_header_says_what_and_why(qtbot, records):
    header = TrialHeader()
    qtbot.addWidget(header)
    header.resize(1100, 60)
    header.show()
    header.show_record(records["adds_numbers"])
    assert header.title.full_text() == "adds_numbers #1 · scripted"
    assert shown(header.outcome).strip() == "✗ FAIL assertion"
    assert header.reason.full_text().endswith("exited 1: AssertionError: -1 (check 1 of 2)")
    header.show_record(records["needs_a_lockfile"])
    assert header.reason.full_text().endswith("(setup step 2) · void")
    header.show_record(records["writes_greet"])
    assert shown(header.outcome).strip() == "✓ PASS"
    assert header.reason.full_text().startswith("3 of 3 validations passed · 2 turns · 2 commands")
    header.show_live("writes_greet", 2, "scripted", "turn 1", 12_300)
    assert header.title.full_text() == "writes_greet #2 · scripted"
    assert shown(header.outcome).strip() == "● RUNNING"
    assert header.reason.full_text() == "turn 1 · 12s elapsed"
    # A long reason is cut to fit, never widening the panel; the whole of it is in the tooltip.
    header.resize(300, 60)
    header.show_record(records["adds_numbers"])
    assert shown(header.reason).endswith("…")
    assert header.reason.toolTip() == header.reason.full_text()


def test_the_usage_part_says_what_the_trial_cost(overview, records):
    """A priced record shows its dollars and model; tokens with no price say why, never $0."""
    from engine.cost import Price, price_record

    record = records["writes_greet"]
    # The command harness names no model: its tokens have no price.
    overview.show_record(record)
    assert shown(overview.cost_label) == "cost unknown: no model recorded"
    served = record.model_copy(deep=True)
    for turn in served.turns:
        turn.model = "acme-coder-1"
    overview.show_record(served)
    assert shown(overview.cost_label) == ("cost unknown: no price for acme-coder-1 "
                                          "(add it to [prices] in proctor.toml)")
    price_record(served, {"acme-coder-1": Price(input=1000.0, output=1000.0)})
    overview.show_record(served)
    assert served.cost_usd and served.cost_usd > 0.01
    assert shown(overview.cost_label) == f"cost ${served.cost_usd:,.2f} · acme-coder-1"
