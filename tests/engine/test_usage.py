from engine.models import Usage
from engine.usage import usage_warnings


def test_no_warning_for_small_or_well_cached_use():
    assert usage_warnings([]) == []
    assert usage_warnings([Usage(input=1_200, output=100)]) == []
    assert usage_warnings([Usage(input=30_000, cache_read=25_000), Usage(input=32_000, cache_read=29_000)]) == []


def test_nothing_from_cache_at_all():
    [warning] = usage_warnings([Usage(input=15_000), Usage(input=16_000)])
    assert warning == "nothing came from cache: 31,000 input tokens, none cached"


def test_every_turn_rereads_a_large_context():
    turns = [Usage(input=40_000, cache_read=500), Usage(input=41_000, cache_read=600),
             Usage(input=42_000, cache_read=700)]
    [warning] = usage_warnings(turns)
    assert warning.startswith("every turn re-read a large context without cache hits (3 turns")


def test_one_large_turn_is_not_a_pattern():
    assert usage_warnings([Usage(input=40_000, cache_read=100)]) == []
