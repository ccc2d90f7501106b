"""What the listeners for a person's message need (a mention, a thread reply, the message shortcut), and nothing
else: the store that claims the event and keeps the run or inbox row, the Slack calls off the ack path, the
conversation's history (a mid-thread mention reads it), who is in a channel, the cards a reply supersedes,
which channels opsloop works in, the model a new run starts on, how a stored run starts, and the bot's own user
id (read when asked: it is known only once auth.test answered, after the listeners are registered)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.run.approvals import ApprovalDesk
from bot.store import Store
from handlers.after_ack import AfterAck
from handlers.membership import Membership
from handlers.slack_out import SlackOut


@dataclass(frozen=True)
class Inbound:
    store: Store
    out: SlackOut
    after_ack: AfterAck
    client: AsyncWebClient
    membership: Membership
    approvals: ApprovalDesk
    channels: Callable[[], Collection[str]]  # ids, read when asked: start-up resolves the config's `#name`s
    model: str
    # The Supervisor drives the stored run (its task, when it started one), once the deliveries in hand are acked.
    start: Callable[[str], object]
    bot_user: Callable[[], str]

    @property
    def bot_user_id(self) -> str:
        return self.bot_user()
