"""A local Slack stand-in (Web API + Socket Mode) that opsloop ships for `demo`, `sandbox` and tests."""

from bot.standin.slack import (
    ApiCall,
    FakeSlack,
    Message,
    ResponseUrlCall,
    block_action_payload,
    block_errors,
    mention_event,
    message_event,
    next_ts,
)

SlackStandIn = FakeSlack

__all__ = [
    "ApiCall",
    "FakeSlack",
    "Message",
    "ResponseUrlCall",
    "SlackStandIn",
    "block_action_payload",
    "block_errors",
    "mention_event",
    "message_event",
    "next_ts",
]
