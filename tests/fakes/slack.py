"""The Slack stand-in moved into the product (``bot/standin/slack.py``); re-exported so tests import it here."""

from bot.standin.slack import (
    ALLOWED_BLOCK_TYPES,
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

__all__ = [
    "ALLOWED_BLOCK_TYPES",
    "ApiCall",
    "FakeSlack",
    "Message",
    "ResponseUrlCall",
    "block_action_payload",
    "block_errors",
    "mention_event",
    "message_event",
    "next_ts",
]
