"""Two `opsloop run` processes on one database, overlapping the way a rolling deploy does.

A serves runs (two wait for approval, one is inside an approved change); B starts while A runs;
Slack then spreads envelopes over both sockets (round robin), so clicks and mentions reach either
process whatever process drives the run; A gets SIGTERM; B must take A's runs over within seconds,
without a restart. Checked: every run terminal, zero double executions, no step of a run asked of
the model twice (one driver per run), every card and answer posted exactly once.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from handlers.blocks import APPROVE
from tests.support import crash_tools
from tests.support.chaos import (
    ALICE,
    CAROL,
    CHANNEL,
    Bots,
    ScenarioModel,
    card_posts,
    card_tool,
    change,
    final_posts,
    pending_cards,
    poll,
    query,
    stop,
)
from tests.support.fakes.slack import FakeSlack, mention_event

TAKEOVER = 20.0  # seconds B gets to finish every run once A is gone (generous: a 2-core CI box)


async def test_a_rolling_deploy_hands_every_run_over_without_doing_anything_twice(tmp_path, fake_slack, fake_anthropic):
    asked: Counter[tuple[str | None, int]] = Counter()
    ScenarioModel(on_request=lambda tag, step: asked.update([(tag, step)])).install(fake_anthropic)
    bots = Bots(tmp_path, fake_slack, fake_anthropic)
    threads: dict[str, str] = {}

    async def mention(tag: str) -> str:
        event = mention_event(CHANNEL, ALICE, f"[{tag}] web-{tag} keeps flapping, please fix it")
        threads[tag] = event["ts"]
        await fake_slack.send_event(event, timeout=30)
        return event["ts"]

    async def card(tag: str, tool: str, timeout: float = 15.0):  # noqa: ASYNC109
        thread = threads[tag]
        return await fake_slack.wait_for_message(
            CHANNEL,
            lambda m: m.thread_ts == thread and m in pending_cards(fake_slack, thread) and card_tool(m) == tool,
            timeout=timeout,
        )

    a = await bots.start()
    b = None
    try:
        # A: R1 and R2 wait for approval; R3 is inside its approved restart (held there).
        for tag in ("R1", "R2"):
            await mention(tag)
            await card(tag, "restart_service")
        bots.hold_file.write_text(change("R3", 1))
        await mention("R3")
        r3_card = await card("R3", "restart_service")
        await fake_slack.click(CAROL, CHANNEL, r3_card.ts, APPROVE, timeout=30)
        await poll(lambda: crash_tools.executions(bots.exec_log)["R3-restart"], 15, "R3's restart to start in A")

        # B starts while A runs; from now on Slack delivers to both, one envelope each in turn.
        b = await bots.start()
        fake_slack.delivery = "round_robin"
        for tag in ("R4", "R5"):  # one lands on A, the other on B
            await mention(tag)
        r1_card = await card("R1", "restart_service")
        await fake_slack.click(CAROL, CHANNEL, r1_card.ts, APPROVE, timeout=30)  # to either process
        await card("R1", "drain_node")  # the click reached the run, wherever it is driven
        bots.hold_file.unlink()  # R3's change finishes in A, which goes on driving R3
        both_live = await approve_until_answered(fake_slack, {t: threads[t] for t in ("R1", "R3")})

        assert await stop(a) == 0, bots.log_tail()  # SIGTERM: A leaves; nobody restarts anything
        after_a = await approve_until_answered(fake_slack, threads)
        timed_out = not (both_live and after_a)
    finally:
        if b is not None:
            await stop(b)
        await stop(a)

    problems: dict[str, object] = {}
    if timed_out:
        problems["not every run answered within TAKEOVER seconds (R1 and R3 with A and B live; all after A left)"] = (
            TAKEOVER
        )
    runs = query(bots.db, "SELECT thread_ts, status FROM runs")
    not_terminal = {tag: [r["status"] for r in runs if r["thread_ts"] == t] for tag, t in threads.items()}
    not_terminal = {k: v for k, v in not_terminal.items() if v != ["finished"]}
    if not_terminal:
        problems["runs not terminal (tag: statuses)"] = not_terminal
    twice = {k: n for k, n in crash_tools.executions(bots.exec_log).items() if n > 1}
    if twice:
        problems["changes executed more than once"] = twice
    asked_twice = {f"{tag} step {step}": n for (tag, step), n in asked.items() if n > 1}
    if asked_twice:
        problems["model asked the same step twice (two drivers for one run)"] = asked_twice
    answers = {tag: final_posts(fake_slack, t, tag) for tag, t in threads.items()}
    if any(n != 1 for n in answers.values()):
        problems["answers/handoff reports per run (want 1)"] = answers
    cards = {k: n for k, n in card_posts(fake_slack).items() if n != 1}
    if cards:
        problems["cards posted more than once"] = cards
    assert not problems, json.dumps(problems, indent=2) + "\n" + bots.log_tail(8)


async def approve_until_answered(fake_slack: FakeSlack, threads: dict[str, str]) -> bool:
    """Carol approves every pending card (once each) until every run has its answer; False on timeout."""
    changed = asyncio.Event()
    unwatch = fake_slack.watch(changed.set)
    acted: set[str] = set()
    try:
        async with asyncio.timeout(TAKEOVER):
            while not all(final_posts(fake_slack, t, tag) for tag, t in threads.items()):
                changed.clear()
                for thread in threads.values():
                    for c in pending_cards(fake_slack, thread):
                        if c.ts not in acted:
                            acted.add(c.ts)
                            await fake_slack.click(CAROL, CHANNEL, c.ts, APPROVE, timeout=30)
                await changed.wait()
        return True
    except TimeoutError:
        return False
    finally:
        unwatch()
