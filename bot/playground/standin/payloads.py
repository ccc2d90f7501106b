"""Real-shaped events and interactivity payloads, as Slack delivers them to the app: ``mention_event``,
``message_event``, ``block_action_payload``, ``message_shortcut_payload``, ``app_home_opened_event``."""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any

from bot.playground.standin.records import _id_counter, next_ts

_MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def _rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """The rich_text block Slack attaches to user messages (user mentions split out)."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for m in _MENTION_RE.finditer(text):
        if m.start() > pos:
            elements.append({"type": "text", "text": text[pos : m.start()]})
        elements.append({"type": "user", "user_id": m.group(1)})
        pos = m.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    return [
        {
            "type": "rich_text",
            "block_id": uuid.uuid4().hex[:5],
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]


# Message subtypes Slack keeps in the channel's history (others, like message_changed, are not messages).
STORED_SUBTYPES = (None, "file_share", "thread_broadcast")


def mention_event(
    channel: str,
    user: str,
    text: str,
    ts: str | None = None,
    thread_ts: str | None = None,
    *,
    bot_user_id: str = "UBOT",
    team_id: str = "T1",
) -> dict[str, Any]:
    """An ``app_mention`` event. ``text`` gets a leading ``<@UBOT>`` unless it mentions the bot."""
    if f"<@{bot_user_id}>" not in text:
        text = f"<@{bot_user_id}> {text}"
    ts = ts or next_ts()
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "team": team_id,
        "blocks": _rich_text_blocks(text),
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message_event(
    channel: str,
    user: str | None,
    text: str,
    ts: str | None = None,
    thread_ts: str | None = None,
    bot_id: str | None = None,
    subtype: str | None = None,
    *,
    team_id: str = "T1",
) -> dict[str, Any]:
    """A ``message`` event (``message.channels`` subscription) as a user or a bot posts it."""
    ts = ts or next_ts()
    event: dict[str, Any] = {"type": "message"}
    if subtype:
        event["subtype"] = subtype
    if user:
        event["user"] = user
    event.update({"text": text, "ts": ts, "team": team_id})
    if bot_id:
        event["bot_id"] = bot_id
        event["app_id"] = "A" + bot_id[1:]
        event["bot_profile"] = {"id": bot_id, "name": "bot", "app_id": "A" + bot_id[1:], "team_id": team_id}
    else:
        event["client_msg_id"] = str(uuid.uuid4())
    event["blocks"] = _rich_text_blocks(text)
    if thread_ts:
        event["thread_ts"] = thread_ts
        if user:
            event["parent_user_id"] = user
    event.update({"channel": channel, "event_ts": ts, "channel_type": "channel"})
    return event


def _find_action(blocks: Iterable[dict[str, Any]], action_id: str) -> tuple[str, dict[str, Any]] | None:
    for block in blocks:
        candidates = list(block.get("elements") or [])
        if block.get("accessory"):
            candidates.append(block["accessory"])
        for el in candidates:
            if isinstance(el, dict) and el.get("action_id") == action_id:
                return block.get("block_id", ""), el
    return None


def block_action_payload(
    user: str,
    channel: str,
    message_ts: str,
    action_id: str,
    value: str | None,
    *,
    team_id: str = "T1",
    message: dict[str, Any] | None = None,
    user_name: str | None = None,
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """A ``block_actions`` payload for a button click on a message.

    Without ``message``, a minimal bot message carrying one button with ``action_id``
    is made up. ``block_id`` and the button's text come from the message when the
    button is found in it. Its ``response_url`` is ``None``:
    ``FakeSlack.send_interactive`` replaces it with a URL served by the fake (a real
    one would leave loopback).
    """
    if message is None:
        message = {
            "type": "message",
            "user": "UBOT",
            "bot_id": "BBOT",
            "ts": message_ts,
            "text": "",
            "team": team_id,
            "blocks": [
                {
                    "type": "actions",
                    "block_id": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": action_id,
                            "text": {"type": "plain_text", "text": action_id, "emoji": True},
                            **({"value": value} if value is not None else {}),
                        }
                    ],
                }
            ],
        }
    else:
        message = copy.deepcopy(message)
        message.setdefault("ts", message_ts)
    found = _find_action(message.get("blocks") or [], action_id)
    block_id, element = found if found else (uuid.uuid4().hex[:5], {})
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id,
        "text": element.get("text") or {"type": "plain_text", "text": action_id, "emoji": True},
        "type": element.get("type", "button"),
        "action_ts": f"{time.time():.6f}",
    }
    if value is not None:
        action["value"] = value
    if element.get("style"):
        action["style"] = element["style"]
    name = user_name or user.lower()
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if message.get("thread_ts"):
        container["thread_ts"] = message["thread_ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": "fake-verification-token",
        "container": container,
        "trigger_id": f"{next(_id_counter)}.{next(_id_counter)}.{uuid.uuid4().hex}",
        "team": {"id": team_id, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "incident"},
        "message": message,
        "state": {"values": {}},
        "response_url": None,
        "actions": [action],
    }


def message_shortcut_payload(
    user: str,
    channel: str,
    message: dict[str, Any],
    *,
    callback_id: str,
    team_id: str = "T1",
    user_name: str | None = None,
    api_app_id: str = "A1",
    channel_name: str = "incident",
) -> dict[str, Any]:
    """A ``message_action`` payload: a person ran the message shortcut ``callback_id`` on ``message``."""
    name = user_name or user.lower()
    return {
        "type": "message_action",
        "token": "fake-verification-token",
        "action_ts": f"{time.time():.6f}",
        "team": {"id": team_id, "domain": "fake"},
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "channel": {"id": channel, "name": channel_name},
        "is_enterprise_install": False,
        "enterprise": None,
        "callback_id": callback_id,
        "trigger_id": f"{next(_id_counter)}.{next(_id_counter)}.{uuid.uuid4().hex}",
        "response_url": None,
        "message_ts": message["ts"],
        "message": copy.deepcopy(message),
        "api_app_id": api_app_id,
    }


def app_home_opened_event(user: str, *, tab: str = "home", channel: str = "D0HOME") -> dict[str, Any]:
    """The ``app_home_opened`` event Slack sends when ``user`` opens the app's Home (or Messages) tab."""
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab, "event_ts": f"{time.time():.6f}"}
