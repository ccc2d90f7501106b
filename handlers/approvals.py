"""The Slack side of the approval lifecycle (bot/run/approvals.py): the cards, and who may click where, checked on
the server for every click, failing closed. A click's listener makes one call into the run layer (`decide`),
which records the decision, updates the card and wakes the paused run; here it only says why a click changed
nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from bot.core.types import Approval, ApprovalState
from bot.run import approvals
from bot.run.approvals import Refused
from handlers import blocks, messages
from handlers.event_filters import dig
from handlers.names import SlackNames
from handlers.outbox import Cards, Failure, card_key, posted_item
from handlers.policy import ApprovalPolicy, Verdict, requesters
from handlers.slack_out import ephemeral

if TYPE_CHECKING:
    from bot.store import Store

log = structlog.get_logger("opsloop.approvals")


@dataclass(frozen=True)
class Clicked:
    """The message a click came from, as its payload names it; None where it names none, or two."""

    channel: str | None
    ts: str | None


def clicked(body: dict[str, Any]) -> Clicked:
    return Clicked(
        channel=_one(dig(body, "channel", "id"), dig(body, "container", "channel_id")),
        ts=_one(dig(body, "message", "ts"), dig(body, "container", "message_ts")),
    )


def _one(*named: str | None) -> str | None:
    values = {v for v in named if v}
    return values.pop() if len(values) == 1 else None


async def on_decision(desk: approvals.ApprovalDesk, cards: Cards, body: dict[str, Any], *, approve: bool) -> None:
    """An Approve or Deny click: one call into the run layer; a click that changes nothing is told why (off the
    ack path)."""
    user = dig(body, "user", "id")
    approval_id = dig(body, "actions", 0, "value") or ""
    if not user:
        log.warning("action.malformed", missing=["user.id"])
        return
    where = clicked(body)
    refusal = await approvals.decide(desk, approval_id, user, approve=approve, channel=where.channel, ts=where.ts)
    if refusal is not None:
        words = _words(refusal)
        log.info("approval.refused", approval_id=approval_id, user=user, why=words)
        cards.after_ack.spawn(ephemeral(cards.out, body, words), name="refusal")


def _words(refusal: approvals.Refusal) -> str:
    a = refusal.approval
    if refusal.why is Refused.VETTED or a is None:
        return refusal.words or messages.UNKNOWN_APPROVAL
    if refusal.why is Refused.EXPIRED:
        return messages.approval_expired(a.tool)
    if refusal.why is Refused.TWICE:
        return messages.ALREADY_APPROVED_BY_YOU
    return messages.already_decided(a.state, a.decided_by)


class ApprovalSlack:
    """The cards and the checks of every click (`bot.ApprovalCards`), a part of handlers.supervisor.Slack: the
    outbox for the cards, the policy for who may decide, display names for the audit log."""

    store: Store
    policy: ApprovalPolicy
    cards: Cards
    names: SlackNames

    async def post_card(self, approval: Approval) -> None:
        """Stored, then sent by the outbox (exactly once); the sender records the card's ts on the approval."""
        await self.cards.outbox.post(
            run_id=approval.run_id,
            channel=approval.channel or "",
            thread_ts=approval.thread_ts or "",
            msg=blocks.approval_card(approval),
            key=card_key(approval.id),
            approval_id=approval.id,
        )

    async def show_card(self, approval: Approval, *, ts: str | None = None) -> None:
        await self.cards.update_card(approval if ts is None else dataclasses.replace(approval, message_ts=ts))

    async def name(self, user: str) -> str:
        return await self.names.user(user)

    async def off_its_card(self, a: Approval, *, channel: str | None, ts: str | None) -> str | None:
        """A click counts only from the approval's card (the button value alone is no proof): the message on
        record, the outbox's post of it, or a post of that outbox item whose ts the store never learnt (crash
        recovery). Only that rare case asks Slack for the clicked message, which must be in the approval's thread,
        posted by this bot, with metadata naming the card's outbox item."""
        if not channel or not ts or channel != a.channel:
            return messages.CLICK_NOT_ON_ITS_CARD
        if ts == a.message_ts:
            return None
        card = await self.store.outbox_by_key(card_key(a.id))
        if card is None or card.channel != a.channel or not a.thread_ts:
            return messages.CLICK_NOT_ON_ITS_CARD
        if ts == card.ts:
            return None
        found = await self.cards.outbox.bot_post(channel=a.channel, thread_ts=a.thread_ts, ts=ts)
        if isinstance(found, Failure):  # fail closed; a transient failure is worth another click
            log.warning("approval.card_check_failed", approval_id=a.id, error=found.error)
            return messages.CARD_NOT_CHECKED if found.transient else messages.CLICK_NOT_ON_ITS_CARD
        if found is not None and posted_item(found) == card.id:
            log.info("approval.card_copy", approval_id=a.id, ts=ts)
            return None
        return messages.CLICK_NOT_ON_ITS_CARD

    async def refusal(self, a: Approval, user: str, *, approve: bool) -> str | None:
        policy = self.policy
        asked = await requesters(self.store, a.id) if policy.self_approval_matters(a.category, approve=approve) else []
        verdict = await policy.verdict(
            user, category=a.category, approve=approve, run_requester=a.requester, requesters=asked
        )
        if verdict is Verdict.NOT_AN_APPROVER:
            return messages.not_allowed_to_approve(a.tool, a.category, policy.describe(a.category))
        if verdict is Verdict.STARTED_THE_RUN:
            return messages.self_approval_refused(a.tool, a.category)
        if verdict is Verdict.ASKED_IN_THE_THREAD:
            return messages.asked_in_thread_refused(a.tool, a.category)
        if approve and not blocks.offers_approve(
            blocks.approval_card(dataclasses.replace(a, state=ApprovalState.PENDING))
        ):
            return messages.args_not_shown_refused(a.tool)  # the card could not show everything that would run
        return None
