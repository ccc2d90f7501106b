"""End to end, what a reader sees is what is there: no disguised links, no hidden characters.

The real opsloop app over Socket Mode against FakeSlack and FakeAnthropic (tests/support/harness.py). The model
is the attacker: it writes Markdown links whose words name a trusted host and whose target is another,
raw Slack markup, and tool arguments full of invisible and bidirectional characters. Every test ends by
scanning everything opsloop sent to Slack (posts, updates, ephemerals), not only the message it looked at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bot.core.types import RunStatus
from handlers import messages
from handlers.blocks import APPROVE, DENY, status_message
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, thinking, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, action_ids, answered, bot_env, card_state, is_status, text_of
from tests.support.incident_tools import Execution, ran

TASK = "web-03 is paging: disk full on /var, please fix"
DISGUISED = "[https://status.example.com/incident](https://evil.example/phish)"
SHOWN = "<https://evil.example/phish>"  # the real target, as its own visible text

# What an attacker hides in arguments: bidi embeddings/overrides/isolates, zero-width characters and
# marks, the word joiner and invisible operators, the BOM, the soft hyphen, a tag character (invisible
# "ASCII smuggling"), a variation selector and a no-break space (looks like a space, is not one).
HIDDEN = (
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200d\u200e\u200f"
    "\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\U000e0041\ufe0f\u00a0"
)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

_LABELLED_LINK = re.compile(r"<(https?://[^|>]*)\|([^>]*)>")


def marker(ch: str) -> str:
    return f"\u27e8U+{ord(ch):04X}\u27e9"


def _texts(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _texts(v)]
    if isinstance(obj, list):
        return [t for v in obj for t in _texts(v)]
    return []


def sent(slack: FakeSlack) -> list[str]:
    """Every text opsloop sent to Slack: fallback texts and every string inside blocks, of every write."""
    writes = ("chat.postMessage", "chat.update", "chat.postEphemeral")
    return [t for c in slack.calls if c.method in writes for t in _texts([c.args.get("text"), c.args.get("blocks")])]


def assert_nothing_disguised(slack: FakeSlack, *, hidden: str = HIDDEN) -> None:
    """No `<url|words>` link and no raw hidden character in anything opsloop sent."""
    for t in sent(slack):
        assert not _LABELLED_LINK.search(t), t
        assert not any(ch in t for ch in hidden), ascii(t)


# --------------------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------------------


async def test_a_link_in_the_answer_shows_where_it_really_goes(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    answer = (
        f"Cleaned. Incident page: {DISGUISED}\n"
        "Runbook: [the disk runbook](https://wiki.example/runbooks/disk?a=1&b=2)\n"
        "Same host: [status.example.com](https://status.example.com/incident)\n"
        "Look-alike: [status page](https://st\u0430tus.example.com/)\n"
        "Raw Slack markup: <https://evil.example|https://status.example.com> <!channel> <!here> <@U0BOB>"
    )
    fake_anthropic.script(reply(text(answer)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        shown = text_of(await env.wait_final(channel, ts))
        assert SHOWN in shown and "phish|" not in shown
        assert "the disk runbook (<https://wiki.example/runbooks/disk?a=1&amp;b=2>)" in shown
        assert "Same host: <https://status.example.com/incident>" in shown
        assert "status page (<https://xn--sttus-5ve.example.com/>)" in shown  # the Cyrillic "а" shows as punycode
        assert "&lt;https://evil.example|https://status.example.com&gt; &lt;!channel&gt; &lt;!here&gt;" in shown
        assert "<!channel>" not in shown and "<!here>" not in shown and "<@U0BOB>" not in shown
        assert_nothing_disguised(fake_slack)


def _mrkdwn_objects(obj: Any) -> list[dict[str, Any]]:
    if isinstance(obj, dict):
        found = [obj] if obj.get("type") == "mrkdwn" else []
        return found + [o for v in obj.values() for o in _mrkdwn_objects(v)]
    if isinstance(obj, list):
        return [o for v in obj for o in _mrkdwn_objects(v)]
    return []


async def test_plain_mentions_and_channel_names_in_model_text_are_never_parsed_by_slack(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    # Slack auto-parses plain text in a mrkdwn object unless it is verbatim: `@channel` could page everyone.
    fake_anthropic.script(
        reply(
            thinking("@channel should hear about #general"),
            tool_use("restart_service", {"host": "web-03", "unit": "@here"}),
        ),
        reply(text("Done. @channel @here @everyone see #incidents and www.example.com")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.approve(card, BOB)
        shown = text_of(await env.wait_final(channel, ts))
        assert "@channel @here @everyone" in shown
        objects = [o for c in fake_slack.calls if c.error is None for o in _mrkdwn_objects(c.args.get("blocks"))]
        parsed = [o for o in objects if o.get("verbatim") is not True]
        assert objects and not parsed, parsed


async def test_a_link_in_the_handoff_reports_last_findings_shows_where_it_really_goes(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(
            thinking(f"The status page says it is known: {DISGUISED} \u202eevil"),
            tool_use("check_disk", {"host": "web-03\u2066"}),
        ),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[limits]\nmax_iterations = 1") as env:
        channel, ts = await env.mention(TASK)
        report = text_of(await env.wait_final(channel, ts))
        assert messages.FINDINGS_HEADING in report and "iteration_limit" in report
        assert f"The status page says it is known: {SHOWN} {marker(chr(0x202E))}evil" in report
        assert f"web-03{marker(chr(0x2066))}" in report  # the tool's output, echoing the host it was given
        assert_nothing_disguised(fake_slack)


async def test_the_status_line_shows_hidden_characters_of_the_models_thinking(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(
            thinking(f"Checking {DISGUISED} first \u202e\u2067moc.elpmaxe.sutats"),
            tool_use("check_disk", {"host": "web-03"}),
        ),
        reply(text("/var is full of rotated nginx logs.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await env.wait_final(channel, ts)
        status = await env.status(channel, ts)
        updates = [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == status.ts and c.ok]
        # The status line is coalesced (the newest state wins, issue 29): a thought replaced by the tool call at
        # once may never be sent. Every one that is sent shows its hidden characters, and nothing is disguised.
        thought = [t for c in updates for t in _texts(c.args.get("blocks")) if "thinking: Checking" in t]
        assert all(f"{marker(chr(0x202E))}{marker(chr(0x2067))}moc.elpmaxe.sutats" in t for t in thought), thought
        assert is_status(status)
        assert_nothing_disguised(fake_slack)
    # What the status line shows for a thought, whenever it is sent: the same builder the thread uses.
    shown = status_message(
        state=RunStatus.RUNNING,
        step=1,
        activity=f"thinking: Checking {DISGUISED} first \u202e\u2067moc.elpmaxe.sutats",
        tokens=0,
        cost_usd=0.0,
        run_id="run_x",
        max_iterations=20,
    )
    shown_text = " ".join(_texts(shown.blocks))
    assert f"{marker(chr(0x202E))}{marker(chr(0x2067))}moc.elpmaxe.sutats" in shown_text, shown_text


# --------------------------------------------------------------------------------------
# hidden characters on approval cards
# --------------------------------------------------------------------------------------


async def test_hidden_characters_in_arguments_and_dry_run_are_shown_and_the_tool_gets_them_unchanged(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    # Reads as /var/log/nginx/… on a careless card; U+202E reverses what follows it.
    args = {"host": "web-03", "path": "/var/\u202exnign/gol/\u202c" + HIDDEN, "older_than_days": 7}
    preview = "would delete 212 files under /var/\u202exnign/gol\u202c, 19.8 GB\u200b\ufeff"
    fake_anthropic.script(reply(tool_use("clean_logs", args)), *answered(reply(text("Cleaned."))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        incident_tools.PREVIEW["clean_logs"] = preview
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        shown = text_of(card)
        assert not any(ch in shown for ch in HIDDEN), ascii(shown)
        for ch in HIDDEN:
            assert marker(ch) in shown, f"U+{ord(ch):04X} not shown"
        assert f"/var/{marker(chr(0x202E))}xnign/gol/{marker(chr(0x202C))}" in shown  # in the arguments
        assert f"19.8 GB{marker(chr(0x200B))}{marker(chr(0xFEFF))}" in shown  # in the dry run
        hidden = len(HIDDEN) + 2 + 4  # the arguments' and the dry run's
        assert messages.hidden_on_card(hidden) in shown
        assert action_ids(card) == [APPROVE, DENY]  # shown in full, so it may be approved

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("clean_logs") == [Execution("clean_logs", args, BOB)]  # exactly what was proposed
        assert env.audit()[0].approval.args == args
        decided = await env.card(channel, ts, state="approved")
        assert card_state(decided) == "approved" and not any(ch in text_of(decided) for ch in HIDDEN)
        assert messages.hidden_on_card(hidden) in text_of(decided)
        assert_nothing_disguised(fake_slack)


async def test_a_card_without_hidden_characters_carries_no_warning(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {"host": "web-03", "unit": "nginx.service"}
    fake_anthropic.script(reply(tool_use("restart_service", args)), reply(text("Restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        assert "Hidden characters" not in text_of(card) and "\u27e8U+" not in text_of(card)
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", args, BOB)]


async def test_a_secret_spelled_with_zero_width_characters_is_redacted_on_the_card_and_still_counted(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    args = {"host": "web-03", "unit": "nginx.service DB_PASS\u200bWORD=hunter2-zw"}
    fake_anthropic.script(reply(tool_use("restart_service", args)), reply(text("Restarted.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        shown = text_of(card)
        assert "hunter2-zw" not in shown and "DB_PASS\u27e8U+200B\u27e9WORD=[REDACTED]" in shown, ascii(shown)
        assert messages.hidden_on_card(1) in shown  # the invisible character is still declared
        assert not any("hunter2-zw" in json.dumps(c.args, default=str) for c in fake_slack.calls)
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert ran("restart_service") == [Execution("restart_service", args, BOB)]  # the tool gets them raw
