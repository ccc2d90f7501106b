"""Prometheus tools against a real Prometheus (tests/support/promserver.py: Debian's 2.42 on loopback, scraping a test
target twice, with a recording rule) for the query API and its error shapes; a local fake in the API's shape only
for what a real server can't be made to do on demand (see FakePrometheus)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support import promserver
from tools import ToolContext, ToolError
from tools.api import MAX_OUTPUT_CHARS, BadCall
from tools.builtin import prometheus_alerts, prometheus_metrics, prometheus_query, prometheus_query_range
from tools.builtin.prometheus import parse_time
from tools.builtin.prometheus_series import series_name
from tools.builtin.prometheus_units import unit_of, with_unit

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z

VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {"metric": {"__name__": "up", "job": "api", "instance": "web-1:9100"}, "value": [T0, "1"]},
            {"metric": {"__name__": "up", "job": "api", "instance": "web-2:9100"}, "value": [T0, "0"]},
        ],
    },
}
MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {"metric": {"job": "api"}, "values": [[T0, "0.25"], [T0 + 60, "1.3333333333"], [T0 + 120, "0.5"]]},
        ],
    },
    "warnings": ["query touched 3 blocks"],
}
BAD_DATA = {
    "status": "error",
    "errorType": "bad_data",
    "error": 'invalid parameter "query": 1:5: parse error: unexpected "}"',
}


class FakePrometheus:
    """Answers /api/v1/query and /api/v1/query_range like Prometheus 2.x/3.x, recording each request's form.

    Only for what the real server (below) can't be made to do on demand: a gateway's 5xx HTML page, a body of
    many MiB, no answer at all (a timeout), `warnings` (2.42 sends them only for remote-read partial results),
    and showing the exact form the tool sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.release = asyncio.Event()  # set at teardown: a "hang" request ends

    async def handle(self, request: web.Request) -> web.Response:
        form = dict(await request.post()) if request.method == "POST" else dict(request.query)
        endpoint = request.path.rsplit("/", 1)[1]
        self.requests.append((endpoint, {k: str(v) for k, v in form.items()}))
        query = str(form.get("query", ""))
        if query.endswith("{"):
            return web.json_response(BAD_DATA, status=400)
        if query == "overload":
            return web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html")
        if query == "absent_metric":
            return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})
        if query == "huge":  # every series of a big cluster
            return web.Response(
                body=b'{"status":"success","data":{"result":[' + b" " * (9 * 2**20) + b"]}}",
                content_type="application/json",
            )
        if query == "hang":
            await self.release.wait()  # no answer until the test is over: the client's timeout ends it
            return web.Response(status=504)
        return web.json_response(VECTOR if endpoint == "query" else MATRIX)


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[FakePrometheus, ToolContext]]:
    fake = FakePrometheus()
    app = web.Application()
    app.router.add_route("*", "/api/v1/query", fake.handle)
    app.router.add_route("*", "/api/v1/query_range", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    yield fake, ToolContext(prometheus_url=url)
    fake.release.set()
    await runner.cleanup()


async def test_range_query_summarizes_each_series_and_shows_warnings(
    prometheus: tuple[FakePrometheus, ToolContext],
) -> None:
    fake, ctx = prometheus
    out = await prometheus_query_range.bind(ctx).run(
        {"query": "rate(errors[5m])", "start": "2023-11-14T22:13:20Z", "end": "1700000120", "step": "60s"}
    )
    assert out == (
        "matrix: 1 series, 2023-11-14T22:13:20Z .. 2023-11-14T22:15:20Z, point times HH:MM:SS UTC\n"
        '{job="api"}: 3 points 2023-11-14T22:13:20Z .. 2023-11-14T22:15:20Z\n'
        "  first=0.25 last=0.5 min=0.25 at 2023-11-14T22:13:20Z max=1.33333 at 2023-11-14T22:14:20Z mean=0.694444\n"
        "  points (all): 22:13:20 0.25, 22:14:20 1.33333, 22:15:20 0.5\n"
        "warning: query touched 3 blocks"
    )
    assert fake.requests == [
        (
            "query_range",
            {"query": "rate(errors[5m])", "start": "2023-11-14T22:13:20Z", "end": "1700000120", "step": "60s"},
        )
    ]


async def test_relative_times_are_sent_as_unix_timestamps(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    fake, ctx = prometheus
    before = time.time()
    await prometheus_query_range.bind(ctx).run({"query": "up", "start": "now-1h"})
    form = fake.requests[0][1]
    assert before - 3600 - 1 < float(form["start"]) < time.time() - 3600 + 1
    assert before - 1 < float(form["end"]) < time.time() + 1
    assert form["step"] == "60s"


async def test_a_server_that_never_answers_is_a_timeout(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    _, ctx = prometheus
    slow = ToolContext(prometheus_url=ctx.prometheus_url, http_timeout_s=0.3)
    with pytest.raises(ToolError, match=r"Prometheus at http://127\.0\.0\.1:\d+/ did not answer within 0\.3s"):
        await prometheus_query.bind(slow).run({"query": "hang"})


async def test_non_json_answer_is_a_tool_error(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    _, ctx = prometheus
    with pytest.raises(ToolError, match="Prometheus answered HTTP 502 without a JSON body"):
        await prometheus_query.bind(ctx).run({"query": "overload"})


async def test_an_oversized_answer_is_refused_unparsed(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    """Parsing tens of MiB of JSON would stall the event loop (Slack acks, Stop clicks) for seconds."""
    _, ctx = prometheus
    with pytest.raises(ToolError, match="Prometheus answered more than 8 MiB; narrow the query"):
        await prometheus_query.bind(ctx).run({"query": "huge"})


async def test_without_a_url_the_tools_say_what_to_configure() -> None:
    with pytest.raises(ToolError) as e:
        await prometheus_query.run({"query": "up"})
    assert str(e.value) == "no Prometheus URL is configured (set url in [tools.prometheus])"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("now", "1000.000"),
        ("now-1h", "-2600.000"),
        ("-30m", "-800.000"),
        ("now - 90s", "910.000"),
        ("2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z"),
        ("1700000000", "1700000000"),
    ],
)
def test_parse_time(value: str, expected: str) -> None:
    assert parse_time(value, now=1000.0) == expected


@pytest.mark.parametrize(
    ("metric", "name"),
    [
        ({"__name__": "up"}, "up"),
        ({"job": "api"}, '{job="api"}'),
        ({}, "{}"),
        ({"__name__": "x", "b": "2", "a": "1"}, 'x{a="1",b="2"}'),
    ],
)
def test_series_name_uses_promql_notation(metric: dict[str, Any], name: str) -> None:
    assert series_name(metric) == name


# --- the real Prometheus ----------------------------------------------------------------------------------
RECORDING = """groups:
- name: opsloop-tools
  interval: 1s
  rules:
  - record: job:test_disk_used_ratio:max
    expr: max by (job) (test_disk_used_ratio)
"""
real = pytest.mark.skipif(promserver.prometheus_missing() is not None, reason=str(promserver.prometheus_missing()))


@pytest.fixture
async def real_prometheus() -> AsyncIterator[tuple[promserver.PromStack, promserver.Target, ToolContext]]:
    """A real Prometheus scraping one loopback target under two jobs (two series per metric), with a recording
    rule; yielded once both series and the recorded one have samples."""
    target = await promserver.Target(value=0.97).start()
    try:
        async with promserver.prometheus(target, rules=RECORDING, jobs=("node", "node2")) as prom:
            async with asyncio.timeout(30):
                while len((await prom.query("job:test_disk_used_ratio:max"))["data"]["result"]) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)  # another process's scrapes and rule evaluations: nothing to wait on
            yield prom, target, ToolContext(prometheus_url=prom.url)
    finally:
        await target.close()


def _lines(out: str) -> list[str]:
    return out.splitlines()


@real
async def test_real_instant_query_of_a_scraped_metric_and_of_a_recording_rule(
    real_prometheus: tuple[promserver.PromStack, promserver.Target, ToolContext],
) -> None:
    _, target, ctx = real_prometheus
    instance = f"127.0.0.1:{target.port}"
    out = await prometheus_query.bind(ctx).run({"query": "test_disk_used_ratio"})
    head, *series = _lines(out)
    assert head.startswith("vector: 2 series at 20")  # one evaluation time for the whole vector
    assert sorted(series) == [
        f'test_disk_used_ratio{{host="web-03",instance="{instance}",job="{job}"}} 0.97 (97%)'
        for job in ("node", "node2")
    ]
    recorded = await prometheus_query.bind(ctx).run({"query": "sort(job:test_disk_used_ratio:max)", "time": "now"})
    assert _lines(recorded)[1:] == [
        'job:test_disk_used_ratio:max{job="node"} 0.97 (97%)',
        'job:test_disk_used_ratio:max{job="node2"} 0.97 (97%)',
    ]
    summed = _lines(await prometheus_query.bind(ctx).run({"query": "sum(test_disk_used_ratio)"}))
    assert summed[0].startswith("vector: 1 series at ") and summed[1] == "{} 1.94"
    assert (
        await prometheus_query.bind(ctx).run({"query": "absent_metric_opsloop"})
        == "vector: no series for absent_metric_opsloop now (the query matched nothing)"
    )
    assert (
        await prometheus_query.bind(ctx).run({"query": "scalar(vector(1.5))", "time": "1700000000"})
        == "scalar 1.5 at 2023-11-14T22:13:20Z"
    )
    assert (
        await prometheus_query.bind(ctx).run({"query": '"hello"', "time": "1700000000"})
        == "string 'hello' at 2023-11-14T22:13:20Z"
    )
    nan = _lines(await prometheus_query.bind(ctx).run({"query": "test_disk_used_ratio / 0 * 0"}))
    assert nan[1:] and all(line.endswith(" NaN") for line in nan[1:])


@real
async def test_real_timestamps_and_large_values_keep_their_precision(
    real_prometheus: tuple[promserver.PromStack, promserver.Target, ToolContext],
) -> None:
    """Found on the real server: `timestamp()` (and byte counts, start times) are floats past a million, which
    six significant digits turned into 1.79617e+09: an uptime the model can't compute."""
    prom, _, ctx = real_prometheus
    expr = 'timestamp(test_disk_used_ratio{job="node"})'
    out = _lines(await prometheus_query.bind(ctx).run({"query": expr}))
    shown = float(out[1].rsplit(" ", 1)[1])
    raw = await prom.query(expr)
    sample = float(raw["data"]["result"][0]["value"][1])
    assert abs(shown - sample) < 0.6 and abs(shown - time.time()) < 120  # the scrape time, to the second or better
    big = _lines(await prometheus_query.bind(ctx).run({"query": 'test_disk_used_ratio{job="node"} * 1234567890'}))
    assert big[1].endswith(" 1197530853.3")


@real
async def test_real_range_query_of_a_scraped_metric(
    real_prometheus: tuple[promserver.PromStack, promserver.Target, ToolContext],
) -> None:
    _, target, ctx = real_prometheus
    out = await prometheus_query_range.bind(ctx).run(
        {"query": 'job:test_disk_used_ratio:max{job="node"}', "start": "now-30s", "step": "1s"}
    )
    head, summary, stats, values = _lines(out)
    assert head.startswith("matrix: 1 series, 20")
    assert summary.startswith('job:test_disk_used_ratio:max{job="node"}: ') and " points 20" in summary
    assert stats.startswith("  first=0.97 (97%) last=0.97 (97%) min=0.97 (97%) at 20")
    assert {point.split()[1] for point in values.split(": ", 1)[1].split(", ")} == {"0.97"}
    matrix = _lines(await prometheus_query.bind(ctx).run({"query": 'test_disk_used_ratio{job="node2"}[5s]'}))
    assert (
        matrix[0].startswith("matrix: 1 series, 20") and " last=0.97 (97%) " in matrix[2]
    )  # a range selector, instantly
    assert target.scrapes > 0


@real
@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        (
            prometheus_query,
            {"query": "up{"},
            'Prometheus bad_data: invalid parameter "query": 1:4: parse error: unexpected end of input inside braces',
        ),
        (
            prometheus_query,
            {"query": "sum(up)", "time": "yesterday"},
            'Prometheus bad_data: invalid parameter "time": Invalid time value for \'time\': cannot parse "yesterday" '
            "to a valid timestamp",
        ),
        (
            prometheus_query_range,
            {"query": "up", "start": "now", "end": "now-1h"},
            'Prometheus bad_data: invalid parameter "end": end timestamp must not be before start time',
        ),
        (
            prometheus_query_range,
            {"query": "up", "start": "now-30d", "step": "1s"},
            "Prometheus bad_data: exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query "  # noqa: E501
            "resolution (?step=XX)",
        ),
        (
            prometheus_query,
            {"query": "test_disk_used_ratio * on() test_disk_used_ratio"},
            "Prometheus execution: found duplicate series for the match group {} on the right hand-side",
        ),
    ],
)
async def test_real_error_shapes_are_tool_errors_with_the_servers_words(
    real_prometheus: tuple[promserver.PromStack, promserver.Target, ToolContext],
    tool: Any,
    args: dict[str, str],
    error: str,
) -> None:
    """Real answers: 400 bad_data for bad PromQL and bad parameters, 422 execution for a query that can't run."""
    _, _, ctx = real_prometheus
    with pytest.raises(ToolError) as e:
        await tool.bind(ctx).run(args)
    assert str(e.value).startswith(error)


# --- the real Prometheus with history: an onset, many series, metadata, alerts ------------------------------------
HOUR = promserver.HOUR
W0 = promserver.history_start()
ONSET = W0 + promserver.ONSET_AFTER_S


SCRAPED = """# HELP test_requests_total Requests served, by code.
# TYPE test_requests_total counter
test_requests_total{code="200"} 1027
test_requests_total{code="500"} 3
"""
ALERTING = """groups:
- name: opsloop-alerts
  interval: 1s
  rules:
  - alert: DiskFull
    expr: test_disk_used_ratio > 0.95
    for: 0s
    labels: {severity: critical}
    annotations: {summary: "/var on {{ $labels.host }} is full"}
  - alert: DiskFillingSlowly
    expr: test_disk_used_ratio > 0.9
    for: 1h
  - alert: NeverFires
    expr: test_disk_used_ratio > 2
"""


@pytest.fixture
async def history_prometheus() -> AsyncIterator[tuple[promserver.Target, ToolContext]]:
    """A real Prometheus over an hour of backfilled history (promserver.onset_history), scraping a target with a
    counter, with one alert firing (DiskFull) and one pending (DiskFillingSlowly, for 1h);
    yielded once both alerts are active."""
    target = await promserver.Target(value=0.97, extra=SCRAPED).start()
    try:
        async with promserver.prometheus(
            target, rules=ALERTING, jobs=("node",), backfill=promserver.onset_history(W0)
        ) as prom:
            async with asyncio.timeout(30):
                while len((await prom.query("ALERTS"))["data"]["result"]) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)  # another process's rule evaluations: nothing to wait on
            yield target, ToolContext(prometheus_url=prom.url)
    finally:
        await target.close()


def _at(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@real
async def test_real_range_query_gives_the_onset_stats_and_points_over_the_whole_window(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    _, ctx = history_prometheus
    args = {"query": 'test_errors_ratio{service="checkout"}', "start": str(W0), "end": str(W0 + HOUR)}
    out = await prometheus_query_range.bind(ctx).run({**args, "threshold": 0.1})
    head, name, stats, onset, points = _lines(out)
    assert head == f"matrix: 1 series, {_at(W0)} .. {_at(W0 + HOUR)}, point times HH:MM:SS UTC"
    assert name == f'test_errors_ratio{{service="checkout"}}: 61 points {_at(W0)} .. {_at(W0 + HOUR)}'
    assert stats == (
        f"  first=0.01 (1%) last=0.4 (40%) min=0.01 (1%) at {_at(W0)} max=0.4 (40%) at {_at(ONSET)} "
        "mean=0.163443 (16.3%)"
    )
    assert onset == f"  first above 0.1 at {_at(ONSET)} (value 0.4 (40%))"
    assert points.startswith("  points (all): ")
    shown = points.split(": ", 1)[1].split(", ")
    assert len(shown) == 61 and shown[0] == f"{_at(W0)[11:19]} 0.01" and shown[-1] == f"{_at(W0 + HOUR)[11:19]} 0.4"
    below = _lines(await prometheus_query_range.bind(ctx).run({**args, "threshold": 0.1, "above": False}))
    assert below[3] == f"  already below 0.1 at the first point, {_at(W0)}"
    never = _lines(await prometheus_query_range.bind(ctx).run({**args, "threshold": 0.5}))
    assert never[3] == "  never above 0.5"


@real
async def test_real_range_query_samples_a_long_window_evenly_to_its_end(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    """The old tool kept the last 120 points, so an onset early in a long window was cut off."""
    _, ctx = history_prometheus
    args = {"query": 'test_errors_ratio{service="checkout"}', "start": str(W0), "end": str(W0 + HOUR), "step": "10s"}
    points = _lines(await prometheus_query_range.bind(ctx).run(args))[-1]
    assert points.startswith("  points (61 of 361, evenly spaced): ")
    shown = points.split(": ", 1)[1].split(", ")
    assert shown[0] == f"{_at(W0)[11:19]} 0.01" and shown[-1] == f"{_at(W0 + HOUR)[11:19]} 0.4"
    assert shown[30].startswith(_at(W0 + 30 * 60)[11:16])  # the middle of the window, not its last minutes


@real
async def test_real_many_series_show_the_top_n_and_count_the_rest(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    _, ctx = history_prometheus
    args = {"query": "test_errors_ratio", "start": str(W0), "end": str(W0 + HOUR), "threshold": 0.01}
    out = _lines(await prometheus_query_range.bind(ctx).run({**args, "top": 3}))
    assert out[0].startswith(f"matrix: 15 series, {_at(W0)} .. {_at(W0 + HOUR)}; by max, highest first")
    names = [line.split(":")[0] for line in out if line.startswith("test_errors_ratio")]
    assert names == [f'test_errors_ratio{{service="{s}"}}' for s in ("checkout", "svc-13", "svc-12")]
    assert out[-1] == (
        "… 12 more series not shown, their max from 0.001 to 0.012; 2 of them above 0.01 "
        f"(first at {_at(W0)}); raise top or narrow the query to see them"
    )
    lowest = _lines(await prometheus_query_range.bind(ctx).run({**args, "top": 2, "sort_by": "min"}))
    names = [line.split(":")[0] for line in lowest if line.startswith("test_errors_ratio")]
    assert names == ['test_errors_ratio{service="svc-00"}', 'test_errors_ratio{service="svc-01"}']
    rising = _lines(await prometheus_query_range.bind(ctx).run({**args, "top": 1, "sort_by": "increase"}))
    assert rising[1].startswith('test_errors_ratio{service="checkout"}')
    assert rising[-1].startswith("… 14 more series not shown, their increase from 0 to 0;")


@real
async def test_real_range_output_stays_within_the_limit_and_says_what_it_left_out(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    _, ctx = history_prometheus
    args = {"query": "test_errors_ratio", "start": str(W0), "end": str(W0 + HOUR), "step": "10s", "top": 30}
    out = await prometheus_query_range.bind(ctx).run(args)
    assert len(out) <= MAX_OUTPUT_CHARS - 1_000
    assert out.count("\n  points (16 of 361, evenly spaced): ") == 15  # 31 a series would not fit


@real
async def test_real_values_carry_the_unit_their_name_says(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    _, ctx = history_prometheus
    out = _lines(
        await prometheus_query_range.bind(ctx).run(
            {"query": "test_heap_bytes", "start": str(W0), "end": str(W0 + HOUR)}
        )
    )
    assert out[2].startswith("  first=1610612736 (1.5 GiB) last=1610612736 (1.5 GiB) ")
    computed = _lines(
        await prometheus_query_range.bind(ctx).run(
            {"query": "test_heap_bytes / 2", "start": str(W0), "end": str(W0 + HOUR)}
        )
    )
    assert computed[2].startswith("  first=805306368 last=805306368 ")  # no name, no unit: never guessed
    now = _lines(await prometheus_query.bind(ctx).run({"query": "test_disk_used_ratio"}))
    assert now[1].endswith(" 0.97 (97%)")


@real
async def test_real_metrics_lists_names_with_type_and_help_and_label_values(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    target, ctx = history_prometheus
    run = prometheus_metrics.bind(ctx).run
    assert _lines(await run({"pattern": "TEST_.*total|disk"})) == [
        "2 metric names matching 'TEST_.*total|disk'",
        "test_disk_used_ratio (gauge): Used share of /var.",
        "test_requests_total (counter): Requests served, by code.",
    ]
    assert _lines(await run({"pattern": "errors_ratio"})) == [
        "1 metric names matching 'errors_ratio'",
        "test_errors_ratio (no type)",
    ]
    few = _lines(await run({"pattern": "test_", "limit": 2}))
    assert few[0] == "4 metric names matching 'test_', the first 2 shown"
    assert few[-1] == "… 2 more not shown; a narrower pattern finds them"
    assert (
        await run({"pattern": "no_such_metric_x"}) == "no metric names matching 'no_such_metric_x' on this Prometheus"
    )
    assert _lines(await run({"metric": "test_requests_total"})) == [
        "test_requests_total: 2 series; test_requests_total (counter): Requests served, by code.",
        "code (2 values): 200, 500",
        f"instance (1 values): 127.0.0.1:{target.port}",
        "job (1 values): node",
    ]
    services = _lines(await run({"metric": "test_errors_ratio", "label": "service", "limit": 3}))
    assert services == [
        "15 values of service on test_errors_ratio, the first 3 shown",
        "checkout",
        "svc-00",
        "svc-01",
        "… 12 more not shown",
    ]
    with pytest.raises(BadCall, match="label: 'a/b' is not a label name"):
        await run({"metric": "up", "label": "a/b"})
    with pytest.raises(ToolError, match=r"Prometheus bad_data: .*error parsing regexp"):
        await run({"pattern": "(unclosed"})


@real
async def test_real_alerts_firing_and_pending_with_their_rules(
    history_prometheus: tuple[promserver.Target, ToolContext],
) -> None:
    target, ctx = history_prometheus
    out = _lines(await prometheus_alerts.bind(ctx).run({}))
    instance = f'host="web-03",instance="127.0.0.1:{target.port}",job="node"'
    assert out[0] == "1 alerts firing, 1 pending, from 2 of 3 alerting rules"
    assert out[1] == "rule DiskFull (group opsloop-alerts, for 0s): test_disk_used_ratio > 0.95"
    assert re.fullmatch(
        rf'  firing \{{{instance},severity="critical"\}} active since 20\S+ \(0 min\) value 0.97; '
        r"summary: /var on web-03 is full",
        out[2],
    ), out[2]
    assert out[3] == "rule DiskFillingSlowly (group opsloop-alerts, for 3600s): test_disk_used_ratio > 0.9"
    assert out[4].startswith(f"  pending {{{instance}}} active since 20") and out[4].endswith(" value 0.97")
    assert len(out) == 5


@real
async def test_real_alerts_says_when_none_are_active(
    real_prometheus: tuple[promserver.PromStack, promserver.Target, ToolContext],
) -> None:
    _, _, ctx = real_prometheus
    assert await prometheus_alerts.bind(ctx).run({}) == "no alerts firing or pending (0 alerting rules loaded)"


@pytest.mark.parametrize(
    ("name", "raw", "shown"),
    [
        ("node_memory_MemAvailable_bytes", "3221225472", "3221225472 (3 GiB)"),
        ("container_network_receive_bytes_total", "1536", "1536 (1.5 KiB)"),
        ("http_request_duration_seconds", "0.25", "0.25 (250 ms)"),
        ("http_request_duration_seconds_sum", "42", "42 (42 s)"),
        ("http_request_duration_seconds_count", "42", "42"),
        ("http_request_duration_seconds_bucket", "42", "42"),
        ("process_start_time_seconds", "1700000000", "1700000000 (2023-11-14T22:13:20Z)"),
        ("job:test_disk_used_ratio:max", "0.97", "0.97 (97%)"),
        ("instance:node_network_receive_bytes:rate5m", "2097152", "2097152 (2 MiB/s)"),
        ("node_filesystem_used_percent", "91.5", "91.5 (91.5%)"),
        ("up", "1", "1"),
        ("", "0.5", "0.5"),  # a computed result: no name, no unit
        ("test_disk_used_ratio", "NaN", "NaN"),
    ],
)
def test_units_come_from_the_metric_name_only(name: str, raw: str, shown: str) -> None:
    assert with_unit(raw, unit_of(name)) == shown
