"""`opsloop sandbox` in a real headless Chromium (Debian's chromium + chromium-driver), loopback only.

The page's messages become Slack events and its button clicks interactivity payloads,
delivered by the stand-in over Socket Mode to the real app. Skips, naming what is
missing, where Chromium is not installed (`make test` installs it when it can).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot.config import load_settings
from bot.playground.demo import tools as demo_tools
from bot.playground.demo.stage import ALICE, CAROL
from bot.playground.sandbox.screenshot import ANSWER, card, play_incident
from bot.playground.sandbox.server import Sandbox, running_sandbox
from bot.playground.sandbox.webdriver import Browser, chromium, find_binaries

APPROVE_BUTTON = ".msg[data-kind=card][data-state=pending] button[data-action='opsloop.approve']"


def _missing() -> str:
    browser, driver = find_binaries()
    missing = [name for name, path in (("chromium", browser), ("chromedriver (chromium-driver)", driver)) if not path]
    return " and ".join(missing)


needs_chromium = pytest.mark.skipif(bool(_missing()), reason=f"{_missing()} not installed: "
                                    "`make browser` (apt-get install chromium chromium-driver) enables this test")


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with running_sandbox(load_settings(None, env={}), port=0) as sb:
        yield sb


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


@needs_chromium
async def test_browser_mention_card_approve_and_answer(sandbox: Sandbox, browser: Browser) -> None:
    await browser.get(sandbox.url)
    await browser.wait_for("return document.querySelector('#user').options.length > 0")
    await browser.type("#text", "@opsloop clean_logs host=web-03 path=/var/log/nginx")
    await browser.click("#send")
    await browser.wait_for(card("clean_logs", "pending") + " && document.body.innerText.includes('would delete 212')")
    await browser.select("#user", CAROL)
    await browser.click(APPROVE_BUTTON)
    await browser.click(".confirm button.ok")
    decided = " && document.body.innerText.includes('Approved by @carol')"
    await browser.wait_for(card("clean_logs", "approved") + decided)
    await browser.wait_for(f"return {ANSWER} && {ANSWER}.textContent.includes('freed 28.0 GB')")
    assert demo_tools.HOST.actions == ["clean_logs /var/log/nginx approved by U0CAROL"]


@needs_chromium
async def test_browser_plays_the_demo_incident_with_a_redirect(sandbox: Sandbox, browser: Browser) -> None:
    await play_incident(browser, sandbox.url)
    shown = await browser.execute("return document.body.innerText")
    assert "Superseded by a thread reply from @bob" in shown
    assert "web-03: /var is back to 41% (was 97%)." in shown
    assert demo_tools.HOST.var_percent == 41


async def _state(http: aiohttp.ClientSession, url: str, since: int = -1) -> dict[str, Any]:
    async with http.get(f"{url}api/state", params={"since": since}) as r:
        data: dict[str, Any] = await r.json()
        return data


async def test_sandbox_api_turns_posts_and_clicks_into_slack_deliveries(sandbox: Sandbox) -> None:
    """Without a browser: the page's two calls, and the long poll that reports their effects."""
    async with asyncio.timeout(30), aiohttp.ClientSession() as http:
        async with http.post(f"{sandbox.url}api/post", json={"user": ALICE, "text": "@opsloop restart_service "
                                                             "host=web-03 unit=nginx.service"}) as r:
            assert r.status == 200
        state = await _state(http, sandbox.url)
        while not any(m["kind"] == "card" and m["state"] == "pending"
                      for t in state["threads"] for m in t["replies"]):
            state = await _state(http, sandbox.url, state["version"])
        card_msg = next(m for t in state["threads"] for m in t["replies"] if m["kind"] == "card")
        async with http.post(f"{sandbox.url}api/click",
                             json={"user": CAROL, "ts": card_msg["ts"], "action_id": "opsloop.approve"}) as r:
            assert r.status == 200
        while not any(m["kind"] == "answer" for t in state["threads"] for m in t["replies"]):
            state = await _state(http, sandbox.url, state["version"])
    assert [e["type"] for e in sandbox.stage.slack.envelopes] == ["events_api", "interactive"]
    assert demo_tools.HOST.actions == ["restart_service nginx.service approved by U0CAROL"]
