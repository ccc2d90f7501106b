"""The approval lifecycle, in one place: ask, decide (clicks), supersede (a reply, a Stop, a changed call) and
expire. An approval is a stored pause: `ask` ends the run's drive while it is pending, and every decision,
made by whichever process received it, goes through `_announce` (the card updated via the outbox, the paused
run woken; the scheduler of any process resumes it from the store). Who may click is checked here, on the
server, for every click, failing closed; N of M is counted here (`count_approval`), and so is a reply's supersede
(`supersede_by_reply`), both over the store's plain writes: the store runs the reply rule inside the transaction
that stores the reply (store-then-ack), and `superseded_by_reply` announces it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from bot.core.types import Approval, ApprovalState, ConfirmRequest, Decision, DecisionCause, InboxItem, InboxState, Run
from bot.run.guards import Pause
from handlers import blocks, messages
from handlers.event_filters import dig
from handlers.names import SlackNames
from handlers.outbox import Cards, Failure, Outbox, card_key, classify, posted_item
from handlers.policy import ApprovalPolicy, Verdict, requesters
from handlers.slack_out import ephemeral

if TYPE_CHECKING:
    from bot.config.settings import ApprovalSettings
    from bot.store import Ledger, Store

log = structlog.get_logger("opsloop.approvals")


@dataclass(frozen=True)
class ApprovalDesk:
    """What the approval lifecycle uses: the store, the approval settings and policy, the cards (the outbox, the
    gateway and the after-ack set) and a way to wake the scheduler once a decision lands."""

    store: Store
    settings: ApprovalSettings
    policy: ApprovalPolicy
    cards: Cards
    names: SlackNames  # display names for the audit log (display only, never who may approve)
    nudge: Callable[[], None]


class Thread(Protocol):
    """Where a run asks: its thread and who started it."""

    channel: str
    thread_ts: str
    requester: str


# --- ask ------------------------------------------------------------------------------------------
async def ask(desk: ApprovalDesk, thread: Thread, req: ConfirmRequest) -> Decision:
    """The runtime's confirm: the decision on this call, or `Pause` while nobody has decided yet."""
    store, settings = desk.store, desk.settings
    approval = await store.approval_for_call(req.run_id, req.call.id)
    # Bound to the call's arguments, and, while nobody has decided yet, to the preview the card shows: a
    # changed preview asks again. Once decided, the decision stands on the preview the person read.
    bound = (
        approval is not None
        and approval.args_hash == req.args_hash
        and (not approval.pending or approval.preview_hash == req.preview_hash)
    )
    if approval is None or not bound:
        if approval is not None and approval.pending:  # that consent is void: the card says why
            await _transition(
                desk,
                approval,
                state=ApprovalState.SUPERSEDED,
                cause=DecisionCause.CHANGED_CALL,
                reason="the call changed (arguments or dry-run preview); a new approval was requested",
            )
        run = await store.get_run(req.run_id)
        approval = await store.create_approval(
            run_id=req.run_id,
            tool_use_id=req.call.id,
            tool=req.call.name,
            category=req.category,
            args=req.call.args,
            args_hash=req.args_hash,
            preview=req.preview,
            preview_hash=req.preview_hash,
            requester=thread.requester,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            required=settings.required(req.category),
            expires_at=store.now() + settings.expire_minutes * 60,
            run_tokens=run.paid_tokens,
            run_cost_usd=run.cost_usd,
        )
    if approval.pending and not approval.message_ts:
        # Stored, then sent by the outbox (exactly once, however often this runs); the sender records the
        # card's ts on the approval.
        await desk.cards.outbox.post(
            run_id=req.run_id,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            msg=blocks.approval_card(approval),
            key=card_key(approval.id),
            approval_id=approval.id,
        )
    approval = await store.get_approval(approval.id)
    if approval.pending and store.now() >= (approval.expires_at or 0.0):
        await expire(desk, approval)
        approval = await store.get_approval(approval.id)
    if approval.pending:
        # A stored pause: this drive ends; a click, a reply, the expiry sweep or a Stop decides it (in any
        # process) and the run resumes from the store, back here with the decision.
        raise Pause(f"waiting for a decision on {approval.tool} ({approval.id})")
    return decision_of(approval)


def decision_of(approval: Approval) -> Decision:
    if approval.state == ApprovalState.APPROVED:
        return Decision(approved=True, confirmed_by=approval.decided_by, preview=approval.preview)
    return Decision(
        approved=False,
        confirmed_by=approval.decided_by,
        reason=approval.reason or "",
        outcome=approval.state.value,
        preview=approval.preview,
    )


# --- decide (clicks) -----------------------------------------------------------------------------
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


async def on_decision(desk: ApprovalDesk, body: dict[str, Any], *, approve: bool) -> None:
    user = dig(body, "user", "id")
    approval_id = dig(body, "actions", 0, "value") or ""
    if not user:
        log.warning("action.malformed", missing=["user.id"])
        return
    refusal = await decide(desk, approval_id, user, approve=approve, where=clicked(body))
    if refusal:
        log.info("approval.refused", approval_id=approval_id, user=user, why=refusal)
        desk.cards.after_ack.spawn(ephemeral(desk.cards.out, body, refusal), name="refusal")  # off the ack path


async def decide(desk: ApprovalDesk, approval_id: str, user: str, *, approve: bool, where: Clicked) -> str | None:
    """Apply one click. Returns the explanation for the clicker when it changes nothing.

    A click counts only from the approval's card (`_off_its_card`): the button value alone is no proof. That
    card can be a copy the store has no ts of: a bot stopped between posting a card and storing its ts (and a
    resumed run posts the card again). The clicked copy is then recorded, and closed along with the other.
    """
    store = desk.store
    a = await store.find_approval(approval_id)
    if a is None:
        return messages.UNKNOWN_APPROVAL
    if off := await _off_its_card(desk, a, where):
        log.warning("approval.click_refused", approval_id=a.id, user=user, channel=where.channel, ts=where.ts)
        return off
    clicked_ts = where.ts
    if not a.pending:
        # Show the decision again (idempotent by key): a crash between a decision and its card update would
        # otherwise leave the buttons up for good.
        await desk.cards.update_card(a)
        await _close_stale_card(desk, a, clicked_ts)
        return messages.already_decided(a.state, a.decided_by)
    if store.now() >= (a.expires_at or 0.0):
        if await expire(desk, a):
            await _close_stale_card(desk, await store.get_approval(a.id), clicked_ts)
        return messages.approval_expired(a.tool)
    refusal = await _refusal(desk, a, user, approve=approve)
    if refusal:
        return refusal
    if approve and user in a.approvals:
        return messages.ALREADY_APPROVED_BY_YOU
    name = await desk.names.user(user)
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
    if not changed:
        fresh = await store.get_approval(a.id)
        return messages.already_decided(fresh.state, fresh.decided_by)
    fresh = await store.get_approval(a.id)
    if clicked_ts and not fresh.message_ts:
        await store.set_card_ts(a.id, clicked_ts, expect=fresh.state)
    await _announce(desk, a.id)
    await _close_stale_card(desk, await store.get_approval(a.id), clicked_ts)
    return None


async def _off_its_card(desk: ApprovalDesk, a: Approval, where: Clicked) -> str | None:
    """None when the click came from this approval's card, else why it does not count (failing closed).

    Its card is the message on record, the outbox's post of it, or a post of that outbox item whose ts the store
    never learnt (crash recovery): Slack is asked for the clicked message, which must be in the approval's
    thread, posted by this bot, with metadata naming the card's outbox item. Only that rare case asks Slack.
    """
    if not where.channel or not where.ts or where.channel != a.channel:
        return messages.CLICK_NOT_ON_ITS_CARD
    if where.ts == a.message_ts:
        return None
    card = await desk.store.outbox_by_key(card_key(a.id))
    if card is None or card.channel != a.channel or not a.thread_ts:
        return messages.CLICK_NOT_ON_ITS_CARD
    if where.ts == card.ts:
        return None
    found = await bot_post_in_thread(desk.cards.outbox, channel=a.channel, thread_ts=a.thread_ts, ts=where.ts)
    if isinstance(found, Failure):  # fail closed; a transient failure is worth another click
        log.warning("approval.card_check_failed", approval_id=a.id, error=found.error)
        return messages.CARD_NOT_CHECKED if found.transient else messages.CLICK_NOT_ON_ITS_CARD
    if found is not None and posted_item(found) == card.id:
        log.info("approval.card_copy", approval_id=a.id, ts=where.ts)
        return None
    return messages.CLICK_NOT_ON_ITS_CARD


async def bot_post_in_thread(
    outbox: Outbox, *, channel: str, thread_ts: str, ts: str
) -> dict[str, Any] | Failure | None:
    """The message at `ts` in the thread if this bot posted it; None if it did not (or no such message); the
    Failure when Slack could not be asked. For clicks on a card or status message whose ts is not on record."""
    try:
        msg = await outbox.message_in_thread(channel=channel, thread_ts=thread_ts, ts=ts)
    except Exception as e:
        return classify(e)
    return msg if msg is not None and outbox.bot_user_id and msg.get("user") == outbox.bot_user_id else None


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


async def _refusal(desk: ApprovalDesk, a: Approval, user: str, *, approve: bool) -> str | None:
    """Why this click may not decide the approval, or None. Decided here, on the server, failing closed."""
    policy = desk.policy
    asked = await requesters(desk.store, a.id) if policy.self_approval_matters(a.category, approve=approve) else []
    verdict = await policy.verdict(
        user, category=a.category, approve=approve, run_requester=a.requester, requesters=asked
    )
    if verdict is Verdict.NOT_AN_APPROVER:
        return messages.not_allowed_to_approve(a.tool, a.category, policy.describe(a.category))
    if verdict is Verdict.STARTED_THE_RUN:
        return messages.self_approval_refused(a.tool, a.category)
    if verdict is Verdict.ASKED_IN_THE_THREAD:
        return messages.asked_in_thread_refused(a.tool, a.category)
    if approve and not blocks.offers_approve(blocks.approval_card(dataclasses.replace(a, state=ApprovalState.PENDING))):
        return messages.args_not_shown_refused(a.tool)  # the card could not show everything that would run
    return None


async def _close_stale_card(desk: ApprovalDesk, approval: Approval, clicked_ts: str | None) -> None:
    """A click on a copy of the card that is not the one on record (`_off_its_card` said it is a copy of this
    approval's card, never another message): show it the decision too."""
    if clicked_ts and clicked_ts != approval.message_ts and not approval.pending:
        await desk.cards.update_card(dataclasses.replace(approval, message_ts=clicked_ts))


# --- supersede and expire ------------------------------------------------------------------------
async def expire(desk: ApprovalDesk, approval: Approval) -> bool:
    """No decision in time: "no consent". The card says so and the paused run resumes with it."""
    expired = await _transition(desk, approval, state=ApprovalState.EXPIRED, cause=DecisionCause.EXPIRY)
    if expired:
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
            desk,
            approval,
            state=ApprovalState.SUPERSEDED,
            cause=DecisionCause.STOP,
            by=by,
            reason=f"run stopped ({why})",
        )


async def superseded_by_reply(desk: ApprovalDesk, approval_ids: tuple[str, ...] | list[str]) -> None:
    """A thread reply superseded these (in the store, in the transaction that stored the reply): announce it."""
    for approval_id in approval_ids:
        await _announce(desk, approval_id)


async def _transition(
    desk: ApprovalDesk,
    approval: Approval,
    *,
    state: ApprovalState,
    cause: DecisionCause,
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
    """A decision landed: its card says so (an outbox update) and its paused run is woken."""
    await desk.cards.update_card(await desk.store.get_approval(approval_id))
    desk.nudge()  # its paused run is runnable now: resume it here at once rather than at the next poll
