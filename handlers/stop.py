"""The Stop button on the status message: the requester or an approver ends the run (`cancelled`)."""

from __future__ import annotations

from typing import Any

from bot.types import StopReason
from handlers import approvals, messages
from handlers.supervisor import Supervisor
from handlers.util import dig, ephemeral


async def on_stop(sup: Supervisor, body: dict[str, Any]) -> None:
    user = dig(body, "user", "id")
    if not user:
        return  # malformed: nobody to answer
    run_id = dig(body, "actions", 0, "value") or ""
    run = await sup.store.find_run(run_id)
    if run is None or not run.active:
        sup.after_ack.spawn(ephemeral(sup, body, messages.run_already_finished()), name="stop_refused")
        return
    # Stopping is the safe direction: whoever may approve a change may also stop the run
    # (with no approvers configured, that is anyone in the channel).
    if user != run.requester and not await sup.policy.may_approve(user, "mutating"):
        sup.after_ack.spawn(ephemeral(sup, body, messages.not_allowed_to_stop()), name="stop_refused")
        return
    if await sup.store.request_stop(run_id, user):
        # Recorded before the ack: a paused run asks nobody anything any more, whichever process resumes it.
        await approvals.supersede_for_stop(sup, run_id, by=user, why=StopReason.CANCELLED.value)
        sup.stop(run_id)
