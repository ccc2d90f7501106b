"""The outbox: Slack posts stored first, delivered exactly once, across failures, restarts and two senders.

The real Store (SQLite in a temp dir) and the real slack_sdk client against FakeSlack; the end-to-end
tests go through the whole app. "Exactly once" is read from Slack's side: how many messages in the
thread carry an item's metadata id.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.types import OutboxKind, OutboxPost, OutboxState
from bot.store import Ledger, Store
from handlers.blocks import SlackMessage
from handlers.outbox import EVENT_TYPE, Outbox, metadata
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message
from tests.support.harness import BOB, CHANNEL, bot_env, card_state, is_card

THREAD = "1700000000.000100"
CARD = SlackMessage(
    text="Approval needed: restart_service",
    blocks=[{"type": "section", "block_id": "card", "text": {"type": "mrkdwn", "text": "*restart*"}}],
)
RESTART = {"host": "web-03", "unit": "nginx.service"}
TASK = "web-03 is paging: disk full on /var, please fix"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_message(CHANNEL, "U0ALICE", "web-03 is down", ts=THREAD)
        yield fake


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """The store these tests share, once on each backend (a SQLite file, then Postgres)."""
    s = await Store(db_url).open()
    yield s
    await s.close()


def client_for(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


def outbox(store: Store, slack: FakeSlack) -> Outbox:
    """A sender with test-sized waits: no backoff worth waiting for, a quick look for lapsed claims."""
    return Outbox(store=store, client=client_for(slack), max_backoff=0.01, poll_seconds=0.05)


def carrying(slack: FakeSlack, item_id: str) -> list[Message]:
    """Messages in the thread whose metadata names this outbox item."""
    return [
        m
        for m in slack.thread(CHANNEL, THREAD)
        if m.metadata == {"event_type": EVENT_TYPE, "event_payload": {"id": item_id}}
    ]


async def settled(*boxes: Outbox) -> None:
    """Until nothing is pending in the store (every delivery attempt wakes the waiters)."""
    async with asyncio.timeout(5):
        for box in boxes:
            await box.settle()


async def deliver(
    store: Store,
    slack: FakeSlack,
    *,
    run_id: str | None = None,
    key: str = "card:apr_1",
    approval_id: str | None = None,
) -> str:
    """Post CARD in the thread through a fresh sender and wait until nothing is pending; the outbox item's id."""
    box = outbox(store, slack)
    await box.start()
    try:
        item_id = await box.post(
            run_id=run_id, channel=CHANNEL, thread_ts=THREAD, msg=CARD, key=key, approval_id=approval_id
        )
        await settled(box)
    finally:
        await box.close()
    return item_id


async def sent(store: Store, item_id: str) -> str:
    """A settled item's ts; it must have been sent."""
    item = await store.outbox_item(item_id)
    assert item is not None and item.state == OutboxState.SENT and item.ts is not None, item
    return item.ts


def methods(slack: FakeSlack, *names: str) -> list[tuple[str, str | None]]:
    return [(c.method, c.error) for c in slack.calls if c.method in names]


# --------------------------------------------------------------------------------------
# retries
# --------------------------------------------------------------------------------------


async def test_a_rate_limited_post_is_sent_once_after_retry_after(store: Store, slack: FakeSlack) -> None:
    slack.fail_next("chat.postMessage", "ratelimited", retry_after=0)
    item_id = await deliver(store, slack)
    ts = await sent(store, item_id)
    assert [m.ts for m in carrying(slack, item_id)] == [ts]
    # a 429 means "not posted": no need to look in the thread before the retry
    assert methods(slack, "chat.postMessage", "conversations.replies") == [
        ("chat.postMessage", "ratelimited"),
        ("chat.postMessage", None),
    ]


async def test_a_post_that_failed_with_a_server_error_is_looked_for_then_posted_once(
    store: Store, slack: FakeSlack
) -> None:
    slack.fail_next("chat.postMessage", "internal_error", times=2)
    item_id = await deliver(store, slack)
    ts = await sent(store, item_id)
    assert [m.ts for m in carrying(slack, item_id)] == [ts]
    assert methods(slack, "chat.postMessage", "conversations.replies") == [
        ("chat.postMessage", "internal_error"),
        ("conversations.replies", None),
        ("chat.postMessage", "internal_error"),
        ("conversations.replies", None),
        ("chat.postMessage", None),
    ]
    looked = slack.calls_to("conversations.replies")[0].args
    assert (looked["ts"], looked["include_all_metadata"]) == (THREAD, "1")


async def test_a_post_that_reached_slack_but_was_never_recorded_is_adopted_not_posted_again(
    store: Store, slack: FakeSlack
) -> None:
    ledger = Ledger(store.path)  # the process that died: claimed, called Slack, never recorded
    item_id = ledger.enqueue(
        kind=OutboxKind.POST, key="answer:run_1:0", channel=CHANNEL, thread_ts=THREAD, text="Freed 19.8 GB on web-03."
    )
    now = ledger.outbox_item(item_id).next_at  # type: ignore[union-attr]  # due now on the ledger's own clock
    assert ledger.claim_outbox("dead-process", now=now, until=now + 0.2) is not None
    assert ledger.outbox_attempt(item_id, "dead-process", until=now + 0.2, unsure=True)
    ledger.close()
    posted = await client_for(slack).chat_postMessage(
        channel=CHANNEL, thread_ts=THREAD, metadata=metadata(item_id), text="Freed 19.8 GB on web-03."
    )

    box = outbox(store, slack)
    await box.start()  # the next process: the dead one's claim lapses, and it looks before posting
    try:
        await settled(box)
        assert await sent(store, item_id) == posted["ts"]
    finally:
        await box.close()
    assert len(carrying(slack, item_id)) == 1
    assert len(slack.calls_to("chat.postMessage")) == 1  # only the dead process's post


async def test_a_cards_ts_is_recorded_on_its_approval_when_sent(store: Store, slack: FakeSlack) -> None:
    run = await store.create_run(channel=CHANNEL, thread_ts=THREAD, requester="U0ALICE", task="t", model="m")
    approval = await store.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="restart_service",
        category="mutating",
        args=RESTART,
        requester="U0ALICE",
        expires_at=time.time() + 600,
    )
    item_id = await deliver(store, slack, run_id=run.id, key=f"card:{approval.id}", approval_id=approval.id)
    ts = await sent(store, item_id)
    assert (await store.get_approval(approval.id)).message_ts == ts


@pytest.mark.parametrize("error", ["invalid_blocks", "msg_blocks_too_long"])
async def test_content_slack_refuses_falls_back_to_plain_text_once(store: Store, slack: FakeSlack, error: str) -> None:
    slack.fail_next("chat.postMessage", error)
    item_id = await deliver(store, slack)
    ts = await sent(store, item_id)
    (msg,) = carrying(slack, item_id)
    assert (msg.ts, msg.text, msg.blocks) == (ts, CARD.text, None)
    item = await store.outbox_item(item_id)
    assert item is not None and item.plain


async def test_a_post_refused_with_its_fallback_too_is_failed(store: Store, slack: FakeSlack) -> None:
    slack.fail_next("chat.postMessage", "invalid_blocks")
    slack.fail_next("chat.postMessage", "msg_too_long")
    item_id = await deliver(store, slack)
    item = await store.outbox_item(item_id)
    assert item is not None and (item.state, item.error, item.attempts) == (OutboxState.FAILED, "msg_too_long", 2)
    assert carrying(slack, item_id) == []


# --------------------------------------------------------------------------------------
# updates, order, redaction
# --------------------------------------------------------------------------------------


async def test_only_the_newest_update_is_sent_and_only_after_its_post(store: Store, slack: FakeSlack) -> None:
    box = outbox(store, slack)
    card = await box.post(run_id=None, channel=CHANNEL, thread_ts=THREAD, msg=CARD, key="card:apr_1")
    for state in ("pending:1", "approved"):
        await box.update(
            run_id=None,
            channel=CHANNEL,
            of=card,
            key=f"card:apr_1:{state}",
            msg=SlackMessage(text=f"card {state}", blocks=CARD.blocks),
        )
    await box.start()
    try:
        await settled(box)
    finally:
        await box.close()
    assert methods(slack, "chat.postMessage", "chat.update") == [("chat.postMessage", None), ("chat.update", None)]
    (msg,) = carrying(slack, card)
    assert msg.text == "card approved"
    assert [i.state for i in await store.outbox_items()] == [OutboxState.SENT, OutboxState.SUPERSEDED, OutboxState.SENT]


async def test_posts_in_a_thread_go_out_in_order_while_one_is_retried(store: Store, slack: FakeSlack) -> None:
    slack.fail_next("chat.postMessage", "ratelimited", retry_after=0, times=2)
    box = outbox(store, slack)
    posts = [OutboxPost(key=f"answer:run_1:{i}", channel=CHANNEL, thread_ts=THREAD, text=f"part {i}") for i in range(3)]
    ids = await store.enqueue_posts(posts)
    await box.start()
    try:
        await settled(box)
    finally:
        await box.close()
    assert [m.text for m in slack.thread(CHANNEL, THREAD) if m.metadata] == ["part 0", "part 1", "part 2"]
    assert [await sent(store, i) for i in ids] == [m.ts for m in slack.thread(CHANNEL, THREAD) if m.metadata]


async def test_the_same_key_enqueues_one_item(store: Store, slack: FakeSlack) -> None:
    box = outbox(store, slack)
    first = await box.post(run_id=None, channel=CHANNEL, thread_ts=THREAD, msg=CARD, key="card:apr_1")
    again = await box.post(run_id=None, channel=CHANNEL, thread_ts=THREAD, msg=CARD, key="card:apr_1")
    assert first == again and len(await store.outbox_items()) == 1


async def test_a_payload_is_redacted_before_it_is_stored(store: Store, slack: FakeSlack) -> None:
    secret = "xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx"
    box = outbox(store, slack)
    item_id = await box.post(
        run_id=None,
        channel=CHANNEL,
        thread_ts=THREAD,
        key="answer:run_1:0",
        msg=SlackMessage(
            text=f"token {secret}", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": f"token {secret}"}}]
        ),
    )
    item = await store.outbox_item(item_id)
    assert item is not None
    assert secret not in item.text and secret not in json.dumps(item.blocks) and "REDACTED" in item.text


# --------------------------------------------------------------------------------------
# restarts and two senders
# --------------------------------------------------------------------------------------


async def test_items_left_pending_are_delivered_by_the_next_process(db_url: str, slack: FakeSlack) -> None:
    first = await Store(db_url).open()
    item_id = await outbox(first, slack).post(
        run_id=None, channel=CHANNEL, thread_ts=THREAD, msg=CARD, key="card:apr_1"
    )  # stored; this process dies before sending
    await first.close()

    second = await Store(db_url).open()
    box = outbox(second, slack)
    await box.start()
    try:
        await settled(box)
        ts = await sent(second, item_id)
    finally:
        await box.close()
        await second.close()
    assert [m.ts for m in carrying(slack, item_id)] == [ts]


async def test_two_senders_on_one_database_never_send_an_item_twice(db_url: str, slack: FakeSlack) -> None:
    threads = [slack.add_message(CHANNEL, "U0ALICE", f"incident {i}").ts for i in range(4)]
    stores = [await Store(db_url).open() for _ in range(2)]  # two processes' connections
    boxes = [outbox(s, slack) for s in stores]
    ids = await stores[0].enqueue_posts(
        [
            OutboxPost(key=f"answer:run_{t}:{i}", channel=CHANNEL, thread_ts=t, text=f"part {i} of {t}")
            for t in threads
            for i in range(3)
        ]
    )
    try:
        await asyncio.gather(*(b.start() for b in boxes))
        await settled(*boxes)
        for item_id in ids:
            await sent(stores[0], item_id)
    finally:
        for b in boxes:
            await b.close()
        for s in stores:
            await s.close()
    posted = [m.metadata["event_payload"]["id"] for t in threads for m in slack.thread(CHANNEL, t) if m.metadata]
    assert sorted(posted) == sorted(ids)  # each exactly once
    assert len(slack.calls_to("chat.postMessage")) == len(ids)


# --------------------------------------------------------------------------------------
# through the app
# --------------------------------------------------------------------------------------


def arm_after_status(slack: FakeSlack, arm: Callable[[], None]) -> None:
    """Arm a failure once the status line is posted: the next chat.postMessage is the approval card."""
    armed = False

    def watch() -> None:
        nonlocal armed
        if not armed and any(
            c.ok and "status" in str(c.args.get("blocks")) for c in slack.calls_to("chat.postMessage")
        ):
            armed = True
            arm()

    slack.watch(watch)


@pytest.mark.parametrize("error", ["ratelimited", "internal_error"])
@pytest.mark.slow
async def test_a_card_slack_refused_for_a_moment_is_retried_and_posted_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, error: str
) -> None:
    fake_anthropic.script(
        reply(text("Restarting nginx."), tool_use("restart_service", RESTART)), reply(text("nginx restarted."))
    )
    arm_after_status(fake_slack, lambda: fake_slack.fail_next("chat.postMessage", error, retry_after=0))
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        assert [card_state(m) for m in env.cards(channel, ts)] == ["approved"]
        refused = [c for c in fake_slack.calls_to("chat.postMessage") if c.error == error]
        assert len(refused) == 1 and "approval_header" in str(refused[0].args.get("blocks"))
        assert sum(1 for m in env.thread(channel, ts) if is_card(m)) == 1
