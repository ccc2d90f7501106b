"""`@opsloop <task>`: the event claim and the run in one transaction, then the ack, :eyes: and the run."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Iterable
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError

from bot.core.redact import redact
from bot.run import approvals
from handlers import messages
from handlers.event_filters import allowed_channel, is_from_a_bot, malformed, message_text
from handlers.inbound import Inbound
from handlers.replies import after_reply
from handlers.slack_pages import next_cursor, slack_pages

log = structlog.get_logger("opsloop.mentions")


def strip_mention(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip() if bot_user_id else text.strip()


THREAD_PAGE = 200  # conversations.replies page size (Slack recommends at most 200)
THREAD_PAGES_MAX = 50  # read at most this many pages of one thread (10,000 messages)


async def thread_context(
    desk: Inbound, channel: str, thread_ts: str, *, before: str, keep: int = 20
) -> tuple[str, list[str]]:
    """The thread so far (the alert, what people said last), for a mention that arrives mid-thread; with the
    people who wrote it (bots and alert senders are not people): they asked too."""
    try:
        root, newest = await _thread_tail(desk, channel, thread_ts, before=before, keep=keep - 1)
    except SlackApiError as e:
        log.warning("thread_context_unavailable", error=e.response.get("error"))
        return "", []
    earlier = [m for m in (root, *newest) if m is not None]
    lines = [f"<@{m.get('user') or m.get('bot_id') or '?'}>: {message_text(m)[:1000]}" for m in earlier]
    authors = sorted({str(m["user"]) for m in earlier if not is_from_a_bot(m, desk.bot_user_id)})
    return ("\n\n[earlier messages in this thread]\n" + "\n".join(lines) if lines else ""), authors


async def _thread_tail(
    desk: Inbound, channel: str, thread_ts: str, *, before: str, keep: int
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the thread's root, its newest `keep` replies before `before`), paging through the whole thread.

    conversations.replies returns the oldest messages first, one page at a time: keeping
    only the first page would show the model how a long thread began, not where it is now.
    """
    root: dict[str, Any] | None = None
    newest: deque[dict[str, Any]] = deque(maxlen=max(0, keep))
    response: Any = {}

    def page(cursor: str | None) -> Awaitable[Any]:
        return desk.client.conversations_replies(
            channel=channel, ts=thread_ts, limit=THREAD_PAGE, latest=before, inclusive=False, cursor=cursor
        )

    async for response in slack_pages(page, most=THREAD_PAGES_MAX):
        for m in response.get("messages") or []:
            if float(m.get("ts", "0")) >= float(before):
                continue
            if m.get("ts") == thread_ts:
                root = m
            else:
                newest.append(m)
    if next_cursor(response) is not None:
        log.warning("thread_context_cut", channel=channel, thread_ts=thread_ts, pages=THREAD_PAGES_MAX)
    return root, list(newest)


async def on_mention(desk: Inbound, body: dict[str, Any], event: dict[str, Any]) -> None:
    """Store the mention (a new run, or a redirect of the thread's run) before Slack gets its ack; a store
    failure raises, so no ack is sent and Slack delivers it again."""
    if malformed(event, "channel", "ts", "user") or is_from_a_bot(event, desk.bot_user_id):
        return
    if not allowed_channel(desk.channels(), event["channel"], asked=True):
        return
    channel, user, ts = event["channel"], event.get("user", ""), event["ts"]
    event_id = body.get("event_id") or f"mention:{channel}:{ts}"
    thread_ts = event.get("thread_ts") or ts
    text = strip_mention(message_text(event), desk.bot_user_id)
    if not text:
        if await desk.store.claim_event(event_id):
            desk.after_ack.spawn(
                desk.out.post(channel=channel, thread_ts=thread_ts, text=messages.EMPTY_MENTION), name="empty_mention"
            )
        return
    prompt = f"[incident request from <@{user}> in <#{channel}>] {text}"
    team = event.get("user_team") or body.get("team_id") or event.get("team")  # the requester's workspace
    await start_or_redirect(
        desk,
        event_id,
        channel=channel,
        thread_ts=thread_ts,
        ts=ts,
        user=user,
        text=text,
        prompt=prompt,
        team_id=str(team) if team else None,
    )


async def start_or_redirect(
    desk: Inbound,
    event_id: str,
    *,
    channel: str,
    thread_ts: str,
    ts: str,
    user: str,
    text: str,
    prompt: str,
    via: str = "mention",
    team_id: str | None = None,
    askers: Iterable[str] = (),
) -> None:
    """Store a request (a mention, the message shortcut) with its event claim, then ack: a new run in the thread,
    or, while the thread's run is going, a redirect of it. :eyes: and the run's start come only once it is stored.
    `askers` (and the authors of the thread messages the run reads) are recorded as askers of its calls."""
    askers = set(askers)
    if thread_ts != ts and await desk.store.latest_run(channel, thread_ts) is None:
        context, authors = await thread_context(desk, channel, thread_ts, before=ts)
        prompt += context  # part of the stored row
        askers |= set(authors)
    accepted = await desk.store.accept_mention(
        event_id,
        channel=channel,
        thread_ts=thread_ts,
        requester=user,
        task=text,
        prompt=redact(prompt),
        model=desk.model,
        mention_ts=ts,
        on_reply=approvals.supersede_by_reply,
        team_id=team_id,
        askers=sorted(askers - {user}),
    )
    if accepted is None:
        log.info("event.duplicate", event_id=event_id)
        return
    if accepted.redirect is not None:  # the thread's run is going: this request redirects it
        await after_reply(desk, accepted.redirect)
        return
    # Only once the run is stored, and all after the acks of the deliveries in hand (a burst's acks go first):
    # its log line, :eyes: and its start.
    created = _created(desk, accepted.run.id, channel=channel, thread_ts=thread_ts, ts=ts, requester=user, via=via)
    desk.after_ack.spawn(created, name=f"eyes:{ts}", after_deliveries=True)
    desk.start(accepted.run.id)


async def _created(
    desk: Inbound, run_id: str, *, channel: str, thread_ts: str, ts: str, requester: str, via: str
) -> None:
    log.info("run.created", run_id=run_id, channel=channel, thread_ts=thread_ts, requester=requester, via=via)
    await desk.out.react(channel=channel, ts=ts)
