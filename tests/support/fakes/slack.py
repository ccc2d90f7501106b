"""The Slack stand-in moved into the product (``bot/playground/standin/slack.py``); re-exported so tests import it here.

Tests get one addition on top (the replica tests need it): ``delivery = "random"`` spreads envelopes over the
live sockets by the seeded ``rng``, and ``with slack.to(n):`` sends every envelope of the block on connection
number ``n`` (``LookupError`` when that connection is not open). It also times the acks: ``sent_at`` and
the stand-in's ``acked_at`` (``time.monotonic()``) per envelope id, and ``ack_latency(envelope_id)`` between the two.
"""

import contextlib
import random
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from aiohttp import web

from bot.playground.standin.slack import *  # noqa: F403  (the stand-in's own __all__ is the list)
from bot.playground.standin.slack import FakeSlack as _StandIn
from bot.playground.standin.slack import __all__ as __all__

_ROUTE: ContextVar[int | None] = ContextVar("fake_slack_route", default=None)


class FakeSlack(_StandIn):  # type: ignore[no-redef]  # this subclass is the one tests get
    """The stand-in, plus random delivery and per-connection routing (one connection per bot process)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rng = random.Random(0)  # "random" delivery; a test reseeds it for a replayable campaign
        self.sent_at: dict[str, float] = {}  # envelope_id -> when it was first handed to the socket

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

    def ack_latency(self, envelope_id: str) -> float:
        """Seconds from writing the envelope to reading its ack (KeyError until both happened)."""
        return self.acked_at[envelope_id] - self.sent_at[envelope_id]

    async def _send_envelope(self, envelope: dict[str, Any], timeout: float) -> None:  # noqa: ASYNC109 (the override)
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
        live = [ws for ws in self._sockets if not ws.closed]
        wanted = _ROUTE.get()
        if wanted is not None:
            ws = next((ws for ws in live if self._socket_numbers.get(ws) == wanted), None)
            if ws is None:
                raise LookupError(f"Socket Mode connection #{wanted} is not open")
            return ws
        if self.delivery == "random" and live:
            return self.rng.choice(live)
        return super()._pick_socket()
