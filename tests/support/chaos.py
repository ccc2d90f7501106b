"""Shared pieces of the crash and rolling-deploy tests: real `opsloop run` processes on one database,
a scripted model that answers from the conversation alone, and readers for what reached Slack.

The model (`ScenarioModel`) is a pure function of the request: a run tagged ``[R07]`` in its
task asks, step by step (one step per tool result in the history), for ``check_health``, a
``restart_service`` (mutating), a ``drain_node`` (destructive), then answers
``R07 resolved: ...``. A step asked again after a crash gets the same answer, and every call
carries a unique ``change`` argument, so `tests.support.crash_tools` can count executions per call.
"""

# ruff: noqa: ASYNC109  (helpers take timeout= like asyncio.wait_for)

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.run.prompts import SUMMARY_BEHIND
from handlers.blocks import APPROVE, DENY
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use
from tests.support.fakes.slack import ApiCall, FakeSlack, Message

ROOT = Path(__file__).resolve().parents[2]
Database = Path | str  # where `Bots` keep their store: a SQLite file, or a postgresql:// URL
CHANNEL, ALICE, BOB, CAROL = "C0INCIDENT", "U0ALICE", "U0BOB", "U0CAROL"
APPROVERS = (CAROL, BOB)
PEOPLE = {ALICE: "alice", BOB: "bob", CAROL: "carol"}
TAG = re.compile(r"\[(R\d+)\]")
FINAL_STEP = 3


def answer_text(tag: str) -> str:
    return f"{tag} resolved: service restarted and node drained as approved."


def change(tag: str, step: int) -> str:
    return f"{tag}-{('health', 'restart', 'drain')[step]}"


def scenario_reply(tag: str, step: int) -> Reply:
    """What the model says at `step` of run `tag` (ids and arguments fixed by tag and step)."""
    ident = f"toolu_{tag}_{step}"
    if step == 0:
        return reply(text(f"Checking {tag}."), tool_use("check_health", {"host": f"web-{tag}"}, id=ident))
    if step == 1:
        return reply(
            text("Restarting the service."),
            tool_use("restart_service", {"host": f"web-{tag}", "change": change(tag, 1)}, id=ident),
        )
    if step == 2:
        return reply(
            text("Draining the node."),
            tool_use("drain_node", {"host": f"web-{tag}", "change": change(tag, 2)}, id=ident),
        )
    return reply(text(answer_text(tag)))


def _content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def tag_and_step(body: dict[str, Any]) -> tuple[str | None, int]:
    """The run's tag (from its first user message) and its step: how many tool results it has seen, plus one
    once opsloop asked for the summary before posting the answer (the answer, told again, is a step of its own)."""
    messages = body.get("messages") or []
    first = next((m for m in messages if m.get("role") == "user"), None)
    found = TAG.search(json.dumps(_content_blocks(first))) if first else None
    blocks = [b for m in messages if m.get("role") == "user" for b in _content_blocks(m)]
    results = sum(1 for b in blocks if b.get("type") == "tool_result")
    asked = any(b.get("type") == "text" and b.get("text") == SUMMARY_BEHIND for b in blocks)
    return (found.group(1) if found else None), results + asked


class ScenarioModel:
    """A script callable for the fake Messages API; `on_request(tag, step)` sees every request first
    (synchronously, before the answer is sent: a test may SIGKILL the bot right there)."""

    def __init__(self, on_request: Callable[[str | None, int], None] | None = None) -> None:
        self.on_request = on_request

    def __call__(self, body: dict[str, Any]) -> Reply:
        tag, step = tag_and_step(body)
        if self.on_request is not None:
            self.on_request(tag, step)
        if tag is None:
            return reply(text("Noted."))
        return scenario_reply(tag, min(step, FINAL_STEP))

    def install(self, fake: FakeAnthropic, answers: int = 5000) -> None:
        fake.script(*[self] * answers)


# --------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------


def write_config(path: Path, extra: str = "", tools: tuple[str, ...] = ("tests.support.crash_tools",)) -> Path:
    modules = ", ".join(f'"{m}"' for m in tools)
    path.write_text(f"""
[model]
fallbacks = []
{extra}
[slack]
status_update_seconds = 0
[approvals]
approvers = ["{CAROL}", "{BOB}"]
[tools]
modules = [{modules}]
""")
    return path


class Bots:
    """`opsloop run` processes of one app on one database; stderr of each goes to its own file."""

    def __init__(
        self,
        tmp_path: Path,
        slack: FakeSlack,
        model: FakeAnthropic,
        *,
        db: Database | None = None,
        config_extra: str = "",
        tools: tuple[str, ...] = ("tests.support.crash_tools",),
    ) -> None:
        self.tmp_path, self.slack, self.model = tmp_path, slack, model
        self.db: Database = db if db is not None else tmp_path / "opsloop.db"  # a SQLite file or a postgresql:// URL
        self.exec_log = tmp_path / "executions.jsonl"
        self.kill_file = tmp_path / "kill-in-tool"
        self.hold_file = tmp_path / "hold-in-tool"
        self.config = write_config(tmp_path / "opsloop.toml", config_extra, tools)
        self.started = 0
        self.connection: dict[int, int] = {}  # pid -> the Socket Mode connection number it opened (fake_slack.to)
        for user, name in PEOPLE.items():
            if user not in slack.users:
                slack.add_user(user, name)

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))}
        return {
            **base,
            "SLACK_BOT_TOKEN": self.slack.bot_token,
            "SLACK_APP_TOKEN": self.slack.app_token,
            "SLACK_API_URL": self.slack.api_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": self.model.base_url,
            "OPSLOOP_DB": str(self.db),
            "OPSLOOP_CRASH_LOG": str(self.exec_log),
            "OPSLOOP_CRASH_KILL": str(self.kill_file),
            "OPSLOOP_CRASH_HOLD": str(self.hold_file),
        }

    async def start(self, timeout: float = 30.0) -> asyncio.subprocess.Process:
        """A new process, returned once its Socket Mode connection is open."""
        self.started += 1
        connects = self.slack.connections + 1
        with (self.tmp_path / f"bot-{self.started}.log").open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.app.cli",
                "run",
                "--config",
                str(self.config),
                cwd=ROOT,
                env=self.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=err,
            )
        try:
            await self.slack.wait_connected(timeout=timeout, connects=connects)
        except BaseException:
            await stop(proc, signal.SIGKILL)
            raise
        self.connection[proc.pid] = self.slack.connections
        return proc

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for n in range(1, self.started + 1):
            path = self.tmp_path / f"bot-{n}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- bot-{n}.log\n" + "\n".join(tail))
        return "\n".join(out)


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
    """Signal a process and reap it (SIGKILL when it outlives `timeout`)."""
    if proc.returncode is None:
        proc.send_signal(sig)
    try:
        async with asyncio.timeout(timeout):
            return await proc.wait()
    except TimeoutError:
        proc.kill()
        return await proc.wait()


async def poll(check: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    """Wait for state outside this process (the bot's database, a file): re-check until truthy or timeout."""
    try:
        async with asyncio.timeout(timeout):
            while not (result := check()):  # noqa: ASYNC110 (another process's file: nothing to await)
                await asyncio.sleep(every)
            return result
    except TimeoutError:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}") from None


def is_postgres(db: Database) -> bool:
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def query(db: Database, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Read the bot's database from the test process: a SQLite file (WAL: readers never block the bot) or
    Postgres (one short autocommit connection per call). Write `?` placeholders; [] until the schema exists."""
    if is_postgres(db):
        return _query_postgres(str(db), sql, params)
    path = Path(db)
    if not path.exists():
        return []
    conn = sqlite3.connect(path, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        conn.close()


def _query_postgres(url: str, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    import psycopg  # only the Postgres tests need the driver loaded
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        try:
            return conn.execute(sql.replace("?", "%s"), params).fetchall()
        except psycopg.errors.UndefinedTable:  # the schema is not there yet
            return []


# --------------------------------------------------------------------------------------
# reading Slack
# --------------------------------------------------------------------------------------


def block_ids(blocks: Any) -> list[str]:
    return [b.get("block_id", "") for b in blocks or [] if isinstance(b, dict)]


def button_values(blocks: Any, action_ids: tuple[str, ...] = (APPROVE, DENY)) -> set[str]:
    return {
        el.get("value", "")
        for b in blocks or []
        if isinstance(b, dict)
        for el in b.get("elements") or []
        if isinstance(el, dict) and el.get("action_id") in action_ids
    }


def is_card(blocks: Any) -> bool:
    return "approval_header" in block_ids(blocks)


def card_is_pending(msg: Message) -> bool:
    return is_card(msg.blocks) and bool(button_values(msg.blocks))


def posts(slack: FakeSlack, thread_ts: str | None = None) -> list[ApiCall]:
    """chat.postMessage calls Slack accepted (in one thread)."""
    return [
        c
        for c in slack.calls_to("chat.postMessage")
        if c.ok and (thread_ts is None or c.args.get("thread_ts") == thread_ts)
    ]


def card_posts(slack: FakeSlack) -> dict[str, int]:
    """Approval id -> how many approval cards carrying it were posted."""
    counts: dict[str, int] = {}
    for call in posts(slack):
        if is_card(call.args.get("blocks")):
            for value in button_values(call.args.get("blocks")):
                counts[value] = counts.get(value, 0) + 1
    return counts


def is_final_post(call: ApiCall, tag: str) -> bool:
    """The run's answer or its handoff report (their first message)."""
    return answer_text(tag) in str(call.args.get("text") or "") or "report_header" in block_ids(call.args.get("blocks"))


def final_posts(slack: FakeSlack, thread_ts: str, tag: str) -> int:
    return sum(1 for c in posts(slack, thread_ts) if is_final_post(c, tag))


def pending_cards(slack: FakeSlack, thread_ts: str) -> list[Message]:
    return [m for m in slack.thread(CHANNEL, thread_ts) if card_is_pending(m)]


def card_tool(msg: Message) -> str:
    blob = json.dumps(msg.blocks or [])
    return "drain_node" if "drain_node" in blob else "restart_service" if "restart_service" in blob else "?"
