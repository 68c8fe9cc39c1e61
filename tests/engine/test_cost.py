"""Cost (engine.cost): tokens at the price of the model that served each turn, from
genai-prices or proctor.toml's `[prices]`; None, never 0, when any tokens are unpriced; old
records priced by the model their harness phase names; the mini harness records the model
the API says served each turn, and the saved record carries its cost."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from genai_prices import Usage as Tokens, calc_price

from engine.compare import deltas
from engine.config import load_config
from engine.cost import Price, price_record, recorded_cost, trial_cost, turn_cost, usage_cost
from engine.models import PhaseSpan, TrialRecord, TurnRecord, Usage
from engine.spec import EvalFileError
from engine.store import Store
from engine.store.browse import trial_costs
from tests.engine.test_mini_docker import (  # noqa: F401, F811 — model_server is a fixture
    HEADER, KEY, answer, bash, mini_toml, model_server, one, usage,
)
from tests.make_store import put_trial

AT = "2026-11-29T17:00:00.000Z"
WHEN = datetime(2026, 11, 29, tzinfo=timezone.utc)
PRIVATE = {"acme-coder-1": Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)}


def theirs(model: str, u: Usage) -> float:
    """genai-prices' own price of one request of these tokens."""
    return float(calc_price(Tokens(input_tokens=u.input, output_tokens=u.output,
                                   cache_read_tokens=u.cache_read, cache_write_tokens=u.cache_write),
                            model, genai_request_timestamp=WHEN).total_price)


def turn(index: int, model: str | None, u: Usage | None) -> TurnRecord:
    return TurnRecord(index=index, prompt="p", status="completed", ms=1, model=model, usage=u)


def record(*turns: TurnRecord, harness: str | None = None, cost_usd: float | None = None,
           trial_id: str = "t_1") -> TrialRecord:
    total = Usage()
    for t in turns:
        total = total.add(t.usage or Usage())
    phases = [PhaseSpan(phase="harness", status="ok", start_ms=0, end_ms=1, detail=harness)] \
        if harness else []
    return TrialRecord(id=trial_id, batch_id="b_c", run_id="r_c", case_id="c", variant="v",
                       trial=int(trial_id[2:]), trigger="cli", outcome="pass", started_at=AT,
                       finished_at=AT, usage=total, turns=list(turns), phases=phases,
                       cost_usd=cost_usd)


def test_the_prices_table_prices_a_private_model():
    u = Usage(input=2_000_000, output=1_000_000, cache_read=500_000, cache_write=100_000)
    # 1.4 M fresh × $3 + 0.5 M × $0.30 + 0.1 M × $3.75 + 1 M × $15
    assert usage_cost(u, "acme-coder-1", prices=PRIVATE) == pytest.approx(4.2 + 0.15 + 0.375 + 15)
    assert usage_cost(u, "acme-coder-1") is None  # genai-prices has never heard of it
    # Cache reads and writes cost what input does when the table leaves them out.
    plain = {"acme-coder-1": Price(input=1.0, output=2.0)}
    assert usage_cost(u, "acme-coder-1", prices=plain) == pytest.approx(2.0 + 2.0)
    # The table wins over genai-prices for a model both know (a negotiated price).
    cheap = {"gpt-4o-mini": Price(input=0.0, output=0.0)}
    assert usage_cost(Usage(input=1000, output=10), "gpt-4o-mini", prices=cheap) == 0.0


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4.1", "claude-sonnet-4-5", "gemini-2.5-pro"])
def test_known_models_cost_what_genai_prices_says(model):
    for u in (Usage(input=12_345, output=678), Usage(input=40_000, output=1_000, cache_read=30_000),
              Usage(input=9_000, output=300, cache_write=4_000)):
        try:
            expected = theirs(model, u)
        except (LookupError, ValueError):
            assert usage_cost(u, model, at=AT) is None  # a unit it cannot price: unknown
            continue
        assert usage_cost(u, model, at=AT) == pytest.approx(expected, rel=1e-9)


def test_unknown_is_none_and_no_tokens_cost_nothing():
    assert usage_cost(Usage(input=10, output=1), "no-such-model-x") is None
    assert usage_cost(Usage(input=10, output=1), None) is None
    assert usage_cost(Usage(), "no-such-model-x") == 0.0 and usage_cost(None, None) == 0.0


def test_mixed_turns_each_at_their_own_model():
    a, b = Usage(input=10_000, output=500), Usage(input=1_000_000, output=100_000)
    rec = record(turn(1, "gpt-4o-mini", a), turn(2, "acme-coder-1", b))
    assert turn_cost(rec.turns[0], at=AT) == pytest.approx(theirs("gpt-4o-mini", a))
    assert trial_cost(rec, PRIVATE) == pytest.approx(theirs("gpt-4o-mini", a) + 3.0 + 1.5)
    # Without the table the second turn is unpriced, so the whole trial is: None, not the first.
    assert trial_cost(rec) is None
    price_record(rec)
    assert rec.turns[0].cost_usd == pytest.approx(theirs("gpt-4o-mini", a))
    assert rec.turns[1].cost_usd is None and rec.cost_usd is None
    price_record(rec, PRIVATE)
    assert rec.cost_usd == pytest.approx(rec.turns[0].cost_usd + 4.5)
    assert rec.to_json()["cost_usd"] == rec.cost_usd and rec.to_json()["turns"][1]["model"] == "acme-coder-1"


def test_an_old_record_is_priced_by_its_harness_phase():
    u = Usage(input=4_000, output=400)
    old = record(turn(1, None, u), harness="mini harness · gpt-4o-mini at api.openai.com")
    assert trial_cost(old) == pytest.approx(theirs("gpt-4o-mini", u))
    # No model anywhere (the command harness) with tokens spent: unknown.
    assert trial_cost(record(turn(1, None, u), harness="command harness · sh run.sh")) is None
    # An import whose turns report no usage: the record's usage at the turn's model.
    imported = record(turn(1, "gpt-4o-mini", None))
    imported.usage = u
    assert trial_cost(imported) == pytest.approx(theirs("gpt-4o-mini", u))
    # The cost saved with the record (its own [prices]) is what a reader shows.
    assert recorded_cost(record(turn(1, "acme-coder-1", u), cost_usd=0.5)) == 0.5


def test_batch_costs_read_the_saved_cost_and_price_old_records(tmp_path):
    u = Usage(input=1_000_000, output=0)
    with Store(tmp_path / "c.db") as s:
        s.create_batch("b_c", "cli", owner="", started_at=AT)
        s.create_run("r_c", "b_c", "c", "v", position=0)
        saved = record(turn(1, "acme-coder-1", u), trial_id="t_1")
        price_record(saved, PRIVATE)  # as trial.py saves it, with the run's [prices]
        put_trial(s, saved)
        put_trial(s, record(turn(1, None, u), trial_id="t_2",
                            harness="mini harness · gpt-4o-mini at api.openai.com"))
        unknown = record(turn(1, "acme-coder-1", u), trial_id="t_3")
        price_record(unknown)
        put_trial(s, unknown)
        s.flush()
        costs = {c.id: c for c in trial_costs(s, "b_c")}
    assert costs["t_1"].cost == pytest.approx(3.0) and costs["t_1"].model == "acme-coder-1"
    assert costs["t_2"].cost == pytest.approx(theirs("gpt-4o-mini", u))
    assert costs["t_3"].cost is None and costs["t_3"].model == "acme-coder-1"


@pytest.mark.parametrize("body, said", [
    ('[prices."acme"]\ninput = 3.0\noutput = "15"\n', ":3: prices.acme.output must be a number"),
    ('[prices."a"]\ninput = 1.0\noutput = 2.0\n\n[prices."acme"]\ninput = 3.0\noutptu = 15.0\n',
     ":7: prices.acme.outptu is not a known key"),
    ('[prices."a"]\ninput = 1.0\noutput = 2.0\n\n[prices.acme]\ninput = 3.0\n',
     ":5: prices.acme.output is missing"),
    ("[prices.acme]\ninput = -1.0\noutput = 2.0\n", ":2: prices.acme.input must be a number of US "
                                                     "dollars per million tokens, at least 0"),
    ("[prices.acme]\ninput = nan\noutput = 2.0\n", ":2: prices.acme.input must be"),
    ("[prices]\nacme = 3\n", ":2: prices.acme must be a table"),
])
def test_a_bad_prices_table_is_one_line_naming_file_and_key(tmp_path, body, said):
    path = tmp_path / "proctor.toml"
    path.write_text(body)
    with pytest.raises(EvalFileError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}{said}") and "\n" not in str(e.value)


def test_a_good_prices_table_loads(tmp_path):
    path = tmp_path / "proctor.toml"
    path.write_text('[prices."acme-coder-1"]\ninput = 3\noutput = 15.0\ncache_read = 0.3\n')
    assert load_config(Path(path)).prices == {
        "acme-coder-1": Price(input=3.0, output=15.0, cache_read=0.3)}


def test_mini_records_each_turns_model_and_the_trial_cost(suite, run_eval, model_server, monkeypatch):
    """Two turns served by two models (the API names them, not the variant): each turn keeps
    its model and cost, and the record their sum, the private one at proctor.toml's price."""
    url, server = model_server
    monkeypatch.setenv("PROCTOR_TEST_MODEL_KEY", KEY)
    server.script = [bash("echo hi", use=usage(1000, 100)),
                     answer("one", use=usage(2000, 50, cached=1000)),
                     answer("two", use=usage(1_000_000, 0))]
    server.script[2][1]["model"] = "acme-coder-1"
    for reply in server.script[:2]:
        reply[1]["model"] = "gpt-4o-mini-2024-07-18"
    toml = mini_toml(url) + '\n[prices."acme-coder-1"]\ninput = 3.0\noutput = 15.0\n'
    path = suite(HEADER + """
@evaluation(workspace=git(init=True))
def two_turns(c):
    c.send("first")
    c.send("second")
""", toml=toml)
    rec = one(*run_eval(path)[::2])
    assert rec.outcome == "pass", rec.failure
    first, second = rec.turns
    assert (first.model, second.model) == ("gpt-4o-mini-2024-07-18", "acme-coder-1")
    mini = theirs("gpt-4o-mini-2024-07-18", Usage(input=3000, output=150, cache_read=1000))
    assert first.cost_usd == pytest.approx(mini, rel=1e-6)
    assert second.cost_usd == pytest.approx(3.0)
    assert rec.cost_usd == pytest.approx(mini + 3.0, rel=1e-6)


def test_compare_deltas_carry_the_cost_b_minus_a():
    u = Usage(input=1_000_000, output=100_000)
    a = record(turn(1, "acme-coder-1", u), cost_usd=4.5)
    b = record(turn(1, "gpt-4o-mini", u), trial_id="t_2")
    assert deltas(a, b).cost_usd == pytest.approx(theirs("gpt-4o-mini", u) - 4.5)
    unknown = record(turn(1, "acme-coder-1", u), trial_id="t_3")  # saved with no price known
    assert deltas(a, unknown).cost_usd is None and deltas(unknown, a).cost_usd is None
    assert deltas(a, a).cost_usd == 0.0
