"""App Home: on `app_home_opened`, publish the on-call's view: the runs going now (thread link, step, cost), the
approvals waiting that this person may decide (handlers/policy.py says who), and the last 10 runs with their stop
reasons. Only what happened in conversations the viewer is in (handlers/membership.py asks Slack): a private
incident channel's tasks and links stay in it. Read from the store when the tab opens, published off the ack path."""

from __future__ import annotations

from typing import Any

import structlog

from bot.core.types import Run
from handlers import messages
from handlers.blocks import context, section
from handlers.event_filters import dig
from handlers.links import permalink
from handlers.mentions import Inbound

log = structlog.get_logger("opsloop.home")

RECENT = 10
SHOWN_MAX = 20  # active runs and approvals each: a Home tab holds at most 100 blocks
TASK_SHOWN = 80


async def on_home_opened(desk: Inbound, body: dict[str, Any], event: dict[str, Any]) -> None:
    user = dig(event, "user")
    if not user or event.get("tab", "home") != "home":
        return
    desk.after_ack.spawn(publish_home(desk, user), name=f"home:{user}")


async def publish_home(desk: Inbound, user: str) -> bool:
    """Publish `user`'s Home tab from what the store says now; False when Slack refused it."""
    view = {"type": "home", "blocks": await home_blocks(desk, user)}
    return await desk.out.attempt("views_publish", what="home_publish", user_id=user, view=view) is not None


async def home_blocks(desk: Inbound, user: str) -> list[dict[str, Any]]:
    """The viewer's tab: only runs and approvals of conversations they are in (Slack says which; when it can't,
    none at all, and a line saying so)."""
    member_of = await desk.membership.conversations(user)
    seen = member_of or frozenset()
    active = [r for r in await desk.store.active_runs() if r.channel in seen]
    recent = [r for r in await desk.store.list_runs(limit=RECENT * 5) if not r.active and r.channel in seen][:RECENT]
    runs = {r.id: r for r in active}
    approvals = []
    for a in await desk.store.pending_approvals():
        run = runs.get(a.run_id)
        where = a.channel or (run.channel if run else None)
        if where not in seen or not await desk.policy.may_approve(user, a.category):
            continue  # the policy decides, as for a click
        on_card = a.channel and a.message_ts and permalink(a.channel, a.message_ts, a.thread_ts)
        link = on_card or (_thread_link(run) if run else "")
        approvals.append(messages.home_approval(link, a.tool, a.category, _task(run) if run else a.run_id))
    failed = await desk.store.failed_tool_calls([r.id for r in recent])
    active_lines = [
        messages.home_active_run(
            _thread_link(r),
            _task(r),
            status=r.status.value,
            step=r.iterations,
            max_steps=desk.max_steps,
            cost_usd=r.cost_usd,
        )
        for r in active[:SHOWN_MAX]
    ]
    recent_lines = [
        messages.home_recent_run(
            _thread_link(r),
            _task(r),
            stop_reason=r.stop_reason.value if r.stop_reason else "unknown",
            cost_usd=r.cost_usd,
            failed_tools=failed.get(r.id, 0),
        )
        for r in recent
    ]
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": messages.HOME_TITLE}}]
    if member_of is None:
        blocks.append(context([messages.HOME_NOT_CHECKED]))
    for title, lines, empty in (
        (messages.HOME_ACTIVE, active_lines, messages.HOME_NO_ACTIVE),
        (messages.HOME_APPROVALS, approvals[:SHOWN_MAX], messages.HOME_NO_APPROVALS),
        (messages.HOME_RECENT, recent_lines, messages.HOME_NO_RECENT),
    ):
        blocks += [section(title), *([section(line) for line in lines] or [context([empty])]), {"type": "divider"}]
    return blocks[:-1]


def _thread_link(run: Run) -> str:
    return permalink(run.channel, run.thread_ts)


def _task(run: Run) -> str:
    """What the run is named by: its title (an alert's "DiskFull web-03 (firing)"), else its task."""
    return messages.one_line(run.headline, TASK_SHOWN)
