"""N `opsloop run` processes (replicas) of one app on one Postgres, against the fake Slack and the fake
Messages API; Slack spreads envelopes over their Socket Mode connections, so a mention, a click and a reply
of one run can each reach a different replica.

Each test tells one story and ends with the same invariants (`assert_invariants`), the ones the crash and
rolling-deploy tests check for one database: every run terminal, no change executed twice (or without an
approver), no model step asked twice unless its driver was killed while it was in flight, every card and
every answer (or handoff report) posted exactly once.

Waits are on observable state (the fake Slack's records, the fake model's requests, store rows), never on
time; the time-outs are generous bounds for a loaded 2-core box, not speed claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from handlers.blocks import APPROVE, STOP
from tests.support import crash_tools
from tests.support.chaos import (
    ALICE,
    APPROVERS,
    BOB,
    CAROL,
    CHANNEL,
    Bots,
    Database,
    ScenarioModel,
    answer_text,
    block_ids,
    button_values,
    card_posts,
    card_tool,
    change,
    is_card,
    pending_cards,
    poll,
    posts,
    query,
    stop,
    tag_and_step,
)
from tests.support.disk_tools import CLEAN_PREVIEW
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, Message, mention_event, message_event

WAIT = 30.0  # seconds any one observable change may take (a lease takeover is ~10 s at worst)
CRASH_LOOP_SEED = 20260612
CRASH_LOOP_RUNS = 6
CRASH_LOOP_KILLS = 3
REPLIES_IN_LOOP = ("R2", "R5")  # in the crash loop, bob answers these runs' restart card with a reply


# --------------------------------------------------------------------------------------
# the model: the scenario of tests.support.chaos, and the disk-full incident
# --------------------------------------------------------------------------------------


def disk_answer(tag: str) -> str:
    return f"{tag}: /var on web-03 is back to 42% after deleting 212 rotated nginx logs (19.8 GB)."


def disk_full_reply(tag: str, step: int) -> Reply:
    """The disk-full incident, step by step: look, clean (destructive, behind a card), answer."""
    if step == 0:
        return reply(text("Checking the disk."), tool_use("check_disk", {"host": "web-03"}, id=f"toolu_{tag}_0"))
    if step == 1:
        return reply(
            text("/var is full of rotated nginx logs; cleaning them."),
            tool_use(
                "clean_logs",
                {"host": "web-03", "path": "/var/log/nginx", "change": f"{tag}-clean"},
                id=f"toolu_{tag}_1",
            ),
        )
    return reply(text(disk_answer(tag)))


class Asks:
    """Every model request, in order with the kills. A step asked again is excused only by a kill of the
    process that drove its run, and only for the step it was at (in flight) or the next one (a request it sent
    just before it died, which the fake saw just after)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def ask(self, tag: str | None, step: int) -> None:
        self.events.append(("ask", (tag, step)))

    def kill(self, driven: set[str]) -> None:
        self.events.append(("kill", frozenset(driven)))

    def asked_twice(self) -> dict[str, int]:
        """`tag step N` -> how many unexcused repeats."""
        seen: set[Any] = set()
        latest: dict[str | None, int] = {}  # tag -> the highest step asked so far
        excused: Counter[Any] = Counter()  # (tag, step) -> repeats the kills so far excuse
        repeats: Counter[str] = Counter()
        for kind, what in self.events:
            if kind == "kill":
                for tag in what:
                    step = latest.get(tag, -1)
                    excused.update([(tag, step), (tag, step + 1)])
            elif what not in seen:
                seen.add(what)
                latest[what[0]] = max(latest.get(what[0], -1), what[1])
            elif excused[what] > 0:
                excused[what] -= 1
            else:
                repeats[f"{what[0]} step {what[1]}"] += 1
        return dict(repeats)


def requests_at(model: FakeAnthropic, tag: str, step: int) -> list[dict[str, Any]]:
    """The bodies of the requests the model got for run `tag` at `step`."""
    return [r.body for r in model.requests if r.body and tag_and_step(r.body) == (tag, step)]


def install_disk_full(model: FakeAnthropic, asks: Asks) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        tag, step = tag_and_step(body)
        asks.ask(tag, step)
        return disk_full_reply(tag or "R0", step)

    model.script(*[answer] * 500)


def install_scenario(model: FakeAnthropic, asks: Asks, also: Callable[[str | None, int], None] | None = None) -> None:
    def on_request(tag: str | None, step: int) -> None:
        asks.ask(tag, step)
        if also is not None:
            also(tag, step)

    ScenarioModel(on_request=on_request).install(model)


# --------------------------------------------------------------------------------------
# replicas
# --------------------------------------------------------------------------------------


@dataclass
class Replicas:
    """The live `opsloop run` processes of one test, by pid, and the threads of its runs, by tag."""

    bots: Bots
    procs: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)
    replies: dict[str, str] = field(default_factory=dict)  # ts -> text of every thread reply sent

    @property
    def slack(self) -> FakeSlack:
        return self.bots.slack

    async def start(self) -> int:
        proc = await self.bots.start(timeout=WAIT)
        self.procs[proc.pid] = proc
        return proc.pid

    def to(self, pid: int) -> Any:
        """Deliver the envelopes of a `with` block to this replica's Socket Mode connection."""
        return self.slack.to(self.bots.connection[pid])

    def other_than(self, pid: int) -> int:
        return next(p for p in self.procs if p != pid)

    async def kill(self, pid: int) -> None:
        await stop(self.procs.pop(pid), signal.SIGKILL)

    async def stop_all(self) -> None:
        procs, self.procs = list(self.procs.values()), {}
        await asyncio.gather(*(stop(p) for p in procs))

    async def mention(self, tag: str, what: str = "keeps flapping, please fix it", *, to: int | None = None) -> str:
        event = mention_event(CHANNEL, ALICE, f"[{tag}] web-{tag} {what}")
        self.threads[tag] = event["ts"]
        with self.to(to) if to is not None else contextlib.nullcontext():
            await self.slack.send_event(event, timeout=WAIT)
        return event["ts"]

    async def reply(self, tag: str, words: str, *, to: int | None = None) -> str:
        event = message_event(CHANNEL, BOB, words, thread_ts=self.threads[tag])
        self.replies[event["ts"]] = words
        with self.to(to) if to is not None else contextlib.nullcontext():
            await self.slack.send_event(event, timeout=WAIT)
        return event["ts"]

    def acked(self, ts: str) -> bool:
        """Some replica acked an envelope carrying the message `ts` (so it must not be lost)."""
        return any(
            e["envelope_id"] in self.slack.acks
            for e in self.slack.envelopes
            if ((e.get("payload") or {}).get("event") or {}).get("ts") == ts
        )

    async def card(self, tag: str, tool: str) -> Message:
        """The run's pending card for `tool` (once it is there)."""
        thread = self.threads[tag]
        return await self.slack.wait_for_message(
            CHANNEL,
            lambda m: m.thread_ts == thread and card_is_for(m, tool) and bool(button_values(m.blocks)),
            timeout=WAIT,
        )

    async def click(self, card: Message, action: str = APPROVE, *, user: str = CAROL, to: int) -> None:
        with self.to(to):
            await self.slack.click(user, CHANNEL, card.ts, action, timeout=WAIT)

    async def answered(self, tag: str, answer: Callable[[str], str] = answer_text) -> None:
        thread = self.threads[tag]
        await self.slack.wait_for_message(
            CHANNEL, lambda m: m.thread_ts == thread and is_final(m.text, m.blocks, tag, answer), timeout=WAIT
        )

    def driver(self, tag: str) -> int | None:
        """The pid of the process holding the run's lease (None while nobody drives it)."""
        rows = query(self.bots.db, "SELECT owner FROM runs WHERE thread_ts = ?", (self.threads[tag],))
        return owner_pid(rows[0]["owner"]) if rows else None

    def driven(self) -> dict[int, set[str]]:
        """Live replica pid -> the tags of the runs whose lease it holds."""
        rows = query(self.bots.db, "SELECT thread_ts, owner FROM runs")
        tags = {thread: tag for tag, thread in self.threads.items()}
        out: dict[int, set[str]] = {pid: set() for pid in self.procs}
        for r in rows:
            if (pid := owner_pid(r["owner"])) in out and r["thread_ts"] in tags:
                out[pid].add(tags[r["thread_ts"]])
        return out


def sigkill_driver(replicas: Replicas, asks: Asks, tag: str) -> int:
    """SIGKILL the process driving run `tag` now (synchronously: a model request hook may call it); `kill` reaps."""
    pid = replicas.driver(tag)
    assert pid is not None and pid in replicas.procs, f"{tag} is driven by {pid}, not one of {list(replicas.procs)}"
    asks.kill(replicas.driven()[pid])
    replicas.procs[pid].send_signal(signal.SIGKILL)
    return pid


def owner_pid(owner: str | None) -> int | None:
    """A lease owner is `host:pid:namespace:random`."""
    parts = (owner or "").split(":")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def card_is_for(msg: Message, tool: str) -> bool:
    return is_card(msg.blocks) and tool in json.dumps(msg.blocks or [])


def is_final(words: str | None, blocks: Any, tag: str, answer: Callable[[str], str]) -> bool:
    """The run's answer, or its handoff report."""
    return answer(tag) in str(words or "") or "report_header" in block_ids(blocks)


# --------------------------------------------------------------------------------------
# the invariants
# --------------------------------------------------------------------------------------


def broken_invariants(replicas: Replicas, asks: Asks, answer: Callable[[str], str] = answer_text) -> dict[str, Any]:
    """What went wrong across every run of the test (empty: nothing)."""
    bots, slack, model = replicas.bots, replicas.slack, replicas.bots.model
    problems: dict[str, Any] = {}
    runs = query(bots.db, "SELECT thread_ts, status, stop_reason FROM runs")
    states = {tag: [r["status"] for r in runs if r["thread_ts"] == thread] for tag, thread in replicas.threads.items()}
    if bad := {tag: s for tag, s in states.items() if s != ["finished"]}:
        problems["runs not terminal, or not one run per thread (tag: statuses)"] = bad
    if twice := {k: n for k, n in crash_tools.executions(bots.exec_log).items() if n > 1}:
        problems["changes executed more than once"] = twice
    if unapproved := [
        r["change"]
        for r in crash_tools.read_log(bots.exec_log)
        if r.get("event") == "start" and r.get("by") not in APPROVERS
    ]:
        problems["changes executed without an approver"] = unapproved
    heard = json.dumps([r.body for r in model.requests])
    if lost := [words for ts, words in replicas.replies.items() if replicas.acked(ts) and words not in heard]:
        problems["acknowledged replies the model never saw"] = lost
    if asked := asks.asked_twice():
        problems["model steps asked twice with no kill of their driver in between"] = asked
        problems["model requests and kills, in order"] = [
            f"{what[0]}:{what[1]}" if kind == "ask" else f"KILL(driving {sorted(what)})" for kind, what in asks.events
        ]
    finals = {
        tag: sum(1 for c in posts(slack, thread) if is_final(c.args.get("text"), c.args.get("blocks"), tag, answer))
        for tag, thread in replicas.threads.items()
    }
    if bad_finals := {tag: n for tag, n in finals.items() if n != 1}:
        problems["answers/handoff reports per run (want 1)"] = bad_finals
    cards = card_posts(slack)
    approvals = {a["id"] for a in query(bots.db, "SELECT id FROM approvals")}
    if bad_cards := {a: cards.get(a, 0) for a in set(cards) | approvals if cards.get(a, 0) != 1}:
        problems["cards posted per approval (want 1)"] = bad_cards
    return problems


def assert_invariants(
    replicas: Replicas, asks: Asks, answer: Callable[[str], str] = answer_text, note: str = ""
) -> None:
    problems = broken_invariants(replicas, asks, answer)
    assert not problems, f"{note}\n{json.dumps(problems, indent=2)}\n{replicas.bots.log_tail(10)}"


# --------------------------------------------------------------------------------------
# the stories
# --------------------------------------------------------------------------------------


@pytest.fixture
def db(pg_url: str) -> Database:
    return pg_url


async def test_disk_full_mentioned_on_one_replica_is_approved_through_the_other(
    tmp_path: Path, db: Database, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asks = Asks()
    install_disk_full(fake_anthropic, asks)
    replicas = Replicas(Bots(tmp_path, fake_slack, fake_anthropic, db=db, tools=("tests.support.disk_tools",)))
    try:
        a, b = await replicas.start(), await replicas.start()
        await replicas.mention("R1", "/var is full (100%), nginx is failing to write", to=a)
        card = await replicas.card("R1", "clean_logs")
        assert CLEAN_PREVIEW in json.dumps(card.blocks)
        await replicas.click(card, APPROVE, user=CAROL, to=b)
        await replicas.answered("R1", disk_answer)
    finally:
        await replicas.stop_all()

    log = [r for r in crash_tools.read_log(replicas.bots.exec_log) if r["event"] == "start"]
    assert [(r["change"], r["by"]) for r in log] == [("R1-clean", CAROL)]
    approval = query(db, "SELECT state, decided_by, tool FROM approvals")
    assert approval == [{"state": "approved", "decided_by": CAROL, "tool": "clean_logs"}]
    ran = query(db, "SELECT confirmed_by FROM tool_results WHERE tool = 'clean_logs'")
    assert ran == [{"confirmed_by": CAROL}]
    assert_invariants(replicas, asks, disk_answer)


async def test_a_reply_on_the_replica_not_driving_redirects_the_run(
    tmp_path: Path, db: Database, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asks = Asks()
    install_scenario(fake_anthropic, asks)
    replicas = Replicas(Bots(tmp_path, fake_slack, fake_anthropic, db=db))
    hold_words = "R1: hold the restart, check the logs first"
    later_words = "R1: after the drain, page the database team"
    try:
        a, b = await replicas.start(), await replicas.start()
        await replicas.mention("R1", to=a)
        restart_id = next(iter(button_values((await replicas.card("R1", "restart_service")).blocks)))
        # A card is pending (A posted it, nobody drives the run): the reply reaches B and declines it.
        await replicas.reply("R1", hold_words, to=b)
        drain = await replicas.card("R1", "drain_node")
        # Now the run is busy inside its approved drain, in one replica; the reply reaches the other.
        replicas.bots.hold_file.write_text(change("R1", 2))
        await replicas.click(drain, APPROVE, to=a)
        await poll(lambda: crash_tools.executions(replicas.bots.exec_log)[change("R1", 2)], WAIT, "the drain")
        driver = replicas.driver("R1")
        assert driver in replicas.procs, f"the run is driven by {driver}, not one of {list(replicas.procs)}"
        reply_ts = await replicas.reply("R1", later_words, to=replicas.other_than(driver))
        await poll(lambda: query(db, "SELECT 1 FROM inbox WHERE ts = ?", (reply_ts,)), WAIT, "the reply stored")
        replicas.bots.hold_file.unlink()
        await replicas.answered("R1")
    finally:
        replicas.bots.hold_file.unlink(missing_ok=True)
        await replicas.stop_all()

    assert crash_tools.executions(replicas.bots.exec_log) == Counter({change("R1", 2): 1})  # never the restart
    assert query(db, "SELECT state FROM approvals WHERE id = ?", (restart_id,)) == [{"state": "superseded"}]
    assert not pending_cards(fake_slack, replicas.threads["R1"])
    assert [hold_words in json.dumps(body) for body in requests_at(fake_anthropic, "R1", 2)] == [True]
    assert [later_words in json.dumps(body) for body in requests_at(fake_anthropic, "R1", 3)] == [True]
    assert_invariants(replicas, asks)


@pytest.mark.parametrize("where", ["inside_a_change", "inside_a_model_request"])
async def test_a_replica_killed_mid_run_is_taken_over_by_another(
    where: str, tmp_path: Path, db: Database, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asks = Asks()
    replicas = Replicas(Bots(tmp_path, fake_slack, fake_anthropic, db=db))
    victims: list[int] = []

    def kill_the_driver_mid_request(tag: str | None, step: int) -> None:
        """At R1's first drain request: SIGKILL whoever drives R1, before the model answers."""
        if where == "inside_a_model_request" and (tag, step) == ("R1", 2) and not victims:
            victims.append(sigkill_driver(replicas, asks, "R1"))

    install_scenario(fake_anthropic, asks, also=kill_the_driver_mid_request)
    try:
        a, b = await replicas.start(), await replicas.start()
        await replicas.mention("R1", to=a)
        restart = await replicas.card("R1", "restart_service")
        if where == "inside_a_change":
            replicas.bots.hold_file.write_text(change("R1", 1))
        await replicas.click(restart, APPROVE, to=b)
        if where == "inside_a_change":
            await poll(lambda: crash_tools.executions(replicas.bots.exec_log)[change("R1", 1)], WAIT, "the restart")
            victims.append(sigkill_driver(replicas, asks, "R1"))
            replicas.bots.hold_file.unlink()  # the dead process's change must not run anywhere again
        else:
            await poll(lambda: victims, WAIT, "the kill inside R1's drain request")
        await replicas.kill(victims[0])
        survivor = next(iter(replicas.procs))
        drain = await replicas.card("R1", "drain_node")  # the survivor took the run over and went on
        await replicas.click(drain, APPROVE, to=survivor)
        await replicas.answered("R1")
    finally:
        replicas.bots.hold_file.unlink(missing_ok=True)
        await replicas.stop_all()

    assert crash_tools.executions(replicas.bots.exec_log) == Counter({change("R1", 1): 1, change("R1", 2): 1})
    asked = [len(requests_at(fake_anthropic, "R1", step)) for step in range(5)]  # 4: the answer, asked once
    assert asked == ([1, 1, 1, 1, 1] if where == "inside_a_change" else [1, 1, 2, 1, 1])  # the killed request, again
    assert_invariants(replicas, asks)


async def test_a_stop_clicked_on_one_replica_ends_the_run_another_drives(
    tmp_path: Path, db: Database, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    asks = Asks()
    install_scenario(fake_anthropic, asks)
    replicas = Replicas(Bots(tmp_path, fake_slack, fake_anthropic, db=db))
    try:
        a = await replicas.start()
        await replicas.start()
        await replicas.mention("R1", to=a)
        restart = await replicas.card("R1", "restart_service")
        replicas.bots.hold_file.write_text(change("R1", 1))
        await replicas.click(restart, APPROVE, to=a)
        await poll(lambda: crash_tools.executions(replicas.bots.exec_log)[change("R1", 1)], WAIT, "the restart")
        driver = replicas.driver("R1")
        assert driver in replicas.procs
        thread = replicas.threads["R1"]
        status = await fake_slack.wait_for_message(
            CHANNEL, lambda m: m.thread_ts == thread and "status_actions" in block_ids(m.blocks), timeout=WAIT
        )
        with replicas.to(replicas.other_than(driver)):
            await fake_slack.click(ALICE, CHANNEL, status.ts, STOP, timeout=WAIT)
        # Ends while the driver is still inside the held change: the Stop crossed replicas by itself.
        ended = await poll(
            lambda: query(db, "SELECT stop_reason, stopped_by FROM runs WHERE status = 'finished'"),
            WAIT,
            "the run to end",
        )
        await replicas.answered("R1")
    finally:
        replicas.bots.hold_file.unlink(missing_ok=True)
        await replicas.stop_all()

    assert ended == [{"stop_reason": "cancelled", "stopped_by": ALICE}]
    assert crash_tools.executions(replicas.bots.exec_log) == Counter({change("R1", 1): 1})
    assert not [m for m in fake_slack.thread(CHANNEL, replicas.threads["R1"]) if card_tool(m) == "drain_node"]
    assert_invariants(replicas, asks)


# --------------------------------------------------------------------------------------
# the crash loop
# --------------------------------------------------------------------------------------


@dataclass
class CrashLoop:
    """Several runs across three replicas; a random replica is SIGKILLed every few model requests or Slack
    posts (seeded) and a new one started, while people keep clicking and replying through whichever
    connections are up. The incidents come in over time (one more after each restart, or when all are
    answered), so every restart meets runs in flight."""

    replicas: Replicas
    asks: Asks
    rng: random.Random
    kills_left: int = CRASH_LOOP_KILLS
    generation: int = 0  # bumped after each restart: people re-click a card a dead replica may have missed
    to_next_kill: int = 0  # model requests and Slack posts until the next kill
    posts_seen: int = 0
    replied: set[str] = field(default_factory=set)
    redelivered: int = 0
    unmentioned: list[str] = field(default_factory=list)  # incidents still to come, in order
    restarting: bool = False  # a replica was killed and its replacement is not up yet

    def __post_init__(self) -> None:
        self.changed = asyncio.Event()
        self.kill_due = asyncio.Event()
        self.to_next_kill = self.rng.randrange(3, 9)
        self.replicas.slack.watch(self.on_slack)

    def on_request(self, tag: str | None, step: int) -> None:
        self.observe()

    def on_slack(self) -> None:
        """Every post the replicas make counts as an observation, like every model request."""
        posted = len(self.replicas.slack.calls_to("chat.postMessage"))
        for _ in range(posted - self.posts_seen):
            self.observe()
        self.posts_seen = posted
        self.changed.set()

    def observe(self) -> None:
        self.to_next_kill -= 1
        if self.to_next_kill <= 0 and self.kills_left > 0:
            self.kill_due.set()

    async def killer(self) -> None:
        """SIGKILL a random replica (one that drives a run, if any does) when one is due, start its
        replacement, then Slack redelivers and one more incident comes in."""
        while self.kills_left > 0:
            await self.kill_due.wait()
            self.kill_due.clear()
            self.kills_left -= 1
            self.to_next_kill = self.rng.randrange(3, 9)
            self.restarting = True
            driven = self.replicas.driven()  # just before the kill: who drove what then
            victim = self.rng.choice(sorted(p for p, tags in driven.items() if tags) or sorted(driven))
            self.asks.kill(driven[victim])
            await self.replicas.kill(victim)
            await self.replicas.start()
            await self.redeliver()
            self.generation += 1
            await self.next_incident()
            self.restarting = False
            self.changed.set()

    async def next_incident(self) -> None:
        if self.unmentioned:
            await self.replicas.mention(self.unmentioned.pop(0))

    async def redeliver(self) -> None:
        """Every events_api envelope never acked goes again, with retry_attempt + 1 (as Slack does)."""
        slack = self.replicas.slack
        acked = {
            e["payload"]["event_id"]
            for e in slack.envelopes
            if e["type"] == "events_api" and e["envelope_id"] in slack.acks
        }
        latest = {
            e["payload"]["event_id"]: e
            for e in slack.envelopes
            if e["type"] == "events_api" and e["payload"]["event_id"] not in acked
        }
        for event_id, e in latest.items():
            self.redelivered += 1
            await slack.send_event(
                e["payload"]["event"], event_id=event_id, retry_attempt=e["retry_attempt"] + 1, timeout=WAIT
            )

    async def people(self) -> None:
        """Act on every pending card (again after each restart) until every run has its answer or report."""
        slack, threads = self.replicas.slack, self.replicas.threads
        acted: set[tuple[str, int]] = set()
        while self.unmentioned or not all(self.finished(tag) for tag in threads):
            self.changed.clear()
            if not self.restarting and all(self.finished(tag) for tag in threads):
                await self.next_incident()  # all quiet, no kill due yet: the next incident comes anyway
            for tag, thread in threads.items():
                for card in pending_cards(slack, thread):
                    if (card.ts, self.generation) not in acted:
                        acted.add((card.ts, self.generation))
                        await self.act(tag, card)
            await self.changed.wait()

    async def act(self, tag: str, card: Message) -> None:
        slack = self.replicas.slack
        if tag in REPLIES_IN_LOOP and card_tool(card) == "restart_service" and tag not in self.replied:
            self.replied.add(tag)
            await self.replicas.reply(tag, f"{tag}: hold the restart, check the logs first")
            return
        with contextlib.suppress(LookupError):  # decided (its buttons gone) while we looked
            await slack.click(CAROL, CHANNEL, card.ts, APPROVE, timeout=WAIT)

    def finished(self, tag: str) -> bool:
        thread = self.replicas.threads[tag]
        return any(
            is_final(c.args.get("text"), c.args.get("blocks"), tag, answer_text)
            for c in posts(self.replicas.slack, thread)
        )


async def until_done(people: asyncio.Task[None], killer: asyncio.Task[None], within: float) -> bool:
    """Wait for the people to see every answer (False on timeout); a kill or restart that failed raises here."""
    try:
        async with asyncio.timeout(within):
            while not people.done():
                await asyncio.wait([people] if killer.done() else [people, killer], return_when=asyncio.FIRST_COMPLETED)
                if killer.done():
                    killer.result()
    except TimeoutError:
        return False
    people.result()
    return True


def loop_seed(config: pytest.Config) -> int:
    given = config.getoption("--chaos-seed")
    return int(given) if given is not None else CRASH_LOOP_SEED


async def test_a_crash_loop_across_replicas_loses_and_repeats_nothing(
    tmp_path: Path, db: Database, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, pytestconfig: pytest.Config
) -> None:
    seed = loop_seed(pytestconfig)
    print(f"replica crash loop: seed={seed} (replay with --chaos-seed={seed})")
    asks = Asks()
    replicas = Replicas(Bots(tmp_path, fake_slack, fake_anthropic, db=db))
    loop = CrashLoop(replicas, asks, random.Random(seed))
    install_scenario(fake_anthropic, asks, also=loop.on_request)
    fake_slack.delivery, fake_slack.rng = "random", random.Random(seed)
    killer = people = None
    try:
        for _ in range(3):
            await replicas.start()
        loop.unmentioned = [f"R{n}" for n in range(1, CRASH_LOOP_RUNS + 1)]
        for _ in range(CRASH_LOOP_RUNS // 2):
            await loop.next_incident()
        killer = asyncio.create_task(loop.killer())
        people = asyncio.create_task(loop.people())
        answered = await until_done(people, killer, within=4 * WAIT)
    finally:
        for task in (killer, people):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (killer, people) if t is not None), return_exceptions=True)
        await replicas.stop_all()

    counts = {
        "seed": seed,
        "kills": CRASH_LOOP_KILLS - loop.kills_left,
        "kills_of_a_driver": sum(1 for kind, tags in asks.events if kind == "kill" and tags),
        "started": replicas.bots.started,
        "redelivered": loop.redelivered,
        "model_requests": len(fake_anthropic.requests),
    }
    print(json.dumps(counts))
    unanswered = [tag for tag in replicas.threads if not loop.finished(tag)]
    assert answered and not unanswered, f"runs never answered: {unanswered} ({counts})\n{replicas.bots.log_tail(10)}"
    assert_invariants(replicas, asks, note=f"seed {seed}: {counts}")
