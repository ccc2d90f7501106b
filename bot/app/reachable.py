"""Start-up's reachability backoff: try a dependency until it answers, one log line per attempt, /healthz says why."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

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


async def watch_models(ops: Opsloop) -> None:
    """At start-up, learn whether each provider the model chain names (Anthropic's API, Bedrock, Vertex AI) can be
    reached, through the very client its runs use (a free GET of the models path, signed or with a token as a run's
    request is; any HTTP answer counts), so /healthz and the log say so before the first incident, not during it."""
    await asyncio.gather(*(watch_provider(ops, provider, client) for provider, client in ops.models.items()))


async def watch_provider(ops: Opsloop, provider: str, client: Any) -> None:
    # Vertex AI's token is fetched once, by the first request that needs it: the probe only asks whether the
    # endpoint answers (as a wrong key, credentials are `opsloop check`'s to say), so it brings its own header.
    headers = {"Authorization": "Bearer -"} if provider == "vertex" else {}

    async def probe() -> int:
        try:
            await client.get("/v1/models?limit=1", cast_to=object, options={"headers": headers})
        except anthropic.APIStatusError as e:  # it answered: reachable (a wrong key is `opsloop check`'s to say)
            return e.status_code
        return 200

    try:
        status = await until_reachable(ops, provider, str(client.base_url), probe)
        ops.reached.add(provider)
        log.info(f"{provider}.reachable", status=status)
    except Exception as e:  # never take the bot down for a probe; /healthz shows why (credentials not found, ...)
        ops.down[provider] = f"probe failed: {type(e).__name__}: {reason(e)}"
        log.warning(f"{provider}.probe_failed", error=f"{type(e).__name__}: {reason(e)}")
