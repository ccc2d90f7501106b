"""`POST /changes` through the real app (its own loopback port, bearer token, bounded body) and the whole path
of an alert run that asks what changed: an Alertmanager alert → recent_changes (a stored CI event, a real git
repository, the fake kube-apiserver's revisions) → the model proposes k8s_rollout_undo to the revision the
timeline named → the card."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.test_alerts_webhook_e2e import ENV as ALERT_ENV
from tests.e2e.test_alerts_webhook_e2e import payload as alert_payload
from tests.e2e.test_alerts_webhook_e2e import post as post_alert
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import CHANNEL, BotEnv, bot_env, result_text, text_of, tool_results, user_turn
from tests.tools.changes.test_changes_git import commit, git
from tests.tools.changes.test_changes_k8s import NS, world
from tools.changes.store import changes_between, sweep_changes
from tools.changes.webhook import ChangeWebhook

TOKEN = "changes-token-0123456789abcdef"
CONFIG = """
[changes]
retention_days = 30

[changes.webhook]
listen = "127.0.0.1:0"
token_env = "OPSLOOP_CHANGES_TOKEN"
"""
ENV = {"OPSLOOP_CHANGES_TOKEN": TOKEN}
EVENT = {
    "id": "gha-123456",
    "at": "2026-12-02T14:08:00Z",
    "source": "github-actions",
    "service": "checkout-api",
    "environment": "prod",
    "summary": "deploy checkout-api 1.43",
    "url": "https://ci.example.com/runs/123456",
    "labels": {"team": "payments"},
}


def webhook(env: BotEnv) -> ChangeWebhook:
    """The changes reach's service, as the app started it."""
    (found,) = [s for s in env.ops.tools.services if isinstance(s, ChangeWebhook)]
    return found


async def post(
    env: BotEnv, body: bytes | Any, *, token: str | None = TOKEN, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    port = webhook(env).port
    assert port
    url = f"http://127.0.0.1:{port}/changes"
    sent = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {token}"} if token else {}),
        **(headers or {}),
    }
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=sent) as r:
        return r.status, await r.json(content_type=None)


def stored(env: BotEnv) -> list[Any]:
    with env.ledger() as ledger:
        return changes_between(ledger, 0, 1e12)


async def test_auth_size_and_validation_refuse_and_store_nothing(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert (await post(env, EVENT, token=None))[0] == 401
        assert (await post(env, EVENT, token="wrong"))[0] == 401
        big = json.dumps([EVENT] * 1).encode() + b" " * (1 << 20)
        assert (await post(env, big, token=None))[0] == 413  # the size is checked first, before the token
        assert (await post(env, big))[0] == 413
        assert (await post(env, b"{not json"))[0] == 400
        bad = [EVENT, {**EVENT, "id": "b"}, {**EVENT, "id": "c", "at": "2026-12-02T14:08:00"}]
        status, answer = await post(env, bad)
        assert status == 400 and "[2].at" in answer["error"] and any(p.startswith("[2].at") for p in answer["problems"])
        status, answer = await post(env, {"at": "2026-12-02T14:08:00Z"})
        assert status == 400 and "summary: required" in answer["error"]
        assert stored(env) == []  # a refused list stores none of it, not even its good events


async def test_events_are_stored_once_per_id_the_first_copy_wins(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG, env_extra=ENV) as env:
        assert await post(env, EVENT) == (200, {"status": "stored", "events": 1, "new": 1})
        # stored by the time the 200 arrived: a separate connection to the database sees it
        (first,) = stored(env)
        assert (first.id, first.summary, first.service, dict(first.labels)) == (
            "gha-123456",
            "deploy checkout-api 1.43",
            "checkout-api",
            {"team": "payments"},
        )
        again = [
            {**EVENT, "summary": "a re-sent copy"},
            {**EVENT, "id": "gha-2", "summary": "deploy 1.44", "at": "2026-12-02T15:00:00+01:00"},
        ]
        assert await post(env, again) == (200, {"status": "stored", "events": 2, "new": 1})
        rows = {r.id: r for r in stored(env)}
        assert rows["gha-123456"].summary == "deploy checkout-api 1.43"  # the first copy won
        assert rows["gha-2"].at == datetime(2026, 12, 2, 14, 0, tzinfo=UTC).timestamp()  # its zone applied
        assert await webhook(env).sweep() == 0  # within retention: kept
    with env.ledger() as ledger:  # 31 days on, the sweep drops them
        assert sweep_changes(ledger, 30, now=ledger.sql.now() + 31 * 86400) == 2


@pytest.mark.processes  # the real git
async def test_an_alert_run_asks_what_changed_and_proposes_the_rollback_to_the_named_revision(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    world(fake_kube)  # deployment api: revision 3 (api:1.42) rolled out 12 min ago; 2 ran api:1.41
    repo = tmp_path / "deploy-config"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "bump api to 1.42", datetime.now(UTC) - timedelta(minutes=13), {"k8s/api.yaml": "image: 1.42"})
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    config = (
        f'{CONFIG}\n[[changes.git]]\nname = "deploy-config"\npath = {json.dumps(str(repo))}\n\n'
        f'[[kubernetes.clusters]]\nname = "prod"\nkubeconfig = {json.dumps(str(kc))}\nnamespaces = ["web"]\n\n'
        f'[alerts.webhook]\nlisten = "127.0.0.1:0"\ntoken_env = "OPSLOOP_ALERT_TOKEN"\nchannel = "{CHANNEL}"\n'
    )
    fake_anthropic.script(
        reply(text("Checking what changed before the alert."), tool_use("recent_changes", {"namespace": NS})),
        reply(
            text("api:1.42 went out 12 min before; rolling back to revision 2."),
            tool_use("k8s_rollout_undo", {"name": "api", "revision": 2, "namespace": NS}),
        ),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config, env_extra={**ENV, **ALERT_ENV}) as env:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (await post(env, {**EVENT, "at": now, "service": "api", "summary": "deploy api 1.42"}))[0] == 200
        status, _ = await post_alert(env, alert_payload(name="ApiErrors"))
        assert status == 200
        root = await env.slack.wait_for_message(
            CHANNEL, lambda m: m.thread_ts is None and "ApiErrors" in m.text, timeout=10
        )
        card = await env.card(CHANNEL, root.ts, timeout=30)
        assert "rollout undo deployment web/api to revision 2 (from 3) on cluster prod" in text_of(card)
        assert "api:1.42 → api:1.41" in text_of(card)
        assert "recent_changes" in json.dumps(fake_anthropic.requests[0].body["tools"])
        timeline = result_text(tool_results(fake_anthropic.requests[1])[0])
        assert "kubernetes · prod/web deployment/api · image api:1.41 → api:1.42, revision 3" in timeline
        assert "git · deploy-config (main) · commit by alice: bump api to 1.42" in timeline
        assert "webhook · api (prod) · deploy api 1.42 (from github-actions)" in timeline
        assert "Investigate this alert" in json.dumps(user_turn(fake_anthropic.requests[0]))
        assert fake_kube.writes() == []  # only the dry run: the card waits for a person


@pytest.mark.processes  # the real `opsloop run`, SIGKILLed
async def test_an_event_answered_200_survives_a_sigkill_right_after(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    import asyncio
    import signal

    from tests.handlers.test_alerts_recovery import free_port
    from tests.support.chaos import Bots, poll, query, stop

    port = free_port()

    class ChangeBots(Bots):
        def env(self) -> dict[str, str]:
            return {**super().env(), **ENV}

    bots = ChangeBots(
        tmp_path,
        fake_slack,
        fake_anthropic,
        db=tmp_path / "opsloop.db",
        config_extra=CONFIG.replace("127.0.0.1:0", f"127.0.0.1:{port}"),
    )
    url = f"http://127.0.0.1:{port}/changes"
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    proc = await bots.start()
    try:
        async with asyncio.timeout(30):
            while True:  # the process is starting: retry until it listens, as a CI job would
                try:
                    async with (
                        aiohttp.ClientSession() as session,
                        session.post(url, data=json.dumps(EVENT).encode(), headers=headers) as r,
                    ):
                        status = r.status
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
        assert status == 200
        proc.send_signal(signal.SIGKILL)  # the moment the 200 arrived
        assert await proc.wait() == -signal.SIGKILL
        rows = query(bots.db, "SELECT id, summary FROM change_events")
        assert [(r["id"], r["summary"]) for r in rows] == [("gha-123456", "deploy checkout-api 1.43")]
        proc = await bots.start()  # and the restarted process reads it back
        await poll(lambda: query(bots.db, "SELECT id FROM change_events"), 30, "the stored event")
    finally:
        await stop(proc)
