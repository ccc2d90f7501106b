"""The thread-opening sources' shared side: their server (`POST <path>`: verified, bounded, parsed, stored, then
200), and each alert's thread opened once, after the ack or by a recovery pass (docs/alerts.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import structlog
from aiohttp import web

from bot.config.reader import Reader
from bot.core.redact import redact
from bot.core.types import OutboxState
from bot.run.liveness import owner_id
from bot.store import AcceptedAlert, AlertOutcome
from handlers import messages
from handlers.alerts.desk import AlertDesk
from handlers.alerts.source import BadPayload, HttpSource
from handlers.links import permalink

log = structlog.get_logger("opsloop.alerts")

MAX_BODY_BYTES = 1 << 20  # a notification bigger than 1 MiB is refused (413): Alertmanager's are kilobytes
CLAIM_SECONDS = 6.0  # an alert being opened is claimed this long (renewed); past it, a recovery pass takes it up
REFUSED_BACKOFF_S = 60.0  # Slack refused a root post for good: the next attempt waits this long


class WebhookSource:
    """What every thread-opening source shares besides its `verify` and `channel`: its [alerts] table read by its
    config class (`config_type.read`), its listen address, its live part (ThreadedAlerts), its payload module's
    parse/alert/root/note, and the secret it verifies with (the config's `<secret_field>` and `<secret_field>_env`;
    unset, `missing` says so and `verify` lets nobody in)."""

    name, sender, path = "", "", ""
    config_type: Any  # the source's frozen config dataclass: read(r, env), host, port
    secret_field, secret_what = "token", ""  # the config's field holding it; what it is, for `missing`
    verify: Callable[[Any, Mapping[str, str], bytes], bool]  # each source's own (HttpSource)
    channel: Callable[[Any, dict[str, Any]], str | None]

    def __init__(self, payload: ModuleType) -> None:
        self.parse, self.alert, self.root, self.note = (
            payload.validate,
            payload.alert,
            payload.root_message,
            payload.note,
        )

    def read(self, alerts: Reader, env: Mapping[str, str]) -> Any:
        table = alerts.at(self.name) if alerts.has(self.name) else None
        return self.config_type.read(table, env) if table is not None and isinstance(table.value, dict) else None

    def missing(self, config: Any) -> list[str]:
        if getattr(config, self.secret_field) is None:
            return [f"{getattr(config, f'{self.secret_field}_env')} is not set ({self.secret_what})"]
        return []

    def check_lines(self, config: Any) -> list[str]:
        if getattr(config, self.secret_field) is None:
            return []  # said by `missing`
        env = getattr(config, f"{self.secret_field}_env")
        return [f"alerts: {self.name} on {config.host}:{config.port}{self.path}, {self.secret_field} from {env}"]

    def listens(self, config: Any) -> list[tuple[str, str, int]]:
        return [(f"alerts.{self.name}", config.host, config.port)]

    def start(self, desk: AlertDesk, config: Any) -> ThreadedAlerts:
        return ThreadedAlerts(desk, self, config)


class ThreadedAlerts:
    """One thread-opening source's way in: its own server on its `listen`, each alert opened once. `config`
    (typed, the source's): host, port, max_runs_per_10_min, reopen_after_s (the channel: `source.channel`)."""

    def __init__(self, desk: AlertDesk, source: HttpSource, config: Any) -> None:
        self.desk, self.source, self.config = desk, source, config
        self.owner = owner_id()  # this process, as the claimant of the alerts it opens
        self.claim_seconds, self.refused_backoff_s = CLAIM_SECONDS, REFUSED_BACKOFF_S
        self._runner: web.AppRunner | None = None
        self._opening: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def use(self, config: Any) -> None:
        self.config = config

    async def on_message(self, body: dict[str, Any], event: dict[str, Any]) -> bool:
        return False  # not a Slack source

    def count(self, outcome: str, **context: Any) -> None:
        self.desk.count(self.source.name, outcome, **context)

    async def handle(self, request: web.Request) -> web.Response:
        """POST <path>: verify, bounded body, parse, store, then 200 (a store failure: 503, the sender retries)."""
        too_big = web.json_response({"error": f"body over {MAX_BODY_BYTES} bytes"}, status=413)
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return too_big
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return too_big
        if not self.source.verify(self.config, request.headers, body):
            log.info("alert.webhook_refused", source=self.source.name, why="missing or wrong credentials")
            return web.json_response({"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"})
        try:
            payload = self.source.parse(body)
        except BadPayload as e:
            log.info("alert.webhook_bad_payload", source=self.source.name, problem=str(e))
            return web.json_response({"error": str(e)}, status=400)
        channel = self.source.channel(self.config, payload)
        if channel is None:
            log.info("alert.not_routed", source=self.source.name)
            return web.json_response({"status": "ignored"})
        alert, c = self.source.alert(payload), self.config
        self.count("received", group=alert.key, status=alert.status, firing=len(alert.firing))
        try:
            accepted = await self.desk.store.accept_alert_group(
                alert.key,
                source=self.source.name,
                sender=self.source.sender,
                delivery=alert.delivery,
                channel=channel,
                status=alert.status,
                fingerprints=list(alert.firing),
                summary=alert.summary,
                update=redact(alert.task),
                limit=c.max_runs_per_10_min,
                reopen_after=c.reopen_after_s,
                root_text=lambda previous: self.source.root(payload, self._link(previous)),
                payload=payload,
                owner=self.owner,
                claim_seconds=self.claim_seconds,
            )
        except Exception as e:  # not stored: no 200, so the sender sends it again
            log.error("alert.store_failed", error=f"{type(e).__name__}: {e}")
            return web.json_response({"error": "not stored, try again"}, status=503)
        self._after(accepted, alert)
        return web.json_response({"status": "stored", "outcome": accepted.outcome.value})

    @staticmethod
    def _link(group: Any) -> str | None:
        return permalink(group.channel, group.thread_ts) if group is not None and group.thread_ts else None

    def _after(self, accepted: AcceptedAlert, alert: Any) -> None:
        """What a stored notification does next, off the ack path."""
        outcome, group, key = accepted.outcome, accepted.group, alert.key
        if outcome in (AlertOutcome.STARTED, AlertOutcome.REOPENED):
            if accepted.previous is not None:
                log.info("alert.reopened", group=key, previous=accepted.previous.key)
            self.desk.outbox.wake()  # its root post was enqueued with it
            self._spawn_open(key, claimed=True)
        elif outcome is AlertOutcome.DROPPED and group is not None:
            self.count("dropped", group=key)
            self.desk.storm_later(group.channel, group.key, group.summary, self.config.max_runs_per_10_min)
        elif outcome in (AlertOutcome.REPEAT, AlertOutcome.DUPLICATE, AlertOutcome.IGNORED):
            self.count("deduplicated", group=key)
            if group is not None and group.state == "opening" and (group.claimed_until or 0.0) < self.desk.store.now():
                self._spawn_open(key)  # stuck opening past its claim (its opener died): recovered now, once
            if accepted.note and group is not None and group.thread_ts:
                self.desk.note(group.channel, group.thread_ts, messages.alert_repeat(self.source.sender), key)
        elif group is not None and group.thread_ts:
            text = self.source.note(alert, told_run=accepted.run is not None)
            self.desk.note(group.channel, group.thread_ts, text, key)
            if accepted.run is not None:
                self.desk.nudge()
                if outcome is AlertOutcome.RESOLVED:
                    self.desk.flag_cards(accepted.run.id, f"{self.source.sender} said this alert is resolved", key)

    def _spawn_open(self, key: str, *, claimed: bool = False) -> None:
        if key in self._opening:
            return  # this process is already on it
        self._opening.add(key)
        task = asyncio.create_task(self._open(key, claimed=claimed), name=f"alert_open:{key}")
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._opening.discard(key)

        task.add_done_callback(done)

    async def _open(self, key: str, *, claimed: bool = False) -> None:
        """An alert stored `opening`: claim it (compare-and-set; `claimed`: the accept claimed it), wait for its
        root post (the outbox sends it once: a crash between posting and recording the ts adopts the post it
        finds), then start its run in that thread (compare-and-set on `opening`: once, whoever gets there)."""
        store = self.desk.store
        try:
            now = store.now()
            group = await store.claim_alert_group(key, self.owner, now=now, until=now + self.claim_seconds)
            if group is None:
                return  # opened already, or another replica holds it
            if not claimed:
                log.info("alert.recovering", group=key, attempts=group.attempts)
            payload = json.loads(group.payload) if group.payload else None
            if not isinstance(payload, dict):
                log.error("alert.unrecoverable", group=key, why="no stored payload")
                await store.release_alert_group(key, self.owner, until=now + self.refused_backoff_s)
                return
            previous = await store.alert_group(group.previous) if group.previous else None
            item = await store.outbox_item(group.root_item) if group.root_item else None
            if item is None or item.state == OutboxState.FAILED:
                text = self.source.root(payload, self._link(previous))
                if await store.retry_alert_root(key, self.owner, text=text) is None:
                    return
                self.desk.outbox.wake()
                group = await store.alert_group(key)
                assert group is not None

            async def renew() -> bool:
                t = store.now()
                return await store.claim_alert_group(key, self.owner, now=t, until=t + self.claim_seconds) is not None

            ts = await self.desk.posted(group.root_item or "", renew=renew, renew_every_s=self.claim_seconds / 3)
            if ts is None:  # Slack refused the root for good (or the claim was lost): tried again later
                log.error("alert.thread_not_opened", group=key, channel=group.channel)
                await store.release_alert_group(key, self.owner, until=store.now() + self.refused_backoff_s)
                return
            alert = self.source.alert(payload)
            run = await self.desk.store.open_alert_run(
                key,
                thread_ts=ts,
                task=redact(alert.task),
                prompt=redact(self.desk.prompt(f"from {self.source.sender} in <#{group.channel}>", alert.task)),
                model=self.desk.model,
                title=alert.title,
                pointer=messages.alert_fired_again(permalink(group.channel, ts)) if previous else "",
            )
            if run is not None:
                self.count("started", group=key, run_id=run.id)
                self.desk.start(run.id)
        except Exception as e:  # the store failed: the claim lapses and the recovery pass tries again
            log.warning("alert.open_failed", group=key, error=f"{type(e).__name__}: {e}")

    async def recover(self) -> int:
        """One recovery pass: every alert of this source left `opening` past its claim is opened (once)."""
        keys = await self.desk.store.stuck_alert_groups(self.desk.store.now(), source=self.source.name)
        for key in keys:
            self._spawn_open(key)
        return len(keys)

    async def _recover_forever(self) -> None:
        while True:
            try:
                await self.recover()
            except Exception as e:  # the store is down: next pass
                log.warning("alert.recovery_failed", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(self.claim_seconds / 2)  # claims lapse on the clock: nothing to wait on

    async def serve(self) -> None:
        """Listen on its `listen` (port 0: any free port), and recover every half claim window."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(self.source.path, self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.config.host, self.config.port).start()
        recovery = asyncio.create_task(self._recover_forever(), name=f"opsloop-alert-recovery:{self.source.name}")
        self._tasks.add(recovery)
        log.info("alerts.webhook_listening", host=self.config.host, port=self.port, path=self.source.path)

    @property
    def port(self) -> int | None:
        return int(self._runner.addresses[0][1]) if self._runner is not None and self._runner.addresses else None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        tasks = list(self._tasks)  # an open in flight keeps its claim until it lapses: the next process takes it up
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
