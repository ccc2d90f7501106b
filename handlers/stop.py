"""The Stop button on the status message: the requester or an approver ends the run (`cancelled`)."""

from __future__ import annotations

from typing import Any

import structlog

from bot.core.types import Run
from handlers import approvals, messages
from handlers.blocks import STOP, buttons
from handlers.event_filters import dig
from handlers.mentions import Inbound
from handlers.outbox import Failure
from handlers.slack_out import ephemeral

log = structlog.get_logger("opsloop.stop")


async def on_stop(desk: Inbound, body: dict[str, Any]) -> None:
    user = dig(body, "user", "id")
    if not user:
        return  # malformed: nobody to answer
    run_id = dig(body, "actions", 0, "value") or ""
    run = await desk.store.find_run(run_id)
    if run is None or not run.active:
        desk.after_ack.spawn(ephemeral(desk.out, body, messages.RUN_ALREADY_FINISHED), name="stop_refused")
        return
    where = approvals.clicked(body)
    if off := await _off_its_status(desk, run, where):
        log.warning("stop.click_refused", run_id=run.id, user=user, channel=where.channel, ts=where.ts)
        desk.after_ack.spawn(ephemeral(desk.out, body, off), name="stop_refused")
        return
    # Stopping is the safe direction: whoever may approve a change may also stop the run
    # (with no approvers configured, that is anyone in the channel).
    if user != run.requester and not await desk.policy.may_approve(user, "mutating"):
        desk.after_ack.spawn(ephemeral(desk.out, body, messages.NOT_ALLOWED_TO_STOP), name="stop_refused")
        return
    await desk.stop(run_id, user)


async def _off_its_status(desk: Inbound, run: Run, where: approvals.Clicked) -> str | None:
    """None when the click came from this run's status message, else why it does not count (failing closed).

    The status message is the one on record, or (its ts never stored: posted, then the store failed or the
    process died) a message Slack shows in the run's thread, posted by this bot, whose Stop button names the run.
    """
    if not where.channel or not where.ts or where.channel != run.channel:
        return messages.STOP_NOT_ON_ITS_STATUS
    if where.ts == run.status_ts:
        return None
    found = await desk.outbox.bot_post(channel=run.channel, thread_ts=run.thread_ts, ts=where.ts)
    if isinstance(found, Failure):  # fail closed; a transient failure is worth another click
        log.warning("stop.status_check_failed", run_id=run.id, error=found.error)
        return messages.STATUS_NOT_CHECKED if found.transient else messages.STOP_NOT_ON_ITS_STATUS
    if found is not None and any(el.get("value") == run.id for el in buttons(found.get("blocks"), STOP)):
        return None
    return messages.STOP_NOT_ON_ITS_STATUS
