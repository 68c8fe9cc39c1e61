"""Failure groups (issue 17, item 2): failed and void trials grouped by a masked signature,
near-identical ones joined; `proctor groups`; the pass to compare a group's trial with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.groups import FailedTrial, failure_groups, group, mask, nearest_pass, note_target
from engine.models import Failure, Note, TrajectoryItem, TrialRecord
from engine.store import Store
from engine.store.browse import BrowseFilter, trials_of
from tests.engine.test_cli import cli

# One cause, ten times: only the volatile parts differ (paths, numbers, ids, hex, ports,
# durations, timestamps, a random quoted name).
ONE_CAUSE = [
    f"`python3 -m pytest -q` exited {code}: FileNotFoundError: [Errno 2] No such file or "
    f"directory: '/tmp/tmp{salt}/build-{n}/out.json' after {n * 37}ms at "
    f"2026-11-{10 + n:02d}T10:{n:02d}:07.{n}12Z (trial t_{n}a9c3e1f0b, sha {n}f3e9a81c7d2, "
    f"port {40000 + n * 7}, worker 'w{salt}{n}')"
    for n, (code, salt) in enumerate([(1, "ab12"), (2, "x9"), (1, "qq"), (4, "zz1"), (1, "k3"),
                                      (1, "m"), (2, "pp0"), (1, "r7"), (1, "cc"), (3, "d4")], 1)
]
OTHER_CAUSE = "`python3 -m pytest -q` exited 1: ModuleNotFoundError: No module named 'greet'"


def failed(i: int, reason: str, kind: str = "assertion", outcome: str = "fail",
           where: str | None = "check 1 of 2", variant: str = "scripted",
           case: str = "writes_greet") -> FailedTrial:
    return FailedTrial(f"t_{i:04d}", "b_1", case, variant, i, outcome, kind, reason, where)


def test_mask_replaces_the_volatile_parts():
    masked = mask(ONE_CAUSE[0])
    for volatile in ("/tmp/", "tmpab12", "37ms", "2026-11-11", "t_1a9c3e1f0b", "1f3e9a81c7d2",
                     "40007", "exited 1"):
        assert volatile not in masked, (volatile, masked)
    assert masked.startswith("`python<n> -m pytest -q` exited <n>: FileNotFoundError")


def test_ten_reasons_that_differ_only_in_volatile_parts_are_one_group():
    groups = group(failed(i, reason) for i, reason in enumerate(ONE_CAUSE))
    assert len(groups) == 1, [g.signature for g in groups]
    [g] = groups
    assert g.count == 10 and g.kind == "assertion" and g.where == "check 1 of 2"
    assert g.trial_ids == [f"t_{i:04d}" for i in range(10)]
    assert g.reason == ONE_CAUSE[0]  # an example, as recorded
    assert len(g.key) == 10 and g.target == f"group:{g.key}"


def test_two_causes_stay_two_groups_largest_first():
    trials = [failed(i, r) for i, r in enumerate(ONE_CAUSE)]
    trials += [failed(100 + i, OTHER_CAUSE, variant="mini") for i in range(3)]
    groups = group(trials)
    assert [g.count for g in groups] == [10, 3]
    assert groups[1].reason == OTHER_CAUSE and groups[1].variants == ["mini"]


def test_a_recurring_quoted_value_is_a_cause_not_noise():
    """Two missing modules, each five times: two causes (a value that recurs is not volatile)."""
    trials = [failed(i, f"No module named '{'greet' if i % 2 else 'numpy'}'") for i in range(10)]
    assert sorted(g.count for g in group(trials)) == [5, 5]


def test_near_identical_reasons_join_but_a_different_word_does_not():
    long = ("`pytest -q` exited 1: E AssertionError: greet('bob') returned the wrong greeting "
            "for the user named in the fixture, expected a comma after Hello and an")
    trials = [failed(i, long) for i in range(4)]
    trials.append(failed(4, long[:-9]))  # the same line quoted to a shorter length
    trials.append(failed(5, long.replace("greeting", "greetings")))  # spelt a little differently
    trials += [failed(10 + i, long.replace("fixture", "database")) for i in range(2)]
    assert sorted(g.count for g in group(trials)) == [2, 6]
    once = [failed(20, OTHER_CAUSE), failed(21, OTHER_CAUSE.replace("greet", "numpy"))]
    assert len(group(once)) == 2


def test_voids_and_fails_with_the_same_text_stay_apart():
    reason = "setup step 2 exited 1: pip install failed"
    trials = [failed(i, reason) for i in range(3)]
    trials += [failed(10 + i, reason, kind="infra", outcome="infra_error", where="setup step 2")
               for i in range(2)]
    trials += [failed(20 + i, reason, kind="timeout") for i in range(2)]
    groups = group(trials)
    assert sorted((g.kind, g.count) for g in groups) == [("assertion", 3), ("infra", 2),
                                                          ("timeout", 2)]


def test_different_first_checks_stay_apart():
    trials = [failed(i, "`cat greet.py` exited 1", where=f"check {1 + i % 2} of 2")
              for i in range(4)]
    assert sorted((g.where, g.count) for g in group(trials)) == [("check 1 of 2", 2),
                                                                 ("check 2 of 2", 2)]


def test_keys_are_stable_across_calls_and_order():
    trials = [failed(i, r) for i, r in enumerate(ONE_CAUSE)] + [failed(50, OTHER_CAUSE)]
    keys = [g.key for g in group(trials)]
    assert keys == [g.key for g in group(reversed(trials))]


# -- on a real store -----------------------------------------------------------------------

def save(store: Store, trial_id: str, run: str, case: str, variant: str, n: int, outcome: str,
         reason: str | None = None, kind: str = "assertion", commands: tuple[str, ...] = (),
         batch: str = "b_g") -> None:
    failure = Failure(kind=kind, reason=reason, where="check 1 of 1") if reason else None
    store.save_trial(TrialRecord(
        id=trial_id, batch_id=batch, run_id=run, case_id=case, variant=variant, trial=n,
        trigger="cli", outcome=outcome, failure=failure, command_count=len(commands),
        trajectory=[TrajectoryItem(kind="command", turn=1, command=c, exit_code=0, output="")
                    for c in commands]))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    """Batch b_g: case greet under two variants, ten failures of one cause (two voids of
    another), passes with different commands; batch b_other: one more pass of greet."""
    path = tmp_path_factory.mktemp("groups") / "proctor.db"
    with Store(path) as store:
        store.create_batch("b_g", "cli", "", "2026-11-30T10:00:00.000Z")
        store.create_batch("b_other", "cli", "", "2026-11-29T10:00:00.000Z")
        for run, variant in (("r_s", "scripted"), ("r_m", "mini")):
            store.create_run(run, "b_g", "greet", variant, 0)
        store.create_run("r_o", "b_other", "greet", "scripted", 0)
        for i, reason in enumerate(ONE_CAUSE):
            variant, run = ("scripted", "r_s") if i < 6 else ("mini", "r_m")
            save(store, f"t_f{i}", run, "greet", variant, i + 1, "fail", reason,
                 commands=("ls", "cat greet.py", "python3 -m pytest -q"))
        for i in range(2):
            save(store, f"t_v{i}", "r_s", "greet", "scripted", 20 + i, "infra_error",
                 "image build failed: apt-get exited 100", kind="infra")
        save(store, "t_pm", "r_m", "greet", "mini", 30, "pass", commands=("ls",))
        save(store, "t_ps1", "r_s", "greet", "scripted", 31, "pass", commands=("echo hi",))
        save(store, "t_ps2", "r_s", "greet", "scripted", 32, "pass",
             commands=("ls", "cat greet.py", "python3 -m pytest -q"))
        save(store, "t_po", "r_o", "greet", "scripted", 1, "pass",
             commands=("ls", "cat greet.py", "python3 -m pytest -q"), batch="b_other")
        store.flush()
    return path


def test_groups_of_a_batch_from_the_store(store_path):
    with Store(store_path) as store:
        groups = failure_groups(store, "b_g")
    assert [(g.kind, g.count) for g in groups] == [("assertion", 10), ("infra", 2)]
    assert groups[0].variants == ["mini", "scripted"] and groups[0].cases == ["greet"]
    assert set(groups[0].trial_ids) == {f"t_f{i}" for i in range(10)}
    assert groups[1].outcome == "infra_error"


def test_groups_of_a_filter(store_path):
    with Store(store_path) as store:
        groups = failure_groups(store, flt=BrowseFilter(variants=frozenset({"mini"})))
    assert [(g.kind, g.count) for g in groups] == [("assertion", 4)]


def test_a_trial_set_filter_shows_exactly_a_groups_trials(store_path):
    with Store(store_path) as store:
        [big, _voids] = failure_groups(store, "b_g")
        flt = BrowseFilter(trial_ids=frozenset(big.trial_ids))
        shown = [t.id for run in ("r_s", "r_m", "r_o") for t in trials_of(store, run, flt)]
    assert flt.active and sorted(shown) == sorted(big.trial_ids)


def test_the_pass_to_compare_is_of_the_same_case_and_variant_most_alike(store_path):
    with Store(store_path) as store:
        # Same batch and variant, the one whose commands are alike (not t_ps1's `echo hi`).
        assert nearest_pass(store, "t_f0") == "t_ps2"
        # A mini trial: the mini pass, though a scripted one has the same commands.
        assert nearest_pass(store, "t_f8") == "t_pm"
        assert nearest_pass(store, "t_missing") is None


def test_cli_groups_text_and_json(store_path, capsys):
    code, out, err = cli(capsys, "groups", "b_g", "--store", store_path)
    assert code == 0 and err == ""
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    assert blocks[0].startswith("10 × assertion") and "check 1 of 1" in blocks[0]
    assert "mini, scripted" in blocks[0] and "t_f0" in blocks[0]
    assert blocks[1].startswith("2 × infra") and "image build failed" in blocks[1]
    code, out, _ = cli(capsys, "groups", "b_g", "--json", "--store", store_path)
    groups = json.loads(out)
    assert code == 0 and [g["count"] for g in groups] == [10, 2]
    assert {"key", "kind", "reason", "variants", "cases", "trial_ids", "where"} <= set(groups[0])


def test_cli_groups_of_no_such_batch(store_path, capsys):
    code, out, err = cli(capsys, "groups", "b_nope", "--store", store_path)
    assert code == 2 and "no batch b_nope" in err and len(err.strip().splitlines()) == 1


def test_a_groups_note_is_found_after_another_signature_became_its_largest(tmp_path):
    """A note made on a group stays its note when, as the batch grows, a near-identical
    signature outnumbers the one that named the group."""
    long = ("`pytest -q` exited 1: E AssertionError: greet('bob') returned the wrong greeting "
            "for the user named in the fixture, expected a comma after Hello and an")
    first = [failed(i, long) for i in range(3)] + [failed(3, long[:-9])]
    [before] = group(first)
    with Store(tmp_path / "notes.db") as store:
        store.set_note(Note(target=before.target, label="env problem", text="", updated_at="2026-12-01T10:00:00Z")).result()
        grown = first + [failed(10 + i, long[:-9]) for i in range(5)]  # the cut reason now leads
        [after] = group(grown)
        assert after.key != before.key and before.key in after.keys
        assert note_target(store, after) == before.target
        assert note_target(store, before) == before.target
        [other] = group([failed(20, OTHER_CAUSE)])
        assert note_target(store, other) == other.target  # no note: its own key


def test_a_cut_reason_joins_the_whole_one_whichever_is_more_common():
    long = ("`pytest -q` exited 1: E AssertionError: greet('bob') returned the wrong greeting "
            "for the user named in the fixture, expected a comma after Hello and an")
    for whole, cut in ((4, 1), (1, 4), (3, 6)):
        trials = [failed(i, long) for i in range(whole)] + [failed(100 + i, long[:-9]) for i in range(cut)]
        assert [g.count for g in group(trials)] == [whole + cut], (whole, cut)
