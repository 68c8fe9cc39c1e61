"""`proctor` as a user runs it: a subprocess, its exit status, stdout and stderr.

Mistakes end in exit 2 and one line naming the file and line; Docker missing in
exit 3 and one line saying what to do; the demo suite's -v lines, --json batch
and `show --json` records follow SPEC.md; Ctrl-C ends in 130 with nothing left
behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

BASE_IMAGE = "proctor-test-base:bookworm"
REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE")

PHASE_LINE = re.compile(r"^\[(\w+)#(\d+) (\S+)\] \d\d:\d\d:\d\d (\w+)\s+.+")
PHASES_OF_A_SCORED_TRIAL = ["image", "container", "env", "workspace", "files", "setup", "snapshot",
                            "harness", "turn", "diff", "check", "teardown", "record"]
PHASES_OF_A_SETUP_FAILURE = ["image", "container", "env", "workspace", "files", "setup", "teardown", "record"]

DISTRIBUTION_KEYS = {"trials", "scored", "passed", "failed", "voided", "pass_rate", "deterministic",
                     "command_min", "command_median", "command_max"}
RECORD_KEYS = {"schema_version", "id", "batch_id", "run_id", "case_id", "variant", "trial", "trigger",
               "outcome", "failure", "void_fields", "started_at", "finished_at", "timings", "usage",
               "usage_warnings", "phases", "turns", "trajectory", "command_count", "validations",
               "egress", "artifacts"}
TIMING_KEYS = {"setup_ms", "agent_ms", "diff_ms", "checks_ms", "judge_ms", "teardown_ms"}
USAGE_KEYS = {"input", "output", "cache_read", "cache_write", "reasoning"}
KIND_KEYS = {"message": {"role", "text"}, "command": {"command", "exit_code", "output"},
             "toolCall": {"name", "input", "output"}, "fileChange": {"path", "change"}}


# --- running proctor ------------------------------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    """The test's environment without CI markers (so the trigger is `cli`), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES and k != "PROCTOR_STORE"}
    env.update(extra)
    return env


def proctor(*args: str | Path, store: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "engine.cli", *map(str, args), "--store", str(store)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else cli_env(), cwd=store.parent)


def assert_one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def write_suite(folder: Path, eval_source: str, toml: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "proctor.toml").write_text(textwrap.dedent(toml if toml is not None else f"""
        [defaults]
        image = "{BASE_IMAGE}"
        timeout = "2m"

        [[variants]]
        name = "scripted"
        harness = "command"
        command = "true"
    """))
    path = folder / "suite.eval.py"
    path.write_text(textwrap.dedent(eval_source).lstrip("\n"))
    return path


def line_of(path: Path, marker: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


def trials_of(batch: dict) -> dict[str, dict]:
    """case_id -> its (only) trial summary."""
    return {run["case_id"]: trial for run in batch["runs"] for trial in run["trials"]}


# --- mistakes: exit 2, one line naming file and line (no Docker needed) -----------------------------


@pytest.mark.parametrize(("source", "marker", "words"), [
    ("""
        from engine import evaluation


        @evaluation(
        def broken(c):
            pass
    """, "@evaluation(", ["syntax error"]),
    ("""
        from engine import evaluation


        @evaluation(imagee="proctor-test-base:bookworm")
        def typo(c):
            pass
    """, "imagee=", ["imagee"]),
    ("""
        from engine import evaluation


        @evaluation(timeout="fast")
        def slow(c):
            pass
    """, 'timeout="fast"', ["timeout", "'fast'"]),
    ("""
        from engine import Step, evaluation


        @evaluation(setup=[Step("make", timeout="soon")])
        def builds(c):
            pass
    """, "Step(", ["'soon'"]),
], ids=["syntax-error", "unknown-option", "bad-timeout", "bad-step-timeout"])
def test_eval_file_mistake_exits_2_with_one_line(tmp_path, source, marker, words):
    path = write_suite(tmp_path / "suite", source)
    done = proctor("run", path, store=tmp_path / "proctor.db")
    line = assert_one_line_error(done, 2, *words)
    assert f"{path}:{line_of(path, marker)}:" in line
    assert done.stdout == ""


def test_bad_proctor_toml_exits_2_naming_its_line(tmp_path):
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation

        @evaluation()
        def fine(c):
            pass
    """, toml="""
        [defaults]
        imagee = "typo"
    """)
    config = path.parent / "proctor.toml"
    assert_one_line_error(proctor("run", path, store=tmp_path / "proctor.db"), 2,
                          f"{config}:{line_of(config, 'imagee')}:", "imagee")


def test_unknown_case_and_variant_exit_2(tmp_path):
    store = tmp_path / "proctor.db"
    assert_one_line_error(proctor("run", DEMO, "--case", "nope", store=store), 2,
                          "no case named nope", "writes_greet")
    assert_one_line_error(proctor("run", DEMO, "--variant", "nope", store=store), 2,
                          "no variant named nope", "scripted")


def test_path_that_does_not_exist_exits_2(tmp_path):
    assert_one_line_error(proctor("run", tmp_path / "nope.eval.py", store=tmp_path / "proctor.db"), 2,
                          "nope.eval.py", "no such file")


@pytest.mark.parametrize(("option", "value", "bound"), [
    ("--trials", "10001", "at most 10,000"),
    ("--trials", "1" + "0" * 30, "at most 10,000"),  # would create store rows for ever
    ("--trials", "9" * 5000, "at most 10,000"),  # more digits than int() reads
    ("--concurrency", "1025", "at most 1,024"),
    ("--trials", "0", "at least 1"),
    ("--concurrency", "many", "'many' is not a whole number"),
], ids=["trials", "trials-10e30", "trials-5000-digits", "concurrency", "zero", "words"])
def test_trials_and_concurrency_out_of_bounds_exit_2_with_one_line(tmp_path, capsys, option, value, bound):
    from engine.cli import main

    store = tmp_path / "proctor.db"
    with pytest.raises(SystemExit) as exited:  # argparse refuses it before anything is loaded
        main(["run", str(tmp_path / "nowhere.eval.py"), option, value, "--store", str(store)])
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and len(errors[0]) < 200, err
    assert option in errors[0] and bound in errors[0], errors[0]
    assert not store.exists()


def test_cleanup_help_names_what_it_removes(capsys):
    from engine.cli import main

    for argv in (["--help"], ["cleanup", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        assert "gateway, git and tree folders" in out, out


def test_docker_not_reachable_exits_3_saying_what_to_do(tmp_path):
    done = proctor("run", DEMO, store=tmp_path / "proctor.db",
                   env=cli_env(DOCKER_HOST="unix:///nonexistent.sock"))
    line = assert_one_line_error(done, 3, "Docker", "unix:///nonexistent.sock")
    assert "start" in line and "DOCKER_HOST" in line  # what to do about it


def test_missing_image_exits_2_naming_the_image_and_the_line(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation


        @evaluation(image="proctor-no-such-image:1")
        def needs_an_image(c):
            pass
    """)
    done = proctor("run", path, store=tmp_path / "proctor.db", timeout=120)
    assert_one_line_error(done, 2, "proctor-no-such-image:1", f"{path}:{line_of(path, 'image=')}:")


def test_show_unknown_trial_exits_2(tmp_path):
    assert_one_line_error(proctor("show", "t_nope", store=tmp_path / "proctor.db"), 2, "t_nope")


def test_ls_unknown_batch_exits_2(tmp_path):
    assert_one_line_error(proctor("ls", "--batch", "b_nope", store=tmp_path / "proctor.db"), 2, "b_nope")


def test_ls_on_an_empty_store_says_how_to_start(tmp_path):
    done = proctor("ls", store=tmp_path / "proctor.db")
    assert done.returncode == 0 and "no batches" in done.stdout
    assert json.loads(proctor("ls", "--json", store=tmp_path / "proctor.db").stdout) == []


# --- the demo suite ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_verbose(docker_client, tmp_path_factory):
    store = tmp_path_factory.mktemp("demo-v") / "proctor.db"
    return proctor("run", DEMO, "-v", store=store)


@pytest.fixture(scope="module")
def demo_json(docker_client, tmp_path_factory):
    """The demo's batch as `run --json` printed it, and its store."""
    store = tmp_path_factory.mktemp("demo-json") / "proctor.db"
    done = proctor("run", DEMO, "--json", store=store)
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout), store


@pytest.fixture(scope="module")
def demo_records(demo_json):
    """case_id -> its record, as `proctor show ID --json` printed it."""
    batch, store = demo_json
    records = {}
    for case_id, trial in trials_of(batch).items():
        done = proctor("show", trial["id"], "--json", store=store)
        assert done.returncode == 0, done.stderr
        records[case_id] = json.loads(done.stdout)
    return records


def test_demo_exits_1_because_a_trial_failed(demo_verbose):
    assert demo_verbose.returncode == 1, demo_verbose.stderr
    assert "Traceback" not in demo_verbose.stderr


def test_demo_verbose_lines_have_the_spec_shape(demo_verbose):
    tagged = [line for line in demo_verbose.stdout.splitlines() if line.startswith("[")]
    assert tagged
    for line in tagged:
        assert PHASE_LINE.match(line), line
    tags = {PHASE_LINE.match(line).group(1, 2, 3) for line in tagged}
    assert tags == {("writes_greet", "1", "scripted"), ("adds_numbers", "1", "scripted"),
                    ("needs_a_lockfile", "1", "scripted")}


def phases_printed(stdout: str, case_id: str) -> list[str]:
    """The phase names of one trial's -v lines, repeats in a row collapsed."""
    names: list[str] = []
    for line in stdout.splitlines():
        match = PHASE_LINE.match(line)
        if match and match.group(1) == case_id and (not names or names[-1] != match.group(4)):
            names.append(match.group(4))
    return names


@pytest.mark.parametrize(("case_id", "phases"), [
    ("writes_greet", PHASES_OF_A_SCORED_TRIAL),
    ("adds_numbers", PHASES_OF_A_SCORED_TRIAL),
    ("needs_a_lockfile", PHASES_OF_A_SETUP_FAILURE),
])
def test_demo_verbose_prints_phases_in_spec_order(demo_verbose, case_id, phases):
    printed = phases_printed(demo_verbose.stdout, case_id)
    # The demo runs 3 trials at concurrency 2: the one that waited for a slot says so first.
    if printed and printed[0] == "slot":
        printed = printed[1:]
    assert printed == phases


def test_a_trial_that_waited_for_a_slot_records_the_wait(demo_verbose):
    waited = [line for line in demo_verbose.stdout.splitlines()
              if PHASE_LINE.match(line) and PHASE_LINE.match(line).group(4) == "slot"]
    assert len(waited) == 1 and "waited for a free slot in" in waited[0]


@pytest.mark.parametrize(("case_id", "outcome"), [
    ("writes_greet", "pass"), ("adds_numbers", "fail"), ("needs_a_lockfile", "infra_error"),
])
def test_demo_verbose_teardown_line_says_the_outcome(demo_verbose, case_id, outcome):
    teardown = [line for line in demo_verbose.stdout.splitlines()
                if line.startswith(f"[{case_id}#1 ") and PHASE_LINE.match(line).group(4) == "teardown"]
    assert len(teardown) == 1
    assert re.search(rf"teardown\s+outcome {outcome}\b", teardown[0]), teardown[0]


def test_demo_json_has_the_spec_shape(demo_json):
    batch, _ = demo_json
    assert {"batch_id", "trigger", "status", "runs"} <= batch.keys()
    assert batch["batch_id"].startswith("b_")
    assert batch["trigger"] == "cli"
    assert batch["status"] == "finished"
    assert [run["case_id"] for run in batch["runs"]] == ["writes_greet", "adds_numbers", "needs_a_lockfile"]
    for run in batch["runs"]:
        assert {"run_id", "case_id", "variant", "distribution", "trials"} <= run.keys()
        assert run["run_id"].startswith("r_") and run["variant"] == "scripted"
        assert set(run["distribution"]) == DISTRIBUTION_KEYS
        for trial in run["trials"]:
            assert {"id", "trial", "outcome", "failure"} <= trial.keys()
            assert trial["id"].startswith("t_") and trial["trial"] == 1


def test_demo_json_outcomes_and_distributions(demo_json):
    batch, _ = demo_json
    trials = trials_of(batch)
    assert {case: t["outcome"] for case, t in trials.items()} == {
        "writes_greet": "pass", "adds_numbers": "fail", "needs_a_lockfile": "infra_error"}
    assert trials["writes_greet"]["failure"] is None
    assert trials["adds_numbers"]["failure"]["kind"] == "assertion"
    assert trials["needs_a_lockfile"]["failure"]["kind"] == "infra"

    runs = {run["case_id"]: run["distribution"] for run in batch["runs"]}
    assert runs["writes_greet"]["pass_rate"] == 1.0
    assert runs["adds_numbers"]["pass_rate"] == 0.0
    void = runs["needs_a_lockfile"]
    assert void["pass_rate"] is None  # no scored trial: no result, not 0
    assert (void["trials"], void["scored"], void["voided"]) == (1, 0, 1)


def test_show_json_has_every_field_of_the_record(demo_records):
    for case_id, record in demo_records.items():
        assert RECORD_KEYS <= record.keys(), (case_id, RECORD_KEYS - record.keys())
        assert record["schema_version"] == 1
        assert record["case_id"] == case_id and record["variant"] == "scripted" and record["trial"] == 1
        assert record["trigger"] == "cli"
        assert TIMING_KEYS <= record["timings"].keys()
        assert USAGE_KEYS <= record["usage"].keys()
        for span in record["phases"]:
            assert {"phase", "status", "start_ms", "end_ms", "detail"} <= span.keys()
        for turn in record["turns"]:
            assert {"index", "prompt", "status", "ms", "diff", "files_changed"} <= turn.keys()
        for item in record["trajectory"]:
            assert {"kind", "turn", "at", "truncated"} | KIND_KEYS[item["kind"]] <= item.keys(), item
        for validation in record["validations"]:
            assert {"kind", "name", "status", "evidence"} <= validation.keys()
        for artifact in record["artifacts"]:
            assert {"path", "bytes", "sha256"} <= artifact.keys()
        assert isinstance(record["egress"], list)


def test_show_json_agrees_with_the_batch(demo_json, demo_records):
    batch, _ = demo_json
    for run in batch["runs"]:
        record = demo_records[run["case_id"]]
        (trial,) = run["trials"]
        assert record["id"] == trial["id"]
        assert (record["batch_id"], record["run_id"]) == (batch["batch_id"], run["run_id"])
        assert record["outcome"] == trial["outcome"]
        assert record["failure"] == trial["failure"]


def test_pass_record_diff_holds_the_agents_work_only(demo_records):
    record = demo_records["writes_greet"]
    assert record["outcome"] == "pass" and record["failure"] is None and record["void_fields"] == []
    (turn,) = record["turns"]
    assert turn["status"] == "completed"
    assert "+++ b/greet.py" in turn["diff"]
    assert "greet.py" in turn["files_changed"]
    # What `files` and `rules` placed is part of the starting point, not of the agent's work.
    assert ".agent/agent.py" not in turn["diff"] and "AGENTS.md" not in turn["diff"]
    assert ".agent/agent.py" not in turn["files_changed"] and "AGENTS.md" not in turn["files_changed"]
    assert [v["status"] for v in record["validations"]] == ["passed", "passed"]
    assert record["command_count"] == 1
    assert record["usage"]["input"] == 1200 and record["usage"]["cache_read"] == 1000
    assert [a["path"] for a in record["artifacts"]] == ["greet.py"]


def test_fail_record_keeps_the_failed_check(demo_records):
    record = demo_records["adds_numbers"]
    assert record["outcome"] == "fail" and record["failure"]["kind"] == "assertion"
    (validation,) = record["validations"]
    assert validation["status"] == "failed"
    assert validation["evidence"]["exit_code"] == 1


def test_infra_record_is_void_and_says_why(demo_records):
    record = demo_records["needs_a_lockfile"]
    assert record["outcome"] == "infra_error"
    assert record["void_fields"], "a void trial names the missing evidence"
    reason = record["failure"]["reason"]
    assert "setup" in reason and "\n" not in reason
    assert record["turns"] == [] and record["validations"] == []
    phases = [span["phase"] for span in record["phases"]]
    assert phases in (PHASES_OF_A_SETUP_FAILURE, ["slot", *PHASES_OF_A_SETUP_FAILURE])


def test_show_human_output(demo_json):
    batch, store = demo_json
    failed = trials_of(batch)["adds_numbers"]
    done = proctor("show", failed["id"], store=store)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert failed["id"] in first and "adds_numbers#1" in first and "scripted" in first and "fail" in first
    assert any("assertion:" in line for line in rest)
    for phase in PHASES_OF_A_SCORED_TRIAL:
        assert any(line.split()[:1] == [phase] for line in rest), phase


def test_ls_shows_the_batch_and_its_trials(demo_json):
    batch, store = demo_json
    done = proctor("ls", store=store)
    assert done.returncode == 0, done.stderr
    assert batch["batch_id"] in done.stdout
    for case_id, trial in trials_of(batch).items():
        assert case_id in done.stdout
        assert re.search(rf"{trial['id']}\s+#1 {trial['outcome']}", done.stdout), trial


def test_ls_json_lists_batches_in_the_run_json_shape(demo_json):
    batch, store = demo_json
    done = proctor("ls", "--json", store=store)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert isinstance(listed, list)
    assert [b for b in listed if b["batch_id"] == batch["batch_id"]] == [batch]
    one = json.loads(proctor("ls", "--batch", batch["batch_id"], "--json", store=store).stdout)
    assert one == [batch]


# --- filters and trigger --------------------------------------------------------------------------------

FILTER_TOML = f"""
    [defaults]
    image = "{BASE_IMAGE}"
    timeout = "2m"
    concurrency = 4

    [[variants]]
    name = "a"
    command = "true"

    [[variants]]
    name = "b"
    command = "true"

    [[variants]]
    name = "c"
    command = "true"
"""

FILTER_CASES = """
    from engine import evaluation


    @evaluation()
    def one(c):
        c.send("hi")


    @evaluation()
    def two(c):
        c.send("hi")


    @evaluation()
    def three(c):
        c.send("hi")
"""


def test_case_and_variant_filters_repeat(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", FILTER_CASES, toml=FILTER_TOML)
    done = proctor("run", path, "--case", "one", "--case", "three", "--variant", "a", "--variant", "c",
                   "--variant", "a", "--json", store=tmp_path / "proctor.db")
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)
    assert [(run["case_id"], run["variant"]) for run in batch["runs"]] == [
        ("one", "a"), ("one", "c"), ("three", "a"), ("three", "c")]
    assert all(t["outcome"] == "pass" for run in batch["runs"] for t in run["trials"])


def test_infra_errors_and_no_failures_exit_3(tmp_path, docker_client):
    done = proctor("run", DEMO, "--case", "needs_a_lockfile", "--trials", "2", "--json",
                   store=tmp_path / "proctor.db")
    assert done.returncode == 3, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert [t["outcome"] for t in run["trials"]] == ["infra_error", "infra_error"]
    assert run["distribution"]["pass_rate"] is None


def test_trigger_is_ci_under_ci_and_cli_otherwise(tmp_path, docker_client):
    store = tmp_path / "proctor.db"
    under_ci = proctor("run", DEMO, "--case", "writes_greet", "--json", store=store, env=cli_env(CI="true"))
    assert under_ci.returncode == 0, under_ci.stderr
    assert json.loads(under_ci.stdout)["trigger"] == "ci"
    plain = proctor("run", DEMO, "--case", "writes_greet", "--json", store=store)  # CI removed from env
    assert plain.returncode == 0, plain.stderr
    batch = json.loads(plain.stdout)
    assert batch["trigger"] == "cli"
    (trial,) = trials_of(batch).values()
    record = json.loads(proctor("show", trial["id"], "--json", store=store).stdout)
    assert record["trigger"] == "cli"


# --- cleanup -----------------------------------------------------------------------------------------------


def _dead_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid += 1
    return pid


def test_cleanup_removes_dead_owners_containers_and_keeps_live_ones(tmp_path, docker_client):
    from docker.errors import NotFound

    from engine.sandbox.cleanup import owner_id

    def container(owner: str):
        return docker_client.containers.create(
            BASE_IMAGE, ["sleep", "infinity"], network_mode="none",
            labels={"proctor": "1", "proctor.owner": owner, "proctor.batch": "b_cleanup_test"})

    dead = container(f"{socket.gethostname()}:{_dead_pid()}:1")
    live = container(owner_id())  # this test process: alive
    try:
        done = proctor("cleanup", store=tmp_path / "proctor.db")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("removed ")
        with pytest.raises(NotFound):
            docker_client.containers.get(dead.id)
        docker_client.containers.get(live.id)  # still there
    finally:
        for leftover in (dead, live):
            try:
                leftover.remove(force=True)
            except NotFound:
                pass


# --- Ctrl-C ------------------------------------------------------------------------------------------------


def test_ctrl_c_exits_130_skips_the_rest_and_leaves_nothing(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation


        @evaluation(trials=3)
        def waits(c):
            c.send("wait a minute")
    """, toml=f"""
        [defaults]
        image = "{BASE_IMAGE}"
        timeout = "5m"
        concurrency = 1

        [[variants]]
        name = "sleeper"
        harness = "command"
        command = "sleep 60"
    """)
    store = tmp_path / "proctor.db"
    process, lines = start_run(path, store)
    try:
        wait_for_line(process, lines, " harness ")
        time.sleep(1)  # the agent is now sleeping in its turn
        batch = interrupt(process, lines, signal.SIGINT, store)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    trials = batch["runs"][0]["trials"]
    # It was running: stopped, and void (infra_error), never scored as a pass or a fail.
    assert trials[0]["outcome"] == "infra_error", trials[0]
    failure = trials[0]["failure"]
    assert failure["kind"] == "infra" and "interrupted" in failure["reason"], failure
    assert [t["outcome"] for t in trials[1:]] == ["skipped", "skipped"]
    left = docker_client.containers.list(all=True, filters={"label": f"proctor.batch={batch['batch_id']}"})
    assert left == [], "the interrupted batch left containers behind"


# --- the store fails: one line at once, never a lost "saved" ------------------------------------------

SLOW_AGENT_TOML = f"""
    [defaults]
    image = "{BASE_IMAGE}"
    timeout = "2m"
    concurrency = 1

    [[variants]]
    name = "slow"
    harness = "command"
    command = "sh .agent/run.sh"
"""


def slow_suite(folder: Path, trials: int, agent: str) -> Path:
    path = write_suite(folder, f"""
        from engine import evaluation


        @evaluation(trials={trials}, files={{".agent/run.sh": {agent!r}}})
        def works_slowly(c):
            c.send("take your time")
            c.exec("true").to_succeed()
    """, toml=SLOW_AGENT_TOML)
    return path


def start_run(path: Path, store: Path, *args: str,
              ignoring: tuple[signal.Signals, ...] = ()) -> tuple[subprocess.Popen[str], list[str]]:
    """`proctor run -v` started in the background, the signals in `ignoring` ignored from its
    start (`nohup` ignores SIGHUP)."""
    def ignore() -> None:
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(path), "-v", *args, "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=store.parent,
        preexec_fn=ignore if ignoring else None)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    return process, lines


def wait_for_line(process: subprocess.Popen[str], lines: list[str], words: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not any(words in line for line in lines):
        assert process.poll() is None, "".join(lines) + process.stderr.read()
        assert time.monotonic() < deadline, f"no line with {words!r}: " + "".join(lines)
        time.sleep(0.05)


def finish(process: subprocess.Popen[str], within: float) -> tuple[int, str]:
    try:
        code = process.wait(timeout=within)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, process.stderr.read()


def interrupt(process: subprocess.Popen[str], lines: list[str], signum: int, store: Path) -> dict:
    """Send `signum` to a running `proctor run`: it stops within 15 s, exit 130, with no
    traceback, and the batch is stored as interrupted. Returns the batch as `ls --json` gives it."""
    sent = time.monotonic()
    process.send_signal(signum)
    code = process.wait(timeout=30)
    took = time.monotonic() - sent
    stderr = process.stderr.read()
    assert code == 130, (code, "".join(lines), stderr)
    assert took < 15, f"took {took:.1f}s to stop"
    assert "Traceback" not in stderr, stderr
    assert "interrupted" in stderr
    (batch,) = json.loads(proctor("ls", "--json", store=store).stdout)
    assert batch["status"] == "interrupted"
    return batch


def stored_outcomes(store: Path) -> dict[str, str | None]:
    with sqlite3.connect(store) as conn:
        return dict(conn.execute("SELECT id, outcome FROM trial"))


def test_unwritable_store_stops_before_the_first_trial(tmp_path, docker_client):
    path = slow_suite(tmp_path / "suite", trials=2, agent="true")
    store = tmp_path / "proctor.db"
    from engine.store import Store
    Store(store).close()
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not possible here")
    try:
        done = proctor("run", path, "-v", store=store, timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)
    line = assert_one_line_error(done, 2, str(store), "read-only", "--store")
    assert done.stdout == "", "a trial ran although nothing could be stored"
    assert "saved" not in line


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    # Unbuffered: a buffered file still holds the last block when the disk is full, and
    # closing it flushes that block and raises ENOSPC out of the `with` (seen in a full run).
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
    return filler


# After a 3 s sleep the agent prints about 1 MB of messages: more than the WAL holds, so it must grow.
LOUD_AGENT = """sleep 3
python3 -c 'import json
for i in range(300): print(json.dumps({"type": "message", "role": "assistant", "text": str(i) * 3000}))'
"""


@pytest.mark.slow
def test_full_disk_stops_the_batch_with_one_line_and_never_says_saved(small_disk, tmp_path, docker_client):
    path = slow_suite(tmp_path / "suite", trials=3, agent=LOUD_AGENT)
    store = small_disk / "proctor.db"
    process, lines = start_run(path, store)
    wait_for_line(process, lines, " harness ")
    filler = fill(small_disk)
    code, stderr = finish(process, within=60)
    filler.unlink()

    assert code == 2, (code, "".join(lines), stderr)
    assert "Traceback" not in stderr, stderr
    (line,) = stderr.strip().splitlines()
    assert str(store) in line and "full" in line and "--store" in line, line
    assert not any("#2 slow]" in l or "#3 slow]" in l for l in lines if " harness " in l), \
        "the batch went on after the store failed"
    stored = stored_outcomes(store)
    for said in lines:
        if saved := re.search(r" record +saved (t_\w+)", said):
            assert stored.get(saved[1]), f"{said!r} but the store has no record of {saved[1]}"
    wal = store.with_name(store.name + "-wal")
    assert not wal.exists() or wal.stat().st_size <= 4 << 20, f"a {wal.stat().st_size} B WAL stayed behind"


@pytest.mark.slow
def test_an_outside_write_lock_only_delays_the_batch(tmp_path, docker_client):
    path = slow_suite(tmp_path / "suite", trials=2, agent="sleep 1")
    store = tmp_path / "proctor.db"
    process, lines = start_run(path, store, "--json")
    # -v with --json prints nothing, so wait for the store to show the first trial running.
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        try:
            if "running" in dict(sqlite3.connect(store).execute("SELECT status, 1 FROM trial")):
                break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    # Another process holds the write lock for 12 s, past SQLite's busy timeout of 10 s.
    locker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({str(store)!r}, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        print("locked", flush=True)
        time.sleep(12)
        conn.rollback()
    """)], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    code, stderr = finish(process, within=120)
    locker.wait(30)

    assert code == 0, (code, "".join(lines), stderr)
    batch = json.loads("".join(lines))
    assert batch["status"] == "finished"
    assert set(stored_outcomes(store).values()) == {"pass"}


# --- a damaged store: one line, never a traceback (in process, no Docker) ------------------------------


def cli(capsys, *args: str | Path) -> tuple[int, str, str]:
    from engine.cli import main

    code = main([*map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def one_line(err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def saved_store(path: Path) -> str:
    """A store holding one finished trial; returns its id."""
    from engine.models import Failure, PhaseSpan, TrialRecord, Validation
    from engine.store import Store

    record = TrialRecord(id="t_abcdef0001", batch_id="b_1", run_id="r_1", case_id="writes_greet",
                         variant="scripted", trial=1, trigger="cli", outcome="fail",
                         failure=Failure(kind="assertion", reason="exit 1", where="check 1 of 1"),
                         phases=[PhaseSpan(phase="image", status="ok", start_ms=0, end_ms=3)],
                         validations=[Validation(kind="command", name="pytest", status="failed")])
    with Store(path) as store:
        store.create_batch("b_1", "cli", "", "2026-11-29T17:40:47.120Z")
        store.create_run("r_1", "b_1", "writes_greet", "scripted", 0)
        store.save_trial(record)
    return record.id


@pytest.mark.parametrize("version", ["'abc'", "0", None], ids=["abc", "zero", "missing"])
@pytest.mark.parametrize("command", [["ls"], ["ls", "--json"], ["show", "t_abcdef0001"],
                                     ["run", DEMO]], ids=["ls", "ls-json", "show", "run"])
def test_a_store_with_a_bad_schema_version_gets_one_line(tmp_path, capsys, version, command):
    store = tmp_path / "proctor.db"
    saved_store(store)
    with sqlite3.connect(store) as conn:
        if version is None:
            conn.execute("DELETE FROM meta WHERE key = 'schema_version'")
        else:
            conn.execute(f"UPDATE meta SET value = {version} WHERE key = 'schema_version'")
    code, out, err = cli(capsys, *command, "--store", store)
    assert code == 2 and out == ""
    one_line(err, str(store), "schema", "--store")


@pytest.mark.parametrize("damage", [
    "UPDATE trial SET record = '{\"id\": \"t_abcdef0001\", broken'",
    "UPDATE trial SET record = '{}'",
    "UPDATE trial SET record = '[1, 2]'",
    "UPDATE trial SET record = json_remove(record, '$.phases', '$.case_id', '$.failure')",
    "UPDATE trial SET record = json_set(record, '$.phases[0].end_ms', 'soon', '$.failure', 5)",
    "UPDATE trial SET record = NULL",
], ids=["corrupt-json", "empty", "a-list", "missing-fields", "wrong-types", "null"])
def test_show_of_a_damaged_record_never_tracebacks(tmp_path, capsys, damage):
    store = tmp_path / "proctor.db"
    trial_id = saved_store(store)
    with sqlite3.connect(store) as conn:
        conn.execute(damage)
    code, out, err = cli(capsys, "show", trial_id, "--store", store)
    if code == 0:
        assert trial_id in out and err == ""  # showed what can be shown
    else:
        assert code == 2 and out == ""
        one_line(err, trial_id)
    code, out, err = cli(capsys, "show", trial_id, "--json", "--store", store)
    if code == 0:
        json.loads(out)
    else:
        assert code == 2 and out == ""
        one_line(err, trial_id)


def test_ls_with_a_huge_limit_lists_everything(tmp_path, capsys):
    store = tmp_path / "proctor.db"
    saved_store(store)
    code, out, err = cli(capsys, "ls", "--limit", "99999999999999999999", "--store", store)
    assert code == 0 and err == "" and "b_1" in out


@pytest.mark.slow
def test_an_unreachable_docker_host_ends_the_batch_with_one_line(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation


        @evaluation(trials=2)
        def anywhere(c):
            c.send("hi")
    """, toml=f"""
        [defaults]
        image = "{BASE_IMAGE}"

        [[hosts]]
        url = "tcp://127.0.0.1:1"

        [[variants]]
        name = "scripted"
        command = "true"
    """)
    store = tmp_path / "proctor.db"
    done = proctor("run", path, store=store, timeout=120)
    assert_one_line_error(done, 3, "tcp://127.0.0.1:1", "[[hosts]]")
    with sqlite3.connect(store) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM batch")]
        trials = list(conn.execute("SELECT status, outcome FROM trial"))
    assert statuses in ([], ["failed"]), statuses
    assert all(status == "done" and outcome for status, outcome in trials), trials
