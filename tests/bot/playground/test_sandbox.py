"""`opsloop sandbox` without a browser: what it says it is, and the scripted model's answers to what people type.

The page's own calls (`/api/post`, the `/api/state` long poll) drive the real app over Socket Mode on the stand-in;
`opsloop sandbox` itself runs as a process for its start-up message.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.settings import load_settings
from bot.playground.demo.model import what_i_do
from bot.playground.sandbox.server import Sandbox, running_sandbox

ROOT = Path(__file__).resolve().parents[3]
NO_SECRETS = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SLACK_", "OPSLOOP_"))}
DEMO_TOOLS = frozenset({"check_disk", "clean_logs", "list_big_files", "restart_service", "service_status", "tail_log"})
PEOPLE_LINE = (
    "people: @alice (U0ALICE), @bob (U0BOB), @carol (U0CAROL); a config's [approvals] approvers names them by these ids"
)


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with running_sandbox(load_settings(None, env={}), port=0) as sb:
        yield sb


async def _post(http: aiohttp.ClientSession, sandbox: Sandbox, text: str, thread_ts: str | None = None) -> str:
    async with http.post(f"{sandbox.url}api/post", json={"user": "U0ALICE", "text": text, "thread_ts": thread_ts}) as r:
        assert r.status == 200, await r.text()
        ts: str = (await r.json())["ts"]
        return ts


async def _answers(http: aiohttp.ClientSession, sandbox: Sandbox, thread_ts: str, count: int) -> list[str]:
    """The thread's answers once there are `count` of them (the page's long poll), as the page shows their text."""
    version = -1
    while True:
        async with http.get(f"{sandbox.url}api/state", params={"since": version}) as r:
            state: dict[str, Any] = await r.json()
        version = state["version"]
        [thread] = [t for t in state["threads"] if t["root"]["ts"] == thread_ts]
        answers = [m for m in thread["replies"] if m["kind"] == "answer"]
        if len(answers) >= count:
            return ["\n".join(p["text"] for p in m["parts"] if p.get("text")) for m in answers]


async def test_free_text_gets_the_scripted_models_note_not_the_web03_incident(sandbox: Sandbox) -> None:
    async with asyncio.timeout(60), aiohttp.ClientSession() as http:
        ts = await _post(http, sandbox, "@opsloop what changed in the payments service today?")
        [answer] = await _answers(http, sandbox, ts, 1)
    assert "web-03: /var" not in answer
    assert "I am the scripted model (no `ANTHROPIC_API_KEY`, so no Claude) and answer nothing else" in answer
    assert len(what_i_do(DEMO_TOOLS).splitlines()) == 1
    assert sandbox.stage.ops.tools.get("check_disk") is not None  # the demo's tools were there to call


async def test_a_second_mention_in_the_thread_answers_itself_not_the_first(sandbox: Sandbox) -> None:
    async with asyncio.timeout(60), aiohttp.ClientSession() as http:
        ts = await _post(http, sandbox, "@opsloop check_disk host=web-03")
        [first] = await _answers(http, sandbox, ts, 1)
        await _post(http, sandbox, "@opsloop thanks! what else can you do?", thread_ts=ts)
        answers = await _answers(http, sandbox, ts, 2)
    assert first.startswith("Called 1 tool(s) as asked")
    assert answers[1] != first and "I am the scripted model" in answers[1]


async def test_the_page_state_names_the_people_by_id_and_the_demos_own_tool(sandbox: Sandbox) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{sandbox.url}api/state") as r:
        state = await r.json()
    people, tools = state["about"]
    assert people == PEOPLE_LINE
    assert "list_big_files is the demo's own tool" in tools
    assert "The demo's own tool" in (sandbox.stage.ops.tools.get("list_big_files").description or "")  # type: ignore[union-attr]


@pytest.mark.processes
async def test_opsloop_sandbox_says_who_its_people_are_when_it_starts(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "sandbox",
        "--port",
        "0",
        cwd=tmp_path,
        env={**NO_SECRETS, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not lines or lines[-1] != "Ctrl-C to stop":
                line = await proc.stdout.readline()
                assert line, (await proc.stderr.read()).decode() if proc.stderr else ""
                lines.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    assert PEOPLE_LINE in lines
    assert any(line.startswith("the demo's tools on a simulated web-03: ") for line in lines)
