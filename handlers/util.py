"""Small Slack helpers shared by the listeners."""

from __future__ import annotations

from typing import Any

import structlog
from slack_sdk.errors import SlackApiError

from handlers.supervisor import Supervisor

log = structlog.get_logger("opsloop.slack")


def is_from_a_bot(event: dict[str, Any], bot_user_id: str) -> bool:
    """Our own messages, other bots', and edits/deletions/joins (any subtype) are not for us."""
    return bool(event.get("bot_id") or event.get("subtype") or not event.get("user")
                or event.get("user") == bot_user_id)


def malformed(event: dict[str, Any], *fields: str) -> bool:
    """Log and skip an event missing what we need; never crash a listener on bad input."""
    missing = [f for f in fields if not isinstance(event.get(f), str) or not event.get(f)]
    if missing:
        log.warning("event.malformed", type=event.get("type"), missing=missing)
    return bool(missing)


def allowed_channel(sup: Supervisor, channel: str) -> bool:
    if sup.settings.channels and channel not in sup.settings.channels:
        log.info("event.ignored_channel", channel=channel)
        return False
    return True


async def react(sup: Supervisor, channel: str, ts: str, name: str = "eyes") -> None:
    """Acknowledge a stored message; a redelivery that already reacted is fine."""
    try:
        await sup.client.reactions_add(channel=channel, timestamp=ts, name=name)
    except SlackApiError as e:
        if e.response.get("error") != "already_reacted":
            log.warning("reaction_failed", channel=channel, ts=ts, error=e.response.get("error"))


async def ephemeral(sup: Supervisor, body: dict[str, Any], text: str) -> None:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
    user = (body.get("user") or {}).get("id")
    if not channel or not user:
        return
    thread_ts = (body.get("message") or {}).get("thread_ts")
    try:
        await sup.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
    except SlackApiError as e:
        log.warning("ephemeral_failed", error=e.response.get("error"))
