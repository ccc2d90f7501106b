"""Alertmanager's webhook: its own server for `POST /alertmanager`, payload validation, and opening a group's thread."""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
from aiohttp import web

from bot.config.settings import AlertWebhookSettings
from bot.core.errors import OpsloopError
from bot.core.json_body import BadJson, first_unstorable, read_json
from bot.core.redact import redact
from bot.core.titles import alert_title
from bot.core.types import OutboxState
from bot.run.prompts import quoted_markers
from bot.store import AcceptedAlert, AlertGroup, AlertOutcome
from handlers import messages, mrkdwn
from handlers.alerts.desk import TASK_MAX, AlertDesk
from handlers.links import permalink
from handlers.liveness import owner_id

log = structlog.get_logger("opsloop.alerts")

MAX_BODY_BYTES = 1 << 20  # a notification bigger than 1 MiB is refused (413): Alertmanager's are kilobytes
MAX_ALERTS = 1000  # alerts in one notification
KEY_LABELS = ("alertname", "severity", "instance", "job", "namespace", "service", "pod", "cluster")
CLAIM_SECONDS = 6.0  # a group being opened is claimed this long (renewed); past it, a recovery pass takes it up
REFUSED_BACKOFF_S = 60.0  # Slack refused a root post for good: the next attempt waits this long


class BadPayload(OpsloopError):
    """A webhook body that is not Alertmanager's payload version 4: 400, nothing stored."""


def _expr(generator_url: str) -> str:
    """The PromQL expression in a Prometheus generatorURL (`/graph?g0.expr=…`), or ""."""
    try:
        return parse_qs(urlsplit(generator_url).query).get("g0.expr", [""])[0]
    except ValueError:
        return ""


def webhook_task(payload: dict[str, Any]) -> str:
    """What the model gets for an Alertmanager group: how many of its alerts fire, then each firing alert's (or,
    when none fires, each resolved alert's) labels, annotations, start time and the expression behind it, with
    any person's or alert update's marker in them quoted."""
    alerts = payload["alerts"]
    firing = [a for a in alerts if a["status"] == "firing"]
    resolved = len(alerts) - len(firing)
    lines = [
        f"Alertmanager group {payload['groupKey']} is {payload['status']} (receiver "
        f"{payload.get('receiver') or '?'}), {len(firing)} alert(s) firing"
        + (f", {resolved} resolved" if resolved else "")
        + ":"
    ]
    shown = firing or alerts
    for i, a in enumerate(shown[:20], 1):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items()))
        lines.append(f"{i}. {a['labels'].get('alertname', '?')}: labels {{{labels}}}; startsAt {a['startsAt']}")
        for key in ("summary", "description", "runbook_url"):
            if a["annotations"].get(key):
                lines.append(f"   {key}: {a['annotations'][key]}")
        others = {k: v for k, v in a["annotations"].items() if k not in ("summary", "description", "runbook_url")}
        if others:
            lines.append("   other annotations: " + ", ".join(f"{k}={v}" for k, v in sorted(others.items())))
        if a.get("generatorURL"):
            lines.append(f"   generatorURL: {a['generatorURL']}")
            if expr := _expr(a["generatorURL"]):
                lines.append(f"   expression: {expr}")
    if len(shown) > 20:
        lines.append(f"... and {len(shown) - 20} more alerts in this group.")
    return quoted_markers("\n".join(lines))[:TASK_MAX]


def _summary_of(payload: dict[str, Any]) -> str:
    first = payload["alerts"][0]
    name = first["labels"].get("alertname") or payload.get("commonLabels", {}).get("alertname") or "alert"
    sev = first["labels"].get("severity", "")
    text = first["annotations"].get("summary") or first["annotations"].get("description") or ""
    return " ".join(f"{name}{f' ({sev})' if sev else ''}: {text} [{len(payload['alerts'])} alert(s)]".split())[:300]


def root_message(payload: dict[str, Any], previous: AlertGroup | None = None) -> str:
    """The root of the group's thread; `previous`: the group's previous occurrence, whose thread it links."""
    alerts = payload["alerts"]
    firing = [a for a in alerts if a["status"] == "firing"]
    first = (firing or alerts)[0]
    labels = first["labels"]
    links = []
    if first.get("generatorURL"):
        links.append(("Source", mrkdwn.plain_link(first["generatorURL"])))
    if first["annotations"].get("runbook_url"):
        links.append(("Runbook", mrkdwn.plain_link(first["annotations"]["runbook_url"])))
    shown = [(k, mrkdwn.reveal(labels[k], prose=True)) for k in KEY_LABELS if k in labels and k != "alertname"]
    return messages.alert_root(
        name=mrkdwn.reveal(labels.get("alertname", "alert"), prose=True),
        severity=mrkdwn.reveal(labels.get("severity", ""), prose=True),
        status=payload["status"],
        firing=len(firing),
        labels=shown[:8],
        summary=mrkdwn.reveal(first["annotations"].get("summary", ""), prose=True),
        links=links,
        previous=permalink(previous.channel, previous.thread_ts) if previous and previous.thread_ts else None,
    )


def validate(body: bytes) -> dict[str, Any]:
    """Alertmanager's webhook payload version 4, checked field by field; raises BadPayload."""
    try:
        payload = read_json(body)
    except BadJson as e:
        raise BadPayload(str(e)) from None
    if not isinstance(payload, dict):
        raise BadPayload("body is not a JSON object")
    if payload.get("version") != "4":
        raise BadPayload(f'version: expected "4", got {payload.get("version")!r}')
    if not isinstance(payload.get("groupKey"), str) or not payload["groupKey"]:
        raise BadPayload("groupKey: expected a non-empty string")
    if payload.get("status") not in ("firing", "resolved"):
        raise BadPayload("status: expected firing or resolved")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not alerts or len(alerts) > MAX_ALERTS:
        raise BadPayload(f"alerts: expected a list of 1 to {MAX_ALERTS} alerts")
    for i, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise BadPayload(f"alerts[{i}]: expected an object")
        if a.get("status") not in ("firing", "resolved"):
            raise BadPayload(f"alerts[{i}].status: expected firing or resolved")
        for key in ("labels", "annotations"):
            value = a.get(key, {})
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise BadPayload(f"alerts[{i}].{key}: expected an object of strings")
            a[key] = value
        for key in ("startsAt", "fingerprint"):
            if not isinstance(a.get(key), str) or not a[key]:
                raise BadPayload(f"alerts[{i}].{key}: expected a non-empty string")
        if "generatorURL" in a and not isinstance(a["generatorURL"], str):
            raise BadPayload(f"alerts[{i}].generatorURL: expected a string")
    if problem := first_unstorable(payload):
        raise BadPayload(problem)
    return payload


class AlertmanagerWebhook:
    """Alertmanager's way in: `POST /alertmanager` on [alerts.webhook] listen, each group opened once."""

    def __init__(self, desk: AlertDesk, webhook: AlertWebhookSettings | None) -> None:
        self.desk = desk
        self.use(webhook)
        self._runner: web.AppRunner | None = None
        self.owner = owner_id()  # this process, as the claimant of the groups it opens
        self.claim_seconds = CLAIM_SECONDS
        self.refused_backoff_s = REFUSED_BACKOFF_S
        self._opening: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._recovery: asyncio.Task[None] | None = None

    def use(self, webhook: AlertWebhookSettings | None) -> None:
        """[alerts.webhook] (start-up hands it again once the config's `#name` channel is resolved to an id)."""
        self.webhook = webhook

    def authorized(self, request: web.Request) -> bool:
        wh = self.webhook
        if wh is None or wh.token is None:
            return False  # no token configured: nobody is let in
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        return hmac.compare_digest(given, f"Bearer {wh.token}".encode())

    async def handle(self, request: web.Request) -> web.Response:
        """POST /alertmanager: auth, bounded body, validate, store, then 200."""
        wh = self.webhook
        assert wh is not None
        if not self.authorized(request):
            log.info("alert.webhook_refused", why="missing or wrong bearer token")
            return web.json_response({"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"})
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return web.json_response({"error": f"body over {MAX_BODY_BYTES} bytes"}, status=413)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"body over {MAX_BODY_BYTES} bytes"}, status=413)
        try:
            payload = validate(body)
        except BadPayload as e:
            log.info("alert.webhook_bad_payload", problem=str(e))
            return web.json_response({"error": str(e)}, status=400)
        status = payload["status"]
        firing = [a["fingerprint"] for a in payload["alerts"] if a["status"] == "firing"]
        self.desk.count("webhook", "received", group=payload["groupKey"], status=status, firing=len(firing))
        update = webhook_task(payload)
        try:
            accepted = await self.desk.store.accept_alert_group(
                payload["groupKey"],
                channel=wh.channel,
                status=status,
                fingerprints=firing,
                summary=_summary_of(payload),
                update=redact(update),
                limit=wh.max_runs_per_10_min,
                reopen_after=wh.reopen_after_s,
                root_text=lambda previous: root_message(payload, previous),
                payload=payload,
                owner=self.owner,
                claim_seconds=self.claim_seconds,
            )
        except Exception as e:  # not stored: no 200, so Alertmanager sends it again
            log.error("alert.store_failed", error=f"{type(e).__name__}: {e}")
            return web.json_response({"error": "not stored, try again"}, status=503)
        self._after_webhook(accepted, payload)
        return web.json_response({"status": "stored", "outcome": accepted.outcome.value})

    def _after_webhook(self, accepted: AcceptedAlert, payload: dict[str, Any]) -> None:
        """What a stored notification does next, off the ack path."""
        outcome, group = accepted.outcome, accepted.group
        key = payload["groupKey"]
        if outcome in (AlertOutcome.STARTED, AlertOutcome.REOPENED):
            if accepted.previous is not None:
                log.info("alert.reopened", group=key, previous=accepted.previous.key)
            self.desk.outbox.wake()  # its root post was enqueued with it
            self._spawn_open(key, claimed=True)
        elif outcome is AlertOutcome.DROPPED and group is not None:
            self.desk.count("webhook", "dropped", group=key)
            assert self.webhook is not None
            self.desk.after_ack.spawn(
                self.desk.storm(group.channel, group.key, group.summary, self.webhook.max_runs_per_10_min),
                name=f"storm:{key}",
            )
        elif outcome in (AlertOutcome.REPEAT, AlertOutcome.DUPLICATE, AlertOutcome.IGNORED):
            self.desk.count("webhook", "deduplicated", group=key)
            if group is not None and group.state == "opening" and (group.claimed_until or 0.0) < self.desk.store.now():
                self._spawn_open(key)  # stuck opening past its claim (its opener died): recovered now, once
            if accepted.note and group is not None and group.thread_ts:
                self.desk.after_ack.spawn(
                    self.desk.out.post(
                        channel=group.channel,
                        thread_ts=group.thread_ts,
                        text=messages.ALERT_REPEAT,
                        what="alert_note",
                    ),
                    name=f"alert_repeat:{key}",
                )
        elif group is not None and group.thread_ts:
            if outcome is AlertOutcome.RESOLVED:
                name = payload["alerts"][0]["labels"].get("alertname", "alert")
                text = messages.alert_resolved(mrkdwn.reveal(name, prose=True), told_run=accepted.run is not None)
            else:
                text = messages.alert_changed([a["fingerprint"] for a in payload["alerts"] if a["status"] == "firing"])
            self.desk.after_ack.spawn(
                self.desk.out.post(channel=group.channel, thread_ts=group.thread_ts, text=text, what="alert_note"),
                name=f"alert_{outcome.value}:{key}",
            )
            if accepted.run is not None:
                self.desk.nudge()

    # --- opening a group's thread: after the ack, and by the recovery pass ----------------------------
    def _spawn_open(self, group_key: str, *, claimed: bool = False) -> None:
        if group_key in self._opening:
            return  # this process is already on it
        self._opening.add(group_key)
        task = asyncio.create_task(self._open(group_key, claimed=claimed), name=f"alert_open:{group_key}")
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._opening.discard(group_key)

        task.add_done_callback(done)

    async def _open(self, group_key: str, *, claimed: bool = False) -> None:
        """A group stored `opening`: claim it (compare-and-set; `claimed`: the accept claimed it), wait for its
        root post (the outbox sends it once: a crash between posting and recording the ts adopts the post it
        finds), then start its run in that thread (compare-and-set on `opening`: once, whoever gets there)."""
        key, store = f"am:{group_key}", self.desk.store
        try:
            now = store.now()
            group = await store.claim_alert_group(key, self.owner, now=now, until=now + self.claim_seconds)
            if group is None:
                return  # opened already, or another replica holds it
            if not claimed:
                log.info("alert.recovering", group=group_key, attempts=group.attempts)
            payload = json.loads(group.payload) if group.payload else None
            if not isinstance(payload, dict) or not payload.get("alerts"):
                log.error("alert.unrecoverable", group=group_key, why="no stored payload")
                await store.release_alert_group(key, self.owner, until=now + self.refused_backoff_s)
                return
            previous = await store.alert_group(group.previous) if group.previous else None
            item = await store.outbox_item(group.root_item) if group.root_item else None
            if item is None or item.state == OutboxState.FAILED:
                text = root_message(payload, previous)
                if await store.retry_alert_root(group_key, self.owner, text=text) is None:
                    return
                self.desk.outbox.wake()
                group = await store.alert_group(key)
                assert group is not None

            async def renew() -> bool:
                t = store.now()
                return await store.claim_alert_group(key, self.owner, now=t, until=t + self.claim_seconds) is not None

            ts = await self.desk.posted(group.root_item or "", renew=renew, renew_every_s=self.claim_seconds / 3)
            if ts is None:  # Slack refused the root for good (or the claim was lost): tried again later
                log.error("alert.thread_not_opened", group=group_key, channel=group.channel)
                await store.release_alert_group(key, self.owner, until=store.now() + self.refused_backoff_s)
                return
            task = webhook_task(payload)
            prompt = (
                f"[alert from Alertmanager in <#{group.channel}>; no person asked yet] Investigate this alert:\n{task}"
            )
            run = await store.open_alert_run(
                group_key,
                thread_ts=ts,
                task=redact(task),
                prompt=redact(prompt),
                model=self.desk.model,
                title=alert_title(payload),
                pointer=messages.alert_fired_again(permalink(group.channel, ts)) if previous else "",
            )
            if run is not None:
                self.desk.count("webhook", "started", group=group_key, run_id=run.id)
                self.desk.start(run.id)
        except Exception as e:  # the store failed: the claim lapses and the recovery pass tries again
            log.warning("alert.open_failed", group=group_key, error=f"{type(e).__name__}: {e}")

    async def recover(self) -> int:
        """One recovery pass: every group left `opening` past its claim is opened (once). How many it took up."""
        keys = await self.desk.store.stuck_alert_groups(self.desk.store.now())
        for key in keys:
            self._spawn_open(key.removeprefix("am:"))
        return len(keys)

    async def _recover_forever(self) -> None:
        while True:
            try:
                await self.recover()
            except Exception as e:  # the store is down: next pass
                log.warning("alert.recovery_failed", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(self.claim_seconds / 2)  # claims lapse on the clock: nothing to wait on

    async def serve(self) -> None:
        """Listen on [alerts.webhook] listen (port 0: any free port)."""
        wh = self.webhook
        if wh is None:
            return
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/alertmanager", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, wh.host, wh.port).start()
        self._recovery = asyncio.create_task(self._recover_forever(), name="opsloop-alert-recovery")
        log.info("alerts.webhook_listening", host=wh.host, port=self.port, path="/alertmanager")

    @property
    def port(self) -> int | None:
        return int(self._runner.addresses[0][1]) if self._runner is not None and self._runner.addresses else None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        tasks = [t for t in (self._recovery, *self._tasks) if t is not None]
        self._recovery = None
        for t in tasks:  # an open in flight keeps its claim until it lapses: the next process takes it up
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
