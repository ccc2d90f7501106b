"""`opsloop ask "…"`: one investigation in the terminal, on the same runtime, tools, reaches, context, budgets and
store as a Slack run. The terminal stands in for Slack (`bot.SlackSide`): `Terminal` shows the approval cards
(the card's own text) and answers them at a prompt as the configured person, through the same approval
lifecycle and policy as a click; `TerminalThread` (`bot.RunThread`) shows the task list and the living summary
(redrawn in place on a terminal, plain lines otherwise, or the run's events as JSON lines), then the answer or
the handoff report. Ctrl-C is the Stop button; a second one exits at once.

A terminal run lives in the conversation `terminal:<person>`, which incident memory keeps as a DM (`im`): its
record is offered only to that person's later `opsloop ask` runs. Only this process drives its run (a Slack
process's scheduler never takes a terminal run over): if it is killed (a second Ctrl-C, SIGKILL), the run stays
interrupted, as `opsloop show` and `opsloop runs` say, and nobody finishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import textwrap
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from bot.config.settings import Settings
from bot.core.pricing import price_for
from bot.core.types import TERMINAL, Approval, ApprovalState, DecisionCause, Run, RunResult, StopReason
from bot.run import approvals
from bot.run.events import ApprovalDecided, Iteration, RunEvent, Summarized, ToolDone, ToolsAnnounced, ToolStarted
from bot.run.scheduler import Supervisor
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from bot.run.summary import Summary, render_text
from bot.store import Store
from handlers import blocks, messages
from handlers.approvals import ApprovalSlack
from handlers.mrkdwn import FENCE, plain, reveal, unescape
from handlers.policy import ApprovalPolicy
from handlers.stream import HOLDBACK_CHARS, shown, stable_prefix
from handlers.supervisor.status import TaskList
from tools.api import Offer, RunFacts, RunScope

KIND = "im"  # incident memory's kind for a terminal run: offered only in its own conversation (its person's)
NO_TERMINAL_USER = (
    'nobody may approve from this terminal: set [approvals] terminal_user = "U…" (your Slack user id) in the '
    "config, or pass --as U…"
)
HEARTBEAT_SECONDS = 3.0  # the run's lease is renewed this often (the Supervisor's lease is 10 s)


def conversation(user: str | None) -> str:
    return f"{TERMINAL}{user or 'nobody'}"


# The emoji codes opsloop's own messages use: the words beside each say it, so the terminal shows nothing for them.
EMOJI = dict.fromkeys(
    (
        *("warning", "rotating_light", "no_entry", "no_entry_sign", "lock", "white_check_mark", "hourglass"),
        *("hourglass_flowing_sand", "raised_hand", "octagonal_sign", "leftwards_arrow_with_hook", "eyes", "pager"),
        *("bell", "repeat"),
    ),
    "",
)
CODE_INDENT = "    "  # a code fence's lines, shown apart from the prose


def terminal_text(mrkdwn: str, *, bold: bool = False) -> str:
    """Slack mrkdwn as a terminal shows it (`mrkdwn.plain`): `*bold*` in ANSI bold when `bold` (a TTY), else
    plain; `<url|text>` as "text (url)"; mentions as @U…; opsloop's emoji codes dropped; a fenced block's lines
    indented, as written. Hidden characters (escape sequences included) are revealed first, so the only escape
    codes shown are the bold's own."""
    strong = (lambda t: f"\x1b[1m{t}\x1b[22m") if bold else str
    pieces = reveal(mrkdwn, prose=True).split(FENCE)
    shown = [
        textwrap.indent(piece.strip("\n"), CODE_INDENT) if i % 2 else plain(piece, {}, emoji=EMOJI, bold=strong)
        for i, piece in enumerate(pieces)
    ]
    return "\n".join(p.strip("\n") for p in shown if p.strip())


def card_text(msg: blocks.SlackMessage) -> str:
    """A Slack message's blocks as mrkdwn lines (headers, sections, fields, context), without its buttons."""
    lines: list[str] = []
    for b in msg.blocks:
        if b.get("type") in ("header", "section") and b.get("text"):
            lines.append(b["text"]["text"])
        lines += [f["text"] for f in b.get("fields") or []]
        if b.get("type") == "context":
            lines += [e["text"] for e in b.get("elements") or [] if e.get("text")]
    return "\n".join(lines)


class Screen:
    """What the terminal shows: a live view redrawn in place (a TTY), plain lines (a pipe), or JSON lines."""

    def __init__(self, out: TextIO, *, json_lines: bool) -> None:
        self.out, self.json = out, json_lines
        self.live = out.isatty() and not json_lines
        self.tasks = TaskList()
        self.summary: Summary | None = None
        self.step = 0
        self._drawn = 0  # lines of the live view on screen, redrawn on the next change

    def say(self, mrkdwn: str) -> None:
        """Text that stays (a card, the answer), rendered for the terminal (`terminal_text`): below the live view,
        which is drawn afresh under it later."""
        if self.json:
            self.event({"type": "Message", "text": terminal_text(mrkdwn)})
            return
        self._erase()
        print(terminal_text(mrkdwn, bold=self.live), file=self.out, flush=True)

    def write(self, text: str) -> None:
        """Streamed text, as it comes, after what is on screen: the live view stays above it as it was."""
        self._drawn = 0
        self.out.write(text)
        self.out.flush()

    def event(self, data: dict[str, Any]) -> None:
        print(json.dumps(data, ensure_ascii=False, default=str), file=self.out, flush=True)

    def show(self, event: RunEvent) -> None:
        if self.json:
            self.event({"type": type(event).__name__, **dataclasses.asdict(event)})
            return
        self.step = event.step
        changed = self._track(event)
        if not changed:
            return
        if self.live:
            self._erase()
            lines = self._view()
            print("\n".join(lines), file=self.out, flush=True)
            self._drawn = len(lines)
        elif isinstance(event, Summarized):
            print(reveal(f"summary: {render_text(event.summary)}", prose=True), file=self.out, flush=True)
        elif isinstance(event, ToolDone) and (task := self.tasks.items.get(event.call_id)):
            print(reveal(f"[{task.status}] {task.title}: {task.output}"), file=self.out, flush=True)

    def _track(self, event: RunEvent) -> bool:
        """The task list follows the runtime's events, as the Slack thread's does (the summary is not a task)."""
        if isinstance(event, Summarized):
            self.summary = event.summary
        elif getattr(event, "tool", None) == SUMMARY_TOOL:
            return False
        elif isinstance(event, ToolsAnnounced):
            for call in event.calls:
                if call.tool != SUMMARY_TOOL and not self.tasks.has(call.id):
                    self.tasks.put(call.id, messages.task_title(call.tool, call.args), "pending")
        elif isinstance(event, ToolStarted):
            self.tasks.put(event.call_id, messages.task_title(event.tool, event.args), "in_progress")
        elif isinstance(event, ToolDone):
            done = self.tasks.items.get(event.call_id)
            output = messages.TASK_NOT_RUN if done and done.status == "error" else blocks.task_output(event.result)
            self.tasks.put(event.call_id, None, "error" if event.is_error else "complete", output=output)
        elif isinstance(event, ApprovalDecided) and not event.approved:
            self.tasks.put(event.call_id, None, "error", output=messages.TASK_NOT_RUN)
        else:
            return isinstance(event, Iteration) and self.live
        return True

    def _view(self) -> list[str]:
        marks = {"pending": "·", "in_progress": "…", "complete": "✓", "error": "✗"}
        lines = [f"step {self.step}"]
        for t in self.tasks.all():
            lines.append(reveal(f" {marks.get(t.status, '?')} {t.title}" + (f": {t.output}" if t.output else "")))
        if self.summary is not None:
            lines += ["", reveal(render_text(self.summary), prose=True)]
        width = shutil.get_terminal_size().columns
        return [line[: width - 1] for one in lines for line in one.splitlines() or [""]]

    def _erase(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
        self._drawn = 0


class Streamed:
    """One step's text shown on a TTY as the model writes it (`bot.AnswerSink`), by the Slack stream's rules
    (handlers/stream.py): once it is `HOLDBACK_CHARS` long with no tool call started, redacted, only what no later
    delta can change; a tool call or a retry stops it where it is. The answer's stream is completed at `end`
    (then `TerminalThread.finish` doesn't print it again); what is shown is the model's Markdown, as written."""

    def __init__(self, thread: TerminalThread) -> None:
        self.thread, self.screen = thread, thread.term.screen
        self.buffer, self.printed = "", ""
        self.tool = self.void = False

    async def attempt(self) -> None:
        self.void = self.void or bool(self.printed)  # a retry writes another text: this stream shows no more
        self.buffer, self.tool = "", False

    async def text(self, delta: str) -> None:
        self.buffer += delta
        if not (self.tool or self.void) and (self.printed or len(self.buffer) >= HOLDBACK_CHARS):
            self._show(stable_prefix(self.buffer))

    async def tool_use(self) -> None:
        self.tool = True

    async def end(self, *, answer: bool) -> None:
        if not self.printed:
            return
        if answer and not (self.tool or self.void):
            self._show(shown(self.buffer))
            self.thread.streamed = True
        self.screen.write("\n")

    def _show(self, safe: str) -> None:
        if safe.startswith(self.printed) and len(safe) > len(self.printed):
            self.screen.write(unescape(safe[len(self.printed) :]))
            self.printed = safe


class Answers:
    """Lines typed on standard input, read by a daemon thread (a pending read never keeps the process alive)."""

    def __init__(self, stream: TextIO) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def read() -> None:
            for line in stream:
                loop.call_soon_threadsafe(self.lines.put_nowait, line)
            loop.call_soon_threadsafe(self.lines.put_nowait, None)

        threading.Thread(target=read, name="opsloop-ask-stdin", daemon=True).start()

    async def yes(self) -> bool:
        """The next answer: y/yes approves; anything else, or the end of input, declines."""
        line = await self.lines.get()
        if line is None:
            self.lines.put_nowait(None)  # every later question reads the end of input too
        return (line or "").strip().lower() in ("y", "yes")


class Terminal(ApprovalSlack):
    """The terminal as the runs' Slack side (`bot.SlackSide`): the cards are asked at the prompt, as `user`."""

    def __init__(self, settings: Settings, store: Store, screen: Screen, answers: Answers, user: str | None) -> None:
        from bot.app.wiring import slack_client  # user groups among the approvers are resolved through Slack

        self.settings, self.store, self.screen, self.answers, self.user = settings, store, screen, answers, user
        self.policy = ApprovalPolicy(settings.approvals, slack_client(settings, retries=False))
        self.desk: approvals.ApprovalDesk | None = None  # the Supervisor's, set once it exists

    def thread(self, row: Run) -> TerminalThread:
        return TerminalThread(self, row)

    async def quiet(self) -> None:
        return None

    async def post_card(self, approval: Approval) -> None:
        """The card, then the question: a click's checks decide (`approvals.decide`). What the terminal can't
        approve (no person set, a policy refusal, two approvals needed) ends the approval as denied with why:
        nobody else can answer this prompt, so waiting would only run out the approval's time."""
        assert self.desk is not None
        self.screen.say("\n" + card_text(blocks.approval_card(approval)))
        why = NO_TERMINAL_USER if self.user is None else await self.refusal(approval, self.user, approve=True)
        if why is None and approval.required > 1:
            why = (
                f"{approval.tool} needs {approval.required} approvals from different people: it can't be approved "
                "from one terminal; approve it in Slack, or ask again there"
            )
        if why is None:
            assert self.user is not None
            self.screen.say(f"approve {approval.tool} as {self.user}? [y/N] ")
            approve = await self.answers.yes()
            refused = await approvals.decide(
                self.desk, approval.id, self.user, approve=approve, channel=approval.channel, ts=None
            )
            if refused is None or not (await self.store.get_approval(approval.id)).pending:
                return
            why = refused.words or refused.why.value
        self.screen.say(f"can't approve: {why}")
        if await self.store.decide_approval(
            approval.id,
            state=ApprovalState.DENIED,
            cause=DecisionCause.CLICK,
            decided_by=None,
            reason=why,
            decided_at=self.store.now(),
        ):
            await self.show_card(await self.store.get_approval(approval.id))

    async def show_card(self, approval: Approval, *, ts: str | None = None) -> None:
        if not approval.pending:
            self.screen.say(card_text(blocks.approval_card(approval)).splitlines()[-1])

    async def off_its_card(self, approval: Approval, *, channel: str | None, ts: str | None) -> str | None:
        return None  # the prompt is the card: only this terminal's person answers it

    async def name(self, user: str) -> str:
        return user


class TerminalThread:
    """One drive of a run, as the terminal shows it (`bot.RunThread`)."""

    def __init__(self, term: Terminal, row: Run) -> None:
        self.term, self.row = term, row
        self.streamed = False  # the answer was shown as the model wrote it (`Streamed`)

    async def open(self) -> RunScope:
        row = self.row
        return RunScope(
            run_id=row.id,
            conversation=row.channel,
            thread_ts=row.thread_ts,
            started_at=row.created_at,
            anchor=row.created_at,
            task=row.task,
        )

    async def follow_kind(self) -> None:
        await self.term.store.note_kind(self.row.channel, KIND)

    async def offered(self, offers: Sequence[Offer]) -> None:
        for offer in offers:
            if (line := blocks.offer_line(offer.thread_line)) is not None:
                self.term.screen.say(card_text(line) or line.text)

    async def on_event(self, event: RunEvent) -> None:
        self.term.screen.show(event)

    def answer_sink(self, step: int) -> Streamed | None:
        """On a TTY the answer shows as the model writes it; a pipe and --json get it whole at the end."""
        return Streamed(self) if self.term.screen.live else None

    async def facts(self) -> RunFacts:
        return RunFacts(kind=KIND)

    async def end_drive(self, *, paused: bool) -> None:
        return None

    def cancelled(self) -> None:
        return None

    async def store_unavailable(self, *, disk_full: bool) -> None:
        self.term.screen.say(messages.store_unavailable(disk_full=disk_full))

    async def finish(self, result: RunResult) -> None:
        """The answer, or the handoff report (the Slack report's own text); the run is marked reported (no Slack
        process ever posts it)."""
        store, screen = self.term.store, self.term.screen
        await store.report(self.row.id, [])
        summary = screen.summary or await store.last_summary(self.row.id)
        if screen.json:
            screen.event({"type": "Finished", "run_id": result.run_id, "result": dataclasses.asdict(result)})
            return
        if result.stop_reason == StopReason.COMPLETED and result.output:
            if not self.streamed:  # a streamed answer is on screen already, under the live view's summary
                answer = blocks.text_messages(result.output, summary=summary)
                screen.say("\n" + "\n".join(card_text(m) for m in answer))
        else:
            history = await store.history(self.row.id)
            limit = self.term.settings.limits.max_iterations
            msgs = blocks.stopped_run_report(result, history, max_iterations=limit, summary=summary)
            screen.say("\n" + "\n".join(card_text(m) for m in msgs))
        screen.say(f"\nrun {result.run_id}: opsloop show {result.run_id}")


async def ask(
    settings: Settings, question: str, *, user: str | None, json_lines: bool, stdin: TextIO, stdout: TextIO
) -> int:
    """Run one investigation of `question` here; 0 when it answered, 1 when it stopped without an answer."""
    from bot.app.wiring import model_clients, models_on
    from tools.config import build_registry
    from tools.reaches import TABLES

    store = await Store(settings.db_path, tables=TABLES).open()
    clients = model_clients(settings)  # the chain's providers, as `opsloop run` calls them
    try:
        tools = await build_registry(settings.tools, reaches=settings.reaches, shared={Store: store})
        screen = Screen(stdout, json_lines=json_lines)
        term = Terminal(settings, store, screen, Answers(stdin), user)
        sup = Supervisor(
            settings=settings,
            store=store,
            tools=tools,
            model_for=models_on(settings, clients),
            price_for=lambda m: price_for(m, settings.model.prices)[0],
            slack=term,
        )
        term.desk = sup.approvals
        channel = conversation(user)
        row, _ = await store.open_run(
            channel=channel,
            thread_ts=f"{time.time():.6f}",
            requester=user or "",
            task=question,
            prompt=f"[incident request from {f'<@{user}>' if user else 'someone'} in a terminal] {question}",
            model=settings.model.primary,
            mention_ts="",
        )
        await store.note_kind(channel, KIND)
        try:
            result = await _drive(sup, row.id, user, screen)
        finally:
            await tools.aclose()
        return 0 if result is not None and result.stop_reason == StopReason.COMPLETED else 1
    finally:
        for client in clients.values():
            await client.close()
        await store.close()


async def _drive(sup: Supervisor, run_id: str, user: str | None, screen: Screen) -> RunResult | None:
    """Drive the run here until it ends, its lease renewed meanwhile; Ctrl-C is a Stop click (the run ends with
    its handoff report, driven again if the Stop cut a drive short), and a second one exits at once."""
    loop = asyncio.get_running_loop()
    stops: list[asyncio.Task[None]] = []

    def interrupted() -> None:
        if stops:
            os._exit(130)
        screen.say("stopping: the run ends with its handoff report (Ctrl-C again to exit at once)")
        stops.append(asyncio.ensure_future(sup.stop(run_id, user or "the terminal")))

    loop.add_signal_handler(signal.SIGINT, interrupted)
    beat = asyncio.ensure_future(_heartbeat(sup, run_id))
    try:
        while True:
            task = sup.start(run_id)
            with contextlib.suppress(asyncio.CancelledError):
                if task is not None and (result := await task) is not None:
                    return result
            await asyncio.gather(*stops)
            if not (await sup.store.get_run(run_id)).active:
                return None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        beat.cancel()


async def _heartbeat(sup: Supervisor, run_id: str) -> None:
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        await sup.store.renew_leases(sup.owner, [run_id], until=sup.store.now() + sup.lease_seconds)
