"""`make screenshot`: the demo incident played in the sandbox by a headless Chromium, saved as a PNG.

    python -m bot.playground.sandbox.screenshot docs/sandbox.png

Everything runs on loopback: the sandbox (stand-in + real app + scripted model) and
Chromium driven through chromedriver. Every click and message goes through the page.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bot.app.settings import load_settings
from bot.core.log import configure_logging
from bot.playground.demo.play import REDIRECT, TASK
from bot.playground.demo.stage import ALICE, BOB, CAROL
from bot.playground.sandbox.server import Sandbox, running_sandbox
from bot.playground.sandbox.webdriver import Browser, chromium

ANSWER = "document.querySelector('.msg[data-kind=answer]')"


def card(tool: str, state: str) -> str:
    """JS: a card for `tool` in `state` is on the page."""
    return (
        f"return [...document.querySelectorAll('.msg[data-kind=card][data-state={state}]')]"
        f".some(m => m.textContent.includes({tool!r}))"
    )


async def play_incident(browser: Browser, url: str) -> None:
    """alice mentions; bob redirects the restart card in the thread; carol approves clean_logs; the answer shows."""
    await browser.get(url)
    await browser.wait_for("return document.querySelector('#user').options.length > 0")
    await browser.type("#text", "@opsloop " + TASK)
    await browser.click("#send")
    await browser.wait_for(card("restart_service", "pending"))
    await browser.select("#user", BOB)
    await browser.type(".reply input", REDIRECT)
    await browser.click(".reply button")
    await browser.wait_for(card("clean_logs", "pending"))
    await browser.select("#user", CAROL)
    await browser.click(".msg[data-kind=card][data-state=pending] button[data-action='opsloop.approve']")
    await browser.click(".confirm button.ok")  # the destructive call's confirm dialog
    await browser.wait_for(f"return {ANSWER} && {ANSWER}.textContent.includes('41%')")
    await browser.wait_for("return document.querySelector('.msg[data-kind=status][data-state=finished]')")


ALERT = "web-03: nginx 5xx rate 12% since 14:02 — restart_service host=web-03 unit=nginx.service"
SIDE_BY_SIDE = """const s = document.createElement('style'); s.textContent =
  'body.on-home #threads, body.on-home #compose { display:block !important; }' +
  'main { max-width:none; } body.on-home main { flex-direction:row; flex-wrap:wrap; }' +
  'body.on-home #threads { flex:1 1 620px; } body.on-home #compose { flex:1 1 100%; order:3; }' +
  'body.on-home #home { flex:0 0 330px; border-left:1px solid #e8e8e8; background:#fcfcfc; font-size:13px; }' +
  'body.on-home header { flex:1 1 100%; }';
document.head.appendChild(s);"""


async def show_surfaces(browser: Browser, sandbox: Sandbox) -> None:
    """After the incident: a 👍 on the answer, the shortcut run on an alert (paused on its approval, with its
    task list and loading status), a streaming answer, an open message menu, and alice's Home tab beside it."""
    slack, channel = sandbox.stage.slack, sandbox.stage.channel
    await browser.select("#user", ALICE)
    await browser.click(".msg[data-kind=answer] .feedback button[data-value=positive]")
    await browser.wait_for("return document.querySelector('.feedback .noted')")
    alert = slack.add_message(channel, BOB, ALERT)
    sandbox.on_change()
    row = f".thread[data-ts='{alert.ts}'] > .msg"
    await browser.wait_for(f'return document.querySelector("{row}")')
    await browser.click(f"{row} button.more")
    await browser.click(f"{row} .menu button.shortcut")
    await browser.wait_for(f"return document.querySelector(\".thread[data-ts='{alert.ts}'] .loading\")")
    await browser.wait_for(
        f"return document.querySelector(\".thread[data-ts='{alert.ts}'] .task[data-status=in_progress]\")"
    )
    question = slack.add_message(channel, CAROL, "@opsloop why did /var fill up on web-03 in the first place?")
    answer = slack.add_message(channel, slack.bot_user_id, STREAMED, thread_ts=question.ts, bot_id=slack.bot_id)
    answer.stream_state, answer.stream_started_at = "streaming", time.monotonic()
    sandbox.on_change()
    await browser.wait_for("return document.querySelector('.msg[data-stream=streaming]')")
    await browser.execute(SIDE_BY_SIDE)
    await browser.click("#home-tab")
    await browser.wait_for("return document.querySelector('#home').innerText.includes('Active runs')")
    await browser.click(f".thread[data-ts='{question.ts}'] > .msg button.more")  # the shortcut's menu, open


STREAMED = (
    "logrotate on web-03 keeps 52 weeks of nginx logs uncompressed (`rotate 52`, no `compress`), and traffic doubled on"
)


async def shoot() -> bytes:
    configure_logging("error")
    settings = load_settings(None, env={})  # the scripted model, whatever this shell exports
    async with running_sandbox(settings, port=0) as sandbox, chromium(width=1440, height=2000) as browser:
        await play_incident(browser, sandbox.url)
        await show_surfaces(browser, sandbox)
        await browser.execute("document.getElementById('text').blur(); window.scrollTo(0, 0);")
        height = await browser.execute(
            "const t = document.getElementById('threads');"
            "return Math.ceil(t.lastElementChild.getBoundingClientRect().bottom)"
            " + document.getElementById('compose').offsetHeight + 160"
        )
        await browser._call("POST", "/window/rect", {"width": 1440, "height": min(int(height), 3000)})
        png = await browser.screenshot()
    return png


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/sandbox.png")
    png = asyncio.run(shoot())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    print(f"wrote {path} ({len(png):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
