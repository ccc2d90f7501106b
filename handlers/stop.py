"""The Stop button on the status message: the requester or an approver ends the run (`cancelled`)."""

from __future__ import annotations

from typing import Any

import structlog

from bot.types import Run, StopReason
from handlers import approvals, messages
from handlers.blocks import STOP
from handlers.event_filters import dig
from handlers.outbox import Failure
from handlers.slack_out import ephemeral
from handlers.supervisor import Supervisor

log = structlog.get_logger("opsloop.stop")


async def on_stop(sup: Supervisor, body: dict[str, Any]) -> None:
    user = dig(body, "user", "id")
    if not user:
        return  # malformed: nobody to answer
    run_id = dig(body, "actions", 0, "value") or ""
    run = await sup.store.find_run(run_id)
    if run is None or not run.active:
        sup.after_ack.spawn(ephemeral(sup.out, body, messages.run_already_finished()), name="stop_refused")
        return
    where = approvals.clicked(body)
    if off := await _off_its_status(sup, run, where):
        log.warning("stop.click_refused", run_id=run.id, user=user, channel=where.channel, ts=where.ts)
        sup.after_ack.spawn(ephemeral(sup.out, body, off), name="stop_refused")
        return
    # Stopping is the safe direction: whoever may approve a change may also stop the run
    # (with no approvers configured, that is anyone in the channel).
    if user != run.requester and not await sup.policy.may_approve(user, "mutating"):
        sup.after_ack.spawn(ephemeral(sup.out, body, messages.not_allowed_to_stop()), name="stop_refused")
        return
    if await sup.store.request_stop(run_id, user):
        # Recorded before the ack: a paused run asks nobody anything any more, whichever process resumes it.
        await approvals.supersede_for_stop(sup.approval_desk, run_id, by=user, why=StopReason.CANCELLED.value)
        sup.stop(run_id)


async def _off_its_status(sup: Supervisor, run: Run, where: approvals.Clicked) -> str | None:
    """None when the click came from this run's status message, else why it does not count (failing closed).

    The status message is the one on record, or (its ts never stored: posted, then the store failed or the
    process died) a message Slack shows in the run's thread, posted by this bot, whose Stop button names the run.
    """
    if not where.channel or not where.ts or where.channel != run.channel:
        return messages.stop_not_on_its_status()
    if where.ts == run.status_ts:
        return None
    found = await approvals.bot_post_in_thread(sup.outbox, channel=run.channel, thread_ts=run.thread_ts, ts=where.ts)
    if isinstance(found, Failure):  # fail closed; a transient failure is worth another click
        log.warning("stop.status_check_failed", run_id=run.id, error=found.error)
        return messages.status_not_checked() if found.transient else messages.stop_not_on_its_status()
    if found is not None and _stops(found) == run.id:
        return None
    return messages.stop_not_on_its_status()


def _stops(msg: dict[str, Any]) -> str | None:
    """The run id the Stop button on a message (as Slack returns it) names."""
    for block in msg.get("blocks") or []:
        for el in block.get("elements") or [] if isinstance(block, dict) else []:
            if isinstance(el, dict) and el.get("action_id") == STOP and isinstance(el.get("value"), str):
                return str(el["value"])
    return None
