"""Security, third pass, end to end through the real bolt app and the stand-in: App Home shows a viewer only the
conversations they are in, the message shortcut starts runs only where the bot is, and everyone whose words a run
read counts as an asker of its calls."""

from __future__ import annotations

from pathlib import Path

from handlers import messages
from handlers.blocks import INVESTIGATE
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, app_home_opened_event
from tests.support.harness import ALICE, BOB, CAROL, bot_env, card_state, text_of

PRIVATE = "C0PAYROLL"
SECRET_TASK = "someone is exfiltrating payroll-db from web-07, clean its logs"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
APPROVERS = f'[approvals]\napprovers = ["{BOB}", "{CAROL}"]'


def home_text(slack: FakeSlack, user: str) -> str:
    blocks = slack.home_views[user]["blocks"]
    out = []
    for b in blocks:
        if isinstance(b.get("text"), dict):
            out.append(b["text"]["text"])
        out += [e["text"] for e in b.get("elements") or [] if isinstance(e, dict) and "text" in e]
    return "\n".join(out)


async def open_home(env, slack: FakeSlack, user: str) -> str:
    slack.home_views.pop(user, None)
    await env.send(app_home_opened_event(user))
    await slack._wait(lambda: slack.home_views.get(user), 5.0, lambda: f"{user}'s Home tab")
    return home_text(slack, user)


# --- App Home --------------------------------------------------------------------------------------------------
async def test_app_home_shows_a_private_channels_run_and_card_only_to_its_members(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(PRIVATE, "payroll-incident", members=[ALICE, CAROL], kind="private_channel")
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, APPROVERS) as env:
        channel, ts = await env.mention(SECRET_TASK, channel=PRIVATE)
        card = await env.card(channel, ts)
        bob, carol = await open_home(env, fake_slack, BOB), await open_home(env, fake_slack, CAROL)
        for leak in ("payroll-db", PRIVATE, card.ts.replace(".", ""), "`clean_logs`"):
            assert leak not in bob
        assert messages.HOME_NO_ACTIVE in bob and messages.HOME_NO_APPROVALS in bob
        assert "payroll-db" in carol and f"archives/{PRIVATE}/p{ts.replace('.', '')}" in carol
        assert "`clean_logs`" in carol and f"p{card.ts.replace('.', '')}" in carol
        asked = [c.args for c in fake_slack.calls_to("users.conversations") if c.ok]
        assert {a["user"] for a in asked} == {BOB, CAROL}
        assert set(asked[0]["types"].split(",")) == {"public_channel", "private_channel", "mpim", "im"}
        await open_home(env, fake_slack, CAROL)  # asked again within the minute: the cached answer
        assert len(fake_slack.calls_to("users.conversations")) == 2


async def test_app_home_pages_through_the_viewers_conversations(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    for i in range(450):  # more than two pages of 200 before the private channel comes up
        fake_slack.add_channel(f"C0FILL{i:04d}", f"fill-{i}", members=[CAROL])
    fake_slack.add_channel(PRIVATE, "payroll-incident", members=[CAROL], kind="private_channel")
    fake_anthropic.script(reply(text("Looked into it.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(SECRET_TASK, channel=PRIVATE)
        await env.wait_final(channel, ts)
        carol = await open_home(env, fake_slack, CAROL)
        assert "payroll-db" in carol
        assert [c.args.get("cursor") or "" for c in fake_slack.calls_to("users.conversations")] == [
            "",
            "offset:200",
            "offset:400",
        ]


async def test_app_home_shows_nothing_when_slack_cant_say_who_is_in_what(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel(PRIVATE, "payroll-incident", members=[ALICE, CAROL], kind="private_channel")
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, APPROVERS) as env:
        channel, ts = await env.mention(SECRET_TASK, channel=PRIVATE)
        await env.card(channel, ts)
        await env.mention("web-03 disk is filling")  # a run in the public channel, which carol is in too
        fake_slack.fail_next("users.conversations", "fatal_error", status=200, times=3)
        carol = await open_home(env, fake_slack, CAROL)
        assert messages.HOME_NOT_CHECKED in carol
        for leak in ("payroll-db", "web-03", PRIVATE, "`clean_logs`", "archives/"):
            assert leak not in carol


# --- the message shortcut ----------------------------------------------------------------------------------------
async def test_the_shortcut_starts_nothing_where_the_bot_isnt_and_says_so_through_the_response_url(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel("C0ELSEWHERE", "elsewhere", is_member=False, members=[ALICE, CAROL])
    fake_slack.add_channel("D0ALICEBOB", "", is_member=False, members=[ALICE, BOB], kind="im")
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        for n, (channel, clicker) in enumerate((("C0ELSEWHERE", CAROL), ("D0ALICEBOB", BOB)), start=1):
            msg = fake_slack.add_message(channel, ALICE, "run clean_logs on web-07 now")
            await fake_slack.wait_ack(await fake_slack.shortcut(clicker, channel, msg.ts, INVESTIGATE))
            await fake_slack._wait(lambda n=n: len(fake_slack.responses) >= n or None, 5.0, lambda: "the refusal")
            assert fake_slack.responses[-1].body["text"] == messages.shortcut_not_a_member(channel)
            assert fake_slack.responses[-1].body["response_type"] == "ephemeral"
        await env.wait_idle()
        assert env.runs() == [] and fake_anthropic.requests == []
        assert not [c for c in fake_slack.calls if c.method == "chat.postMessage"]
        info = fake_slack.calls_to("conversations.info")
        assert [c.error for c in info] == [None, "channel_not_found"]  # a DM between others: the bot can't see it
        fake_slack.calls.remove(info[1])  # Slack's answer, not a malformed call of opsloop's


async def test_the_shortcut_starts_nothing_when_slack_cant_say_whether_the_bot_is_there(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        msg = fake_slack.add_message(env.channel, ALICE, "nginx: 768 worker_connections are not enough")
        fake_slack.fail_next("conversations.info", "fatal_error", status=200)
        await fake_slack.wait_ack(await fake_slack.shortcut(BOB, env.channel, msg.ts, INVESTIGATE))
        await fake_slack._wait(lambda: fake_slack.responses or None, 5.0, lambda: "the refusal")
        assert fake_slack.responses[0].body["text"] == messages.SHORTCUT_NOT_CHECKED
        await env.wait_idle()
        assert env.runs() == [] and fake_anthropic.requests == []


async def test_the_shortcut_works_in_a_direct_message_with_the_bot(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.add_channel("D0ALICEBOT", "", members=[ALICE], kind="im")
    fake_anthropic.script(reply(text("nginx is out of worker connections.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        msg = fake_slack.add_message("D0ALICEBOT", ALICE, "nginx: 768 worker_connections are not enough")
        await fake_slack.wait_ack(await fake_slack.shortcut(ALICE, "D0ALICEBOT", msg.ts, INVESTIGATE))
        assert "worker connections" in text_of(await env.wait_final("D0ALICEBOT", msg.ts))
        assert fake_slack.responses == []


# --- everyone whose words the run read asked -----------------------------------------------------------------------
BOBS_ASK = "run clean_logs on web-03 /var/log/nginx now, I'll approve it"
THREE_APPROVERS = f'[approvals]\napprovers = ["{ALICE}", "{BOB}", "{CAROL}"]'


async def test_the_author_of_the_message_a_shortcut_ran_on_cant_approve_its_destructive_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)), reply(text("Cleaned.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, THREE_APPROVERS) as env:
        asked = fake_slack.add_message(env.channel, BOB, BOBS_ASK)
        await fake_slack.wait_ack(await fake_slack.shortcut(CAROL, env.channel, asked.ts, INVESTIGATE))
        card = await env.card(env.channel, asked.ts)
        await env.approve(card, BOB)
        assert (await env.wait_ephemeral(BOB))["text"] == messages.asked_in_thread_refused("clean_logs")
        [run] = env.runs()
        assert (run.requester, run.askers) == (CAROL, (BOB,))
        await env.approve(card, ALICE)  # four eyes: someone who asked for nothing
        await env.wait_final(env.channel, asked.ts)
        [decision] = env.audit()
        assert decision.approval.decided_by == ALICE


async def test_the_authors_of_the_thread_a_mid_thread_mention_read_cant_approve_its_destructive_call(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(tool_use("clean_logs", CLEAN)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, THREE_APPROVERS) as env:
        root = fake_slack.add_message(env.channel, "", "[FIRING:1] DiskFull web-03 /var 98%", bot_id="BALERTS")
        fake_slack.add_message(env.channel, BOB, BOBS_ASK, thread_ts=root.ts)
        await env.mention("do what bob said", user=CAROL, thread_ts=root.ts)
        card = await env.card(env.channel, root.ts)
        await env.approve(card, BOB)
        assert (await env.wait_ephemeral(BOB))["text"] == messages.asked_in_thread_refused("clean_logs")
        [run] = env.runs()
        assert run.askers == (BOB,)  # the alert sender is not a person
        assert card_state(fake_slack.message(env.channel, card.ts)) == "pending"


async def test_a_bots_alert_makes_no_asker_of_its_sender(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("The disk alert is real.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        alert = fake_slack.add_message(env.channel, "", "[FIRING:1] DiskFull web-03 /var 98%", bot_id="BALERTS")
        await fake_slack.wait_ack(await fake_slack.shortcut(CAROL, env.channel, alert.ts, INVESTIGATE))
        await env.wait_final(env.channel, alert.ts)
        [run] = env.runs()
        assert (run.requester, run.askers) == (CAROL, ())


# --- feedback: bound to its answer, once per person ---------------------------------------------------------------
async def test_a_feedback_click_counts_only_from_the_answer_that_carries_its_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    from bot.core.types import FeedbackValue
    from handlers.blocks import FEEDBACK
    from tests.support.fakes.slack import block_action_payload

    fake_anthropic.script(reply(text("web-03: freed 19.8 GB.")), reply(text("web-04: fine.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, first_ts = await env.mention("web-03 disk")
        first = await env.wait_final(channel, first_ts)
        _, second_ts = await env.mention("web-04 disk")
        second = await env.wait_final(channel, second_ts)
        run = next(r for r in env.runs() if r.thread_ts == first_ts)
        for ts in (second.ts, first_ts):  # another run's answer; the person's own mention
            forged = block_action_payload(
                BOB,
                channel,
                ts,
                FEEDBACK,
                f"negative:{run.id}",
                team_id=fake_slack.team_id,
                message=fake_slack.message(channel, ts).to_api(),
            )
            await fake_slack.wait_ack(await fake_slack.send_interactive(forged))
        await env.wait_idle()
        with env.ledger() as ledger:
            assert ledger.feedback() == []
        await fake_slack.wait_ack(await fake_slack.feedback(BOB, channel, first.ts, positive=True))
        await env.wait_idle()
        with env.ledger() as ledger:
            assert [(f.run_id, f.value) for f in ledger.feedback()] == [(run.id, FeedbackValue.POSITIVE)]


async def test_a_persons_clicks_on_one_answer_count_once_and_the_latest_wins(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, capsys, monkeypatch
) -> None:
    import csv
    import io

    from bot.app.cli import main
    from bot.core.types import FeedbackValue

    fake_anthropic.script(reply(text("Freed 19.8 GB on web-03.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention("web-03 disk")
        final = await env.wait_final(channel, ts)
        for positive in (True, True, False):
            await fake_slack.wait_ack(await fake_slack.feedback(BOB, channel, final.ts, positive=positive))
            await env.wait_idle()
        await fake_slack.wait_ack(await fake_slack.feedback(CAROL, channel, final.ts, positive=True))
        await env.wait_idle()
        with env.ledger() as ledger:
            assert ledger.feedback_counts() == {FeedbackValue.POSITIVE: 1, FeedbackValue.NEGATIVE: 1}
        monkeypatch.setenv("OPSLOOP_DB", str(env.settings.db_path))
        capsys.readouterr()
        assert main(["audit", "--feedback", "--format", "csv"]) == 0
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        assert sorted((r["user"], r["value"]) for r in rows) == [(BOB, "negative"), (CAROL, "positive")]
