"""`proctor run --junit FILE`: a real batch in Docker (a pass, a fail, a void trial, then an
interrupt that leaves a trial skipped) writes JUnit XML that Jenkins' schema accepts
(tests/data/junit.xsd, validated with xmlschema) and a JUnit reader (junitparser) reads back
with the expected counts and one element per outcome. A hostile reason (control characters,
`]]>`, a lone surrogate, a megabyte) still gives a valid file.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from engine.models import BatchSummary, Failure as TrialFailure, RunSummary, TrialSummary, distribution
from engine.reports import Site
from engine.reports.junit import MAX_REASON, write_junit

from tests.conftest import suite_toml
from tests.engine.test_cli import finish, proctor, start_run, write_suite

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit.xsd"
# An agent's reason at its worst: characters XML 1.0 cannot hold, a CDATA end, markup.
HOSTILE = "boom\x00\x01\x1b[31m ]]> </failure><error/> &amp; \ud800 \ufffe end"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(SCHEMA)


# --- a real batch -----------------------------------------------------------------------------

OUTCOMES_SUITE = """
    from engine import evaluation

    AGENT = {".agent/run.sh": "printf 'boom\\\\001\\\\033[31m ]]> </failure> &amp;' > said.txt"}


    @evaluation(files=AGENT)
    def passes(c):
        c.send("do nothing")
        c.exec("true").to_succeed()


    @evaluation(files=AGENT)
    def fails(c):
        c.send("say something")
        assert False, c.read_file("said.txt")


    @evaluation(files=AGENT, setup=["echo 'no lockfile' >&2; exit 1"])
    def is_void(c):
        c.send("never reached")


    @evaluation(trials=2, files={".agent/run.sh": "sleep 60"})
    def waits(c):
        c.send("wait a minute")
"""

OUTCOMES_TOML = suite_toml({"scripted": "sh .agent/run.sh"}, concurrency=1, timeout="5m")


@pytest.fixture(scope="module")
def interrupted_report(docker_client, tmp_path_factory) -> tuple[int, str, Path]:
    """The suite run one trial at a time, interrupted once `waits#1` sleeps in its turn:
    its second trial never starts. (exit status, stderr, the JUnit file)"""
    tmp = tmp_path_factory.mktemp("junit")
    path = write_suite(tmp / "suite", OUTCOMES_SUITE, toml=OUTCOMES_TOML)
    report = tmp / "reports" / "out.xml"
    report.parent.mkdir()
    process, lines = start_run(path, tmp / "proctor.db", "--junit", str(report))
    try:
        deadline = time.monotonic() + 240
        while not any(line.startswith("[waits#1 scripted]") and " harness " in line for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        time.sleep(1)  # the agent is now sleeping in its turn
        process.send_signal(signal.SIGINT)
        code, stderr = finish(process, within=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, stderr, report


def test_an_interrupted_batch_still_writes_its_report(interrupted_report, schema):
    code, stderr, report = interrupted_report
    assert code == 130, stderr
    assert "Traceback" not in stderr, stderr
    schema.validate(str(report))  # raises with the first element the schema refuses
    assert not [p for p in report.parent.iterdir() if p != report], "a temporary file was left"


def test_the_report_reads_back_with_one_suite_per_run_and_the_counts(interrupted_report):
    xml = JUnitXml.fromfile(str(interrupted_report[2]))
    suites = {suite.name: suite for suite in xml}
    assert list(suites) == ["passes [scripted]", "fails [scripted]", "is_void [scripted]",
                            "waits [scripted]"]
    counts = {name: (s.tests, s.failures, s.errors, s.skipped) for name, s in suites.items()}
    assert counts == {"passes [scripted]": (1, 0, 0, 0), "fails [scripted]": (1, 1, 0, 0),
                      "is_void [scripted]": (1, 0, 1, 0), "waits [scripted]": (2, 0, 1, 1)}
    assert (xml.tests, xml.failures, xml.errors) == (5, 1, 2)
    assert xml.time == pytest.approx(sum(s.time for s in suites.values()), abs=0.01)


def test_each_outcome_has_its_element(interrupted_report):
    xml = JUnitXml.fromfile(str(interrupted_report[2]))
    cases = {case.name: case for suite in xml for case in suite}
    assert list(cases) == ["passes#1 scripted", "fails#1 scripted", "is_void#1 scripted",
                           "waits#1 scripted", "waits#2 scripted"]
    assert all(case.classname == "suite/suite.eval.py" for case in cases.values())
    assert cases["passes#1 scripted"].is_passed and cases["passes#1 scripted"].time > 0
    (failure,) = cases["fails#1 scripted"].result
    assert isinstance(failure, Failure) and failure.type == "assertion"
    # The agent's words, less what XML cannot hold; the markup stays text.
    assert "AssertionError" in failure.message and "]]> </failure> &amp;" in failure.message
    assert "\x01" not in failure.message and "\x1b" not in failure.message
    (error,) = cases["is_void#1 scripted"].result
    assert isinstance(error, Error) and error.type == "infra" and "setup" in error.message
    (interrupted,) = cases["waits#1 scripted"].result
    assert isinstance(interrupted, Error) and "interrupted" in interrupted.message
    (skipped,) = cases["waits#2 scripted"].result
    assert isinstance(skipped, Skipped) and cases["waits#2 scripted"].time == 0
    # The time is the trial's own: the void one ended at setup, well before the sleeper.
    assert cases["fails#1 scripted"].time < 60


def test_a_report_folder_that_does_not_exist_stops_before_the_batch(tmp_path):
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation


        @evaluation()
        def fine(c):
            c.send("hi")
    """)
    store = tmp_path / "proctor.db"
    done = proctor("run", path, "--junit", tmp_path / "missing" / "out.xml", store=store)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--junit" in lines[0] and "does not exist" in lines[0], done.stderr
    assert not store.exists(), "the batch started although its report could not be written"


# --- hostile reasons, without Docker ----------------------------------------------------------


def summary_with(reason: str, variant: str = "scripted") -> BatchSummary:
    trials = [TrialSummary(id="t_1", trial=1, outcome="fail", duration_ms=1500,
                           failure=TrialFailure(kind="assertion", reason=reason, where="check 1 of 1")),
              TrialSummary(id="t_2", trial=2, outcome="infra_error", duration_ms=20,
                           failure=TrialFailure(kind="infra", reason=reason)),
              TrialSummary(id="t_3", trial=3, outcome="skipped", failure=None)]
    run = RunSummary(run_id="r_1", case_id="writes_greet", variant=variant,
                     distribution=distribution(trials), trials=trials)
    return BatchSummary(batch_id="b_1", trigger="ci", status="finished", runs=[run],
                        started_at="2026-12-01T10:00:00.000Z")


@pytest.mark.parametrize("reason", [
    HOSTILE,
    HOSTILE * 50_000,  # about a megabyte
    "\ud800" * 10 + "\x0b\x0c" * 10,  # nothing XML can hold
    "line one\r\nline two\n\tindented",
], ids=["controls", "megabyte", "only-unholdable", "line-breaks"])
def test_a_hostile_reason_still_gives_valid_bounded_xml(tmp_path, schema, reason):
    report = tmp_path / "out.xml"
    write_junit(report, summary_with(reason, variant="v\x07<&>"), {"writes_greet": Site(file="a.eval.py", line=3)})
    schema.validate(str(report))
    assert report.stat().st_size < 20_000
    (suite,) = JUnitXml.fromfile(str(report))
    assert suite.name == "writes_greet [v<&>]"
    failed, void, skipped = list(suite)
    (failure,) = failed.result
    assert len(failure.message) <= MAX_REASON
    if reason.startswith("line one"):  # what XML holds comes back as it was, line breaks too
        assert failure.message == reason
    assert isinstance(void.result[0], Error) and isinstance(skipped.result[0], Skipped)


def test_a_report_replaces_the_old_one_whole(tmp_path, schema):
    report = tmp_path / "out.xml"
    report.write_text("not xml, from an earlier run")
    write_junit(report, summary_with("exit 1"), {})
    schema.validate(str(report))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.xml"]
    (suite,) = JUnitXml.fromfile(str(report))
    assert [case.classname for case in suite] == ["writes_greet"] * 3  # no site: the case id


def test_a_retried_void_trial_is_reported_by_its_last_attempt(tmp_path, schema):
    trials = [TrialSummary(id="t_1", trial=1, attempt=1, outcome="infra_error", duration_ms=5,
                           failure=TrialFailure(kind="infra", reason="docker went away")),
              TrialSummary(id="t_2", trial=1, attempt=2, outcome="pass", failure=None, duration_ms=900)]
    run = RunSummary(run_id="r_1", case_id="c", variant="v", distribution=distribution(trials), trials=trials)
    report = tmp_path / "out.xml"
    write_junit(report, BatchSummary(batch_id="b_1", trigger="cli", status="finished", runs=[run]), {})
    schema.validate(str(report))
    (suite,) = JUnitXml.fromfile(str(report))
    (case,) = suite
    assert (suite.tests, suite.errors) == (1, 0) and case.is_passed and case.time == 0.9
    assert "attempt 2" in case.system_out


def test_a_report_path_that_is_a_folder_is_refused_in_one_sentence(tmp_path):
    from engine.reports import ReportError
    from engine.reports.junit import check_writable

    with pytest.raises(ReportError, match="is a folder; name a file such as report.xml"):
        check_writable(tmp_path)
    check_writable(tmp_path / "new.xml")  # a new file in a folder that exists: fine


def test_a_batch_the_engine_could_not_finish_still_writes_its_report(docker_client, tmp_path, schema):
    """A Docker host of [[hosts]] is gone: the batch ends with an engine error (exit 3, one
    line), and the report still says what ran: one void trial."""
    path = write_suite(tmp_path / "suite", """
        from engine import evaluation, git

        @evaluation(workspace=git(init=True))
        def one(c):
            c.send("x")
    """, toml=suite_toml({"scripted": "true"}) + f'\n[[hosts]]\nurl = "unix://{tmp_path}/no-such-docker.sock"\n')
    report = tmp_path / "report.xml"
    done = proctor("run", path, "--junit", report, store=tmp_path / "p.db")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert [line for line in done.stderr.splitlines() if line.startswith("proctor:")][-1].count("not reachable")
    schema.validate(str(report))
    [suite] = JUnitXml.fromfile(str(report))
    assert (suite.tests, suite.errors, suite.failures) == (1, 1, 0)
