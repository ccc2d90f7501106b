"""A thread reply during a run: stored in the run's inbox, then :eyes:, then seen by the model.

While an approval is pending, the reply supersedes it: the card says so and the model
gets the decline together with the person's message.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from bot.types import ApprovalState, DecisionCause, InboxState
from handlers.supervisor import Supervisor
from handlers.util import allowed_channel, is_from_a_bot, malformed, message_text, react

log = structlog.get_logger("opsloop.replies")


async def on_message(sup: Supervisor, body: dict[str, Any], event: dict[str, Any]) -> None:
    thread_ts = event.get("thread_ts")
    if not thread_ts or is_from_a_bot(event, sup.bot_user_id) or malformed(event, "channel", "ts", "user"):
        return
    if sup.bot_user_id and f"<@{sup.bot_user_id}" in str(event.get("text") or ""):
        return  # the app_mention listener takes it (Slack sends both)
    if not await sup.store.claim_event(body.get("event_id") or f"message:{event['channel']}:{event['ts']}"):
        return
    if not allowed_channel(sup, event["channel"]):
        return
    await queue_reply(sup, channel=event["channel"], thread_ts=thread_ts, ts=event["ts"],
                      user=event["user"], text=message_text(event))


async def queue_reply(sup: Supervisor, *, channel: str, thread_ts: str, ts: str, user: str, text: str) -> None:
    run = await sup.store.active_run(channel, thread_ts)
    if run is None or not text.strip():
        return
    store = sup.store
    superseded = []
    for approval in await store.pending_approvals(run.id):
        if await store.decide_approval(approval.id, state=ApprovalState.SUPERSEDED, cause=DecisionCause.REPLY,
                                       decided_by=user, reason=text, decided_at=time.time()):
            superseded.append(approval.id)
    if superseded:
        # The reply reaches the model inside the decision; keep it on record, not in the queue.
        inbox_id = await store.add_inbox(run_id=run.id, channel=channel, ts=ts, user=user, text=text)
        await store.put_inbox_state(inbox_id, InboxState.SUPERSEDING)
    else:
        await store.add_inbox(run_id=run.id, channel=channel, ts=ts, user=user, text=text)
    log.info("reply.stored", run_id=run.id, user=user, superseded=superseded)
    await react(sup, channel, ts)  # only after it is stored
    for approval_id in superseded:
        await sup.update_card(await store.get_approval(approval_id))
        sup.wake(approval_id)
