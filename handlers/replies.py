"""A thread reply during a run: stored in the run's inbox, then :eyes:, then seen by the model.

While an approval is pending, the reply supersedes it: the card says so and the model
gets the decline together with the person's message.
"""

from __future__ import annotations

from typing import Any

import structlog

from bot.core.types import AcceptedReply
from bot.run import approvals
from handlers.event_filters import allowed_channel, is_from_a_bot, malformed, message_text
from handlers.inbound import Inbound

log = structlog.get_logger("opsloop.replies")


async def on_message(desk: Inbound, body: dict[str, Any], event: dict[str, Any]) -> None:
    thread_ts = event.get("thread_ts")
    if not thread_ts or is_from_a_bot(event, desk.bot_user_id) or malformed(event, "channel", "ts", "user"):
        return
    if desk.bot_user_id and f"<@{desk.bot_user_id}" in str(event.get("text") or ""):
        return  # the app_mention listener takes it (Slack sends both)
    if not allowed_channel(desk.channels(), event["channel"]):
        return
    text = message_text(event)
    if not text.strip():
        return
    # The event claim, the inbox row and the supersede of pending approvals: one transaction, before the ack.
    accepted = await desk.store.accept_reply(
        body.get("event_id") or f"message:{event['channel']}:{event['ts']}",
        channel=event["channel"],
        thread_ts=thread_ts,
        ts=event["ts"],
        user=event["user"],
        text=text,
        on_reply=approvals.supersede_by_reply,
    )
    if accepted is not None:
        await after_reply(desk, accepted)


async def after_reply(desk: Inbound, accepted: AcceptedReply) -> None:
    """A reply (or redirect mention) is stored: cards it superseded say so (via the outbox), :eyes: off the
    ack path, and the run hears about it."""
    item = accepted.item
    log.info("reply.stored", run_id=item.run_id, user=item.user, superseded=list(accepted.superseded))
    # cards (enqueued: a store write), wake-ups
    await approvals.superseded_by_reply(desk.approvals, accepted.superseded)
    desk.after_ack.spawn(  # once it is stored, and after the acks of the deliveries in hand
        desk.out.react(channel=item.channel, ts=item.ts), name=f"eyes:{item.ts}", after_deliveries=True
    )
