"""The thread's loading status (assistant.threads.setStatus) while a run's drive works: what it is doing now
("reading /var/log/nginx on web-03…"), refreshed before Slack drops it (2 minutes after it was set), cleared
when the run answers, pauses or stops. It complements the status message with its Stop button; it replaces
nothing, so a workspace without the method loses only this line.

Coalesced: a text is sent only once it has stood for `loading_show_after_seconds`, and at most one update
goes out per `loading_min_interval_seconds`; a step that ends before its text would show sends nothing (the
deferred send is replaced by the next step's text, or dropped when the drive ends). A 20-step run that
answers in a second sends no status at all instead of 42."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from slack_sdk.errors import SlackApiError

from handlers import messages
from handlers.slack_out import slack_error

if TYPE_CHECKING:
    from bot.core.types import Run
    from handlers.supervisor.driver import Driver

log = structlog.get_logger("opsloop.supervisor")

# Slack's answers that mean "this workspace or token can't have a loading status": stop asking for this drive.
UNSUPPORTED = {"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated"}
UNSUPPORTED |= {"feature_not_enabled", "not_an_assistant_thread", "thread_not_found", "channel_not_found"}


class LoadingStatus:
    """One drive's loading status under its thread. `show` never waits on Slack: a task sends it."""

    def __init__(self, slack: Driver, row: Run) -> None:
        self.slack, self.channel, self.thread_ts = slack, row.channel, row.thread_ts
        self.text: str | None = None  # what the thread should show now (None: nothing from this drive)
        self.shown: str | None = None  # what the last successful call set
        # A status may be up (this drive's, or one an earlier drive of the run left: a pause, a restart): clearing
        # it means a call.
        self.sent = row.system is not None
        self._changed = asyncio.Event()
        self._sender: asyncio.Task[object] | None = None
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
        """Wait until the text has stood long enough, set it, then set it again when it changes (no sooner than
        `loading_min_interval_seconds` after the last call) or every `loading_refresh_seconds` (under Slack's
        expiry)."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.slack.loading_show_after_seconds)
        while self.text is not None and not self._unsupported:
            self._changed.clear()
            if not await self._set(self.text):
                return
            last = loop.time()
            while True:
                try:  # a new activity, or the refresh before Slack's expiry
                    async with asyncio.timeout_at(last + self.slack.loading_refresh_seconds):
                        await self._changed.wait()
                except TimeoutError:
                    break
                await asyncio.sleep(max(0.0, last + self.slack.loading_min_interval_seconds - loop.time()))
                if self.text != self.shown:
                    break
                self._changed.clear()  # changed and changed back before it would have shown: nothing to send

    async def _set(self, text: str) -> bool:
        """One call ("" clears it); False when this workspace can't have a loading status."""
        try:
            await self.slack.out.call(
                "assistant_threads_setStatus",
                channel_id=self.channel,
                thread_ts=self.thread_ts,
                status=text,
                loading_messages=list(messages.LOADING_MESSAGES) if text else None,
            )
        except SlackApiError as e:
            error = slack_error(e)
            log.warning("set_status_failed", channel=self.channel, thread_ts=self.thread_ts, error=error)
            if error in UNSUPPORTED:
                self._unsupported = True
                log.info("loading_status.unsupported", error=error)
                return False
            return True
        self.sent, self.shown = bool(text), text or None
        return True

    def _stop(self) -> None:
        if self._sender is not None:
            self._sender.cancel()

    def leave(self) -> None:
        """Stop refreshing and leave what the thread shows to lapse: a run paused for an approval has no drive
        left to refresh it, and "waiting for approval from @carol" stays true until someone decides. A text
        still waiting for its turn is sent now, once: it is what stays up."""
        self._stop()
        text, self.text = self.text, None
        if text is not None and text != self.shown and not self._unsupported:
            self._sender = asyncio.create_task(self._set(text), name=f"loading_last:{self.thread_ts}")

    async def clear(self) -> None:
        """The drive answers or stops: the thread shows no loading status any more (no call if none was set)."""
        self._stop()
        self.text = None
        if self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        if self.sent and not self._unsupported:
            await self._set("")
            self.sent, self.shown = False, None
