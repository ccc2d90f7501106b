"""Alertmanager's webhook, end to end: the real app's receiver on its own loopback port, posted to as
Alertmanager posts (payload version 4, bearer token), against FakeSlack and FakeAnthropic. The last test runs the whole
path: a real Prometheus rule fires on a loopback target and a real Alertmanager posts here
(tests/support/promserver.py).
"""

# ruff: noqa: ASYNC109  (the helpers take timeout= like the harness's waits)

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.cli import main
from tests.support import promserver
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack, app_home_opened_event
from tests.support.harness import BOB, CHANNEL, BotEnv, bot_env, text_of, user_turn

TOKEN = "alert-token-0123456789abcdef"
CONFIG = f"""
[alerts.webhook]
listen = "127.0.0.1:0"
token_env = "OPSLOOP_ALERT_TOKEN"
channel = "{CHANNEL}"
max_runs_per_10_min = 3
"""
ENV = {"OPSLOOP_ALERT_TOKEN": TOKEN}


def payload(
    group: str = '{}:{alertname="DiskFull"}',
    *,
    status: str = "firing",
    fingerprints: tuple[str, ...] = ("a1",),
    name: str = "DiskFull",
) -> dict[str, Any]:
    alerts = [
        {
            "status": status,
            "fingerprint": fp,
            "startsAt": "2026-12-01T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "labels": {"alertname": name, "severity": "critical", "instance": f"web-03:{i}", "job": "node"},
            "annotations": {
                "summary": "/var on web-03 is 97% full",
                "description": "disk almost full",
                "runbook_url": "https://runbooks.example.test/disk",
            },
            "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=disk_used_ratio+%3E+0.95&g0.tab=1",
        }
        for i, fp in enumerate(fingerprints)
    ]
    return {
        "version": "4",
        "groupKey": group,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "opsloop",
        "groupLabels": {"alertname": name},
        "commonLabels": {"alertname": name},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": alerts,
    }


async def post(env: BotEnv, body: bytes | dict[str, Any], *, token: str | None = TOKEN) -> tuple[int, str]:
    assert env.ops.alerts.sources["webhook"] is not None and env.ops.alerts.sources["webhook"].port
    url = f"http://127.0.0.1:{env.ops.alerts.sources['webhook'].port}/alertmanager"
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=headers) as r:
        return r.status, await r.text()


def groups(env: BotEnv) -> list[Any]:
    with env.ledger() as ledger:
        return [g for g in ledger.alert_groups() if g.source == "webhook"]


async def root(env: BotEnv, name: str = "DiskFull", timeout: float = 5.0) -> str:
    msg = await env.slack.wait_for_message(CHANNEL, lambda m: m.thread_ts is None and name in m.text, timeout=timeout)
    return msg.ts


async def test_a_new_group_opens_a_thread_starts_one_run_and_repeats_start_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(
            text("Checking the expression."), tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})
        ),
        reply(text("Restarted; resolved.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert await post(env, payload()) == (200, json.dumps({"status": "stored", "outcome": "started"}))
        ts = await root(env)
        shown = text_of(fake_slack.message(CHANNEL, ts))  # type: ignore[arg-type]
        assert "*DiskFull* (critical)" in shown and "/var on web-03 is 97% full" in shown
        assert "<https://runbooks.example.test/disk>" in shown and "<http://127.0.0.1:9090/graph?g0.expr=" in shown
        card = await env.card(CHANNEL, ts)  # the run started in the group's thread
        first = user_turn((await env.requests(1))[0], 0)[0]["text"]
        assert first.startswith("[alert from Alertmanager")
        for part in (
            "alertname=DiskFull",
            "severity=critical",
            "startsAt 2026-12-01T10:00:00Z",
            "summary: /var on web-03 is 97% full",
            "runbook_url: https://runbooks.example.test/disk",
            "expression: disk_used_ratio > 0.95",
        ):
            assert part in first
        for _ in range(3):  # Alertmanager's repeat_interval: same group, same firing set
            assert (await post(env, payload()))[0] == 200
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "nothing new" in m.text)
        assert len(env.runs()) == 1
        # resolved: posted in the thread and queued for the run like a reply (it reads it after the approval)
        assert (await post(env, payload(status="resolved")))[0] == 200
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "is resolved" in m.text)
        await env.approve(card, BOB)  # no human requester: an approver may approve
        await env.wait_final(CHANNEL, ts)
        second = (await env.requests(2))[1]
        said = " ".join(b.get("text", "") for b in user_turn(second))
        assert "[alert update from Alertmanager] Alertmanager group" in said and "is resolved" in said
        assert len([m for m in env.thread(CHANNEL, ts) if "nothing new" in m.text]) == 1  # noted once
        assert env.ops.alerts is not None
        counts = env.ops.alerts.counts
        assert counts[("webhook", "started")] == 1 and counts[("webhook", "deduplicated")] == 3


async def test_an_alert_run_is_named_by_its_alert_on_app_home_and_in_opsloop_runs(
    tmp_path: Path,
    fake_slack: FakeSlack,
    fake_anthropic: FakeAnthropic,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_anthropic.script(reply(text("/var is full of rotated nginx logs.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert (await post(env, payload()))[0] == 200
        ts = await root(env)
        await env.wait_final(CHANNEL, ts)
        [run] = env.runs()
        assert run.title == "DiskFull web-03 (firing)"  # the name, where it fires, its status (port dropped)
        assert run.task.startswith("Alertmanager group {}:{alertname=")  # the model still gets the whole group
        await env.send(app_home_opened_event(BOB))
        await fake_slack._wait(lambda: fake_slack.home_views.get(BOB), 5.0, lambda: "the Home tab")
        home = json.dumps(fake_slack.home_views[BOB]["blocks"])
        assert "DiskFull web-03 (firing) (<https://slack.com/archives/" in home
        assert "groupKey" not in home and "alertname=" not in home
    monkeypatch.setenv("OPSLOOP_DB", str(tmp_path / "opsloop.db"))
    capsys.readouterr()  # the bot's own log lines
    assert main(["runs"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(run.id)]
    assert " completed " in line and line.endswith("  DiskFull web-03 (firing)")


async def test_a_changed_firing_set_is_noted_and_reaches_the_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("Two instances now.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        await post(env, payload())
        ts = await root(env)
        card = await env.card(CHANNEL, ts)
        assert (await post(env, payload(fingerprints=("a1", "a2"))))[0] == 200
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "changed" in m.text)
        await env.approve(card, BOB)
        await env.wait_final(CHANNEL, ts)
        said = " ".join(b.get("text", "") for b in user_turn((await env.requests(2))[1]))
        assert "2 alert(s) firing:" in said
        assert len(env.runs()) == 1


async def test_the_resolved_update_says_how_many_alerts_fire_once_and_correctly(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("Resolved.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        await post(env, payload())
        ts = await root(env)
        card = await env.card(CHANNEL, ts)
        assert (await post(env, payload(status="resolved")))[0] == 200
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "is resolved" in m.text)
        await env.approve(card, BOB)
        await env.wait_final(CHANNEL, ts)
        said = " ".join(b.get("text", "") for b in user_turn((await env.requests(2))[1]))
        update = said[said.index("[alert update from Alertmanager]") :]
        assert update.startswith(
            '[alert update from Alertmanager] Alertmanager group {}:{alertname="DiskFull"} is resolved '
            "(receiver opsloop), "
            "0 alert(s) firing, 1 resolved:\n1. DiskFull: labels {"
        )
        assert update.count("alert(s) firing") == 1


def roots(env: BotEnv, name: str = "DiskFull") -> list[Any]:
    return [m for m in env.slack.messages[CHANNEL] if m.thread_ts is None and name in m.text]


def age(env: BotEnv, seconds: float) -> None:
    """Alertmanager last sent the group `seconds` earlier than it did (the re-open window counts from then)."""
    with env.ledger() as ledger:
        ledger.sql.execute("UPDATE alert_groups SET seen_at = seen_at - ? WHERE key NOT LIKE '%#%'", [seconds])


async def investigated(env: BotEnv, timeout: float = 10.0) -> str:
    """The ts of the first occurrence's thread, once its run answered."""
    assert (await post(env, payload()))[0] == 200
    ts = await root(env)
    await env.wait_final(CHANNEL, ts, timeout=timeout)
    return ts


async def reopened(env: BotEnv, old_ts: str, answers: list[tuple[int, str]], timeout: float = 10.0) -> str:
    """The re-fire opened a new thread linking `old_ts`'s, whose thread points to it; the new ts."""
    assert sorted(json.loads(a[1])["outcome"] for a in answers)[0] == "reopened"
    new = await env.slack.wait_for_message(
        CHANNEL, lambda m: m.thread_ts is None and m.ts != old_ts and "DiskFull" in m.text, timeout=timeout
    )
    old_link = f"https://slack.com/archives/{CHANNEL}/p{old_ts.replace('.', '')}"
    new_link = f"https://slack.com/archives/{CHANNEL}/p{new.ts.replace('.', '')}"
    assert f"This group fired before: <{old_link}|the previous thread>." in new.text
    await env.slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == old_ts and new_link in m.text, timeout=timeout)
    await env.wait_final(CHANNEL, new.ts, timeout=timeout)
    return new.ts


async def test_a_group_firing_again_within_the_reopen_window_after_its_run_ended_continues_its_thread(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var is full of rotated logs.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        ts = await investigated(env)
        age(env, 4 * 3600)  # Alertmanager's repeat_interval later: within the default five hours
        assert (await post(env, payload())) == (200, json.dumps({"status": "stored", "outcome": "repeat"}))
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == ts and "nothing new" in m.text)
        assert len(env.runs()) == 1 and len(roots(env)) == 1 and len(groups(env)) == 1


async def test_a_group_firing_again_after_the_reopen_window_starts_a_new_run_in_a_new_thread_linking_the_old(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var is full of rotated logs.")), reply(text("Full again: logrotate broke.")))
    config = CONFIG + "reopen_after_minutes = 60\n"
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config, env_extra=ENV) as env:
        old_ts = await investigated(env)
        age(env, 61 * 60)
        new_ts = await reopened(env, old_ts, [await post(env, payload())])
        assert (await post(env, payload()))[0] == 200  # Alertmanager sends it again: nothing new
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == new_ts and "nothing new" in m.text)
        old_run, new_run = sorted(env.runs(), key=lambda r: r.created_at)
        assert (old_run.thread_ts, new_run.thread_ts, new_run.requester) == (old_ts, new_ts, "")
        first = user_turn((await env.requests(2))[1], 0)[0]["text"]
        assert first.startswith("[alert from Alertmanager") and "alertname=DiskFull" in first
        old, new = sorted(groups(env), key=lambda g: g.occurrence)
        key = 'am:{}:{alertname="DiskFull"}'
        assert (old.key, old.run_id, old.occurrence) == (f"{key}#1", old_run.id, 1)
        assert (new.key, new.run_id, new.occurrence, new.previous) == (key, new_run.id, 2, f"{key}#1")
        assert len(roots(env)) == 2 and len(env.runs()) == 2
        assert env.ops.alerts is not None and env.ops.alerts.counts[("webhook", "started")] == 2


async def test_a_group_firing_again_after_it_resolved_starts_a_new_run_linking_the_old(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("/var is full of rotated logs.")), reply(text("Full again.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        old_ts = await investigated(env)
        assert (await post(env, payload(status="resolved")))[0] == 200
        await fake_slack.wait_for_message(CHANNEL, lambda m: m.thread_ts == old_ts and "is resolved" in m.text)
        await reopened(env, old_ts, [await post(env, payload())])  # minutes later, well inside the window
        assert len(env.runs()) == 2 and len(roots(env)) == 2


async def test_a_group_resolved_and_firing_again_while_its_run_goes_on_is_told_to_that_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("It flapped.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        await post(env, payload())
        ts = await root(env)
        card = await env.card(CHANNEL, ts)
        assert json.loads((await post(env, payload(status="resolved")))[1])["outcome"] == "resolved"
        assert json.loads((await post(env, payload()))[1])["outcome"] == "changed"
        await env.approve(card, BOB)
        await env.wait_final(CHANNEL, ts)
        assert len(env.runs()) == 1 and len(roots(env)) == 1


async def test_two_replicas_receiving_the_same_re_fire_start_one_new_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, db_url: str
) -> None:
    """Two apps on one store (a SQLite file, then Postgres), Alertmanager sending the re-fire to both, twice."""
    fake_anthropic.script(reply(text("/var is full of rotated logs.")), reply(text("Full again.")))
    shared = {**ENV, "OPSLOOP_DB": db_url}
    async with (
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as one,
        bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=shared) as two,
    ):
        assert one.ops.store is not two.ops.store and one.settings.db_path == two.settings.db_path
        old_ts = await investigated(one)
        age(one, 6 * 3600)
        answers = await asyncio.gather(*(post(env, payload()) for env in (one, two, one, two)))
        assert sorted(json.loads(a[1])["outcome"] for a in answers) == ["reopened", "repeat", "repeat", "repeat"]
        await reopened(one, old_ts, answers, timeout=20)
        await one.ops.outbox.settle()
        await two.ops.outbox.settle()
        assert len(one.runs()) == 2 and len(roots(one)) == 2
        assert len([m for m in one.thread(CHANNEL, old_ts) if "fired again" in m.text]) == 1


async def test_wrong_or_missing_token_oversized_or_malformed_bodies_store_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert (await post(env, payload(), token=None))[0] == 401
        assert (await post(env, payload(), token="wrong"))[0] == 401
        assert (await post(env, payload(), token=TOKEN + "x"))[0] == 401
        big = payload()
        big["alerts"][0]["annotations"]["description"] = "x" * (2 << 20)
        assert (await post(env, big))[0] == 413
        assert (await post(env, b"{not json"))[0] == 400
        assert (await post(env, {**payload(), "version": "3"}))[0] == 400
        no_fp = payload()
        del no_fp["alerts"][0]["fingerprint"]
        assert (await post(env, no_fp))[0] == 400
        bad_labels = payload()
        bad_labels["alerts"][0]["labels"] = {"alertname": 7}
        assert (await post(env, bad_labels))[0] == 400
        assert groups(env) == [] and env.runs() == []
        assert [m for m in fake_slack.messages[CHANNEL]] == []


async def test_json_nested_150000_deep_is_a_400_not_a_500_with_a_traceback(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, capfd: pytest.CaptureFixture[str]
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        status, body = await post(env, b"[" * 150_000 + b"]" * 150_000)
        assert (status, json.loads(body)) == (400, {"error": "body nests deeper than 64 levels"})
        deep = payload()
        deep["alerts"][0]["annotations"]["description"] = json.loads("[" * 70 + "]" * 70)  # inside a real payload
        assert await post(env, deep) == (400, json.dumps({"error": "body nests deeper than 64 levels"}))
        shallow = payload()
        shallow["commonAnnotations"] = {"note": "[[[[" * 100}  # brackets inside a string don't nest
        assert (await post(env, shallow))[0] == 200
    logged = capfd.readouterr()
    assert "RecursionError" not in logged.out + logged.err and "Traceback" not in logged.out + logged.err


async def test_two_concurrent_deliveries_of_one_group_start_one_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        answers = await asyncio.gather(*(post(env, payload()) for _ in range(2)))
        assert [a[0] for a in answers] == [200, 200]
        assert sorted(json.loads(a[1])["outcome"] for a in answers) == ["repeat", "started"]
        ts = await root(env)
        await env.wait_final(CHANNEL, ts)
        assert len(env.runs()) == 1 and len(groups(env)) == 1
        assert len([m for m in fake_slack.messages[CHANNEL] if m.thread_ts is None]) == 1


async def test_a_storm_of_12_groups_starts_3_runs_lists_the_rest_in_one_thread_and_a_mention_still_runs(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(*(reply(text(f"Looked at alert {i}.")) for i in range(4)))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        storm = [post(env, payload(f"group-{i}", fingerprints=(f"fp{i}",), name=f"Alert{i:02d}")) for i in range(12)]
        results = await asyncio.gather(*storm, env.mention("web-03 is slow, please look"))
        assert all(r[0] == 200 for r in results[:12])
        channel, mention_ts = results[12]
        await env.wait_final(channel, mention_ts)  # a mention during the storm gets its run
        stored = groups(env)
        assert len(stored) == 12
        assert sorted(g.state for g in stored).count("dropped") == 9
        storm_root = await fake_slack.wait_for_message(CHANNEL, lambda m: "Alert storm" in m.text)
        await fake_slack._wait(
            lambda: len(env.thread(CHANNEL, storm_root.ts)) >= 10 or None,
            5.0,
            lambda: "9 alerts listed in the storm thread",
        )
        listed = [m.text for m in env.thread(CHANNEL, storm_root.ts)[1:]]
        assert len(listed) == 9 and all(t.startswith("Not investigated: Alert") for t in listed)
        assert len([m for m in fake_slack.messages[CHANNEL] if "Alert storm" in m.text]) == 1
        alert_runs = [r for r in env.runs() if r.requester == ""]
        assert len(alert_runs) == 3
        assert env.ops.alerts is not None and env.ops.alerts.counts[("webhook", "dropped")] == 9


async def test_a_store_failure_answers_503_and_the_retry_succeeds(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("Looked.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        env.ops.store.retry_seconds = 0.3
        other = sqlite3.connect(env.settings.db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock: the store can't write
        try:
            status, _ = await post(env, payload())
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert status == 503
        assert groups(env) == [] and fake_slack.messages[CHANNEL] == []
        assert (await post(env, payload()))[0] == 200  # Alertmanager retries
        ts = await root(env)
        await env.wait_final(CHANNEL, ts)
        assert len(env.runs()) == 1


async def until(check: Any, what: str, timeout: float = 30.0) -> None:
    """Poll observable state (the desk's counts) until `check()` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)  # polling state that has no change notification


@pytest.mark.skipif(promserver.missing() is not None, reason=str(promserver.missing()))
async def test_the_whole_path_a_real_rule_fires_through_real_alertmanager_once_repeats_and_resolves(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        reply(text("Checking web-03."), tool_use("restart_service", {"host": "web-03", "unit": "nginx.service"})),
        reply(text("Restarted nginx; /var recovered.")),
    )
    target = await promserver.Target(value=0.99).start()
    try:
        async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
            assert env.ops.alerts is not None and env.ops.alerts.sources["webhook"] is not None
            desk = env.ops.alerts
            receivers = f"""- name: opsloop
  webhook_configs:
  - url: http://127.0.0.1:{env.ops.alerts.sources["webhook"].port}/alertmanager
    send_resolved: true
    http_config:
      authorization: {{type: Bearer, credentials: {TOKEN}}}
"""
            async with promserver.prom_stack(target, receivers=receivers, receiver="opsloop"):
                ts = await root(env, timeout=60)
                card = await env.card(CHANNEL, ts, timeout=10)
                first = user_turn((await env.requests(1))[0], 0)[0]["text"]
                assert "alertname=DiskFull" in first and "expression: test_disk_used_ratio > 0.95" in first
                await until(lambda: desk.counts[("webhook", "deduplicated")] >= 2, "two repeats from Alertmanager")
                assert len(env.runs()) == 1 and desk.counts[("webhook", "started")] == 1
                target.value = 0.5  # the metric recovers
                await fake_slack.wait_for_message(
                    CHANNEL, lambda m: m.thread_ts == ts and "is resolved" in m.text, timeout=60
                )
                await env.approve(card, BOB)
                await env.wait_final(CHANNEL, ts)
                said = " ".join(b.get("text", "") for b in user_turn((await env.requests(2))[1]))
                assert "[alert update from Alertmanager]" in said and "is resolved" in said
                assert len(env.runs()) == 1
                assert len([m for m in env.thread(CHANNEL, ts) if "nothing new" in m.text]) == 1
    finally:
        await target.close()


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        (
            "labels",
            "\ud800",
            "alerts[0].labels.team: contains a lone UTF-16 surrogate (U+D800), which is not valid Unicode",
        ),
        ("annotations", "disk \x00 full", "alerts[0].annotations.team: contains a NUL character"),
    ],
)
async def test_a_payload_the_store_cant_hold_is_a_400_naming_the_field_not_a_503_alertmanager_retries(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, where: str, value: str, said: str
) -> None:
    fake_anthropic.script(reply(text("Looked; nothing to do.")))
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        bad = payload()
        bad["alerts"][0][where]["team"] = value
        status, body = await post(env, json.dumps(bad).encode())  # json.dumps escapes the surrogate as \ud800
        assert (status, json.loads(body)) == (400, {"error": said})
        assert groups(env) == [] and env.runs() == []
        assert (await post(env, payload()))[0] == 200  # the store still takes a good one
        await env.wait_final(CHANNEL, await root(env))
