"""A small W3C WebDriver client for headless Chromium (Debian's `chromium` + `chromium-driver`).

Used by the sandbox's browser test and by `make screenshot`. It speaks the WebDriver
HTTP protocol to a chromedriver it starts on loopback; no Selenium, no driver
downloads, no traffic off this machine. Waits are MutationObserver-based scripts in
the page: they return as soon as the page shows what is awaited.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from bot.core.errors import OpsloopError

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
CANDIDATES = {
    "chromium": ("chromium", "chromium-browser", "/usr/bin/chromium"),
    "chromedriver": ("chromedriver", "/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"),
}

_WAIT_JS = """
const [check, ms, done] = arguments;
const ok = () => { try { return Boolean(new Function(check)()); } catch (e) { return false; } };
if (ok()) return done(true);
const obs = new MutationObserver(() => { if (ok()) { obs.disconnect(); clearTimeout(t); done(true); } });
obs.observe(document, {childList: true, subtree: true, attributes: true, characterData: true});
const t = setTimeout(() => { obs.disconnect(); done(ok()); }, ms);
"""


class WebDriverError(OpsloopError):
    """chromedriver answered with an error."""


def find_binaries() -> tuple[str | None, str | None]:
    """(chromium, chromedriver) paths, None where missing."""
    browser, driver = (next((p for c in CANDIDATES[n] if (p := shutil.which(c))), None) for n in CANDIDATES)
    return browser, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Browser:
    """One WebDriver session: navigate, find, click, type, wait for the page, take screenshots."""

    http: aiohttp.ClientSession
    base: str  # http://127.0.0.1:PORT/session/ID

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async with self.http.request(method, self.base + path, json=body if method == "POST" else None) as r:
            data = await r.json(content_type=None)
        value = data.get("value") if isinstance(data, dict) else None
        if isinstance(value, dict) and value.get("error"):
            raise WebDriverError(f"{value['error']}: {value.get('message', '')[:500]}")
        return value

    async def get(self, url: str) -> None:
        await self._call("POST", "/url", {"url": url})

    async def find(self, css: str) -> str:
        return str((await self._call("POST", "/element", {"using": "css selector", "value": css}))[ELEMENT])

    async def click(self, css: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/click", {})

    async def type(self, css: str, text: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/value", {"text": text})

    async def select(self, css: str, value: str) -> None:
        """Choose an <option> by value (and fire `change`, as a person picking it would)."""
        await self.execute(
            "const s = document.querySelector(arguments[0]); s.value = arguments[1];"
            "s.dispatchEvent(new Event('change'));",
            css,
            value,
        )

    async def execute(self, script: str, *args: Any) -> Any:
        return await self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    async def wait_for(self, check_js: str, timeout: float = 20.0) -> None:  # noqa: ASYNC109 (a page-side wait)
        """Until `check_js` (a function body returning truthy) holds in the page; raises TimeoutError."""
        ms = int(timeout * 1000)
        await self._call("POST", "/timeouts", {"script": ms + 10_000})
        if not await self._call("POST", "/execute/async", {"script": _WAIT_JS, "args": [check_js, ms]}):
            body = await self.execute("return document.body.innerText")
            raise TimeoutError(f"page never satisfied {check_js!r}; it shows:\n{str(body)[-3000:]}")

    async def screenshot(self) -> bytes:
        return base64.b64decode(await self._call("GET", "/screenshot"))


@contextlib.asynccontextmanager
async def chromium(*, width: int = 1280, height: int = 900) -> AsyncIterator[Browser]:
    """A headless Chromium session through a chromedriver started on loopback; all torn down after."""
    browser_bin, driver_bin = find_binaries()
    if browser_bin is None or driver_bin is None:
        missing = [n for n, p in (("chromium", browser_bin), ("chromedriver", driver_bin)) if p is None]
        raise FileNotFoundError(f"missing {' and '.join(missing)} (Debian: apt-get install chromium chromium-driver)")
    port = _free_port()
    driver = await asyncio.create_subprocess_exec(
        driver_bin,
        f"--port={port}",
        "--allowed-ips=127.0.0.1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert driver.stdout is not None
        async with asyncio.timeout(30):
            while b"started successfully" not in (line := await driver.stdout.readline()):
                if not line:
                    raise WebDriverError("chromedriver exited before it was ready")
        with tempfile.TemporaryDirectory(prefix="opsloop-chromium-") as profile:
            async with aiohttp.ClientSession() as http:
                options = {
                    "binary": browser_bin,
                    "args": [*CHROME_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                }
                caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
                async with http.post(f"http://127.0.0.1:{port}/session", json=caps) as r:
                    created = (await r.json(content_type=None)).get("value") or {}
                if "sessionId" not in created:
                    raise WebDriverError(f"could not start chromium: {str(created)[:500]}")
                browser = Browser(http=http, base=f"http://127.0.0.1:{port}/session/{created['sessionId']}")
                try:
                    yield browser
                finally:
                    with contextlib.suppress(aiohttp.ClientError, WebDriverError):
                        await browser._call("DELETE", "")
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.terminate()
        await driver.wait()
