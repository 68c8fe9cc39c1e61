"""The caps of SPEC.md "Limits on what is stored" (and of issue 8 on what the agent controls):
within bounds, marked, input untouched."""

from __future__ import annotations

import copy
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.limits import (
    DIFF_FILE, DIFF_FILE_READ, DIFF_SOURCE, DIFF_TOTAL, DIFF_TOTAL_READ, DIFF_TRIAL,
    EVIDENCE_ENTRIES, EVIDENCE_TOTAL, EVIDENCE_VALUE, FAILURE_REASON, FILES_CHANGED, ITEM_TEXT,
    SOURCE_CHARS, SOURCE_FILES, cap_diff, cap_diffs, cap_evidence, cap_item, cap_source, clean,
    read_cut, redact, truncate,
)
from engine.phases.diff import tree_diff
from engine.redact import MARK as REDACTED, Redactor

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


# --- diffs: per file, per diff, per trial -----------------------------------------------------

def text_file(lines: int, word: str = "line") -> bytes:
    return "".join(f"{word} {i} of a changed file\n" for i in range(lines)).encode()


def test_a_file_past_the_read_cap_is_one_too_large_line():
    new = text_file(30_000)  # about 750 kB of diff
    diff, files = tree_diff({}, {"big.txt": new, "small.txt": b"hello\n"})
    assert files == ["big.txt", "small.txt"]
    assert f"diff of big.txt too large ({len(new):,} bytes)" in diff
    assert "+hello" in diff and len(diff) < 1000
    assert "diff --git a/big.txt b/big.txt\nnew file mode 100644\n" in diff


def test_a_file_larger_than_diff_source_is_named_not_diffed():
    old, new = text_file(60_000, "old"), text_file(60_000, "new")
    assert len(new) > DIFF_SOURCE
    diff, _ = tree_diff({"f.txt": old}, {"f.txt": new})
    assert diff == f"diff --git a/f.txt b/f.txt\ndiff of f.txt too large ({len(new):,} bytes)\n"


def test_many_changed_files_are_cut_while_diffing_and_counted():
    after = {f"f{i:03d}.txt": text_file(500, f"w{i}") for i in range(400)}
    diff, files = tree_diff({}, after)
    assert len(files) == 400
    assert len(diff) <= DIFF_TOTAL_READ + DIFF_FILE_READ
    assert re.search(r"diffs of [\d,]+ more files left out", diff)


TREES = st.dictionaries(st.sampled_from([f"d/{c}.txt" for c in "abcdefgh"]),
                        st.integers(0, 12_000).map(lambda n: text_file(n)), max_size=8)


@settings(max_examples=40, deadline=None)
@given(before=TREES, after=TREES, limit=st.integers(0, 3 * DIFF_FILE))
def test_a_capped_diff_is_within_its_limit_and_keeps_files_whole_or_marked(before, after, limit):
    diff, files = tree_diff(before, after)
    capped, cut = cap_diff(diff, limit)
    assert len(capped) <= max(limit, 200) and cut == (capped != diff)
    sections = [s for s in re.split(r"(?=^diff --git )", capped, flags=re.M) if s.startswith("diff --git")]
    for section in sections:
        path = section.split(" b/", 1)[0][len("diff --git a/"):]
        whole = re.search(r"(?ms)^diff --git a/" + re.escape(path) + r" b/.*?(?=^diff --git |\Z)", diff)
        # Kept as made, or one "too large" line: never a cut inside a file's hunks.
        body = section.split("diffs of ")[0]
        assert body == whole.group(0) or f"diff of {path} too large" in body
    counted = re.search(r"diffs of ([\d,]+) more files left out", capped)
    assert len(sections) + (int(counted.group(1).replace(",", "")) if counted else 0) == len(files)


def test_a_trials_diffs_share_one_budget_the_cumulative_first():
    one_file = "".join(f"diff --git a/f{i}.txt b/f{i}.txt\n" + "+x\n" * 20_000 for i in range(20))
    diffs, cumulative = cap_diffs([one_file] * 10, one_file)
    assert len(cumulative) <= DIFF_TOTAL and "f0.txt" in cumulative
    assert len(cumulative) + sum(map(len, diffs)) <= DIFF_TRIAL + 10 * 200
    assert "left out" in diffs[-1] and "+x" not in diffs[-1]


# --- items, and what any serializer can write -------------------------------------------------


def test_clean_repairs_surrogates_drops_nan_and_cuts_deep_nesting():
    deep: object = "leaf"
    for _ in range(100):
        deep = [deep]
    notes: set[str] = set()
    value = clean({"\ud800": [float("nan"), float("inf"), 1.5, "a\udfffb"], "deep": deep}, notes)
    assert value["\ufffd"] == [None, None, 1.5, "a\ufffdb"]
    assert json.dumps(value, allow_nan=False).encode()
    assert len(notes) == 3
    assert "nested deeper than 32 levels" in json.dumps(value)


def test_an_item_is_capped_field_by_field_and_marked():
    from engine.models import TrajectoryItem

    item = TrajectoryItem(kind="toolCall", turn=1, name="n" * 5000, input={"blob": "b" * 50_000},
                          output="o" * 50_000, warnings=["input: lone surrogates replaced"])
    capped = cap_item(item)
    assert capped.truncated and len(capped.output) <= ITEM_TEXT and len(capped.name) <= 1000
    assert isinstance(capped.input, str) and len(capped.input) <= 4000 and capped.input.startswith('{"blob"')
    assert capped.warnings == item.warnings and len(item.output) == 50_000  # the original is kept
    small = TrajectoryItem(kind="toolCall", turn=1, name="edit", input={"path": "a.py"})
    assert cap_item(small) == small


def test_a_stored_record_caps_every_field_the_agent_controls():
    from engine.models import Failure, TrialRecord, TurnRecord
    from engine.trial import _capped

    big_diff = "".join(f"diff --git a/f{i}.txt b/f{i}.txt\n" + "+x\n" * 20_000 for i in range(30))
    turns = [TurnRecord(index=i, prompt="p", status="completed", ms=1, diff=big_diff,
                        final_message="m" * 100_000, raw_output="r" * 100_000, finished_reason="f" * 100_000,
                        files_changed=[f"f{j}" for j in range(5000)]) for i in range(1, 6)]
    turns[-1].cumulative_diff = big_diff
    record = TrialRecord(id="t", batch_id="b", run_id="r", case_id="c", variant="v", trial=1,
                         trigger="api", turns=turns, outcome="infra_error",
                         failure=Failure(kind="infra", reason="the harness reported failed: " + "z" * 50_000))
    capped = _capped(record, Redactor())
    diffs = sum(len(t.diff) + len(t.cumulative_diff) for t in capped.turns)
    assert diffs <= DIFF_TRIAL + 5 * 200
    for turn in capped.turns:
        assert len(turn.final_message) <= ITEM_TEXT and len(turn.raw_output) <= EVIDENCE_VALUE
        assert len(turn.finished_reason) <= ITEM_TEXT and len(turn.files_changed) == FILES_CHANGED + 1
    assert len(capped.failure.reason) <= FAILURE_REASON


# --- cuts made while reading, before redaction ------------------------------------------------

SECRET = "a-trial-secret-value-0123456789"
# Each the start of something redaction masks, too short to be recognised on its own.
# (`password=abc` at a line's end is a whole assignment since issue 11; an open quote is not.)
FRAGMENTS = ["sk-CUTabcd", "Bearer abcdefg", SECRET[:14], 'password="abc', "eyJhbGciO"]


def test_a_cut_while_reading_keeps_no_fragment_once_the_keys_before_it_shrink():
    redactor = Redactor(secrets=[SECRET])
    keys = " ".join(f"sk-{i:06d}".ljust(300, "k") for i in range(40)) + " "
    for fragment in FRAGMENTS:
        whole = keys + fragment + "xyz" * 1000 + SECRET
        text, cut = read_cut(whole, len(keys) + len(fragment))
        assert cut and text.endswith("[truncated 3,031 chars while reading]")
        # Redacted as if whole, the fragment stays: nothing shows it is the start of a key.
        assert fragment in redactor.text(text)
        stored, _ = truncate(redact(redactor, text), ITEM_TEXT)
        assert fragment not in stored and stored.count(REDACTED) > 20, fragment
        assert stored.endswith("\n… [truncated 3,031 chars]")


def test_redacting_twice_changes_nothing_and_text_without_a_cut_is_redacted_as_before():
    redactor = Redactor(secrets=[SECRET])
    plain = {"a": [f"key {SECRET} and sk-{'k' * 20}", ("Bearer abcdefghijk",)], SECRET: 1}
    assert redact(redactor, plain) == redactor.value(plain)
    cut, _ = read_cut("sk-" + "k" * 5000 + " tail " * 2000, 9000)
    value = {"out": cut, "items": [cut, "ok"]}
    once = redact(redactor, value)
    assert redact(redactor, once) == once and "while reading" not in json.dumps(once)


def test_a_failure_reason_quoting_a_cut_line_keeps_no_half_of_a_key():
    from engine.models import Validation
    from engine.redact import Redactor
    from engine.trial import _check_reason

    # The reason quotes stderr's last line cut to 160 characters, right inside a key.
    stderr = "e" * 150 + " sk-CUTabcdefghijklmnop\n"
    v = Validation(kind="command", name="make test", status="failed",
                   evidence={"exit_code": 1, "stderr": stderr, "stdout": ""})
    from engine import limits as engine_limits

    stored = engine_limits.redact(Redactor(), _check_reason(v))
    assert "sk-CUT" not in stored and stored.startswith("`make test` exited 1: eee")


def test_holds_secret_looks_at_every_text_of_a_value_at_once():
    from engine.limits import holds_secret, redact
    from engine.models import TrajectoryItem
    from engine.redact import Redactor

    redactor = Redactor()
    clean = [TrajectoryItem(kind="command", turn=1, command=f"ls {n}", output="ok") for n in range(100)]
    assert not holds_secret(redactor, clean) and redact(redactor, clean) == clean
    key = "sk-proj-ABCDEFGH12345678abcdefgh"
    for where in (dict(output=f"the key is {key}"), dict(input={"env": {"KEY": key}}),
                  dict(input={key: 1})):
        dirty = clean + [TrajectoryItem(kind="toolCall", turn=2, name="x", **where)]
        assert holds_secret(redactor, dirty), where
    # A text cut while reading must go through `redact` (the mark's half key is left out).
    cut = "token sk-proj-ABCD\n… [truncated 9,000 chars while reading]"
    assert holds_secret(redactor, [TrajectoryItem(kind="message", turn=1, text=cut)])
