"""The one way out to Slack: every post, update, stream, status, ephemeral and reaction opsloop sends goes through
`SlackOut.call`.

Redaction happens there, once, for every text and block a call carries, so no caller can forget it.
`call` raises (the outbox and the stream retry or give up themselves); the best-effort forms log Slack's refusal
and swallow it (the client's retry handlers already absorbed 429/5xx): a message that could not be posted must
never crash a run or a listener.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.core.redact import redact, redact_value
from handlers.event_filters import dig

log = structlog.get_logger("opsloop.slack")

_REDACTED = frozenset({"text", "markdown_text", "status", "blocks", "loading_messages", "view"})  # what a call shows


def slack_error(e: Exception) -> str:
    """Slack's error code for a failed call ("not_in_channel"), else the exception's type."""
    response = getattr(e, "response", None)
    return str(response.get("error")) if response is not None and hasattr(response, "get") else type(e).__name__


@dataclass(frozen=True)
class SlackOut:
    """The redacting gateway over the Web API methods opsloop writes with."""

    client: AsyncWebClient

    async def call(self, method: str, **args: Any) -> Any:
        """`client.<method>(**args)` ("chat_postMessage") with every text it shows redacted; raises."""
        shown = {k: redact_value(v) if k in _REDACTED and v else v for k, v in args.items()}
        return await getattr(self.client, method)(**shown)

    async def attempt(self, method: str, *, what: str, **args: Any) -> Any | None:
        """`call`, best effort: Slack's refusal is logged as `{what}_failed` and answered None."""
        try:
            return await self.call(method, **args)
        except SlackApiError as e:
            where = {k: args[k] for k in ("channel", "ts", "thread_ts", "user_id") if k in args}
            log.warning(f"{what}_failed", error=e.response.get("error"), errors=e.response.get("errors"), **where)
            return None

    async def post(
        self,
        *,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        what: str = "post",
    ) -> str | None:
        """chat.postMessage: the new message's ts, or None when Slack refused it."""
        response = await self.attempt(
            "chat_postMessage", what=what, channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
        )
        return str(response["ts"]) if response is not None else None

    async def respond(self, *, response_url: str, text: str) -> bool:
        """An ephemeral note through a payload's response_url, redacted: it reaches the clicker where the bot can't
        post (a conversation it isn't in). Only to Slack's own hooks host (or the API's host: a local stand-in):
        the URL comes from a payload, and opsloop posts nowhere else. False when it was not sent."""
        if not _slack_hook(response_url, self.client.base_url):
            log.warning("respond_refused", host=urlsplit(response_url).hostname)
            return False
        try:
            response = await AsyncWebhookClient(response_url, timeout=10).send(
                text=redact(text), response_type="ephemeral", replace_original=False
            )
        except Exception as e:  # a dropped connection, a timeout: the note is lost, nothing else is
            log.warning("respond_failed", error=type(e).__name__)
            return False
        if response.status_code != 200:
            log.warning("respond_failed", status=response.status_code)
        return response.status_code == 200

    async def react(self, *, channel: str, ts: str, name: str = "eyes") -> None:
        """Acknowledge a stored message; a redelivery that already reacted is fine."""
        try:
            await self.client.reactions_add(channel=channel, timestamp=ts, name=name)
        except SlackApiError as e:
            if e.response.get("error") != "already_reacted":
                log.warning("reaction_failed", channel=channel, ts=ts, error=e.response.get("error"))


def _slack_hook(url: str, api_url: str) -> bool:
    """Whether `url` is Slack's: https on hooks.slack.com, or on the host the Web API is reached at."""
    u, api = urlsplit(url), urlsplit(api_url)
    if u.scheme == "https" and u.hostname == "hooks.slack.com":
        return True
    return bool(u.hostname) and (u.scheme, u.hostname, u.port) == (api.scheme, api.hostname, api.port)


async def ephemeral(out: SlackOut, body: dict[str, Any], text: str) -> None:
    """A note only the clicker sees, in the thread of the message they clicked."""
    channel = dig(body, "channel", "id") or dig(body, "container", "channel_id")
    user = dig(body, "user", "id")
    if channel and user:
        thread_ts = dig(body, "message", "thread_ts")
        await out.attempt(
            "chat_postEphemeral", what="ephemeral", channel=channel, user=user, text=text, thread_ts=thread_ts
        )
