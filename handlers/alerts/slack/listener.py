"""Alert messages posted in Slack: a configured integration's message at the top of a channel starts a run, in the
message's own thread, claimed by its event id and its ts before Slack gets its ack."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog

from bot.core.redact import redact
from bot.run.prompts import quoted_markers
from bot.store import AlertOutcome
from handlers.alerts.desk import AlertDesk
from handlers.alerts.slack.config import SlackAlertConfig, alert_regex

log = structlog.get_logger("opsloop.alerts")

TASK_MAX = 8000  # characters of an alert's text the model gets


def _block_texts(obj: Any) -> Iterator[str]:
    """Every text a person reads in Block Kit blocks (sections, fields, context, rich text), in order."""
    if isinstance(obj, list):
        for item in obj:
            yield from _block_texts(item)
    elif isinstance(obj, dict):
        text = obj.get("text")
        if isinstance(text, str) and obj.get("type") in ("plain_text", "mrkdwn", "text"):
            yield text
        elif isinstance(obj.get("url"), str) and obj.get("type") == "link":
            yield obj["url"]
        for key in ("text", "fields", "elements", "blocks"):
            if key in obj and not isinstance(obj[key], str):
                yield from _block_texts(obj[key])


def alert_text(event: dict[str, Any]) -> str:
    """A Slack alert message as text: its text, its attachments (where Alertmanager's Slack receiver puts
    everything) and its blocks; a person's or alert update's marker in it is quoted (an integration wrote it)."""
    parts: list[str] = []

    def add(value: Any, prefix: str = "") -> None:
        if isinstance(value, str) and value.strip() and value.strip() not in parts:
            parts.append(prefix + value.strip())

    add(event.get("text"))
    attachments = event.get("attachments")
    for a in attachments if isinstance(attachments, list) else []:
        if not isinstance(a, dict):
            continue
        before = len(parts)
        for key in ("pretext", "author_name", "title", "text"):
            add(a.get(key))
        add(a.get("title_link"), "link: ")
        fields = a.get("fields")
        for f in fields if isinstance(fields, list) else []:
            if isinstance(f, dict) and isinstance(f.get("title"), str) and isinstance(f.get("value"), str):
                add(f"{f['title']}: {f['value']}")
        add(a.get("footer"))
        if len(parts) == before:
            add(a.get("fallback"))
        for text in _block_texts(a.get("blocks")):
            add(text)
    for text in _block_texts(event.get("blocks")):
        add(text)
    return quoted_markers("\n".join(parts))[:TASK_MAX]


class SlackAlerts:
    """The Slack listener's first look at every message: an alert from a configured sender goes to the desk."""

    def __init__(self, desk: AlertDesk, config: tuple[SlackAlertConfig, ...]) -> None:
        self.desk = desk
        self.use(config)

    def use(self, config: tuple[SlackAlertConfig, ...]) -> None:
        self.sources = [
            (s, alert_regex(s.match) if s.match else None, alert_regex(s.ignore) if s.ignore else None) for s in config
        ]

    async def serve(self) -> None:
        return None  # Slack delivers these with every other event

    async def close(self) -> None:
        return None

    def _source(self, event: dict[str, Any]) -> tuple[SlackAlertConfig, Any, Any] | None:
        profile = event.get("bot_profile")
        given = [event.get("bot_id"), event.get("app_id"), profile.get("app_id") if isinstance(profile, dict) else None]
        senders = {s for s in given if isinstance(s, str) and s}  # payloads come from outside: any shape
        for source, match, ignore in self.sources:
            if event.get("channel") == source.channel and senders & set(source.senders):
                return source, match, ignore
        return None

    async def on_message(self, body: dict[str, Any], event: dict[str, Any]) -> bool:
        """True when `event` is an alert message from a configured sender (started, deduplicated, dropped or
        ignored); False: not an alert, for the reply listener."""
        if not isinstance(event.get("bot_id") or event.get("app_id"), str):
            return False
        found = self._source(event)
        channel, ts = event.get("channel"), event.get("ts")
        thread_ts = event.get("thread_ts")
        if found is None or not isinstance(channel, str) or not isinstance(ts, str) or (thread_ts and thread_ts != ts):
            return False  # another bot, or a reply in a thread: ignored as before
        if event.get("subtype") not in (None, "bot_message"):
            return True  # an edit or deletion of an alert: starts nothing
        source, match, ignore = found
        text = alert_text(event)
        self.desk.count("slack", "received", channel=channel, ts=ts)
        if (match is not None and not match.search(text)) or (ignore is not None and ignore.search(text)):
            log.info("alert.ignored", source="slack", channel=channel, ts=ts)
            return True
        sender = event.get("bot_id") or event.get("app_id")
        summary = " ".join(text.split())[:300]
        accepted = await self.desk.store.accept_slack_alert(
            body.get("event_id") or f"alert:{channel}:{ts}",
            channel=channel,
            ts=ts,
            task=redact(text),
            prompt=redact(self.desk.prompt(f"posted in <#{channel}> by the integration {sender}", text)),
            model=self.desk.model,
            summary=summary,
            limit=source.max_runs_per_10_min,
        )
        if accepted.outcome is AlertOutcome.DUPLICATE:
            self.desk.count("slack", "deduplicated", channel=channel, ts=ts)
        elif accepted.outcome is AlertOutcome.DROPPED:
            self.desk.count("slack", "dropped", channel=channel, ts=ts)
            self.desk.storm_later(channel, f"slack:{channel}:{ts}", summary, source.max_runs_per_10_min)
        elif accepted.run is not None:
            self.desk.count("slack", "started", channel=channel, ts=ts, run_id=accepted.run.id)
            self.desk.after_ack.spawn(self.desk.out.react(channel=channel, ts=ts), name=f"eyes:{ts}")
            self.desk.start(accepted.run.id)
        return True
