"""Which Slack events are for opsloop, and what they say: event predicates and payload reading shared by the
listeners (a person's message or a bot's, a malformed event, an allowed channel, a string deep in a payload)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import structlog

log = structlog.get_logger("opsloop.slack")


# Message subtypes that are still a person talking in the thread: a reply with a file (a screenshot
# with "STOP"), or one also sent to the channel. Edits, deletions, joins and bot messages are not.
PERSON_SUBTYPES = frozenset({"file_share", "thread_broadcast"})


def is_from_a_bot(event: dict[str, Any], bot_user_id: str) -> bool:
    """Our own messages, other bots', and edits/deletions/joins (other subtypes) are not for us."""
    subtype, user = event.get("subtype"), event.get("user")
    person = subtype is None or (isinstance(subtype, str) and subtype in PERSON_SUBTYPES)
    return bool(event.get("bot_id")) or not person or not isinstance(user, str) or not user or user == bot_user_id


def message_text(event: dict[str, Any]) -> str:
    """What a person wrote, with the names of the files they attached: "STOP [attached: screenshot.png]"."""
    text = event.get("text")
    text = text if isinstance(text, str) else ""
    names = [str(f.get("name") or f.get("title") or "file") for f in event.get("files") or [] if isinstance(f, dict)]
    return f"{text} [attached: {', '.join(names)}]".strip() if names else text


def malformed(event: dict[str, Any], *fields: str) -> bool:
    """Log and skip an event missing what we need; never crash a listener on bad input."""
    missing = [f for f in fields if not isinstance(event.get(f), str) or not event.get(f)]
    if missing:
        log.warning("event.malformed", type=event.get("type"), missing=missing)
    return bool(missing)


_WARNED_CHANNELS: set[str] = set()  # channels whose ignored request was logged at warning (once each per process)


def allowed_channel(channels: Collection[str], channel: str, *, asked: bool = False) -> bool:
    """Whether opsloop works in `channel`: any channel when `[slack] channels` is empty, else the ones it lists.
    `asked`: someone asked the bot (a mention, the shortcut); ignoring that is a warning the first time per
    channel, so an operator sees a channel missing from `[slack] channels`. Other messages are ignored at info."""
    if not channels or channel in channels:
        return True
    if asked and channel not in _WARNED_CHANNELS:
        _WARNED_CHANNELS.add(channel)
        log.warning(
            "event.ignored_channel",
            channel=channel,
            why="not in [slack] channels: the bot ignores every request there (said once per channel)",
        )
    else:
        log.info("event.ignored_channel", channel=channel)
    return False


def dig(body: Any, *path: str | int) -> str | None:
    """A string at `path` in a Slack payload, or None when any step is missing or of another type:
    payloads come from outside, and no shape of one may crash a listener."""
    node = body
    for step in path:
        if isinstance(step, int):
            node = node[step] if isinstance(node, list) and -len(node) <= step < len(node) else None
        else:
            node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, str) and node else None
