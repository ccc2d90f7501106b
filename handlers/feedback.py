"""A click on the feedback buttons under an answer or a handoff report: stored with who and when, before the ack.

The button's value names the run, so a click counts whichever process receives it, and after a restart. It counts
only from that run's answer or report (as approvals and Stop count only from their card and status message): the
message on record with those buttons, or one Slack shows in the run's thread, posted by this bot, whose buttons
name the run. Once per person per answer: a later click replaces the earlier one."""

from __future__ import annotations

from typing import Any

import structlog

from bot.core.types import Run
from bot.store import Store
from handlers import approvals
from handlers.blocks import FEEDBACK, buttons, feedback_of
from handlers.event_filters import dig
from handlers.outbox import Failure, Outbox

log = structlog.get_logger("opsloop.feedback")


async def on_feedback(store: Store, outbox: Outbox, body: dict[str, Any]) -> None:
    """Store the click (`store`), once it is known to come from the run's answer (`outbox`: what it sent)."""
    user = dig(body, "user", "id")
    parsed = feedback_of(dig(body, "actions", 0, "value") or "")
    channel = dig(body, "channel", "id") or dig(body, "container", "channel_id")
    message_ts = dig(body, "container", "message_ts") or dig(body, "message", "ts")
    if not user or parsed is None or not channel or not message_ts:
        log.warning("feedback.malformed", user=user, channel=channel)
        return
    value, run_id = parsed
    run = await store.find_run(run_id)
    if run is None or run.channel != channel:  # not a button opsloop put there: fail closed
        log.warning("feedback.unknown_run", run_id=run_id, channel=channel)
        return
    if not await _on_its_answer(store, outbox, run, where=approvals.clicked(body)):
        log.warning("feedback.off_its_answer", run_id=run.id, channel=channel, ts=message_ts)
        return
    # Slack's id for this one click: a redelivered payload is the same click, a second click is a new one.
    click = f"{user}:{message_ts}:{dig(body, 'actions', 0, 'action_ts') or dig(body, 'trigger_id') or ''}"
    if await store.record_feedback(
        click=click, run_id=run.id, user=user, value=value, channel=channel, message_ts=message_ts
    ):
        log.info("feedback.recorded", run_id=run.id, user=user, value=value.value)


async def _on_its_answer(store: Store, outbox: Outbox, run: Run, *, where: approvals.Clicked) -> bool:
    """Whether the click came from a message of `run` carrying its feedback buttons (failing closed)."""
    if not where.channel or not where.ts or where.channel != run.channel:
        return False
    if any(item.ts == where.ts and _names(item.blocks, run.id) for item in await store.outbox_items(run.id)):
        return True
    found = await outbox.bot_post(channel=run.channel, thread_ts=run.thread_ts, ts=where.ts)
    if isinstance(found, Failure) or found is None:
        return False
    return _names(found.get("blocks"), run.id)


def _names(blocks: object, run_id: str) -> bool:
    """Whether `blocks` hold feedback buttons whose values name `run_id`."""
    values = [
        dig(el, b, "value") or "" for el in buttons(blocks, FEEDBACK) for b in ("positive_button", "negative_button")
    ]
    return any((parsed := feedback_of(v)) is not None and parsed[1] == run_id for v in values)
