"""Usage warnings: token use that suggests a harness is wasting its context.

Two patterns, from the per-turn usage the harness reports:
- the trial got nothing from cache at all, with enough input for a cache to matter;
- every turn re-read a large context without cache hits.
"""

from __future__ import annotations

from .models import Usage

LARGE_INPUT = 20_000       # tokens: below this, caching hardly matters
LARGE_TURN_INPUT = 10_000  # tokens per turn that count as "a large context"
POOR_CACHE = 0.10          # a turn with less than this share from cache had no real hit


def usage_warnings(turns: list[Usage]) -> list[str]:
    total = Usage()
    for usage in turns:
        total = total.add(usage)
    warnings: list[str] = []
    if total.input >= LARGE_INPUT and total.cache_read == 0:
        warnings.append(f"nothing came from cache: {total.input:,} input tokens, none cached")
    large = [u for u in turns if u.input >= LARGE_TURN_INPUT]
    if len(turns) >= 2 and len(large) == len(turns) and total.cache_read > 0 and all(
            u.cache_read < POOR_CACHE * u.input for u in large):
        warnings.append(f"every turn re-read a large context without cache hits "
                        f"({len(turns)} turns, {min(u.input for u in large):,}+ input tokens each)")
    return warnings
