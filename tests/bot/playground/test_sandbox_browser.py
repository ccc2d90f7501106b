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

from bot.app.settings import load_settings
from bot.playground.demo import tools as demo_tools
from bot.playground.demo.stage import ALICE, BOB, CAROL
from bot.playground.sandbox.screenshot import ANSWER, card, play_incident
from bot.playground.sandbox.server import Sandbox, running_sandbox
from bot.playground.sandbox.webdriver import Browser, chromium, find_binaries
from handlers.blocks import SlackMessage, with_feedback

APPROVE_BUTTON = ".msg[data-kind=card][data-state=pending] button[data-action='opsloop.approve']"


def _missing() -> str:
    browser, driver = find_binaries()
    missing = [name for name, path in (("chromium", browser), ("chromedriver (chromium-driver)", driver)) if not path]
    return " and ".join(missing)


needs_chromium = pytest.mark.skipif(
    bool(_missing()),
    reason=f"{_missing()} not installed: `make browser` (apt-get install chromium chromium-driver) enables this test",
)


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with running_sandbox(load_settings(None, env={}), port=0) as sb:
        yield sb


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


@needs_chromium
@pytest.mark.processes
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
@pytest.mark.processes
async def test_browser_plays_the_demo_incident_with_a_redirect(sandbox: Sandbox, browser: Browser) -> None:
    await play_incident(browser, sandbox.url)
    shown = await browser.execute("return document.body.innerText")
    assert "Superseded by a thread reply from @bob" in shown
    assert "web-03: /var is back to 41% (was 97%)." in shown
    note = await browser.execute("return document.querySelector('.msg[data-kind=note]').innerText")
    assert "Following runbook: Disk full on a web host (5 steps)" in note  # the demo's runbook, not the answer
    assert demo_tools.HOST.var_percent == 41
    # the finished status message keeps the living summary above its task list, rendered without markup
    status = await browser.execute(
        "return document.querySelector('.msg[data-kind=status][data-state=finished]').innerText"
    )
    assert status.index("What's going on") < status.index("Likely cause") < status.index("What opsloop is doing")
    assert "Confirmed, high confidence: 212 rotated nginx logs" in status
    assert "Refuted, high confidence: nginx itself is broken" in status and "~Refuted" not in status


async def _state(http: aiohttp.ClientSession, url: str, since: int = -1) -> dict[str, Any]:
    async with http.get(f"{url}api/state", params={"since": since}) as r:
        data: dict[str, Any] = await r.json()
        return data


async def test_sandbox_api_turns_posts_and_clicks_into_slack_deliveries(sandbox: Sandbox) -> None:
    """Without a browser: the page's two calls, and the long poll that reports their effects."""
    async with asyncio.timeout(30), aiohttp.ClientSession() as http:
        async with http.post(
            f"{sandbox.url}api/post",
            json={"user": ALICE, "text": "@opsloop restart_service host=web-03 unit=nginx.service"},
        ) as r:
            assert r.status == 200
        state = await _state(http, sandbox.url)
        while not any(m["kind"] == "card" and m["state"] == "pending" for t in state["threads"] for m in t["replies"]):
            state = await _state(http, sandbox.url, state["version"])
        card_msg = next(m for t in state["threads"] for m in t["replies"] if m["kind"] == "card")
        async with http.post(
            f"{sandbox.url}api/click", json={"user": CAROL, "ts": card_msg["ts"], "action_id": "opsloop.approve"}
        ) as r:
            assert r.status == 200
        while not any(m["kind"] == "answer" for t in state["threads"] for m in t["replies"]):
            state = await _state(http, sandbox.url, state["version"])
    assert [e["type"] for e in sandbox.stage.slack.envelopes] == ["events_api", "interactive"]
    assert demo_tools.HOST.actions == ["restart_service nginx.service approved by U0CAROL"]


# --- the agent surfaces, one by one, in the page -------------------------------------------------------------
STATUS_MSG = ".msg[data-kind=status]"


def _task_row(title_part: str, status: str) -> str:
    """JS: a task row whose title has `title_part`, in `status`, in the status message's plan."""
    return (
        f"return [...document.querySelectorAll('{STATUS_MSG} .plan .task[data-status={status}]')]"
        f".some(t => t.textContent.includes({title_part!r}))"
    )


async def _open(browser: Browser, sandbox: Sandbox) -> None:
    await browser.get(sandbox.url)
    await browser.wait_for("return document.querySelector('#user').options.length > 0")


@needs_chromium
@pytest.mark.processes
async def test_browser_task_list_and_the_loading_status_until_it_expires(sandbox: Sandbox, browser: Browser) -> None:
    sandbox.stage.slack.status_expiry_seconds = 2.0  # Slack's 2 minutes, shortened: nobody refreshes a pause
    await _open(browser, sandbox)
    await browser.type("#text", "@opsloop clean_logs host=web-03 path=/var/log/nginx")
    await browser.click("#send")
    await browser.wait_for(card("clean_logs", "pending"))
    await browser.wait_for(_task_row("Approval for clean_logs", "in_progress"))
    await browser.wait_for(_task_row("clean_logs /var/log/nginx on web-03", "pending"))
    await browser.wait_for(
        "return [...document.querySelectorAll('.loading')].some(l => l.textContent.includes('waiting for approval'))"
    )
    # The run is paused: nobody refreshes the status, and the page drops it when Slack would.
    await browser.wait_for("return !document.querySelector('.loading')", timeout=10)
    assert sandbox.stage.slack.thread_status(sandbox.stage.channel, _root_ts(sandbox)) is None
    assert await browser.execute(f"return document.querySelector('{STATUS_MSG} button.danger') !== null")  # Stop
    await browser.select("#user", CAROL)
    await browser.click(APPROVE_BUTTON)
    await browser.click(".confirm button.ok")
    await browser.wait_for(
        _task_row("Approval for clean_logs", "complete")
        + " && "
        + _task_row("clean_logs /var/log/nginx on web-03", "complete").removeprefix("return ")
    )
    shown = await browser.execute(f"return document.querySelector('{STATUS_MSG} .plan').innerText")
    assert "approved by @carol" in shown and "✓" in shown


def _root_ts(sandbox: Sandbox) -> str:
    return next(m.ts for m in sandbox.stage.slack.messages[sandbox.stage.channel] if not m.thread_ts)


@needs_chromium
@pytest.mark.processes
async def test_browser_feedback_click_is_recorded_by_the_app(sandbox: Sandbox, browser: Browser) -> None:
    await _open(browser, sandbox)
    await browser.type("#text", "@opsloop check_disk host=web-03")
    await browser.click("#send")
    await browser.wait_for(f"return {ANSWER} && {ANSWER}.querySelector('.feedback button')")
    await browser.click(".msg[data-kind=answer] .feedback button[data-value=positive]")
    await browser.wait_for(
        "return document.querySelector('.feedback .noted') && "
        "document.querySelector('.feedback button.chosen[data-value=positive]')"
    )
    stored = await sandbox.stage.ops.store.feedback()
    assert [(f.user, f.value.value) for f in stored] == [(ALICE, "positive")]
    actions = [e["payload"] for e in sandbox.stage.slack.envelopes if e["type"] == "interactive"]
    assert actions[-1]["type"] == "block_actions" and actions[-1]["actions"][0]["type"] == "feedback_buttons"


@needs_chromium
@pytest.mark.processes
async def test_browser_app_home_tab_publishes_the_on_call_view(sandbox: Sandbox, browser: Browser) -> None:
    await _open(browser, sandbox)
    await browser.type("#text", "@opsloop clean_logs host=web-03 path=/var/log/nginx")
    await browser.click("#send")
    await browser.wait_for(card("clean_logs", "pending"))
    await browser.click("#home-tab")
    await browser.wait_for("return document.querySelector('#home').innerText.includes('Active runs')")
    home = await browser.execute("return document.querySelector('#home').innerText")
    assert "clean_logs" in home  # the pending approval alice's team may decide, or the active run's task
    events = [e["payload"]["event"]["type"] for e in sandbox.stage.slack.envelopes if e["type"] == "events_api"]
    assert "app_home_opened" in events
    assert ALICE in sandbox.stage.slack.home_views
    await browser.click("#chan-tab")
    await browser.wait_for("return document.querySelector('#threads').offsetParent !== null")


@needs_chromium
@pytest.mark.processes
async def test_browser_message_shortcut_investigates_a_persons_message(sandbox: Sandbox, browser: Browser) -> None:
    slack = sandbox.stage.slack
    alert = slack.add_message(sandbox.stage.channel, BOB, "web-03: disk /var at 97%, check_disk host=web-03")
    sandbox.on_change()  # seeded directly (no event): tell the page
    await _open(browser, sandbox)
    row = f".thread[data-ts='{alert.ts}'] > .msg"
    await browser.wait_for(f'return document.querySelector("{row}")')
    await browser.click(f"{row} button.more")
    await browser.click(f"{row} .menu button.shortcut")
    await browser.wait_for(
        f"return document.querySelector(\".thread[data-ts='{alert.ts}'] .replies .msg[data-kind=status]\")"
    )
    payload = next(e["payload"] for e in slack.envelopes if e["type"] == "interactive")
    assert (payload["type"], payload["callback_id"], payload["message"]["ts"]) == (
        "message_action",
        "opsloop.investigate",
        alert.ts,
    )


@needs_chromium
@pytest.mark.processes
async def test_browser_streaming_message_grows_then_stops(sandbox: Sandbox, browser: Browser) -> None:
    """A streamed answer through the stand-in's own chat.startStream / appendStream / stopStream: it grows while
    "streaming…", then shows its whole text with the feedback buttons stopStream added."""
    slack = sandbox.stage.slack
    root = slack.add_message(sandbox.stage.channel, ALICE, "why is web-03 full?")
    where = {"channel": sandbox.stage.channel}
    started = slack._chat_start_stream(
        {
            **where,
            "thread_ts": root.ts,
            "markdown_text": "Looking at /var:",
            "recipient_user_id": ALICE,
            "recipient_team_id": slack.team_id,
        }
    )
    await _open(browser, sandbox)
    streaming = ".msg[data-stream=streaming]"
    await browser.wait_for(
        f"return document.querySelector('{streaming} .streaming')"
        f" && document.querySelector('{streaming}').innerText.includes('Looking at /var:')"
    )
    slack._chat_append_stream({**where, "ts": started["ts"], "markdown_text": " 212 rotated nginx logs"})
    await browser.wait_for(
        f"return document.querySelector('{streaming}') && "
        f"document.querySelector('{streaming}').innerText.includes('212 rotated nginx logs')"
    )
    [feedback] = with_feedback([SlackMessage(text="x", blocks=[])], "run_sandbox")
    slack._chat_stop_stream(
        {**where, "ts": started["ts"], "markdown_text": "\nDeleted them.", "blocks": feedback.blocks}
    )
    stopped = ".msg[data-stream=stopped]"
    await browser.wait_for(
        f"return document.querySelector('{stopped}') && !document.querySelector('.streaming')"
        f" && document.querySelector('{stopped}').innerText.includes('Deleted them.')"
        f" && document.querySelector('{stopped}').innerText.includes('212 rotated nginx logs')"
        f" && document.querySelector('{stopped} .feedback button')"
    )
