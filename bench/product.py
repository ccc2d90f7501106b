"""`opsloop run` as a real process against the local fake Slack and fake Messages API.

The bench process hosts both fakes; the bot is a child process (optionally under
cProfile), exactly as a user would start it. Model answers are built from each
request (so any number of threads can run at once) and every request's arrival is
stamped: the time between two requests of one run is one iteration of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.run import prompts
from tests.support.fakes.anthropic import FakeAnthropic, Reply, reply, text, thinking, tool_use
from tests.support.fakes.slack import ApiCall, FakeSlack, mention_event

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-ant-bench-0000"
CHANNEL = "C0INCIDENT"
ALICE = "U0ALICE"
ANSWER = "Root cause: /var/data0 filled by rotated logs"  # marks the final answer in the thread
TIMEOUT = 120.0


def incident(
    steps: int, stamps: list[float] | None = None, *, tool: str = "df", calls: int = 1, think: bool = False
) -> Callable[[dict[str, Any]], Reply]:
    """A script item answering from the request: tool calls until the run's `steps`-th request, then the answer.
    A run that called tools is sent back once for update_summary (opsloop's summary ask) and the script answers
    again, unchanged: script `requests(steps)` items per run. That extra request is not stamped, so `stamps` are
    the same `steps` requests a peer loop (which has no such ask) makes for the same incident."""

    lead = [thinking("Checking the disks first.")] if think else []

    def answer(body: dict[str, Any]) -> Reply:
        asked = prompts.SUMMARY_BEHIND in json.dumps(body["messages"][-1]["content"])
        if stamps is not None and not asked:
            stamps.append(time.perf_counter())
        done = tool_steps(body)
        if done < steps - 1:
            return reply(*lead, *[tool_use(tool, {"host": f"web-{done:02d}-{k}"}) for k in range(calls)])
        return reply(*lead, text(f"{ANSWER} (after {done} tool steps)."))

    return answer


def tool_steps(body: dict[str, Any]) -> int:
    """The request's assistant turns that called tools."""
    return sum(
        1
        for m in body["messages"]
        if m["role"] == "assistant" and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in m["content"])
    )


def requests(steps: int) -> int:
    """The model requests of an opsloop run of a `steps`-request incident: the summary ask adds one when it called
    tools (`steps` > 1)."""
    return steps + 1 if steps > 1 else steps


@dataclass
class Product:
    """The fakes plus one running `opsloop run` child."""

    slack: FakeSlack
    model: FakeAnthropic
    proc: asyncio.subprocess.Process
    workdir: Path
    finals: dict[str, float] = field(default_factory=dict)  # thread_ts -> monotonic time the answer was posted
    _answers: list[ApiCall] = field(default_factory=list)  # the final answers among slack.calls[:_read]
    _read: int = 0

    def _final_calls(self) -> list[ApiCall]:
        """The final answers posted so far. Reads only the calls recorded since it last read: it runs on every
        change the stand-in sees while a bench waits, and a scan of every call grew with each burst (quadratic)."""
        calls = self.slack.calls
        self._answers += (
            c for c in calls[self._read :] if c.method == "chat.postMessage" and ANSWER in str(c.args.get("text", ""))
        )
        self._read = len(calls)
        return self._answers

    async def mention(self, text_: str = "web-03 is out of disk") -> tuple[str, float]:
        """A mention (a new thread); returns its ts and the monotonic time it was sent."""
        event = mention_event(CHANNEL, ALICE, text_, bot_user_id=self.slack.bot_user_id)
        sent = time.monotonic()
        await self.slack.send_event(event)
        return event["ts"], sent

    async def wait_answers(self, n: int) -> dict[str, float]:
        """Until `n` final answers were posted in all; thread_ts -> when each was posted (monotonic)."""
        await self.slack._wait(
            lambda: True if len(self._final_calls()) >= n else None,
            TIMEOUT,
            lambda: f"{n} final answers (have {len(self._final_calls())})",
        )
        return {str(c.args.get("thread_ts")): c.at for c in self._final_calls()}

    async def incident(self, steps: int, **kw: Any) -> tuple[list[float], float]:
        """One run of `steps` model requests (one more for the summary ask); (request arrival stamps, the ask's
        not among them, mention -> answer seconds)."""
        stamps: list[float] = []
        self.model.script(*[incident(steps, stamps, **kw) for _ in range(requests(steps))])
        ts, sent = await self.mention()
        answer = await self.slack._wait(
            lambda: next((c for c in self._final_calls() if c.args.get("thread_ts") == ts), None),
            TIMEOUT,
            lambda: f"the answer in thread {ts}",
        )
        self.model.assert_complete()  # a response left over would answer the next run's first request
        return stamps, answer.at - sent


def write_config(path: Path, slack: str, modules: Sequence[str] = ("tools.builtin", "bench.tools")) -> Path:
    """The shipped defaults, plus the bench's tools (or `modules`), no fallback model, and `slack` lines under
    [slack]."""
    path.write_text(
        f"[model]\nfallbacks = []\n[tools]\nmodules = {json.dumps(list(modules))}\n"
        f"[limits]\nmax_iterations = 50\n[slack]\n{slack}\n"
    )
    return path


def bot_env(slack: FakeSlack, model: FakeAnthropic, db: str) -> dict[str, str]:
    """`opsloop run`'s environment: the fakes' URLs and tokens, and its store (`db`: a file or a postgresql:// URL)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "OPSLOOP_"))},
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_APP_TOKEN": slack.app_token,
        "SLACK_API_URL": slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": model.base_url,
        "OPSLOOP_DB": db,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in the bench's own process (the fakes: the measuring instrument) while a burst is
    measured, as timeit and pyperf do for what they time: a full pass over the fakes' recorded traffic took
    250–400 ms by the tenth burst and stalled whichever envelopes and acks were in flight. Collected first, so
    the pause starts clean; the bot's process (`opsloop run`) collects as it always does."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.asynccontextmanager
async def running(
    *,
    slack_config: str = "",
    profile: Path | None = None,
    model_kw: dict[str, Any] | None = None,
    db: str | None = None,
    modules: Sequence[str] = ("tools.builtin", "bench.tools"),
) -> AsyncIterator[Product]:
    """Both fakes in this process and `opsloop run` in a child (under cProfile when `profile` is set), on a
    fresh SQLite file unless `db` names another store (a postgresql:// URL)."""
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-") as tmp:
        work = Path(tmp)
        async with (
            FakeSlack(bot_token="xoxb-bench", app_token="xapp-bench") as slack,
            FakeAnthropic(api_key=API_KEY, **(model_kw or {})) as model,
        ):
            slack.add_user(ALICE, "alice")
            slack.add_channel(CHANNEL, "incidents", members={ALICE})  # the bot is in it (startup checks)
            env = bot_env(slack, model, db or str(work / "opsloop.db"))
            cmd = [
                "-m",
                "bot.app.cli",
                "run",
                "--config",
                str(write_config(work / "opsloop.toml", slack_config, modules)),
            ]
            if profile is not None:
                cmd = ["-m", "cProfile", "-o", str(profile), *cmd]
            with open(work / "opsloop.log", "wb") as log:  # noqa: ASYNC230 (the JSON trace goes to a file)
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, *cmd, cwd=ROOT, env=env, stdout=log, stderr=log
                )
            product = Product(slack=slack, model=model, proc=proc, workdir=work)
            try:
                try:
                    await slack.wait_connected(timeout=60)
                except TimeoutError:
                    tail = (work / "opsloop.log").read_text()[-3000:]
                    raise RuntimeError(f"opsloop run did not connect: {tail}") from None
                yield product
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 60)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
