"""End to end through the real bolt app: the live task list in the run's status message (a plan block of task
cards, one per tool call and per approval wait), against the stand-in, which validates plan/task_card blocks as
Slack does."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from handlers.blocks import STOP, TASKS_SHOWN
from tests.support import incident_tools, planted_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message
from tests.support.harness import CAROL, BotEnv, answered, bot_env, is_status, text_of

TASK = "web-03 is paging: disk full on /var, please fix"
APPROVERS = f'[approvals]\napprovers = ["{CAROL}"]'
Tasks = dict[str, tuple[str, str]]  # title -> (status, output as a person reads it)


def plan_of(msg: Message) -> dict[str, Any] | None:
    return next((b for b in msg.blocks or [] if b.get("type") == "plan"), None)


def output_text(task: dict[str, Any]) -> str:
    out = []
    for section in (task.get("output") or {}).get("elements", []):
        for el in section.get("elements", []):
            out.append(el.get("text") or (f"<@{el['user_id']}>" if el.get("type") == "user" else ""))
    return "".join(out)


def tasks_of(msg: Message) -> Tasks:
    plan = plan_of(msg)
    return {t["title"]: (t["status"], output_text(t)) for t in (plan or {}).get("tasks", [])}


async def wait_tasks(
    env: BotEnv, channel: str, ts: str, check: Callable[[Tasks], bool], what: str, within: float = 10.0
) -> Message:
    """The status message once its task list satisfies `check` (edits count: it is live state)."""

    def match(m: Message) -> bool:
        return m.thread_ts == ts and is_status(m) and check(tasks_of(m))

    try:
        return await env.slack.wait_for_message(channel, match, timeout=within)
    except TimeoutError:
        status = next((m for m in env.thread(channel, ts) if is_status(m)), None)
        raise AssertionError(f"{what}; the task list shows {tasks_of(status) if status else None}") from None


def stop_button(msg: Message) -> bool:
    return any(
        el.get("action_id") == STOP
        for b in msg.blocks or []
        if b.get("type") == "actions"
        for el in b.get("elements") or []
    )


async def test_tasks_go_pending_in_progress_complete_with_the_approval_wait_as_a_task(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    listing = "list_large_files /var/log/nginx on web-03"
    restart = "restart_service nginx.service on web-03"
    approval = "Approval for restart_service"
    fake_anthropic.script(
        reply(
            tool_use("list_large_files", {"host": "web-03", "path": "/var/log/nginx"}),
            tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"}),
        ),
        reply(text("Restarted nginx; /var is fine.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, APPROVERS) as env:
        gate = incident_tools.hold("list_large_files")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        # The restart waits behind the listing (a mutating call runs alone): pending while the listing runs.
        status = await wait_tasks(
            env,
            channel,
            ts,
            lambda t: t.get(listing, ("",))[0] == "in_progress" and t.get(restart, ("",))[0] == "pending",
            "listing running, restart pending",
        )
        assert stop_button(status)  # the Stop button stays under the task list
        gate.release()
        waiting = f"waiting for approval from <@{CAROL}>"
        await wait_tasks(
            env,
            channel,
            ts,
            lambda t: t.get(listing, ("",))[0] == "complete" and t.get(approval) == ("in_progress", waiting),
            "the approval wait as a task",
        )
        titles = list(tasks_of(await env.status(channel, ts)))
        assert titles == [listing, approval, restart]  # the approval wait sits just before its call
        assert "nginx" in tasks_of(await env.status(channel, ts))[listing][1]  # a one-line result
        card = await env.card(channel, ts)
        await env.approve(card, CAROL)  # the run resumes in a new drive: the earlier tasks come from the store
        await env.wait_final(channel, ts)
        status = await wait_tasks(
            env, channel, ts, lambda t: t.get(restart, ("",))[0] == "complete", "the restart complete"
        )
        shown = tasks_of(status)
        assert shown[approval] == ("complete", f"approved by <@{CAROL}>")
        assert shown[restart] == ("complete", "nginx.service restarted on web-03; active (running)")
        assert shown[listing][0] == "complete"
        assert not stop_button(status)  # finished


async def test_a_denied_approval_and_a_failing_call_are_error_tasks(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "var/log"})),  # not absolute: ToolError
        reply(tool_use("clean_logs", {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7})),
        reply(text("Left the logs alone.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, APPROVERS) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.deny(card, CAROL)
        await env.wait_final(channel, ts)
        status = await wait_tasks(
            env,
            channel,
            ts,
            lambda t: "Approval for clean_logs" in t and t["Approval for clean_logs"][0] == "error",
            "the denial as an error task",
        )
        shown = tasks_of(status)
        assert shown["list_large_files var/log on web-03"] == (
            "error",
            "#1 list_large_files web-03 path must be absolute, got 'var/log'",
        )
        assert shown["Approval for clean_logs"] == ("error", f"denied by <@{CAROL}>")
        assert shown["clean_logs /var/log/nginx on web-03"] == ("error", "not run")


async def test_a_secret_in_a_tool_result_never_reaches_the_task_output(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    secret, key = "hunter2-the-db-password-77", "AKIAIOSFODNN7EXAMPLE"
    planted_tools.OUTPUT["text"] = f"password={secret} aws={key} \u202egnp.exe"
    fake_anthropic.script(reply(tool_use("read_config", {"service": "nginx"})), reply(text("Config read.")))
    tools = '[tools]\nmodules = ["tests.support.incident_tools", "tests.support.planted_tools"]'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, tools) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        status = await wait_tasks(
            env, channel, ts, lambda t: t.get("read_config nginx", ("",))[0] == "complete", "read_config complete"
        )
        output = tasks_of(status)["read_config nginx"][1]
        assert output.startswith("config of nginx: password=[REDACTED]")
        assert "⟨U+202E⟩" in output  # a bidi control is written out, as on the status line
        sent = json.dumps([c.args for c in fake_slack.calls])
        assert secret not in sent and key not in sent and "\u202e" not in sent
    planted_tools.OUTPUT["text"] = "(nothing planted)"


@pytest.mark.slow
async def test_a_fifty_step_run_keeps_the_status_within_slacks_limits(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    steps = 50
    fake_anthropic.script(
        *[reply(tool_use("check_disk", {"host": f"web-{i:02d}"})) for i in range(steps)],
        reply(text("All 50 hosts checked.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, f"[limits]\nmax_iterations = {steps + 1}") as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts, timeout=60)
        status = await wait_tasks(
            env,
            channel,
            ts,
            lambda t: "check_disk on web-49" in t and t["check_disk on web-49"][0] == "complete",
            "the last step complete",
        )
        updates = [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == status.ts]
        assert updates and all(c.ok for c in updates)
        for call in updates:
            assert len(call.args["blocks"]) <= 50
            plan = next((b for b in call.args["blocks"] if b["type"] == "plan"), None)
            assert plan is None or len(plan["tasks"]) <= TASKS_SHOWN
            assert len(json.dumps(call.args["blocks"])) < 16_000
        assert next(iter(tasks_of(status))) == f"check_disk on web-{steps - TASKS_SHOWN:02d}"
        assert f"{steps - TASKS_SHOWN} earlier steps not shown" in text_of(status)


async def test_stop_still_works_from_the_status_message_under_the_task_list(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    listing = "list_large_files /var/log/nginx on web-03"
    fake_anthropic.script(
        reply(tool_use("list_large_files", {"host": "web-03", "path": "/var/log/nginx"})),
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(text("never asked")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        gate = incident_tools.hold("list_large_files")
        channel, ts = await env.mention(TASK)
        await gate.wait_entered()
        status = await wait_tasks(
            env, channel, ts, lambda t: t.get(listing, ("",))[0] == "in_progress", "the listing in progress"
        )
        assert plan_of(status) is not None and stop_button(status)
        # Acked once the Stop is recorded (store, then ack): only then does the held call end.
        await fake_slack.wait_ack(await env.stop(status, CAROL))
        gate.release()
        report = await env.wait_final(channel, ts)
        assert "cancelled" in text_of(report)
        status = await wait_tasks(
            env, channel, ts, lambda t: t.get(listing, ("",))[0] in ("complete", "error"), "the listing ended"
        )
        assert not stop_button(status)
        assert "check_disk on web-03" not in tasks_of(status)  # the step after the Stop never ran
        assert not [c for c in fake_slack.calls_to("chat.update") if not c.ok]


async def test_a_slack_without_plan_blocks_gets_the_section_status_after_one_refusal(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.unsupported_block_types = {"plan"}  # an older workspace: invalid_blocks for a plan
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("check_disk", {"host": "web-04"})),
        *answered(reply(text("Both fine."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        status = await env.slack.wait_for_message(
            channel, lambda m: m.thread_ts == ts and is_status(m) and not stop_button(m), timeout=5
        )
        assert plan_of(status) is None and "done" in text_of(status)
        updates = fake_slack.calls_to("chat.update")
        refused = [c for c in updates if c.error == "invalid_blocks"]
        assert len(refused) == 1  # once, not once per update
        assert any(b["type"] == "plan" for b in refused[0].args["blocks"])
        later = updates[updates.index(refused[0]) + 1 :]
        assert later and all(c.ok and not any(b["type"] == "plan" for b in c.args["blocks"]) for c in later)
        # The workspace has no plan block: the next run's status is the section from its first update.
        fake_anthropic.script(reply(tool_use("check_disk", {"host": "web-05"})), *answered(reply(text("Fine too."))))
        channel2, ts2 = await env.mention(TASK)
        await env.wait_final(channel2, ts2)
        assert [c for c in fake_slack.calls if c.error == "invalid_blocks"] == refused
        # The one refusal was the point of this test; the harness otherwise fails any invalid_blocks.
        fake_slack.calls[:] = [c for c in fake_slack.calls if c is not refused[0]]


async def test_the_throttle_holds_updates_back_but_a_pause_still_shows_the_approval_task(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("Restarted.")),
    )
    config = f"{APPROVERS}\n[slack]\nstatus_update_seconds = 30"  # one update per 30 s at most
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK)
        await env.card(channel, ts)
        status = await wait_tasks(
            env,
            channel,
            ts,
            lambda t: t.get("Approval for restart_service", ("",))[0] == "in_progress",
            "the approval task shown at the pause",
            within=5,
        )
        assert tasks_of(status)["check_disk on web-03"][0] == "complete"
        # The first event's update, then the one the pause let through: no update per tool call.
        assert len([c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == status.ts]) == 2
