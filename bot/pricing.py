"""Per-model prices and the cost of a response's usage (no anthropic import: the loop uses it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.types import Usage


@dataclass(frozen=True, kw_only=True)
class Price:
    """USD per million tokens. Cache prices default to the API's multipliers of the input price
    (5-minute write 1.25×, read 0.1×); a model with other cache prices names them.

    `above` is a second tier for prompts longer than `above_tokens` (Haiku 5.5 costs more past 100K):
    the whole request is priced at the tier its prompt size falls in.
    """

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None
    above_tokens: int | None = None
    above: Price | None = None

    def cost(self, usage: Usage) -> float:
        if self.above is not None and self.above_tokens is not None and usage.prompt_tokens > self.above_tokens:
            return self.above.cost(usage)
        write = self.input * 1.25 if self.cache_write is None else self.cache_write
        read = self.input * 0.1 if self.cache_read is None else self.cache_read
        return (
            usage.input_tokens * self.input
            + usage.cache_write_tokens * write
            + usage.cache_read_tokens * read
            + usage.output_tokens * self.output
        ) / 1_000_000


# Longest matching prefix wins, so "claude-opus-4-5…" is not priced as "claude-opus-4".
# Current models (late 2026) first; older ones stay so stored runs and fallbacks are priced right.
PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(input=8.0, output=40.0, cache_write=10.0, cache_read=0.20),
    "claude-opus-5-5": Price(input=4.0, output=20.0, cache_write=5.0, cache_read=0.20),
    "claude-sonnet-5-5": Price(input=2.0, output=10.0, cache_write=2.50, cache_read=0.10),
    "claude-haiku-5-5": Price(
        input=0.10, output=0.50, cache_write=0.125, cache_read=0.01, above_tokens=100_000,
        above=Price(input=0.50, output=2.50, cache_write=0.625, cache_read=0.05),
    ),
    "claude-fable-5-1": Price(input=10.0, output=50.0, cache_write=12.50, cache_read=0.25),
    "claude-fable-5": Price(input=10.0, output=50.0, cache_write=12.50, cache_read=1.0),
    "claude-opus-5": Price(input=5.0, output=25.0, cache_write=6.25, cache_read=0.50),
    "claude-sonnet-5": Price(input=2.0, output=10.0, cache_write=2.50, cache_read=0.20),
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


# What replaces a retired or deprecated model (for `opsloop check`); the SDK's own table says *when*.
REPLACEMENTS: dict[str, str] = {
    "claude-sonnet-4-5": "claude-sonnet-5-5",
    "claude-sonnet-4": "claude-sonnet-5-5",
    "claude-3-7-sonnet": "claude-sonnet-5-5",
    "claude-opus-4-5": "claude-opus-5-5",
    "claude-opus-4-1": "claude-opus-5-5",
    "claude-opus-4": "claude-opus-5-5",
    "claude-mythos-preview": "claude-fable-5-2",
    "claude-haiku-4-5": "claude-haiku-5-5",
    "claude-3-5-haiku": "claude-haiku-5-5",
}


def replacement_for(model: str) -> str | None:
    for prefix in sorted(REPLACEMENTS, key=len, reverse=True):
        if model.startswith(prefix):
            return REPLACEMENTS[prefix]
    return None


# Models that think adaptively and bind their thinking to the conversation (preserved thinking):
# they take `thinking: {type: adaptive}` and `output_config.effort`, and reject budgets and sampling.
ADAPTIVE_PREFIXES = ("claude-fable-5", "claude-mythos-5", "claude-opus-5", "claude-sonnet-5", "claude-haiku-5")


def thinks_adaptively(model: str) -> bool:
    return model.startswith(ADAPTIVE_PREFIXES)
