"""The caps of SPEC.md "Limits on what is stored": within bounds, marked, input untouched."""

from __future__ import annotations

import copy
import json
import re

from hypothesis import given
from hypothesis import strategies as st

from engine.limits import (
    EVIDENCE_ENTRIES, EVIDENCE_TOTAL, EVIDENCE_VALUE, ITEM_TEXT, SOURCE_CHARS, SOURCE_FILES,
    cap_evidence, cap_source, truncate,
)

MARK = re.compile(r"\n… \[truncated ([\d,]+) chars\]$")


def size(evidence: dict) -> int:
    return len(json.dumps(evidence, ensure_ascii=False))


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from strings(value)


def lists(obj):
    if isinstance(obj, list):
        yield obj
    for value in obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ():
        yield from lists(value)


# --- truncate -------------------------------------------------------------------------------


def test_short_text_is_kept_as_is():
    assert truncate("hello", ITEM_TEXT) == ("hello", False)
    assert truncate("x" * ITEM_TEXT, ITEM_TEXT) == ("x" * ITEM_TEXT, False)


def test_long_text_keeps_its_head_and_says_how_much_went():
    text = "".join(f"line {i}\n" for i in range(5000))
    cut, truncated = truncate(text, ITEM_TEXT)
    assert truncated and len(cut) == ITEM_TEXT
    mark = MARK.search(cut)
    head = cut[: mark.start()]
    assert text.startswith(head)
    assert int(mark[1].replace(",", "")) == len(text) - len(head)
    assert "," in mark[1]  # thousands are grouped for the reader


@given(st.text(max_size=300), st.integers(0, 320))
def test_a_cut_is_never_longer_than_its_limit(text, limit):
    cut, truncated = truncate(text, limit)
    assert len(cut) <= limit
    assert truncated == (len(text) > limit)
    mark = MARK.search(cut)
    if truncated and mark:
        assert text.startswith(cut[: mark.start()])
        assert int(mark[1].replace(",", "")) == len(text) - mark.start()


# --- cap_evidence ---------------------------------------------------------------------------


def test_small_evidence_is_kept_as_is():
    evidence = {"stdout": "ok", "exit_code": 0, "calls": [{"n": 1}], "score": 0.5, "none": None}
    assert cap_evidence(evidence) == (evidence, False)


def test_a_long_value_is_cut_to_the_value_limit():
    evidence = {"stdout": "x" * 50_000, "exit_code": 1}
    capped, truncated = cap_evidence(evidence)
    assert truncated
    assert len(capped["stdout"]) == EVIDENCE_VALUE and MARK.search(capped["stdout"])
    assert capped["exit_code"] == 1


def test_long_lists_keep_their_first_entries_and_count_the_rest():
    evidence = {"calls": [{"i": i, "log": list(range(100))} for i in range(100)]}
    capped, truncated = cap_evidence(evidence)
    assert truncated
    assert [call["i"] for call in capped["calls"]] == list(range(EVIDENCE_ENTRIES))
    assert capped["calls"][0]["log"] == list(range(EVIDENCE_ENTRIES))
    # 36 calls dropped, and 36 log entries from each of the 64 calls kept.
    assert capped["truncated_entries"] == 36 + 64 * 36


def test_the_whole_fits_by_cutting_the_longest_strings():
    evidence = {"prompt": "p" * 15_000, "responses": ["r" * 15_000] * 6, "verdict": "pass"}
    capped, truncated = cap_evidence(evidence)
    assert truncated and size(capped) <= EVIDENCE_TOTAL
    assert capped["verdict"] == "pass"
    # Every long string was cut to one common length, and that used the room well.
    assert len({len(s) for s in [capped["prompt"], *capped["responses"]]}) == 1
    assert size(capped) > EVIDENCE_TOTAL - 200


def test_too_many_small_values_end_as_the_start_of_the_json_text():
    evidence = {"grid": [[['"' * 40] * 64] * 64] * 2}
    capped, truncated = cap_evidence(evidence)
    assert truncated and list(capped) == ["truncated_json"]
    assert size(capped) <= EVIDENCE_TOTAL
    assert capped["truncated_json"].startswith('{"grid": [[["')


def test_the_input_is_never_changed():
    evidence = {"calls": [{"out": "o" * 40_000}] * 80, "tuple": ("a" * 20_000, 1)}
    before = copy.deepcopy(evidence)
    cap_evidence(evidence)
    assert evidence == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30)
    | st.integers(0, 40_000).map(lambda n: "v" * n),
    lambda children: st.lists(children, max_size=80) | st.dictionaries(st.text(max_size=8), children, max_size=8),
    max_leaves=200,
)


@given(st.dictionaries(st.text(max_size=8), JSON, max_size=6))
def test_capped_evidence_is_always_within_every_limit(evidence):
    before = copy.deepcopy(evidence)
    capped, truncated = cap_evidence(evidence)
    assert evidence == before
    assert size(capped) <= EVIDENCE_TOTAL
    assert all(len(s) <= EVIDENCE_VALUE for s in strings(capped))
    assert all(len(entries) <= EVIDENCE_ENTRIES for entries in lists(capped))
    if not truncated:
        assert capped == evidence


# --- cap_source -----------------------------------------------------------------------------


def test_a_small_source_is_kept_as_is():
    files = {"evals/test_x.py": "print(1)\n", "evals/helpers.py": "X = 1\n"}
    assert cap_source(files) == files


def test_at_most_a_hundred_files_in_the_order_given():
    files = {f"f{i:03}.py": "pass\n" for i in range(250)}
    capped = cap_source(files)
    assert list(capped) == list(files)[:SOURCE_FILES]


def test_at_most_a_million_characters_the_last_file_cut_and_marked():
    files = {f"f{i}.py": "x" * 300_000 for i in range(5)}
    capped = cap_source(files)
    assert sum(map(len, capped.values())) <= SOURCE_CHARS
    assert list(capped) == ["f0.py", "f1.py", "f2.py", "f3.py"]
    assert capped["f0.py"] == files["f0.py"] and MARK.search(capped["f3.py"])
