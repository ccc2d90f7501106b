"""The demo's stage: the Slack stand-in, its people, and the REAL opsloop app connected to it.

Shared by `opsloop demo` and `opsloop sandbox`. The app is built with `bot.app.wiring.build`
and started over Socket Mode against the stand-in on a random loopback port, with
SQLite at the given path. Without ANTHROPIC_API_KEY it runs the scripted incident
model; with it, Claude with the configured model chain.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.app.opsloop import Opsloop
from bot.app.wiring import build, start
from bot.config.settings import ApprovalSettings, Secret, Settings
from bot.playground.demo import tools as demo_tools
from bot.playground.demo.model import IncidentModel
from bot.playground.standin.slack import FakeSlack, mention_event, message_event
from tools.reaches import parse_reaches

CHANNEL = "C0INCIDENT"
ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"  # alice asks; bob and carol are on call
PEOPLE = {ALICE: "alice", BOB: "bob", CAROL: "carol"}
DEMO_TOOLS: Mapping[str, Any] = {"modules": ["bot.playground.demo.tools"]}
RUNBOOKS = Path(__file__).resolve().parent / "runbooks"  # package data: disk-full.md, which the incident follows
DEMO_REACHES: Mapping[str, Any] = {"runbooks": {"dirs": ["runbooks"]}}  # the demo's config, beside RUNBOOKS


@dataclass
class Stage:
    """A running stand-in plus the app: act as people, read the thread."""

    slack: FakeSlack
    ops: Opsloop
    settings: Settings
    scripted: bool
    channel: str = CHANNEL

    @property
    def names(self) -> dict[str, str]:
        """user id -> display name, the bot included (for rendering mentions)."""
        return {uid: u["name"] for uid, u in self.slack.users.items()}

    def user_id(self, name: str) -> str | None:
        return next((uid for uid, u in self.slack.users.items() if u["name"] == name.lstrip("@").lower()), None)

    @property
    def model_label(self) -> str:
        primary = self.settings.model.primary
        return f"scripted model (priced as {primary})" if self.scripted else f"Claude ({primary})"

    async def mention(self, user: str, text: str, *, thread_ts: str | None = None) -> str:
        """`@opsloop <text>` by `user`; returns the mention's ts (the thread root when new)."""
        event = mention_event(self.channel, user, text, thread_ts=thread_ts, bot_user_id=self.slack.bot_user_id)
        await self.slack.send_event(event)
        return str(event["ts"])

    async def reply(self, user: str, thread_ts: str, text: str) -> str:
        if f"<@{self.slack.bot_user_id}>" in text or "@opsloop" in text.lower():
            return await self.mention(user, text.replace("@opsloop", "").strip(), thread_ts=thread_ts)
        event = message_event(self.channel, user, text, thread_ts=thread_ts)
        await self.slack.send_event(event)
        return str(event["ts"])

    async def click(self, user: str, message_ts: str, action_id: str) -> None:
        """A button click, delivered to the app as Slack's interactivity payload over Socket Mode."""
        await self.slack.click(user, self.channel, message_ts, action_id)


def stage_settings(
    base: Settings,
    slack: FakeSlack,
    *,
    db_path: Path,
    tools: Mapping[str, Any] | None,
    status_update_seconds: float = 0.0,
) -> Settings:
    """The user's settings pointed at the stand-in (tokens, API URL, DB); `tools` None keeps theirs."""
    return dataclasses.replace(
        base,
        slack_bot_token=Secret(slack.bot_token),
        slack_app_token=Secret(slack.app_token),
        slack_signing_secret=None,
        slack_api_url=slack.api_url,
        db_path=str(db_path),
        channels=(),
        tools=tools if tools is not None else base.tools,
        reaches=base.reaches if tools is None else {**base.reaches, **demo_reaches()},
        approvals=base.approvals if tools is None else ApprovalSettings(),
        status_update_seconds=status_update_seconds,
    )


def demo_reaches() -> dict[str, Any]:
    """`[runbooks] dirs = ["runbooks"]` read as a config file beside the demo package would be: its runbook."""
    return parse_reaches(DEMO_REACHES, base_dir=RUNBOOKS.parent)


@contextlib.asynccontextmanager
async def stage(
    base: Settings, *, db_path: Path, tools: Mapping[str, Any] | None = DEMO_TOOLS, status_update_seconds: float = 0.0
) -> AsyncIterator[Stage]:
    """Stand-in up, people added, app built and connected; everything closed on the way out."""
    demo_tools.reset()
    scripted = base.anthropic_api_key is None
    async with FakeSlack(
        bot_token="xoxb-standin", app_token="xapp-standin", bot_user_id="U0OPSLOOP", bot_id="B0OPSLOOP"
    ) as slack:
        for uid, name in PEOPLE.items():
            slack.add_user(uid, name)
        slack.add_channel(CHANNEL, "incident", members=PEOPLE)  # everyone and the bot are in it
        settings = stage_settings(
            base, slack, db_path=db_path, tools=tools, status_update_seconds=status_update_seconds
        )
        ops = await build(settings, model_for=(lambda name: IncidentModel(name=name)) if scripted else None)
        try:
            await start(ops)
            await slack.wait_connected(timeout=30)
            yield Stage(slack=slack, ops=ops, settings=settings, scripted=scripted)
        finally:
            await ops.close()
