"""Which listener answers each Slack event, action and shortcut: thin listeners that dedupe, persist, ack, hand off."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp

from bot.run.scheduler import Supervisor
from handlers import approvals, feedback, home, mentions, stop
from handlers.alerts.desk import AlertDesk
from handlers.blocks import APPROVE, DENY, FEEDBACK, INVESTIGATE, STOP
from handlers.mentions import Inbound
from handlers.supervisor import Slack

log = structlog.get_logger("opsloop.app")

EVENTS = ("app_mention", "message", "app_home_opened")  # manifest.yml subscribes to exactly these (message.*)
ACTIONS = (APPROVE, DENY, STOP, FEEDBACK)
SHORTCUTS = (INVESTIGATE,)  # message shortcuts (manifest.yml features.shortcuts callback_id)


def register(app: AsyncApp, sup: Supervisor, slack: Slack, alerts: AlertDesk | None = None) -> None:
    """Thin listeners: dedupe, persist, then ack, and hand off. Model work never runs inside an ack.

    The app runs with process_before_response: Slack gets its ack when the listener returns, so a
    listener that raises (the store failed) sends no ack (Socket Mode) or a 500 (HTTP) and Slack
    delivers the event again. Listeners keep Slack calls out of that path (`slack.after_ack`)."""

    inbound = Inbound(
        store=sup.store,
        out=slack.out,
        after_ack=slack.after_ack,
        client=slack.client,
        membership=slack.membership,
        approvals=sup.approvals,
        policy=slack.policy,
        channels=lambda: sup.settings.channels,  # ids once start-up resolved the config's `#name`s
        model=sup.settings.model.chain[0],
        max_steps=sup.settings.limits.max_iterations,
        start=lambda run_id: sup.start(run_id, after_deliveries=True),
        bot_user=lambda: slack.bot_user_id,  # set once auth.test answered, after registration
        outbox=slack.outbox,
        stop=sup.stop,
    )

    # bolt reads a listener's argument names (body, event) to know what to hand it: plain coroutines, no partials.
    async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
        await mentions.on_mention(inbound, body, event)

    async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
        if alerts is None or not await alerts.on_message(body, event):  # an alert starts a run; the rest as before
            await mentions.on_message(inbound, body, event)

    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        await home.on_home_opened(inbound, body, event)

    for name, on_event in zip(EVENTS, (on_mention, on_message, on_home_opened), strict=True):
        app.event(name)(on_event)  # bolt acks once it returns
    clicks: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
        APPROVE: lambda body: approvals.on_decision(sup.approvals, slack.cards, body, approve=True),
        DENY: lambda body: approvals.on_decision(sup.approvals, slack.cards, body, approve=False),
        STOP: lambda body: stop.on_stop(inbound, body),
        FEEDBACK: lambda body: feedback.on_feedback(sup.store, slack.outbox, body),
    }
    for action_id in ACTIONS:
        app.action(action_id)(_acked(clicks[action_id]))
    app.shortcut(INVESTIGATE)(_acked(lambda body: mentions.on_investigate(inbound, body)))

    @app.error
    async def _error(error: Exception, body: dict[str, Any]) -> None:
        log.error("listener_failed", error=f"{type(error).__name__}: {error}", body_type=body.get("type"))


def _acked(handler: Callable[[dict[str, Any]], Awaitable[None]]) -> Any:
    async def listener(ack: Any, body: dict[str, Any]) -> None:
        await ack()  # sent when this returns (process_before_response): the handler only decides and stores
        await handler(body)

    return listener
