"""`@opsloop <task>`: dedupe, store the run, :eyes:, hand it to the supervisor."""

from __future__ import annotations

import re
from typing import Any

import structlog

from bot.redact import redact
from handlers import messages
from handlers.replies import queue_reply
from handlers.supervisor import Supervisor
from handlers.util import allowed_channel, is_from_a_bot, malformed, react

log = structlog.get_logger("opsloop.mentions")


def strip_mention(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip() if bot_user_id else text.strip()


def continue_history(previous: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """History for a new run in a thread that already had one: the old turns, then the new task."""
    block = {"type": "text", "text": task}
    if previous and previous[-1]["role"] == "user":  # ended on tool results: merge to keep roles alternating
        return [*previous[:-1], {"role": "user", "content": [*previous[-1]["content"], block]}]
    return [*previous, {"role": "user", "content": [block]}]


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
    if await sup.store.active_run(channel, thread_ts):  # the run is going: this is a redirect
        await queue_reply(sup, channel=channel, thread_ts=thread_ts, ts=ts, user=user, text=text)
        return
    if not text:
        await sup.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=messages.EMPTY_MENTION)
        return
    previous = await sup.store.latest_run(channel, thread_ts)
    history = await sup.store.history(previous["id"]) if previous else []
    task = redact(f"[incident request from <@{user}> in <#{channel}>] {text}")
    row = await sup.store.create_run(channel=channel, thread_ts=thread_ts, requester=user, task=text,
                                     model=sup.settings.model.primary, mention_ts=ts,
                                     history=continue_history(history, task))
    log.info("run.created", run_id=row["id"], channel=channel, thread_ts=thread_ts, requester=user)
    await react(sup, channel, ts)  # only once the run is stored
    sup.start(row["id"])
