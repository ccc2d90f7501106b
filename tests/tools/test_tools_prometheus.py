"""Prometheus tools against a real Prometheus (tests/support/promserver.py: Debian's 2.42 on loopback, scraping a test
target twice, with a recording rule) for the query API and its error shapes; a local fake in the API's shape only
for what a real server can't be made to do on demand (see FakePrometheus)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support import promserver
from tools import ToolContext, ToolError
from tools.builtin import prometheus_query, prometheus_query_range
from tools.builtin.prometheus import parse_time, series_name

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
        "matrix: 1 series\n"
        '{job="api"}: 3 points 2023-11-14T22:13:20Z .. 2023-11-14T22:15:20Z min=0.25 max=1.33333 last=0.5\n'
        "  0.25 1.33333 0.5\n"
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
        f'test_disk_used_ratio{{host="web-03",instance="{instance}",job="{job}"}} 0.97' for job in ("node", "node2")
    ]
    recorded = await prometheus_query.bind(ctx).run({"query": "sort(job:test_disk_used_ratio:max)", "time": "now"})
    assert _lines(recorded)[1:] == [
        'job:test_disk_used_ratio:max{job="node"} 0.97',
        'job:test_disk_used_ratio:max{job="node2"} 0.97',
    ]
    summed = _lines(await prometheus_query.bind(ctx).run({"query": "sum(test_disk_used_ratio)"}))
    assert summed[0].startswith("vector: 1 series at ") and summed[1] == "{} 1.94"
    assert (
        await prometheus_query.bind(ctx).run({"query": "absent_metric_opsloop"})
        == "vector: no series (the query matched nothing)"
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
    head, summary, values = _lines(out)
    assert head == "matrix: 1 series"
    assert summary.startswith('job:test_disk_used_ratio:max{job="node"}: ') and " points 20" in summary
    assert summary.endswith(" min=0.97 max=0.97 last=0.97")
    assert set(values.split()) == {"0.97"}
    matrix = _lines(await prometheus_query.bind(ctx).run({"query": 'test_disk_used_ratio{job="node2"}[5s]'}))
    assert matrix[0] == "matrix: 1 series" and matrix[1].endswith(" last=0.97")  # a range selector, instantly
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
