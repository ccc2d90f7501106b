"""Who is in which conversation, as Slack says: what App Home may show a viewer (only the runs and approvals of
conversations they are in) and where the message shortcut may start a run (only where the bot is). Asked of
Slack, cached briefly, and failing closed: when Slack can't answer, the answer is None and nothing is shown."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from handlers.slack_out import slack_error
from handlers.slack_pages import slack_pages

log = structlog.get_logger("opsloop.membership")

TYPES = "public_channel,private_channel,mpim,im"
PAGE = 200
PAGES_MAX = 50  # 10,000 conversations: past that, what was read (a person is rarely in more)
# conversations.info's flags, in the order they decide what a conversation is
_KINDS = (
    ("is_im", "im"),
    ("is_mpim", "mpim"),
    ("is_private", "private"),
    ("is_group", "private"),
    ("is_channel", "public"),
)


class Membership:
    """users.conversations per viewer, cached for `cache_seconds`; conversations.info for the bot's own seat."""

    def __init__(self, client: AsyncWebClient, *, cache_seconds: float = 60.0) -> None:
        self.client, self.cache_seconds = client, cache_seconds
        self._of: dict[str, tuple[float, frozenset[str]]] = {}
        self._kinds: dict[str, tuple[float, str]] = {}  # a channel can be made private: kept `cache_seconds`

    async def conversations(self, user: str) -> frozenset[str] | None:
        """The ids of every conversation `user` is in (channels, private ones, group DMs, DMs); None when Slack
        could not say (the caller shows nothing then, rather than everything)."""
        cached = self._of.get(user)
        if cached and time.monotonic() - cached[0] < self.cache_seconds:
            return cached[1]
        found: set[str] = set()

        def page(cursor: str | None) -> Awaitable[Any]:
            return self.client.users_conversations(
                user=user, types=TYPES, limit=PAGE, exclude_archived=False, cursor=cursor
            )

        try:
            async for response in slack_pages(page, most=PAGES_MAX):
                found |= {str(c["id"]) for c in response.get("channels") or [] if isinstance(c, dict) and c.get("id")}
        except Exception as e:  # SlackApiError, a dropped connection, a timeout: no answer, so no access
            log.warning("membership.lookup_failed", user=user, error=slack_error(e))
            return None
        self._of[user] = (time.monotonic(), frozenset(found))
        return self._of[user][1]

    async def bot_is_in(self, channel: str) -> bool | None:
        """Whether the bot is in `channel` (a channel it joined, or a DM or group DM with it); None when Slack
        could not say. A conversation the bot can't see (a DM between two people) is channel_not_found: False; a DM
        the bot can read is a DM with the bot."""
        info = await self._info(channel)
        return None if info is None else bool(info.get("is_member") or info.get("is_im"))

    async def kind(self, channel: str, *, fresh: bool = False) -> str | None:
        """What conversations.info says `channel` is: public, private, im or mpim; None when Slack could not say
        (incident memory then keeps the run's record as private: fail closed). A known answer is reused for
        `cache_seconds`, unless `fresh` (what may widen a record's visibility asks Slack now)."""
        known = self._kinds.get(channel)
        if known and not fresh and time.monotonic() - known[0] < self.cache_seconds:
            return known[1]
        info = await self._info(channel)
        found = next((kind for flag, kind in _KINDS if info.get(flag)), None) if info is not None else None
        if found is None:
            return None
        self._kinds[channel] = (time.monotonic(), found)
        return found

    async def _info(self, channel: str) -> dict[str, Any] | None:
        """conversations.info's channel; {} when the bot can't see it (channel_not_found), None when Slack could
        not say."""
        try:
            return (await self.client.conversations_info(channel=channel)).get("channel") or {}
        except Exception as e:
            if slack_error(e) == "channel_not_found":
                return {}
            log.warning("membership.info_failed", channel=channel, error=slack_error(e))
            return None
