"""Streamed answers end to end: the real bolt app and the real anthropic client against the stand-in (which
implements chat.startStream / appendStream / stopStream as Slack does) and the fake Messages API streaming
its text in small, paced deltas. Plus the stand-in's own limits."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from pathlib import Path
from typing import Any

import anthropic
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.pricing import price_for
from bot.core.types import OutboxItem, OutboxKind, OutboxState, Stream, StreamState
from bot.run.loop import RunConfig, run
from bot.run.model import AnthropicModel
from bot.store import Store
from handlers.blocks import FEEDBACK
from handlers.outbox import EVENT_TYPE, _stream_rest, answer_key, report_key
from handlers.stream import HOLDBACK_CHARS, stable_prefix
from tests.conftest import API_KEY
from tests.support import incident_tools
from tests.support.chaos import Bots, poll, query, stop
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import ApiCall, FakeSlack, Message, mention_event, message_event
from tests.support.harness import CAROL, CHANNEL, answered, bot_env, is_card, is_status
from tools.config import build_registry

TASK = "web-03 is paging: disk full on /var, please look"
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}


def long_answer(chars: int = 1500, tag: str = "A") -> str:
    """A Markdown answer of about `chars` characters in short lines, as a model writes one."""
    lines, n = [f"**{tag}: /var on web-03 is full of rotated nginx logs.**"], 0
    while sum(len(x) + 1 for x in lines) < chars:
        n += 1
        lines.append(f"- finding {n}: access.log.{n}.gz holds {n * 37 % 900 + 100} MB of old requests")
    return "\n".join(lines)


def pace(fake: FakeAnthropic, *, chars: int = 20, seconds: float = 0.02) -> None:
    fake.text_delta_chars, fake.text_delta_seconds = chars, seconds


def streamed(slack: FakeSlack) -> list[Message]:
    return [m for msgs in slack.messages.values() for m in msgs if m.stream is not None]


def answers(slack: FakeSlack, channel: str, thread_ts: str) -> list[Message]:
    """The bot's messages in the thread other than the status line and cards (answers, reports, streams)."""
    return [
        m
        for m in slack.thread(channel, thread_ts)
        if m.user == slack.bot_user_id and m.ts != thread_ts and not is_card(m) and not is_status(m)
    ]


def item_id(slack: FakeSlack, msg: Message) -> str | None:
    md = msg.metadata or {}
    return md.get("event_payload", {}).get("id") if md.get("event_type") == EVENT_TYPE else None


def has_feedback(msg: Message) -> bool:
    return any(
        b.get("type") == "context_actions" and b["elements"][0]["action_id"] == FEEDBACK for b in msg.blocks or []
    )


def grow_log(slack: FakeSlack) -> list[int]:
    """Every length the streamed message's text had, as the stand-in changed it."""
    lengths: list[int] = []

    def seen() -> None:
        for m in streamed(slack):
            if not lengths or lengths[-1] != len(m.text):
                lengths.append(len(m.text))

    slack.watch(seen)
    return lengths


def max_appends_in_a_second(calls: list[ApiCall]) -> int:
    """The most appendStream calls the stand-in answered within any 0.9 s window (a 1/s budget allows 1)."""
    at = [c.at for c in calls if c.method == "chat.appendStream"]
    return max((sum(1 for t in at if a <= t < a + 0.9) for a in at), default=0)


async def final_streamed(slack: FakeSlack, within: float = 15.0) -> Message:
    """The streamed message once it is finished (stopped, or updated with the answer's metadata)."""
    return await slack._wait(
        lambda: next((m for m in streamed(slack) if item_id(slack, m)), None),
        within,
        lambda: f"a finished stream: {[(m.stream, m.metadata) for m in streamed(slack)]}",
    )


async def settled(env: Any) -> None:
    """Every listener done and the outbox has recorded what Slack has."""
    await env.wait_idle()
    async with asyncio.timeout(10):
        await env.ops.outbox.settle()


# --- the stream --------------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_a_long_answer_grows_in_appends_then_stops_with_the_feedback_buttons_and_the_outbox_metadata(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    answer = long_answer(1500)
    pace(fake_anthropic, chars=16, seconds=0.03)  # ~3 s of writing
    fake_anthropic.script(reply(text(answer)))
    lengths = grow_log(fake_slack)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await final_streamed(fake_slack)
        await settled(env)
        envelope = await fake_slack.feedback("U0BOB", channel, final.ts, positive=True)  # its buttons work
        await fake_slack.wait_ack(envelope)
        await env.wait_idle()
        run = env.runs()[0]
        with env.ledger() as ledger:
            item = ledger.outbox_by_key(answer_key(run.id, 0))
            [stream] = ledger.streams(run.id)
            assert [(f.run_id, f.user, f.message_ts) for f in ledger.feedback()] == [(run.id, "U0BOB", final.ts)]
    assert run.team_id == fake_slack.team_id  # stored with the run at mention time
    assert [m.ts for m in answers(fake_slack, channel, ts)] == [final.ts]  # one message: the stream
    assert final.text == answer and final.stream is not None and final.stream["state"] == "stopped"
    assert has_feedback(final) and item is not None and item_id(fake_slack, final) == item.id
    assert (stream.ts, stream.state) == (final.ts, StreamState.FINISHED)
    calls = [c.method for c in fake_slack.calls if c.method in STREAM_METHODS]
    assert calls[0] == "chat.startStream" and calls[-1] == "chat.stopStream"
    assert calls.count("chat.startStream") == calls.count("chat.stopStream") == 1
    assert calls.count("chat.appendStream") >= 2
    assert not [c for c in fake_slack.calls_to("chat.postMessage") if "access.log" in json.dumps(c.args)]
    start = fake_slack.calls_to("chat.startStream")[0].args
    assert (start["recipient_user_id"], start["recipient_team_id"], start["thread_ts"]) == (
        env.runs()[0].requester,
        fake_slack.team_id,
        ts,
    )
    assert len(start["markdown_text"]) >= HOLDBACK_CHARS - 80  # held back until the turn was long enough
    assert len(lengths) >= 4 and lengths == sorted(lengths) and lengths[-1] == len(answer)  # it grew
    assert max_appends_in_a_second(fake_slack.calls) <= 1


@pytest.mark.slow
async def test_a_rate_limited_append_waits_and_the_stream_goes_on(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    answer = long_answer(3000)
    pace(fake_anthropic, chars=16, seconds=0.03)  # ~5.6 s of writing
    fake_anthropic.script(reply(text(answer)))
    fake_slack.fail_next("chat.appendStream", "ratelimited", retry_after=1)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        await env.mention(TASK)
        final = await final_streamed(fake_slack)
        await settled(env)
    appends = fake_slack.calls_to("chat.appendStream")
    assert [c.error for c in appends][:2] == ["ratelimited", None] and appends[1].at - appends[0].at >= 0.9
    assert final.text == answer and final.stream is not None and final.stream["state"] == "stopped"


async def test_a_short_answer_is_posted_as_before(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("212 rotated nginx logs fill /var.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        await settled(env)
    assert not [c for c in fake_slack.calls if c.method in STREAM_METHODS]
    assert "212 rotated nginx logs" in json.dumps(final.blocks) and has_feedback(final)


@pytest.mark.slow
async def test_a_stream_cut_by_slacks_lifetime_is_finished_with_chat_update_on_its_ts(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.stream_lifetime_seconds = 1.0  # Slack's 5 minutes, shortened
    answer = long_answer(1800)
    pace(fake_anthropic, chars=16, seconds=0.04)  # ~4.5 s: the stream dies under it
    fake_anthropic.script(reply(text(answer)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await final_streamed(fake_slack)
        await settled(env)
    refused = [c for c in fake_slack.calls if c.method in STREAM_METHODS and not c.ok]
    assert refused and {c.error for c in refused} == {"message_not_in_streaming_state"}
    [update] = [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == final.ts]
    assert update.ok and update.args["metadata"]["event_type"] == EVENT_TYPE
    assert [m.ts for m in answers(fake_slack, channel, ts)] == [final.ts]  # finished in place: one message
    assert final.stream is not None and final.stream["state"] == "expired"
    assert has_feedback(final) and "access.log" in json.dumps(final.blocks)


@pytest.mark.slow
async def test_a_secret_split_across_deltas_never_reaches_slack(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    token = "xoxb-4242424242-1717171717-Zq9Zq9Zq9Zq9Zq9Zq9Zq9Zq9"
    key_id = "AKIAIOSFODNN7EXAMPLE"  # an AWS key id is only recognised whole (all 20 characters)
    password = "hunter2-Correct-Horse-Battery"
    answer = (
        long_answer(700) + f"\nthe nginx upstream used the token {token} in its logs\n"
        f"the deploy user's key id {key_id} is in /etc/environment\n"
        f"and the db config had password: {password} on line 12\n" + long_answer(600, tag="B")
    )
    pace(fake_anthropic, chars=7, seconds=0.012)  # the secrets straddle several deltas
    # The model stalls with half the key id written: appends go out while the buffer ends inside it.
    fake_anthropic.pause_after = {key_id[:11]: 2.5}
    fake_anthropic.script(reply(text(answer)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        await env.mention(TASK)
        final = await final_streamed(fake_slack)
        await settled(env)
    assert fake_anthropic.text_deltas_sent >= len(answer) // 7
    assert len(fake_slack.calls_to("chat.appendStream")) >= 3, "the answer must stream for this test to mean much"
    sent = json.dumps([c.args for c in fake_slack.calls])
    for value, prefix in ((token, 5), (key_id, 4), (password, 0)):
        pieces = [value[i : i + 4] for i in range(prefix, len(value) - 4)]  # any four characters past its prefix
        assert not [p for p in pieces if p in sent], f"part of {value[:6]}… reached Slack"
    assert final.text.count("[REDACTED]") == 3 and token not in final.text


@pytest.mark.slow
async def test_a_one_paragraph_answer_at_40_tokens_a_second_shows_its_first_words_early(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    words = ["/var", "on", "web-03", "is", "full", "of", "rotated", "nginx", "logs,", "access.log.12.gz", "holds"]
    answer = ""
    while len(answer) < 1500:
        answer += " ".join(words) + f" {len(answer)} MB and "
    answer = answer.rstrip() + " that is all."
    assert "\n" not in answer
    pace(fake_anthropic, chars=4, seconds=0.025)  # 40 tokens/s, about 4 characters a token
    fake_anthropic.script(reply(text(answer)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        await env.mention(TASK)
        final = await final_streamed(fake_slack, within=30)
        await settled(env)
    produced = fake_anthropic.text_delta_times
    start = fake_slack.calls_to("chat.startStream")[0]
    before_start = sum(1 for t in produced if t < start.at)
    # 300 characters (HOLDBACK_CHARS) are 75 of the ~380 tokens: the first words show by then (~1.9 s), not at the end.
    assert before_start <= 0.3 * len(produced), (before_start, len(produced))
    appends = [c for c in fake_slack.calls_to("chat.appendStream") if c.at < produced[-1]]
    assert len(appends) >= 5, "it grows while the model writes"
    assert final.text == answer and final.stream is not None and final.stream["state"] == "stopped"


@pytest.mark.slow
async def test_a_secret_straddling_a_word_boundary_inside_a_paragraph_never_reaches_slack(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.Zq9Zq9Zq9Zq9"
    password = "hunter two Correct Horse"
    answer = (
        long_answer(400).replace("\n", " ")
        + " The health probe sends Authorization: Bearer "
        + token
        + f' on every call and the db config says password="{password}" in one place, '
        + long_answer(500, tag="B").replace("\n", " ")
    )
    pace(fake_anthropic, chars=5, seconds=0.01)
    # The model stalls right after `Bearer ` and inside the quoted password: appends go out meanwhile.
    fake_anthropic.pause_after = {"Bearer ": 1.5, "hunter two": 1.5}
    fake_anthropic.script(reply(text(answer)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        await env.mention(TASK)
        final = await final_streamed(fake_slack, within=30)
        await settled(env)
    assert len(fake_slack.calls_to("chat.appendStream")) >= 3, "the answer must stream for this test to mean much"
    sent = json.dumps([c.args for c in fake_slack.calls])
    for value in (token, password):
        pieces = [value[i : i + 4] for i in range(len(value) - 4)]
        assert not [p for p in pieces if p in sent], f"part of {value[:6]}… reached Slack"
    assert final.text.count("[REDACTED]") == 2 and final.stream is not None and final.stream["state"] == "stopped"
    assert not [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == final.ts], (
        "the stream was never broken by a redaction that took text back"
    )


@pytest.mark.parametrize("refusal", ["not_allowed", "unknown_method", "feature_not_enabled"])
async def test_a_refused_startstream_falls_back_to_posting_the_answer(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, refusal: str
) -> None:
    answer = long_answer(900)
    pace(fake_anthropic, chars=30, seconds=0.002)
    fake_anthropic.script(reply(text(answer)))
    fake_slack.fail_next("chat.startStream", refusal)
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        await settled(env)
        assert [m.ts for m in answers(fake_slack, channel, ts)] == [final.ts]
        assert final.stream is None and item_id(fake_slack, final) is not None and has_feedback(final)
        assert [c.error for c in fake_slack.calls_to("chat.startStream")] == [refusal]
        run = env.runs()[0]
        with env.ledger() as ledger:
            assert [s.state for s in ledger.streams(run.id)] == [StreamState.ABANDONED]


async def test_a_startstream_that_failed_transiently_and_made_no_message_falls_back_to_a_post(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    pace(fake_anthropic, chars=30, seconds=0.002)
    fake_anthropic.script(reply(text(long_answer(900))))
    fake_slack.fail_next("chat.startStream", "internal_error")  # a 500: the stream may or may not exist
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        await settled(env)
    assert [m.ts for m in answers(fake_slack, channel, ts)] == [final.ts] and final.stream is None
    assert fake_slack.calls_to("conversations.replies")  # it looked for a message of that stream first


async def test_an_alert_run_with_no_requester_posts_its_answer(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    sender = "B0ALERTMGR"
    config = f'[[alerts.slack]]\nchannel = "{CHANNEL}"\nsenders = ["{sender}"]\nmatch = "FIRING"\n'
    pace(fake_anthropic, chars=30, seconds=0.002)
    fake_anthropic.script(reply(text(long_answer(900))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        event = message_event(CHANNEL, None, "[FIRING:1] DiskFull web-03", bot_id=sender, subtype="bot_message")
        fake_slack._add_message(
            Message(channel=CHANNEL, ts=event["ts"], text=event["text"], bot_id=sender, subtype="bot_message")
        )
        await env.send(event)
        final = await env.wait_final(CHANNEL, event["ts"])
        await settled(env)
        assert env.runs()[0].requester == ""
    assert not [c for c in fake_slack.calls if c.method in STREAM_METHODS]
    assert item_id(fake_slack, final) is not None and "access.log" in json.dumps(final.blocks)


async def test_text_before_a_tool_call_stops_its_stream_before_the_approval_card_is_posted(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    preamble = long_answer(600, tag="P")
    pace(fake_anthropic, chars=20, seconds=0.002)
    fake_anthropic.script(
        reply(text(preamble), tool_use("clean_logs", CLEAN)), *answered(reply(text(long_answer(700))))
    )
    # An older model: its turns keep text before a tool call (current ones write it as thinking).
    config = f'[model]\nprimary = "claude-opus-4-5"\nfallbacks = []\n[approvals]\napprovers = ["{CAROL}"]'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        card_call = next(
            i
            for i, c in enumerate(fake_slack.calls)
            if c.method == "chat.postMessage" and c.response.get("ts") == card.ts
        )
        stops = [i for i, c in enumerate(fake_slack.calls) if c.method == "chat.stopStream"]
        assert stops and stops[0] < card_call  # never held across the approval wait
        [interim] = streamed(fake_slack)
        assert interim.text == preamble and not has_feedback(interim) and interim.metadata is None
        await env.approve(card, CAROL)
        final = await final_streamed(fake_slack)
        await settled(env)
        run = env.runs()[0]
        with env.ledger() as ledger:
            # the answer given while the summary was due is not streamed (it is sent back for the summary first):
            # Slack shows the preamble and the answer, each once
            states = [s.state for s in ledger.streams(run.id)]
            assert states == [StreamState.INTERIM, StreamState.FINISHED]
    assert final.ts != interim.ts and has_feedback(final)
    assert len(answers(fake_slack, channel, ts)) == 2  # the interim text and the answer


@pytest.mark.slow
async def test_a_stop_mid_stream_finishes_that_message_with_the_handoff_report(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    pace(fake_anthropic, chars=16, seconds=0.03)
    fake_anthropic.script(reply(text(long_answer(3000))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        await fake_slack.wait_for_call("chat.appendStream", timeout=15)
        await env.stop(await env.status(channel, ts), "U0ALICE")
        final = await final_streamed(fake_slack)
        await settled(env)
        pumps = [t for t in asyncio.all_tasks() if t.get_name().startswith("stream:") and not t.done()]
        assert pumps == []  # nothing is left to append after the stop
        run = env.runs()[0]
        with env.ledger() as ledger:
            report = ledger.outbox_by_key(report_key(run.id, 0))
    assert run.stop_reason is not None and run.stop_reason.value == "cancelled"
    assert [m.ts for m in answers(fake_slack, channel, ts)] == [final.ts]  # the report took the stream's place
    assert report is not None and item_id(fake_slack, final) == report.id
    assert "cancelled" in json.dumps(final.blocks) and has_feedback(final)


def test_only_a_single_part_answer_is_finished_by_stopstream() -> None:
    stream = Stream(
        id="str_1",
        run_id="run_1",
        step=1,
        channel=CHANNEL,
        thread_ts="1.0",
        ts="2.0",
        state=StreamState.STREAMING,
        start_text="Hello\n",
        sent="Hello\n",
        final="Hello\nworld",
        broken=False,
        created_at=0.0,
    )
    answer = OutboxItem(
        id="out_1",
        key=answer_key("run_1", 0),
        kind=OutboxKind.POST,
        run_id="run_1",
        channel=CHANNEL,
        thread_ts="1.0",
        target=None,
        approval_id=None,
        text="Hello",
        blocks=[],
        state=OutboxState.PENDING,
        ts=None,
        attempts=0,
        unsure=False,
        plain=False,
        owner=None,
        claimed_until=None,
        next_at=0.0,
        error=None,
        created_at=0.0,
    )
    assert _stream_rest(answer, stream, single=True) == "world"
    assert _stream_rest(answer, stream, single=False) is None  # part 0 of several: chat.update
    assert _stream_rest(answer, dataclasses.replace(stream, broken=True), single=True) is None
    assert _stream_rest(answer, dataclasses.replace(stream, final=None), single=True) is None  # after a restart
    assert _stream_rest(answer, dataclasses.replace(stream, sent="Other\n"), single=True) is None


# --- the loop's side: one sink per step, told whether the step was the answer ----------------------------------
class RecordingSink:
    def __init__(self, step: int, log: list[tuple[Any, ...]]) -> None:
        self.step, self.log = step, log

    async def attempt(self) -> None:
        self.log.append((self.step, "attempt"))

    async def text(self, delta: str) -> None:
        self.log.append((self.step, "text", delta))

    async def tool_use(self) -> None:
        self.log.append((self.step, "tool_use"))

    async def end(self, *, answer: bool) -> None:
        self.log.append((self.step, "end", answer))


async def test_the_loop_gives_each_step_a_sink_fed_by_the_model_stream_and_ends_it(
    store: Store, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.text_delta_chars = 5
    fake_anthropic.script(
        reply(text("Checking the disk first."), tool_use("check_disk", {"host": "web-03"})),
        *answered(reply(text("212 rotated logs fill /var."))),
    )
    log: list[tuple[Any, ...]] = []
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake_anthropic.base_url, max_retries=0)
    registry = await build_registry({"modules": ["tests.support.incident_tools"]})
    try:
        row = await store.create_run(
            channel="C1",
            thread_ts="1.0",
            requester="U1",
            task="disk",
            model="claude-opus-4-5",
            history=[{"role": "user", "content": [{"type": "text", "text": "disk"}]}],
        )
        cfg = RunConfig(
            model=AnthropicModel(client, ["claude-opus-4-5"]),
            store=store,
            tools=registry,
            price_for=lambda m: price_for(m)[0],
            answer_sink=lambda step: RecordingSink(step, log),
        )
        incident_tools.reset()
        result = await run(cfg, row.id)
    finally:
        await registry.aclose()
        await client.close()
    assert result.output == "212 rotated logs fill /var."
    texts = {step: "".join(e[2] for e in log if e[0] == step and e[1] == "text") for step in (1, 2, 3)}
    # step 2 answers while the summary is due: no sink (its answer is sent back for the summary, never shown)
    assert texts == {1: "Checking the disk first.", 2: "", 3: "212 rotated logs fill /var."}
    assert len([e for e in log if e[1] == "text"]) > 5  # in several deltas
    assert [e for e in log if e[1] != "text"] == [
        (1, "attempt"),
        (1, "tool_use"),
        (1, "end", False),
        (3, "attempt"),
        (3, "end", True),
    ]


# --- a crash mid-stream: the real `opsloop run`, SIGKILLed ---------------------------------------------------
async def _kill_when(slack: FakeSlack, proc: asyncio.subprocess.Process, method: str) -> asyncio.Event:
    """SIGKILL `proc` the moment the stand-in records `method` (before the bot reads Slack's answer)."""
    fired = asyncio.Event()

    def check() -> None:
        if not fired.is_set() and slack.calls_to(method):
            proc.send_signal(signal.SIGKILL)
            fired.set()

    slack.watch(check)
    return fired


@pytest.mark.parametrize("kill_at", ["chat.appendStream", "chat.startStream"])
async def test_a_sigkill_mid_stream_finishes_that_one_message_after_the_restart(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, kill_at: str
) -> None:
    answer = long_answer(1500)
    pace(fake_anthropic, chars=16, seconds=0.03)
    fake_anthropic.script(reply(text(answer)), reply(text(answer)))
    bots = Bots(tmp_path, fake_slack, fake_anthropic)
    proc = await bots.start()
    try:
        fired = await _kill_when(fake_slack, proc, kill_at)
        event = mention_event(CHANNEL, "U0ALICE", TASK, bot_user_id=fake_slack.bot_user_id)
        await fake_slack.send_event(event)
        await asyncio.wait_for(fired.wait(), 20)
        await stop(proc, signal.SIGKILL)
        [started] = streamed(fake_slack)
        fake_anthropic.text_delta_seconds = 0.0  # the re-asked answer comes at once
        proc = await bots.start()
        final = await final_streamed(fake_slack, within=30)
        await poll(
            lambda: query(bots.db, "SELECT 1 FROM outbox WHERE state = 'pending'") == [], 10, "the outbox drained"
        )
    finally:
        await stop(proc)
    assert final.ts == started.ts  # the first message, finished
    assert [m.ts for m in answers(fake_slack, CHANNEL, event["ts"])] == [final.ts]
    assert len(fake_slack.calls_to("chat.startStream")) == 1  # the resumed run never started a second
    assert len(fake_anthropic.requests) == 2  # it asked the model again
    update = [c for c in fake_slack.calls_to("chat.update") if c.args.get("ts") == final.ts and c.ok]
    assert update and update[-1].args["metadata"]["event_type"] == EVENT_TYPE
    assert has_feedback(final) and "access.log" in json.dumps(final.blocks)
    states = [r["state"] for r in query(bots.db, "SELECT state FROM streams")]
    assert states == [StreamState.FINISHED.value]


# --- the stand-in's stream methods ---------------------------------------------------------------------------
async def _stand_in_call(client: AsyncWebClient, method: str, **args: Any) -> str:
    try:
        await client.api_call(method, json=args)
    except SlackApiError as e:
        return str(e.response["error"])
    return "ok"


async def test_stand_in_streams_take_slacks_arguments_and_limits(fake_slack: FakeSlack) -> None:
    client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
    root = fake_slack.add_message(CHANNEL, "U0ALICE", "hi")
    who = {"recipient_user_id": "U0ALICE", "recipient_team_id": fake_slack.team_id}
    assert await _stand_in_call(client, "chat.startStream", channel=CHANNEL) == "invalid_arguments"
    assert await _stand_in_call(client, "chat.startStream", channel=CHANNEL, thread_ts=root.ts) == "invalid_arguments"
    assert (
        await _stand_in_call(
            client,
            "chat.startStream",
            channel=CHANNEL,
            thread_ts=root.ts,
            **who,
            metadata={"event_type": "x", "event_payload": {}},
        )
        == "invalid_arguments"
    )
    assert (
        await _stand_in_call(
            client, "chat.startStream", channel=CHANNEL, thread_ts=root.ts, **who, markdown_text="x" * 12_001
        )
        == "msg_too_long"
    )
    started = await client.chat_startStream(channel=CHANNEL, thread_ts=root.ts, markdown_text="Hello", **who)
    ts = started["ts"]
    assert await _stand_in_call(client, "chat.appendStream", channel=CHANNEL) == "invalid_arguments"
    assert (
        await _stand_in_call(client, "chat.appendStream", channel=CHANNEL, ts=ts, markdown_text="y" * 12_001)
        == "msg_too_long"
    )
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text=", world")
    msg = fake_slack.message(CHANNEL, ts)
    assert msg is not None and msg.text == "Hello, world" and msg.thread_ts == root.ts
    replies = await client.conversations_replies(channel=CHANNEL, ts=root.ts)
    assert [(m["text"], m["_stream"]["state"]) for m in replies["messages"][1:]] == [("Hello, world", "streaming")]
    too_many = [{"type": "divider"}] * 51
    assert await _stand_in_call(client, "chat.stopStream", channel=CHANNEL, ts=ts, blocks=too_many) == "invalid_blocks"
    bad_feedback = [{"type": "context_actions", "elements": [{"type": "feedback_buttons", "action_id": "f"}]}]
    assert (
        await _stand_in_call(client, "chat.stopStream", channel=CHANNEL, ts=ts, blocks=bad_feedback) == "invalid_blocks"
    )
    await client.chat_stopStream(
        channel=CHANNEL,
        ts=ts,
        markdown_text="!",
        metadata={"event_type": "opsloop_post", "event_payload": {"id": "out_1"}},
    )
    assert (msg.text, msg.stream["state"], msg.metadata["event_payload"]) == (
        "Hello, world!",
        "stopped",
        {"id": "out_1"},
    )
    assert (
        await _stand_in_call(client, "chat.appendStream", channel=CHANNEL, ts=ts, markdown_text="more")
        == "message_not_in_streaming_state"
    )
    dm = await client.chat_startStream(channel="D0ALICE", thread_ts=root.ts, markdown_text="no recipient needed")
    assert dm["ok"]


async def test_stand_in_streams_expire_after_their_lifetime_and_chat_update_still_works(fake_slack: FakeSlack) -> None:
    fake_slack.stream_lifetime_seconds = 0.2
    client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
    root = fake_slack.add_message(CHANNEL, "U0ALICE", "hi")
    started = await client.chat_startStream(
        channel=CHANNEL,
        thread_ts=root.ts,
        markdown_text="Part one",
        recipient_user_id="U0ALICE",
        recipient_team_id=fake_slack.team_id,
    )
    msg = fake_slack.message(CHANNEL, started["ts"])
    assert msg is not None
    await fake_slack._wait(lambda: msg.stream["state"] == "expired" or None, 5.0, lambda: "the stream expired")
    for method in ("chat.appendStream", "chat.stopStream"):
        assert (
            await _stand_in_call(client, method, channel=CHANNEL, ts=msg.ts, markdown_text="late")
            == "message_not_in_streaming_state"
        )
    assert msg.text == "Part one"  # left as it was
    await client.chat_update(
        channel=CHANNEL,
        ts=msg.ts,
        text="Whole answer",
        metadata={"event_type": "opsloop_post", "event_payload": {"id": "out_2"}},
    )
    assert (msg.text, msg.metadata["event_payload"]["id"]) == ("Whole answer", "out_2")


async def test_stand_in_stream_errors_can_be_injected(fake_slack: FakeSlack) -> None:
    client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
    root = fake_slack.add_message(CHANNEL, "U0ALICE", "hi")
    fake_slack.fail_next("chat.startStream", "not_allowed")
    assert (
        await _stand_in_call(
            client,
            "chat.startStream",
            channel=CHANNEL,
            thread_ts=root.ts,
            recipient_user_id="U0ALICE",
            recipient_team_id="T1",
        )
        == "not_allowed"
    )
    assert not streamed(fake_slack)


# --- the stable prefix -------------------------------------------------------------------------------------------
def test_the_stable_prefix_holds_back_the_word_being_written_and_a_possible_key_body() -> None:
    assert stable_prefix("done line\nthe token is xoxb-12") == "done line\nthe token is "
    assert stable_prefix("a\nthe token is xoxb-1234567890abc\n") == "a\nthe token is [REDACTED]\n"
    assert stable_prefix("an intro\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nbase64\n") == "an intro\n"
    assert stable_prefix("no newline yet") == "no newline "


def test_the_stable_prefix_holds_back_a_tail_that_could_still_become_a_secret() -> None:
    assert stable_prefix("the probe sent Bearer ") == "the probe sent "  # its token may follow
    assert stable_prefix("it logged Authorization: Bearer ") == "it logged Authorization: "
    assert stable_prefix('the db config had password="hunter two') == "the db config had "
    assert stable_prefix("in /etc/key:\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END RSA ") == "in /etc/key:\n"
    assert stable_prefix("the file has -----BEGIN RSA PRIVATE ") == "the file has "
    assert stable_prefix("the end of it MIIEvQIBADANBgkqhkiG9w0BAQEFAASC ") == "the end of it "
    assert stable_prefix("see [the run book](https://runbooks.example.com/disk) and [the ") == (
        "see the run book (<https://runbooks.example.com/disk>) and "
    )


def test_every_stable_prefix_of_a_paragraph_with_secrets_is_a_prefix_of_what_it_shows_at_the_end() -> None:
    """Word by word and character by character, nothing sent is ever taken back (which would break the
    stream) and no part of a secret is ever sent."""
    from handlers.stream import shown

    secrets = [
        "xoxb-4242424242-1717171717-Zq9Zq9",
        "sk-ant-api03-Zq9Zq9Zq9Zq9",
        "AKIAIOSFODNN7EXAMPLE",
        "Bearer eyJhbGciOiJIUzI1NiJ9.e30.Zq9Zq9",
    ]
    answer = (
        "The probe to web-03 sent the header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.Zq9Zq9 and "
        f"the nginx logs hold {secrets[0]} next to {secrets[1]}, while the deploy user has the key id "
        f"{secrets[2]} and a script sends {secrets[3]} to [the api](https://api.example.com/v1) daily."
    )
    final = shown(answer)
    for n in range(len(answer) + 1):
        prefix = stable_prefix(answer[:n])
        assert final.startswith(prefix), (n, prefix)
        for secret in secrets:
            body = secret.split(" ")[-1]
            assert not [body[i : i + 4] for i in range(4, len(body) - 4) if body[i : i + 4] in prefix], (n, prefix)
    assert stable_prefix(answer + " ") == final + " "


def test_the_streamed_text_gets_the_posted_answers_hygiene() -> None:
    assert stable_prefix("ping <!channel> & <@U0BOB> now\n") == "ping &lt;!channel&gt; &amp; &lt;@U0BOB&gt; now\n"
    assert stable_prefix("see [the runbook](https://runbooks.example.com/disk) first\n") == (
        "see the runbook (<https://runbooks.example.com/disk>) first\n"
    )
    assert stable_prefix("odd \u202etxt.exe line\n") == "odd ⟨U+202E⟩txt.exe line\n"


@pytest.mark.slow
async def test_stream_answers_false_in_the_config_posts_every_answer_at_the_end(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    pace(fake_anthropic, chars=16, seconds=0.01)
    fake_anthropic.script(reply(text(long_answer(1500))))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, "[slack]\nstream_answers = false") as env:
        channel, ts = await env.mention(TASK)
        final = await env.wait_final(channel, ts)
        assert "rotated nginx logs" in final.text and has_feedback(final)
        assert not any(fake_slack.calls_to(m) for m in STREAM_METHODS) and not streamed(fake_slack)
