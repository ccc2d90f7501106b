"""Stream parsing, offline: one streamed turn's SSE bytes (captured from the fake Messages API) turned into what the
loop needs, by each of the SDK's ways, best and median of 11 rounds of 200 turns. Run: python bench/stream_parse.py
(needs /tmp/perf2-old: the commit before the change, for the old _Turn)."""
"""Offline: the cost of turning one streamed turn's SSE bytes into what the loop needs, per method."""
import asyncio, json, time, statistics, sys
import httpx2 as httpx, anthropic
sys.path.insert(0, "/work/wt/perf2")
from tests.fakes.anthropic import FakeAnthropic, reply, thinking, tool_use, text
from bot.model import _Turn, _Feed
from anthropic.types import RawMessageStreamEvent
from anthropic.lib.streaming import AsyncMessageStream
import importlib.util
_spec = importlib.util.spec_from_file_location("old_model", "/tmp/perf2-old/bot/model.py")
old_model = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(old_model)

KEY = "sk-ant-test-key-000000"

async def capture(think):
    async with FakeAnthropic(api_key=KEY) as fake:
        lead = [thinking("Checking the disks first.")] if think else []
        fake.script(reply(*lead, tool_use("disk_usage", {"host": "web-03"})))
        async with httpx.AsyncClient() as h:
            r = await h.post(fake.base_url + "/v1/messages", headers={"authorization": "Bearer " + KEY, "anthropic-version": "2023-06-01"},
                             json={"model": "claude-sonnet-5-5", "max_tokens": 100, "stream": True,
                                   "messages": [{"role": "user", "content": "hi"}]})
            return r.content

def response(raw):
    return httpx.Response(200, content=raw, headers={"content-type": "text/event-stream"},
                          request=httpx.Request("POST", "http://x/v1/messages"))

async def dicts(client, raw):
    s = anthropic.AsyncStream(cast_to=object, response=response(raw), client=client)
    turn, feed = _Turn("m"), _Feed(None)
    async for ev in s:
        await feed.event(ev); turn.add(ev)
    return turn.content()

async def typed_only(client, raw):
    s = anthropic.AsyncStream(cast_to=RawMessageStreamEvent, response=response(raw), client=client)
    async for ev in s:
        pass

async def typed(client, raw):
    s = anthropic.AsyncStream(cast_to=RawMessageStreamEvent, response=response(raw), client=client)
    turn, feed = old_model._Turn("m"), old_model._Feed(None)
    async for ev in s:
        await feed.event(ev); turn.add(ev)
    return turn.content()

async def helper(client, raw):
    s = anthropic.AsyncStream(cast_to=RawMessageStreamEvent, response=response(raw), client=client)
    ms = AsyncMessageStream(s, output_format=anthropic.NOT_GIVEN)
    async for ev in ms:
        pass
    return [b.model_dump(exclude_none=True) for b in ms.current_message_snapshot.content]

async def rawjson(client, raw):
    r = response(raw)
    events = []
    async for line in r.aiter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events

async def main():
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url="http://x")
    for think in (False, True):
        raw = await capture(think)
        n_events = raw.count(b"\nevent: ") + 1
        res = {}
        for name, fn in (("create(stream=True) typed events + old _Turn (before)", typed), ("create(stream=True): typed events, no accumulation", typed_only), ("messages.stream() helper (accumulates a snapshot)", helper), ("post(cast_to=object) dict events + _Turn (new)", dicts), ("raw lines + json.loads only (floor)", rawjson)):
            res[name] = []
        for rep in range(11):
            for name, fn in (("create(stream=True) typed events + old _Turn (before)", typed), ("create(stream=True): typed events, no accumulation", typed_only), ("messages.stream() helper (accumulates a snapshot)", helper), ("post(cast_to=object) dict events + _Turn (new)", dicts), ("raw lines + json.loads only (floor)", rawjson)):
                t = time.perf_counter()
                for _ in range(200):
                    await fn(client, raw)
                res[name].append((time.perf_counter() - t) / 200 * 1000)
        print(f"thinking={think} events={n_events} bytes={len(raw)}")
        for name, v in res.items():
            print(f"  {name}: best {min(v):.3f} ms, median {statistics.median(v):.3f} ms per turn")
asyncio.run(main())
