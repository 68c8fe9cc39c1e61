"""The judge reads the redacted conversation: no secret of the trial reaches the judge model."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from engine.config import JudgeConfig
from engine.judge import ask_judge, build_prompt
from engine.redact import MARK, Redactor
from tests.conftest import JsonHandler

SECRET = "trial-secret-" + "Zq8Rw2Lx5Vn7Kp3T"


class _Judge(JsonHandler):
    """An OpenAI-compatible chat completions endpoint that records every request it receives."""

    received: list[tuple[bytes, bytes]] = []  # (request line and headers, body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((f"{self.requestline}\n{self.headers}".encode(), raw))
        content = json.dumps({"score": 0.9, "reasoning": "fine"})
        body = json.dumps({"id": "cmpl-1", "model": "judge-mini",
                           "choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.reply(body)


@pytest.fixture
def judge_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    _Judge.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def trial_state() -> dict:
    """What `c.judge` passes for a trial whose agent wrote the secret everywhere it could."""
    encoded = base64.b64encode(f"token={SECRET}".encode()).decode()
    return {
        "task": "Write the key to config.txt",
        "final_message": f"Done: the key is {SECRET} and also sk-proj-{'Ab3dE6gH9jK2mN5p' * 2}.",
        "files_changed": [f"keys/{SECRET}.txt", "config.txt"],
        "diff": (f"diff --git a/keys/{SECRET}.txt b/keys/{SECRET}.txt\n+++ b/keys/{SECRET}.txt\n"
                 f"+{SECRET}\n+password = hunter2-but-longer\n+blob: {encoded}\n"),
        "notes": f"extra state {SECRET[::-1]}",
    }


def test_the_judge_never_receives_a_secret(judge_url):
    config = JudgeConfig(base_url=judge_url, model="judge-mini")
    state = trial_state()
    assert SECRET in build_prompt("The key is stored", state)
    validation = ask_judge(config, "The key is stored", 0.5, state, redactor=Redactor(secrets=[SECRET]))
    assert validation.status == "passed"
    ((head, body),) = _Judge.received
    received = head + body
    for leaked in (SECRET, SECRET[::-1], "Ab3dE6gH9jK2mN5p", "hunter2-but-longer",
                   base64.b64encode(SECRET.encode())[2:14].decode()):
        assert leaked.encode() not in received
    assert received.count(MARK.encode()) >= 8
    prompt = json.loads(body)["messages"][1]["content"]
    assert "Write the key to config.txt" in prompt and "config.txt" in prompt
    assert validation.evidence["prompt"] == prompt


def test_without_the_trial_redactor_the_patterns_still_apply(judge_url):
    config = JudgeConfig(base_url=judge_url, model="judge-mini")
    ask_judge(config, "ok", 0.5, trial_state())
    ((_, body),) = _Judge.received
    assert b"Ab3dE6gH9jK2mN5p" not in body and b"hunter2-but-longer" not in body


def test_a_message_cut_while_reading_hands_the_judge_no_half_of_a_key(judge_url):
    from engine import limits

    # The agent's final message was cut while reading, exactly inside a key: its first half
    # ("sk-CUTabcd", too short to look like a key alone) must not reach the judge.
    message, _ = limits.read_cut("Done. " + "x" * 100 + " sk-CUTabcdefghijklmnop", 100 + 6 + 11)
    assert message.split("[truncated")[0].rstrip("… \n").endswith("sk-CUTabcd")
    config = JudgeConfig(base_url=judge_url, model="judge-mini")
    ask_judge(config, "ok", 0.5, {"task": "t", "final_message": message}, redactor=Redactor())
    ((_, body),) = _Judge.received
    assert b"sk-CUTabcd" not in body
