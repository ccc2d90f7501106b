"""What a person says to opsloop: `@opsloop <task>` or the message shortcut on any message asks for a run (the
event claim and the run in one transaction, then the ack, :eyes: and the run); a thread reply during a run goes to
its inbox, then :eyes:, then the model. While an approval is pending, a reply supersedes it: the card says so and
the model gets the decline together with the person's message."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.redact import redact
from bot.core.types import AcceptedReply
from bot.run import approvals
from bot.store import Store
from handlers import messages
from handlers.after_ack import AfterAck
from handlers.event_filters import allowed_channel, dig, is_from_a_bot, malformed, message_text
from handlers.membership import Membership
from handlers.outbox import Outbox
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut, ephemeral
from handlers.slack_pages import next_cursor, slack_pages


@dataclass(frozen=True)
class Inbound:
    """What the listeners for a person (these, App Home and Stop) need: the store that claims the event and keeps the
    run or inbox row, the Slack calls off the ack path, the conversation's history (a mid-thread mention reads it),
    who is in a channel, the cards a reply supersedes, who may decide an approval or stop a run, what the bot posted
    (the outbox: a Stop click's status message)."""

    store: Store
    out: SlackOut
    after_ack: AfterAck
    client: AsyncWebClient
    membership: Membership
    approvals: approvals.ApprovalDesk
    policy: ApprovalPolicy
    channels: Callable[[], Collection[str]]  # ids, read when asked: start-up resolves the config's `#name`s
    model: str  # a new run's model
    max_steps: int
    # The Supervisor drives the stored run (its task, when it started one), once the deliveries in hand are acked.
    start: Callable[[str], object]
    bot_user: Callable[[], str]  # read when asked: known once auth.test answered, after registration
    outbox: Outbox
    stop: Callable[[str, str], Awaitable[None]]  # records a Stop, supersedes the run's cards, ends the run

    @property
    def bot_user_id(self) -> str:
        return self.bot_user()


log = structlog.get_logger("opsloop.mentions")


def strip_mention(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip() if bot_user_id else text.strip()


THREAD_PAGE = 200  # conversations.replies page size (Slack recommends at most 200)
THREAD_PAGES_MAX = 50  # read at most this many pages of one thread (10,000 messages)


async def thread_context(
    desk: Inbound, channel: str, thread_ts: str, *, before: str, keep: int = 20
) -> tuple[str, list[str]]:
    """The thread so far (the alert, what people said last), for a mention that arrives mid-thread; with the
    people who wrote it (bots and alert senders are not people): they asked too.

    The thread's root and its newest `keep - 1` replies before `before`, paging through the whole thread:
    conversations.replies returns the oldest messages first, one page at a time, and keeping only the first page
    would show the model how a long thread began, not where it is now.
    """
    root: dict[str, Any] | None = None
    newest: deque[dict[str, Any]] = deque(maxlen=max(0, keep - 1))
    response: Any = {}

    def page(cursor: str | None) -> Awaitable[Any]:
        return desk.client.conversations_replies(
            channel=channel, ts=thread_ts, limit=THREAD_PAGE, latest=before, inclusive=False, cursor=cursor
        )

    try:
        async for response in slack_pages(page, most=THREAD_PAGES_MAX):
            for m in response.get("messages") or []:
                if float(m.get("ts", "0")) >= float(before):
                    continue
                if m.get("ts") == thread_ts:
                    root = m
                else:
                    newest.append(m)
    except SlackApiError as e:
        log.warning("thread_context_unavailable", error=e.response.get("error"))
        return "", []
    if next_cursor(response) is not None:
        log.warning("thread_context_cut", channel=channel, thread_ts=thread_ts, pages=THREAD_PAGES_MAX)
    earlier = [m for m in (root, *newest) if m is not None]
    lines = [f"<@{m.get('user') or m.get('bot_id') or '?'}>: {message_text(m)[:1000]}" for m in earlier]
    authors = sorted({str(m["user"]) for m in earlier if not is_from_a_bot(m, desk.bot_user_id)})
    return ("\n\n[earlier messages in this thread]\n" + "\n".join(lines) if lines else ""), authors


@dataclass(frozen=True, kw_only=True)
class Request:
    """Someone asked for a run (a mention, the message shortcut): what is stored with its event claim."""

    event_id: str
    channel: str
    thread_ts: str
    ts: str
    user: str
    text: str
    prompt: str
    via: str
    team_id: str | None
    askers: frozenset[str] = frozenset()  # asked too: they may not approve its destructive calls alone


async def on_mention(desk: Inbound, body: dict[str, Any], event: dict[str, Any]) -> None:
    """Store the mention (a new run, or a redirect of the thread's run) before Slack gets its ack; a store
    failure raises, so no ack is sent and Slack delivers it again."""
    if malformed(event, "channel", "ts", "user") or is_from_a_bot(event, desk.bot_user_id):
        return
    if not allowed_channel(desk.channels(), event["channel"], asked=True):
        return
    channel, user, ts = event["channel"], event["user"], event["ts"]
    event_id = body.get("event_id") or f"mention:{channel}:{ts}"
    thread_ts = event.get("thread_ts") or ts
    text = strip_mention(message_text(event), desk.bot_user_id)
    if not text:
        if await desk.store.claim_event(event_id):
            desk.after_ack.spawn(
                desk.out.post(channel=channel, thread_ts=thread_ts, text=messages.EMPTY_MENTION), name="empty_mention"
            )
        return
    team = event.get("user_team") or body.get("team_id") or event.get("team")  # the requester's workspace
    request = Request(
        event_id=event_id,
        channel=channel,
        thread_ts=thread_ts,
        ts=ts,
        user=user,
        text=text,
        prompt=f"[incident request from <@{user}> in <#{channel}>] {text}",
        via="mention",
        team_id=str(team) if team else None,
    )
    await start_or_redirect(desk, request)


TASK_MAX = 20_000  # a pasted log can be long; the model gets this much of it


def shortcut_text(message: dict[str, Any]) -> str:
    """What a message says, attachments included (an Alertmanager post keeps most of it there)."""
    parts = [message_text(message)]
    for a in message.get("attachments") or []:
        if not isinstance(a, dict):
            continue
        texts = [str(a[k]) for k in ("pretext", "title", "text") if isinstance(a.get(k), str) and a[k]]
        parts += texts + [f"{f.get('title')}: {f.get('value')}" for f in a.get("fields") or [] if isinstance(f, dict)]
        if not texts and a.get("fallback"):
            parts.append(str(a["fallback"]))
    return "\n".join(p for p in parts if p.strip()).strip()[:TASK_MAX]


async def on_investigate(desk: Inbound, body: dict[str, Any]) -> None:
    """The message shortcut "Investigate with opsloop": on any message (an alert a bot posted, a pasted log), a run
    in that message's thread with the message as the task and the clicker as the requester (the message's author,
    a person, asks too). Stored before the ack, deduplicated by the click's trigger id (a redelivery is the same
    click), like a mention. Only where the bot is (conversations.info): anywhere else the clicker is told, through
    the payload's response_url (the bot can't post there), and nothing starts."""
    user, channel = dig(body, "user", "id"), dig(body, "channel", "id")
    message = body.get("message") if isinstance(body.get("message"), dict) else None
    ts = dig(body, "message", "ts") or dig(body, "message_ts")
    if not user or not channel or message is None or not ts:
        log.warning("shortcut.malformed", user=user, channel=channel)
        return
    text = shortcut_text(message)
    refusal: Coroutine[Any, Any, object] | None = None
    if not allowed_channel(desk.channels(), channel, asked=True):
        refusal = ephemeral(desk.out, body, messages.SHORTCUT_NOT_HERE)
    elif not text:
        refusal = ephemeral(desk.out, body, messages.SHORTCUT_EMPTY)
    elif not (member := await desk.membership.bot_is_in(channel)):  # before anything is stored: no run, no model
        log.info("shortcut.refused", channel=channel, user=user)
        why = messages.SHORTCUT_NOT_CHECKED if member is None else messages.shortcut_not_a_member(channel)
        refusal = desk.out.respond(response_url=dig(body, "response_url") or "", text=why)
    if refusal is not None:
        desk.after_ack.spawn(refusal, name="shortcut_refused")
        return
    author = f"<@{message['user']}>" if isinstance(message.get("user"), str) and message["user"] else _bot_name(body)
    request = Request(
        event_id=f"shortcut:{dig(body, 'trigger_id') or f'{user}:{channel}:{ts}'}",
        channel=channel,
        thread_ts=dig(body, "message", "thread_ts") or ts,
        ts=ts,
        user=user,
        text=text,
        prompt=messages.shortcut_prompt(user, channel, author, text),
        via="shortcut",
        team_id=dig(body, "user", "team_id") or dig(body, "team", "id"),
        askers=frozenset([] if is_from_a_bot(message, desk.bot_user_id) else [str(message["user"])]),
    )
    await start_or_redirect(desk, request)


def _bot_name(body: dict[str, Any]) -> str:
    return dig(body, "message", "username") or dig(body, "message", "bot_profile", "name") or "a bot"


async def start_or_redirect(desk: Inbound, r: Request) -> None:
    """Store a request with its event claim, then ack: a new run in the thread, or, while the thread's run is
    going, a redirect of it. :eyes: and the run's start come only once it is stored. Its askers (and the authors of
    the thread messages the run reads) are recorded as askers of its calls."""
    prompt, askers = r.prompt, set(r.askers)
    if r.thread_ts != r.ts and await desk.store.latest_run(r.channel, r.thread_ts) is None:
        context, authors = await thread_context(desk, r.channel, r.thread_ts, before=r.ts)
        prompt += context  # part of the stored row
        askers |= set(authors)
    accepted = await desk.store.accept_mention(
        r.event_id,
        channel=r.channel,
        thread_ts=r.thread_ts,
        requester=r.user,
        task=r.text,
        prompt=redact(prompt),
        model=desk.model,
        mention_ts=r.ts,
        on_reply=approvals.supersede_by_reply,
        team_id=r.team_id,
        askers=sorted(askers - {r.user}),
    )
    if accepted is None:
        log.info("event.duplicate", event_id=r.event_id)
    elif accepted.redirect is not None:  # the thread's run is going: this request redirects it
        await after_reply(desk, accepted.redirect)
    else:
        # Only once the run is stored, and all after the acks of the deliveries in hand (a burst's acks go first):
        # its log line, :eyes: and its start.
        desk.after_ack.spawn(_created(desk, accepted.run.id, r), name=f"eyes:{r.ts}", after_deliveries=True)
        desk.start(accepted.run.id)


async def _created(desk: Inbound, run_id: str, r: Request) -> None:
    log.info("run.created", run_id=run_id, channel=r.channel, thread_ts=r.thread_ts, requester=r.user, via=r.via)
    await desk.out.react(channel=r.channel, ts=r.ts)


async def on_message(desk: Inbound, body: dict[str, Any], event: dict[str, Any]) -> None:
    """A thread reply: the event claim, the inbox row and the supersede of pending approvals in one transaction,
    before the ack."""
    thread_ts = event.get("thread_ts")
    if not thread_ts or is_from_a_bot(event, desk.bot_user_id) or malformed(event, "channel", "ts", "user"):
        return
    if desk.bot_user_id and f"<@{desk.bot_user_id}" in str(event.get("text") or ""):
        return  # the app_mention listener takes it (Slack sends both)
    if not allowed_channel(desk.channels(), event["channel"]):
        return
    text = message_text(event)
    if not text.strip():
        return
    accepted = await desk.store.accept_reply(
        body.get("event_id") or f"message:{event['channel']}:{event['ts']}",
        channel=event["channel"],
        thread_ts=thread_ts,
        ts=event["ts"],
        user=event["user"],
        text=text,
        on_reply=approvals.supersede_by_reply,
    )
    if accepted is not None:
        await after_reply(desk, accepted)


async def after_reply(desk: Inbound, accepted: AcceptedReply) -> None:
    """A reply (or redirect mention) is stored: cards it superseded say so (enqueued: a store write), :eyes: off
    the ack path (after the acks of the deliveries in hand), and the run hears about it."""
    item = accepted.item
    log.info("reply.stored", run_id=item.run_id, user=item.user, superseded=list(accepted.superseded))
    await approvals.superseded_by_reply(desk.approvals, accepted.superseded)
    desk.after_ack.spawn(
        desk.out.react(channel=item.channel, ts=item.ts), name=f"eyes:{item.ts}", after_deliveries=True
    )
