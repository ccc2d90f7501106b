"""The Stop button on the status message: the requester or an approver ends the run (`cancelled`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from bot.core.types import Run
from bot.store import Store
from handlers import approvals, messages
from handlers.after_ack import AfterAck
from handlers.blocks import STOP
from handlers.event_filters import dig
from handlers.outbox import Failure, Outbox
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut, ephemeral

log = structlog.get_logger("opsloop.stop")


@dataclass(frozen=True)
class StopDesk:
    """What a Stop click needs, and nothing else: the run (store), what the bot posted (outbox: the status
    message), who may stop (policy), the refusals it sends after the ack, and the Supervisor's `stop` (records
    the Stop, supersedes the run's cards, ends the run where it is driven)."""

    store: Store
    outbox: Outbox
    out: SlackOut
    after_ack: AfterAck
    policy: ApprovalPolicy
    stop: Callable[[str, str], Awaitable[None]]


async def on_stop(desk: StopDesk, body: dict[str, Any]) -> None:
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


async def _off_its_status(desk: StopDesk, run: Run, where: approvals.Clicked) -> str | None:
    """None when the click came from this run's status message, else why it does not count (failing closed).

    The status message is the one on record, or (its ts never stored: posted, then the store failed or the
    process died) a message Slack shows in the run's thread, posted by this bot, whose Stop button names the run.
    """
    if not where.channel or not where.ts or where.channel != run.channel:
        return messages.STOP_NOT_ON_ITS_STATUS
    if where.ts == run.status_ts:
        return None
    found = await approvals.bot_post_in_thread(desk.outbox, channel=run.channel, thread_ts=run.thread_ts, ts=where.ts)
    if isinstance(found, Failure):  # fail closed; a transient failure is worth another click
        log.warning("stop.status_check_failed", run_id=run.id, error=found.error)
        return messages.STATUS_NOT_CHECKED if found.transient else messages.STOP_NOT_ON_ITS_STATUS
    if found is not None and _stops(found) == run.id:
        return None
    return messages.STOP_NOT_ON_ITS_STATUS


def _stops(msg: dict[str, Any]) -> str | None:
    """The run id the Stop button on a message (as Slack returns it) names."""
    for block in msg.get("blocks") or []:
        for el in block.get("elements") or [] if isinstance(block, dict) else []:
            if isinstance(el, dict) and el.get("action_id") == STOP and isinstance(el.get("value"), str):
                return str(el["value"])
    return None
