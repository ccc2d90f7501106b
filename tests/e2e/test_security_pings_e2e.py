"""End to end, nothing opsloop posts can ping anyone: hostile Slack markup planted in every context source
(the task, a past incident's title, a runbook's title, tool output and errors, approval arguments, the living
summary, the model's answers, streamed and posted, the handoff report, the Home tab) reaches Slack escaped, in
every message kind's `text` and blocks alike. Only opsloop's own markup stays live: a person it names (the
approver, the requester), a date, a group from `[approvals] approvers`, a link it made to an http(s) URL.

The real app over Socket Mode against FakeSlack and FakeAnthropic (tests/support/harness.py).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, app_home_opened_event
from tests.support.harness import ALICE, BOB, CAROL, bot_env, is_offer, posted_texts

HOSTILE = "<!channel> <!here> <!everyone> <@U0EVIL> <!subteam^S1> <http://evil.example|http://ok.example>"
ONCALL = "S0ONCALL"  # the approvers' user group: opsloop may name it
CONFIG = f"""
[memory]
enabled = true
[runbooks]
dirs = ["runbooks"]
[approvals]
approvers = ["{BOB}", "{ONCALL}"]
"""
RUNBOOK = f"""\
---
title: "disk full {HOSTILE}"
match:
  keywords: ["disk full"]
---
1. `check_disk` on the host.
2. `clean_logs` for the rotated logs.
"""
HOSTILE_ARGS = {"host": "web-03", "path": f"/var/log/{HOSTILE}", "older_than_days": 7}
LONG_ANSWER = "\n".join(
    [f"**Cleaned /var on web-03** {HOSTILE}", *(f"- step {n}: {HOSTILE} freed {n * 7} GB" for n in range(1, 8))]
)
_MARKUP = re.compile(r"<([^<>]*)>")


def live_markup(text: str) -> list[str]:
    """The `<…>` sequences of mrkdwn `text` that Slack would act on and opsloop did not write itself."""

    def ours(inner: str) -> bool:
        if inner in (f"@{ALICE}", f"@{BOB}", f"@{CAROL}", f"!subteam^{ONCALL}"):
            return True
        if inner.startswith("!date^"):
            return True
        url = inner.split("|", 1)[0]
        return url.startswith(("http://", "https://")) and "evil" not in url

    return [inner for inner in _MARKUP.findall(text) if not ours(inner)]


async def test_hostile_markup_from_every_source_reaches_slack_escaped_in_every_message_kind(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "disk.md").write_text(RUNBOOK)
    fake_slack.add_usergroup(ONCALL, [CAROL], handle="oncall")
    situation = {"situation": f"web-03 /var full {HOSTILE}", "hypotheses": [], "next_steps": [HOSTILE]}
    fake_anthropic.script(
        # run A: the summary, a tool error and a tool output carrying it, a card, a streamed answer
        reply(
            text(f"Checking {HOSTILE}"),
            tool_use("update_summary", situation),
            tool_use("list_large_files", {"host": "web-03", "path": f"var {HOSTILE}"}),
        ),
        # the summary kept current with the change (after it in the turn), so the answer is not asked to update it
        reply(tool_use("clean_logs", HOSTILE_ARGS), tool_use("update_summary", situation)),
        reply(text(LONG_ANSWER)),
        # run B: offered run A and the runbook; stopped at its card: the handoff report
        reply(text(f"Same again {HOSTILE}"), tool_use("clean_logs", HOSTILE_ARGS)),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
        channel, a_ts = await env.mention(f"web-03 disk full on /var {HOSTILE}")
        card = await env.card(channel, a_ts)
        await env.approve(card, ALICE)  # not an approver: an ephemeral says who may
        await env.wait_ephemeral(ALICE)
        await env.approve(card, BOB)
        await env.wait_final(channel, a_ts, timeout=15.0)

        channel, b_ts = await env.mention(f"web-03 /var disk full again {HOSTILE}")
        await env.card(channel, b_ts)
        assert len([m for m in env.thread(channel, b_ts) if is_offer(m)]) == 2  # the past incident, the runbook
        await env.stop(await env.status(channel, b_ts), BOB)
        await env.wait_final(channel, b_ts)
        await env.send(app_home_opened_event(BOB))
        await fake_slack._wait(lambda: fake_slack.home_views.get(BOB), 5.0, lambda: "the Home tab")
        await env.wait_idle()
        async with asyncio.timeout(10):
            await env.ops.outbox.settle()

        texts = posted_texts(fake_slack)
        kinds = {what.split(" ")[0] for what, _ in texts}
        assert {"chat.postMessage", "chat.update", "chat.postEphemeral", "chat.startStream", "views.publish"} <= kinds
        assert any("&lt;!channel&gt;" in t for _, t in texts)  # the hostile text did reach Slack, escaped
        live = [(what, seq) for what, t in texts for seq in live_markup(t)]
        assert live == [], "\n".join(sorted({f"{w}: {t[:160]!r}" for w, t in texts if live_markup(t)}))
