"""The approval lifecycle, in one place: ask, decide (a click), supersede (a reply, a Stop, a changed call) and
expire. An approval is a stored pause: `ask` ends the run's drive while it is pending, and every decision, made
by whichever process received it, goes through `_announce` (the card shows it, the paused run is woken; the
scheduler of any process resumes it from the store, and the gate runs the tool with `confirmed_by`). The Slack
side (`bot.ApprovalCards`) posts and updates the cards and vets who clicked where; N of M is counted here
(`count_approval`), and so is a reply's supersede (`supersede_by_reply`), which the store runs inside the
transaction that stores the reply (store-then-ack).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from bot.core.types import Approval, ApprovalState, ConfirmRequest, Decision, DecisionCause, InboxItem, InboxState, Run
from bot.run.guards import Pause

if TYPE_CHECKING:
    from bot import ApprovalCards
    from bot.config.settings import ApprovalSettings
    from bot.store import Ledger, Store

log = structlog.get_logger("opsloop.approvals")


@dataclass(frozen=True)
class ApprovalDesk:
    """What the lifecycle uses: the store, the approval settings, the Slack side's cards, and a way to wake the
    scheduler once a decision lands."""

    store: Store
    settings: ApprovalSettings
    cards: ApprovalCards
    nudge: Callable[[], None]


# --- ask ------------------------------------------------------------------------------------------
async def ask(desk: ApprovalDesk, run: Run, req: ConfirmRequest) -> Decision:
    """The runtime's confirm: the decision on this call, or `Pause` while nobody has decided yet."""
    store, settings = desk.store, desk.settings
    approval = await store.approval_for_call(req.run_id, req.call.id)
    # Bound to the call's arguments, and, while nobody has decided yet, to the preview the card shows: a
    # changed preview asks again. Once decided, the decision stands on the preview the person read.
    if approval is None or not (
        approval.args_hash == req.args_hash and (not approval.pending or approval.preview_hash == req.preview_hash)
    ):
        if approval is not None and approval.pending:  # that consent is void: the card says why
            await _transition(
                desk,
                approval,
                ApprovalState.SUPERSEDED,
                DecisionCause.CHANGED_CALL,
                reason="the call changed (arguments or dry-run preview); a new approval was requested",
            )
        run_now = await store.get_run(req.run_id)
        approval = await store.create_approval(
            run_id=req.run_id,
            tool_use_id=req.call.id,
            tool=req.call.name,
            category=req.category,
            args=req.call.args,
            args_hash=req.args_hash,
            preview=req.preview,
            preview_hash=req.preview_hash,
            requester=run.requester,
            channel=run.channel,
            thread_ts=run.thread_ts,
            required=settings.required(req.category),
            expires_at=store.now() + settings.expire_minutes * 60,
            run_tokens=run_now.usage.paid_tokens,
            run_cost_usd=run_now.cost_usd,
        )
    if approval.pending and not approval.message_ts:
        await desk.cards.post_card(approval)  # stored, then sent exactly once, however often this runs
    approval = await store.get_approval(approval.id)
    if approval.pending and store.now() >= (approval.expires_at or 0.0) and await expire(desk, approval):
        approval = await store.get_approval(approval.id)
    if approval.pending:
        # A stored pause: this drive ends; a click, a reply, the expiry sweep or a Stop decides it (in any
        # process) and the run resumes from the store, back here with the decision.
        raise Pause(f"waiting for a decision on {approval.tool} ({approval.id})")
    approved = approval.state == ApprovalState.APPROVED
    return Decision(
        approved=approved,
        confirmed_by=approval.decided_by,
        reason="" if approved else approval.reason or "",
        outcome=approval.state.value,
        preview=approval.preview,
    )


# --- decide (a click) ------------------------------------------------------------------------------
class Refused(enum.Enum):
    """Why a click changed nothing, for the Slack side to say (with `Refusal.approval`)."""

    UNKNOWN = "unknown"  # no such approval
    VETTED = "vetted"  # the Slack side refused it (not from its card, not an approver): `Refusal.words` says why
    DECIDED = "decided"  # decided already
    EXPIRED = "expired"  # it ran out of time
    TWICE = "twice"  # this approver approved already


@dataclass(frozen=True)
class Refusal:
    why: Refused
    approval: Approval | None = None
    words: str = ""


async def decide(
    desk: ApprovalDesk, approval_id: str, user: str, *, approve: bool, channel: str | None, ts: str | None
) -> Refusal | None:
    """Apply one click from the message at (`channel`, `ts`); a Refusal when it changes nothing.

    The Slack side vets it (failing closed): it must come from the approval's card (`off_its_card`), from
    someone who may decide it (`refusal`). The card can be a copy the store has no ts of (a bot stopped between
    posting a card and storing its ts, and the resumed run posted it again): the clicked copy is then recorded,
    and closed along with the other.
    """
    store = desk.store
    a = await store.find_approval(approval_id)
    if a is None:
        return Refusal(Refused.UNKNOWN)
    if off := await desk.cards.off_its_card(a, channel=channel, ts=ts):
        log.warning("approval.click_refused", approval_id=a.id, user=user, channel=channel, ts=ts)
        return Refusal(Refused.VETTED, a, off)
    if not a.pending:
        # Show the decision again (idempotent by key): a crash between a decision and its card update would
        # otherwise leave the buttons up for good.
        await desk.cards.show_card(a)
        await _close_copy(desk, a, ts)
        return Refusal(Refused.DECIDED, a)
    if store.now() >= (a.expires_at or 0.0):
        if await expire(desk, a):
            await _close_copy(desk, await store.get_approval(a.id), ts)
        return Refusal(Refused.EXPIRED, a)
    if off := await desk.cards.refusal(a, user, approve=approve):
        return Refusal(Refused.VETTED, a, off)
    if approve and user in a.approvals:
        return Refusal(Refused.TWICE, a)
    name = await desk.cards.name(user)
    if approve:  # one of `required` approvals; the last flips the state (a write of its own: it counts)
        changed = await add_approver(store, a.id, user, decided_name=name, now=store.now())
        log.info("approval.click", approval_id=a.id, user=user, recorded=changed)
    else:
        changed = await store.decide_approval(
            a.id,
            state=ApprovalState.DENIED,
            cause=DecisionCause.CLICK,
            decided_by=user,
            decided_name=name,
            decided_at=store.now(),
        )
    fresh = await store.get_approval(a.id)
    if not changed:
        return Refusal(Refused.DECIDED, fresh)
    if ts and not fresh.message_ts:
        await store.set_card_ts(a.id, ts, expect=fresh.state)
    await _announce(desk, a.id)
    await _close_copy(desk, await store.get_approval(a.id), ts)
    return None


async def _close_copy(desk: ApprovalDesk, approval: Approval, clicked_ts: str | None) -> None:
    """A click on a copy of the card that is not the one on record (the Slack side vetted it as a copy of this
    approval's card, never another message): show it the decision too."""
    if clicked_ts and clicked_ts != approval.message_ts and not approval.pending:
        await desk.cards.show_card(approval, ts=clicked_ts)


def count_approval(db: Ledger, approval_id: str, user: str, *, decided_name: str, now: float) -> bool:
    """Record one approval; the last one required flips the state to approved (N of M distinct approvers).

    Read-modify-write is safe here: it runs as one unit (`add_approver`: the single writer thread on SQLite, one
    serializable transaction on Postgres, where two replicas' clicks at once are retried one after the other).
    """
    a = db.find_approval(approval_id)
    if a is None or not a.pending or user in a.approvals:
        return False
    approvals = [*a.approvals, user]
    if len(approvals) >= a.required:
        return db.record_approvers(approval_id, approvals, decided_by=user, decided_name=decided_name, decided_at=now)
    return db.record_approvers(approval_id, approvals)


async def add_approver(store: Store, approval_id: str, user: str, *, decided_name: str, now: float) -> bool:
    """`count_approval` as one unit on the store's thread (on the path of a click: urgent)."""
    return await store.atomically(
        lambda db: count_approval(db, approval_id, user, decided_name=decided_name, now=now), urgent=True
    )


# --- supersede and expire ------------------------------------------------------------------------
def supersede_by_reply(db: Ledger, run: Run, reply: InboxItem) -> tuple[str, ...]:
    """The rule for a thread reply, applied in the transaction that stores it (`Ledger.accept_reply`'s
    `on_reply`): it declines every pending approval of its run (compare-and-set; the model gets the decline plus
    the person's message), and stays on record as superseding them rather than queued. With none pending, the
    reply is simply queued for the model's next step."""
    now = db.sql.now()
    superseded = tuple(
        a.id
        for a in db.pending_approvals(run.id)
        if db.end_pending(
            a.id,
            state=ApprovalState.SUPERSEDED,
            cause=DecisionCause.REPLY,
            decided_by=reply.user,
            reason=reply.text,
            decided_at=now,
        )
    )
    if superseded:  # the reply reaches the model inside the decision; on record, not in the queue
        db.put_inbox_state(reply.id, InboxState.SUPERSEDING)
    return superseded


async def superseded_by_reply(desk: ApprovalDesk, approval_ids: Iterable[str]) -> None:
    """A thread reply superseded these (in the store, in the transaction that stored the reply): announce it."""
    for approval_id in approval_ids:
        await _announce(desk, approval_id)


async def expire(desk: ApprovalDesk, approval: Approval) -> bool:
    """No decision in time: "no consent". The card says so and the paused run resumes with it."""
    if expired := await _transition(desk, approval, ApprovalState.EXPIRED, DecisionCause.EXPIRY):
        log.info("approval.expired", approval_id=approval.id, tool=approval.tool)
    return expired


async def expire_due(desk: ApprovalDesk) -> None:
    """The expiry sweep (every scheduler tick, and at start-up): approvals nobody decided in time."""
    for approval in await desk.store.due_approvals(now=desk.store.now()):
        await expire(desk, approval)


async def supersede_for_stop(desk: ApprovalDesk, run_id: str, *, by: str | None, why: str) -> None:
    """A stopped run asks nobody anything: its pending cards say so and stop taking clicks."""
    for approval in await desk.store.pending_approvals(run_id):
        await _transition(
            desk, approval, ApprovalState.SUPERSEDED, DecisionCause.STOP, by=by, reason=f"run stopped ({why})"
        )


async def _transition(
    desk: ApprovalDesk,
    approval: Approval,
    state: ApprovalState,
    cause: DecisionCause,
    *,
    by: str | None = None,
    reason: str | None = None,
) -> bool:
    """End a pending approval (compare-and-set: only one decision ever lands) and announce it."""
    if not await desk.store.decide_approval(
        approval.id, state=state, cause=cause, decided_by=by, reason=reason, decided_at=desk.store.now()
    ):
        return False  # decided meanwhile, here or in another process
    await _announce(desk, approval.id)
    return True


async def _announce(desk: ApprovalDesk, approval_id: str) -> None:
    """A decision landed: its card says so and its paused run is woken (here at once, rather than at the next
    poll)."""
    await desk.cards.show_card(await desk.store.get_approval(approval_id))
    desk.nudge()
