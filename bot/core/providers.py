"""Where Claude is called: Anthropic's API, Amazon Bedrock or Google Vertex AI.

A model of the chain is named by its label: Claude's own name for Anthropic ("claude-sonnet-4-5"), the provider
and Claude's name otherwise ("bedrock:claude-sonnet-4-5"). The label is what runs store, what the cost line
shows and what `[model.prices]` and `[model.ids]` are keyed by; the provider's own model id is made here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PROVIDERS = ("anthropic", "bedrock", "vertex")

# Ids the providers publish for dated Claude names (their model catalogues). A name not listed is mapped by
# rule (provider_id); `[model.ids]` overrides either, e.g. with a Bedrock inference profile ("us.anthropic.…").
KNOWN_IDS: dict[str, dict[str, str]] = {
    "bedrock": {
        "claude-sonnet-4-5": "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-haiku-4-5": "anthropic.claude-haiku-4-5-20251001-v1:0",
        "claude-opus-4-5": "anthropic.claude-opus-4-5-20251101-v1:0",
    },
    "vertex": {
        "claude-sonnet-4-5": "claude-sonnet-4-5@20250929",
        "claude-haiku-4-5": "claude-haiku-4-5@20251001",
        "claude-opus-4-5": "claude-opus-4-5@20251101",
    },
}

# What each provider lacks of what opsloop uses, as `opsloop check` says it, and how a run does without.
LACKS: dict[str, tuple[str, ...]] = {
    "anthropic": (),
    "bedrock": (
        "no token-counting endpoint: opsloop never calls one (it estimates context locally), so nothing changes",
        "beta headers go in the request body (anthropic_beta): if Bedrock rejects the one opsloop may send "
        "(thinking-binding-controls, after a thinking block stopped matching) the run moves on to the next "
        "model of the chain",
    ),
    "vertex": (
        "beta headers are passed on as sent: if Vertex rejects the one opsloop may send "
        "(thinking-binding-controls, after a thinking block stopped matching) the run moves on to the next "
        "model of the chain",
    ),
}

_DATED = re.compile(r"^(?P<name>.+)-(?P<date>\d{8})$")


def split(label: str) -> tuple[str, str]:
    """(provider, Claude's name) of a label; a bare name is Anthropic's."""
    provider, sep, name = label.partition(":")
    return (provider, name) if sep and provider in PROVIDERS else ("anthropic", label)


def label(entry: str, default_provider: str) -> str:
    """A chain entry as written in [model] ("claude-x", "vertex:claude-x") as its label: a bare name is
    `default_provider`'s, and Anthropic's models are labelled by their bare name."""
    provider, sep, name = entry.partition(":")
    if not sep:
        provider, name = default_provider, entry
    return name if provider == "anthropic" else f"{provider}:{name}"


def claude_name(label_: str) -> str:
    """The Claude model a label names, whichever provider serves it."""
    return split(label_)[1]


def provider_id(label_: str, overrides: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """The id the provider is called with, and whether it comes from a table (the built-in one or
    `[model.ids]`) rather than the rule: Bedrock `anthropic.<name>` (a dated name `anthropic.<name>-v1:0`),
    Vertex `<name>` (a dated name `<name>@<date>`), Anthropic the name itself."""
    if overrides and label_ in overrides:
        return overrides[label_], True
    provider, name = split(label_)
    if provider == "anthropic":
        return name, True
    if (known := KNOWN_IDS[provider].get(name)) is not None:
        return known, True
    dated = _DATED.match(name)
    if provider == "bedrock":
        return f"anthropic.{name}-v1:0" if dated else f"anthropic.{name}", False
    return f"{dated['name']}@{dated['date']}" if dated else name, False
