"""The thread's loading status (assistant.threads.setStatus) while a run's drive works: what it is doing now
("reading /var/log/nginx on web-03…"), refreshed before Slack drops it (2 minutes after it was set), cleared
when the run answers, pauses or stops. It complements the status message with its Stop button; it replaces
nothing, so a workspace without the method loses only this line."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

from handlers import messages

if TYPE_CHECKING:
    from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.supervisor")

# Slack's answers that mean "this workspace or token can't have a loading status": stop asking for this drive.
UNSUPPORTED = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated",
                         "feature_not_enabled", "not_an_assistant_thread", "thread_not_found", "channel_not_found"})


class LoadingStatus:
    """One drive's loading status under its thread. `show` never waits on Slack: a task sends it."""

    def __init__(self, out: SlackOut, channel: str, thread_ts: str, *, refresh_seconds: float) -> None:
        self.out, self.channel, self.thread_ts = out, channel, thread_ts
        self.refresh_seconds = refresh_seconds
        self.text: str | None = None  # what the thread shows now (None: nothing set by this drive)
        self.sent = False  # a status was set at least once: clearing it means a call
        self._changed = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._unsupported = False

    def show(self, text: str) -> None:
        """Show `text` under the thread from now on (and keep it there) until something else is shown."""
        if self._unsupported:
            return
        if text != self.text:
            self.text = text
            self._changed.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name=f"loading:{self.thread_ts}")

    async def _send(self) -> None:
        """Set the status now, then again every `refresh_seconds` (under Slack's expiry) or when it changes."""
        while self.text is not None and not self._unsupported:
            self._changed.clear()
            error = await self.out.set_status(channel=self.channel, thread_ts=self.thread_ts, status=self.text,
                                                  loading_messages=list(messages.LOADING_MESSAGES))
            self.sent = self.sent or error is None
            if error in UNSUPPORTED:
                self._unsupported = True
                log.info("loading_status.unsupported", error=error)
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.refresh_seconds):
                    await self._changed.wait()  # a new activity, or the refresh before Slack's expiry

    def leave(self) -> None:
        """Stop refreshing and leave what the thread shows to lapse: a run paused for an approval has no drive
        left to refresh it, and "waiting for approval from @carol" stays true until someone decides."""
        if self._sender is not None:
            self._sender.cancel()
        self.text = None

    async def clear(self) -> None:
        """The drive answers or stops: the thread shows no loading status any more."""
        self.leave()
        if self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        if self.sent and not self._unsupported:
            await self.out.set_status(channel=self.channel, thread_ts=self.thread_ts, status="")
            self.sent = False
