"""End to end, hostile output and arguments: no tool output size delays an ack, and header-shaped secrets in a
tool's JSON arguments reach the tool and nothing else.

The real opsloop app over Socket Mode against FakeSlack and FakeAnthropic (tests/support/harness.py); this module is
also the tools module the bot loads (`[tools] modules`), so its tools can reach into the test.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.app.cli import main
from bot.core.log import configure_logging
from bot.core.redact import REDACTED
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, mention_event
from tests.support.harness import ALICE, BOB, CHANNEL, bot_env, result_text, text_of, tool_results
from tools import MAX_OUTPUT_CHARS, Category, ToolError, tool
from tools.registry import Implementation, Tool

CONFIG = '[tools]\nmodules = ["tests.e2e.test_security_output_e2e"]'
ACK_DEADLINE_S = 3.0  # Slack redelivers an envelope not acked within 3 s

# -- 1. a 50 MB output ---------------------------------------------------------------------------------

FLOOD_CHARS = 50_000_000
# Secrets dense enough that any cut near either end of the output goes through one; their values are all
# Qs and the rest of the output has none, so any Q the model sees is part of a secret.
_EDGE_LINE = "db password=QQQQQQQQQQQQQQQQ key AKIAQQQQQQQQQQQQQQQQ\n"
_FILLER_LINE = "2026-11-30T03:12:09Z web-03 nginx: GET /healthz 200 0.001s\n"
_EDGE = _EDGE_LINE * (40_000 // len(_EDGE_LINE))
FLOOD_LEN = 2 * len(_EDGE) + len(_FILLER_LINE) * ((FLOOD_CHARS - 2 * len(_EDGE)) // len(_FILLER_LINE))
_during_flood: list[Callable[[], Awaitable[None]]] = []  # what flood awaits before it returns (the test sets it)


def _flood_text() -> str:
    middle = _FILLER_LINE * ((FLOOD_CHARS - 2 * len(_EDGE)) // len(_FILLER_LINE))
    return _EDGE + middle + _EDGE


@tool(category=Category.READ_ONLY)
async def dump_access_log(host: str) -> str:
    """The whole nginx access log of a host (about 50 MB)."""
    output = _flood_text()  # built first: what the ack waits for after this is opsloop's work, not the test's
    for step in _during_flood:
        await step()
    return output


def _by_thread(flood_task: str) -> Callable[[dict[str, Any]], Reply]:
    """A scripted reply that answers whichever run asks: the flood run calls the tool once, then answers."""

    def route(body: dict[str, Any]) -> Reply:
        first = json.dumps(body["messages"][0])
        if flood_task not in first:
            return reply(text("web-04 looks fine."))
        if len(body["messages"]) == 1:
            return reply(tool_use("dump_access_log", {"host": "web-03"}))
        return reply(text("The log is mostly health checks."))

    return route


async def test_a_50_mb_tool_output_does_not_delay_the_ack_of_another_threads_mention(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    flood_task = "read the whole access log of web-03"
    fake_anthropic.script(*[_by_thread(flood_task)] * 3)
    sent: list[str] = []
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        other = mention_event(CHANNEL, BOB, "is web-04 ok?", bot_user_id=fake_slack.bot_user_id)

        async def mention_in_another_thread() -> None:
            # Sent from inside the tool, right before its 50 MB return: the envelope is on the wire while
            # opsloop handles the output, so its ack waits for anything that holds the event loop.
            sent.append(await env.send(other))

        _during_flood[:] = [mention_in_another_thread]
        try:
            channel, ts = await env.mention(flood_task, user=ALICE)
            await env.wait_final(channel, ts, timeout=60)
        finally:
            _during_flood.clear()
        await env.wait_final(channel, other["ts"], timeout=30)
        await env.wait_idle(timeout=30)

        (envelope,) = sent
        latency = fake_slack.ack_latency(envelope)
        print(f"ack latency of the other thread's mention during a 50 MB output: {latency * 1000:.0f} ms")
        assert latency < ACK_DEADLINE_S

        flood_request = next(
            r
            for r in fake_anthropic.requests
            if r.body and flood_task in json.dumps(r.body["messages"][0]) and len(r.body["messages"]) == 3
        )
        (result,) = tool_results(flood_request)
        content = result_text(result)
        assert len(content) <= MAX_OUTPUT_CHARS
        assert f" chars of {FLOOD_LEN}] …" in content
        assert content.startswith("#1 dump_access_log web-03\ndb password=" + REDACTED)  # the handle, then the output
        assert content.rstrip().endswith(REDACTED)
        assert "Q" not in content  # no secret survives either cut, not even half of one
        fake_anthropic.assert_complete()


@tool(category=Category.READ_ONLY, isolated=True)
def dump_access_log_sync(host: str) -> str:
    """The whole access log, read by a sync function in a worker process."""
    return _flood_text()


@tool(category=Category.READ_ONLY, isolated=True)
def fail_loudly_sync(host: str) -> str:
    """A sync tool whose error message is as big as an output."""
    raise ToolError("disk error on " + host + ": " + _EDGE + "E " * 3_000_000 + _EDGE)


@tool(category=Category.READ_ONLY)
async def crash_loudly(host: str) -> str:
    """An async tool whose unexpected exception carries a huge message."""
    raise RuntimeError("connection reset by " + host + ": " + _EDGE + "E " * 3_000_000 + _EDGE)


@pytest.mark.processes
async def test_a_workers_50_mb_output_is_bounded_and_redacted_before_it_reaches_the_event_loop() -> None:
    content = await dump_access_log_sync.run({"host": "web-03"})
    assert len(content) <= MAX_OUTPUT_CHARS and f" chars of {FLOOD_LEN}] …" in content
    assert content.startswith("db password=" + REDACTED) and "Q" not in content


@pytest.mark.parametrize(
    "noisy",
    [
        pytest.param(fail_loudly_sync, id="worker ToolError", marks=pytest.mark.processes),
        pytest.param(crash_loudly, id="async exception"),
    ],
)
async def test_a_huge_error_message_is_bounded_and_redacted_like_an_output(noisy: Tool) -> None:
    with pytest.raises(ToolError) as failed:
        await noisy.run({"host": "web-03"})
    message = str(failed.value)
    assert len(message) <= MAX_OUTPUT_CHARS and "[truncated" in message and "web-03" in message
    assert "Q" not in message


# -- 2. header-shaped secrets in a tool's JSON arguments --------------------------------------------------

BASIC = base64.b64encode(b"deploy:hdr-basic-pw-7731").decode()
PROXY_BASIC = base64.b64encode(b"proxyuser:hdr-proxy-pw-7731").decode()
HEADERS = {
    "Authorization": f"Basic {BASIC}",
    "x-api-key": "hdrapikey7731QWERTYUIOP",
    "Cookie": "session=hdrcookie7731sess; csrf=hdrcookie7731csrf",
    "PROXY-AUTHORIZATION": f"Basic {PROXY_BASIC}",
    "X-Auth-Token": "hdrauthtoken7731ZXCVBNM",
    "Content-Type": "application/json",
}
BODY = json.dumps(
    {
        "replay": {
            "headers": {"Set-Cookie": "sid=hdrsetcookie7731; Path=/; HttpOnly", "X-Api-Key": "hdrbodykey7731ASDFGHJKL"}
        }
    }
)
SECRETS = [
    BASIC,
    PROXY_BASIC,
    "hdrapikey7731",
    "hdrcookie7731",
    "hdrauthtoken7731",
    "hdrsetcookie7731",
    "hdrbodykey7731",
]
CALLS: list[dict[str, Any]] = []  # what call_api received, in call order


async def _call_api(*, url: str, headers: dict[str, str], body: str = "", confirmed_by: str) -> str:
    CALLS.append({"url": url, "headers": headers, "body": body, "confirmed_by": confirmed_by})
    return "HTTP 202 Accepted"


# Built as a Tool (like an MCP server's) because @tool schemas have no dict type: headers is a JSON object.
call_api = Tool(
    name="call_api",
    description="Send one HTTP POST to an internal API with the given headers.",
    input_schema={
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string"},
        },
        "required": ["url", "headers"],
        "additionalProperties": False,
    },
    category=Category.MUTATING,
    impl=Implementation(fn=_call_api, parameters=None, takes_confirmed_by=True),
)


def _store_rows(db_path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    conn = sqlite3.connect(db_path)
    try:
        conn.row_factory = sqlite3.Row
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # table names from sqlite_master
                # FTS5's own tables hold the index as blobs: read as text, so a secret in them is seen too
                yield (
                    table,
                    {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in dict(row).items()},
                )
    finally:
        conn.close()


def _leaks(where: str, blobs: list[str]) -> list[str]:
    return [f"{where}: {s}" for s in SECRETS for blob in blobs if s in blob]


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("debug", stream=out)
    try:
        yield out
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()


async def test_header_secrets_in_json_arguments_reach_the_tool_and_nothing_else(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    captured_logs: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = {"url": "https://deploy.internal/v1/rollout", "headers": HEADERS, "body": BODY}
    fake_anthropic.script(
        reply(text("Triggering the rollout."), tool_use("call_api", args)), reply(text("Rollout accepted."))
    )
    CALLS.clear()
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        channel, ts = await env.mention("roll out the fix with the deploy API")
        card = await env.card(channel, ts)
        shown = text_of(card)
        assert f'"Authorization": "{REDACTED}"' in shown and f'"X-Auth-Token": "{REDACTED}"' in shown
        assert '"Content-Type": "application/json"' in shown  # not a secret: still readable on the card
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        await env.wait_idle()
        db_path = env.settings.db_path
        slack = [json.dumps(c.args, default=str) for c in fake_slack.calls]
        slack += [text_of(m) for msgs in fake_slack.messages.values() for m in msgs if m.user == fake_slack.bot_user_id]
        bodies = [r.body or {} for r in fake_anthropic.requests]
        fake_anthropic.assert_complete()

    # The tool got the real values, from the model's tool_use in the history.
    assert CALLS == [{**args, "confirmed_by": BOB}]

    rows = list(_store_rows(db_path))
    assistant = [r for t, r in rows if t == "messages" and r["role"] == "assistant"]
    others = [json.dumps(r) for t, r in rows if not (t == "messages" and r["role"] == "assistant")]
    # The model's own turn is stored exactly, as the Messages API needs it back.
    assert any(b.get("input") == args for r in assistant for b in json.loads(r["content"]) if b["type"] == "tool_use")
    (stored,) = [json.loads(r["args"]) for t, r in rows if t == "tool_results"]
    assert stored["headers"] == {**dict.fromkeys(HEADERS, REDACTED), "Content-Type": "application/json"}
    assert REDACTED in stored["body"] and stored["url"] == args["url"]
    (approval,) = [json.loads(r["args"]) for t, r in rows if t == "approvals"]
    assert approval == stored

    monkeypatch.setenv("OPSLOOP_DB", db_path)
    monkeypatch.delenv("OPSLOOP_CONFIG", raising=False)
    capsys.readouterr()
    assert main(["audit"]) == 0
    jsonl = capsys.readouterr().out
    assert main(["audit", "--format", "csv"]) == 0
    exported = capsys.readouterr().out
    (row,) = csv.DictReader(io.StringIO(exported))
    assert json.loads(row["args"]) == stored and json.loads(jsonl)["args"] == stored

    not_assistant = [json.dumps({k: v for k, v in b.items() if k != "messages"}) for b in bodies]
    not_assistant += [json.dumps(m) for b in bodies for m in b.get("messages", []) if m.get("role") != "assistant"]
    leaks = (
        _leaks("store", others)
        + _leaks("audit jsonl", [jsonl])
        + _leaks("audit csv", [exported])
        + _leaks("logs", [captured_logs.getvalue()])
        + _leaks("slack", slack)
        + _leaks("model requests", not_assistant)
    )
    assert leaks == []
    assert '"tool": "call_api"' in captured_logs.getvalue()  # the call was logged, with its args redacted
