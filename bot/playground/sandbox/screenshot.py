"""`make screenshot`: the demo incident played in the sandbox by a headless Chromium, saved as a PNG.

    python -m bot.playground.sandbox.screenshot docs/sandbox.png

Everything runs on loopback: the sandbox (stand-in + real app + scripted model) and
Chromium driven through chromedriver. Every click and message goes through the page.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.config import load_settings
from bot.log import configure_logging
from bot.playground.demo.play import REDIRECT, TASK
from bot.playground.demo.stage import BOB, CAROL
from bot.playground.sandbox.server import running_sandbox
from bot.playground.sandbox.webdriver import Browser, chromium

ANSWER = "document.querySelector('.msg[data-kind=answer]')"


def card(tool: str, state: str) -> str:
    """JS: a card for `tool` in `state` is on the page."""
    return (f"return [...document.querySelectorAll('.msg[data-kind=card][data-state={state}]')]"
            f".some(m => m.textContent.includes({tool!r}))")


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


async def shoot() -> bytes:
    configure_logging("error")
    settings = load_settings(None, env={})  # the scripted model, whatever this shell exports
    async with running_sandbox(settings, port=0) as sandbox, chromium(width=1100, height=2000) as browser:
        await play_incident(browser, sandbox.url)
        await browser.execute("document.getElementById('text').blur(); window.scrollTo(0, 0);")
        height = await browser.execute(
            "const t = document.getElementById('threads');"
            "return Math.ceil(t.lastElementChild.getBoundingClientRect().bottom)"
            " + document.getElementById('compose').offsetHeight + 160")
        await browser._call("POST", "/window/rect", {"width": 1100, "height": min(int(height), 2400)})
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
