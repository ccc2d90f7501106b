"""Issue 21's benchmark: Alertmanager's webhook under a burst, while the runs it starts are starting.

    python -m bench --only alerts   # just this (section 12), spliced into the existing RESULTS.md

`opsloop run` as a child process (bench/product.py) with [alerts.webhook] on a loopback port, against the fake
Slack and the fake Messages API in this process. The scripted model answers from each request: one tool call
(df), then the answer, given again when opsloop asks for update_summary, so every alert run makes three
model requests and posts its root, its status and
its answer while the other notifications of the burst arrive.

- idle: one new group at a time (the previous one's run finished), `--repeats` times;
- burst: 50 new groups POSTed at once (one connection each, as 50 Alertmanager notifications), `--bursts` times.

Per notification: ack latency (from sending the POST to reading its 200: the group is stored by then, with its
root post in the outbox), and time from the POST to the run's first model request (the fake stamps each
request's arrival: root posted in Slack, run created, first turn built and sent). Medians and p99 over every
notification; the burst/idle ratios compare numbers from this same invocation.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from bench import product
from tests.support.fakes.anthropic import Reply, reply, text, tool_use

Row = Callable[..., None]  # Report.row(name, result, target, ok, miss="")
Section = Callable[[str, str], None]
BURST = 50
TOKEN = "bench-alert-token-0123456789"
TOKEN_ENV = "BENCH_ALERT_TOKEN"  # passed through to the child (bench/product.py keeps every non-OPSLOOP_ variable)
GROUP_RE = re.compile(r"Alertmanager group (\S+) is firing")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def notification(group: str) -> dict[str, Any]:
    """Alertmanager's webhook payload (version 4) for one new firing group."""
    return {
        "version": "4",
        "groupKey": group,
        "status": "firing",
        "receiver": "opsloop",
        "truncatedAlerts": 0,
        "groupLabels": {"alertname": "DiskFull"},
        "commonLabels": {"alertname": "DiskFull"},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": [
            {
                "status": "firing",
                "fingerprint": f"fp-{group}",
                "startsAt": "2026-12-01T10:00:00Z",
                "labels": {"alertname": "DiskFull", "severity": "critical", "instance": f"{group}:9100"},
                "annotations": {"summary": f"/var on {group} is 97% full"},
                "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=disk_used_ratio+%3E+0.95",
            }
        ],
    }


class Bench:
    def __init__(self, p: product.Product, port: int) -> None:
        self.p, self.url = p, f"http://127.0.0.1:{port}/alertmanager"
        self.first_request: dict[str, float] = {}  # group key -> when its run's first model request arrived
        self.serial = 0

    def answer(self, body: dict[str, Any]) -> Reply:
        """The scripted model: one tool call, then the answer (again when asked for the summary); stamps each run's
        first request."""
        arrived = time.perf_counter()
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if done == 0:
            first = body["messages"][0]["content"]
            said = first if isinstance(first, str) else " ".join(b.get("text", "") for b in first)
            if m := GROUP_RE.search(said):
                self.first_request.setdefault(m.group(1), arrived)
            return reply(tool_use("df", {"host": "web-03"}))
        return reply(text(f"{product.ANSWER}: the alert's disk."))

    async def post(self, session: aiohttp.ClientSession, group: str) -> tuple[float, float]:
        """(sent at, ack ms) for one notification."""
        data = json.dumps(notification(group)).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        sent = time.perf_counter()
        async with session.post(self.url, data=data, headers=headers) as r:
            await r.read()
            assert r.status == 200, f"{group}: HTTP {r.status}"
        return sent, (time.perf_counter() - sent) * 1000

    async def round(self, session: aiohttp.ClientSession, n: int) -> tuple[list[float], list[float]]:
        """n new groups at once; (ack ms each, POST -> first model request ms each), once every run answered."""
        groups = [f"g{self.serial + i:05d}" for i in range(n)]
        self.serial += n
        answered = len(self.p._final_calls())
        # a tool call, the answer, and the same answer again when opsloop asks for update_summary
        self.p.model.script(*[self.answer for _ in range(3 * n)])
        results = await asyncio.gather(*(self.post(session, g) for g in groups))
        await self.p.wait_answers(answered + n)
        sent = dict(zip(groups, (s for s, _ in results), strict=True))
        return [a for _, a in results], [(self.first_request[g] - sent[g]) * 1000 for g in groups]


async def measure(repeats: int, bursts: int) -> dict[str, list[float]]:
    port = _port()
    os.environ[TOKEN_ENV] = TOKEN
    webhook = (
        f'\n[alerts.webhook]\nlisten = "127.0.0.1:{port}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'channel = "{product.CHANNEL}"\nmax_runs_per_10_min = {BURST * (bursts + 2) + repeats + 10}\n'
    )
    out: dict[str, list[float]] = {"idle_ack": [], "idle_first": [], "burst_ack": [], "burst_first": []}
    async with product.running(slack_config=webhook) as p:
        bench = Bench(p, port)
        connector = aiohttp.TCPConnector(limit=BURST, force_close=True)  # one connection per notification
        async with aiohttp.ClientSession(connector=connector) as session:
            async with asyncio.timeout(60):
                while True:  # the webhook listens once the bot is connected and has resumed its runs
                    try:
                        await bench.round(session, 1)  # the warm-up
                        break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)  # not listening yet: Alertmanager retries too
            for _ in range(repeats):
                ack, first = await bench.round(session, 1)
                out["idle_ack"] += ack
                out["idle_first"] += first
            for _ in range(bursts):
                ack, first = await bench.round(session, BURST)
                out["burst_ack"] += ack
                out["burst_first"] += first
    return out


async def run_all(row: Row, section: Section, *, repeats: int, bursts: int) -> None:
    m = await measure(repeats, bursts)
    med = statistics.median
    ia50, ia99, ba50, ba99 = med(m["idle_ack"]), pct(m["idle_ack"], 99), med(m["burst_ack"]), pct(m["burst_ack"], 99)
    if50, if99 = med(m["idle_first"]), pct(m["idle_first"], 99)
    bf50, bf99 = med(m["burst_first"]), pct(m["burst_first"], 99)
    row(
        f"13. Alert webhook ({BURST}-group burst)",
        f"ack p50 {ba50:.0f} / p99 {ba99:.0f} ms (idle {ia50:.1f} ms); POST to first model request p50 "
        f"{bf50:.0f} / p99 {bf99:.0f} ms (idle {if50:.0f} ms)",
        "numbers for the docs (Alertmanager waits 10 s)",
        None,
    )
    section(
        "13. Alert webhook: ack latency and time to the first model request under a 50-group burst",
        f"""
{__doc__.split(chr(10) + chr(10), 2)[2].strip()}

| | notifications | ack p50 | ack p99 | POST to first model request p50 | p99 |
|---|---|---|---|---|---|
| idle (one at a time) | {len(m["idle_ack"])} | {ia50:.1f} ms | {ia99:.1f} ms | {if50:.0f} ms | {if99:.0f} ms |
| burst of {BURST} at once | {len(m["burst_ack"])} | {ba50:.1f} ms | {ba99:.1f} ms | {bf50:.0f} ms | {bf99:.0f} ms |

Burst / idle: ack p50 {ba50 / ia50:.1f}x, POST to first model request p50 {bf50 / if50:.1f}x. Under the burst the
notifications queue on the store's one writer (each accept is one durable transaction, queued behind mentions and
clicks by design), and every root goes through the outbox, whose one sender per process posts one item at a time
(the 50 roots, and the runs' answers, one after another): the price of a root that is posted exactly once
whatever dies when. A run starts only once its root is in Slack (its thread is the root's ts).
""",
    )
