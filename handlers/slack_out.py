"""The one way out to Slack: every post, update, ephemeral and reaction opsloop sends goes through here.

Redaction happens here, once, for text and blocks alike, so no caller can forget it.
Slack errors are logged and swallowed (retry handlers already absorbed 429/5xx): a
message that could not be posted must never crash a run or a listener.
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


@dataclass(frozen=True)
class SlackOut:
    """Redacting wrapper over the Web API methods opsloop writes with."""

    client: AsyncWebClient

    async def post(
        self,
        *,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        what: str = "post",
    ) -> str | None:
        """chat.postMessage, redacted; the new message's ts, or None when Slack refused it."""
        try:
            response = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=redact(text), blocks=redact_value(blocks)
            )
            return str(response["ts"])
        except SlackApiError as e:
            log.error(f"{what}_failed", channel=channel, error=e.response.get("error"))
            return None

    async def post_or_raise(
        self,
        *,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]] | None,
        metadata: dict[str, Any],
    ) -> str:
        """chat.postMessage, redacted, carrying message metadata; raises, for the outbox to retry or give up."""
        response = await self.client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=redact(text), blocks=redact_value(blocks), metadata=metadata
        )
        return str(response["ts"])

    async def update_or_raise(
        self,
        *,
        channel: str,
        ts: str,
        text: str,
        blocks: list[dict[str, Any]] | None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """chat.update, redacted (with message metadata when given); raises, for the outbox to retry or give up."""
        await self.client.chat_update(
            channel=channel, ts=ts, text=redact(text), blocks=redact_value(blocks), metadata=metadata
        )

    async def start_stream_or_raise(
        self, *, channel: str, thread_ts: str, markdown_text: str, recipient_user_id: str, recipient_team_id: str
    ) -> str:
        """chat.startStream, redacted: the streamed message's ts; raises (startStream takes no metadata)."""
        response = await self.client.chat_startStream(
            channel=channel,
            thread_ts=thread_ts,
            markdown_text=redact(markdown_text),
            recipient_user_id=recipient_user_id,
            recipient_team_id=recipient_team_id,
        )
        return str(response["ts"])

    async def append_stream_or_raise(self, *, channel: str, ts: str, markdown_text: str) -> None:
        """chat.appendStream, redacted; raises (e.g. message_not_in_streaming_state once Slack closed it)."""
        await self.client.chat_appendStream(channel=channel, ts=ts, markdown_text=redact(markdown_text))

    async def stop_stream_or_raise(
        self,
        *,
        channel: str,
        ts: str,
        markdown_text: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """chat.stopStream, redacted: the rest of the text, blocks under it and the message metadata; raises."""
        await self.client.chat_stopStream(
            channel=channel,
            ts=ts,
            markdown_text=redact(markdown_text) if markdown_text else None,
            blocks=redact_value(blocks) if blocks else None,
            metadata=metadata,
        )

    async def update(
        self,
        *,
        channel: str,
        ts: str,
        text: str,
        blocks: list[dict[str, Any]] | None,
        what: str = "update",
        **context: Any,
    ) -> bool:
        """chat.update, redacted; False when Slack refused it."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=redact(text), blocks=redact_value(blocks))
            return True
        except SlackApiError as e:
            log.warning(f"{what}_failed", channel=channel, ts=ts, error=e.response.get("error"), **context)
            return False

    async def set_status(
        self, *, channel: str, thread_ts: str, status: str, loading_messages: list[str] | None = None
    ) -> str | None:
        """assistant.threads.setStatus, redacted ("" clears it); None when set, else Slack's error."""
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=channel,
                thread_ts=thread_ts,
                status=redact(status),
                loading_messages=[redact(m) for m in loading_messages] if loading_messages else None,
            )
            return None
        except SlackApiError as e:
            error = str(e.response.get("error") or "error")
            log.warning("set_status_failed", channel=channel, thread_ts=thread_ts, error=error)
            return error

    async def publish_home(self, *, user: str, blocks: list[dict[str, Any]]) -> bool:
        """views.publish of a Home tab, redacted; False when Slack refused it."""
        try:
            await self.client.views_publish(user_id=user, view={"type": "home", "blocks": redact_value(blocks)})
            return True
        except SlackApiError as e:
            log.warning(
                "home_publish_failed", user=user, error=e.response.get("error"), errors=e.response.get("errors")
            )
            return False

    async def ephemeral(self, *, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        """chat.postEphemeral, redacted: a note only `user` sees."""
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=redact(text), thread_ts=thread_ts)
        except SlackApiError as e:
            log.warning("ephemeral_failed", channel=channel, error=e.response.get("error"))

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
    if not channel or not user:
        return
    thread_ts = dig(body, "message", "thread_ts")
    await out.ephemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
