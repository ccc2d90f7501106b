"""What the listeners for a person (a mention, a thread reply, the message shortcut, App Home) need, and nothing
else: the store that claims the event and keeps the run or inbox row, the Slack calls off the ack path, the
conversation's history (a mid-thread mention reads it), who is in a channel, the cards a reply supersedes, who
may decide an approval, which channels opsloop works in, the model a new run starts on and its step limit, how a
stored run starts, and the bot's own user id (read when asked: it is known only once auth.test answered, after
the listeners are registered)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.store import Store
from handlers.after_ack import AfterAck
from handlers.approvals import ApprovalDesk
from handlers.membership import Membership
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut


@dataclass(frozen=True)
class Inbound:
    store: Store
    out: SlackOut
    after_ack: AfterAck
    client: AsyncWebClient
    membership: Membership
    approvals: ApprovalDesk
    policy: ApprovalPolicy
    channels: Callable[[], Collection[str]]  # ids, read when asked: start-up resolves the config's `#name`s
    model: str
    max_steps: int
    # The Supervisor drives the stored run (its task, when it started one), once the deliveries in hand are acked.
    start: Callable[[str], object]
    bot_user: Callable[[], str]

    @property
    def bot_user_id(self) -> str:
        return self.bot_user()
