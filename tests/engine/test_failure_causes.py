"""Failure reasons that name the cause (issue 11, item 6). An unreachable judge fails the
trial with kind `judge`, its phase `error`, and a reason that says why ("judge unreachable:
connection refused at 127.0.0.1:9"); an exception in the eval body (the eval author's bug)
is an `error` of the check, and the reason names the exception and its line in the eval
file, as the Evidence card does. The record, the browser's reason and `proctor run -v` agree."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

import pytest

from engine.config import JudgeConfig
from engine.judge import ask_judge
from tests.conftest import DEFAULT_TOML, JsonHandler

# Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
UNREACHABLE_JUDGE = DEFAULT_TOML + """
[judge]
base_url = "http://127.0.0.1:9/v1"
model = "judge-mini"
retries = 2
"""
AGENT = "echo '{\"type\":\"finished\",\"reason\":\"done\"}'\n"
HEADER = "from pathlib import Path\nfrom engine import evaluation\n"

JUDGED = HEADER + """
@evaluation(files={".agent/run.sh": Path("agent.sh")})
def judged(c):
    c.send("x")
    c.judge("the work is done")
"""
BUGGY = HEADER + """
@evaluation(files={".agent/run.sh": Path("agent.sh")})
def buggy(c):
    c.send("x")
    c.exec("echo hi").to_succeed()
    counts = {}
    counts["missing"] += 1  # the eval author's bug
"""
BUG_LINE = BUGGY.splitlines().index('    counts["missing"] += 1  # the eval author\'s bug') + 1


class _Refusing(JsonHandler):
    """A judge that answers every request 401 (a wrong key), or with no score at all."""

    status = 401

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).status == 200:
            self.reply(b'{"choices": [{"message": {"content": "I think it is fine."}}]}')
            return
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b'{"error": "invalid api key"}')


@pytest.fixture
def refusing_judge():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def judge_at(url: str) -> JudgeConfig:
    return JudgeConfig(base_url=url, model="judge-mini", retries=1)


def test_each_kind_of_judge_failure_names_its_cause(refusing_judge):
    port = refusing_judge
    refused = ask_judge(judge_at("http://127.0.0.1:9/v1"), "tidy", 0.5, {})
    assert (refused.status, refused.evidence["error"]) == (
        "error", "judge unreachable: connection refused at 127.0.0.1:9")
    _Refusing.status = 401
    denied = ask_judge(judge_at(f"http://127.0.0.1:{port}/v1"), "tidy", 0.5, {})
    assert denied.evidence["error"] == (
        f'judge answered HTTP 401 at 127.0.0.1:{port}: {{"error": "invalid api key"}}')
    _Refusing.status = 200
    vague = ask_judge(judge_at(f"http://127.0.0.1:{port}/v1"), "tidy", 0.5, {})
    assert vague.evidence["error"] == ("judge gave no usable verdict after 2 attempts: reply is "
                                       "not a JSON object with a score from 0 to 1")


def only(summary, records):
    [run] = summary.runs
    [trial] = run.trials
    return records[trial.id]


def test_an_unreachable_judge_names_the_cause_and_its_phase_is_an_error(suite, run_eval):
    path = suite(JUDGED, toml=UNREACHABLE_JUDGE, files={"agent.sh": AGENT})
    summary, _, records = run_eval(path)
    record = only(summary, records)
    assert record.outcome == "fail" and record.failure.kind == "judge"
    assert "judge unreachable: connection refused at 127.0.0.1:9" in record.failure.reason
    [judge] = [s for s in record.phases if s.phase == "judge"]
    assert judge.status == "error"
    [verdict] = record.validations
    assert verdict.status == "error" and len(verdict.evidence["responses"]) == 3


def test_an_exception_in_the_eval_body_is_an_error_of_the_check_at_its_line(suite, run_eval):
    path = suite(BUGGY, files={"agent.sh": AGENT})
    summary, _, records = run_eval(path)
    record = only(summary, records)
    assert record.outcome == "fail" and record.failure.kind == "assertion"  # SPEC's kinds stay
    reason = record.failure.reason
    # As the Evidence card says it: the exception and its message, and where in the eval file.
    assert "error" in reason and "KeyError: 'missing'" in reason, reason
    assert f"test.eval.py:{BUG_LINE}" in reason and record.failure.where == f"test.eval.py:{BUG_LINE}"
    command, check = record.validations
    assert command.status == "passed" and check.kind == "check" and check.status == "error"
    # The command before the bug passed: its phase says so.
    assert [s.status for s in record.phases if s.phase == "check"] == ["ok"]


@pytest.mark.slow
def test_proctor_run_v_says_both_causes(suite, docker_client, tmp_path):
    path = suite(JUDGED + BUGGY.removeprefix(HEADER), toml=UNREACHABLE_JUDGE, files={"agent.sh": AGENT})
    done = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(path), "-v",
                           "--store", str(tmp_path / "proctor.db")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()

    def said(case: str, phase: str) -> str:
        [line] = [x for x in lines if x.startswith(f"[{case}#1 ") and x.split()[3] == phase]
        return line

    assert "1 error" in said("judged", "judge")
    assert "judge unreachable: connection refused at 127.0.0.1:9" in said("judged", "judge")
    assert "outcome fail · judge: judge unreachable: connection refused at 127.0.0.1:9" \
        in said("judged", "teardown")
    line = said("buggy", "teardown")
    bug_line = (JUDGED + BUGGY.removeprefix(HEADER)).splitlines().index(
        '    counts["missing"] += 1  # the eval author\'s bug') + 1
    assert "outcome fail · assertion:" in line and "KeyError: 'missing'" in line
    assert f"test.eval.py:{bug_line}" in line and "error" in line.split("assertion:")[1]
