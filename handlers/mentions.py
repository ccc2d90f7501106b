"""`@opsloop <task>`: dedupe, store the run, :eyes:, hand it to the supervisor."""

from __future__ import annotations

import re
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError

from bot.redact import redact
from handlers import messages
from handlers.replies import queue_reply
from handlers.supervisor import Supervisor
from handlers.util import allowed_channel, is_from_a_bot, malformed, react

log = structlog.get_logger("opsloop.mentions")


def strip_mention(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip() if bot_user_id else text.strip()


async def thread_context(sup: Supervisor, channel: str, thread_ts: str, *, before: str, keep: int = 20) -> str:
    """The thread so far (the alert, what people said), for a mention that arrives mid-thread."""
    try:
        response = await sup.client.conversations_replies(channel=channel, ts=thread_ts, limit=100)
    except SlackApiError as e:
        log.warning("thread_context_unavailable", error=e.response.get("error"))
        return ""
    earlier = [m for m in response.get("messages") or [] if float(m.get("ts", "0")) < float(before)]
    lines = [f"<@{m.get('user') or m.get('bot_id') or '?'}>: {(m.get('text') or '')[:1000]}" for m in earlier[-keep:]]
    return "\n\n[earlier messages in this thread]\n" + "\n".join(lines) if lines else ""


async def on_mention(sup: Supervisor, body: dict[str, Any], event: dict[str, Any]) -> None:
    if not await sup.store.claim_event(body.get("event_id") or f"mention:{event.get('channel')}:{event.get('ts')}"):
        log.info("event.duplicate", event_id=body.get("event_id"))
        return
    if malformed(event, "channel", "ts", "user") or is_from_a_bot(event, sup.bot_user_id):
        return
    if not allowed_channel(sup, event["channel"]):
        return
    channel, user, ts = event["channel"], event.get("user", ""), event["ts"]
    thread_ts = event.get("thread_ts") or ts
    text = strip_mention(event.get("text", ""), sup.bot_user_id)
    if not text:
        await sup.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=messages.EMPTY_MENTION)
        return
    prompt = f"[incident request from <@{user}> in <#{channel}>] {text}"
    if thread_ts != ts and await sup.store.latest_run(channel, thread_ts) is None:
        prompt += await thread_context(sup, channel, thread_ts, before=ts)
    prompt = redact(prompt)
    row, created = await sup.store.open_run(channel=channel, thread_ts=thread_ts, requester=user, task=text,
                                            prompt=prompt, model=sup.settings.model.primary, mention_ts=ts)
    if not created:  # the thread's run is going: this mention is a redirect
        await queue_reply(sup, channel=channel, thread_ts=thread_ts, ts=ts, user=user, text=text)
        return
    log.info("run.created", run_id=row["id"], channel=channel, thread_ts=thread_ts, requester=user)
    await react(sup, channel, ts)  # only once the run is stored
    sup.start(row["id"])
