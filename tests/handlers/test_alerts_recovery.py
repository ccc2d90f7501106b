"""An Alertmanager group is opened exactly once however the process or Slack fails after the 200.

The group is stored `opening` with its payload (redacted) and its root post enqueued in the outbox, in the
transaction the 200 waits for. Then the thread is opened after the ack; if the process dies (a real SIGKILL of
`opsloop run`, as in tests/e2e/test_crash.py) or Slack refuses the root post, a recovery pass (start-up, every half
claim window, a repeat of a stuck group) claims the group by compare-and-set and opens it: one root message,
one run, however many times Alertmanager repeats the notification. The crash and the two-replica storm tests
run on both stores (a SQLite file, then Postgres; skipped without Postgres).
"""

# ruff: noqa: ASYNC109  (the helpers take timeout= like the harness's waits)

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from handlers.alerts.threads import ThreadedAlerts
from tests.e2e.test_alerts_webhook_e2e import CONFIG, ENV, TOKEN, groups, payload, root
from tests.support.chaos import CHANNEL, Bots, poll, query, stop
from tests.support.fakes.anthropic import FakeAnthropic, reply, text
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env

WAIT = 60.0  # a generous bound on a loaded 2-core box: a dead process's claims lapse after 6 s


def roots(slack: FakeSlack, name: str = "DiskFull") -> list[Any]:
    return [m for m in slack.messages[CHANNEL] if m.thread_ts is None and name in m.text]


def root_posts(slack: FakeSlack) -> list[Any]:
    """chat.postMessage calls for a channel root (not in a thread) that Slack accepted."""
    return [c for c in slack.calls if c.method == "chat.postMessage" and c.ok and not c.args.get("thread_ts")]


@pytest.mark.slow
async def test_slack_refusing_the_root_post_is_retried_and_opens_one_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked at the disk.")))
    fake_slack.fail_next("chat.postMessage", error="internal_error", times=3)  # 500s: more than a client retries
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert (await env_post(env.ops.alerts.sources["webhook"].port, payload()))[0] == 200  # type: ignore[union-attr]
        ts = await root(env, timeout=20)
        await env.wait_final(CHANNEL, ts, timeout=20)
        assert len(roots(fake_slack)) == 1 and len(env.runs()) == 1 and env.runs()[0].thread_ts == ts
        refused = [c for c in fake_slack.calls if c.method == "chat.postMessage" and c.error == "internal_error"]
        assert len(refused) == 3


@pytest.mark.slow
async def test_slack_refusing_the_root_post_for_good_is_tried_again_by_the_recovery_pass(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked at the disk.")))
    fake_slack.fail_next("chat.postMessage", error="is_archived", times=1)  # not transient: the outbox gives up
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert env.ops.alerts is not None
        webhook = env.ops.alerts.sources["webhook"]
        assert isinstance(webhook, ThreadedAlerts)
        webhook.refused_backoff_s = 0.2  # instead of a minute
        assert (await env_post(webhook.port, payload()))[0] == 200
        ts = await root(env, timeout=20)
        await env.wait_final(CHANNEL, ts, timeout=20)
        assert len(roots(fake_slack)) == 1 and len(env.runs()) == 1
        [group] = groups(env)
        assert group.state == "started" and group.attempts == 2 and group.thread_ts == ts
        for _ in range(2):  # Alertmanager repeats: nothing new
            assert (await env_post(webhook.port, payload()))[0] == 200
        assert len(roots(fake_slack)) == 1 and len(env.runs()) == 1


async def env_post(port: int | None, body: dict[str, Any], *, timeout: float = WAIT) -> tuple[int, str]:
    """POST a notification as Alertmanager does, retrying while nothing listens yet (a process starting)."""
    assert port
    url = f"http://127.0.0.1:{port}/alertmanager"
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    async with asyncio.timeout(timeout):
        while True:
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(url, data=json.dumps(body).encode(), headers=headers) as r,
                ):
                    return r.status, await r.text()
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)  # not listening yet: Alertmanager retries too


# --- the real process, SIGKILLed ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AlertBots(Bots):
    """`opsloop run` processes with [alerts.webhook] on a fixed loopback port (the same across restarts)."""

    def __init__(self, tmp_path: Path, slack: FakeSlack, model: FakeAnthropic, db: str) -> None:
        self.port = free_port()
        slack.add_channel(CHANNEL, "incident")  # start-up sees the alert channel, with the bot in it
        super().__init__(
            tmp_path,
            slack,
            model,
            db=Path(db) if db.endswith(".db") else db,
            config_extra=f"""
[alerts.webhook]
listen = "127.0.0.1:{self.port}"
token_env = "OPSLOOP_ALERT_TOKEN"
channel = "{CHANNEL}"
max_runs_per_10_min = 3
""",
        )

    def env(self) -> dict[str, str]:
        return {**super().env(), **ENV}


@pytest.mark.parametrize("kill", ["before_root_post", "during_root_post"])
async def test_sigkill_between_the_200_and_the_root_post_then_restart_opens_one_thread_and_one_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, kill: str, db_url: str
) -> None:
    """before_root_post: Slack refuses every post, the process dies right after the 200 (the root never made it).
    during_root_post: the process dies the moment Slack has the root, before it sees the answer (the ts is not
    recorded): the restarted sender finds that post by its metadata and adopts it, never posting a second."""
    fake_anthropic.script(reply(text("Looked at web-03's disk.")))
    bots = AlertBots(tmp_path, fake_slack, fake_anthropic, db_url)
    killed: list[int] = []
    proc = await bots.start()

    def on_slack() -> None:
        if kill == "during_root_post" and not killed and root_posts(fake_slack):
            killed.append(proc.pid)
            proc.send_signal(signal.SIGKILL)

    fake_slack.watch(on_slack)
    try:
        if kill == "before_root_post":
            fake_slack.fail_next("chat.postMessage", error="internal_error", times=10_000)
        status, body = await env_post(bots.port, payload())
        assert (status, json.loads(body)["outcome"]) == (200, "started")
        if kill == "before_root_post":
            proc.send_signal(signal.SIGKILL)
            killed.append(proc.pid)
        await poll(lambda: killed, WAIT, "the kill at the root post")
        assert await proc.wait() == -signal.SIGKILL
        fake_slack._failures.pop("chat.postMessage", None)  # Slack takes posts again
        stored = query(bots.db, "SELECT state FROM alert_groups WHERE source = 'webhook'")
        assert [g["state"] for g in stored] == ["opening"]  # the 200 was for a stored group
        assert query(bots.db, "SELECT id FROM runs") == []
        proc = await bots.start()  # restart: the recovery pass opens it
        await poll(lambda: query(bots.db, "SELECT id FROM runs"), WAIT, "the alert's run")
        await fake_anthropic.wait_for_requests(1, timeout=WAIT)
        for _ in range(2):  # Alertmanager's repeats, after the restart: nothing new
            assert (await env_post(bots.port, payload()))[0] == 200
        [run] = await poll(
            lambda: query(bots.db, "SELECT * FROM runs WHERE status = 'finished'"), WAIT, "the run finished"
        )
        [message] = roots(fake_slack)
        assert run["thread_ts"] == message.ts and run["requester"] == ""
        assert len(query(bots.db, "SELECT id FROM runs")) == 1
        assert len(root_posts(fake_slack)) == 1  # one root reached Slack, ever
        assert [g["state"] for g in query(bots.db, "SELECT state FROM alert_groups")] == ["started"]
        assert len(fake_anthropic.requests) == 1
    finally:
        await stop(proc)


# --- the storm thread, two replicas on one store ------------------------------------------------------------
async def test_two_replicas_on_one_store_in_one_storm_open_one_storm_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, db_url: str
) -> None:
    """Two apps (two supervisors, two desks, two outbox senders) on one store (a SQLite file, then Postgres),
    Alertmanager's notifications spread over both webhooks: the storm thread is claimed in the store, so there
    is one, listing every drop once."""
    fake_anthropic.script(*(reply(text(f"Looked at alert {i}.")) for i in range(3)))
    shared = {**ENV, "OPSLOOP_DB": db_url}
    async with (
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as one,
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as two,
    ):
        ports = [one.ops.alerts.sources["webhook"].port, two.ops.alerts.sources["webhook"].port]  # type: ignore[union-attr]
        assert one.ops.store is not two.ops.store and one.settings.db_path == two.settings.db_path
        first = [
            env_post(ports[i % 2], payload(f"g-{i}", fingerprints=(f"f{i}",), name=f"Alert{i:02d}")) for i in range(3)
        ]  # the channel's three runs in ten minutes
        assert [r[0] for r in await asyncio.gather(*first)] == [200] * 3
        await fake_slack._wait(
            lambda: len([r for r in one.runs() if r.status.value == "finished"]) == 3 or None,
            20.0,
            lambda: "the three alert runs finished",
        )
        await one.ops.outbox.settle()
        await two.ops.outbox.settle()
        # The first storm post is rate limited for a second: whoever posts it is slow, and the other replica,
        # in the same storm, must still find the thread claimed (a per-process lock would open a second).
        fake_slack.fail_next("chat.postMessage", error="ratelimited", retry_after=1)
        storm = [
            env_post(ports[i % 2], payload(f"g-{i}", fingerprints=(f"f{i}",), name=f"Alert{i:02d}"))
            for i in range(3, 11)
        ]  # eight more, both replicas at once
        answers = await asyncio.gather(*storm)
        assert [json.loads(a[1])["outcome"] for a in answers] == ["dropped"] * 8

        def listings() -> list[Any]:
            return [m for m in fake_slack.messages[CHANNEL] if m.text.startswith("Not investigated")]

        await fake_slack._wait(lambda: len(listings()) >= 8 or None, 20.0, lambda: "8 alerts listed")
        storm_roots = [m for m in fake_slack.messages[CHANNEL] if "Alert storm" in m.text]
        assert len(storm_roots) == 1, f"{len(storm_roots)} storm threads"
        listed = sorted(m.text for m in one.thread(CHANNEL, storm_roots[0].ts)[1:])
        assert len(listed) == 8 and len(set(listed)) == 8 and len(listings()) == 8
        assert len([r for r in one.runs() if r.requester == ""]) == 3
        assert {g.state for g in groups(one)} == {"started", "dropped"}
