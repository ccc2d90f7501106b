"""Approve / Deny clicks: policy checked here, on the server, for every click."""

from __future__ import annotations

import time
from typing import Any

import structlog

from handlers import messages
from handlers.supervisor import Supervisor
from handlers.util import ephemeral

log = structlog.get_logger("opsloop.approvals")


async def on_decision(sup: Supervisor, body: dict[str, Any], *, approve: bool) -> None:
    user = body["user"]["id"]
    approval_id = (body.get("actions") or [{}])[0].get("value", "")
    refusal = await decide(sup, approval_id, user, approve=approve)
    if refusal:
        log.info("approval.refused", approval_id=approval_id, user=user, why=refusal)
        await ephemeral(sup, body, refusal)


async def decide(sup: Supervisor, approval_id: str, user: str, *, approve: bool) -> str | None:
    """Apply one click. Returns the explanation for the clicker when it changes nothing."""
    store = sup.store
    a = await store.find_approval(approval_id)
    if a is None:
        return messages.UNKNOWN_APPROVAL
    if a["state"] != "pending":
        return messages.already_decided(a["state"], a["decided_by"])
    if time.time() >= a["expires_at"]:
        if await store.transition_approval(a["id"], expect="pending", state="expired", decided_at=time.time()):
            await sup.update_card(await store.get_approval(a["id"]))
            sup.wake(a["id"])
        return messages.approval_expired(a["tool"])
    if not await sup.policy.may_approve(user, a["category"]):
        return messages.not_allowed_to_approve(a["tool"], a["category"], sup.policy.describe(a["category"]))
    if approve and a["category"] == "destructive" and user == a["requester"] \
            and not sup.settings.approvals.allow_self_approval:
        return messages.self_approval_refused(a["tool"])
    if approve and user in a["approvals"]:
        return messages.already_approved_by_you()
    now = time.time()
    if not approve:
        changed = await store.transition_approval(a["id"], expect="pending", state="denied", decided_by=user,
                                                  decided_name=await sup.policy.display_name(user),
                                                  decided_at=now)
    else:
        changed = await store.add_approver(a["id"], user, decided_name=await sup.policy.display_name(user),
                                           now=now)
        log.info("approval.click", approval_id=a["id"], user=user, recorded=changed)
    if not changed:
        fresh = await store.get_approval(a["id"])
        return messages.already_decided(fresh["state"], fresh["decided_by"])
    await sup.update_card(await store.get_approval(a["id"]))
    sup.wake(a["id"])
    return None
