"""App Home: on `app_home_opened`, publish the on-call's view: the runs going now (thread link, step, cost), the
approvals waiting that this person may decide (handlers/policy.py says who), and the last 10 runs with their stop
reasons. Only what happened in conversations the viewer is in (handlers/membership.py asks Slack): a private
incident channel's tasks and links stay in it. Read from the store when the tab opens, published off the ack path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from bot.core.types import Run
from bot.store import Store
from handlers import messages
from handlers.after_ack import AfterAck
from handlers.event_filters import dig
from handlers.links import permalink
from handlers.membership import Membership
from handlers.policy import ApprovalPolicy
from handlers.slack_out import SlackOut

log = structlog.get_logger("opsloop.home")

RECENT = 10
SHOWN_MAX = 20  # active runs and approvals each: a Home tab holds at most 100 blocks
TASK_SHOWN = 80


@dataclass(frozen=True)
class HomeDesk:
    """What the Home tab reads, and nothing else: the runs and approvals (store), who is in which conversation
    (membership), who may decide an approval (policy), the step limit it shows, where it publishes (out) and the
    after-ack task set it publishes from."""

    store: Store
    membership: Membership
    policy: ApprovalPolicy
    out: SlackOut
    after_ack: AfterAck
    max_steps: int


async def on_home_opened(desk: HomeDesk, body: dict[str, Any], event: dict[str, Any]) -> None:
    user = dig(event, "user")
    if not user or event.get("tab", "home") != "home":
        return
    desk.after_ack.spawn(publish_home(desk, user), name=f"home:{user}")


async def publish_home(desk: HomeDesk, user: str) -> bool:
    """Publish `user`'s Home tab from what the store says now."""
    return await desk.out.publish_home(user=user, blocks=await home_blocks(desk, user))


async def home_blocks(desk: HomeDesk, user: str) -> list[dict[str, Any]]:
    """The viewer's tab: only runs and approvals of conversations they are in (Slack says which; when it can't,
    none at all, and a line saying so)."""
    member_of = await desk.membership.conversations(user)
    seen = member_of or frozenset()
    active = [r for r in await desk.store.active_runs() if r.channel in seen]
    recent = [r for r in await desk.store.list_runs(limit=RECENT * 5) if not r.active and r.channel in seen][:RECENT]
    runs = {r.id: r for r in active}
    decidable = []
    for approval in await desk.store.pending_approvals():
        if (approval.channel or getattr(runs.get(approval.run_id), "channel", None)) not in seen:
            continue
        if await desk.policy.may_approve(user, approval.category):  # the policy decides, as for a click
            decidable.append(approval)
    max_steps = desk.max_steps
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": messages.HOME_TITLE}}]
    if member_of is None:
        blocks.append(_context(messages.HOME_NOT_CHECKED))

    blocks.append(_section(messages.HOME_ACTIVE))
    blocks += [
        _section(
            messages.home_active_run(
                _thread_link(r),
                _task(r),
                status=r.status.value,
                step=r.iterations,
                max_steps=max_steps,
                cost_usd=r.cost_usd,
            )
        )
        for r in active[:SHOWN_MAX]
    ] or [_context(messages.HOME_NO_ACTIVE)]
    blocks.append({"type": "divider"})

    blocks.append(_section(messages.HOME_APPROVALS))
    lines = []
    for a in decidable[:SHOWN_MAX]:
        run = runs.get(a.run_id)
        link = (
            permalink(a.channel or "", a.message_ts, a.thread_ts)
            if a.channel and a.message_ts
            else (_thread_link(run) if run else "")
        )
        lines.append(_section(messages.home_approval(link, a.tool, a.category, _task(run) if run else a.run_id)))
    blocks += lines or [_context(messages.HOME_NO_APPROVALS)]
    blocks.append({"type": "divider"})

    blocks.append(_section(messages.HOME_RECENT))
    failed = await desk.store.failed_tool_calls([r.id for r in recent])
    blocks += [
        _section(
            messages.home_recent_run(
                _thread_link(r),
                _task(r),
                stop_reason=(r.stop_reason.value if r.stop_reason else "unknown"),
                cost_usd=r.cost_usd,
                failed_tools=failed.get(r.id, 0),
            )
        )
        for r in recent
    ] or [_context(messages.HOME_NO_RECENT)]
    return blocks


def _thread_link(run: Run) -> str:
    return permalink(run.channel, run.thread_ts)


def _task(run: Run) -> str:
    """What the run is named by: its title (an alert's "DiskFull web-03 (firing)"), else its task."""
    task = " ".join(run.headline.split())
    return task if len(task) <= TASK_SHOWN else task[: TASK_SHOWN - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000], "verbatim": True}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text, "verbatim": True}]}
