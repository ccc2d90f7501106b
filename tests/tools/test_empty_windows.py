"""Every read-only tool that takes a window or a filter, asked for one that holds nothing, through the registry as
`opsloop run` builds it (each call bounded and redacted as the runtime's are): the answer says nothing was found
and names what was asked, never an empty string and never an error.

One world for the whole table, set up once: log files whose lines are all two days old, real journal files
(tests.support.journal), the real Prometheus (tests.support.promserver), the fake kube-apiserver, a git
repository whose only commit is three days old, an empty directory, a DNS server with a fixture zone."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support import journal as journal_fixture
from tests.support import promserver
from tests.support.fakes.kube import FakeKube, event, pod
from tests.support.netservers import Record, dns_server
from tests.tools.changes.test_changes_git import commit, git
from tools import ToolError, ToolRegistry
from tools.builtin.journal import iso
from tools.config import build_registry
from tools.reaches import parse_reaches

# One world for all rows (one Prometheus: about 10 s to start); it starts journalctl, git and Prometheus.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.processes, pytest.mark.servers]

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = 3_600
OLD = NOW - timedelta(days=2)  # every line of app.log and every journal entry: long before any window asked
NS = "web"

journal_missing = journal_fixture.missing_reason()
prometheus_missing = promserver.prometheus_missing()
needs_journal = pytest.mark.skipif(journal_missing is not None, reason=str(journal_missing))
needs_prometheus = pytest.mark.skipif(prometheus_missing is not None, reason=str(prometheus_missing))


@dataclass(frozen=True)
class World:
    registry: ToolRegistry  # every tool, reading log files in `logs`
    quiet: ToolRegistry  # the built-in tools with one log directory, `quiet_logs`, empty
    logs: Path
    quiet_logs: Path
    usage: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("empty")
    logs, quiet_logs, usage = root / "log", root / "quiet-log", root / "usage"
    for d in (logs, quiet_logs, usage):
        d.mkdir()
    stamp = OLD.strftime("%Y-%m-%dT%H:%M:%SZ")
    (logs / "app.log").write_text(f"{stamp} INFO GET /health 200\n{stamp} ERROR upstream timed out\n")

    tools: dict[str, Any] = {"logs": {"dirs": [str(logs)]}, "files": {"usage_dirs": [str(usage)]}}
    if journal_missing is None:
        entries = [
            journal_fixture.entry("nginx starting", at=OLD.timestamp(), unit="nginx.service", pid=2210),
            journal_fixture.kernel("Out of memory: Killed process 3120 (java)", at=OLD.timestamp()),
        ]
        tools["journal"] = {"dir": str(journal_fixture.write_journal(root / "journal", entries))}

    repo = root / "deploy-config"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "initial layout", NOW - timedelta(days=3), {"README": "hi"})

    async with (
        FakeKube(token="kube-test-token") as kube,
        dns_server([Record("lb.shop.test", "A", "93.184.216.34")]) as dns_port,
    ):
        api = kube.add(pod("api-1", NS))
        kube.set_logs(NS, "api-1", "GET /health 200\nGET /orders 200\n")
        kube.add(event(api, "BackOff", "Back-off restarting failed container", last_seen_ago_s=3 * HOUR))
        kubeconfig = kube.write_kubeconfig(root / "kubeconfig")
        reaches = parse_reaches(
            {
                "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": str(kubeconfig), "namespaces": [NS]}]},
                "changes": {"git": [{"name": "deploy-config", "path": str(repo)}]},
            }
        )
        tools["http"] = {"dns_servers": [f"127.0.0.1:{dns_port}"]}
        target = await promserver.Target(value=0.5).start()
        try:
            async with prometheus_url(target) as url:
                if url is not None:
                    tools["prometheus"] = {"url": url}
                async with (
                    await build_registry(tools, reaches=reaches) as registry,
                    await build_registry({"logs": {"dirs": [str(quiet_logs)]}}) as quiet,
                ):
                    yield World(registry=registry, quiet=quiet, logs=logs, quiet_logs=quiet_logs, usage=usage)
        finally:
            await target.close()


@asynccontextmanager
async def prometheus_url(target: promserver.Target) -> AsyncIterator[str | None]:
    """The real Prometheus scraping `target`, once it has a sample; None where Prometheus is not installed."""
    if prometheus_missing is not None:
        yield None
        return
    async with promserver.prometheus(target, rules="groups: []\n") as prom:
        async with asyncio.timeout(30):
            while not (await prom.query("test_disk_used_ratio"))["data"]["result"]:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # another process's scrapes: nothing to wait on
        yield prom.url


def at(when: datetime) -> str:
    return iso(int(when.timestamp()))


def local(when: datetime) -> str:
    """`when` as the log tools show a window's end: in this host's zone."""
    return when.astimezone().isoformat(timespec="seconds")


SINCE, UNTIL = NOW - timedelta(hours=1), NOW  # the window asked: the last hour, which holds nothing
WINDOW = {"since": at(SINCE), "until": at(UNTIL)}
LOG_WINDOW = f"between {local(SINCE)} and {local(UNTIL)}"
HERE = socket.gethostname()


def row(name: str, args: dict[str, Any], *expected: str, marks: Any = (), empty_log_dir: bool = False) -> Any:
    """A row: the tool, its arguments and what its answer must say (that nothing was found, and what was asked);
    `{logs}`, `{quiet}` and `{usage}` stand for the world's directories. `empty_log_dir`: asked of the registry
    whose only log directory is empty."""
    return pytest.param(name, args, expected, empty_log_dir, id=f"{name}:{expected[0][:24]}", marks=marks)


ROWS = [
    row("tail_log", {"path": "{logs}/app.log", **WINDOW}, f"no lines in {{logs}}/app.log {LOG_WINDOW}"),
    row(
        "grep_log",
        {"path": "{logs}/app.log", "pattern": "timed out", **WINDOW},
        f"0 matching lines for /timed out/ in {{logs}}/app.log {LOG_WINDOW}",
    ),
    row(
        "grep_log",
        {"path": "{logs}", "pattern": "panic", "newest_first": True},
        "0 matching lines for /panic/ in 1 files under {logs}",
    ),
    row(
        "log_histogram",
        {"path": "{logs}/app.log", "pattern": "ERROR", **WINDOW},
        f"0 matching lines for /ERROR/ in {{logs}}/app.log {LOG_WINDOW}",
    ),
    row("list_logs", {}, f"no log files under {{quiet}} on {HERE}", empty_log_dir=True),
    row(
        "journal",
        {"unit": "nginx.service", **WINDOW},
        f"no entries for unit nginx.service in the journal of {HERE} between {at(SINCE)} and {at(UNTIL)}",
        marks=needs_journal,
    ),
    row(
        "journal",
        {"pattern": "(?i)panic", "since": at(NOW - timedelta(days=3))},
        f"no entries for messages matching /(?i)panic/ in the journal of {HERE} between {at(NOW - timedelta(days=3))}",
        marks=needs_journal,
    ),
    row(
        "kernel_events",
        WINDOW,
        f"no kernel messages in the journal of {HERE} between {at(SINCE)} and {at(UNTIL)}",
        marks=needs_journal,
    ),
    row(
        "k8s_events",
        {"namespace": NS, "since": at(NOW - timedelta(minutes=30))},
        f"no events in namespace {NS} on cluster prod since {at(NOW - timedelta(minutes=30))}",
    ),
    row(
        "k8s_logs",
        {"pod": "api-1", "namespace": NS, "pattern": "panic"},
        f"logs of pod {NS}/api-1 container app: 0 of the last 2 lines match 'panic'",
    ),
    row(
        "k8s_get",
        {"kind": "pods", "namespace": NS, "selector": "app=nothing"},
        "no Pod objects matching 'app=nothing' in namespace web on cluster prod",
    ),
    row(
        "prometheus_query_range",
        {"query": "test_disk_used_ratio", "start": at(NOW - timedelta(days=3)), "end": at(NOW - timedelta(days=2))},
        f"matrix: no series for test_disk_used_ratio between {at(NOW - timedelta(days=3))} and "
        f"{at(NOW - timedelta(days=2))} (the query matched nothing in the window)",
        marks=needs_prometheus,
    ),
    row(
        "prometheus_query",
        {"query": "no_such_metric_total", "time": at(SINCE)},
        f"vector: no series for no_such_metric_total at {at(SINCE)} (the query matched nothing)",
        marks=needs_prometheus,
    ),
    row("prometheus_alerts", {}, "no alerts firing or pending", marks=needs_prometheus),
    row(
        "prometheus_metrics",
        {"pattern": "no_such_metric"},
        "no metric names matching 'no_such_metric' on this Prometheus",
        marks=needs_prometheus,
    ),
    row(
        "prometheus_metrics",
        {"metric": "no_such_metric"},
        "no series for no_such_metric on this Prometheus",
        marks=needs_prometheus,
    ),
    row(
        "recent_changes",
        {"since_minutes": 60},
        "no changes found",
        "(60 min before the start, up to now)",
    ),
    row(
        "recent_changes",
        {"service": "checkout", "since_minutes": 60},
        "no changes found",
        "(60 min before the start, up to now); only service 'checkout'",
    ),
    row("disk_usage", {"path": "{usage}"}, "no entries under {usage}"),
    row("dns_lookup", {"name": "lb.shop.test", "type": "AAAA"}, "NO ANSWER: lb.shop.test exists but has no AAAA"),
]


@pytest.mark.parametrize(("name", "args", "expected", "empty_log_dir"), ROWS)
async def test_a_window_that_holds_nothing_says_so_and_names_what_was_asked(
    world: World, name: str, args: dict[str, Any], expected: tuple[str, ...], empty_log_dir: bool
) -> None:
    tool = (world.quiet if empty_log_dir else world.registry).get(name)
    assert tool is not None and tool.category.value == "read_only"
    dirs = {"logs": world.logs, "quiet": world.quiet_logs, "usage": world.usage}
    filled = {k: v.format(**dirs) if isinstance(v, str) and k in ("path",) else v for k, v in args.items()}
    try:
        out = await tool.run(filled)
    except ToolError as e:
        pytest.fail(f"{name} raised instead of saying it found nothing: {e}")
    for phrase in expected:
        assert phrase.format(**dirs) in out, out
