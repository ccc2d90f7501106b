"""The models opsloop knows: their prices, the cost of a response's usage, and their lifecycle (current,
deprecated, retired; end of life, replacement). No anthropic import at module level: the loop uses it."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from bot.core.providers import claude_name
from bot.core.types import Usage


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
        input=0.10,
        output=0.50,
        cache_write=0.125,
        cache_read=0.01,
        above_tokens=100_000,
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
    """The price of `model` (a label: "claude-x" or "bedrock:claude-x") and whether it is known. An unknown
    model is priced like the most expensive known one — never as free.

    Bedrock and Vertex list Anthropic's per-token prices for most models; where a provider's price differs
    (a regional endpoint's premium), `[model.prices."bedrock:claude-x"]` says so, and wins over Anthropic's."""
    table = {**PRICES, **(overrides or {})}
    for name in dict.fromkeys((model, claude_name(model))):
        for prefix in sorted(table, key=len, reverse=True):
            if name.startswith(prefix):
                return table[prefix], True
    return max(table.values(), key=lambda p: (p.output, p.input)), False


# --- lifecycle: opsloop's own table (the SDK's private one may add dates, never break anything) -------
class Status(enum.Enum):
    """Where a model is in its life: current, deprecated (still answers, has an end of life), retired (404)."""

    CURRENT = "current"
    DEPRECATED = "deprecated"
    RETIRED = "retired"


@dataclass(frozen=True, kw_only=True)
class Lifecycle:
    """A model's status on a given day: `end_of_life` is the retirement date (past for a retired model)."""

    status: Status
    end_of_life: date | None = None
    replacement: str | None = None


# Models with an announced end (Anthropic's deprecations page, read 2026-11-30). A model not listed here
# is current unless the SDK's own table gives it a date. A date in the past makes a deprecated model
# retired without an edit: `opsloop run` refuses it at start-up, naming the replacement.
LIFECYCLE: dict[str, Lifecycle] = {
    name: Lifecycle(status=status, end_of_life=date(*end), replacement=replacement)
    for name, status, end, replacement in (
        ("claude-opus-4-5", Status.DEPRECATED, (2027, 1, 22), "claude-opus-5-5"),
        ("claude-sonnet-4-5", Status.DEPRECATED, (2026, 11, 30), "claude-sonnet-5-5"),
        ("claude-opus-4-1", Status.RETIRED, (2026, 8, 5), "claude-opus-5-5"),
        ("claude-opus-4", Status.RETIRED, (2026, 6, 15), "claude-opus-5-5"),
        ("claude-sonnet-4", Status.RETIRED, (2026, 6, 15), "claude-sonnet-5-5"),
        ("claude-mythos-preview", Status.RETIRED, (2026, 6, 30), "claude-fable-5-2"),
        ("claude-3-7-sonnet", Status.RETIRED, (2026, 2, 19), "claude-sonnet-5-5"),
        ("claude-3-5-haiku", Status.RETIRED, (2026, 2, 19), "claude-haiku-5-5"),
    )
}

# What a model without an entry of its own is replaced by, when the SDK says it is going (by family).
_FAMILY_REPLACEMENT = (
    ("claude-opus", "claude-opus-5-5"),
    ("claude-sonnet", "claude-sonnet-5-5"),
    ("claude-haiku", "claude-haiku-5-5"),
    ("claude-fable", "claude-fable-5-2"),
    ("claude-mythos", "claude-fable-5-2"),
)

_SNAPSHOT = re.compile(r"(?:-|@)(?:\d{8}|latest)$")  # claude-sonnet-4-5-20250929, …@20250929, …-latest


def base_model(model: str) -> str:
    """The Claude model a label names, without its snapshot date: the key of the lifecycle table."""
    return _SNAPSHOT.sub("", claude_name(model))


def lifecycle(model: str, *, today: date | None = None, sdk_table: Mapping[str, str] | None = None) -> Lifecycle:
    """`model`'s status on `today` (default: today, UTC), from opsloop's table, else the SDK's.

    Exact ids only (after the snapshot date): "claude-sonnet-4" being retired says nothing about
    "claude-sonnet-4-6". `sdk_table` defaults to the SDK's private deprecation table when it can be read.
    """
    today = today or datetime.now(UTC).date()
    known = LIFECYCLE.get(base_model(model))
    if known is None:
        end = _sdk_end_of_life(model, sdk_deprecations() if sdk_table is None else sdk_table)
        if end is None:
            return Lifecycle(status=Status.CURRENT)
        family = next((r for prefix, r in _FAMILY_REPLACEMENT if claude_name(model).startswith(prefix)), None)
        known = Lifecycle(status=Status.DEPRECATED, end_of_life=end, replacement=family)
    if known.status is Status.DEPRECATED and known.end_of_life is not None and known.end_of_life <= today:
        return dataclasses.replace(known, status=Status.RETIRED)
    return known


def sdk_deprecations() -> Mapping[str, str]:
    """The SDK's own table ({model: "January 22nd, 2027"}), or {} when it moved, vanished or changed shape:
    it is a private module, and nothing in opsloop depends on it being there."""
    try:
        from anthropic._data import DEPRECATED_MODELS  # private: read defensively
    except Exception:
        return {}
    if not isinstance(DEPRECATED_MODELS, Mapping):
        return {}
    return {str(k): str(v) for k, v in DEPRECATED_MODELS.items()}


def _sdk_end_of_life(model: str, table: Mapping[str, str]) -> date | None:
    text = table.get(claude_name(model), table.get(base_model(model)))
    if text is None:
        return None
    cleaned = re.sub(r"(\d+)(?:st|nd|rd|th)\b", r"\1", text.strip())
    for fmt in ("%B %d, %Y", "%Y-%m-%d", "%b %d, %Y"):
        try:
            return datetime.strptime(cleaned, fmt).date()
        except ValueError:
            continue
    return None


def model_problems(chain: Sequence[str], *, today: date | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the configured model chain: a retired model is an error (it would 404 in
    the middle of an incident), a deprecated one a warning; each names its end of life and replacement."""
    errors: list[str] = []
    warnings: list[str] = []
    for model in chain:
        life = lifecycle(model, today=today)
        instead = f"; replace it with {life.replacement} in [model]" if life.replacement else ""
        when = life.end_of_life.isoformat() if life.end_of_life else None
        if life.status is Status.RETIRED:
            errors.append(f"model {model} is retired" + (f" (since {when})" if when else "") + instead)
        elif life.status is Status.DEPRECATED:
            warnings.append(f"model {model} is deprecated" + (f" and retires on {when}" if when else "") + instead)
    return errors, warnings


# Models that think adaptively and bind their thinking to the conversation (preserved thinking):
# they take `thinking: {type: adaptive}` and `output_config.effort`, and reject budgets and sampling.
ADAPTIVE_PREFIXES = ("claude-fable-5", "claude-mythos-5", "claude-opus-5", "claude-sonnet-5", "claude-haiku-5")


def thinks_adaptively(model: str) -> bool:
    return claude_name(model).startswith(ADAPTIVE_PREFIXES)
