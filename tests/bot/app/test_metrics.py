"""/metrics and /healthz: the real app against the fakes, scraped over HTTP and parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from bot.app.health import serve_metrics
from bot.app.metrics import MetricsPortError, MetricsServer
from tests.conftest import API_KEY
from tests.support.chaos import poll
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.bedrock import FakeBedrock
from tests.support.fakes.slack import FakeSlack, mention_event
from tests.support.fakes.vertex import FakeVertex
from tests.support.harness import BOB, BotEnv, answered, bot_env

ROOT = Path(__file__).resolve().parents[3]
TASK = "web-03 is paging: disk full on /var, please fix"
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def scrape(server: MetricsServer) -> str:
    status, body = await get(f"http://127.0.0.1:{server.port}/metrics")
    assert status == 200
    return body


async def healthz(server: MetricsServer) -> tuple[int, dict[str, Any]]:
    status, body = await get(f"http://127.0.0.1:{server.port}/healthz")
    return status, json.loads(body)


def value(exposition: str, sample: str, **labels: str) -> float | None:
    """The one sample called `sample` whose labels include `labels`; None when there is none."""
    found = [
        s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    ]
    assert len(found) <= 1, f"{sample}{labels} matches {len(found)} samples"
    return found[0] if found else None


def total(exposition: str, sample: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    )


async def with_metrics(env: BotEnv) -> MetricsServer:
    """Serve /metrics on a free loopback port next to the harness's bot (closed with it)."""
    env.ops.metrics = await serve_metrics(env.ops, host="127.0.0.1", port=0)
    return env.ops.metrics


def incident_script() -> list[Any]:
    return [
        reply(text("Checking disk usage on web-03."), tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("list_large_files", {"host": "web-03", "path": "var"})),  # not absolute: a tool error
        reply(text("212 rotated nginx logs fill /var."), tool_use("clean_logs", CLEAN)),
        *answered(reply(text("Freed 19.8 GB on web-03."))),
    ]


async def test_an_incident_is_counted(tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(*incident_script())
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        channel, ts = await env.mention(TASK)
        card = await env.card(channel, ts)
        waiting = await scrape(server)
        assert value(waiting, "opsloop_pending_approvals") == 1
        assert value(waiting, "opsloop_active_runs", status="waiting_approval") == 1
        assert value(waiting, "opsloop_runs_total", stop_reason="completed") == 0

        await env.approve(card, BOB)
        await env.wait_final(channel, ts)
        await env.wait_idle()  # every delivery acked: its ack latency is observed
        done = await scrape(server)

    model = env.settings.model.primary
    assert value(done, "opsloop_runs_total", stop_reason="completed") == 1
    assert total(done, "opsloop_runs_total") == 1
    assert {
        t: value(done, "opsloop_tool_calls_total", tool=t) for t in ("check_disk", "list_large_files", "clean_logs")
    } == {"check_disk": 1, "list_large_files": 1, "clean_logs": 1}
    assert value(done, "opsloop_tool_errors_total", tool="list_large_files") == 1
    assert value(done, "opsloop_tool_errors_total", tool="check_disk") is None
    prompt = [
        value(done, "opsloop_tokens_total", model=model, kind=k) or 0 for k in ("input", "cache_read", "cache_write")
    ]
    assert sum(prompt) > 0  # every prompt token is counted under one of the three (cached prefixes: not as input)
    assert value(done, "opsloop_tokens_total", model=model, kind="output") > 0
    assert value(done, "opsloop_cost_usd_total", model=model) > 0
    assert value(done, "opsloop_model_latency_seconds_count", model=model) == 5  # the answer comes twice (the ask)
    assert value(done, "opsloop_tool_latency_seconds_count", tool="clean_logs") == 1
    assert value(done, "opsloop_pending_approvals") == 0
    assert total(done, "opsloop_active_runs") == 0
    assert value(done, "opsloop_approval_wait_seconds_count", outcome="approved") == 1
    assert value(done, "opsloop_approval_wait_seconds_count", outcome="denied") == 0
    assert value(done, "opsloop_event_ack_seconds_count", type="app_mention") == 1
    assert value(done, "opsloop_event_ack_seconds_count", type="block_actions") == 1


async def test_each_bot_has_its_own_registry_and_stops_observing_when_closed(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        assert total(await scrape(server), "opsloop_runs_total") == 0  # nothing from earlier tests leaks in
        assert value(await scrape(server), "python_info") is None  # not the global default registry
    assert server.metrics.processor not in structlog.get_config()["processors"]  # closed with the bot


async def anthropic_probed(env: BotEnv, *providers: str) -> None:
    """Start-up probes each model provider in the background: wait until every one has answered."""
    assert env.ops.watcher is not None
    await asyncio.wait_for(env.ops.watcher, 10)
    assert env.ops.reached == set(providers or ["anthropic"])


async def test_healthz_is_200_when_slack_and_the_store_are_fine(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        await anthropic_probed(env)
        assert await healthz(server) == (200, {"status": "ok", "slack": "ok", "store": "ok", "anthropic": "ok"})


BEDROCK = """
[model]
provider = "bedrock"
primary = "claude-sonnet-5-5"
fallbacks = []
[model.bedrock]
region = "us-east-1"
"""
VERTEX = """
[model]
primary = "vertex:claude-sonnet-5-5"
fallbacks = ["claude-sonnet-5-5"]
[model.vertex]
project = "opsloop-test"
region = "us-east5"
"""


async def test_healthz_has_a_bedrock_line_probed_through_the_signed_client_runs_use(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock
) -> None:
    env_extra = {"ANTHROPIC_BEDROCK_BASE_URL": fake_bedrock.base_url, "ANTHROPIC_API_KEY": ""}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, BEDROCK, env_extra=env_extra) as env:
        server = await with_metrics(env)
        await anthropic_probed(env, "bedrock")
        assert await healthz(server) == (200, {"status": "ok", "slack": "ok", "store": "ok", "bedrock": "ok"})
    assert fake_bedrock.requests == []  # the probe is no model request
    assert fake_anthropic.requests == []


async def test_healthz_has_a_line_for_every_provider_of_the_chain_vertex_too(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_vertex: FakeVertex
) -> None:
    env_extra = {"ANTHROPIC_VERTEX_BASE_URL": f"{fake_vertex.base_url}/v1"}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, VERTEX, env_extra=env_extra) as env:
        server = await with_metrics(env)
        await anthropic_probed(env, "vertex", "anthropic")
        assert await healthz(server) == (
            200,
            {"status": "ok", "slack": "ok", "store": "ok", "vertex": "ok", "anthropic": "ok"},
        )
    assert fake_vertex.tokens_minted == 0  # the token is the first run's to fetch (once): the probe asks no model
    assert fake_vertex.requests == []


async def test_healthz_says_why_a_provider_can_not_be_reached(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_bedrock: FakeBedrock
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env_extra = {"ANTHROPIC_BEDROCK_BASE_URL": f"http://127.0.0.1:{port}", "ANTHROPIC_API_KEY": ""}
    async with bot_env(tmp_path, fake_slack, fake_anthropic, BEDROCK, env_extra=env_extra) as env:
        server = await with_metrics(env)
        await poll(lambda: env.ops.down.get("bedrock"), timeout=10, what="the bedrock probe's first failure")
        status, checks = await healthz(server)
    assert status == 200  # shown, not unhealthy
    assert checks["bedrock"].startswith(f"cannot connect to 127.0.0.1:{port} (connection refused); retrying")


async def test_what_healthz_serves_is_redacted(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """A probe's error text is served as it came (a provider's SDK may quote a header or a URL): it is redacted at
    /healthz, the boundary where it leaves the process."""
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        await anthropic_probed(env)
        env.ops.down["anthropic"] = "probe failed: AuthError: bad key sk-ant-api03-" + "A" * 40
        _, checks = await healthz(server)
    assert checks["anthropic"].startswith("probe failed: AuthError: bad key ")
    assert "sk-ant-api03-" + "A" * 40 not in checks["anthropic"]


async def test_healthz_is_503_when_the_store_is_not_writable(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        await env.ops.store.close()
        status, body = await healthz(server)
        assert (status, body["status"], body["slack"]) == (503, "unhealthy", "ok")
        assert body["store"] == "the store is not writable: RuntimeError: store is not open"


async def test_healthz_is_503_when_socket_mode_is_down(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
        server = await with_metrics(env)
        assert env.ops.socket is not None
        await anthropic_probed(env)
        await env.ops.socket.close_async()
        assert await healthz(server) == (
            503,
            {"status": "unhealthy", "slack": "Socket Mode is not connected", "store": "ok", "anthropic": "ok"},
        )


async def test_opsloop_run_serves_metrics_on_the_port_it_is_given(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(reply(text("web-03: /var is at 100%, mostly rotated nginx logs.")))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        "OPSLOOP_DB": str(tmp_path / "opsloop.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.app.cli",
        "run",
        "--metrics-port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    logs: list[dict[str, Any]] = []
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    probed = asyncio.Event()

    async def read_logs() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            if line.startswith(b"{"):
                logs.append(json.loads(line))
                if logs[-1].get("event") == "metrics.listening" and not listening.done():
                    listening.set_result(int(logs[-1]["port"]))
                if logs[-1].get("event") == "anthropic.reachable":
                    probed.set()

    reader = asyncio.create_task(read_logs())
    try:
        port = await asyncio.wait_for(listening, 30)
        await fake_slack.wait_connected(timeout=30)
        mention = mention_event("C0INCIDENT", "U0ALICE", "web-03 is out of disk")
        await fake_slack.send_event(mention)
        await fake_slack.wait_for_message(
            "C0INCIDENT",
            where=lambda m: m.thread_ts == mention["ts"] and "rotated nginx logs" in (m.text or ""),
            timeout=30,
        )
        await asyncio.wait_for(probed.wait(), 30)  # start-up's reachability probe of the Messages API answered
        status, body = await get(f"http://127.0.0.1:{port}/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok", "slack": "ok", "store": "ok", "anthropic": "ok"})
        _, exposition = await get(f"http://127.0.0.1:{port}/metrics")
        assert value(exposition, "opsloop_runs_total", stop_reason="completed") == 1
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await asyncio.wait_for(reader, 30)
    assert proc.returncode == 0


async def test_a_metrics_port_in_use_is_one_clear_error(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        async with bot_env(tmp_path, fake_slack, fake_anthropic) as env:
            with pytest.raises(MetricsPortError, match=rf"^cannot serve metrics on 127\.0\.0\.1:{port}: "):
                await serve_metrics(env.ops, host="127.0.0.1", port=port)
            assert env.ops.metrics is None
    finally:
        taken.close()
