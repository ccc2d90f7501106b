"""The message shortcut "Investigate with opsloop": on any message (an alert a bot posted, a pasted log), a run
in that message's thread with the message as the task and the clicker as the requester (the message's author,
a person, asks too: they may not approve its destructive calls alone). Stored before the ack,
deduplicated by the click's trigger id (a redelivery is the same click), like a mention. Only where the bot is
(conversations.info): anywhere else the clicker is told, through the payload's response_url, and nothing starts."""

from __future__ import annotations

from typing import Any

import structlog

from handlers import messages
from handlers.event_filters import allowed_channel, dig, is_from_a_bot, message_text
from handlers.inbound import Inbound
from handlers.mentions import start_or_redirect
from handlers.slack_out import ephemeral

log = structlog.get_logger("opsloop.shortcut")

TASK_MAX = 20_000  # a pasted log can be long; the model gets this much of it


def shortcut_text(message: dict[str, Any]) -> str:
    """What a message says, attachments included (an Alertmanager post keeps most of it there)."""
    parts = [message_text(message)]
    for a in message.get("attachments") or []:
        if not isinstance(a, dict):
            continue
        parts += [str(a[k]) for k in ("pretext", "title", "text") if isinstance(a.get(k), str) and a[k]]
        parts += [f"{f.get('title')}: {f.get('value')}" for f in a.get("fields") or [] if isinstance(f, dict)]
        if not any(isinstance(a.get(k), str) and a[k] for k in ("pretext", "title", "text")) and a.get("fallback"):
            parts.append(str(a["fallback"]))
    return "\n".join(p for p in parts if p.strip()).strip()[:TASK_MAX]


async def on_investigate(desk: Inbound, body: dict[str, Any]) -> None:
    user, channel = dig(body, "user", "id"), dig(body, "channel", "id")
    message = body.get("message") if isinstance(body.get("message"), dict) else None
    ts = dig(body, "message", "ts") or dig(body, "message_ts")
    if not user or not channel or message is None or not ts:
        log.warning("shortcut.malformed", user=user, channel=channel)
        return
    if not allowed_channel(desk.channels(), channel, asked=True):
        desk.after_ack.spawn(ephemeral(desk.out, body, messages.SHORTCUT_NOT_HERE), name="shortcut_refused")
        return
    text = shortcut_text(message)
    if not text:
        desk.after_ack.spawn(ephemeral(desk.out, body, messages.SHORTCUT_EMPTY), name="shortcut_refused")
        return
    if refusal := await _bot_cant_work_in(desk, channel):  # before anything is stored: no run, no model call
        log.info("shortcut.refused", channel=channel, user=user)
        desk.after_ack.spawn(
            desk.out.respond(response_url=dig(body, "response_url") or "", text=refusal), name="shortcut_refused"
        )
        return
    thread_ts = dig(body, "message", "thread_ts") or ts
    author = (
        f"<@{message['user']}>"
        if isinstance(message.get("user"), str) and message.get("user")
        else (str(dig(body, "message", "username") or dig(body, "message", "bot_profile", "name") or "a bot"))
    )
    event_id = f"shortcut:{dig(body, 'trigger_id') or f'{user}:{channel}:{ts}'}"
    await start_or_redirect(
        desk,
        event_id,
        channel=channel,
        thread_ts=thread_ts,
        ts=ts,
        user=user,
        text=text,
        prompt=messages.shortcut_prompt(user, channel, author, text),
        via="shortcut",
        team_id=dig(body, "user", "team_id") or dig(body, "team", "id") or None,
        askers=[] if is_from_a_bot(message, desk.bot_user_id) else [str(message["user"])],
    )


async def _bot_cant_work_in(desk: Inbound, channel: str) -> str | None:
    """Why a run can't start in `channel` (the bot isn't in it, or Slack couldn't say), else None. Every post of a
    run there would fail (`not_in_channel`), so the clicker hears it now, through the payload's response_url."""
    member = await desk.membership.bot_is_in(channel)
    if member is None:
        return messages.SHORTCUT_NOT_CHECKED
    return None if member else messages.shortcut_not_a_member(channel)
