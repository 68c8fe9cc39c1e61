"""engine/inspect_log.py: Inspect AI logs that Inspect itself writes (its mockllm model, no
network) read as Proctor batches, stored, and refused with one line when they are bad."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
import tempfile
import textwrap
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import inspect_log, limits
from engine.importer import ImportRefused
from engine.inspect_log import is_inspect_log, read_inspect, verdict
from engine.portable import Portable
from engine.store import Store

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "inspect"
KEY = "sk-proj-" + "a1B2c3D4" * 6

# Run in its own interpreter: inspect-ai patches zipfile (zipfile-zstd) and sets up logging,
# neither of which the engine's other tests should see.
MAKE_LOGS = textwrap.dedent('''
    import sys

    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.log import read_eval_log, write_eval_log
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import Score, match, mean, scorer
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import bash, tool

    KEY = sys.argv[2]
    NESTED = {"k": 1}
    for _ in range(40):
        NESTED = {"k": NESTED}


    @tool
    def lookup():
        async def execute(key: str) -> str:
            """Look a key up.

            Args:
              key: The key.
            """
            return f"value of {key}"
        return execute


    @tool
    def deep():
        async def execute(tree: dict) -> str:
            """Take a tree.

            Args:
              tree: The tree.
            """
            return "ok"
        return execute


    # Each prompt's script: its tool calls (function, arguments, text), then its answer.
    SCRIPTS = {
        "2+2?": ([], "4"),
        "capital of France?": ([], "Rome"),
        "use tools": ([("bash", {"command": "echo hello"}, "Saying hello first."),
                       ("bash", {"command": "echo oops >&2; exit 3"}, ""),
                       ("lookup", {"key": "k1"}, "Looking k1 up.")], "done"),
        "half": ([], "a"), "most": ([], "b"),
        "huge": ([("bash", {"command": f"python3 -c \\"print('x' * 50000)\\"; echo {KEY}"}, KEY),
                  ("deep", {"tree": NESTED}, "")], "ok"),
    }


    def respond(input, tools, tool_choice, config):
        prompt = input[0].text
        if prompt == "explode":
            raise RuntimeError("the mock model exploded")
        calls, answer = SCRIPTS[prompt]
        step = sum(m.role == "tool" for m in input)
        if step < len(calls):
            function, arguments, text = calls[step]
            out = ModelOutput.for_tool_call("mockllm/model", function, arguments, content=text)
        else:
            out = ModelOutput.from_content("mockllm/model", answer)
        # Set explicitly: without usage the mock model fetches a tokenizer to count tokens.
        out.usage = ModelUsage(input_tokens=100 + step, output_tokens=10, total_tokens=110 + step,
                               input_tokens_cache_read=50, input_tokens_cache_write=5)
        return out


    @scorer(metrics=[mean()])
    def graded():
        async def score(state, target):
            return Score(value={"half": 0.5, "most": 0.9}[state.sample_id])
        return score


    quiz = Task(name="quiz", sandbox="local", epochs=2, scorer=match(),
                solver=[use_tools(bash(), lookup()), generate()],
                dataset=[Sample(id=1, input="2+2?", target="4"),
                         Sample(id="capital", input="capital of France?", target="Paris"),
                         Sample(id="with tools", input="use tools", target="done"),
                         Sample(id="boom", input="explode", target="x")])
    graded_task = Task(name="graded", scorer=graded(), solver=generate(),
                       dataset=[Sample(id="half", input="half"), Sample(id="most", input="most")])
    unscored = Task(name="unscored", sandbox="local", solver=[use_tools(bash(), deep()), generate()],
                    dataset=[Sample(id="huge", input="huge")])

    logs = eval([quiz, graded_task, unscored], display="none", max_tasks=3,
                model=get_model("mockllm/model", custom_outputs=respond),
                log_dir=sys.argv[1], fail_on_error=False)
    for log in logs:
        assert log.status == "success", log.status
    quiz_log = next(log for log in logs if log.eval.task == "quiz").location
    write_eval_log(read_eval_log(quiz_log), sys.argv[1] + "/quiz.json")
''')


@pytest.fixture(scope="session")
def logs(tmp_path_factory) -> dict[str, Path]:
    """Logs Inspect writes, once a session: task name → its .eval file, and "json" → the
    quiz log written again by Inspect as a .json log."""
    if importlib.util.find_spec("inspect_ai") is None:  # not imported here: see MAKE_LOGS
        pytest.skip("inspect-ai is a test extra: pip install -e '.[test]'")
    folder = tmp_path_factory.mktemp("inspect-logs")
    script = folder / "make_logs.py"
    script.write_text(MAKE_LOGS)
    done = subprocess.run([sys.executable, str(script), str(folder), KEY], cwd=folder,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {path.name.split("_")[1]: path for path in folder.glob("*.eval")}
    found["json"] = folder / "quiz.json"
    return found


def by_case(portable: Portable) -> dict[tuple[str, int], object]:
    return {(t.case_id, t.trial): t for t in portable.batches[0].trials}


@pytest.mark.slow
def test_a_log_inspect_writes_becomes_runs_of_trials_with_outcomes_commands_and_tokens(logs):
    portable = read_inspect(logs["quiz"])
    batch = portable.batches[0]
    assert batch.origin == f"Inspect AI log {logs['quiz'].name} · task quiz · model mockllm/model"
    assert batch.status == "finished" and batch.config["inspect"]["version"]
    assert [(r.case_id, r.variant) for r in batch.runs] == [
        ("sample_1", "mockllm/model"), ("capital", "mockllm/model"),
        ("with_tools", "mockllm/model"), ("boom", "mockllm/model")]
    trials = by_case(portable)
    assert sorted(trials) == [(case, epoch) for case in ("boom", "capital", "sample_1", "with_tools")
                              for epoch in (1, 2)]
    outcomes = {case: trials[(case, 1)].outcome for case, _ in trials}
    assert outcomes == {"sample_1": "pass", "capital": "fail", "with_tools": "pass",
                        "boom": "infra_error"}
    assert all(trials[(case, 2)].outcome == outcome for case, outcome in outcomes.items())

    wrong = trials[("capital", 1)]
    assert wrong.failure.kind == "judge" and "answered Rome" in wrong.failure.reason
    assert [(v.kind, v.name, v.status, v.evidence["value"], v.evidence["judgment"]["score"])
            for v in wrong.validations] == [("judge", "match", "failed", "I", 0.0)]
    void = trials[("boom", 2)]
    assert void.failure.kind == "infra" and "the mock model exploded" in void.failure.reason
    assert [p.status for p in void.phases if p.phase == "turn"] == ["failed"]

    tools = trials[("with_tools", 1)]
    commands = [(i.command, i.exit_code, i.output.strip()) for i in tools.trajectory if i.kind == "command"]
    assert commands == [("echo hello", 0, "hello"), ("echo oops >&2; exit 3", 3, "oops")]
    assert tools.command_count == 2
    [call] = [i for i in tools.trajectory if i.kind == "toolCall"]
    assert (call.name, call.input, call.output) == ("lookup", {"key": "k1"}, "value of k1")
    said = [(i.role, i.text) for i in tools.trajectory if i.kind == "message"]
    assert said == [("assistant", "Saying hello first."), ("assistant", "Looking k1 up."),
                    ("assistant", "done")]
    assert all(i.at and i.at.endswith("Z") for i in tools.trajectory)
    assert tools.turns[0].prompt == "use tools" and tools.turns[0].final_message == "done"

    # Four model calls, each 100+step input tokens plus 50 read from and 5 written to cache.
    assert tools.usage.model_dump() == dict(input=4 * 155 + 6, output=40, cache_read=200,
                                            cache_write=20, reasoning=None)
    # The model that served it, as a price table names it (mockllm/model: no price, so no cost).
    assert tools.turns[0].model == "model"
    assert [p.phase for p in tools.phases] == ["container", "turn", "judge"]
    assert tools.timings.agent_ms > 0 and tools.started_at < tools.finished_at
    turn = next(p for p in tools.phases if p.phase == "turn")
    assert all(turn.end_ms <= p.start_ms for p in tools.phases if p.phase == "judge")


@pytest.mark.slow
def test_a_log_imported_twice_adds_its_trials_once(logs, tmp_path):
    portable = read_inspect(logs["quiz"])
    with Store(tmp_path / "s.db") as store:
        first = store.import_portable(portable)
        assert (first.batches_added, first.trials_added) == (1, 8)
        again = store.import_portable(read_inspect(logs["quiz"]))
        assert again.nothing_added and again.trials_same == 8
        summary = store.batch_summary(portable.batches[0].id)
        assert {r.case_id: [t.outcome for t in r.trials] for r in summary.runs} == {
            "sample_1": ["pass", "pass"], "capital": ["fail", "fail"],
            "with_tools": ["pass", "pass"], "boom": ["infra_error", "infra_error"]}
        tools = next(t for t in portable.batches[0].trials if t.case_id == "with_tools")
        stored = store.get_trial(tools.id)
        assert stored == tools
        assert [i.exit_code for i in stored.trajectory if i.kind == "command"] == [0, 3]
        assert stored.usage.cache_read == 200 and stored.usage.cache_write == 20


@pytest.mark.slow
def test_inspects_json_log_reads_as_its_eval_log_does(logs):
    from_eval, from_json = read_inspect(logs["quiz"]), read_inspect(logs["json"])
    assert is_inspect_log(logs["json"]) and is_inspect_log(logs["quiz"])
    assert from_json.batches[0].id == from_eval.batches[0].id
    pairs = zip(from_eval.batches[0].trials, from_json.batches[0].trials)
    for a, b in pairs:
        assert a.model_dump(exclude={"trajectory"}) == b.model_dump(exclude={"trajectory"})
        assert [i.to_json() for i in a.trajectory] == [i.to_json() for i in b.trajectory]


@pytest.mark.slow
def test_numeric_scores_pass_at_the_threshold_and_no_score_is_skipped(logs):
    def outcomes(threshold):
        return {c: t.outcome for (c, _), t in by_case(read_inspect(logs["graded"], threshold=threshold)).items()}

    assert outcomes(None) == {"half": "fail", "most": "fail"}  # the default threshold is 1.0
    assert outcomes(0.7) == {"half": "fail", "most": "pass"}
    assert outcomes(0.5) == {"half": "pass", "most": "pass"}
    [unscored] = read_inspect(logs["unscored"]).batches[0].trials
    assert unscored.outcome == "skipped" and unscored.failure is None


@pytest.mark.slow
def test_what_a_log_holds_is_redacted_and_capped_as_agent_output_is(logs):
    [trial] = read_inspect(logs["unscored"]).batches[0].trials
    stored = json.dumps(trial.to_json())
    assert KEY not in stored and "[redacted]" in stored
    command, call = [i for i in trial.trajectory if i.kind in ("command", "toolCall")]
    assert command.truncated and len(command.output) <= limits.ITEM_TEXT
    assert limits.CUT_DEEP in json.dumps(call.input)


@pytest.mark.parametrize("value, threshold, passed", [
    ("C", 1.0, True), ("I", 0.0, False), (True, 5.0, True), (False, 0.0, False),
    (1, 2.0, True), (0, 0.0, False), (0.5, 1.0, False), (0.5, 0.5, True), ("0.8", 0.7, True),
    ("P", 0.5, True), ("P", 1.0, False), ({"a": "C", "b": 1}, 1.0, True),
    ({"a": "C", "b": "I"}, 1.0, False), ("maybe", 1.0, None), (None, 1.0, None),
    (float("nan"), 1.0, None),
])
def test_a_score_is_pass_fail_or_unreadable(value, threshold, passed):
    assert verdict(value, threshold) is passed


def test_the_real_1000_step_log_keeps_every_step_in_order():
    log = real_log()
    steps = json.loads((DATA / "n1000" / "steps.json").read_text())
    [trial] = read_inspect(log).batches[0].trials
    commands = [i for i in trial.trajectory if i.kind == "command"]
    assert [(c.command, c.output) for c in commands] == [
        (s["command"], s["output"]) for s in steps if s["kind"] == "command"]
    assert trial.command_count == 1000 == len(steps) - 1
    assert (trial.trajectory[-1].kind, trial.trajectory[-1].text) == ("message", steps[-1]["text"])
    assert trial.outcome == "skipped" and trial.usage.input == 55_255_200


# --- logs refused, each with one line naming the file ------------------------------------------


def real_log() -> Path:
    if not (DATA / "n1000").is_dir():
        pytest.skip(f"the real Inspect logs are not at {DATA}")
    return next((DATA / "n1000").glob("*.eval"))


def rewritten_contents(source: Path | None = None) -> dict[str, bytes]:
    """The members of a log (the real 1,000-step one by default), inflated."""
    from engine.inspect_log import LIMITS
    from engine.safezip import SafeZip

    with zipfile.ZipFile(source or real_log()) as zf:
        members = SafeZip(zf, LIMITS)
        return {i.filename: bytes(members.read(i)) for i in members.infos}


def rewritten(tmp_path: Path, change, name: str = "bad.eval",
              compression: int = zipfile.ZIP_DEFLATED, source: Path | None = None) -> Path:
    """The real 1,000-step log with its members rewritten through `change` (deflated: Inspect
    reads deflated members too, and zipfile cannot write zstd ones)."""
    contents = rewritten_contents(source)
    out = tmp_path / name
    with zipfile.ZipFile(out, "w", compression) as zf:
        for member, data in change(contents):
            zf.writestr(member, data)
    return out


def refused(path: Path, *words: str) -> str:
    with pytest.raises(ImportRefused) as caught:
        read_inspect(path)
    line = str(caught.value)
    assert line.startswith(f"{path}: ") and "\n" not in line, line
    for word in words:
        assert word in line, line
    return line


def test_a_truncated_log_is_refused(tmp_path):
    data = real_log().read_bytes()
    cut = tmp_path / "cut.eval"
    cut.write_bytes(data[:len(data) // 2])
    refused(cut, "corrupt or truncated")


def test_a_log_with_a_corrupt_member_is_refused(tmp_path):
    data = bytearray(real_log().read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the sample's zstd frame
    bad = tmp_path / "flipped.eval"
    bad.write_bytes(bytes(data))
    # zstd frames carry no checksum here: the zip's CRC is what finds the changed byte.
    refused(bad, "samples/big_epoch_1.json fails its CRC check: corrupt")


def test_a_log_of_an_unknown_version_is_refused(tmp_path):
    def version_99(contents):
        for name, data in contents.items():
            if name in ("header.json", "_journal/start.json"):
                data = json.dumps({**json.loads(data), "version": 99}).encode()
            yield name, data

    refused(rewritten(tmp_path, version_99), "version 99", "reads versions 1 and 2")


def test_a_member_that_is_not_json_is_refused(tmp_path):
    def garbage(contents):
        for name, data in contents.items():
            yield name, (b"{not json" if name.startswith("samples/") else data)

    refused(rewritten(tmp_path, garbage), "not an Inspect AI log Proctor can read")


def test_a_sample_of_another_shape_is_refused_saying_where(tmp_path):
    def epoch_in_words(contents):
        for name, data in contents.items():
            if name.startswith("samples/"):
                data = data.replace(b'"epoch":1', b'"epoch":"one"', 1)
            yield name, data

    refused(rewritten(tmp_path, epoch_in_words), "$.epoch")


def test_a_member_twice_is_refused(tmp_path):
    def twice(contents):
        yield from contents.items()
        yield "header.json", contents["header.json"]

    with pytest.warns(UserWarning):  # zipfile warns as it writes the duplicate
        path = rewritten(tmp_path, twice)
    refused(path, "member header.json appears twice")


def with_zstd_member(path: Path, name: str, raw: bytes) -> None:
    """Add `raw` to the zip at `path` as a zstd member, as Inspect writes them: zipfile cannot
    write one, so it is stored compressed and its directory entries are made to say zstd."""
    import zstandard

    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(name, zstandard.ZstdCompressor().compress(raw), zipfile.ZIP_STORED)
        local = zf.getinfo(name).header_offset
    data = bytearray(path.read_bytes())
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(name.encode()) + 1)
    for at, crc_at in ((local + 8, local + 14), (central + 10, central + 16)):
        data[at:at + 2] = struct.pack("<H", 93)
        data[crc_at:crc_at + 4] = struct.pack("<I", zlib.crc32(raw))
        data[crc_at + 8:crc_at + 12] = struct.pack("<I", len(raw))  # the inflated size
    path.write_bytes(bytes(data))


def test_a_zstd_member_written_by_hand_reads_as_inspects_do(tmp_path):
    path = rewritten(tmp_path, lambda contents: ((n, d) for n, d in contents.items()
                                                 if not n.startswith("samples/")))
    sample = next((n, d) for n, d in rewritten_contents().items() if n.startswith("samples/"))
    with_zstd_member(path, *sample)
    assert read_inspect(path).batches[0].trials[0].command_count == 1000


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path):
    path = rewritten(tmp_path, lambda contents: iter(contents.items()))
    with_zstd_member(path, "samples/bomb_epoch_1.json", b" " * (16 * 2**20))  # 30,000 to 1
    refused(path, "samples/bomb_epoch_1.json inflates", "times its packed size, past 1,000: a zip bomb")


def test_a_member_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    from dataclasses import replace

    # The 4.4 MB sample passes the real limit.
    monkeypatch.setattr(inspect_log, "LIMITS", replace(inspect_log.LIMITS, member=1_000_000))
    refused(real_log(), "samples/big_epoch_1.json inflates to 4.2 MB, more than the 1.0 MB a member may hold")


def test_a_log_whose_eval_never_finished_is_an_interrupted_batch(tmp_path):
    def no_header(contents):
        return ((name, data) for name, data in contents.items() if name != "header.json")

    batch = read_inspect(rewritten(tmp_path, no_header)).batches[0]
    assert batch.status == "interrupted" and batch.config["inspect"]["status"] == "started"
    assert [t.command_count for t in batch.trials] == [1000]


def test_nan_and_infinities_inspect_writes_as_bare_words_read_as_null(tmp_path):
    def non_finite(contents):
        for name, data in contents.items():
            if name == "header.json":
                data = data[:-1] + b',"results":{"scores":[{"metrics":{"stderr":{"value":NaN}}}]}}'
            elif name.startswith("samples/"):
                data = data.replace(b'"working_time":', b'"working_time":-Infinity,"x":', 1)
            yield name, data

    [trial] = read_inspect(rewritten(tmp_path, non_finite)).batches[0].trials
    assert trial.command_count == 1000


def test_a_truncated_json_log_is_refused(tmp_path, logs):
    data = logs["json"].read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[:len(data) // 2])
    assert is_inspect_log(cut)
    refused(cut, "not an Inspect AI log Proctor can read")


def test_what_is_an_inspect_log(tmp_path):
    bundle = tmp_path / "b.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("manifest.json", "{}")
        zf.writestr("header.json", "{}")
    other = tmp_path / "x.json"
    other.write_text('{"name": "not a log"}')
    assert is_inspect_log(real_log())
    assert not is_inspect_log(bundle) and not is_inspect_log(other)
    assert not is_inspect_log(tmp_path / "missing.eval")


def test_a_trial_keeps_at_most_its_items_and_says_how_many_went(monkeypatch):
    monkeypatch.setattr(inspect_log, "ITEMS_MAX", 100)
    [trial] = read_inspect(real_log()).batches[0].trials
    assert len(trial.trajectory) == 101
    marker = trial.trajectory[-1]
    assert (marker.role, marker.truncated) == ("proctor", True)
    assert marker.text.startswith("1,901 items dropped")


def test_progress_is_told_as_the_samples_are_read():
    calls = []
    read_inspect(real_log(), progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] > 0


@pytest.mark.slow
@settings(max_examples=300)
@given(data=st.data())
def test_a_log_damaged_anywhere_is_read_or_refused_in_one_line_never_a_traceback(logs, data):
    log = bytearray(logs["graded"].read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        # Anywhere, or in the zip's directory at the end, where each byte says much.
        at = data.draw(st.integers(0, len(log) - 1) | st.integers(len(log) - 400, len(log) - 1))
        log[at] = data.draw(st.integers(0, 255))
    path = Path(tempfile.mkdtemp()) / "damaged.eval"
    path.write_bytes(bytes(log))
    try:
        read_inspect(path)
    except ImportRefused as refused:
        assert str(refused).startswith(f"{path}: ") and "\n" not in str(refused)


@pytest.mark.parametrize("field, value, words", [
    (10, struct.pack("<H", 99), "header.json is compressed with method 99"),  # compression method
    (42, struct.pack("<I", 0xFFFFFFF0), "header.json does not start where the zip says"),
    (42, None, "header.json does not start where the zip says"),  # 10 bytes before the end
])
def test_a_zip_directory_that_lies_about_a_member_is_refused(tmp_path, field, value, words):
    data = bytearray(real_log().read_bytes())
    entry = data.rfind(b"PK\x01\x02")  # header.json's entry in the central directory
    data[entry + field:entry + field + 4 - (2 if field == 10 else 0)] = (
        value if value is not None else struct.pack("<I", len(data) - 10))
    bad = tmp_path / "lying.eval"
    bad.write_bytes(bytes(data))
    refused(bad, words)


@pytest.mark.slow
def test_a_log_written_without_its_samples_still_gives_outcomes_and_tokens(logs, tmp_path):
    def no_samples(contents):
        return ((n, d) for n, d in contents.items() if not n.startswith("samples/"))

    whole = by_case(read_inspect(logs["quiz"]))
    summed = by_case(read_inspect(rewritten(tmp_path, no_samples, source=logs["quiz"])))
    assert sorted(summed) == sorted(whole)
    for key, trial in summed.items():
        assert (trial.id, trial.outcome, trial.usage) == (whole[key].id, whole[key].outcome,
                                                          whole[key].usage)
        assert trial.trajectory == [] and trial.started_at < trial.finished_at
    assert "the mock model exploded" in summed[("boom", 1)].failure.reason
