"""The mini harness in a real Docker daemon, against a stand-in OpenAI-compatible
server on loopback: bash calls run in the sandbox and their output goes back,
usage adds up, 429/5xx are retried, max_steps ends a turn, and a missing or
refused key voids the trial."""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.conftest import BASE_IMAGE

HEADER = "from engine import evaluation, git\n"
KEY = "model-key-0123456789abcdef"
WRITE_CALC = r"printf 'def add(a, b):\n    return a + b\n' > calc.py"

Reply = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers
_ids = itertools.count(1)


def usage(prompt: int, completion: int, cached: int = 0, reasoning: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "prompt_tokens_details": {"cached_tokens": cached}}
    if reasoning is not None:
        data["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return data


def answer(text: str, use: dict[str, Any] | None = None) -> Reply:
    message = {"role": "assistant", "content": text}
    return 200, {"id": "cmpl-1", "model": "stand-in", "usage": use or usage(10, 5),
                 "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}, {}


def bash(*commands: str, use: dict[str, Any] | None = None) -> Reply:
    calls = [{"id": f"call_{next(_ids)}", "type": "function",
              "function": {"name": "bash", "arguments": json.dumps({"command": c})}} for c in commands]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return 200, {"id": "cmpl-1", "model": "stand-in", "usage": use or usage(10, 5),
                 "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}, {}


def error(status: int, headers: dict[str, str] | None = None) -> Reply:
    return status, {"error": {"message": f"stand-in says {status}"}}, headers or {}


class _Model(BaseHTTPRequestHandler):
    """Answers each request with the next scripted reply, then with `default`."""

    script: list[Reply] = []
    default: Reply = answer("done")
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        cls.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        status, reply, headers = cls.script.pop(0) if cls.script else cls.default
        data = json.dumps(reply).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json",
                            "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    _Model.script, _Model.default, _Model.seen = [], answer("done"), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Model
    server.shutdown()


def mini_toml(url: str, *variants: dict[str, Any]) -> str:
    blocks = []
    for extra in variants or ({},):
        fields = {"name": "mini-test", "harness": "mini", "model": "stand-in", "base_url": url,
                  "api_key_env": "PROCTOR_TEST_MODEL_KEY", **extra}
        blocks.append("[[variants]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    return f'[defaults]\nimage = "{BASE_IMAGE}"\ntimeout = "2m"\n\n' + "\n".join(blocks)


def one(summary, records):
    [run] = summary.runs
    [trial] = run.trials
    return records[trial.id]


def test_bash_calls_run_in_the_sandbox_and_their_output_goes_back(suite, run_eval, model_server,
                                                                   monkeypatch):
    url, model = model_server
    monkeypatch.setenv("PROCTOR_TEST_MODEL_KEY", KEY)
    model.script = [bash(WRITE_CALC, "cat calc.py", use=usage(100, 20, cached=50)),
                    answer("done: calc.py has add", use=usage(120, 10, cached=80, reasoning=4))]
    path = suite(HEADER + """
@evaluation(workspace=git(init=True), rules="Keep functions small.")
def writes_calc(c):
    turn = c.send("Create calc.py with add(a, b)")
    assert turn.final_message == "done: calc.py has add", turn.final_message
    assert turn.files_changed == ["calc.py"], turn.files_changed
    c.exec("python3 -c 'from calc import add; assert add(2,3)==5'").to_succeed()
""", toml=mini_toml(url))
    record = one(*run_eval(path)[::2])
    assert record.outcome == "pass", record.failure or record.validations

    assert [i.kind for i in record.trajectory] == ["command", "command", "message"]
    write, cat, message = record.trajectory
    assert (write.command, write.exit_code, write.output) == (WRITE_CALC, 0, "")
    assert cat.exit_code == 0 and "def add(a, b):\n    return a + b" in cat.output
    assert message.role == "assistant" and message.text == "done: calc.py has add" and message.at
    assert record.command_count == 2
    [turn] = record.turns
    assert turn.status == "completed" and turn.finished_reason == "done"
    assert turn.files_changed == ["calc.py"] and "+++ b/calc.py" in turn.diff
    assert (record.usage.input, record.usage.output, record.usage.cache_read) == (220, 30, 130)
    assert record.usage.reasoning == 4

    first, second = model.seen
    assert all(s["path"] == "/v1/chat/completions" and s["auth"] == f"Bearer {KEY}" for s in model.seen)
    assert first["body"]["model"] == "stand-in"
    assert [t["function"]["name"] for t in first["body"]["tools"]] == ["bash"]
    system, user = first["body"]["messages"]
    assert system["role"] == "system" and "/workspace" in system["content"]
    assert "Keep functions small." in system["content"]  # the rules, from AGENTS.md
    assert user == {"role": "user", "content": "Create calc.py with add(a, b)"}
    assert [m["role"] for m in second["body"]["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    calls = second["body"]["messages"][2]["tool_calls"]
    written, shown = second["body"]["messages"][3:]
    assert written["tool_call_id"] == calls[0]["id"] and "[exit code 0]" in written["content"]
    assert shown["tool_call_id"] == calls[1]["id"] and "return a + b" in shown["content"]
    assert KEY not in json.dumps(record.to_json())


def test_429_and_5xx_are_retried_within_the_turn(suite, run_eval, model_server, monkeypatch):
    url, model = model_server
    monkeypatch.setenv("PROCTOR_TEST_MODEL_KEY", KEY)
    model.script = [error(429, {"Retry-After": "0"}), error(500), answer("all good")]
    path = suite(HEADER + """
@evaluation()
def patient(c):
    assert c.send("hello").final_message == "all good"
""", toml=mini_toml(url))
    record = one(*run_eval(path)[::2])
    assert record.outcome == "pass", record.failure or record.validations
    assert len(model.seen) == 3
    [turn] = record.turns
    assert turn.status == "completed" and turn.finished_reason == "done"
    assert turn.ms >= 1400  # the 0.5 s and 1 s pauses are agent time


def test_max_steps_ends_a_turn_and_the_conversation_carries_on(suite, run_eval, model_server,
                                                                monkeypatch):
    url, model = model_server
    monkeypatch.setenv("PROCTOR_TEST_MODEL_KEY", KEY)
    model.default = bash("echo step")
    path = suite(HEADER + """
@evaluation()
def loops(c):
    assert c.send("loop").status == "completed"
    c.send("again")
""", toml=mini_toml(url, {"max_steps": 2}))
    record = one(*run_eval(path)[::2])
    assert record.outcome == "pass", record.failure or record.validations
    assert [(t.status, t.finished_reason) for t in record.turns] == [("completed", "max_steps")] * 2
    assert record.command_count == 4 and len(model.seen) == 4
    assert all(i.output == "step\n" and i.exit_code == 0 for i in record.trajectory)
    # The second turn continues the first turn's conversation.
    history = model.seen[2]["body"]["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert history[-1]["content"] == "again"


def test_a_missing_or_refused_key_voids_the_trial(suite, run_eval, model_server, monkeypatch):
    url, model = model_server
    monkeypatch.setenv("PROCTOR_TEST_MODEL_KEY", KEY)
    monkeypatch.delenv("PROCTOR_TEST_UNSET_MODEL_KEY", raising=False)
    model.default = error(401)
    path = suite(HEADER + """
@evaluation()
def needs_model(c):
    c.send("x")
    c.exec("true").to_succeed()
""", toml=mini_toml(url, {"name": "no-key", "api_key_env": "PROCTOR_TEST_UNSET_MODEL_KEY"},
                    {"name": "refused"}))
    summary, _, records = run_eval(path)
    by_variant = {r.variant: records[r.trials[0].id] for r in summary.runs}
    missing, refused = by_variant["no-key"], by_variant["refused"]
    assert missing.outcome == "infra_error" and missing.failure.where == "harness"
    assert "PROCTOR_TEST_UNSET_MODEL_KEY" in missing.failure.reason
    assert not missing.turns and missing.void_fields == ["turns", "trajectory", "validations"]
    assert refused.outcome == "infra_error"
    assert "failed: model API answered 401" in refused.failure.reason
    assert [t.status for t in refused.turns] == ["failed"]
    assert len(model.seen) == 1  # a 401 is not asked again; the key-less trial never asked


def test_retries_stop_when_the_turn_budget_runs_out():
    """No Docker: the retry loop alone, against an endpoint that always answers 503."""
    from engine.config import Variant
    from engine.harness.mini import MiniHarness, _ApiFailed

    class Alive:
        destroyed = False

    variant = Variant(name="m", harness="mini", model="stand-in", base_url="http://model.test/v1")
    harness = MiniHarness(variant.options)
    transport = httpx.MockTransport(lambda request: httpx.Response(503, text="overloaded"))
    started = time.monotonic()
    with httpx.Client(transport=transport) as client, pytest.raises(_ApiFailed) as failed:
        harness._complete(client, Alive(), deadline=started + 2)  # type: ignore[arg-type]
    # Pauses 0.5 s and 1 s fit in 2 s; the next (2 s) would not, so it stops after 3 attempts.
    assert "answered 503: overloaded (after 3 attempts)" in str(failed.value)
    assert 1.4 < time.monotonic() - started < 2
