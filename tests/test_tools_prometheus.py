"""Prometheus tools against a local server that answers in the Prometheus HTTP API's shape."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

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
            {"metric": {"job": "api"},
             "values": [[T0, "0.25"], [T0 + 60, "1.3333333333"], [T0 + 120, "0.5"]]},
        ],
    },
    "warnings": ["query touched 3 blocks"],
}
BAD_DATA = {"status": "error", "errorType": "bad_data",
            "error": 'invalid parameter "query": 1:5: parse error: unexpected "}"'}


class FakePrometheus:
    """Answers /api/v1/query and /api/v1/query_range like Prometheus 2.x/3.x, recording each request's form."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []

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
            return web.Response(body=b'{"status":"success","data":{"result":[' + b" " * (9 * 2**20) + b"]}}",
                                content_type="application/json")
        if query == "scalar(1)":
            return web.json_response({"status": "success", "data": {"resultType": "scalar", "result": [T0, "1"]}})
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
    await runner.cleanup()


async def test_instant_query_is_one_line_per_series(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    fake, ctx = prometheus
    out = await prometheus_query.bind(ctx).run({"query": "up", "time": "1700000000"})
    assert out == (
        "vector: 2 series at 2023-11-14T22:13:20Z\n"
        'up{instance="web-1:9100",job="api"} 1\n'
        'up{instance="web-2:9100",job="api"} 0'
    )
    assert fake.requests == [("query", {"query": "up", "time": "1700000000"})]


async def test_range_query_summarizes_each_series(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    fake, ctx = prometheus
    out = await prometheus_query_range.bind(ctx).run(
        {"query": "rate(errors[5m])", "start": "2023-11-14T22:13:20Z", "end": "1700000120", "step": "60s"})
    assert out == (
        "matrix: 1 series\n"
        '{job="api"}: 3 points 2023-11-14T22:13:20Z .. 2023-11-14T22:15:20Z min=0.25 max=1.33333 last=0.5\n'
        "  0.25 1.33333 0.5\n"
        "warning: query touched 3 blocks"
    )
    assert fake.requests == [("query_range", {"query": "rate(errors[5m])", "start": "2023-11-14T22:13:20Z",
                                              "end": "1700000120", "step": "60s"})]


async def test_relative_times_are_sent_as_unix_timestamps(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    fake, ctx = prometheus
    before = time.time()
    await prometheus_query_range.bind(ctx).run({"query": "up", "start": "now-1h"})
    form = fake.requests[0][1]
    assert before - 3600 - 1 < float(form["start"]) < time.time() - 3600 + 1
    assert before - 1 < float(form["end"]) < time.time() + 1
    assert form["step"] == "60s"


async def test_empty_result_says_the_query_matched_nothing(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    _, ctx = prometheus
    assert await prometheus_query.bind(ctx).run({"query": "absent_metric"}) == \
        "vector: no series (the query matched nothing)"


async def test_scalar_result(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    _, ctx = prometheus
    assert await prometheus_query.bind(ctx).run({"query": "scalar(1)"}) == "scalar 1 at 2023-11-14T22:13:20Z"


async def test_api_error_is_a_tool_error_with_its_type(prometheus: tuple[FakePrometheus, ToolContext]) -> None:
    _, ctx = prometheus
    with pytest.raises(ToolError) as e:
        await prometheus_query.bind(ctx).run({"query": "up{"})
    assert str(e.value) == 'Prometheus bad_data: invalid parameter "query": 1:5: parse error: unexpected "}"'


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
    [("now", "1000.000"), ("now-1h", "-2600.000"), ("-30m", "-800.000"), ("now - 90s", "910.000"),
     ("2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z"), ("1700000000", "1700000000")],
)
def test_parse_time(value: str, expected: str) -> None:
    assert parse_time(value, now=1000.0) == expected


@pytest.mark.parametrize(
    ("metric", "name"),
    [({"__name__": "up"}, "up"), ({"job": "api"}, '{job="api"}'), ({}, "{}"),
     ({"__name__": "x", "b": "2", "a": "1"}, 'x{a="1",b="2"}')],
)
def test_series_name_uses_promql_notation(metric: dict[str, Any], name: str) -> None:
    assert series_name(metric) == name
