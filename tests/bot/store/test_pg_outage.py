"""Postgres goes away mid-incident under two `opsloop run` replicas, and comes back.

The server is stopped from inside a model request (the fake's hook runs before the answer is sent), so the
replica driving the run meets a dead connection on its very next write. A short outage is retried through:
the run goes on as if nothing happened. A long one (past the store's 10 s of retries) pauses the run, never
fails it: the thread hears it once, and when the server is back the run's lease lapses and a replica
continues it from the store. Either way nothing acknowledged is lost and nothing is done or posted twice.

This test has a Postgres server of its own (it stops it); it skips only where Postgres isn't installed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from handlers import messages
from handlers.blocks import APPROVE
from tests.support import crash_tools, pgserver
from tests.support.chaos import (
    ALICE,
    CAROL,
    CHANNEL,
    Bots,
    ScenarioModel,
    card_posts,
    final_posts,
    pending_cards,
    poll,
    query,
    stop,
)
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.slack import FakeSlack, mention_event

WAIT = 45.0  # a generous bound for a loaded 2-core box (retries 10 s + lease 10 s + start-up), not a speed claim
PAUSED = messages.store_unavailable(disk_full=False)


@pytest.fixture
def own_pg() -> Iterator[pgserver.PgServer]:
    if pgserver.find_bindir() is None:
        pytest.skip(f"Postgres {pgserver.MIN_MAJOR} not installed: make postgres")
    with pgserver.PgServer() as server:
        yield server


@pytest.fixture
async def replicas(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, own_pg: pgserver.PgServer
) -> AsyncIterator[Bots]:
    bots = Bots(tmp_path, fake_slack, fake_anthropic, db=pgserver.new_database(own_pg.url))
    procs = [await bots.start(), await bots.start()]
    fake_slack.delivery = "round_robin"
    try:
        yield bots
    finally:
        for proc in procs:
            await stop(proc)


def halt_in_step_1(server: pgserver.PgServer, fake: FakeAnthropic) -> Counter[int]:
    """The scenario model, stopping Postgres inside run R1's first request for step 1, before its answer goes
    out: the driver's next write finds no server. Returns how often each step was asked."""
    asked: Counter[int] = Counter()

    def on_request(tag: str | None, step: int) -> None:
        asked[step] += 1
        if tag == "R1" and step == 1 and asked[1] == 1:
            server.halt()

    ScenarioModel(on_request=on_request).install(fake)
    return asked


def logged(bots: Bots, event: str) -> bool:
    """Some replica's log has this structlog event."""
    return any(f'"event": "{event}"' in path.read_text(errors="replace") for path in bots.tmp_path.glob("bot-*.log"))


async def approve_until_answered(slack: FakeSlack, thread: str, tag: str) -> None:
    """Carol approves each pending card once, until the run's answer is in the thread."""
    changed = asyncio.Event()
    unwatch = slack.watch(changed.set)
    acted: set[str] = set()
    try:
        async with asyncio.timeout(WAIT):
            while not final_posts(slack, thread, tag):
                changed.clear()
                for card in pending_cards(slack, thread):
                    if card.ts not in acted:
                        acted.add(card.ts)
                        await slack.click(CAROL, CHANNEL, card.ts, APPROVE, timeout=WAIT)
                await changed.wait()
    finally:
        unwatch()


def assert_whole(bots: Bots, slack: FakeSlack, thread: str, tag: str) -> None:
    """The run finished normally, each change ran once, each card and the answer were posted once."""
    runs = query(bots.db, "SELECT status, stop_reason FROM runs")
    assert [(r["status"], r["stop_reason"]) for r in runs] == [("finished", "completed")], bots.log_tail()
    done = crash_tools.executions(bots.exec_log)
    assert done[f"{tag}-restart"] == 1 and done[f"{tag}-drain"] == 1, done
    assert all(n == 1 for n in card_posts(slack).values()), card_posts(slack)
    assert final_posts(slack, thread, tag) == 1


async def test_a_short_outage_is_retried_through_and_the_run_never_notices(
    replicas: Bots, own_pg: pgserver.PgServer, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asked = halt_in_step_1(own_pg, fake_anthropic)
    event = mention_event(CHANNEL, ALICE, "[R1] web-R1 keeps flapping, please fix it")
    await fake_slack.send_event(event, timeout=WAIT)

    await poll(lambda: logged(replicas, "store.retry"), WAIT, "a replica retrying its store")
    own_pg.resume()
    await approve_until_answered(fake_slack, event["ts"], "R1")

    assert_whole(replicas, fake_slack, event["ts"], "R1")
    assert not any(PAUSED in m.text for m in fake_slack.thread(CHANNEL, event["ts"])), "a short outage paused it"
    assert asked[1] == 1, f"step 1 asked {asked[1]} times: the outage should have been retried through"


async def test_a_long_outage_pauses_the_run_and_a_replica_continues_it_when_postgres_is_back(
    replicas: Bots, own_pg: pgserver.PgServer, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asked = halt_in_step_1(own_pg, fake_anthropic)
    event = mention_event(CHANNEL, ALICE, "[R1] web-R1 keeps flapping, please fix it")
    await fake_slack.send_event(event, timeout=WAIT)

    # Past the retries: the run pauses and says so once, straight to Slack (the outbox is in the database).
    await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == event["ts"] and PAUSED in m.text, timeout=WAIT)
    own_pg.resume()
    await approve_until_answered(fake_slack, event["ts"], "R1")

    assert_whole(replicas, fake_slack, event["ts"], "R1")
    told = [m for m in fake_slack.thread(CHANNEL, event["ts"]) if PAUSED in m.text]
    assert len(told) == 1, f"the pause was announced {len(told)} times"
    # The answer to step 1 was never stored (the server was gone), so the step is asked again; nothing else is.
    assert asked[1] == 2 and asked[0] == 1 and asked[2] == 1, dict(asked)
