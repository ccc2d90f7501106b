"""The Stop button on the status message: the requester or an approver ends the run (`cancelled`)."""

from __future__ import annotations

from typing import Any

from handlers import messages
from handlers.supervisor import Supervisor
from handlers.util import ephemeral


async def on_stop(sup: Supervisor, body: dict[str, Any]) -> None:
    user = (body.get("user") or {}).get("id")
    if not user:
        return  # malformed: nobody to answer
    run_id = (body.get("actions") or [{}])[0].get("value", "")
    run = await sup.store.find_run(run_id)
    if run is None or not run.active:
        await ephemeral(sup, body, messages.run_already_finished())
        return
    # Stopping is the safe direction: whoever may approve a change may also stop the run
    # (with no approvers configured, that is anyone in the channel).
    if user != run.requester and not await sup.policy.may_approve(user, "mutating"):
        await ephemeral(sup, body, messages.not_allowed_to_stop())
        return
    if await sup.store.request_stop(run_id, user):
        sup.stop(run_id)
