"""People's display names (users.info) and user groups' handles (usergroups.list), asked of Slack and cached
briefly in one place. Display only, never authorization: when Slack can't answer, the name is the id itself, and
the next look-up after a short pause asks again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from handlers.messages import GROUP_ID, USER_ID
from handlers.slack_out import slack_error

log = structlog.get_logger("opsloop.names")


class SlackNames:
    """Display names and user-group handles, each cached for `cache_seconds` (a failed look-up for a tenth of
    that); a look-up waits at most `timeout_seconds` (a slow Slack shows the id, never holds a run back)."""

    def __init__(self, client: AsyncWebClient, *, cache_seconds: float = 300.0, timeout_seconds: float = 3.0) -> None:
        self.client, self.cache_seconds, self.timeout_seconds = client, cache_seconds, timeout_seconds
        self._users: dict[str, tuple[float, str]] = {}  # user id -> (expires at, display name or the id)
        self._groups: tuple[float, dict[str, str]] | None = None  # (expires at, group id -> handle)

    async def user(self, user_id: str) -> str:
        """The person's display name (else real name, else user name); the id when Slack can't say."""
        cached = self._users.get(user_id)
        if cached and time.monotonic() < cached[0]:
            return cached[1]
        try:
            async with asyncio.timeout(self.timeout_seconds):
                response = await self.client.users_info(user=user_id)
            u: dict[str, Any] = response.get("user") or {}
            profile = u.get("profile") or {}
            name = str(profile.get("display_name") or u.get("real_name") or u.get("name") or user_id)
            ttl = self.cache_seconds
        except Exception as e:  # SlackApiError, a dropped connection, a timeout: show the id for now
            log.warning("names.user_lookup_failed", user=user_id, error=slack_error(e))
            name, ttl = (cached[1] if cached else user_id), self.cache_seconds / 10
        self._users[user_id] = (time.monotonic() + ttl, name)
        return name

    async def group(self, group_id: str) -> str:
        """The user group's handle ("oncall", shown as @oncall); the id when Slack can't say."""
        if self._groups is None or time.monotonic() >= self._groups[0]:
            try:
                async with asyncio.timeout(self.timeout_seconds):
                    response = await self.client.usergroups_list()
                handles = {
                    str(g["id"]): str(g.get("handle") or g.get("name") or g["id"])
                    for g in response.get("usergroups") or []
                    if isinstance(g, dict) and g.get("id")
                }
                self._groups = (time.monotonic() + self.cache_seconds, handles)
            except Exception as e:
                log.warning("names.usergroups_lookup_failed", error=slack_error(e))
                known = self._groups[1] if self._groups else {}
                self._groups = (time.monotonic() + self.cache_seconds / 10, known)
        return self._groups[1].get(group_id, group_id)

    async def of(self, entities: Iterable[str]) -> dict[str, str]:
        """id -> name for every user (`U…`/`W…`) and user group (`S…`) id among `entities`; other entries are
        left out (they are shown as written)."""
        return {
            e: await (self.user(e) if USER_ID.match(e) else self.group(e))
            for e in entities
            if USER_ID.match(e) or GROUP_ID.match(e)
        }
