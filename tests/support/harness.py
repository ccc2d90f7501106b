"""End-to-end harness: the real opsloop app against FakeSlack and FakeAnthropic.

`bot_env(tmp_path, fake_slack, fake_anthropic, config_toml)` writes a config file,
loads Settings the way `opsloop run` does (TOML + an env dict), builds the app with
`bot.app.wiring.build` (the real `anthropic.AsyncAnthropic`, pointed at the fake through
ANTHROPIC_BASE_URL) and starts it over Socket Mode (or HTTP with `http=True`). It
yields a `BotEnv` with helpers to act as people in Slack and to wait on what the bot
does. Every wait watches observable state (the fakes' records, Bolt's listener
hooks) with a timeout; nothing sleeps. The app is always closed on the way out.

Waiting until the bot has *handled* a delivery: Bolt acks an event before its
listener runs, so an ack alone proves little. `BotEnv.wait_idle()` waits until every
envelope is acked and every listener run those deliveries started has finished
(counted by a global middleware and Bolt's listener-completion hook).
"""

# ruff: noqa: ASYNC109  (the helpers take timeout= like asyncio.wait_for)

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from slack_bolt.listener.async_listener_error_handler import AsyncListenerErrorHandler

from bot.app.opsloop import Opsloop
from bot.app.settings import load_settings
from bot.app.wiring import build, start
from bot.config.settings import Settings
from bot.core.types import AuditEntry, Run
from bot.store import Ledger
from handlers.blocks import APPROVE, DENY, OFFER_BLOCK, STOP
from tests.support import incident_tools
from tests.support.fakes.anthropic import API_KEY, FakeAnthropic, RecordedRequest, Reply
from tests.support.fakes.slack import FakeSlack, Message, mention_event, message_event

CHANNEL = "C0INCIDENT"
SIGNING_SECRET = "test-signing-secret-0123456789abcdef"
# Realistic ids: opsloop renders <@U…> mentions only for ids shaped like Slack's.
ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"  # alice starts runs; bob and carol are on call
PEOPLE = {ALICE: "alice", BOB: "bob", CAROL: "carol"}

DEFAULT_CONFIG: dict[str, Any] = {
    "model": {"fallbacks": []},  # a failing fake request fails fast instead of walking the chain
    "slack": {"status_update_seconds": 0},  # every status change is pushed at once
    "tools": {"modules": ["tests.support.incident_tools"]},
}

# Slack errors that mean opsloop sent something Slack would reject: never acceptable.
MALFORMED = (
    "invalid_blocks",
    "invalid_blocks_format",
    "no_text",
    "msg_too_long",
    "msg_blocks_too_long",
    "invalid_arguments",
    "message_not_found",
    "cant_update_message",
    "channel_not_found",
    "not_authed",
    "invalid_auth",
)


# --------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it may be, else quoted (a route's `"*"`)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table: how a list of tables ([[kubernetes.clusters]]) is written here
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml(table: dict[str, Any], prefix: str = "", *, array: bool = False) -> str:
    lines = [
        f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict) and not _is_tables(v)
    ]
    header = f"[[{prefix}]]" if array else f"[{prefix}]"
    out = ([header] if prefix and (lines or array) else []) + lines
    for k, v in table.items():
        name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
        if isinstance(v, dict):
            out.append(_toml(v, name))
        elif _is_tables(v):  # an array of tables ([[hosts]]); written last, so no key of this table follows it
            out.extend(_toml(entry, name, array=True) for entry in v)
    return "\n".join(out) + "\n"


def write_config(path: Path, config_toml: str = "") -> Path:
    """DEFAULT_CONFIG overlaid with `config_toml` (table by table, key by key)."""
    path.write_text(_toml(_merge(DEFAULT_CONFIG, tomllib.loads(config_toml))))
    return path


# --------------------------------------------------------------------------------------
# reading what the bot posted
# --------------------------------------------------------------------------------------


def block_ids(msg: Message) -> list[str]:
    return [b.get("block_id", "") for b in msg.blocks or []]


def action_ids(msg: Message) -> list[str]:
    return [
        el.get("action_id", "")
        for b in msg.blocks or []
        for el in b.get("elements") or []
        if isinstance(el, dict) and el.get("type") == "button"
    ]


def _texts(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        if isinstance(obj.get("text"), str):
            yield obj["text"]
        for key, value in obj.items():
            if key != "text" or not isinstance(value, str):
                yield from _texts(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _texts(item)


def text_of(msg: Message) -> str:
    """Everything a person can read in a message: the fallback text and every text in its blocks."""
    return "\n".join([msg.text, *_texts(msg.blocks or [])])


def mrkdwn_texts(obj: Any) -> list[str]:
    """Every text in blocks that Slack parses as markup: mrkdwn objects and markdown blocks (plain_text objects
    and rich_text `text` elements are shown as written)."""
    found: list[str] = []
    if isinstance(obj, dict):
        if obj.get("type") in ("mrkdwn", "markdown") and isinstance(obj.get("text"), str):
            found.append(obj["text"])
        for value in obj.values():
            found += mrkdwn_texts(value)
    elif isinstance(obj, list):
        for item in obj:
            found += mrkdwn_texts(item)
    return found


def posted_texts(slack: FakeSlack) -> list[tuple[str, str]]:
    """(what, text) for every text the bot sent Slack that Slack reads as markup: each post's, update's,
    ephemeral's and stream's `text` or `markdown_text`, their blocks, the Home tab's blocks, response_url notes."""
    out: list[tuple[str, str]] = []
    for call in slack.calls:
        args = call.args
        if call.method.startswith("chat."):
            out += [(f"{call.method} {k}", args[k]) for k in ("text", "markdown_text") if isinstance(args.get(k), str)]
            out += [(f"{call.method} blocks", t) for t in mrkdwn_texts(args.get("blocks") or [])]
        elif call.method == "views.publish":
            out += [("views.publish", t) for t in mrkdwn_texts(args.get("view") or {})]
    out += [("response_url", str(r.body.get("text") or "")) for r in slack.responses]
    return out


_BROADCAST = re.compile(r"<!(?:channel|here|everyone)\b")


def broadcasts(slack: FakeSlack) -> list[tuple[str, str]]:
    """(what, text) of every text the bot sent that would notify a whole channel: opsloop never does."""
    return [(what, t) for what, t in posted_texts(slack) if _BROADCAST.search(t)]


def is_card(msg: Message) -> bool:
    return "approval_header" in block_ids(msg)


def is_status(msg: Message) -> bool:
    return "status" in block_ids(msg)


def is_offer(msg: Message) -> bool:
    """A reach's run-start line (`Following runbook: …`, past incidents): posted before the answer, never it."""
    return OFFER_BLOCK in block_ids(msg)


def card_state(msg: Message) -> str:
    """pending | approved | denied | expired | superseded, read from the card's header."""
    header = next(b for b in msg.blocks or [] if b.get("block_id") == "approval_header")["text"]["text"]
    for prefix, state in (
        ("Approval needed", "pending"),
        ("Approved", "approved"),
        ("Denied", "denied"),
        ("Expired", "expired"),
        ("Superseded", "superseded"),
    ):
        if header.startswith(prefix):
            return state
    raise AssertionError(f"unknown card header {header!r}")


def user_turn(request: RecordedRequest, index: int = -1) -> list[dict[str, Any]]:
    """The content blocks of a user message of a recorded model request (default: the newest)."""
    assert request.body is not None
    users = [m for m in request.body["messages"] if m["role"] == "user"]
    content = users[index]["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    return [b for b in user_turn(request) if b.get("type") == "tool_result"]


def answered(final: Reply) -> tuple[Reply, Reply]:
    """A final answer given without update_summary after successful calls, and the same answer again when opsloop
    asks once for the summary (prompts.SUMMARY_BEHIND): the second is the one posted."""
    return final, final


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content)
    return str(content or "")


# --------------------------------------------------------------------------------------
# observing Bolt
# --------------------------------------------------------------------------------------


@dataclass
class _Listeners:
    """Counts the requests bolt dispatches and the dispatches that finished, and collects listener errors."""

    arrived: int = 0
    completed: int = 0
    errors: list[BaseException] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def bump(self, **counts: int) -> None:
        async with self.changed:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)
            self.changed.notify_all()

    def install(self, ops: Opsloop) -> None:
        """Every request bolt dispatches counts as arrived, and as completed once bolt's dispatch returns (with
        process_before_response, after its listener ran), handled or not: a payload no listener takes (an
        unknown type) completes too. Listener errors are collected from bolt's error hook (a public extension
        point, set on the runner because AsyncApp takes no error handler argument)."""
        observer = self
        dispatch = ops.app.async_dispatch

        async def counted(req: Any) -> Any:
            await observer.bump(arrived=1)
            try:
                return await dispatch(req)
            finally:
                await observer.bump(completed=1)

        ops.app.async_dispatch = counted  # type: ignore[method-assign]
        runner = ops.app._async_listener_runner
        inner_error = runner.listener_error_handler

        class Failed(AsyncListenerErrorHandler):
            async def handle(self, error: Exception, request: Any, response: Any) -> None:
                observer.errors.append(error)
                await inner_error.handle(error=error, request=request, response=response)

        runner.listener_error_handler = Failed()

    async def wait_idle(self, timeout: float) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: self.completed >= self.arrived)


# --------------------------------------------------------------------------------------
# the environment
# --------------------------------------------------------------------------------------


@dataclass
class BotEnv:
    settings: Settings
    slack: FakeSlack
    model: FakeAnthropic
    ops: Opsloop
    http: bool = False
    channel: str = CHANNEL
    listeners: _Listeners = field(default_factory=_Listeners)

    # ---- acting as people ------------------------------------------------------------

    async def send(self, event: dict[str, Any], event_id: str | None = None, retry_attempt: int = 0) -> str:
        """Deliver an event (Socket Mode); returns the envelope id."""
        return await self.slack.send_event(event, event_id=event_id, retry_attempt=retry_attempt)

    async def mention(
        self,
        text: str,
        user: str = ALICE,
        *,
        channel: str | None = None,
        thread_ts: str | None = None,
        event_id: str | None = None,
    ) -> tuple[str, str]:
        """`@opsloop <text>` posted by `user`; returns (channel, ts) of the mention (the thread root)."""
        channel = channel or self.channel
        event = mention_event(channel, user, text, thread_ts=thread_ts, bot_user_id=self.slack.bot_user_id)
        await self.send(event, event_id=event_id)
        return channel, event["ts"]

    async def reply(self, channel: str, thread_ts: str, text: str, user: str = ALICE, **kw: Any) -> str:
        """A message in the thread (a `message` event); returns its ts."""
        event = message_event(channel, user, text, thread_ts=thread_ts, **kw)
        await self.send(event)
        return str(event["ts"])

    async def click(self, user: str, msg: Message, action_id: str) -> str:
        return await self.slack.click(user, msg.channel, msg.ts, action_id)

    async def approve(self, msg: Message, user: str) -> str:
        return await self.click(user, msg, APPROVE)

    async def deny(self, msg: Message, user: str) -> str:
        return await self.click(user, msg, DENY)

    async def stop(self, msg: Message, user: str) -> str:
        return await self.click(user, msg, STOP)

    # ---- waiting on the bot ----------------------------------------------------------

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        return self.slack.thread(channel, thread_ts)

    def cards(self, channel: str, thread_ts: str) -> list[Message]:
        return [m for m in self.thread(channel, thread_ts) if is_card(m)]

    async def card(
        self,
        channel: str,
        thread_ts: str,
        state: str | None = "pending",
        *,
        where: Callable[[Message], bool] | None = None,
        timeout: float = 5.0,
    ) -> Message:
        """The newest approval card in the thread, once it is in `state` (None: any state)."""

        def match(m: Message) -> bool:
            newest = self.cards(channel, thread_ts)
            return (
                bool(newest)
                and m is newest[-1]
                and (state is None or card_state(m) == state)
                and (where is None or where(m))
            )

        return await self.slack.wait_for_message(channel, match, timeout=timeout)

    async def status(self, channel: str, thread_ts: str, *, timeout: float = 5.0) -> Message:
        return await self.slack.wait_for_message(
            channel, lambda m: m.thread_ts == thread_ts and is_status(m), timeout=timeout
        )

    async def wait_final(self, channel: str, thread_ts: str, *, timeout: float = 10.0) -> Message:
        """The bot's final answer or handoff report in the thread (neither status, card nor run-start line)."""
        return await self.slack.wait_for_message(
            channel,
            lambda m: (
                m.thread_ts == thread_ts
                and m.user == self.slack.bot_user_id
                and m.blocks is not None
                and not is_card(m)
                and not is_status(m)
                and not is_offer(m)
            ),
            timeout=timeout,
        )

    def finals(self, channel: str, thread_ts: str) -> list[Message]:
        return [
            m
            for m in self.thread(channel, thread_ts)
            if m.user == self.slack.bot_user_id
            and m.ts != thread_ts
            and not is_card(m)
            and not is_status(m)
            and not is_offer(m)
        ]

    async def wait_reaction(self, channel: str, ts: str, name: str = "eyes", *, timeout: float = 5.0) -> None:
        await self.slack.wait_for_call(
            "reactions.add",
            lambda c: (
                c.ok
                and c.args.get("timestamp") == ts
                and c.args.get("channel") == channel
                and c.args.get("name") == name
            ),
            timeout=timeout,
        )

    def reacted(self, channel: str, ts: str, name: str = "eyes") -> bool:
        return (channel, ts, name) in self.slack.reactions

    async def wait_ephemeral(self, user: str, *, timeout: float = 5.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            return next((e for e in self.slack.ephemerals if e["user"] == user), None)

        return await self.slack._wait(check, timeout, lambda: f"an ephemeral message to {user}")

    async def wait_idle(self, timeout: float = 5.0) -> None:
        """Every envelope sent so far is acked and every listener run it started has finished."""
        if not self.http:
            for envelope in list(self.slack.envelopes):
                await self.slack.wait_ack(envelope["envelope_id"], timeout=timeout)
        await self.listeners.wait_idle(timeout)

    async def requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        return await self.model.wait_for_requests(n, timeout=timeout)

    # ---- the store ---------------------------------------------------------------------

    @contextlib.contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """A synchronous view of the bot's SQLite db (WAL: safe next to the running bot)."""
        ledger = Ledger(self.settings.db_path)
        try:
            yield ledger
        finally:
            ledger.close()

    def runs(self) -> list[Run]:
        with self.ledger() as ledger:
            return ledger.list_runs()

    def audit(self) -> list[AuditEntry]:
        with self.ledger() as ledger:
            return ledger.audit()

    # ---- HTTP mode -------------------------------------------------------------------------

    @property
    def http_url(self) -> str:
        assert self.ops.http is not None, "not in HTTP mode"
        host, port = self.ops.http.addresses[0][:2]
        return f"http://{host}:{port}/slack/events"

    async def post_http(self, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.post(self.http_url, data=body, headers=headers) as r:
            return r.status, await r.text()

    # ---- lifecycle -------------------------------------------------------------------------

    async def restart(self) -> None:
        """Stop the bot as a crash/deploy would, then build and start a new one on the same db."""
        await self.ops.close()
        connects = self.slack.connections + 1
        self.ops = await _start(self.settings, http=self.http)
        self.listeners.install(self.ops)
        if not self.http:
            await self.slack.wait_connected(connects=connects)


def sign(body: bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """Slack's v0 request signature headers for `body`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}", "Content-Type": "application/json"}


async def _start(settings: Settings, *, http: bool) -> Opsloop:
    ops = await build(settings)
    try:
        await start(ops, port=0, host="127.0.0.1") if http else await start(ops)
    except BaseException:
        await ops.close()
        raise
    return ops


@contextlib.asynccontextmanager
async def bot_env(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    config_toml: str = "",
    *,
    http: bool = False,
    env_extra: dict[str, str] | None = None,
) -> AsyncIterator[BotEnv]:
    """The real app, started against the fakes; closed cleanly however the test ends."""
    incident_tools.reset()
    for user, name in PEOPLE.items():
        if user not in fake_slack.users:
            fake_slack.add_user(user, name)
    if CHANNEL not in fake_slack.channels:  # the incident channel: everyone and the bot are in it
        fake_slack.add_channel(CHANNEL, "incident", members=PEOPLE)
    config = write_config(tmp_path / "opsloop.toml", config_toml)
    env = {
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
    }
    env.update({"SLACK_SIGNING_SECRET": SIGNING_SECRET} if http else {"SLACK_APP_TOKEN": fake_slack.app_token})
    env.update(env_extra or {})
    settings = load_settings(config, env=env)
    ops = await _start(settings, http=http)
    bot = BotEnv(settings=settings, slack=fake_slack, model=fake_anthropic, ops=ops, http=http)
    try:
        bot.listeners.install(ops)
        if not http:
            await fake_slack.wait_connected()
        yield bot
        # Only on success: what the bot sent must be what Slack accepts, and no listener may have failed.
        bad = [(c.method, c.error, c.response.get("errors")) for c in fake_slack.calls if c.error in MALFORMED]
        assert not bad, f"Slack rejected calls from opsloop: {bad}"
        assert not broadcasts(fake_slack), f"opsloop pinged a whole channel: {broadcasts(fake_slack)}"
        assert not bot.listeners.errors, f"listeners raised: {bot.listeners.errors!r}"
    finally:
        await bot.ops.close()
        incident_tools.reset()
