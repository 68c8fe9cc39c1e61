"""What the CLI harnesses' Docker tests share: the two scripted turns of tests/standin checked
in the record, the session resumed, the real key kept out of the store, the real streams kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

STREAMS = Path(__file__).resolve().parent / "data" / "streams"
TURNS = [("echo standin-turn-1", "hello.txt", "I created hello.txt."),
         ("cat /workspace/hello.txt", "second.txt", "I created second.txt.")]


def record_streams(monkeypatch, harness_class) -> dict[int, list[str]]:
    """Each turn's real stdout lines, as the harness's parser is fed them."""
    streams: dict[int, list[str]] = {}
    parser = harness_class.parser

    def recording(self, turn, on_item):
        inner = parser(self, turn, on_item)
        feed = inner.feed
        inner.feed = lambda line, at_ms=None: (streams.setdefault(turn, []).append(line),
                                               feed(line, at_ms))[1]
        return inner

    monkeypatch.setattr(harness_class, "parser", recording)
    return streams


def save_streams(streams: dict[int, list[str]], prefix: str) -> None:
    """Refresh the recorded samples the parser tests read (PROCTOR_SAVE_STREAMS=1)."""
    for turn, lines in streams.items():
        (STREAMS / f"{prefix}_real_turn{turn}.jsonl").write_text("\n".join(lines) + "\n")


def check_two_turns(record, model: str, *, exact: bool = True) -> None:
    """Each turn: the command, the new file, the final message; usage and model recorded.
    `exact`: the CLI also says the file was added and the command's exit code."""
    for turn, (command, name, said) in zip(record.turns, TURNS):
        items = [i for i in record.trajectory if i.turn == turn.index]
        commands = [i for i in items if i.kind == "command"]
        assert [c.command for c in commands] == [command]
        if exact:
            assert commands[0].exit_code == 0
        assert any(i.kind == "fileChange" and i.path == f"/workspace/{name}"
                   and (i.change == "add" or not exact) for i in items), items
        assert turn.final_message == said
        assert turn.status == "completed" and turn.finished_reason == "done"
        assert turn.model == model
        assert turn.usage is not None and turn.usage.output > 0 and turn.usage.cache_read > 0
        assert name in turn.files_changed and f"+++ b/{name}" in turn.diff
    assert "standin-turn-1" in [c for c in record.trajectory if c.kind == "command"][0].output


def check_resumed(api) -> list:
    """Turn 2's requests carried turn 1's conversation; the requests the stand-in saw."""
    calls = api.calls()
    later = [c for c in calls if "Now create second.txt." in c.text]
    assert later and all("Run the command, then create hello.txt." in c.text
                         and "I created hello.txt." in c.text for c in later)
    return calls


def check_key_not_stored(store, real_key: str) -> None:
    """Neither the key nor a piece of it in the store's files or its records."""
    store.flush()
    raw = b"".join(p.read_bytes() for p in store.path.parent.glob(store.path.name + "*"))
    with sqlite3.connect(store.path) as db:
        raw += "".join(str(r) for r in db.execute("select record from trial")).encode()
    assert real_key.encode() not in raw and real_key[8:24].encode() not in raw
