"""SPEC.md "Limits on what is stored", as a user reads them: the documented numbers, written
here as numbers (never imported from engine/limits.py, so changing a cap there fails here),
checked on what the store really holds after a real trial, and on the caps' own functions."""

from __future__ import annotations

import json
import re

from engine.limits import cap_evidence, cap_item, cap_source
from engine.models import TrajectoryItem
from tests.conftest import DEFAULT_TOML

# SPEC.md, "Limits on what is stored".
ITEM_TEXT = 4_000
EVIDENCE_TOTAL = 64_000
EVIDENCE_VALUE = 16_000
EVIDENCE_ENTRIES = 64
SOURCE_FILES = 100
SOURCE_CHARS = 1_000_000

# A cut keeps the head and says how much went; the mark takes its room from inside the cap.
MARK = re.compile(r"\n… \[truncated [\d,]+ chars\]$")
# The mark is about 30 characters, so a cut text is at most this much shorter than its cap.
MARK_ROOM = 40


def cut_at(text: str, cap: int) -> bool:
    """`text` was cut to `cap`: it fills the cap but for the mark's room, and ends with the mark."""
    return cap - MARK_ROOM <= len(text) <= cap and MARK.search(text) is not None


# --- the caps' functions, with SPEC's numbers (no Docker) --------------------------------------


def test_an_items_text_is_cut_at_4000_characters():
    item = cap_item(TrajectoryItem(kind="message", turn=1, role="assistant", text="x" * 10_000))
    assert item.truncated and cut_at(item.text, ITEM_TEXT), len(item.text)
    whole = TrajectoryItem(kind="message", turn=1, role="assistant", text="x" * ITEM_TEXT)
    assert cap_item(whole).text == whole.text  # exactly at the cap: kept as it is


def test_one_evidence_value_is_cut_at_16000_characters():
    capped, truncated = cap_evidence({"stdout": "x" * 20_000, "exit_code": 0})
    assert truncated and cut_at(capped["stdout"], EVIDENCE_VALUE), len(capped["stdout"])
    whole = {"stdout": "x" * EVIDENCE_VALUE}
    assert cap_evidence(whole) == (whole, False)


def test_a_validators_evidence_is_at_most_64000_characters_and_64_entries():
    capped, _ = cap_evidence({"responses": ["r" * 15_000] * 6})
    assert len(json.dumps(capped, ensure_ascii=False)) <= EVIDENCE_TOTAL
    capped, _ = cap_evidence({"calls": list(range(100))})
    assert capped["calls"] == list(range(EVIDENCE_ENTRIES))


def test_the_source_snapshot_keeps_at_most_100_files_and_a_million_characters():
    files = {f"evals/f{i:03}.py": "pass\n" for i in range(250)}
    assert list(cap_source(files)) == list(files)[:SOURCE_FILES]
    big = {f"f{i}.py": "x" * 300_000 for i in range(5)}
    kept = cap_source(big)
    assert SOURCE_CHARS - MARK_ROOM <= sum(map(len, kept.values())) <= SOURCE_CHARS


# --- a real trial: what the store holds --------------------------------------------------------

KEY = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"


def straddling(cap: int) -> str:
    """A text of about `cap` + 6,000 characters whose key starts 10 characters before the cut
    (the mark takes 26: "\n… [truncated 6,0xx chars]"). Cut first, "sk-proj-A1" would be kept,
    too short for any pattern to know it; redacted first, nothing of it is."""
    return "x" * (cap - 37) + " " + KEY + " " + "y" * 6000


AGENT = f"""
python3 - <<'PY'
import json
print(json.dumps({{"type": "message", "role": "assistant", "text": {straddling(ITEM_TEXT)!r}}}))
print(json.dumps({{"type": "command", "command": "cat build.log", "exitCode": 0,
                  "output": "o" * 10_000}}))
print({straddling(EVIDENCE_VALUE)!r})  # no JSON: the turn's raw output
print(json.dumps({{"type": "finished", "reason": "done"}}))
PY
"""

# The check prints straddling(EVIDENCE_VALUE) + "THE-END", the key written in two pieces so that
# the eval file itself holds none.
EVAL = """
from pathlib import Path
from engine import evaluation

@evaluation(files={".agent/run.sh": Path("agent.sh")})
def says_a_lot(c):
    c.send("talk")
    # The verdict reads the whole output, past the stored cut.
    c.exec("python3 -c \\"print('x' * 15963 + ' s' + 'k-proj-A1b2C3d4E5f6G7h8I9j0K1l2 '"
           " + 'y' * 6000 + 'THE-END')\\"").stdout.to_contain("THE-END")
"""


def test_a_stored_record_is_capped_to_specs_numbers_and_redacted_before_the_cut(suite, run_eval):
    path = suite(EVAL, DEFAULT_TOML, files={"agent.sh": AGENT})
    summary, _, records = run_eval(path)
    [record] = records.values()
    assert record.outcome == "pass", record.failure
    message, command = record.trajectory
    assert message.truncated and cut_at(message.text, ITEM_TEXT), len(message.text)
    assert command.truncated and cut_at(command.output, ITEM_TEXT), len(command.output)
    [turn] = record.turns
    assert cut_at(turn.final_message, ITEM_TEXT), len(turn.final_message)
    assert cut_at(turn.raw_output, EVIDENCE_VALUE), len(turn.raw_output)
    [check] = record.validations
    assert check.status == "passed" and check.truncated  # truncation never changes a verdict
    stdout = check.evidence["stdout"]
    assert cut_at(stdout, EVIDENCE_VALUE), len(stdout)
    assert len(record.source) <= SOURCE_FILES
    assert sum(map(len, record.source.values())) <= SOURCE_CHARS
    # Redacted whole, then cut: no fragment of a key that straddled a cut is stored.
    for text, cap in ((message.text, ITEM_TEXT), (turn.final_message, ITEM_TEXT),
                      (turn.raw_output, EVIDENCE_VALUE), (stdout, EVIDENCE_VALUE)):
        assert text.startswith("x" * (cap - 37) + " [redact"), text[cap - 60:]
    assert "sk-" not in json.dumps(record.to_json())
