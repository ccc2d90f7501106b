"""Who may approve, deny or stop: checked on the server for every click."""

from __future__ import annotations

import time
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ApprovalSettings
from handlers import messages

log = structlog.get_logger("opsloop.policy")


class ApprovalPolicy:
    """Approver lists from config; user groups resolved through Slack and cached briefly."""

    def __init__(self, settings: ApprovalSettings, client: AsyncWebClient, *, cache_seconds: float = 300.0) -> None:
        self.settings, self.client, self.cache_seconds = settings, client, cache_seconds
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}
        self._names: dict[str, str] = {}

    async def may_approve(self, user: str, category: str) -> bool:
        allowed = self.settings.who_may_approve(category)
        if not allowed:
            return True  # empty list: anyone in the channel
        if user in allowed:
            return True
        for entity in allowed:
            if entity.startswith("S") and user in await self._members(entity):
                return True
        return False

    def describe(self, category: str) -> str:
        allowed = self.settings.who_may_approve(category)
        if not allowed:
            return "anyone in the channel"
        return messages.join_or([messages.approver(a) for a in allowed])

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

    async def display_name(self, user: str) -> str:
        if user not in self._names:
            try:
                response = await self.client.users_info(user=user)
                u: dict[str, Any] = response.get("user") or {}
                profile = u.get("profile") or {}
                self._names[user] = profile.get("display_name") or u.get("real_name") or u.get("name") or user
            except SlackApiError:
                return user
        return self._names[user]


def approval_warnings(settings: ApprovalSettings) -> list[str]:
    """What `opsloop check` warns about: approval lists that let anyone in a channel approve."""
    out = []
    if not settings.approvers:
        out.append("approvals.approvers is empty: anyone in the channel may approve mutating calls")
    if not settings.who_may_approve("destructive"):
        out.append("nobody is named for destructive calls (approvals.destructive_approvers, approvals.approvers): "
                   "anyone in the channel may approve them")
    return out
