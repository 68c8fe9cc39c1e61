"""What a turn and a trial cost in US dollars: their tokens at the price of the model that
served them (SPEC.md additions: `turns[].cost_usd`, the record's `cost_usd`).

Prices come from genai-prices' bundled table (maintained upstream, never fetched at run
time); a `[prices."MODEL"]` table in proctor.toml (`Price`, USD per million tokens) overrides
it for a private model. A cost is None, never 0, when tokens were spent under a model with
no known price, or under no model at all; no token spent costs nothing.

A record keeps the cost it was saved with (`price_record`, with the trial's own `[prices]`);
`recorded_cost` reads that, and prices older records at read time from each turn's `model`,
or the model the harness phase names ("mini harness · gpt-4o-mini at api.openai.com").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Annotated, Any, NamedTuple

from pydantic import (AfterValidator, BaseModel, ConfigDict, ModelWrapValidatorHandler, ValidationError,
                      model_validator)

from .models import TrialRecord, TurnRecord, Usage

PER_MILLION = 1_000_000


def _finite(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a number of US dollars per million tokens, at least 0, not {value}")
    return value


Rate = Annotated[float, AfterValidator(_finite)]


class Price(BaseModel):
    """One model's `[prices."MODEL"]` in proctor.toml, US dollars per million tokens; cache
    reads and writes cost what input does unless given."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    input: Rate
    output: Rate
    cache_read: Rate | None = None
    cache_write: Rate | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_first(cls, data: Any, handler: ModelWrapValidatorHandler[Price]) -> Price:
        try:
            return handler(data)
        except ValidationError as e:
            # A misspelt `outptu` is better said than the `output` it then lacks.
            errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")
            raise ValidationError.from_exception_data(cls.__name__, errors) from None  # type: ignore[arg-type]


Prices = Mapping[str, Price]


class Rates(NamedTuple):
    """US dollars per token."""

    input: float
    cache_read: float
    cache_write: float
    output: float


def harness_model(detail: str) -> tuple[str, str] | None:
    """The model and API host a harness phase names ("mini harness · gpt-4o-mini at
    api.openai.com", as trial.py writes it); None where it names none (the command harness
    names the command it runs)."""
    harness, sep, said = detail.partition(" harness · ")
    if not sep or harness == "command":
        return None
    model, sep, host = said.rpartition(" at ")
    if not sep or not model or " " in model:
        return None
    return model, host


def rates(model: str, host: str | None = None, at: str | None = None,
          prices: Prices | None = None) -> Rates | None:
    """`model`'s price per token: proctor.toml's `[prices]` first, else genai-prices' list
    price as of `at` (ISO) at the provider `host` serves where it knows it; None when unknown."""
    if prices and (own := prices.get(model)) is not None:
        fresh = own.input / PER_MILLION
        return Rates(fresh, (own.cache_read if own.cache_read is not None else own.input) / PER_MILLION,
                     (own.cache_write if own.cache_write is not None else own.input) / PER_MILLION,
                     own.output / PER_MILLION)
    return _list_rates(model, host or "", (at or "")[:10])


def usage_cost(usage: Usage | None, model: str | None, host: str | None = None,
               at: str | None = None, prices: Prices | None = None) -> float | None:
    """Tokens at `model`'s price in US dollars; None when tokens were spent and the model is
    none or unpriced. No token spent costs nothing, model or not."""
    if usage is None or not (usage.input or usage.output or usage.cache_read or usage.cache_write):
        return 0.0
    if not model:
        return None
    found = rates(model, host, at, prices)
    uncached = usage.input - usage.cache_read - usage.cache_write
    if found is None or uncached < 0:  # a cache count past the input is no usage to price
        return None
    return (uncached * found.input + usage.cache_read * found.cache_read
            + usage.cache_write * found.cache_write + usage.output * found.output)


def record_harness(record: TrialRecord) -> tuple[str, str] | None:
    """The model and host the record's harness phase names, for records older than Turn.model."""
    for span in record.phases:
        if span.phase == "harness" and (found := harness_model(span.detail)):
            return found
    return None


def turn_cost(turn: TurnRecord, prices: Prices | None = None, at: str | None = None,
              fallback: tuple[str, str] | None = None) -> float | None:
    """One turn's tokens at the price of the model that served it (`turn.model`, else
    `fallback`: the model and host the harness phase names)."""
    model, host = fallback or (None, None)
    if turn.model:
        model, host = turn.model, (host if turn.model == model else None)
    return usage_cost(turn.usage, model, host, at, prices)


def trial_cost(record: TrialRecord, prices: Prices | None = None) -> float | None:
    """The trial's tokens priced turn by turn, each at its own model's price; None when any
    tokens are unpriced. A record whose turns report no usage (an import) is priced as one."""
    fallback, at = record_harness(record), record.started_at
    turns = [t for t in record.turns if t.usage is not None]
    if not turns:
        model, host = fallback or (None, None)
        if (last := _last_model(record)) and last != model:
            model, host = last, None
        return usage_cost(record.usage, model, host, at, prices)
    total = 0.0
    for turn in turns:
        cost = turn_cost(turn, prices, at, fallback)
        if cost is None:
            return None
        total += cost
    return total


def _last_model(record: TrialRecord) -> str | None:
    return next((t.model for t in reversed(record.turns) if t.model), None)


def price_record(record: TrialRecord, prices: Prices | None = None) -> None:
    """Set each turn's and the record's `cost_usd`, as the record is saved."""
    fallback = record_harness(record)
    for turn in record.turns:
        turn.cost_usd = turn_cost(turn, prices, record.started_at, fallback)
    record.cost_usd = trial_cost(record, prices)


def recorded_cost(record: TrialRecord, prices: Prices | None = None) -> float | None:
    """The cost the record was saved with; for one saved without (older, or unknown then),
    its tokens priced now."""
    return record.cost_usd if record.cost_usd is not None else trial_cost(record, prices)


@functools.lru_cache(maxsize=256)
def _list_rates(model: str, host: str, day: str) -> Rates | None:
    """Dollars per input, cache-read, cache-write and output token, asked of genai-prices once
    per model and day: a thousand calls of its own would take 0.1 s. Priced per thousand
    tokens, the first tier: a trial's usage sums many requests, no one of which crossed a tier."""
    from datetime import datetime  # noqa: PLC0415 — with genai_prices, imported on first use

    from genai_prices import Usage as Tokens, calc_price  # noqa: PLC0415 — 0.1 s to import

    try:
        when = datetime.fromisoformat(day) if day else None
    except ValueError:
        when = None
    units = [dict(input_tokens=1000), dict(input_tokens=1000, cache_read_tokens=1000),
             dict(input_tokens=1000, cache_write_tokens=1000), dict(output_tokens=1000)]
    providers = [{"provider_api_url": f"https://{host}"}] if host else []
    for provider in [*providers, {}]:
        try:
            fresh, read, write, out = (
                float(calc_price(Tokens(**unit), model, genai_request_timestamp=when,
                                 **provider).total_price) / 1000 for unit in units)
        except (LookupError, ValueError):  # an unknown provider or model; a unit it cannot price
            continue
        return Rates(fresh, read, write, out)
    return None


def models_of(record: TrialRecord) -> list[str]:
    """The models that served the trial's turns, in order, each once (else the harness's)."""
    named = list(dict.fromkeys(t.model for t in record.turns if t.model))
    if not named and (found := record_harness(record)):
        named = [found[0]]
    return named


def fmt_usd(dollars: float | None) -> str:
    """$12.34, $0.42, $0.0042: two significant digits below a cent; "—" when unknown."""
    if dollars is None:
        return "—"
    if dollars == 0:
        return "$0.00"
    if dollars >= 0.01:
        return f"${dollars:,.2f}"
    return f"${dollars:.2g}" if dollars >= 1e-4 else "<$0.0001"
