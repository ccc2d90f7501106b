"""Streamed answers: a step's text goes into the thread as the model writes it (chat.startStream, then appends
at most once a second), and the answer's outbox item finishes that message (handlers/outbox.py).

The runtime can't know a turn is the answer until it ends, so a turn's text streams only once it is
`HOLDBACK_CHARS` long with no tool_use block started; a tool_use block that starts later stops the stream as
it is (that message stays, without feedback buttons) and the step goes on to its tools, so no stream is ever
held across an approval wait. Short answers are posted as before.

What is sent is redacted on the whole buffer before each call, and only its stable prefix goes out: whole
words (a one-paragraph answer streams too), less the word being written and any tail a later delta could still
turn into a secret (`Bearer ` before its token, a PEM body before its END line, see bot.core.redact.settled) or into a
link. A secret split across two deltas is never sent in part.

Exactly once: the stream's row is stored before startStream is called and its ts right after it answers; the
run's answer finishes the live stream (stopStream, or chat.update when the stream broke or after a restart).
A resumed run never starts a second stream while the first is live.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import TYPE_CHECKING

import structlog

from bot.core.redact import redact, settled
from bot.core.types import Run, StreamState
from handlers import messages
from handlers.mrkdwn import reveal, show_links
from handlers.outbox import classify

if TYPE_CHECKING:
    from bot.store import Store
    from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.stream")

HOLDBACK_CHARS = 300  # a turn's text streams once it is this long with no tool call started
START_MIN_CHARS = 40  # the first stable text sent (how a stream whose ts was lost is found again)
APPEND_INTERVAL_SECONDS = 1.0  # at most one append per second per thread (appendStream is Tier 4; budget anyway)
STREAM_CHARS_MAX = 11_000  # what a stream shows stays under Slack's 12,000 per call and inside one message part
# A Markdown link still being written at the end of the text (handlers.mrkdwn._LINK, cut short).
_OPEN_LINK = re.compile(r"\[[^\]\n|]*(?:\](?:\((?:https?://[^\s)|]*)?)?)?\Z")


def safe_markdown(text: str) -> str:
    """Model Markdown as a stream shows it, with the posted answer's hygiene (handlers/mrkdwn.py): `&`, `<` and
    `>` escaped (no `<!channel>`, no hand-made links), a link's target shown rather than hidden behind its
    words, characters a reader can't see written out. Line by line, so a stable prefix stays stable."""
    return reveal(show_links(messages.escape(text)), prose=True)


def shown(text: str) -> str:
    """The whole turn as the streamed message shows it once finished: redacted, then made safe."""
    return safe_markdown(redact(text))


def stable_prefix(buffered: str) -> str:
    """The part of the shown buffer that no later delta can change: the redacted buffer's whole words, less a
    tail that could still become (part of) a secret (bot.core.redact.settled) or a Markdown link that is not yet
    whole (show_links rewrites it once it is), made safe."""
    redacted = redact(buffered)
    cut = settled(redacted)
    link = _OPEN_LINK.search(redacted, 0, cut)
    if link:
        cut = settled(redacted[: link.start()])
    return safe_markdown(redacted[:cut])


class AnswerStreams:
    """One drive's streams in its thread: who they are for, and the thread's append budget."""

    def __init__(self, row: Run, *, store: Store, out: SlackOut, enabled: bool) -> None:
        """`out`: the outbox's gateway, with no automatic retries (a retried startStream or append could land
        twice); `enabled`: this process streams answers (settings and Supervisor.stream_answers)."""
        self.store, self.run_id = store, row.id
        self.channel, self.thread_ts = row.channel, row.thread_ts
        self.requester, self.team_id = row.requester, row.team_id
        # Alert runs have no requester, and a channel stream must name one (and their team): post as before.
        self.enabled = bool(enabled and row.requester and row.team_id)
        self.last_call = 0.0  # time.monotonic() of this thread's last stream call (the append budget)
        self.out = out
        self.steps: list[StepStream] = []

    def for_step(self, step: int) -> StepStream | None:
        if not self.enabled:
            return None
        self.steps.append(StepStream(self, step))
        return self.steps[-1]

    def abandon(self) -> None:
        """The drive ends (answered, paused, stopped, shut down): no more appends from it. A stream still live
        stays so in the store: the run's answer or report finishes that message (or the next driver's does)."""
        for step in self.steps:
            step.abandon()
        self.steps.clear()


class StepStream:
    """The AnswerSink of one step (bot.core.types.AnswerSink): buffers its text and streams it to Slack."""

    def __init__(self, streams: AnswerStreams, step: int) -> None:
        self.streams, self.step = streams, step
        self.buffer = ""
        self.tool = False  # a tool_use block started: this turn is not the answer
        self.void = False  # a retried attempt: what was streamed may not be what the answer says
        self.stream_id: str | None = None
        self.ts: str | None = None
        self.sent = ""  # what the message shows
        self.broken = False
        self.done = False  # nothing more to send (ended, refused, broken)
        self._changed = asyncio.Event()
        self._ended = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    # --- the sink --------------------------------------------------------------------------------
    async def attempt(self) -> None:
        if self.buffer and self.stream_id is not None:
            self.void = True  # a new attempt writes a new text: the stream shows no more of it
        self.buffer, self.tool = "", False

    async def text(self, delta: str) -> None:
        self.buffer += delta
        if self.void or self.tool or self.done:
            return
        if self._pump is None and len(self.buffer) >= HOLDBACK_CHARS and not self.buffer.lstrip().startswith("{"):
            self._pump = asyncio.create_task(self._run(), name=f"stream:{self.streams.run_id}:{self.step}")
        self._changed.set()

    async def tool_use(self) -> None:
        self.tool = True
        self._changed.set()

    async def end(self, *, answer: bool) -> None:
        """The turn is known. The answer's stream stays open for its outbox item (which stops it with the rest
        of the text and the feedback buttons); any other is stopped now, as it is."""
        self.done = True
        self._changed.set()
        self._ended.set()
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)
        if self.stream_id is None or self.ts is None:
            return  # nothing started, or startStream's answer is unknown: the outbox looks for it by its text
        store = self.streams.store
        if answer and not self.tool:
            if not self.void:
                await store.stream_answered(self.stream_id, final=shown(self.buffer))
            return
        rest = shown(self.buffer)
        rest = rest[len(self.sent) :] if rest.startswith(self.sent) and not self.void and not self.broken else ""
        if not self.broken:
            with contextlib.suppress(Exception):  # best effort: Slack closes it by itself after its lifetime
                await self.streams.out.call(
                    "chat_stopStream",
                    channel=self.streams.channel,
                    ts=self.ts,
                    markdown_text=rest[:STREAM_CHARS_MAX] or None,
                )
        await store.stream_ended(self.stream_id, StreamState.INTERIM)
        log.info("stream.interim", ts=self.ts, why="a tool call followed the text" if self.tool else "no answer")

    def abandon(self) -> None:
        self.done = True
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()

    # --- the pump: start, then appends at most once per APPEND_INTERVAL_SECONDS -----------------------
    async def _run(self) -> None:
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                if self.done or self.tool or self.void:
                    return  # the answer's rest goes with stopStream (one call), not with a last append
                if self.stream_id is None:
                    if not await self._start():
                        return
                    continue
                wait = self.streams.last_call + APPEND_INTERVAL_SECONDS - time.monotonic()
                if wait > 0:  # the budget; the step's end cuts the wait short
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._ended.wait()
                    if self.done or self.tool or self.void:
                        return
                await self._append()
                if self.broken:
                    return
        except Exception:  # never the run's problem: the answer is posted through the outbox regardless
            log.exception("stream.failed")
            self.done = True

    async def _start(self) -> bool:
        """Record the intent, call startStream, store its ts. False: this step streams no further."""
        s = self.streams
        text = stable_prefix(self.buffer)[:STREAM_CHARS_MAX]
        if len(self.buffer) < HOLDBACK_CHARS or len(text) < START_MIN_CHARS:
            return True  # not enough (stable) text yet, or a retry began again: wait for more
        stream_id = await s.store.stream_intent(
            run_id=s.run_id, step=self.step, channel=s.channel, thread_ts=s.thread_ts, start_text=text
        )
        if stream_id is None:  # a live stream from before a restart: the answer finishes that one
            s.enabled = False
            return False
        self.stream_id = stream_id
        s.last_call = time.monotonic()
        try:
            response = await s.out.call(
                "chat_startStream",
                channel=s.channel,
                thread_ts=s.thread_ts,
                markdown_text=text,
                recipient_user_id=s.requester,
                recipient_team_id=s.team_id or "",
            )
        except Exception as e:
            failure = classify(e)
            log.info("stream.start_refused", error=failure.error, maybe_started=failure.maybe_posted)
            self.done = True
            s.enabled = False  # this workspace (or this drive) posts answers as before
            if not failure.maybe_posted:  # refused for sure: no message exists
                await s.store.stream_ended(stream_id, StreamState.ABANDONED)
            return False
        ts = str(response["ts"])
        self.ts, self.sent = ts, text
        await s.store.stream_started(stream_id, ts=ts, sent=text)
        log.info("stream.started", ts=ts, chars=len(text))
        return True

    async def _append(self) -> None:
        s = self.streams
        assert self.stream_id is not None and self.ts is not None
        text = stable_prefix(self.buffer)[:STREAM_CHARS_MAX]
        if not text.startswith(self.sent):  # redaction changed what was sent: nothing more goes out this way
            await self._break("the redacted text no longer extends what was sent")
            return
        if len(text) == len(self.sent):
            return
        s.last_call = time.monotonic()
        try:
            await s.out.call("chat_appendStream", channel=s.channel, ts=self.ts, markdown_text=text[len(self.sent) :])
        except Exception as e:
            failure = classify(e)
            if failure.retry_after is not None or failure.error == "ratelimited":
                # Tier 4 is per workspace, shared by every thread streaming at once: wait, the text keeps.
                pause = failure.retry_after or APPEND_INTERVAL_SECONDS
                s.last_call = time.monotonic() + pause - APPEND_INTERVAL_SECONDS  # the next append in `pause`
                self._changed.set()
                log.info("stream.append_ratelimited", retry_after=failure.retry_after)
                return
            await self._break(failure.error)  # closed by Slack, or unsure whether it landed: chat.update ends it
            return
        self.sent = text
        await s.store.stream_sent(self.stream_id, sent=text)

    async def _break(self, why: str) -> None:
        """No more appends: the answer's outbox item finishes the message with chat.update."""
        self.broken = self.done = True
        if self.stream_id is not None:
            await self.streams.store.stream_broken(self.stream_id)
        log.info("stream.broken", ts=self.ts, why=why)
