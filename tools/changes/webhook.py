"""`POST /changes` (docs/context.md, What changed): change events pushed by CI/CD, flag services, Terraform runs,
stored for recent_changes, on the same terms as Alertmanager's webhook (handlers/alerts/threads.py). A service of
the changes reach
(tools/changes/reach.py `services`): the app starts it once runs can start.

Its own aiohttp server on `[changes.webhook] listen`, so a burst of deploys never delays a Slack ack; its store
calls queue behind mentions and clicks. The answer, in this order: 413 for a declared body past 1 MiB (before
anything else is looked at), 401 for a missing or wrong bearer token (constant-time compare; no token configured
lets nobody in), 413 for a body that turns out longer, 400 for a body that is not JSON or an event that is not
valid, naming the field (`[2].at`; a list is all or nothing), 503 when the store failed (nothing half stored: the
sender retries), and 200 only once every event is stored (durably; a re-sent id is stored once, the first copy
wins). Stored events older than `[changes] retention_days` are swept at start and hourly.
"""

from __future__ import annotations

import asyncio
import hmac

import structlog
from aiohttp import web

from bot.core.json_body import BadJson, read_json
from bot.store import Store
from tools.changes.events import parse_events
from tools.changes.settings import ChangesConfig
from tools.changes.store import SWEEP_BATCH, record_changes, sweep_changes

log = structlog.get_logger("opsloop.changes")

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a deploy's event is a few hundred bytes
SWEEP_EVERY_S = 3600.0
PROBLEMS_SHOWN = 20  # of a refused list's problems, in the answer (every one is logged)


class ChangeWebhook:
    """The `/changes` receiver for one bot: its server, its handler and the retention sweep (a tools.api.Service)."""

    def __init__(self, store: Store, config: ChangesConfig) -> None:
        assert config.webhook is not None
        self.store, self.config, self.webhook = store, config, config.webhook
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.name = f"changes.webhook on {self.webhook.host}:{self.webhook.port}"

    def authorized(self, request: web.Request) -> bool:
        if self.webhook.token is None:
            return False  # no token configured: nobody is let in
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        return hmac.compare_digest(given, f"Bearer {self.webhook.token}".encode())

    async def handle(self, request: web.Request) -> web.Response:
        """POST /changes: size, auth, bounded body, every event checked, stored, then 200."""
        too_big = web.json_response({"error": f"body over {MAX_BODY_BYTES} bytes"}, status=413)
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return too_big
        if not self.authorized(request):
            log.info("changes.webhook_refused", why="missing or wrong bearer token")
            return web.json_response({"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"})
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return too_big
        try:
            events, problems = parse_events(read_json(body))
        except BadJson as e:
            return web.json_response({"error": str(e)}, status=400)
        if problems:
            log.info("changes.webhook_bad_events", problems=problems[:PROBLEMS_SHOWN], count=len(problems))
            return web.json_response(
                {
                    "error": "invalid change event: " + "; ".join(problems[:PROBLEMS_SHOWN]),
                    "problems": problems[:PROBLEMS_SHOWN],
                },
                status=400,
            )
        try:
            added = await record_changes(self.store, events)
        except Exception as e:  # not stored: no 200, so the sender tries again
            log.error("changes.store_failed", error=f"{type(e).__name__}: {e}")
            return web.json_response({"error": "not stored, try again"}, status=503)
        log.info("changes.stored", events=len(events), new=added)
        return web.json_response({"status": "stored", "events": len(events), "new": added})

    async def sweep(self) -> int:
        """Drop the events received more than retention_days ago (0: keep them); how many went."""
        gone = 0
        while True:
            batch = await sweep_changes(self.store, self.config.retention_days, now=self.store.now())
            gone += batch
            if batch < SWEEP_BATCH:
                return gone

    async def _sweep_forever(self) -> None:
        while True:
            try:
                if gone := await self.sweep():
                    log.info("changes.swept", events=gone)
            except Exception as e:  # the store is down: next time
                log.warning("changes.sweep_failed", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(SWEEP_EVERY_S)  # retention is counted in days: nothing to wait on but the clock

    async def start(self) -> None:
        """Listen on [changes.webhook] listen (port 0: any free port)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/changes", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.webhook.host, self.webhook.port).start()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="opsloop-changes-sweep")
        log.info("changes.webhook_listening", host=self.webhook.host, port=self.port, path="/changes")

    @property
    def port(self) -> int | None:
        return int(self._runner.addresses[0][1]) if self._runner is not None and self._runner.addresses else None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
