"""Start-up's reachability backoff: try a dependency until it answers, one log line per attempt, /healthz says why."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anthropic
import structlog

from bot.app.opsloop import Opsloop
from bot.core.unreachable import is_unreachable, reason, unreachable

log = structlog.get_logger("opsloop.app")
T = TypeVar("T")

START_TIMEOUT_S = 10.0  # one attempt to reach a dependency at start-up
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # between attempts; then every 30 s, for as long as it takes


async def until_reachable(
    ops: Opsloop,
    name: str,
    url: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    timeout_s: float = START_TIMEOUT_S,
    backoff_s: Sequence[float] = BACKOFF_S,
) -> T:
    """`attempt()` until it gets an answer. While `name` can't be reached (refused, DNS, TLS, proxy, timeout),
    each failure is one warning line and `ops.down[name]` says why; any other error is raised as it is."""
    for n in itertools.count(1):
        try:
            async with asyncio.timeout(timeout_s):
                result = await attempt()
        except Exception as e:
            if not is_unreachable(e):
                raise
            problem = unreachable(e, url, proxy=ops.settings.proxy, timeout_s=timeout_s)
            delay = backoff_s[min(n, len(backoff_s)) - 1]
            ops.down[name] = f"{problem}; retrying (attempt {n})"
            log.warning(f"{name}.unreachable", attempt=n, problem=problem, retry_in_s=delay)
            await asyncio.sleep(delay)  # backoff between attempts: a timer, not a wait for state
            continue
        if ops.down.pop(name, None) is not None:
            log.info(f"{name}.reachable", attempts=n)
        return result
    raise AssertionError("unreachable")  # itertools.count never ends


async def watch_anthropic(ops: Opsloop, llm: anthropic.AsyncAnthropic) -> None:
    """At start-up, learn whether the Messages API can be reached (a free GET of the models list; any HTTP
    answer counts), so /healthz and the log say so before the first incident rather than during it."""
    url = ops.settings.anthropic_base_url or "https://api.anthropic.com"

    async def probe() -> int:
        try:
            await llm.models.list(limit=1)
        except anthropic.APIStatusError as e:  # it answered: reachable (a wrong key is `opsloop check`'s to say)
            return e.status_code
        return 200

    try:
        status = await until_reachable(ops, "anthropic", url, probe)
        ops.llm_reachable = True
        log.info("anthropic.reachable", status=status)
    except Exception as e:  # never take the bot down for a probe
        log.warning("anthropic.probe_failed", error=f"{type(e).__name__}: {reason(e)}")
