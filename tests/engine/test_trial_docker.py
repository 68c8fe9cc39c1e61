"""Trials in a real Docker daemon: every outcome, the phases in order, diffs,
the timeout rule, secrets, the sandbox's network, and what reaches the store."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from engine.events import PhaseEnded, PhaseStarted, TrialFinished, TrialStarted
from tests.conftest import JsonHandler
from tests.make_store import store_bytes

AGENT_FILES = 'files={".agent/run.sh": Path("agent.sh")}'
HEADER = "from pathlib import Path\nfrom engine import evaluation, git, Step, Secret, Install\n"

WRITES_GREET = """
cat > greet.py <<'PY'
def greet(name):
    return f"Hello, {name}!"
PY
echo '{"type":"fileChange","path":"greet.py","change":"add"}'
echo '{"type":"command","command":"ls","exitCode":0,"output":"greet.py"}'
echo '{"type":"message","role":"assistant","text":"done"}'
echo '{"type":"finished","reason":"done"}'
"""


def one(summary, records):
    [run] = summary.runs
    [trial] = run.trials
    return records[trial.id]


def test_a_passing_trial_goes_through_every_phase_in_order(suite, run_eval):
    path = suite(HEADER + f"""
@evaluation(workspace=git(init=True), {AGENT_FILES})
def writes_greet(c):
    c.send("Create greet.py")
    c.exec("python3 -c 'from greet import greet; assert greet(\\"Ada\\") == \\"Hello, Ada!\\"'").to_succeed()
""", files={"agent.sh": WRITES_GREET})
    summary, events, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "pass" and record.failure is None

    trial_events = [e for e in events if getattr(e, "trial_id", None) == record.id]
    assert isinstance(trial_events[0], TrialStarted) and isinstance(trial_events[-1], TrialFinished)
    # "slot" comes first only when the trial waited for a free slot (a loaded machine can do that).
    pairs = [(type(e).__name__, e.phase) for e in trial_events
             if isinstance(e, (PhaseStarted, PhaseEnded)) and e.phase != "slot"]
    order = ["image", "container", "env", "workspace", "files", "setup", "snapshot", "harness",
             "turn", "diff", "check", "teardown", "record"]
    assert pairs == [(kind, phase) for phase in order for kind in ("PhaseStarted", "PhaseEnded")]
    assert all(e.status == "ok" and e.duration_ms >= 0 for e in trial_events if isinstance(e, PhaseEnded))
    assert [s.phase for s in record.phases] == order
    assert record.command_count == 1
    assert [i.kind for i in record.trajectory] == ["fileChange", "command", "message"]
    assert record.turns[0].status == "completed" and record.turns[0].final_message == "done"
    assert record.validations[0].status == "passed"
    assert record.timings.agent_ms > 0 and record.timings.setup_ms > 0


def test_diffs_per_turn_and_cumulative_leave_out_files_and_setup(suite, run_eval):
    agent = """
case "$PROCTOR_TURN" in
  1) printf 'one\\n' > a.txt ;;
  2) printf 'two\\n' > a.txt; printf 'new\\n' > b.txt ;;
esac
echo '{"type":"finished","reason":"done"}'
"""
    path = suite(HEADER + f"""
@evaluation(workspace=git(init=True), {AGENT_FILES}, rules="be brief",
            setup=["echo made-by-setup > setup.txt"])
def two_turns(c):
    first = c.send("one")
    second = c.send("two")
    assert first.files_changed == ["a.txt"], first.files_changed
    assert second.files_changed == ["a.txt", "b.txt"], second.files_changed
""", files={"agent.sh": agent})
    summary, _, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "pass", record.failure
    first, second = record.turns
    assert "+++ b/a.txt" in first.diff and "+one" in first.diff
    assert "-one" in second.diff and "+two" in second.diff and "+++ b/b.txt" in second.diff
    assert "-one" not in second.cumulative_diff and "+two" in second.cumulative_diff
    assert "+new" in second.cumulative_diff
    assert first.cumulative_diff == ""  # kept once, on the last turn
    for text in (first.diff, second.diff, second.cumulative_diff):
        assert "setup.txt" not in text and "AGENTS.md" not in text and ".agent/run.sh" not in text
    assert "$ echo made-by-setup > setup.txt" in record.setup_log


def test_a_timeout_aborts_the_turn_and_destroys_the_sandbox(suite, run_eval, docker_client):
    agent = 'echo \'{"type":"message","role":"assistant","text":"thinking"}\'\nsleep 120\n'
    path = suite(HEADER + f"""
@evaluation(timeout="8s", {AGENT_FILES})
def sleeps(c):
    c.send("think hard")
    c.exec("true").to_succeed()
""", files={"agent.sh": agent})
    started = time.monotonic()
    summary, events, records = run_eval(path)
    took = time.monotonic() - started
    record = one(summary, records)
    assert record.outcome == "fail" and record.failure.kind == "timeout"
    assert "8.0s" in record.failure.reason
    assert [t.status for t in record.turns] == ["aborted"]
    assert [s.status for s in record.phases if s.phase == "turn"] == ["aborted"]
    assert record.validations == []  # the check never ran
    assert took < 8 + 3 + 10, f"trial took {took:.1f}s"
    assert docker_client.containers.list(all=True, filters={"label": f"proctor.trial={record.id}"}) == []


def test_setup_failures_and_harness_failures_are_void(suite, run_eval):
    agent = 'echo \'{"type":"finished","reason":"failed: model endpoint unreachable"}\'\n'
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, setup=[Step("sleep 30", timeout="1s")])
def slow_setup(c):
    c.send("x")

@evaluation({AGENT_FILES}, setup=["echo ok", "exit 4"])
def failing_setup(c):
    c.send("x")

@evaluation({AGENT_FILES})
def harness_fails(c):
    c.send("x")
    c.exec("true").to_succeed()
""", files={"agent.sh": agent})
    summary, _, records = run_eval(path)
    by_case = {r.case_id: records[r.trials[0].id] for r in summary.runs}
    slow, failing, harness = by_case["slow_setup"], by_case["failing_setup"], by_case["harness_fails"]
    for record in (slow, failing, harness):
        assert record.outcome == "infra_error" and record.failure.kind == "infra"
    assert "timed out" in slow.failure.reason and slow.failure.where == "setup step 1"
    assert failing.failure.reason == "setup step 2 `exit 4` exited 4"
    assert "$ echo ok\nok" in failing.setup_log
    assert failing.void_fields == ["turns", "trajectory", "validations"]
    assert "failed: model endpoint unreachable" in harness.failure.reason
    assert [t.status for t in harness.turns] == ["failed"]
    assert not [p for p in failing.phases if p.phase in ("snapshot", "harness", "turn")]
    assert failing.phases[-2].phase == "teardown" and failing.phases[-1].phase == "record"
    assert summary.runs[0].distribution.pass_rate is None


def test_turn_without_finished_is_scored_and_soft_matchers_all_run(suite, run_eval):
    agent = 'echo some raw output\necho oops >&2\nexit 3\n'
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES})
def soft(c):
    turn = c.send("x")
    assert turn.exit_code == 3
    c.exec("exit 1").to_succeed()
    c.exec("echo hello").stdout.to_contain("bye")
    c.exec("echo hello").stdout.to_contain("hell")
    c.exec("exit 2").to_fail()
""", files={"agent.sh": agent})
    summary, events, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "fail" and record.failure.kind == "assertion"
    assert record.failure.where == "check 1 of 4"
    assert [v.status for v in record.validations] == ["failed", "failed", "passed", "passed"]
    turn = record.turns[0]
    assert turn.status == "completed" and turn.exit_code == 3 and turn.finished_reason is None
    assert "some raw output" in turn.raw_output and "oops" in turn.raw_output
    line = [e for e in events if isinstance(e, PhaseEnded) and e.phase == "turn"][0].summary
    assert "exit 3" in line


def test_an_exception_in_the_body_is_a_failed_check(suite, run_eval):
    path = suite(HEADER + """
@evaluation()
def raises(c):
    c.exec("true").to_succeed()
    raise RuntimeError("eval bug")
""")
    record = one(*run_eval(path)[::2])
    assert record.outcome == "fail" and record.failure.kind == "assertion"
    check = record.validations[-1]
    assert check.kind == "check" and check.status == "error"
    assert "RuntimeError" in record.failure.reason and "test.eval.py:7" in record.failure.reason


def test_secrets_are_placeholders_and_the_sandbox_has_only_loopback(suite, run_eval, monkeypatch):
    value = "tok3n-VALUE-" + "9f8e7d6c5b4a3210"
    monkeypatch.setenv("DEMO_API_KEY", value)
    agent = """
env > env.txt
cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' > ifaces.txt
echo '{"type":"finished","reason":"done"}'
"""
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, env={{"LANG": "C.UTF-8"}},
            secrets={{"DEMO_API_KEY": Secret(hosts=["api.example.test"])}})
def looks_around(c):
    c.send("x")
    env = c.read_file("env.txt")
    assert "DEMO_API_KEY=proctor-placeholder-DEMO_API_KEY-" in env, env
    assert "LANG=C.UTF-8" in env
    assert c.read_file("ifaces.txt").split() == ["lo"], c.read_file("ifaces.txt")
    c.exec("cat /proc/1/environ /proc/self/environ | tr '\\\\0' '\\\\n'").stdout.to_contain("placeholder")
""", files={"agent.sh": agent})
    summary, events, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "pass", record.failure or record.validations
    dumped = json.dumps(record.to_json()) + "".join(e.model_dump_json() for e in events)
    assert value not in dumped


def test_a_missing_secret_is_void_naming_the_variable(suite, run_eval, monkeypatch):
    monkeypatch.delenv("PROCTOR_TEST_UNSET_KEY", raising=False)
    path = suite(HEADER + """
@evaluation(secrets={"PROCTOR_TEST_UNSET_KEY": Secret(hosts=["api.example.test"])})
def needs_key(c):
    c.send("x")
""")
    record = one(*run_eval(path)[::2])
    assert record.outcome == "infra_error"
    assert "PROCTOR_TEST_UNSET_KEY" in record.failure.reason
    assert not record.turns


KEYS = {
    "openai": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    "stripe": "sk_live_" + "51HxYzAbCdEfGhIjKlMnOp",
    "am": "am_sk_" + "q8w7e6r5t4y3u2i1o0p9",
    "anp": "anp_" + "Zx9Yw8Xv7Wu6Vt5Us4",
    "github": "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "google": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer": "Bearer " + "opaqueTokenValue0123456789abcdef",
    "pg_password": "postgres://app:" + "s3cr3tP4ssw0rdXY" + "@db:5432/app",
    "pem_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + "BKcwggSjAgEAAoIBAQC7",
}
SECRET_VALUE = "trial-secret-" + "Qm9vWk1hcmtlcg77"


def test_the_store_holds_no_raw_secret_byte(suite, run_eval, store, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_TOKEN", SECRET_VALUE)
    lines = "\n".join(v for k, v in KEYS.items() if k != "pem_body")
    pem = f"-----BEGIN PRIVATE KEY-----\n{KEYS['pem_body']}\n-----END PRIVATE KEY-----"
    agent = f"""
cat > leak.txt <<'EOF'
{lines}
{pem}
EOF
cat leak.txt
echo "$PROCTOR_TEST_TOKEN"
printf '{{"type":"command","command":"echo %s","exitCode":0,"output":"%s"}}\\n' "{KEYS['openai']}" "{KEYS['aws']}"
printf '{{"type":"message","role":"assistant","text":"key {KEYS['github']} and {SECRET_VALUE}"}}\\n'
echo '{{"type":"finished","reason":"done"}}'
"""
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, setup=["echo {KEYS['slack']} {SECRET_VALUE}"])
def leaks(c):
    c.send("print every key you know: {KEYS['stripe']}")
    c.exec("cat leak.txt; echo {SECRET_VALUE}").to_succeed()
    c.capture("leak.txt")
""", files={"agent.sh": agent})
    # The secret enters via the host environment the engine forwards from.
    summary, _, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "pass", record.failure
    assert "[redacted]" in record.turns[0].diff
    raw = store_bytes(store)
    for name, key in {**KEYS, "secret": SECRET_VALUE}.items():
        body = {"bearer": key.removeprefix("Bearer "), "pg_password": "s3cr3tP4ssw0rdXY"}.get(name, key)
        assert body.encode() not in raw, f"{name} key survived in the store"
        for i in range(0, len(body) - 12, 6):  # no long fragment either
            assert body[i:i + 12].encode() not in raw, f"a fragment of the {name} key survived"


class _Judge(JsonHandler):
    replies: list[str] = []
    seen: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        content = type(self).replies.pop(0) if type(self).replies else '{"score": 0.8, "reasoning": "fine"}'
        data = json.dumps({"id": "cmpl-1", "model": body["model"], "usage": {"prompt_tokens": 10},
                           "choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.reply(data)


@pytest.fixture
def judge_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    _Judge.replies, _Judge.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Judge
    server.shutdown()


def test_the_judge_passes_and_fails_by_threshold_with_evidence(suite, run_eval, judge_server, monkeypatch):
    url, judge = judge_server
    monkeypatch.setenv("PROCTOR_TEST_JUDGE_KEY", "judge-key-0123456789abcdef")
    judge.replies = ['{"score": 0.8, "reasoning": "good enough"}',
                     '```json\n{"score": 0.8, "reasoning": "same"}\n```',
                     "not json at all", "still not", "nope"]
    from tests.conftest import DEFAULT_TOML
    toml = DEFAULT_TOML + f"""
[judge]
base_url = "{url}"
model = "judge-mini"
api_key_env = "PROCTOR_TEST_JUDGE_KEY"
retries = 2
"""
    path = suite(HEADER + f"""
@evaluation(workspace=git(init=True), {AGENT_FILES})
def judged(c):
    c.send("Create greet.py")
    c.judge("greet.py is idiomatic", threshold=0.7)
    c.judge("greet.py is perfect", threshold=0.9)
    c.judge("greet.py is documented")
""", toml=toml, files={"agent.sh": WRITES_GREET})
    record = one(*run_eval(path)[::2])
    passed, failed, broken = record.validations
    assert (passed.status, failed.status, broken.status) == ("passed", "failed", "error")
    assert record.outcome == "fail" and record.failure.kind == "judge" and record.failure.where == "judge 2"
    assert passed.evidence["judgment"] == {"score": 0.8, "reasoning": "good enough"}
    assert "Create greet.py" in passed.evidence["prompt"] and "+++ b/greet.py" in passed.evidence["prompt"]
    assert passed.evidence["metadata"]["model"] == "judge-mini"
    assert len(broken.evidence["responses"]) == 3
    assert judge.seen[0]["path"] == "/v1/chat/completions"
    assert judge.seen[0]["auth"] == "Bearer judge-key-0123456789abcdef"
    assert "judge-key-0123456789abcdef" not in json.dumps(record.to_json())
    assert [p.phase for p in record.phases].count("judge") == 3


def test_install_images_are_built_once_and_cached(suite, run_eval, docker_client):
    marker = f"built-{os.getpid()}-{time.time_ns()}"
    path = suite(HEADER + f"""
@evaluation(image=Install("proctor-test-base:bookworm", ["echo {marker} > /opt/marker"]))
def uses_built_image(c):
    c.exec("cat /opt/marker").stdout.to_contain("{marker}")
""")
    first = one(*run_eval(path)[::2])
    second = one(*run_eval(path)[::2])
    assert first.outcome == second.outcome == "pass"
    assert first.phases[0].detail == "built" and second.phases[0].detail == "cache hit"
    assert first.image == second.image and first.image.startswith("proctor-image:")
    docker_client.images.remove(first.image, force=True)  # unique per run: do not pile up


def test_dockerfile_images_are_built_from_their_folder(suite, run_eval, docker_client):
    marker = f"df-{os.getpid()}-{time.time_ns()}"
    dockerfile = f"FROM proctor-test-base:bookworm\nCOPY hello.txt /opt/hello.txt\nRUN echo {marker} >> /opt/hello.txt\n"
    path = suite(HEADER.replace("Install", "Install, Dockerfile") + """
@evaluation(image=Dockerfile("docker/Dockerfile"))
def uses_dockerfile(c):
    c.exec("cat /opt/hello.txt").stdout.to_contain("hello from the context")
""", files={"docker/Dockerfile": dockerfile, "docker/hello.txt": "hello from the context\n"})
    record = one(*run_eval(path)[::2])
    assert record.outcome == "pass", record.validations
    assert record.phases[0].detail == "built"
    docker_client.images.remove(record.image, force=True)


def test_a_failing_image_build_is_void(suite, run_eval):
    path = suite(HEADER + """
@evaluation(image=Install("proctor-test-base:bookworm", ["exit 7"]))
def bad_image(c):
    c.exec("true")
""")
    record = one(*run_eval(path)[::2])
    assert record.outcome == "infra_error" and record.failure.where == "image"
    assert "image build failed" in record.failure.reason


def test_workspace_from_a_folder_and_from_a_git_ref(suite, run_eval, tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "v.txt").write_text("v1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    (repo / "v.txt").write_text("v2\n")
    subprocess.run([*git, "commit", "-qam", "v2"], check=True)
    folder = tmp_path / "folder"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print('app')\n")
    path = suite(HEADER + f"""
@evaluation(workspace=git({str(repo)!r}, ref="v1"))
def at_ref(c):
    c.exec("cat v.txt").stdout.to_equal("v1")
    c.exec("test -e .git").to_fail()  # the tree only: no history to read the answer from

@evaluation(workspace={str(folder)!r})
def from_folder(c):
    c.exec("python3 src/app.py").stdout.to_equal("app")
""")
    summary, _, records = run_eval(path)
    for run in summary.runs:
        record = records[run.trials[0].id]
        assert record.outcome == "pass", (run.case_id, record.validations)


def test_the_sweep_closes_trials_of_a_stopped_engine(store, docker_client):
    from engine.batch import Engine
    from engine.models import TrialRecord
    from engine.sandbox.cleanup import labels

    import socket

    dead = f"{socket.gethostname()}:999999:1"
    record = TrialRecord(id="t_sweeptest1", batch_id="b_sweeptest", run_id="r_sweeptest",
                         case_id="c", variant="v", trial=1, trigger="api")
    store.create_batch("b_sweeptest", "api", dead, "2026-01-01T00:00:00Z")
    store.create_run("r_sweeptest", "b_sweeptest", "c", "v", 0)
    store.create_trial(record, dead)
    container = docker_client.containers.create(
        "proctor-test-base:bookworm", ["sleep", "infinity"], network_mode="none",
        labels=labels("b_sweeptest", "t_sweeptest1", dead))
    live = docker_client.containers.create(
        "proctor-test-base:bookworm", ["sleep", "infinity"], network_mode="none",
        labels=labels("b_live", "t_live", Engine(store, docker_client).owner))
    try:
        closed = Engine(store, docker_client).sweep().trials
        assert "t_sweeptest1" in closed
        after = store.get_trial("t_sweeptest1")
        assert after.outcome == "infra_error" and after.failure.reason == "engine stopped"
        assert store.batch_summary("b_sweeptest").status == "failed"
        ids = [c.id for c in docker_client.containers.list(all=True, filters={"label": "proctor=1"})]
        assert container.id not in ids and live.id in ids
    finally:
        for c in (container, live):
            try:
                c.remove(force=True)
            except Exception:
                pass


def test_waiting_for_a_slot_is_its_own_span_and_not_timed(suite, store, docker_client):
    """Two trials at concurrency 1 under a 5 s timeout; the first spends 6 s in its setup,
    which is not timed: the second waits longer than its timeout for its slot and still
    passes, because waiting does not count. No clock is raced: the waits are sleeps."""
    from engine.batch import BatchPlan, Engine
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, timeout="5s", trials=2,
            setup=['[ "$PROCTOR_TRIAL_NUMBER" != 1 ] || sleep 6'])
def patient(c):
    c.send("x")
""", files={"agent.sh": 'echo \'{"type":"finished","reason":"done"}\'\n'})
    config = load_config(find_config(path))
    plan = BatchPlan(cases=load_cases([path]), variants=config.variants, config=config,
                     concurrency=1, trigger="api")
    engine = Engine(store, docker_client)
    handle = engine.start_batch(plan)  # returns at once: the batch below is still running
    assert [(case, variant) for _, case, variant in handle.runs] == [("patient", "scripted")]
    assert handle.wait(timeout=0.1) is None  # still running; not cancelled
    progress: list = []
    handle.listen(progress.append)
    summary = handle.wait(timeout=60)
    assert summary is not None and [t.outcome for t in summary.runs[0].trials] == ["pass", "pass"]
    assert any(isinstance(e, TrialFinished) for e in progress)
    second = store.get_trial(summary.runs[0].trials[1].id)
    slot = [p for p in second.phases if p.phase == "slot"]
    assert len(slot) == 1 and slot[0].end_ms - slot[0].start_ms > 5000
    assert second.timings.slot_ms > 5000


def test_a_case_under_two_variants_gives_each_run_its_distribution(suite, run_eval):
    """`steady` always passes with 2 commands; `flaky` fails its 2nd trial and runs a different
    number of commands each time: pass rate, determinism and spread per SPEC."""
    from tests.conftest import DEFAULT_TOML

    toml = DEFAULT_TOML.replace('name = "scripted"', 'name = "steady"') + """
[[variants]]
name = "flaky"
command = "sh .agent/run.sh flaky"
"""
    agent = """
n=$PROCTOR_TRIAL_NUMBER
commands=2
if [ "$1" = flaky ]; then commands=$((n * 4)); fi
i=0
while [ $i -lt $commands ]; do
  echo '{"type":"command","command":"step","exitCode":0,"output":""}'; i=$((i + 1))
done
if [ "$1" = flaky ] && [ "$n" = 2 ]; then echo broken > answer.txt; else echo 42 > answer.txt; fi
echo '{"type":"finished","reason":"done"}'
"""
    path = suite(HEADER + f"""
@evaluation({AGENT_FILES}, trials=3)
def answers(c):
    c.send("answer")
    c.exec("cat answer.txt").stdout.to_equal("42")
""", toml=toml, files={"agent.sh": agent})
    summary, _, _ = run_eval(path)
    runs = {r.variant: r for r in summary.runs}
    steady, flaky = runs["steady"].distribution, runs["flaky"].distribution
    assert (steady.trials, steady.scored, steady.passed, steady.failed, steady.voided) == (3, 3, 3, 0, 0)
    assert steady.pass_rate == 1.0 and steady.deterministic
    assert (steady.command_min, steady.command_median, steady.command_max) == (2, 2, 2)
    assert (flaky.passed, flaky.failed) == (2, 1) and flaky.pass_rate == 0.667
    assert not flaky.deterministic
    assert (flaky.command_min, flaky.command_median, flaky.command_max) == (4, 8, 12)
    assert [t.outcome for t in runs["flaky"].trials] == ["pass", "fail", "pass"]


def test_an_image_many_trials_need_is_built_once(suite, run_eval, docker_client):
    marker = f"once-{os.getpid()}-{time.time_ns()}"
    path = suite(HEADER + f"""
@evaluation(image=Install("proctor-test-base:bookworm", ["sleep 1; echo {marker} > /opt/marker"]), trials=3)
def shares_an_image(c):
    c.exec("cat /opt/marker").stdout.to_contain("{marker}")
""")
    summary, _, records = run_eval(path, concurrency=3)
    built = [records[t.id].phases[0].detail for t in summary.runs[0].trials]
    assert sorted(built) == ["built", "cache hit", "cache hit"], built
    assert all(records[t.id].outcome == "pass" for t in summary.runs[0].trials)
    docker_client.images.remove(records[summary.runs[0].trials[0].id].image, force=True)


def test_a_batch_silent_for_ten_minutes_on_another_host_is_closed(store, docker_client):
    from engine.batch import Engine
    from engine.models import TrialRecord

    elsewhere = "another-host:4242:1"  # a pid we cannot check: only the heartbeat tells
    for batch_id, beat in (("b_silent", "2026-01-01T00:00:00.000Z"), ("b_beating", None)):
        started = "2026-01-01T00:00:00.000Z" if beat else time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        store.create_batch(batch_id, "cli", elsewhere, started)
        store.create_run(f"r_{batch_id}", batch_id, "c", "v", 0)
        store.create_trial(TrialRecord(id=f"t_{batch_id}", batch_id=batch_id, run_id=f"r_{batch_id}",
                                       case_id="c", variant="v", trial=1, trigger="cli"), elsewhere)
    store.flush()
    closed = Engine(store, docker_client).sweep().trials
    assert closed == ["t_b_silent"]
    assert store.batch_summary("b_silent").status == "failed"
    assert store.get_trial("t_b_silent").failure.reason == "engine stopped"
    assert store.batch_summary("b_beating").status == "running"
