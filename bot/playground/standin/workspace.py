"""What the stand-in's Slack knows and how a test watches it: users, channels, messages, the recorded calls and
frames, seeding (``add_user``, ``add_channel``, ``add_message`` ...), lookups, and the waits that
wake on every change (never sleeps). The server and the Web API methods build on this state."""

# The waits take ``timeout=`` like asyncio.wait_for; that is this fake's public API.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from bot.playground.standin.records import (
    ApiCall,
    Message,
    ResponseUrlCall,
    ThreadStatus,
    _SlackError,
    next_ts,
)

T = TypeVar("T")

STATUS_EXPIRY_SECONDS = 120.0  # assistant.threads.setStatus: Slack drops a status this long after it was set
STREAM_LIFETIME_SECONDS = 300.0  # chat.startStream: Slack closes a stream about 5 minutes after it starts


class Workspace:
    """The state of the stand-in's Slack, its seeding, lookups and waits (``FakeSlack`` mixes in the rest)."""

    def __init__(
        self,
        bot_token: str = "xoxb-test",
        app_token: str = "xapp-test",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        team_id: str = "T1",
        *,
        app_id: str = "A1",
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.app_id = app_id

        # Observable state (plain attributes on purpose: tests read them directly).
        self.calls: list[ApiCall] = []
        self.messages: defaultdict[str, list[Message]] = defaultdict(list)  # per channel, in ts order
        self._at: dict[tuple[str, str], Message] = {}  # (channel, ts) -> its message, for `message`
        self.reactions: list[tuple[str, str, str]] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.responses: list[ResponseUrlCall] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.usergroup_handles: dict[str, str] = {}  # group id -> handle ("oncall"), for usergroups.list
        self.envelopes: list[dict[str, Any]] = []  # every envelope sent to the app
        self.frames: list[dict[str, Any]] = []  # every JSON frame the app sent back
        self.acks: dict[str, dict[str, Any]] = {}  # envelope_id -> first frame acking it
        self.acked_at: dict[str, float] = {}  # envelope_id -> when that frame was read (time.monotonic())
        self.connections = 0  # WebSocket connections accepted so far
        self.delivered_on: dict[str, int] = {}  # envelope_id -> number (1, 2, ...) of the connection it went to
        self._socket_numbers: dict[web.WebSocketResponse, int] = {}

        # assistant.threads.setStatus: (channel, thread_ts) -> the status last set; Slack drops it once it is
        # `status_expiry_seconds` old (shorten it in tests). `status_lapses` records every status that expired
        # before the next setStatus on its thread replaced it: (channel, thread_ts, status).
        self.statuses: dict[tuple[str, str], ThreadStatus] = {}
        self.status_expiry_seconds = STATUS_EXPIRY_SECONDS
        self.status_lapses: list[tuple[str, str, str]] = []
        self.home_views: dict[str, dict[str, Any]] = {}  # user -> the Home tab view views.publish published
        # Block types this workspace does not know (an older Slack): a message carrying one gets invalid_blocks.
        self.unsupported_block_types: set[str] = set()
        # chat.startStream: a stream's append/stop fail with message_not_in_streaming_state once it is this old
        # (shorten it in tests); the message stays as it was and chat.update still works on it.
        self.stream_lifetime_seconds = STREAM_LIFETIME_SECONDS
        self._stream_timers: set[asyncio.TimerHandle] = set()  # each stream's expiry, announced as a change

        self._response_urls: dict[str, tuple[str | None, str | None]] = {}
        self.channels: dict[str, dict[str, Any]] = {}  # conversations Slack knows (add_channel): id -> its record
        self._sockets: list[web.WebSocketResponse] = []
        self._changed_event = asyncio.Event()
        self._watchers: list[Callable[[], None]] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""  # set once the server listens
        self.add_user(bot_user_id, name="opsloop", is_bot=True)

    # ---- directory ---------------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        is_bot: bool = False,
        real_name: str | None = None,
    ) -> None:
        real_name = real_name or name.title()
        self.users[user_id] = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "tz": "UTC",
            "is_bot": is_bot,
            "is_app_user": False,
            "profile": {
                "display_name": name,
                "display_name_normalized": name,
                "real_name": real_name,
                "real_name_normalized": real_name,
                "team": self.team_id,
            },
        }

    def add_channel(
        self,
        channel_id: str,
        name: str,
        *,
        is_member: bool = True,
        members: Iterable[str] = (),
        kind: str = "public_channel",
    ) -> None:
        """A conversation Slack knows: `kind` is public_channel, private_channel, mpim or im; `members` are the
        people in it, plus the bot when `is_member`. Unknown ids answer channel_not_found, and so does a private
        one (private channel, mpim, DM) the bot is not in, as for a bot token on Slack."""
        people = set(members) | ({self.bot_user_id} if is_member else set())
        self.channels[channel_id] = {
            "id": channel_id,
            "name": name,
            "is_channel": kind == "public_channel",
            "is_member": is_member,
            "is_private": kind != "public_channel",
            "is_group": kind == "private_channel",
            "is_im": kind == "im",
            "is_mpim": kind == "mpim",
            "_kind": kind,
            "_members": people,
        }

    def add_message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        bot_id: str | None = None,
    ) -> Message:
        """Seed a message someone else posted (no event is delivered for it); `bot_id`: another bot's post."""
        msg = Message(
            channel=channel,
            ts=ts or next_ts(),
            text=text,
            user=user or None,
            bot_id=bot_id,
            subtype="bot_message" if bot_id else None,
            thread_ts=thread_ts,
            blocks=blocks,
            team=self.team_id,
        )
        self._add_message(msg)
        return msg

    def _add_message(self, msg: Message) -> None:
        """Kept in ts order by a binary insertion, so a post costs the same in a channel of thousands of runs (as
        in a bench) as in an empty one."""
        bisect.insort(self.messages[msg.channel], msg, key=lambda m: float(m.ts))
        self._at.setdefault((msg.channel, msg.ts), msg)  # the first with a ts, as a scan would find
        self._changed()

    def _remove_message(self, msg: Message) -> None:
        msgs = self.messages[msg.channel]
        msgs.remove(msg)
        if self._at.get(key := (msg.channel, msg.ts)) is msg:
            del self._at[key]
            if (same := next((m for m in msgs if m.ts == msg.ts), None)) is not None:
                self._at[key] = same

    # ---- lookups -----------------------------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        return self._at.get((channel, ts))

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """Root (if stored) and replies of a thread, oldest first."""
        return [m for m in self.messages.get(channel, []) if thread_ts in (m.ts, m.thread_ts)]

    def thread_status(self, channel: str, thread_ts: str) -> str | None:
        """The loading status a person sees under the thread now; None when none is set or it expired."""
        st = self.statuses.get((channel, thread_ts))
        if st is None or not st.status or time.monotonic() - st.set_at >= self.status_expiry_seconds:
            return None
        return st.status

    def _live_socket(self) -> web.WebSocketResponse | None:
        live = [ws for ws in self._sockets if not ws.closed]
        return live[-1] if live else None  # the newest connection wins

    # ---- waiting -----------------------------------------------------------------------------

    def _changed(self) -> None:
        """Wake every waiter; each re-checks its predicate. Watchers see every intermediate state."""
        self._changed_event.set()
        self._changed_event = asyncio.Event()
        for callback in list(self._watchers):
            callback()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (synchronously, on the loop) after every change; returns the unwatch function."""
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    async def _wait(self, check: Callable[[], T | None], timeout: float, what: Callable[[], str]) -> T:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # No await between the check and taking the event: no lost wake-ups.
                    result = check()
                    if result is not None:
                        return result
                    await self._changed_event.wait()
        except TimeoutError:
            raise TimeoutError(f"FakeSlack: timed out after {timeout}s waiting for {what()}") from None

    async def wait_until(self, check: Callable[[], T | None], timeout: float = 5.0, what: str = "a change") -> T:
        """The first value ``check`` returns that is not None, checked after every change."""
        return await self._wait(check, timeout, lambda: what)

    async def wait_for_message(
        self,
        channel: str,
        where: Callable[[Message], bool] | None = None,
        timeout: float = 5.0,
    ) -> Message:
        """The first message in ``channel`` matching ``where`` (edits count: state is live)."""

        def check() -> Message | None:
            return next((m for m in self.messages.get(channel, []) if where is None or where(m)), None)

        return await self._wait(
            check,
            timeout,
            lambda: f"a matching message in {channel}; there: {[m.text[:60] for m in self.messages.get(channel, [])]}",
        )

    async def wait_ack(self, envelope_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """The frame the app sent to ack ``envelope_id`` (``{"envelope_id", maybe "payload"}``)."""
        return await self._wait(lambda: self.acks.get(envelope_id), timeout, lambda: f"ack of {envelope_id}")

    async def wait_connected(self, timeout: float = 5.0, *, connects: int = 1) -> None:
        """Until a socket is open and at least ``connects`` sockets were accepted in total."""
        await self._wait(
            lambda: True if self._live_socket() is not None and self.connections >= connects else None,
            timeout,
            lambda: f"socket mode connection #{connects} (accepted so far: {self.connections})",
        )

    # ---- shared by the Web API methods -------------------------------------------------------

    @staticmethod
    def _channel(args: dict[str, Any]) -> str:
        channel = args.get("channel")
        if not channel:
            raise _SlackError("channel_not_found")
        return str(channel)

    def _bot_message_dict(self, msg: Message) -> dict[str, Any]:
        out = msg.to_api()
        out["app_id"] = self.app_id
        out["bot_profile"] = {"id": self.bot_id, "app_id": self.app_id, "name": "opsloop", "team_id": self.team_id}
        return out
