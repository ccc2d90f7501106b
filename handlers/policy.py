"""Who may approve, deny or stop: checked on the server for every click, failing closed."""

from __future__ import annotations

import enum
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config.settings import ApprovalSettings
from bot.core.types import InboxState
from handlers import messages

if TYPE_CHECKING:
    from bot.store import Ledger, Store

log = structlog.get_logger("opsloop.policy")


class Verdict(enum.Enum):
    """What the policy says about one click on an approval card."""

    ALLOWED = "allowed"
    NOT_AN_APPROVER = "not_an_approver"  # not on the approver list for this category
    STARTED_THE_RUN = "started_the_run"  # the run's requester, approving its destructive call
    ASKED_IN_THE_THREAD = "asked_in_the_thread"  # asked in the thread before the destructive call was made


class ApprovalPolicy:
    """Approver lists from config; user groups resolved through Slack and cached briefly."""

    def __init__(self, settings: ApprovalSettings, client: AsyncWebClient, *, cache_seconds: float = 300.0) -> None:
        self.settings, self.client, self.cache_seconds = settings, client, cache_seconds
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def verdict(
        self, user: str, *, category: str, approve: bool, run_requester: str | None, requesters: Collection[str]
    ) -> Verdict:
        """May `user` approve (or deny) a call of `category` that `requesters` asked for?

        Nobody who asked for a call may approve it where `refuses_self_approval` says so (destructive
        calls by default; mutating ones too with four_eyes_on_mutating): the run's requester, and whoever
        asked in the thread before the call was made. Denying is always allowed.
        """
        if not await self.may_approve(user, category):
            return Verdict.NOT_AN_APPROVER
        if approve and self.settings.refuses_self_approval(category):
            if user == run_requester:
                return Verdict.STARTED_THE_RUN
            if user in requesters:
                return Verdict.ASKED_IN_THE_THREAD
        return Verdict.ALLOWED

    def self_approval_matters(self, category: str, *, approve: bool) -> bool:
        """Whether the requesters of a call must be looked up before this click can be judged."""
        return approve and self.settings.refuses_self_approval(category)

    async def may_approve(self, user: str, category: str) -> bool:
        allowed = self.settings.who_may_approve(category)
        if not allowed:
            return True  # no approvers configured at all: anyone in the channel (`opsloop check` warns)
        if user in allowed:
            return True
        for entity in allowed:
            if entity.startswith("S") and user in await self._members(entity):
                return True
        return False

    def describe(self, category: str) -> str:
        allowed = self.settings.who_may_approve(category)
        return messages.join_or([messages.approver(a) for a in allowed]) if allowed else "anyone in the channel"

    async def _members(self, group: str) -> frozenset[str]:
        cached = self._groups.get(group)
        if cached and time.monotonic() - cached[0] < self.cache_seconds:
            return cached[1]
        try:
            response = await self.client.usergroups_users_list(usergroup=group)
            members = frozenset(response.get("users") or [])
        except SlackApiError as e:
            log.warning("usergroup_lookup_failed", usergroup=group, error=e.response.get("error"))
            members = cached[1] if cached else frozenset()  # fail closed unless we knew better
        self._groups[group] = (time.monotonic(), members)
        return members


def policy_lines(settings: ApprovalSettings) -> list[str]:
    """The effective approval policy, as `opsloop check` prints it: who may approve what, and who may not."""

    lines = []
    for category in ("mutating", "destructive"):
        n, allowed = settings.required(category), settings.who_may_approve(category)
        who = ", ".join(f"{a} (user group)" if a.startswith("S") else a for a in allowed) or "anyone in the channel"
        asker = (
            "not by whoever asked for the call (the run's requester, or anyone who asked in the thread)"
            if settings.refuses_self_approval(category)
            else "including whoever asked for the call"
        )
        lines.append(
            f"approvals: {category} calls: {n} approval{'s' if n > 1 else ''} from {who}, "
            f"{asker}; anyone allowed may deny"
        )
    lines.append(
        f"approvals: read-only calls run without asking; a card nobody decides expires after "
        f"{settings.expire_minutes:g} minutes (no consent)"
    )
    return lines


# --- who asked ---------------------------------------------------------------------------------------------
ASKING_STATES = (InboxState.CONSUMED, InboxState.SUPERSEDING)  # a thread message the run read before the call


def asked_for(db: Ledger, approval_id: str) -> list[str]:
    """Everyone who asked for the call behind an approval (none of them may approve it alone).

    The approval's requester, every earlier run's requester in the same thread (the run
    continues their history), each of those runs' askers (the author of the message a
    shortcut ran on, the authors of the thread messages a mid-thread mention read), and
    everyone whose thread messages were consumed into the history before the call: queued
    replies, redirect mentions and replies that superseded an earlier approval. Unknown
    approval: nobody. Read through the store's plain queries inside one unit (`requesters`),
    so a reply consumed meanwhile is never half seen.
    """
    approval = db.find_approval(approval_id)
    if approval is None:
        return []
    run = db.find_run(approval.run_id)
    if run is None:  # an approval whose run row is gone still names its requester
        return [approval.requester] if approval.requester else []
    earlier = [r for r in db.thread_runs(run.channel, run.thread_ts) if r.created_at <= run.created_at]
    found = {approval.requester, *(r.requester for r in earlier), *(a for r in earlier for a in r.askers)}
    for r in earlier:
        found |= {
            i.user
            for i in db.inbox(r.id)
            if i.state in ASKING_STATES and (r.id != run.id or i.created_at <= approval.created_at)
        }
    return sorted(u for u in found if u)


async def requesters(store: Store, approval_id: str) -> list[str]:
    """`asked_for`, as one unit on the store's thread (on the path of a click: urgent)."""
    return await store.atomically(lambda db: asked_for(db, approval_id), urgent=True)


def approval_warnings(settings: ApprovalSettings) -> list[str]:
    """What `opsloop check` warns about: settings that let anyone in a channel approve, or approve their own ask."""
    out = []
    if not settings.approvers:
        out.append(messages.ANYONE_MAY_APPROVE_MUTATING)
    if not settings.who_may_approve("destructive"):
        out.append(messages.ANYONE_MAY_APPROVE_DESTRUCTIVE)
    if settings.allow_self_approval:
        out.append(messages.SELF_APPROVAL_ALLOWED)
    return out
