"""The issue's hardest case, with a real crash: a page starts a run in a real `opsloop run` process (against
FakeSlack, FakeAnthropic and the fake PagerDuty on loopback); PagerDuty accepts the run's final note and, before
it answers, the process is SIGKILLed, so the outbox never recorded the note as sent. A new `opsloop run` on the
same store reads the incident's notes back, finds the note by its marker and adopts it: exactly one final note."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.run.summary import TOOL_NAME
from tests.handlers.alerts import pagerduty_events as page
from tests.support.chaos import CHANNEL, PEOPLE, Bots, poll, query, stop
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use
from tests.support.fakes.pagerduty import FakePagerDuty
from tests.support.fakes.slack import FakeSlack
from tests.support.netservers import closed_port

TOKEN = "pd-crash-token-0123456789"
ANSWER = "checkout's 5xx come from a full /var on web-03: free it."


def model(body: dict[str, Any]) -> Reply:
    """The summary first, then the answer (a pure function of the request: a restart asks the same again)."""
    said = str(body.get("messages"))
    if "tool_result" not in said:
        return reply(tool_use(TOOL_NAME, {"situation": "checkout 5xx", "hypotheses": [], "next_steps": []}))
    return reply(text(ANSWER))


def config(pd: FakePagerDuty, port: int) -> str:
    return f"""
[alerts.pagerduty]
listen = "127.0.0.1:{port}"
secret_env = "PD_WEBHOOK_SECRET"
routes = {{ {page.SERVICE} = "{CHANNEL}" }}

[pagerduty]
token_env = "PD_TOKEN"
notes_from = "opsloop@example.com"
base_url = "{pd.url}"
"""


async def post_page(port: int, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (like the harness's waits)
    """The signed `incident.triggered`, once the process listens (it may still be starting)."""
    body, headers = page.signed(page.event("incident.triggered", event_id="ev-crash-1"))
    async with asyncio.timeout(timeout), aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.post(f"http://127.0.0.1:{port}/pagerduty", data=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    return
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.05)


async def test_the_final_note_is_one_note_when_opsloop_is_killed_after_pagerduty_accepted_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PD_TOKEN", TOKEN)
    monkeypatch.setenv("PD_WEBHOOK_SECRET", page.SECRET)
    fake_slack.add_channel(CHANNEL, "incident", members=PEOPLE)
    fake_anthropic.script(*[model] * 20)
    port = closed_port()
    async with FakePagerDuty(token=TOKEN) as pd:
        pd.add_user("opsloop@example.com", "opsloop")
        pd.add_service(page.SERVICE, "checkout-api")
        pd.add_incident(page.INCIDENT, service=page.SERVICE)
        bots = Bots(tmp_path, fake_slack, fake_anthropic, config_extra=config(pd, port))
        procs = [await bots.start()]
        killed: list[int] = []

        async def kill(incident: str, note: dict[str, Any]) -> None:
            """PagerDuty has the final note; opsloop dies before it reads the answer."""
            if note["content"].endswith("final]") and not killed:
                killed.append(procs[-1].pid)
                procs[-1].send_signal(signal.SIGKILL)
                await procs[-1].wait()

        pd.on_note = kill
        try:
            await post_page(port)
            await poll(lambda: killed, timeout=60, what="the final note accepted and opsloop killed")
            (item,) = query(bots.db, "SELECT * FROM pagerduty_outbox WHERE key LIKE 'note:%:final'")
            assert item["state"] == "pending" and item["attempts"] == 1  # the store never heard PagerDuty's answer
            procs.append(await bots.start())
            sent = "SELECT ref FROM pagerduty_outbox WHERE key LIKE 'note:%:final' AND state = 'sent'"
            (row,) = await poll(lambda: query(bots.db, sent), timeout=30, what="the final note recorded as sent")
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{bots.log_tail(40)}") from None
        finally:
            for proc in procs:
                await stop(proc)
        finals = [n for n in pd.incidents[page.INCIDENT].notes if n["content"].endswith("final]")]
        assert len(finals) == 1, bots.log_tail()
        assert ANSWER in finals[0]["content"] and row["ref"] == finals[0]["id"]  # adopted, not written again
        notes = [(r.method, r.path) for r in pd.requests if r.path.endswith("/notes")]
        assert notes == [("POST", f"/incidents/{page.INCIDENT}/notes"), ("GET", f"/incidents/{page.INCIDENT}/notes")]
        assert pd.problems == []
