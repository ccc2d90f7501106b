"""`opsloop demo`: a whole incident, played in one process, printed as the Slack thread unfolds.

alice mentions opsloop about web-03's full disk; the agent investigates; when it
asks to restart nginx, bob redirects it in the thread ("don't restart nginx, show me
the logs first"), which supersedes that card; it reads the logs, asks to delete the
rotated logs with a dry-run preview, carol approves, /var drops to 41%, and the
final answer arrives with tokens and cost. The people are played by the `Crew`
below, which reacts to what the bot posts (so it works with Claude too); with
`--interactive` you play them at a prompt instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bot.config.settings import Settings
from bot.core.types import RunResult, StopReason
from bot.playground.demo.stage import ALICE, BOB, CAROL, Stage, stage
from bot.playground.demo.transcript import Style, Transcript
from bot.playground.standin.render import Kind, card_state, card_tool, kind_of
from bot.playground.standin.slack import Message
from handlers.blocks import APPROVE, DENY

TASK = "web-03 is out of disk, deal with it"
REDIRECT = "don't restart nginx, show me the logs first"
HELP = (
    "commands: a / approve [as NAME] · d / deny [as NAME] · NAME: text (reply as alice, bob or carol) · "
    "text (reply as bob) · q / quit"
)


@dataclass
class Crew:
    """alice, bob and carol, reacting to the thread: bob redirects the first card, carol decides the rest."""

    stage: Stage
    transcript: Transcript
    thread_ts: str = ""
    pace: float = 0.0
    handled: set[str] = field(default_factory=set)
    actions: list[asyncio.Task[None]] = field(default_factory=list)
    redirected: bool = False

    def on_change(self) -> None:
        for msg in self.stage.slack.thread(self.stage.channel, self.thread_ts):
            if msg.ts in self.handled or kind_of(msg, self.stage.slack.bot_user_id) != Kind.CARD:
                continue
            if card_state(msg) == "pending":
                self.handled.add(msg.ts)
                self.actions.append(asyncio.create_task(self.decide(msg)))

    async def decide(self, card: Message) -> None:
        tool = card_tool(card)
        if self.pace:
            await asyncio.sleep(self.pace)  # reading pace for a person watching, not a wait for state
        if not self.redirected:
            self.redirected = True
            self.transcript.narrate(f"@bob reads the {tool} card and replies in the thread instead of clicking")
            await self.stage.reply(BOB, self.thread_ts, REDIRECT)
            return
        approve = tool != "restart_service"  # bob said not to restart nginx
        self.transcript.narrate(f"@carol clicks [{'Approve' if approve else 'Deny'}] on {tool}")
        await self.stage.click(CAROL, card.ts, APPROVE if approve else DENY)


@dataclass
class Prompt:
    """--interactive: lines typed at the terminal become clicks and thread replies."""

    stage: Stage
    transcript: Transcript
    thread_ts: str = ""
    lines: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    decided: set[str] = field(default_factory=set)
    quit: asyncio.Event = field(default_factory=asyncio.Event)  # `q` typed: the demo ends now

    def start_reading(self, stream: TextIO) -> None:
        loop = asyncio.get_running_loop()

        def read() -> None:  # a daemon thread: a pending input() never keeps the process alive
            for line in stream:
                loop.call_soon_threadsafe(self.lines.put_nowait, line.rstrip("\n"))
            loop.call_soon_threadsafe(self.lines.put_nowait, None)

        threading.Thread(target=read, name="demo-stdin", daemon=True).start()

    async def ask_task(self) -> str:
        self.transcript.say(f"Mention opsloop as @alice (Enter for: {TASK!r}):")
        line = await self.lines.get()
        return (line or "").strip() or TASK

    async def serve(self) -> None:
        """Read commands until `q` (or the end of input). A command that waits for a card runs while the next
        lines are read, so `q` always quits; commands still run one at a time, in the order typed."""
        self.transcript.say(self.transcript.style.dim(HELP))
        todo: asyncio.Queue[str] = asyncio.Queue()
        worker = asyncio.create_task(self._work(todo))
        try:
            while (line := await self.lines.get()) is not None:
                line = line.strip()
                if line in ("q", "quit", "exit"):
                    self.quit.set()
                    return
                if line:
                    todo.put_nowait(line)
            await todo.join()  # the end of input: what was typed still happens, the demo goes on
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def _work(self, todo: asyncio.Queue[str]) -> None:
        while True:
            line = await todo.get()
            try:
                await self.act(line)
            finally:
                todo.task_done()

    async def act(self, line: str) -> None:
        words = line.split()
        if words[0].lower() in ("a", "approve", "d", "deny"):
            who = self.stage.user_id(words[-1]) if len(words) == 3 and words[1] == "as" else CAROL
            if who is None:
                self.transcript.narrate(f"no user {words[-1]!r} (alice, bob or carol)")
                return
            card = await self.next_pending_card()
            action = APPROVE if words[0].lower().startswith("a") else DENY
            self.transcript.narrate(
                f"@{self.stage.names[who]} clicks [{'Approve' if action == APPROVE else 'Deny'}] on {card_tool(card)}"
            )
            await self.clicked(who, card, action)
            return
        name, _, text = line.partition(":")
        who = self.stage.user_id(name.strip()) if text.strip() else None
        await self.stage.reply(who or BOB, self.thread_ts, text.strip() if who else line)

    async def clicked(self, who: str, card: Message, action: str) -> None:
        """Click, then wait for what the click did: the card decided (its state changed), the card changed
        (one approval of several), or the clicker told why not (an ephemeral note): that card stays open."""
        slack = self.stage.slack
        notes, blocks = len(slack.ephemerals), card.blocks

        def outcome() -> str | None:
            if card_state(card) != "pending":
                return "decided"
            if card.blocks != blocks:
                return "changed"
            return "refused" if any(e["user"] == who for e in slack.ephemerals[notes:]) else None

        await self.stage.click(who, card.ts, action)
        with contextlib.suppress(TimeoutError):
            if await slack.wait_until(outcome, 30.0, "the click's outcome") == "decided":
                self.decided.add(card.ts)

    async def next_pending_card(self) -> Message:
        """The pending card to decide; typed ahead of it, a decision waits for the next card."""
        slack = self.stage.slack

        def undecided(m: Message) -> bool:
            return (
                m.thread_ts == self.thread_ts
                and m.ts not in self.decided
                and kind_of(m, slack.bot_user_id) == Kind.CARD
                and card_state(m) == "pending"
            )

        return await slack.wait_for_message(self.stage.channel, undecided, timeout=24 * 3600)


async def last_drive(st: Stage, changed: asyncio.Event) -> RunResult | None:
    """The demo's run, followed across its drives: the supervisor ends a drive whenever the run waits for a
    person (a stored pause) and starts a new one once someone decides, so the result comes from the last.
    `changed` is set on every Slack change."""
    run_id: str | None = None
    seen: set[asyncio.Task[RunResult | None]] = set()
    while True:
        for rid, task in list(st.ops.supervisor.tasks.items()):
            if run_id in (None, rid) and task not in seen:
                run_id = rid
                seen.add(task)
                if (result := await asyncio.shield(task)) is not None:  # quitting leaves the drive be
                    return result
        changed.clear()
        with contextlib.suppress(TimeoutError):  # a drive can start without a Slack change to announce it
            async with asyncio.timeout(0.5):
                await changed.wait()


async def play(
    base: Settings,
    *,
    out: TextIO = sys.stdout,
    interactive: bool = False,
    color: bool = False,
    pace: float = 0.0,
    db_path: Path | None = None,
    limit_s: float | None = None,
    stdin: TextIO = sys.stdin,
) -> int:
    """Play the incident; 0 when the run completed."""
    with tempfile.TemporaryDirectory(prefix="opsloop-demo-") as tmp:
        async with stage(base, db_path=db_path or Path(tmp) / "opsloop.db") as st:
            transcript = Transcript(st.slack, st.channel, st.names, out, Style(color=color))
            limit_s = limit_s or (120.0 if st.scripted else 900.0)  # Claude thinks; the script does not
            return await _play(
                st, transcript, interactive=interactive, pace=pace, limit_s=limit_s, stdin=stdin, db=db_path
            )


async def _play(
    st: Stage, transcript: Transcript, *, interactive: bool, pace: float, limit_s: float, stdin: TextIO, db: Path | None
) -> int:
    s = transcript.style
    transcript.say(
        s.bold("opsloop demo")
        + s.dim(
            f" · #incident on a local Slack stand-in ({st.slack.base_url}) · "
            f"the real opsloop app over Socket Mode · {st.model_label} · "
            "tools act on a simulated web-03"
        )
    )
    transcript.say()
    changed = asyncio.Event()
    crew = Crew(st, transcript, pace=pace)
    prompt = Prompt(st, transcript)
    unwatch = [st.slack.watch(transcript.update), st.slack.watch(changed.set)]
    reader: asyncio.Task[None] | None = None
    try:
        task_text = TASK
        if interactive:
            prompt.start_reading(stdin)
            task_text = await prompt.ask_task()
        else:
            unwatch.append(st.slack.watch(crew.on_change))
        thread_ts = await st.mention(ALICE, task_text)
        crew.thread_ts = prompt.thread_ts = thread_ts
        if interactive:
            reader = asyncio.create_task(prompt.serve())
        async with asyncio.timeout(None if interactive else limit_s):
            result = await _until_quit(last_drive(st, changed), prompt.quit)
            if result is None and prompt.quit.is_set():
                transcript.say(s.bold("opsloop demo: quit before the incident finished"))
                return 1
            if result is not None:  # the answer is in the outbox: wait until Slack has it
                await st.ops.outbox.settle(run_id=result.run_id)
        await asyncio.gather(*crew.actions)
    except TimeoutError:
        transcript.say(s.bold(f"opsloop demo: the incident did not finish within {limit_s:.0f}s"))
        return 1
    finally:
        for stop in unwatch:
            stop()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    transcript.say()
    if result is None:
        return 1
    transcript.say(summary(result, st, db))
    return 0 if result.stop_reason == StopReason.COMPLETED else 1


async def _until_quit(first: Coroutine[Any, Any, RunResult | None], quit: asyncio.Event) -> RunResult | None:
    """The run's result, or None as soon as `quit` is set (the run itself is left to the stage's shutdown)."""
    result = asyncio.ensure_future(first)
    quitting = asyncio.ensure_future(quit.wait())
    try:
        await asyncio.wait({result, quitting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        quitting.cancel()
    if result.done():
        return result.result()
    result.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await result
    return None


def summary(r: RunResult, st: Stage, db: Path | None) -> str:
    u = r.usage
    lines = [
        f"run {r.run_id}: {r.stop_reason.value} in {r.iterations} steps · {u.paid_tokens:,} tokens "
        f"(in {u.input_tokens:,} · out {u.output_tokens:,} · cache read {u.cache_read_tokens:,} · "
        f"write {u.cache_write_tokens:,}) · ${r.cost_usd:.4f} · {st.model_label}",
        f"tools called: {', '.join(r.tools_called) or 'none'}",
    ]
    if db is not None:
        lines.append(f"trace kept: OPSLOOP_DB={db} opsloop show {r.run_id}")
    return "\n".join(lines)
