"""Labels as a browser filter (issue 17): a label picks exactly the trials whose note carries
it, combines with the other filters, is offered as a choice, and shows on a trial's row."""

from __future__ import annotations

from engine.models import Note
from engine.store.browse import (
    BrowseFilter, batches_page, count_batches, filter_options, runs_of, trial_item, trials_of,
)
from tests.engine.test_browse import store  # noqa: F401 — b_old, b_mix, b_live

AT = "2026-12-01T06:00:00.000Z"


def labelled(store, **labels: str) -> None:  # noqa: F811
    for target, label in labels.items():
        store.set_note(Note(target=target, label=label, text="seen", updated_at=AT)).result()


def picked(store, flt: BrowseFilter) -> set[str]:  # noqa: F811
    """Every trial the filter shows, walked as the browser walks it: batches, runs, trials."""
    found = set()
    for batch in batches_page(store, flt):
        for run in runs_of(store, batch.id, flt):
            found |= {t.id for t in trials_of(store, run.id, flt)}
    return found


def test_a_label_shows_exactly_the_trials_that_carry_it(store):  # noqa: F811
    labelled(store, t_greet_3="env problem", t_void_1="env problem", t_old_1="agent gave up",
             **{"group:abc": "env problem"})  # a group's note labels no trial
    only = BrowseFilter(labels=frozenset({"env problem"}))
    assert only.active
    assert picked(store, only) == {"t_greet_3", "t_void_1"}
    assert count_batches(store, only) == 1
    either = BrowseFilter(labels=frozenset({"env problem", "agent gave up"}))
    assert picked(store, either) == {"t_greet_3", "t_void_1", "t_old_1"}
    assert picked(store, BrowseFilter(labels=frozenset({"no such label"}))) == set()


def test_a_label_combines_with_the_other_filters(store):  # noqa: F811
    labelled(store, t_greet_3="env problem", t_void_1="env problem", t_greet_1="env problem")
    env = frozenset({"env problem"})
    assert picked(store, BrowseFilter(labels=env, outcomes=frozenset({"fail"}))) == {"t_greet_3"}
    lockfile = frozenset({"needs_a_lockfile"})
    assert picked(store, BrowseFilter(labels=env, cases=lockfile)) == {"t_void_1"}
    assert picked(store, BrowseFilter(labels=env, text="setup step")) == {"t_void_1"}
    assert picked(store, BrowseFilter(labels=env, tags=frozenset({"math"}))) == set()


def test_labels_are_offered_and_shown_on_a_trial_row(store):  # noqa: F811
    labelled(store, t_greet_3="env problem", t_old_1="agent gave up", **{"group:abc": "flaky"})
    assert filter_options(store).labels == ["agent gave up", "env problem"]  # trials' labels only
    assert trial_item(store, "t_greet_3").label == "env problem"
    assert trial_item(store, "t_greet_1").label is None
    assert [t.label for t in trials_of(store, "r_greet")] == [None, None, "env problem"]
    store.set_note(Note(target="t_greet_3", text="", updated_at=AT)).result()  # taken away
    assert trial_item(store, "t_greet_3").label is None
    assert picked(store, BrowseFilter(labels=frozenset({"env problem"}))) == set()
