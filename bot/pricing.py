"""Per-model prices and the cost of a run's usage (no anthropic import: the loop uses it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.types import Usage


@dataclass(frozen=True, kw_only=True)
class Price:
    """USD per million tokens. Cache writes cost 1.25× input, reads 0.1× (5-minute TTL)."""

    input: float
    output: float
    cache_write_multiplier: float = 1.25
    cache_read_multiplier: float = 0.1

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.cache_write_tokens * self.input * self.cache_write_multiplier
            + usage.cache_read_tokens * self.input * self.cache_read_multiplier
            + usage.output_tokens * self.output
        ) / 1_000_000


# Longest matching prefix wins, so "claude-opus-4-5…" is not priced as "claude-opus-4".
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(input=5.0, output=25.0),
    "claude-opus-4-1": Price(input=15.0, output=75.0),
    "claude-opus-4": Price(input=15.0, output=75.0),
    "claude-sonnet-4-5": Price(input=3.0, output=15.0),
    "claude-sonnet-4": Price(input=3.0, output=15.0),
    "claude-3-7-sonnet": Price(input=3.0, output=15.0),
    "claude-haiku-4-5": Price(input=1.0, output=5.0),
    "claude-3-5-haiku": Price(input=0.8, output=4.0),
}


def price_for(model: str, overrides: Mapping[str, Price] | None = None) -> tuple[Price, bool]:
    """The price of `model` and whether it is known. An unknown model is priced like the
    most expensive known one — never as free."""
    table = {**PRICES, **(overrides or {})}
    for prefix in sorted(table, key=len, reverse=True):
        if model.startswith(prefix):
            return table[prefix], True
    return max(table.values(), key=lambda p: (p.output, p.input)), False


