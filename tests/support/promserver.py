"""A throwaway Prometheus and Alertmanager for the alert tests, like tests/support/pgserver.py: Debian's binaries, run
from a temp dir, listening on 127.0.0.1 random ports only, with second-long scrape, evaluation and grouping
intervals; stopped and removed however the test ends. `missing()` says why they can't run (the tests skip).

A `Target` is the scraped side: a tiny aiohttp app on loopback serving /metrics with a gauge the test sets (and any
`extra` exposition lines). `backfill` puts history into the TSDB before Prometheus starts (`promtool tsdb
create-blocks-from openmetrics`): samples at the times the test chose, so a range query's answer is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

PROMETHEUS = ("prometheus",)
PROMTOOL = ("promtool",)  # in Debian's prometheus package
ALERTMANAGER = ("prometheus-alertmanager", "alertmanager")  # Debian's name, upstream's name
START_TIMEOUT_S = 30.0


def _binary(names: tuple[str, ...]) -> str | None:
    return next((p for n in names if (p := shutil.which(n))), None)


def missing() -> str | None:
    """Why the real Prometheus/Alertmanager tests can't run here, or None."""
    if (why := prometheus_missing()) is not None:
        return why
    if _binary(ALERTMANAGER) is None:
        return "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)"
    return None


def prometheus_missing() -> str | None:
    """Why a Prometheus alone (no Alertmanager) can't run here, or None."""
    return None if _binary(PROMETHEUS) else "prometheus is not installed (apt-get install prometheus; make test tries)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Target:
    """A scrape target: `value` is what /metrics says for test_disk_used_ratio right now; `extra` follows it."""

    value: float = 0.0
    extra: str = ""  # more metric families in the text exposition format, each line ending in a newline
    port: int = 0
    scrapes: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> Target:
        async def metrics(_request: web.Request) -> web.Response:
            self.scrapes += 1
            body = (
                "# HELP test_disk_used_ratio Used share of /var.\n# TYPE test_disk_used_ratio gauge\n"
                f'test_disk_used_ratio{{host="web-03"}} {self.value}\n'
                f"{self.extra}"
            )
            return web.Response(text=body, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


HOUR = 3600
ONSET_AFTER_S = 37 * 60  # in onset_history, the checkout error ratio jumps from 1% to 40% this long after its start


def history_start() -> int:
    """Three hours back, on the hour: inside the default 15-day retention, before anything scraped."""
    return (int(time.time()) // HOUR - 3) * HOUR


def onset_history(start: int) -> str:
    """One hour from `start` of samples a minute apart, as OpenMetrics for `backfill`: test_errors_ratio of
    service checkout (0.01, then 0.4 from ONSET_AFTER_S on), of fourteen calm services svc-00..svc-13 (0.001 to
    0.014, steady), and test_heap_bytes of checkout (1.5 GiB)."""
    times = range(start, start + HOUR + 1, 60)
    lines = ["# HELP test_errors_ratio Share of requests that failed.", "# TYPE test_errors_ratio gauge"]
    lines += [
        f'test_errors_ratio{{service="checkout"}} {0.4 if t >= start + ONSET_AFTER_S else 0.01} {t}' for t in times
    ]
    for i in range(14):
        lines += [f'test_errors_ratio{{service="svc-{i:02}"}} {(i + 1) / 1000} {t}' for t in times]
    lines += ["# HELP test_heap_bytes Heap in use.", "# TYPE test_heap_bytes gauge"]
    lines += [f'test_heap_bytes{{service="checkout"}} {1.5 * 2**30:.0f} {t}' for t in times]
    return "\n".join([*lines, "# EOF", ""])


RULES = """groups:
- name: opsloop-test
  interval: 1s
  rules:
  - alert: DiskFull
    expr: test_disk_used_ratio > 0.95
    for: 0s
    labels: {severity: critical}
    annotations:
      summary: "/var on {{ $labels.host }} is {{ $value }} full"
      runbook_url: "http://127.0.0.1/runbooks/disk"
"""


@dataclass
class PromStack:
    """Prometheus scraping `target` and sending to Alertmanager, which sends to `receivers` (YAML)."""

    target_port: int
    receivers: str  # the `receivers:` list items, YAML, indented by two spaces
    receiver: str  # the route's receiver name
    repeat_interval: str = "2s"
    alertmanager: bool = True  # False: Prometheus alone (the query tool tests)
    rules: str = RULES
    jobs: tuple[str, ...] = ("target",)  # scrape jobs, each scraping the target (two: two series per metric)
    backfill: str = ""  # OpenMetrics text (timestamps in seconds, ending in "# EOF") written as blocks before start
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="opsloop-prom-")))
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    prom_port: int = 0
    am_port: int = 0

    def _write(self) -> None:
        self.am_port, self.prom_port = free_port(), free_port()
        (self.dir / "alertmanager.yml").write_text(f"""route:
  receiver: {self.receiver}
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: {self.repeat_interval}
receivers:
{self.receivers}
""")
        (self.dir / "rules.yml").write_text(self.rules)
        alerting = (
            f"""alerting:
  alertmanagers:
  - static_configs:
    - targets: ["127.0.0.1:{self.am_port}"]
"""
            if self.alertmanager
            else ""
        )
        jobs = "".join(
            f"""- job_name: {job}
  static_configs:
  - targets: ["127.0.0.1:{self.target_port}"]
"""
            for job in self.jobs
        )
        if self.backfill:
            (self.dir / "backfill.om").write_text(self.backfill)
            blocks = (str(self.dir / "backfill.om"), str(self.dir / "tsdb"))
            subprocess.run(
                [_binary(PROMTOOL) or "promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", *blocks],
                check=True,
                capture_output=True,
                timeout=START_TIMEOUT_S,
            )
        (self.dir / "prometheus.yml").write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [{self.dir / "rules.yml"}]
{alerting}scrape_configs:
{jobs}""")

    def _spawn(self, args: list[str], log: str) -> None:
        out = (self.dir / log).open("wb")
        self.procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir))

    async def start(self) -> PromStack:
        am, prom = _binary(ALERTMANAGER), _binary(PROMETHEUS)
        assert prom and (am or not self.alertmanager), missing() if self.alertmanager else prometheus_missing()
        self._write()
        if self.alertmanager:
            assert am
            self._spawn(
                [
                    am,
                    f"--config.file={self.dir / 'alertmanager.yml'}",
                    f"--storage.path={self.dir / 'am'}",
                    f"--web.listen-address=127.0.0.1:{self.am_port}",
                    "--cluster.listen-address=",
                    "--log.level=warn",
                ],
                "alertmanager.log",
            )
        self._spawn(
            [
                prom,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.prom_port}",
                "--rules.alert.resend-delay=1s",
                "--log.level=warn",
            ],
            "prometheus.log",
        )
        if self.alertmanager:
            await self._ready(self.am_port)
        await self._ready(self.prom_port)
        return self

    async def _ready(self, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"a server exited: {self.logs()}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"http://127.0.0.1:{port}/-/ready") as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.1)  # polling a starting server's readiness endpoint
        raise RuntimeError(f"127.0.0.1:{port} not ready in {START_TIMEOUT_S:g}s: {self.logs()}")

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-2000:]}" for p in self.dir.glob("*.log"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}/"

    async def query(self, expr: str) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.prom_port}/api/v1/query", params={"query": expr}) as r,
        ):
            return await r.json()

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def prom_stack(target: Target, *, receivers: str, receiver: str, **kw: Any) -> AsyncIterator[PromStack]:
    stack = PromStack(target_port=target.port, receivers=receivers, receiver=receiver, **kw)
    try:
        await stack.start()
        yield stack
    finally:
        stack.stop()


@contextlib.asynccontextmanager
async def prometheus(
    target: Target, *, rules: str = RULES, jobs: tuple[str, ...] = ("target",), backfill: str = ""
) -> AsyncIterator[PromStack]:
    """Prometheus alone, scraping `target` (once per job) and evaluating `rules`, every second, over `backfill`."""
    stack = PromStack(
        target_port=target.port,
        receivers="",
        receiver="none",
        alertmanager=False,
        rules=rules,
        jobs=jobs,
        backfill=backfill,
    )
    try:
        await stack.start()
        yield stack
    finally:
        stack.stop()
