"""Approve / Deny clicks: policy checked here, on the server, for every click."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import structlog

from bot.types import Approval, ApprovalState, DecisionCause
from handlers import blocks, messages
from handlers.policy import Verdict
from handlers.util import ephemeral

if TYPE_CHECKING:
    from handlers.supervisor import Supervisor

log = structlog.get_logger("opsloop.approvals")


async def on_decision(sup: Supervisor, body: dict[str, Any], *, approve: bool) -> None:
    user = (body.get("user") or {}).get("id")
    approval_id = (body.get("actions") or [{}])[0].get("value", "")
    if not user:
        log.warning("action.malformed", missing=["user.id"])
        return
    clicked_ts = (body.get("message") or {}).get("ts") or (body.get("container") or {}).get("message_ts")
    refusal = await decide(sup, approval_id, user, approve=approve, clicked_ts=clicked_ts)
    if refusal:
        log.info("approval.refused", approval_id=approval_id, user=user, why=refusal)
        sup.after_ack.spawn(ephemeral(sup, body, refusal), name="refusal")  # off the ack path


async def decide(
    sup: Supervisor, approval_id: str, user: str, *, approve: bool, clicked_ts: str | None = None
) -> str | None:
    """Apply one click. Returns the explanation for the clicker when it changes nothing.

    `clicked_ts` is the card the click came from. It can differ from the stored card: a bot
    stopped between posting a card and storing its ts has no ts on record (and a resumed run
    posts the card again). The clicked card is then recorded, and closed along with the other.
    """
    store = sup.store
    a = await store.find_approval(approval_id)
    if a is None:
        return messages.UNKNOWN_APPROVAL
    if not a.pending:
        await _close_stale_card(sup, a, clicked_ts)
        return messages.already_decided(a.state, a.decided_by)
    if time.time() >= (a.expires_at or 0.0):
        if await store.decide_approval(a.id, state=ApprovalState.EXPIRED, cause=DecisionCause.EXPIRY,
                                       decided_at=time.time()):
            expired = await store.get_approval(a.id)
            await sup.update_card(expired)
            await _close_stale_card(sup, expired, clicked_ts)
            sup.wake(a.id)
        return messages.approval_expired(a.tool)
    refusal = await _refusal(sup, a, user, approve=approve)
    if refusal:
        return refusal
    if approve and user in a.approvals:
        return messages.already_approved_by_you()
    now = time.time()
    if not approve:
        changed = await store.decide_approval(a.id, state=ApprovalState.DENIED, cause=DecisionCause.CLICK,
                                              decided_by=user, decided_name=await sup.policy.display_name(user),
                                              decided_at=now)
    else:
        changed = await store.add_approver(a.id, user, decided_name=await sup.policy.display_name(user), now=now)
        log.info("approval.click", approval_id=a.id, user=user, recorded=changed)
    if not changed:
        fresh = await store.get_approval(a.id)
        return messages.already_decided(fresh.state, fresh.decided_by)
    fresh = await store.get_approval(a.id)
    if clicked_ts and not fresh.message_ts:
        await store.set_card_ts(a.id, clicked_ts, expect=fresh.state)
        fresh = dataclasses.replace(fresh, message_ts=clicked_ts)
    await sup.update_card(fresh)
    await _close_stale_card(sup, fresh, clicked_ts)
    sup.wake(a.id)
    return None


async def _refusal(sup: Supervisor, a: Approval, user: str, *, approve: bool) -> str | None:
    """Why this click may not decide the approval, or None. Decided here, on the server, failing closed."""
    policy = sup.policy
    requesters = await sup.store.requesters(a.id) if policy.self_approval_matters(a.category, approve=approve) else []
    verdict = await policy.verdict(user, category=a.category, approve=approve, run_requester=a.requester,
                                   requesters=requesters)
    if verdict is Verdict.NOT_AN_APPROVER:
        return messages.not_allowed_to_approve(a.tool, a.category, policy.describe(a.category))
    if verdict is Verdict.STARTED_THE_RUN:
        return messages.self_approval_refused(a.tool)
    if verdict is Verdict.ASKED_IN_THE_THREAD:
        return messages.asked_in_thread_refused(a.tool)
    if approve and not blocks.offers_approve(blocks.approval_card(dataclasses.replace(a, state=ApprovalState.PENDING))):
        return messages.args_not_shown_refused(a.tool)  # the card could not show everything that would run
    return None


async def _close_stale_card(sup: Supervisor, approval: Approval, clicked_ts: str | None) -> None:
    """A click on a copy of the card that is not the one on record: show it the decision too."""
    if clicked_ts and clicked_ts != approval.message_ts and not approval.pending:
        await sup.update_card(dataclasses.replace(approval, message_ts=clicked_ts))


async def expire(sup: Supervisor, approval: Approval) -> bool:
    """No decision in time: "no consent". The card says so and the paused run resumes with it."""
    if not await sup.store.decide_approval(approval.id, state=ApprovalState.EXPIRED, cause=DecisionCause.EXPIRY,
                                           decided_at=time.time()):
        return False  # decided meanwhile
    log.info("approval.expired", approval_id=approval.id, tool=approval.tool)
    await sup.update_card(await sup.store.get_approval(approval.id))
    sup.wake(approval.id)
    return True


async def expire_due(sup: Supervisor) -> None:
    """The expiry sweep (every scheduler tick, and at start-up): approvals nobody decided in time."""
    for approval in await sup.store.due_approvals(now=time.time()):
        await expire(sup, approval)


async def supersede_for_stop(sup: Supervisor, run_id: str, *, by: str | None, why: str) -> None:
    """A stopped run asks nobody anything: its pending cards say so and stop taking clicks."""
    for approval in await sup.store.pending_approvals(run_id):
        if await sup.store.decide_approval(approval.id, state=ApprovalState.SUPERSEDED, cause=DecisionCause.STOP,
                                           reason=f"run stopped ({why})", decided_by=by, decided_at=time.time()):
            await sup.update_card(await sup.store.get_approval(approval.id))
