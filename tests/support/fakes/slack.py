"""The Slack stand-in moved into the product (``bot/playground/standin/slack.py``); re-exported so tests import it here.

Tests get what only they use on top (the demo and the sandbox never do):

- failures: ``fail_next(method, error)`` makes the next calls of a Web API method fail, after the token check;
- incoming webhooks: ``add_incoming_webhook(channel)`` is a URL whose posts become a ``bot_message`` in the
  channel, delivered to the app as a ``message`` event (each body also kept in ``incoming_posts``);
- observing: ``calls_to(method)``, ``wait_for_call(method, where)`` and ``envelope(envelope_id)``; seeding
  ``add_usergroup``; a conversation converted by ``set_kind``; ``disconnect_socket()`` sends Slack's ``disconnect``
  message;
- delivery over several live sockets (two processes of one app): to the newest (``delivery = "newest"``, the
  default, as after a reconnect), ``"round_robin"`` (each envelope to the next socket, as Slack spreads them
  during a rolling deploy) or ``"random"`` (by the seeded ``rng``); ``with slack.to(n):`` sends every envelope
  of the block on connection number ``n`` (``LookupError`` when that connection is not open);
- ack timing: ``sent_at`` and the stand-in's ``acked_at`` (``time.monotonic()``) per envelope id, and
  ``ack_latency(envelope_id)`` between the two.
"""

# The waits take ``timeout=`` like asyncio.wait_for; that is this fake's public API.
# ruff: noqa: ASYNC109

import asyncio
import contextlib
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.playground.standin.records import _SlackError
from bot.playground.standin.slack import (
    ApiCall,
    Message,
    ResponseUrlCall,
    ThreadStatus,
    app_home_opened_event,
    block_action_payload,
    block_errors,
    mention_event,
    message_event,
    message_shortcut_payload,
    next_ts,
)
from bot.playground.standin.slack import FakeSlack as _StandIn

__all__ = [  # the stand-in's own list, with FakeSlack this subclass
    "ApiCall",
    "FakeSlack",
    "Message",
    "ResponseUrlCall",
    "ThreadStatus",
    "app_home_opened_event",
    "block_action_payload",
    "block_errors",
    "mention_event",
    "message_event",
    "message_shortcut_payload",
    "next_ts",
]

_ROUTE: ContextVar[int | None] = ContextVar("fake_slack_route", default=None)


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: int | None
    remaining: int


class FakeSlack(_StandIn):  # this subclass is the one tests get
    """The stand-in, plus what only tests use (see the module docstring)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rng = random.Random(0)  # "random" delivery; a test reseeds it for a replayable campaign
        self.sent_at: dict[str, float] = {}  # envelope_id -> when it was first handed to the socket
        self._by_id: dict[str, dict[str, Any]] = {}  # envelope_id -> envelope, from before it is sent
        self.delivery = "newest"  # or "round_robin", "random"
        self._round_robin = 0
        self._failures: defaultdict[str, list[_Failure]] = defaultdict(list)
        self.incoming_posts: list[dict[str, Any]] = []  # every body posted to an incoming webhook
        self._incoming: dict[str, tuple[str, str, str]] = {}  # hook id -> (channel, bot_id, app_id)
        self._deliveries: set[asyncio.Task[str]] = set()

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._deliveries):
            task.cancel()
        await asyncio.gather(*self._deliveries, return_exceptions=True)
        await super().__aexit__(*exc)

    # ---- seeding and observing ---------------------------------------------------------------

    def add_usergroup(self, group_id: str, users: Iterable[str], *, handle: str | None = None) -> None:
        self.usergroups[group_id] = list(users)
        self.usergroup_handles[group_id] = handle or group_id.lower()

    def set_kind(self, channel_id: str, kind: str) -> None:
        """Convert a conversation (a public channel made private, say): same name and members, and
        conversations.info answers the new kind from now on."""
        ch = self.channels[channel_id]
        members = set(ch["_members"])
        self.add_channel(
            channel_id,
            ch["name"],
            is_member=self.bot_user_id in members,
            members=members - {self.bot_user_id},
            kind=kind,
        )

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    async def wait_for_call(
        self,
        method: str,
        where: Callable[[ApiCall], bool] | None = None,
        timeout: float = 5.0,
    ) -> ApiCall:
        """The first call of ``method`` (already made or still to come) matching ``where``."""

        def check() -> ApiCall | None:
            return next((c for c in self.calls if c.method == method and (where is None or where(c))), None)

        return await self._wait(
            check,
            timeout,
            lambda: f"a matching {method} call; calls so far: {[(c.method, c.error) for c in self.calls]}",
        )

    def ack_latency(self, envelope_id: str) -> float:
        """Seconds from writing the envelope to reading its ack (KeyError until both happened)."""
        return self.acked_at[envelope_id] - self.sent_at[envelope_id]

    # ---- failures ----------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        *,
        status: int | None = None,
        retry_after: int = 1,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail (after the token check).

        ``status`` defaults to 429 for ``ratelimited`` (sent with ``Retry-After``), 500
        for ``internal_error``/``fatal_error``, otherwise 200 (a plain ``ok: false``).
        """
        if status is None:
            status = 429 if error == "ratelimited" else 500 if error in ("internal_error", "fatal_error") else 200
        self._failures[method].append(_Failure(error, status, retry_after if status == 429 else None, times))

    def _check_token(self, method: str, token: str | None) -> None:
        super()._check_token(method, token)
        queue = self._failures.get(method)
        if not queue:
            return
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.pop(0)
        headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
        raise _SlackError(failure.error, status=failure.status, headers=headers)

    # ---- incoming webhooks -------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = super()._app()
        app.router.add_post("/services/{hook}", self._handle_incoming_webhook)
        return app

    def add_incoming_webhook(self, channel: str, *, bot_id: str = "B0ALERTMGR", app_id: str | None = None) -> str:
        """An incoming-webhook URL that posts into `channel` as the integration `bot_id`, as Slack's do: the
        post becomes a `bot_message` in the channel, delivered to the app as a `message` event."""
        hook = uuid.uuid4().hex
        self._incoming[hook] = (channel, bot_id, app_id or "A" + bot_id[1:])
        return f"{self.base_url}/services/{hook}"

    async def _handle_incoming_webhook(self, request: web.Request) -> web.Response:
        target = self._incoming.get(request.match_info["hook"])
        if target is None:
            return web.Response(status=404, text="no_service")
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(body, dict) or not (body.get("text") or body.get("attachments") or body.get("blocks")):
            return web.Response(status=400, text="no_text")
        channel, bot_id, app_id = target
        self.incoming_posts.append(body)
        ts = next_ts()
        msg = Message(
            channel=channel,
            ts=ts,
            text=str(body.get("text") or ""),
            bot_id=bot_id,
            subtype="bot_message",
            blocks=body.get("blocks"),
            attachments=body.get("attachments"),
            team=self.team_id,
        )
        self._add_message(msg)
        event: dict[str, Any] = {
            **msg.to_api(),
            "channel": channel,
            "event_ts": ts,
            "channel_type": "channel",
            "app_id": app_id,
            "username": str(body.get("username") or "incoming-webhook"),
        }
        task = asyncio.create_task(self.send_event(event))  # Slack answers the webhook before delivering the event
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)
        return web.Response(text="ok")

    # ---- Socket Mode ---------------------------------------------------------------------------

    async def disconnect_socket(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message; the SDK then reconnects on a new socket."""
        ws = self._live_socket()
        if ws is None:
            raise RuntimeError("no Socket Mode connection to disconnect")
        await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

    def envelope(self, envelope_id: str) -> dict[str, Any] | None:
        """An envelope by id, known from just before it is sent (so a watcher can read an ack that
        arrives while the send is still returning)."""
        return self._by_id.get(envelope_id)

    async def _send_envelope(self, envelope: dict[str, Any], timeout: float) -> None:
        self._by_id[envelope["envelope_id"]] = envelope
        self.sent_at.setdefault(envelope["envelope_id"], time.monotonic())
        await super()._send_envelope(envelope, timeout)

    @contextlib.contextmanager
    def to(self, connection: int) -> Iterator[None]:
        """Envelopes sent inside the block (by this task) go to connection `connection` (1 = first accepted)."""
        token = _ROUTE.set(connection)
        try:
            yield
        finally:
            _ROUTE.reset(token)

    def _pick_socket(self) -> web.WebSocketResponse | None:
        """The socket for the next envelope: routed by `to`, else by ``delivery`` (round robin advances once
        per envelope)."""
        live = [ws for ws in self._sockets if not ws.closed]
        wanted = _ROUTE.get()
        if wanted is not None:
            ws = next((ws for ws in live if self._socket_numbers.get(ws) == wanted), None)
            if ws is None:
                raise LookupError(f"Socket Mode connection #{wanted} is not open")
            return ws
        if self.delivery == "random" and live:
            return self.rng.choice(live)
        if self.delivery == "round_robin" and live:
            self._round_robin += 1
            return live[self._round_robin % len(live)]
        return super()._pick_socket()
