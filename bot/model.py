"""The Anthropic adapter — the only module that imports `anthropic`.

Streams every request (large max_tokens require it, and it lets us cut off
degenerate output), places the cache breakpoints, retries transient failures with
capped backoff, walks the fallback chain, and prices usage.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anthropic
import structlog

from bot.types import ContextOverflow, ModelError, ModelRequest, ModelResponse, Usage

log = structlog.get_logger("opsloop.model")

EPHEMERAL = {"type": "ephemeral"}


# --- request shaping -------------------------------------------------------
def with_cache_breakpoints(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the newest message and the previous request's newest user turn.

    The second breakpoint sits exactly where the last request ended, so its cache
    entry is found even when a turn adds more blocks than the API's look-back window.
    Only the marked messages are copied; the stored history is never mutated.
    """
    out = list(messages)
    marks = [len(out) - 1]
    for i in range(len(out) - 2, -1, -1):
        if out[i]["role"] == "user":
            marks.append(i)
            break
    for i in marks:
        message = copy.deepcopy(out[i])
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        content[-1]["cache_control"] = dict(EPHEMERAL)
        message["content"] = content
        out[i] = message
    return out


def _normalize_block(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input or {})}
    dumped: dict[str, Any] = block.model_dump(exclude_none=True)
    return dumped


def _usage(u: Any) -> Usage:
    if u is None:
        return Usage()
    return Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=getattr(u, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(u, "cache_creation_input_tokens", None) or 0,
    )


def is_empty(content: Sequence[dict[str, Any]]) -> bool:
    return not any(
        b.get("type") == "tool_use" or (b.get("type") == "text" and b.get("text", "").strip())
        for b in content
    )


class RepetitionDetector:
    """Spots streamed text that has degenerated into one short pattern repeated.

    The newest `window` characters are periodic with a period ≤ `max_period` when
    they equal themselves shifted by that period. Real prose and logs don't do that
    for 800 characters; a looping model does.
    """

    def __init__(self, *, window: int = 800, max_period: int = 200, check_every: int = 100) -> None:
        self.window, self.max_period, self.check_every = window, max_period, check_every
        self._text = ""
        self._since_check = 0

    def feed(self, delta: str) -> bool:
        self._text = (self._text + delta)[-(self.window + self.max_period) :]
        self._since_check += len(delta)
        if self._since_check < self.check_every or len(self._text) < self.window:
            return False
        self._since_check = 0
        tail = self._text[-self.window :]
        return any(tail[p:] == tail[:-p] for p in range(1, self.max_period + 1))


# --- retries ---------------------------------------------------------------
RETRYABLE = (anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError)
OVERFLOW_HINTS = ("prompt is too long", "context window", "too many tokens", "context length")


def retry_after_seconds(error: BaseException) -> float | None:
    response = getattr(error, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    if (value := headers.get("retry-after")) is not None:
        try:
            return float(value)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value)
            return max(0.0, parsed.timestamp() - time.time()) if parsed else None
    return None


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, RETRYABLE):
        return True
    if isinstance(error, anthropic.APIStatusError):
        if error.status_code in (408, 409, 429) or error.status_code >= 500:
            return True
        # An error event inside a 200 stream carries its type, not a status.
        return error.type in ("overloaded_error", "api_error", "rate_limit_error")
    return False


class AnthropicModel:
    """One run's model client: a fallback chain walked at most once, forward only."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        chain: Sequence[str],
        *,
        attempts_per_model: int = 3,
        empty_retries: int = 2,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        retry_after_cap: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not chain:
            raise ValueError("the model chain is empty")
        self._client = client
        self._chain = list(chain)
        self._index = 0
        self.attempts_per_model = attempts_per_model
        self.empty_retries = empty_retries
        self.backoff_base, self.backoff_cap, self.retry_after_cap = backoff_base, backoff_cap, retry_after_cap
        self._sleep = sleep

    @property
    def model(self) -> str:
        return self._chain[self._index]

    def start_at(self, model: str) -> None:
        """Resume a stored run on the model it was using."""
        if model in self._chain:
            self._index = self._chain.index(model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        spent = Usage()
        empties = 0
        while True:
            response = await self._with_retries(request)
            spent = spent + response.usage
            if not is_empty(response.content) or response.stop_reason in ("refusal",):
                return ModelResponse(
                    content=response.content, stop_reason=response.stop_reason, usage=spent, model=response.model
                )
            empties += 1
            log.warning("model.empty_response", model=response.model, attempt=empties)
            if empties > self.empty_retries:
                raise ModelError(f"{response.model} returned an empty response {empties} times")

    async def _with_retries(self, request: ModelRequest) -> ModelResponse:
        while True:
            last: BaseException | None = None
            for attempt in range(self.attempts_per_model):
                try:
                    return await self._stream_once(self.model, request)
                except anthropic.BadRequestError as e:
                    message = str(e).lower()
                    if any(hint in message for hint in OVERFLOW_HINTS):
                        raise ContextOverflow(str(e)) from e
                    raise ModelError(f"request rejected by the API: {e.api_message or e}") from e
                except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as e:
                    raise ModelError(f"{type(e).__name__}: {e.api_message or e} (check ANTHROPIC_API_KEY)") from e
                except anthropic.NotFoundError as e:
                    last = e
                    break  # this model does not exist for this key: try the next one
                except Exception as e:
                    if not _is_transient(e):
                        raise
                    last = e
                    if attempt + 1 < self.attempts_per_model:
                        delay = self._delay(attempt, e)
                        log.warning(
                            "model.retry", model=self.model, attempt=attempt + 1,
                            error=type(e).__name__, delay_s=round(delay, 3),
                        )
                        await self._sleep(delay)
            if self._index + 1 >= len(self._chain):
                raise ModelError(f"{self.model} unavailable after retries: {type(last).__name__}: {last}")
            log.warning("model.fallback", from_model=self.model, to_model=self._chain[self._index + 1],
                        error=type(last).__name__)
            self._index += 1

    def _delay(self, attempt: int, error: BaseException) -> float:
        hinted = retry_after_seconds(error)
        if hinted is not None:
            return min(hinted, self.retry_after_cap)
        backoff = min(self.backoff_cap, self.backoff_base * 2**attempt)
        return backoff * (0.5 + random.random() / 2)

    async def _stream_once(self, model: str, request: ModelRequest) -> ModelResponse:
        detector = RepetitionDetector()
        kwargs: dict[str, Any] = {
            "model": model,
            "max_tokens": request.max_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}],
            "messages": with_cache_breakpoints(request.messages),
        }
        if request.tools:
            kwargs["tools"] = request.tools
        async with self._client.messages.stream(**kwargs) as stream:
            async for event in stream:
                if event.type == "text" and detector.feed(event.text):
                    snapshot = stream.current_message_snapshot
                    log.warning("model.degenerate_stream", model=model, chars=len(event.snapshot))
                    return ModelResponse(content=[], stop_reason="degenerate", usage=_usage(snapshot.usage),
                                         model=model)
            message = await stream.get_final_message()
        return ModelResponse(
            content=[_normalize_block(b) for b in message.content],
            stop_reason=message.stop_reason,
            usage=_usage(message.usage),
            model=message.model or model,
        )
