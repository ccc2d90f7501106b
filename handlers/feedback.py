"""A click on the feedback buttons under an answer or a handoff report: stored with who and when, before the ack.

The button's value names the run, so a click counts whichever process receives it, and after a restart."""

from __future__ import annotations

from typing import Any

import structlog

from handlers.blocks import feedback_of
from handlers.supervisor import Supervisor
from handlers.util import dig

log = structlog.get_logger("opsloop.feedback")


async def on_feedback(sup: Supervisor, body: dict[str, Any]) -> None:
    user = dig(body, "user", "id")
    parsed = feedback_of(dig(body, "actions", 0, "value") or "")
    channel = dig(body, "channel", "id") or dig(body, "container", "channel_id")
    message_ts = dig(body, "container", "message_ts") or dig(body, "message", "ts")
    if not user or parsed is None or not channel or not message_ts:
        log.warning("feedback.malformed", user=user, channel=channel)
        return
    value, run_id = parsed
    run = await sup.store.find_run(run_id)
    if run is None or run.channel != channel:  # not a button opsloop put there: fail closed
        log.warning("feedback.unknown_run", run_id=run_id, channel=channel)
        return
    # Slack's id for this one click: a redelivered payload is the same click, a second click is a new one.
    click = f"{user}:{message_ts}:{dig(body, 'actions', 0, 'action_ts') or dig(body, 'trigger_id') or ''}"
    if await sup.store.record_feedback(click=click, run_id=run.id, user=user, value=value, channel=channel,
                                       message_ts=message_ts):
        log.info("feedback.recorded", run_id=run.id, user=user, value=value.value)
