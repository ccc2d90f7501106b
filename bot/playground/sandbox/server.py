"""`opsloop sandbox`: the Slack stand-in and the real app, driven from a small web page.

The page (plain HTML + vanilla JS, `bot/playground/sandbox/page.html`) long-polls `/api/state` for
the thread and posts what you type as a chosen person. A message becomes a real Slack
event and a button click a real interactivity payload, both delivered over Socket
Mode by the stand-in, so the app's own listeners handle them. Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.config.settings import Settings
from bot.playground.demo.play import TASK
from bot.playground.demo.stage import ALICE, DEMO_TOOLS, PEOPLE, Stage, stage
from bot.playground.demo.tools import HOSTNAME
from bot.playground.standin.render import blocks_parts, plain, view
from bot.playground.standin.slack import app_home_opened_event
from handlers.blocks import APPROVE, DENY, INVESTIGATE, STOP

ACTIONS = (APPROVE, DENY, STOP)
_LINK_URL = re.compile(r" \(https?://[^\s)]+\)")  # the " (url)" the renderer writes after a link's text
# The page: no framework, no external requests; everything user-, tool- or model-written is put in the DOM with
# textContent, never innerHTML.
PAGE = files(__package__).joinpath("page.html").read_text(encoding="utf-8")
POLL_SECONDS = 20.0  # a long poll answers at the latest after this, with the same version


@dataclass
class Sandbox:
    """The page's server: state as JSON (long poll), and people's messages and clicks."""

    stage: Stage
    version: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    url: str = ""
    feedback: list[dict[str, str]] = field(default_factory=list)  # recorded clicks, as the store has them
    own_tools: bool = False  # the user's config's tools, not the demo's

    def about(self) -> list[str]:
        """What the sandbox is, in the lines its start-up message and its page show: who its people are (by the
        user ids a config's approvers name) and whose tools it runs."""
        people = ", ".join(f"@{name} ({uid})" for uid, name in PEOPLE.items())
        tools = ", ".join(t.name for t in self.stage.ops.tools)
        where = (
            f"your config's tools ({self.stage.settings.config_path or 'no file'}): {tools}"
            if self.own_tools
            else f"the demo's tools on a simulated {HOSTNAME}: {tools}. list_big_files is the demo's own tool; the "
            "others stand in for opsloop's built-in tools of the same name"
        )
        return [f"people: {people}; a config's [approvals] approvers names them by these ids", where]

    def on_change(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def start(self, host: str, port: int) -> None:
        self.stage.slack.watch(self.on_change)
        app = web.Application()
        app.router.add_get("/", self.page)
        app.router.add_get("/api/state", self.state)
        app.router.add_post("/api/post", self.post)
        app.router.add_post("/api/click", self.click)
        app.router.add_post("/api/feedback", self.feedback_click)
        app.router.add_post("/api/shortcut", self.shortcut)
        app.router.add_post("/api/home", self.home)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.url = f"http://{bound_host}:{bound_port}/"

    async def close(self) -> None:
        self.on_change()  # answer waiting polls now
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- handlers -------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", charset="utf-8")

    async def state(self, request: web.Request) -> web.Response:
        since = int(request.query.get("since", "-1"))
        if since == self.version:
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_SECONDS):
                    await changed.wait()
        return web.json_response(self.snapshot())

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        user, text = self._user(body), str(body.get("text") or "").strip()
        if not text:
            raise web.HTTPBadRequest(text="empty message")
        thread_ts = body.get("thread_ts") or None
        if thread_ts:
            ts = await self.stage.reply(user, str(thread_ts), text)
        else:
            ts = await self.stage.mention(user, text.replace("@opsloop", "").strip())
        return web.json_response({"ok": True, "ts": ts})

    async def click(self, request: web.Request) -> web.Response:
        body = await request.json()
        action_id = str(body.get("action_id") or "")
        if action_id not in ACTIONS:
            raise web.HTTPBadRequest(text=f"unknown action {action_id!r}")
        try:
            await self.stage.click(self._user(body), str(body.get("ts") or ""), action_id)
        except LookupError as e:
            raise web.HTTPNotFound(text=str(e)) from None
        return web.json_response({"ok": True})

    async def feedback_click(self, request: web.Request) -> web.Response:
        """A click on 👍/👎 under an answer: a block_actions payload (type feedback_buttons) to the app, which
        stores it before its ack; the page then shows what the store recorded."""
        body = await request.json()
        slack = self.stage.slack
        try:
            envelope = await slack.feedback(
                self._user(body),
                self.stage.channel,
                str(body.get("ts") or ""),
                positive=body.get("value") == "positive",
            )
        except LookupError as e:
            raise web.HTTPNotFound(text=str(e)) from None
        await slack.wait_ack(envelope, timeout=10)
        names = self.stage.names
        self.feedback = [
            {"ts": f.message_ts, "user": names.get(f.user, f.user), "user_id": f.user, "value": f.value.value}
            for f in await self.stage.ops.store.feedback()
        ]
        self.on_change()
        return web.json_response({"ok": True})

    async def shortcut(self, request: web.Request) -> web.Response:
        """ "Investigate with opsloop" from a message's menu: a message_action payload to the app."""
        body = await request.json()
        try:
            await self.stage.slack.shortcut(
                self._user(body), self.stage.channel, str(body.get("ts") or ""), INVESTIGATE
            )
        except LookupError as e:
            raise web.HTTPNotFound(text=str(e)) from None
        return web.json_response({"ok": True})

    async def home(self, request: web.Request) -> web.Response:
        """The person opened the app's Home tab: an app_home_opened event; the app answers with views.publish."""
        body = await request.json()
        await self.stage.slack.send_event(app_home_opened_event(self._user(body)))
        return web.json_response({"ok": True})

    def _user(self, body: dict[str, Any]) -> str:
        user = str(body.get("user") or "")
        if user not in PEOPLE:
            raise web.HTTPBadRequest(text=f"unknown user {user!r}")
        return user

    # ---- state ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The channel as the page draws it: roots with their replies, reactions, ephemerals per person."""
        slack, names = self.stage.slack, self.stage.names
        reactions: dict[str, list[str]] = {}
        for channel, ts, name in slack.reactions:
            if channel == self.stage.channel:
                reactions.setdefault(ts, []).append(name)
        msgs = [
            view(m, names=names, bot_user_id=slack.bot_user_id, reactions=tuple(reactions.get(m.ts, ())))
            for m in slack.messages.get(self.stage.channel, [])
        ]
        roots = [m for m in msgs if not m.thread_ts or m.thread_ts == m.ts]
        threads = [
            {
                "root": r.to_json(),
                "replies": [m.to_json() for m in msgs if m.thread_ts == r.ts and m is not r],
                "status": self._loading(r.ts),
            }
            for r in roots
        ]
        home = {
            user: [
                {**dataclasses.asdict(p), "text": _LINK_URL.sub("", p.text)}  # links by their words, as Slack shows
                for p in blocks_parts(v.get("blocks") or [], names)
            ]
            for user, v in slack.home_views.items()
        }
        ephemerals = [
            {"user": e["user"], "thread_ts": e.get("thread_ts"), "text": e["text"]}
            for e in slack.ephemerals
            if e["channel"] == self.stage.channel
        ]
        return {
            "version": self.version,
            "channel": "incident",
            "people": [{"id": uid, "name": name} for uid, name in PEOPLE.items()],
            "default_user": ALICE,
            "example": TASK,
            "model": self.stage.model_label,
            "about": self.about(),
            "threads": threads,
            "ephemerals": ephemerals,
            "home": home,
            "feedback": self.feedback,
        }

    def _loading(self, thread_ts: str) -> dict[str, Any] | None:
        """The loading status under a thread (as a person reads it) and how long until Slack drops it."""
        slack = self.stage.slack
        text = slack.thread_status(self.stage.channel, thread_ts)
        st = slack.statuses.get((self.stage.channel, thread_ts))
        if text is None or st is None:
            return None
        left = slack.status_expiry_seconds - (time.monotonic() - st.set_at)
        return {"text": plain(text, self.stage.names), "expires_in": round(max(left, 0.0), 3)}


@contextlib.asynccontextmanager
async def running_sandbox(
    settings: Settings,
    *,
    port: int = 8765,
    host: str = "127.0.0.1",
    own_tools: bool = False,
    db_path: Path | None = None,
) -> AsyncIterator[Sandbox]:
    """The stand-in, the app and the page server, up until the block exits."""
    with tempfile.TemporaryDirectory(prefix="opsloop-sandbox-") as tmp:
        db = db_path or Path(tmp) / "opsloop.db"
        async with stage(settings, db_path=db, tools=None if own_tools else DEMO_TOOLS) as st:
            sandbox = Sandbox(st, own_tools=own_tools)
            try:
                await sandbox.start(host, port)
                yield sandbox
            finally:
                await sandbox.close()


async def serve_sandbox(
    settings: Settings, *, port: int = 8765, own_tools: bool = False, db_path: Path | None = None
) -> None:
    """Run until Ctrl-C, printing the URL."""
    async with running_sandbox(settings, port=port, own_tools=own_tools, db_path=db_path) as sandbox:
        print(
            f"opsloop sandbox: open {sandbox.url}\n"
            f"  the real app over Socket Mode on a local Slack stand-in · {sandbox.stage.model_label}\n"
            + "".join(f"  {line}\n" for line in sandbox.about())
            + "  Ctrl-C to stop",
            file=sys.stdout,
            flush=True,
        )
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
