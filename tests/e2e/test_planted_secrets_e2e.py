"""Planted secrets never land: a whole incident with an approval, then grep everything opsloop wrote.

Distinct secrets of every kind bot/core/redact.py knows are planted in the process environment,
the mention, a thread reply, the model's own thinking and tool arguments, and a tool's
output. Then a full dump of the SQLite store, the captured logs (structlog JSON and
stdlib), every Slack API call opsloop made and every model request body must hold none
of them, with two exceptions the product cannot avoid:

* the person's own messages in Slack (they typed them): inbound events are not checked;
* what the model itself wrote (its thinking, its tool_use inputs): the Messages API needs
  assistant turns back byte-exact, so those may appear in `messages` rows with role
  assistant and in the assistant turns of later requests, nowhere else.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.core.log import configure_logging
from tests.support import planted_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, thinking, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, bot_env
from tests.support.incident_tools import hold, ran
from tools.memory.incidents import terms


def _kinds(tag: str) -> list[tuple[str, str]]:
    """(text to plant, the secret part that must never be found) for every kind of secret; `tag` keeps them apart."""
    t = tag.upper()
    pem = f"MIIEow{t}IBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0\nGiQ0kQ6VdAkWkO3Yx3{t}Ab7Q"
    basic = base64.b64encode(f"ops-{t}:basic-{t}-pw".encode()).decode()
    return [
        (f"xoxb-1234567890-9876543210-{t}SlackBotTok", f"{t}SlackBotTok"),
        (f"xapp-1-A0{t}-1234567890-{t}appleveltoken", f"{t}appleveltoken"),
        (f"sk-ant-api03-{t}AnthropicKey_0123456789", f"{t}AnthropicKey"),
        (f"AKIA{t:Q<16}", f"AKIA{t:Q<16}"),
        (f"ghp_{t}ghclassic0123456789abcdefghijklmnop", f"{t}ghclassic"),
        (f"github_pat_11{t}_finegrained0123456789abcdefghij", f"{t}_finegrained"),
        (f"Authorization: Basic {basic}", basic),
        (f"postgres://app:urlpw{t}x9@db.internal:5432/app", f"urlpw{t}x9"),
        (f"psql --password=flagpw{t}x9 -h db", f"flagpw{t}x9"),
        (f"DB_PASSWORD=kvpw{t}x9", f"kvpw{t}x9"),
        (f"https://hooks.slack.com/services/T0{t}/B0{t}/hook{t}XXXXXXXXXXXX", f"hook{t}XXXXXXXXXXXX"),
        (f'{{"aws_secret_access_key": "awsjson{t}wJalrXUtnFEMIK7MDENGbPxRfiCY"}}', f"awsjson{t}wJalrXUtn"),
        (
            f'{{"Code": "Success", "AccessKeyId": "ASIA{t:Z<16}", "SecretAccessKey": "imds{t}K7MDENGbPxRfiCYEXAMPLE",'
            f' "Token": "IQoJ{t}b3JpZ2luX2VjEJr//////////wEaCXVz", "Expiration": "2026-12-01T06:00:00Z"}}',
            f"imds{t}K7MDENG",
        ),
        ("", f"IQoJ{t}b3JpZ2luX2VjEJr"),  # the session token of the document above
        (f"{pem}\n-----END RSA PRIVATE KEY-----", f"MIIEow{t}IBAAKCAQEA"),
    ]


def _blob(tag: str) -> str:
    return "\n".join(planted for planted, _ in _kinds(tag) if planted)


def _cores(tag: str) -> list[str]:
    return [core for _, core in _kinds(tag)]


TAGS_NEVER = ("ENVX", "MENT", "REPL", "OUTP")  # secrets people or tools gave opsloop: never written anywhere
TAGS_MODEL = ("THNK", "ARGS")  # secrets the model itself wrote: only in its own assistant turns


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _strings(v)
    elif obj is not None:
        yield str(obj)


def _found(where: str, blobs: list[str], tags: tuple[str, ...]) -> list[str]:
    """`where: core` for every secret of `tags` present in `blobs`."""
    return [f"{where}: {core}" for tag in tags for core in _cores(tag) for blob in blobs if core in blob]


def _store_rows(db_path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row of every table, every column, as stored."""
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


def _fts_terms(db_path: str) -> set[str]:
    """Every term of incident memory's FTS5 index, as it is searched (fts5vocab over incidents_fts)."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts_terms USING fts5vocab(main, incidents_fts, 'row')")
        return {str(r[0]) for r in conn.execute("SELECT term FROM temp.fts_terms")}
    finally:
        conn.close()


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """The app's logs as `opsloop run` writes them (structlog JSON with stdlib records), at debug level."""
    out = io.StringIO()
    configure_logging("debug", stream=out)
    try:
        yield out
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()


async def test_planted_secrets_are_found_nowhere_opsloop_writes(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    captured_logs: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i, (planted, _) in enumerate(_kinds("ENVX")):
        monkeypatch.setenv(f"PLANTED_SECRET_{i}", planted or "-")
    planted_tools.OUTPUT["text"] = _blob("OUTP")
    restart = {"host": "web-03", "unit": "nginx.service\n" + _blob("ARGS")}
    fake_anthropic.script(
        reply(
            thinking("Checking the disk first. Creds seen: " + _blob("THNK")),
            tool_use("check_disk", {"host": "web-03"}),
        ),
        reply(tool_use("read_config", {"service": "nginx"})),
        reply(text("Restarting nginx with the rotated credentials."), tool_use("restart_service", restart)),
        reply(text("nginx restarted on web-03; /var is fine.")),
    )
    # [memory] on: the run's end writes its incident record (task, answer, changes) and SQLite's FTS5 index of it
    config = (
        '[tools]\nmodules = ["tests.support.incident_tools", "tests.support.planted_tools"]\n[memory]\nenabled = true'
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        gate = hold("check_disk")
        channel, ts = await env.mention("nginx is down, creds are:\n" + _blob("MENT"))
        await gate.wait_entered()
        reply_ts = await env.reply(channel, ts, "more creds from the vault:\n" + _blob("REPL"), user=BOB)
        await env.wait_reaction(channel, reply_ts)
        gate.release()
        card = await env.card(channel, ts)
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        await env.wait_idle()
        assert ran("restart_service")[0].args == {"host": "web-03", "unit": restart["unit"]}  # the real value ran
        fake_anthropic.assert_complete()
        bot = fake_slack.bot_user_id
        slack = [json.dumps(c.args, default=str) for c in fake_slack.calls]
        slack += [
            "\n".join(_strings(m.to_api())) for msgs in fake_slack.messages.values() for m in msgs if m.user == bot
        ]
        slack += [json.dumps(e) for e in fake_slack.ephemerals] + [json.dumps(fake_slack.reactions)]
        bodies = [r.body or {} for r in fake_anthropic.requests]
        db_path = env.settings.db_path

    rows = list(_store_rows(db_path))
    assistant_rows = [json.dumps(r) for t, r in rows if t == "messages" and r.get("role") == "assistant"]
    other_rows = [json.dumps(r) for t, r in rows if not (t == "messages" and r.get("role") == "assistant")]
    not_assistant = [json.dumps({k: v for k, v in b.items() if k != "messages"}) for b in bodies]
    not_assistant += [json.dumps(m) for b in bodies for m in b.get("messages", []) if m.get("role") != "assistant"]
    logs = [captured_logs.getvalue()]
    checks: list[tuple[str, list[str], tuple[str, ...]]] = [
        ("store", other_rows, TAGS_NEVER + TAGS_MODEL),
        ("store assistant rows", assistant_rows, TAGS_NEVER),
        ("logs", logs, TAGS_NEVER + TAGS_MODEL),
        ("slack", slack, TAGS_NEVER + TAGS_MODEL),
        ("model requests", not_assistant, TAGS_NEVER + TAGS_MODEL),
        (
            "model requests, assistant turns",
            [json.dumps(m) for b in bodies for m in b.get("messages", []) if m.get("role") == "assistant"],
            TAGS_NEVER,
        ),
    ]
    leaks = [leak for where, blobs, tags in checks for leak in _found(where, blobs, tags)]
    assert leaks == []
    # The test saw what it meant to: every secret reached opsloop, the model's own words are kept exactly.
    requests = json.dumps(not_assistant)
    assert "creds are:" in requests and "[thread reply from U0BOB] more creds" in requests
    assert "config of nginx:" in requests and "run.created" in logs[0]
    assert _found("", assistant_rows, ("ARGS",)) and _found("", assistant_rows, ("THNK",))
    incidents = [r for t, r in rows if t == "incidents"]
    assert len(incidents) == 1 and "creds are:" in incidents[0]["task"]  # the record holds the (redacted) task
    assert "nginx restarted on web-03" in incidents[0]["answer"] and "restart_service" in incidents[0]["changes"]
    fts = {t for t, _ in rows if t.startswith("incidents_fts")}
    assert {"incidents_fts_data", "incidents_fts_idx"} <= fts  # FTS5's shadow tables were scanned too
    # The index keeps lower-cased, prefix-compressed terms, which a scan of its blobs can't match against the
    # cores: read its terms through fts5vocab, and look for every core's own words there.
    vocab = _fts_terms(db_path)
    assert {"creds", "nginx", "restart_service"} & vocab >= {"creds", "nginx"}  # the task and answer are indexed
    secret_words = {
        (tag, w) for tag in TAGS_NEVER + TAGS_MODEL for core in _cores(tag) for w in terms(core) if tag.lower() in w
    }
    assert secret_words and [w for _, w in secret_words if w in vocab] == []
