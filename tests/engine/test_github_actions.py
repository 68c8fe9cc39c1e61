"""`proctor run` under GitHub Actions: a real batch in Docker with GitHub's variables set
writes the step summary (rendered here by cmark-gfm, GitHub's own Markdown library), prints
`::error` annotations at the case's file and line, and stores the workflow run's link, which
`proctor ls --json` shows. An agent's words (a failure's reason, a file path it reports) never
become a workflow command of their own, as GitHub's runner reads a step's output.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import cmarkgfm
import pytest

from engine.models import BatchSummary, Failure, RunSummary, TrialSummary, distribution
from engine.reports import Site, github
from engine.reports.ci import CiReports
from tests.conftest import suite_toml
from tests.engine.test_cli import cli_env, proctor, write_suite

RUN_LINK = "https://github.com/acme/evals/actions/runs/123456"
GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com",
          "GITHUB_REPOSITORY": "acme/evals", "GITHUB_RUN_ID": "123456"}
# What an agent might say to take over the job: new lines that are commands, both syntaxes,
# and Markdown, HTML and a link for the summary.
HOSTILE = ("boom\n::add-mask::leaked\r\n::set-output name=x::y\n##[add-mask]v1 | cell "
           "<img src=x onerror=alert(1)> [link](https://evil.example) **bold** a@b.example `tick`")


def workflow_commands(output: str) -> list[str]:
    """The commands GitHub's runner takes from a step's output: each line that, leading
    whitespace trimmed, starts with `::` (or, the old syntax, holds `##[`), except between
    `::stop-commands::TOKEN` and `::TOKEN::`."""
    commands: list[str] = []
    stopped: str | None = None
    for line in re.split(r"\r\n|\r|\n", output):
        text = line.strip()
        if stopped is not None:
            if text.lower() == f"::{stopped}::".lower():
                stopped = None
            continue
        if text.startswith("::stop-commands::"):
            stopped = text.removeprefix("::stop-commands::")
        elif text.startswith("::") or "##[" in text:
            commands.append(text)
    return commands


def parse_annotation(command: str) -> tuple[str, dict[str, str], str]:
    """(`error`, its properties, its message), unescaped as the runner does."""
    def unescape(text: str) -> str:
        for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
            text = text.replace(escaped, raw)
        return text

    head, _, message = command[2:].partition("::")
    name, _, props = head.partition(" ")
    properties = dict(p.split("=", 1) for p in props.split(",") if p)
    return name, {k: unescape(v) for k, v in properties.items()}, unescape(message)


def rendered(markdown: str) -> ET.Element:
    """The summary as GitHub shows it (cmark-gfm with GitHub's extensions), as an element tree."""
    return ET.fromstring(f"<div>{cmarkgfm.github_flavored_markdown_to_html(markdown)}</div>")


def table_rows(table: ET.Element) -> list[list[str]]:
    return [["".join(cell.itertext()) for cell in row] for row in table.iter("tr")][1:]


# --- a real run ---------------------------------------------------------------------------------

SUITE = """
    from engine import evaluation

    HOSTILE = {hostile!r}
    CHANGE = '{{"type":"fileChange","path":"a\\\\n::add-mask::path\\\\n##[add-mask]p","change":"add"}}'
    AGENT = {{".agent/run.sh": "cat .agent/said.txt > said.txt; cat .agent/change.json",
              ".agent/said.txt": HOSTILE, ".agent/change.json": CHANGE + "\\n"}}


    @evaluation(files=AGENT)
    def passes(c):
        c.send("do nothing")
        c.exec("true").to_succeed()


    @evaluation(files=AGENT)
    def fails(c):
        c.send("say something")
        assert False, c.read_file("said.txt")


    @evaluation(files=AGENT, setup=["exit 1"])
    def is_void(c):
        c.send("never reached")
"""

TOML = suite_toml({"scripted": "sh .agent/run.sh"}, concurrency=1, timeout="2m")


@pytest.fixture(scope="module")
def under_actions(docker_client, tmp_path_factory):
    """The suite run with -v as a GitHub Actions step runs it. (done, suite path, summary file, store)"""
    tmp = tmp_path_factory.mktemp("actions")
    path = write_suite(tmp / "suite", SUITE.format(hostile=HOSTILE), toml=TOML)
    summary = tmp / "step_summary.md"
    summary.write_text("an earlier step's summary\n")
    store = tmp / "proctor.db"
    env = cli_env(**GITHUB, GITHUB_STEP_SUMMARY=str(summary), GITHUB_WORKSPACE=str(tmp))
    done = proctor("run", path, "-v", store=store, env=env)
    return done, path, summary, store


def test_only_the_annotations_are_workflow_commands(under_actions):
    done, path, _, _ = under_actions
    assert done.returncode == 1, done.stderr
    assert "add-mask" in done.stdout, "the hostile words never reached the output: nothing was tested"
    commands = workflow_commands(done.stdout) + workflow_commands(done.stderr)
    assert [parse_annotation(c)[0] for c in commands] == ["error", "warning"], commands


def test_the_error_names_the_file_and_the_case_line(under_actions):
    done, path, _, _ = under_actions
    from engine.spec import load_cases

    lines = {case.id: case.line for case in load_cases([path])}
    (error, warning) = workflow_commands(done.stdout)
    name, properties, message = parse_annotation(error)
    assert name == "error"
    assert properties == {"file": "suite/suite.eval.py", "line": str(lines["fails"]),
                          "title": "fails#1 scripted failed"}
    assert lines["fails"] in (path.read_text().splitlines().index("def fails(c):"),
                              path.read_text().splitlines().index("def fails(c):") + 1)
    # The agent's words are the message's, line breaks and all: data, not commands.
    assert message.startswith("assertion: AssertionError at suite.eval.py:")
    assert "boom\n::add-mask::leaked\r\n::set-output name=x::y\n##[add-mask]v1" in message
    name, properties, message = parse_annotation(warning)
    assert (name, properties["line"]) == ("warning", str(lines["is_void"]))
    assert "setup step 1" in message


def test_the_step_summary_is_appended_with_the_runs_and_worst_failures(under_actions):
    _, _, summary, _ = under_actions
    text = summary.read_text()
    assert text.startswith("an earlier step's summary\n")
    html = rendered(text)
    runs, worst = html.iter("table")
    assert table_rows(runs) == [
        ["passes", "scripted", "1", "1", "0", "0", "100%", "no"],
        ["fails", "scripted", "1", "0", "1", "0", "0%", "no"],
        ["is_void", "scripted", "1", "0", "0", "1", "—", "no"]]
    (failed, void) = table_rows(worst)
    assert failed[2:4] == ["scripted", "fail (assertion)"] and failed[1] == "fails"
    assert void[1:4] == ["is_void", "scripted", "infra_error (infra)"]
    # The reason is shown as the agent wrote it (on one line), and rendered as nothing else.
    assert "##[add-mask]v1 | cell <img src=x onerror=alert(1)> [link](https://evil.example) **bold**" in failed[4]
    assert not [e.tag for e in html.iter() if e.tag in ("a", "img", "strong", "script")]


def test_the_batch_keeps_the_workflow_runs_link(under_actions):
    _, _, _, store = under_actions
    (batch,) = json.loads(proctor("ls", "--json", store=store).stdout)
    assert batch["link"] == RUN_LINK
    assert batch["trigger"] == "ci"


def test_with_json_the_annotations_go_to_stderr(docker_client, tmp_path):
    path = write_suite(tmp_path / "suite", SUITE.format(hostile=HOSTILE), toml=TOML)
    env = cli_env(**GITHUB)  # no summary file: none is written, the rest still is
    done = proctor("run", path, "--case", "fails", "--json", store=tmp_path / "proctor.db", env=env)
    assert done.returncode == 1, done.stderr
    batch = json.loads(done.stdout)
    assert batch["link"] == RUN_LINK
    assert "boom\n::add-mask::leaked" in batch["runs"][0]["trials"][0]["failure"]["reason"]
    assert [parse_annotation(c)[0] for c in workflow_commands(done.stderr)] == ["error"]
    assert workflow_commands(done.stdout) == []


def test_outside_actions_a_reason_still_prints_on_one_line(docker_client, tmp_path):
    """No guard there: `proctor run` prints each trial's reason on its own line, whole."""
    path = write_suite(tmp_path / "suite", SUITE.format(hostile=HOSTILE), toml=TOML)
    done = proctor("run", path, "--case", "fails", store=tmp_path / "proctor.db")
    assert done.returncode == 1, done.stderr
    assert "boom ::add-mask::leaked" in done.stdout
    assert not [line for line in re.split(r"\r\n|\r|\n", done.stdout) if line.strip().startswith("::")]


# --- the parts, without Docker ------------------------------------------------------------------


@pytest.mark.parametrize("change", [
    {"GITHUB_RUN_ID": None},
    {"GITHUB_REPOSITORY": None},
    {"GITHUB_SERVER_URL": None},
    {"GITHUB_RUN_ID": "12x"},
    {"GITHUB_RUN_ID": "1\n::add-mask::x"},
    {"GITHUB_REPOSITORY": "acme/../../evil"},
    {"GITHUB_REPOSITORY": "acme"},
    {"GITHUB_REPOSITORY": "acme/.."},
    {"GITHUB_SERVER_URL": "javascript:alert(1)"},
    {"GITHUB_SERVER_URL": "https://user:pass@github.com"},
    {"GITHUB_SERVER_URL": "https://github.com/path?q=1"},
    {"GITHUB_SERVER_URL": "ftp://github.com"},
    {"GITHUB_SERVER_URL": "https://evil.example\\@github.com"},
], ids=lambda change: f"{next(iter(change))}={next(iter(change.values()))!r}")
def test_no_link_when_a_part_is_missing_or_odd(change):
    environ = {**GITHUB, **change}
    assert github.workflow_link({k: v for k, v in environ.items() if v is not None}) is None


def test_the_link_from_a_well_formed_environment():
    assert github.workflow_link(GITHUB) == RUN_LINK
    enterprise = {**GITHUB, "GITHUB_SERVER_URL": "https://git.example.com:8443/"}
    assert github.workflow_link(enterprise) == "https://git.example.com:8443/acme/evals/actions/runs/123456"


def test_outside_github_actions_there_is_no_link_nor_guard(tmp_path):
    reports = CiReports(None, [], {k: v for k, v in GITHUB.items() if k != "GITHUB_ACTIONS"})
    assert reports.link is None and not reports.github
    reports = CiReports(None, [], {**GITHUB, "GITHUB_ACTIONS": "false"})
    assert reports.link is None and not reports.github


def batch(reasons: list[str], case_id: str = "writes_greet", variant: str = "scripted") -> BatchSummary:
    trials = [TrialSummary(id=f"t_{n}", trial=n, outcome="fail", duration_ms=10,
                           failure=Failure(kind="assertion", reason=reason))
              for n, reason in enumerate(reasons, 1)]
    trials.append(TrialSummary(id="t_pass", trial=len(reasons) + 1, outcome="pass", failure=None))
    run = RunSummary(run_id=f"r_{case_id}", case_id=case_id, variant=variant,
                     distribution=distribution(trials), trials=trials)
    return BatchSummary(batch_id="b_1", trigger="ci", status="finished", runs=[run])


@pytest.mark.parametrize("reason", [
    HOSTILE,
    "a\r::add-mask::x",  # a lone CR ends a line for the runner too
    "100%0A::add-mask::x",  # an escape written out is text, not a line break
    "\x1b[2K\r::set-output name=a::b\x00",
    "\u2028::add-mask::x\x85::add-mask::y",
], ids=["hostile", "cr", "percent", "controls", "unicode-breaks"])
def test_a_reason_never_starts_a_command_of_its_own(reason):
    site = {"writes_greet": Site(file="evals/a,b:c.eval.py", line=12)}
    lines = github.annotations(batch([reason]), site)
    output = "\n".join(lines)
    assert workflow_commands(output) == lines and len(lines) == 1
    name, properties, message = parse_annotation(lines[0])
    assert properties == {"file": "evals/a,b:c.eval.py", "line": "12", "title": "writes_greet#1 scripted failed"}
    if reason.startswith("100%"):
        assert message == "assertion: 100%0A::add-mask::x"


def test_annotations_stop_at_what_github_keeps_and_say_how_many_more():
    lines = github.annotations(batch([f"exit {n}" for n in range(60)]), {})
    assert len(lines) == github.MAX_ANNOTATIONS == 10
    name, properties, message = parse_annotation(lines[-1])
    assert name == "error" and properties["title"] == "51 more failed trials"
    assert message.startswith("… and 51 more failed trials: `proctor ls --batch b_1`")
    exactly = github.annotations(batch([f"exit {n}" for n in range(10)]), {})
    assert len(exactly) == 10 and all("more" not in line for line in exactly)


def test_the_summary_renders_hostile_names_and_reasons_as_text():
    reasons = [HOSTILE, "`` ``` a ` b", "ends with a backslash \\", "\\|", "<script>alert(1)</script>",
               "x" * 5000, "&lt;b&gt; &#124; &amp;"]
    text = github.step_summary(batch(reasons, case_id="c|*_x_*", variant="v` | <b>[l](https://e.example)"))
    html = rendered(text)
    runs, worst = html.iter("table")
    assert table_rows(runs) == [["c|*_x_*", "v` | <b>[l](https://e.example)", "8", "1", "7", "0", "12%", "no"]]
    rows = table_rows(worst)
    assert len(rows) == len(reasons) and all(len(row) == 5 for row in rows)
    shown = {row[0].split(" ")[0]: row[4] for row in rows}
    assert shown["t_2"] == "`` ``` a ` b" and shown["t_5"] == "<script>alert(1)</script>"
    assert shown["t_7"] == "&lt;b&gt; &#124; &amp;"
    assert len(shown["t_6"]) <= github.MAX_SUMMARY_REASON
    assert not [e.tag for e in html.iter() if e.tag in ("a", "img", "strong", "em", "b", "script")]


def test_the_summary_lists_the_worst_runs_first_and_at_most_ten():
    good = batch(["exit 1"], case_id="mostly_passes")
    bad = batch([f"exit {n}" for n in range(12)], case_id="always_fails")
    summary = good.model_copy(update={"runs": good.runs + bad.runs})
    rows = table_rows(list(rendered(github.step_summary(summary)).iter("table"))[1])
    assert len(rows) == github.MAX_WORST
    assert {row[1] for row in rows} == {"always_fails"}
    assert "proctor groups b_1" in github.step_summary(summary)


def test_an_unwritable_summary_file_is_one_sentence(tmp_path):
    from engine.reports import ReportError

    with pytest.raises(ReportError, match="GITHUB_STEP_SUMMARY .* could not be written"):
        github.append_step_summary(tmp_path / "missing" / "summary.md", batch(["x"]))


def test_commands_stay_stopped_until_the_token(capsys):
    import sys

    with github.commands_stopped(sys.stdout):
        print("::add-mask::inside")
        print("::proctor-guess::")  # a guessed token resumes nothing
    print("::error::after")
    out = capsys.readouterr().out
    assert workflow_commands(out) == ["::error::after"]


@pytest.mark.parametrize("link, shown", [
    (RUN_LINK, RUN_LINK),
    ("javascript:alert(1)", None),  # a bundle may hold anything: only a web link is shown
    ("https://x.example/a b", None),
    (["not", "text"], None),
])
def test_the_store_gives_only_a_web_link(tmp_path, link, shown):
    from engine.store import Store

    with Store(tmp_path / "proctor.db") as store:
        store.create_batch("b_1", "ci", "", "2026-12-01T10:00:00.000Z", config={"link": link})
        store.flush()
        assert store.batch_summary("b_1").link == shown


# --- the other commands ----------------------------------------------------------------------


def test_commands_that_print_what_agents_wrote_take_no_workflow_command(tmp_path):
    """`show`, `search` and `ls` print stored agent text; under GitHub Actions none of its
    lines is a command. With --json, stdout stays JSON (the guard lines go to stderr)."""
    from engine.store import Store
    from tests.engine.test_search import record

    store_path = tmp_path / "proctor.db"
    trial = record("t_1", word="wombat")
    trial = trial.model_copy(update={
        "trajectory": [*trial.trajectory, trial.trajectory[0].model_copy(update={"text": "wombat " + HOSTILE})],
        "failure": trial.failure.model_copy(update={"reason": "wombat " + HOSTILE})})
    with Store(store_path) as store:
        store.save_trial(trial).result()
    env = cli_env(**GITHUB)
    for args in (("show", "t_1"), ("search", "wombat")):
        done = proctor(*args, store=store_path, env=env)
        assert done.returncode == 0, done.stderr
        assert "##[add-mask]" in done.stdout, args  # the hostile text is printed…
        assert workflow_commands(done.stdout) == [], args  # …and taken as no command
    done = proctor("show", "t_1", "--json", store=store_path, env=env)
    assert json.loads(done.stdout)["id"] == "t_1"
    assert done.stderr.startswith("::stop-commands::")


def test_json_of_stored_agent_text_takes_no_command_in_the_runners_order(tmp_path):
    """`show --json` and `search --json` on a pipe, stdout block-buffered as on a runner (no
    PYTHONUNBUFFERED), both streams in one log: the JSON's `##[` never reads as a command,
    wherever it lands against the guard lines on stderr; the JSON is the same JSON."""
    import subprocess
    import sys

    from engine.store import Store
    from tests.engine.test_search import record

    store_path = tmp_path / "proctor.db"
    trial = record("t_1", word="wombat")
    trial = trial.model_copy(update={"failure": trial.failure.model_copy(update={"reason": "wombat " + HOSTILE})})
    with Store(store_path) as store:
        store.save_trial(trial).result()
    env = {k: v for k, v in cli_env(**GITHUB).items() if k != "PYTHONUNBUFFERED"}
    for args in (["show", "t_1", "--json"], ["search", "wombat", "--json"]):
        merged = subprocess.run([sys.executable, "-m", "engine.cli", *args, "--store", str(store_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=tmp_path, timeout=120)
        assert merged.returncode == 0 and workflow_commands(merged.stdout) == [], args
        alone = subprocess.run([sys.executable, "-m", "engine.cli", *args, "--store", str(store_path)],
                               capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert "##[add-mask]v1" in json.dumps(json.loads(alone.stdout)), args  # the same text, decoded
        assert "##[" not in alone.stdout


def test_a_summary_that_cannot_be_written_keeps_the_batchs_exit_status(docker_client, tmp_path):
    """$GITHUB_STEP_SUMMARY is a folder: one line says so; a failing batch still exits 1, and
    a passing one exits 2, not 0, since the report CI asked for is missing."""
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation, git

        @evaluation(workspace=git(init=True))
        def passes(c):
            c.send("x")
            c.exec("true").to_succeed()

        @evaluation(workspace=git(init=True))
        def fails(c):
            c.send("x")
            c.exec("false").to_succeed()
    """)
    env = cli_env(**GITHUB, GITHUB_STEP_SUMMARY=str(tmp_path))
    for case, status in (("fails", 1), ("passes", 2)):
        done = proctor("run", path, "--case", case, store=tmp_path / "p.db", env=env)
        said = [line for line in done.stderr.splitlines() if line.startswith("proctor:")]
        assert done.returncode == status and len(said) == 1, (case, done.stdout, done.stderr)
