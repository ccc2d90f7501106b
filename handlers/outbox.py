"""The outbox: Slack posts that matter are stored first, then delivered exactly once by one sender per process.

The approval card, the decided-card updates, the final answer and the handoff report go through here;
status-line updates stay direct (best effort). Enqueueing is idempotent by key. The sender claims an item
with compare-and-set (owner, claimed_until), so two processes never send one item at once, and retries
transient failures (429 with Retry-After, 5xx, connection errors) with capped backoff, forever.

Slack has no idempotency key for posts: every post carries metadata naming its outbox id, and before
posting an item whose earlier attempt may have reached Slack (a call that died mid-way, a process killed
before it recorded the ts) the sender looks for that id in the thread (a root post: in the channel's newest
messages, conversations.history) and adopts the ts it finds.

A streamed answer (handlers/stream.py) is a message already in the thread: the answer's first part finishes
it (stopStream with the rest, the feedback buttons and the metadata; chat.update when the stream broke or
predates a restart) instead of posting a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.errors import OpsloopError
from bot.core.redact import redact_truncate
from bot.core.types import Approval, OutboxItem, OutboxKind, OutboxState, Stream, StreamState
from bot.run.liveness import owner_id
from bot.store import Store
from handlers.after_ack import AfterAck, finish
from handlers.blocks import SlackMessage, approval_card
from handlers.slack_out import SlackOut
from handlers.slack_pages import slack_pages

log = structlog.get_logger("opsloop.outbox")

EVENT_TYPE = "opsloop_post"  # the message metadata type that carries an outbox id
THREAD_PAGE = 200  # conversations.replies page size while looking for an earlier attempt
THREAD_PAGES_MAX = 50
ROOT_PAGES_MAX = 5  # a root post's earlier attempt is among the channel's newest 1000 messages
LOOKUP_SECONDS = 2.0  # a click waits this long for Slack to show it the clicked message (its ack waits too)
PLAIN_TEXT_MAX = 39_000  # Slack truncates past 40k; the fallback stays under it
STREAM_TEXT_MAX = 12_000  # chat.stopStream's markdown_text per call

# Slack refused the content: a post gets one plain-text fallback.
CONTENT_ERRORS = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "msg_blocks_too_long",  # the blocks' text in all is more than Slack takes, though each block is valid
        "no_text",
        "too_many_attachments",
        "invalid_attachments",
        "markdown_text_conflict",
    }
)
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout", "team_added_to_org"}
)


def card_key(approval_id: str) -> str:
    return f"card:{approval_id}"


def card_update_key(approval: Approval) -> str:
    """One update per state; while pending, one per approval recorded (`required_approvals` progress), and one
    more once the run's alert changed (`alert_note`)."""
    key = f"card:{approval.id}:{approval.state.value}" + (":alert" if approval.alert_note else "")
    return f"{key}:{len(approval.approvals)}" if approval.pending else key


def answer_key(run_id: str, part: int) -> str:
    return f"answer:{run_id}:{part}"


def report_key(run_id: str, part: int) -> str:
    return f"report:{run_id}:{part}"


def metadata(item_id: str) -> dict[str, Any]:
    """What a post carries so a restarted sender can find it in the thread."""
    return {"event_type": EVENT_TYPE, "event_payload": {"id": item_id}}


def posted_item(message: dict[str, Any]) -> str | None:
    """The outbox item id a message as Slack returns it carries in its metadata; None: no post of the outbox."""
    md = message.get("metadata")
    payload = md.get("event_payload") if isinstance(md, dict) and md.get("event_type") == EVENT_TYPE else None
    item_id = payload.get("id") if isinstance(payload, dict) else None
    return item_id if isinstance(item_id, str) and item_id else None


@dataclass(frozen=True)
class Failure:
    """How one failed Slack call is handled: retried later, refused for its content, or refused for good."""

    error: str
    transient: bool
    content: bool = False  # Slack refused what was sent (a post falls back to plain text)
    maybe_posted: bool = False  # the call may have reached Slack before it failed
    retry_after: float | None = None


def classify(e: Exception) -> Failure:
    if isinstance(e, SlackApiError):
        error = str(e.response.get("error") or "")
        status = int(getattr(e.response, "status_code", 200) or 200)
        if status == 429 or error == "ratelimited":
            return Failure(error or "ratelimited", transient=True, retry_after=_retry_after(e))
        if status >= 500 or error in TRANSIENT_ERRORS:
            return Failure(error or f"http_{status}", transient=True, maybe_posted=True)
        return Failure(error or f"http_{status}", transient=False, content=error in CONTENT_ERRORS)
    # a dropped connection, a timeout, anything unknown: it may have landed; keep trying, safely
    return Failure(f"{type(e).__name__}: {e}", transient=True, maybe_posted=True)


def _retry_after(e: SlackApiError) -> float | None:
    headers = getattr(e.response, "headers", None) or {}
    value: Any = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    try:
        return float(value[0] if isinstance(value, list) else value)
    except (TypeError, ValueError, IndexError):
        return None


class ClaimLost(OpsloopError):
    """Another sender took the item (our claim lapsed): it finishes the job."""


class Deferred(OpsloopError):
    """The item was put back for a later attempt (its backoff is stored)."""


class Outbox:
    """Enqueue Slack posts/updates in the store; one sender task per process delivers them exactly once."""

    def __init__(
        self,
        *,
        store: Store,
        client: AsyncWebClient,
        owner: str | None = None,
        claim_seconds: float = 6.0,
        call_timeout: int = 4,
        poll_seconds: float = 1.0,
        max_backoff: float = 60.0,
        close_grace: float = 5.0,
    ) -> None:
        self.store = store
        # Its own client, without retry handlers: a retried post could land twice; the sender retries itself,
        # after looking in the thread. The timeout stays under the claim, so no claim lapses mid-call.
        self.client = AsyncWebClient(
            token=client.token, base_url=client.base_url, timeout=call_timeout, retry_handlers=[]
        )
        self.out = SlackOut(self.client)  # the redacting gateway, in its raising form
        self.owner = owner or owner_id()
        self.claim_seconds, self.poll_seconds, self.max_backoff = claim_seconds, poll_seconds, max_backoff
        self.close_grace = close_grace
        self._wakeup = asyncio.Event()
        self._delivered = asyncio.Event()  # set after every delivery attempt (settle() watches it)
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.bot_user_id = ""  # set at start (auth.test): a streamed message whose ts was lost is found by it

    # --- what the rest of opsloop calls --------------------------------------------------
    async def post(
        self,
        *,
        run_id: str | None,
        channel: str,
        thread_ts: str,
        msg: SlackMessage,
        key: str,
        approval_id: str | None = None,
    ) -> str:
        """Enqueue a thread post (the same key returns the same item); `approval_id`: it is that approval's
        card, whose message_ts is recorded when it is sent. Returns the outbox item id."""
        return await self._enqueue(
            OutboxKind.POST, key, msg, run_id, channel=channel, thread_ts=thread_ts, approval_id=approval_id
        )

    async def update(self, *, run_id: str | None, channel: str, of: str, msg: SlackMessage, key: str) -> str:
        """Enqueue a chat.update of the message outbox item `of` posts; sent after it, the newest update wins."""
        return await self._enqueue(OutboxKind.UPDATE, key, msg, run_id, channel=channel, target=of)

    async def _enqueue(self, kind: OutboxKind, key: str, msg: SlackMessage, run_id: str | None, **where: Any) -> str:
        item_id = await self.store.enqueue(kind=kind, key=key, text=msg.text, blocks=msg.blocks, run_id=run_id, **where)
        self.wake()
        return item_id

    async def bot_post(self, *, channel: str, thread_ts: str, ts: str) -> dict[str, Any] | Failure | None:
        """The message `ts` as Slack has it (metadata included) if it is in that thread and this bot posted it, else
        None; the Failure when Slack could not say in time (a click relies on the answer: it fails closed). For
        clicks on a card, a status message or an answer whose ts is not on record."""
        try:
            async with asyncio.timeout(LOOKUP_SECONDS):
                response = await self.client.conversations_replies(
                    channel=channel,
                    ts=thread_ts,
                    oldest=ts,
                    latest=ts,
                    inclusive=True,
                    include_all_metadata=True,
                    limit=10,
                )
        except Exception as e:
            return classify(e)
        for m in response.get("messages") or []:
            if isinstance(m, dict) and m.get("ts") == ts and m.get("thread_ts") == thread_ts:
                return m if self.bot_user_id and m.get("user") == self.bot_user_id else None
        return None

    async def settle(self, *, run_id: str | None = None) -> None:
        """Wait until nothing is pending (of one run): e.g. the demo, before its summary. An item Slack keeps
        refusing transiently keeps it waiting: wrap it in a timeout."""
        while True:
            self._delivered.clear()
            if not any(i.state == OutboxState.PENDING for i in await self.store.outbox_items(run_id)):
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._delivered.wait()

    def wake(self) -> None:
        """Something was enqueued: send now rather than at the next poll."""
        self._wakeup.set()

    async def start(self) -> None:
        if self._task is None:
            self._closing = False
            self._task = asyncio.create_task(self._send_forever(), name="opsloop-outbox")

    async def close(self) -> None:
        """Send what is due (within a grace period), then stop and hand every claim back for the next sender."""
        task, self._task = self._task, None
        if task is not None:
            self._closing = True
            self.wake()
            await finish([task], self.close_grace)
        with contextlib.suppress(Exception):
            await self.store.release_outbox(self.owner)

    # --- the sender ------------------------------------------------------------------------
    async def _send_forever(self) -> None:
        while True:
            self._wakeup.clear()
            item = await self._claim()
            if item is not None:
                await self._deliver(item)
                self._delivered.set()
                continue
            if self._closing:
                return  # nothing due: done
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):  # items due later, other processes' lapsed claims
                    await self._wakeup.wait()

    async def _claim(self) -> OutboxItem | None:
        now = self.store.now()
        try:
            return await self.store.claim_outbox(self.owner, now=now, until=now + self.claim_seconds)
        except Exception as e:  # the store is down: try again at the next poll
            log.warning("outbox.claim_failed", error=f"{type(e).__name__}: {e}")
            return None

    async def _deliver(self, item: OutboxItem) -> None:
        with structlog.contextvars.bound_contextvars(outbox_id=item.id, key=item.key, run_id=item.run_id):
            try:
                if item.kind == OutboxKind.POST:
                    await self._post(item)
                else:
                    await self._update(item)
            except ClaimLost:
                log.info("outbox.claim_lost")
            except Deferred:
                pass
            except Exception as e:  # the store failed mid-delivery: the claim lapses and the item is retried
                log.warning("outbox.deliver_failed", error=f"{type(e).__name__}: {e}")

    async def _post(self, item: OutboxItem) -> None:
        if await self._finish_stream(item):
            return
        if item.unsure and (found := await self._look(item, lambda m: posted_item(m) == item.id, unsure=True)):
            log.info("outbox.adopted", ts=found)  # an earlier attempt posted it: adopted, never posted twice
            await self.store.outbox_sent(item.id, self.owner, ts=found, now=self.store.now())
            return
        sent = await self._send(
            item,
            "chat_postMessage",
            lambda: self._attempt(item, unsure=True),
            channel=item.channel,
            thread_ts=item.thread_ts,
        )
        if isinstance(sent, Failure):
            await self._failed(item, sent)
            return
        ts = str(sent[0]["ts"])
        await self.store.outbox_sent(item.id, self.owner, ts=ts, now=self.store.now())
        log.info("outbox.posted", ts=ts, attempts=item.attempts + 1, plain=sent[1])

    async def _send(
        self, item: OutboxItem, method: str, claim: Callable[[], Awaitable[None]], **where: Any
    ) -> tuple[Any, bool] | Failure:
        """`method` (a post, or the update that finishes a stream) with the item's content and metadata, each try
        after `claim`: content Slack refuses gets one plain-text fallback (its notification text alone, no blocks),
        stored with the item. (Slack's answer, whether plain), or how it failed."""
        plain = item.plain
        while True:
            await claim()
            try:
                # a plain update sends no blocks (`[]`: without any it would keep the message's)
                text, blocks = (
                    (_plain_text(item.text), [] if method == "chat_update" else None)
                    if plain
                    else (item.text, item.blocks)
                )
                return await self.out.call(method, text=text, blocks=blocks, metadata=metadata(item.id), **where), plain
            except Exception as e:
                failure = classify(e)
                if not failure.content or plain or not _plain_text(item.text):
                    return failure
            log.warning("outbox.plain_fallback", error=failure.error)
            if not await self.store.outbox_plain(item.id, self.owner, error=failure.error):
                raise ClaimLost
            plain = True

    async def _update(self, item: OutboxItem) -> None:
        target = await self.store.outbox_item(item.target or "")
        if target is None or not target.ts:
            await self.store.outbox_failed(item.id, self.owner, error="its message was never posted")
            log.warning("outbox.update_orphaned", target=item.target)
            return
        await self._attempt(item, unsure=False)
        try:
            await self.out.call("chat_update", channel=item.channel, ts=target.ts, text=item.text, blocks=item.blocks)
        except Exception as e:
            await self._failed(item, classify(e))
            return
        await self.store.outbox_sent(item.id, self.owner, ts=target.ts, now=self.store.now())
        log.info("outbox.updated", ts=target.ts)

    # --- a streamed answer: its first part finishes the run's live stream instead of posting ----------------
    async def _finish_stream(self, item: OutboxItem) -> bool:
        """The run's answer (or report) when a stream of the run is still live: finish THAT message, with
        stopStream (the rest of the text, the feedback buttons, the metadata) or, when the stream broke, was
        cut by Slack's lifetime or predates a restart, with chat.update. False: no stream; post as usual."""
        run_id = item.run_id
        if not run_id or item.key not in (answer_key(run_id, 0), report_key(run_id, 0)):
            return False
        stream = await self.store.live_stream(run_id)
        if stream is None:
            return False
        ts = stream.ts or await self._find_stream(item, stream)
        if ts is None:  # startStream never made a message: nothing to finish
            await self.store.stream_ended(stream.id, StreamState.ABANDONED)
            log.info("outbox.stream_abandoned", stream=stream.id)
            return False
        if stream.ts is None:
            log.info("outbox.stream_adopted", ts=ts)
            await self.store.stream_started(stream.id, ts=ts, sent=stream.start_text)
        await self._attempt(item, unsure=False)
        rest = _stream_rest(item, stream, single=await self.store.outbox_by_key(answer_key(run_id, 1)) is None)
        if rest is not None:
            try:
                await self.out.call(
                    "chat_stopStream",
                    channel=item.channel,
                    ts=ts,
                    markdown_text=rest or None,
                    blocks=[b for b in item.blocks or [] if b.get("type") == "context_actions"] or None,
                    metadata=metadata(item.id),
                )
            except Exception as e:  # closed by Slack, or unsure: chat.update sets the same content either way
                log.info("outbox.stream_stop_failed", error=classify(e).error)
            else:
                await self._stream_sent(item, stream, ts, how="stopStream")
                return True
        elif not stream.broken:
            with contextlib.suppress(Exception):  # end its streaming state first (best effort)
                await self.out.call("chat_stopStream", channel=item.channel, ts=ts)
        sent = await self._send(item, "chat_update", lambda: self._renew(item), channel=item.channel, ts=ts)
        if isinstance(sent, Failure) and sent.transient:
            await self._failed(item, sent)
        elif isinstance(sent, Failure):
            log.warning("outbox.stream_update_failed", error=sent.error)  # gone or not ours: post instead
            await self.store.stream_ended(stream.id, StreamState.ABANDONED)
            return False
        else:
            await self._stream_sent(item, stream, ts, how="chat.update")
        return True

    async def _stream_sent(self, item: OutboxItem, stream: Stream, ts: str, *, how: str) -> None:
        if not await self.store.stream_finished(stream.id, item.id, self.owner, ts=ts, now=self.store.now()):
            raise ClaimLost
        log.info("outbox.stream_finished", ts=ts, how=how)

    async def _find_stream(self, item: OutboxItem, stream: Stream) -> str | None:
        """A stream whose startStream answer was lost (a crash, a timeout): this bot's message in the thread,
        without an outbox id, whose text starts with what startStream sent."""
        if not stream.start_text or not item.thread_ts or not self.bot_user_id:
            return None
        known = {s.ts for s in await self.store.streams(stream.run_id) if s.ts}
        start_text = stream.start_text

        def wanted(m: dict[str, Any]) -> bool:
            return (
                m.get("user") == self.bot_user_id
                and posted_item(m) is None
                and m.get("ts") not in known
                and str(m.get("text") or "").startswith(start_text)
            )

        return await self._look(item, wanted, unsure=item.unsure, attempts=item.attempts + 1)

    async def _attempt(self, item: OutboxItem, *, unsure: bool) -> None:
        if not await self.store.outbox_attempt(
            item.id, self.owner, until=self.store.now() + self.claim_seconds, unsure=unsure
        ):
            raise ClaimLost

    async def _renew(self, item: OutboxItem) -> None:
        if not await self.store.renew_outbox_claim(item.id, self.owner, until=self.store.now() + self.claim_seconds):
            raise ClaimLost

    async def _failed(self, item: OutboxItem, failure: Failure) -> None:
        if failure.transient:
            unsure = item.kind == OutboxKind.POST and failure.maybe_posted
            await self._retry(item, failure, attempts=item.attempts + 1, unsure=unsure)
            return
        log.error("outbox.failed", error=failure.error, kind=item.kind.value, channel=item.channel)
        await self.store.outbox_failed(item.id, self.owner, error=failure.error)

    async def _retry(self, item: OutboxItem, failure: Failure, *, attempts: int, unsure: bool) -> None:
        """Put the item back for a later attempt, after its backoff."""
        delay = self._backoff(attempts, failure.retry_after)
        log.warning("outbox.retry", error=failure.error, attempts=attempts, delay_s=round(delay, 2))
        now = self.store.now()
        await self.store.outbox_retry(item.id, self.owner, next_at=now + delay, error=failure.error, unsure=unsure)

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        """Exponential from 1 s, capped; Slack's Retry-After wins when it says longer (capped at 10 minutes)."""
        delay = min(self.max_backoff, 2.0 ** max(0, attempts - 1))
        return min(max(delay, retry_after or 0.0), 600.0)

    async def _look(
        self, item: OutboxItem, wanted: Callable[[dict[str, Any]], bool], *, unsure: bool, attempts: int | None = None
    ) -> str | None:
        """The ts of the first message `wanted` accepts in the item's thread (a root post's: the channel's newest
        messages, conversations.history), holding the item's claim page by page. Raises Deferred (the item put
        back with its backoff) when Slack couldn't be asked now; None when it isn't there."""
        root = not item.thread_ts
        replies = functools.partial(self.client.conversations_replies, ts=item.thread_ts or "")
        fetch: Callable[..., Awaitable[Any]] = self.client.conversations_history if root else replies

        async def page(cursor: str | None) -> Any:
            await self._renew(item)
            try:
                return await fetch(channel=item.channel, include_all_metadata=True, limit=THREAD_PAGE, cursor=cursor)
            except Exception as e:
                failure = classify(e)
                if not failure.transient:  # e.g. thread_not_found: nothing of ours can be in it
                    return {}
                await self._retry(
                    item, failure, attempts=item.attempts if attempts is None else attempts, unsure=unsure
                )
                raise Deferred from e

        async for response in slack_pages(page, most=ROOT_PAGES_MAX if root else THREAD_PAGES_MAX):
            for m in response.get("messages") or []:
                if isinstance(m, dict) and wanted(m):
                    return str(m["ts"])
        return None


def _stream_rest(item: OutboxItem, stream: Stream, *, single: bool) -> str | None:
    """What stopStream still has to add to the streamed message, or None when only chat.update can finish it:
    the stream broke or predates a restart (no whole answer stored), the answer has several parts, or what
    was sent is not the start of the answer."""
    final = stream.final
    if not single or stream.broken or final is None or not final.startswith(stream.sent):
        return None
    if item.key != answer_key(stream.run_id, 0):
        return None
    rest = final[len(stream.sent) :]
    return rest if len(rest) <= STREAM_TEXT_MAX else None


def _plain_text(text: str) -> str:
    """The plain-text fallback of a post Slack refused: its notification text alone, under the length limit
    (redacted before the cut, so the cut never leaves half a secret for the gateway's patterns to miss)."""
    return redact_truncate(text, PLAIN_TEXT_MAX)


@dataclass(frozen=True)
class Cards:
    """A run's approval cards and plain thread posts: the outbox for what must land exactly once, the redacting
    gateway (with the client's retries) for best-effort posts, and the after-ack set for a card's stray copy."""

    outbox: Outbox
    out: SlackOut
    after_ack: AfterAck

    async def update_card(self, approval: Approval) -> None:
        """Show the approval's state on its card: an outbox update of the card's post (sent once it is posted).

        A card the outbox never posted (an older version's, or a copy clicked under another ts than
        the outbox's) is updated directly, best effort, off the caller's path."""
        if not approval.channel:
            return
        msg = approval_card(approval)
        card = await self.outbox.store.outbox_by_key(card_key(approval.id))
        if card is not None:
            key = card_update_key(approval)
            await self.outbox.update(run_id=approval.run_id, channel=approval.channel, of=card.id, msg=msg, key=key)
        if approval.message_ts and (card is None or (card.ts is not None and card.ts != approval.message_ts)):
            copy = self.out.attempt(
                "chat_update", what="card_update", channel=approval.channel, ts=approval.message_ts, **vars(msg)
            )
            self.after_ack.spawn(copy, name=f"card_copy:{approval.id}")

    async def post(self, channel: str, thread_ts: str, msg: SlackMessage) -> str | None:
        """Post in a thread (redacted by the gateway); a final failure is logged, not raised."""
        return await self.out.post(channel=channel, thread_ts=thread_ts, text=msg.text, blocks=msg.blocks)
