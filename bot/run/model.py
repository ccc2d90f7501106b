"""The Anthropic adapter — the only module that imports `anthropic`.

Streams every request (large max_tokens require it, and it lets us cut off
degenerate output), places the cache breakpoints, retries transient failures with
capped backoff, walks the fallback chain (which may cross providers: Anthropic, Bedrock,
Vertex AI, each through the SDK's own client), and prices usage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import structlog

from bot.core.errors import OpsloopError
from bot.core.pricing import thinks_adaptively
from bot.core.providers import provider_id, split
from bot.core.types import AnswerSink, ContextOverflow, ModelError, ModelRequest, ModelResponse, Usage
from bot.run.history import only_thinking

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
        content = out[i]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        blocks[-1] = {**blocks[-1], "cache_control": dict(EPHEMERAL)}  # the one block changed, copied first
        out[i] = {**out[i], "content": blocks}
    return out


def _no_none(value: Any) -> Any:
    """A block as the SDK's `model_dump(exclude_none=True)` gave it: fields the API sent as null are left out."""
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_none(v) for v in value]
    return value


def thinking_params(model: str, request: ModelRequest, *, drop_block: bool) -> dict[str, Any]:
    """`thinking` and `output_config` for models that think adaptively; nothing for older ones.

    Never a budget, `disabled`, sampling parameters or a forced tool_choice: current models answer 400.
    """
    if not thinks_adaptively(model):
        return {}
    thinking: dict[str, Any] = {"type": "adaptive"}
    if request.thinking_display:
        thinking["display"] = request.thinking_display
    if drop_block:
        thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    params: dict[str, Any] = {"thinking": thinking}
    if request.effort:
        params["output_config"] = {"effort": request.effort}
    return params


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


# --- the client ---------------------------------------------------------------
def _transport(timeout_s: float) -> dict[str, Any]:
    """What every provider's client shares: no SDK retries (AnthropicModel retries itself), the timeout, and the
    SDK's aiohttp transport (claude_client says why)."""
    return {"max_retries": 0, "timeout": timeout_s, "http_client": anthropic.DefaultAioHttpClient(timeout=timeout_s)}


def claude_client(api_key: str | None, base_url: str, *, timeout_s: float = 600.0) -> anthropic.AsyncAnthropic:
    """The client every request to Claude goes through. max_retries=0: AnthropicModel retries itself, with a cap on
    Retry-After and the fallback chain. On the SDK's aiohttp transport (`DefaultAioHttpClient`, the HTTP library the
    bot already runs on) rather than its default httpx one: reading a streamed reply costs ~0.35 ms less CPU a
    request (aiohttp parses HTTP in C), and its pool does not probe every idle connection's socket each time a
    request is queued (httpcore does: 100 concurrent runs made each request's assignment O(connections) in
    syscalls, on the loop that acks Slack). Proxies from the environment and certificate settings still apply:
    the httpx layer above it reads them."""
    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        **_transport(timeout_s),
    )


def bedrock_client(
    region: str | None, base_url: str | None, *, timeout_s: float = 600.0
) -> anthropic.AsyncAnthropicBedrock:
    """Claude on Amazon Bedrock (InvokeModel, SigV4-signed): credentials, and the region when `region` is None,
    come from boto3's usual places (AWS_* variables, ~/.aws, an instance role); AWS_BEARER_TOKEN_BEDROCK is
    Bedrock's API key. Same transport and retry policy as claude_client."""
    return anthropic.AsyncAnthropicBedrock(
        aws_region=region,
        base_url=base_url,
        **_transport(timeout_s),
    )


def vertex_client(
    project: str | None, region: str | None, base_url: str | None, *, timeout_s: float = 600.0
) -> anthropic.AsyncAnthropicVertex:
    """Claude on Google Vertex AI (rawPredict, a bearer token): credentials from Application Default Credentials
    (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, the metadata server); the project
    from `project`, else ANTHROPIC_VERTEX_PROJECT_ID (the SDK needs it before it reads the credentials); the
    region from `region`, else CLOUD_ML_REGION. Same transport and retry policy as claude_client."""
    optional: dict[str, Any] = {k: v for k, v in (("project_id", project), ("region", region)) if v}
    return anthropic.AsyncAnthropicVertex(
        **optional,
        base_url=base_url,
        **_transport(timeout_s),
    )


# The `anthropic_version` each provider's InvokeModel / rawPredict takes in the body (the SDK would send the
# first-party API's version date, which a provider may refuse with a 400).
BODY_VERSION = {"bedrock": "bedrock-2023-05-31", "vertex": "vertex-2023-10-16"}
CREDENTIALS_HINT = {
    "anthropic": "check ANTHROPIC_API_KEY",
    "bedrock": "check the AWS credentials: AWS_* variables, ~/.aws, the instance role",
    "vertex": "check the Google credentials: GOOGLE_APPLICATION_CREDENTIALS or application-default login",
}


class Route:
    """Where one label of the chain is sent: its provider's client, the provider's model id, the body's extras."""

    def __init__(self, clients: Any, label: str, ids: Mapping[str, str] | None) -> None:
        self.provider, self.name = split(label)
        self.client = clients[self.provider] if isinstance(clients, Mapping) else clients
        self.model_id = provider_id(label, ids)[0]
        self.extra = {"anthropic_version": BODY_VERSION[self.provider]} if self.provider in BODY_VERSION else {}


# --- reachability ----------------------------------------------------------
async def ping(clients: Any, model: str, ids: Mapping[str, str] | None = None) -> str | None:
    """One tiny request to `model` (a label): None when it answers, else a one-line problem (404: retired or
    unknown). Raises APIConnectionError (and APITimeoutError) when the API can't be reached at all."""
    route = Route(clients, model, ids)
    try:
        await route.client.messages.create(
            model=route.model_id,
            max_tokens=1,
            messages=[{"role": "user", "content": "ping"}],
            extra_body=route.extra or None,
        )
    except anthropic.APIConnectionError:
        raise
    except anthropic.NotFoundError:
        return "not found: retired, misspelt or not available to " + (
            "this API key" if route.provider == "anthropic" else "these credentials"
        )
    except anthropic.APIError as e:
        return f"{type(e).__name__}: {getattr(e, 'message', e)}"
    return None


# --- retries ---------------------------------------------------------------
class IncompleteStream(OpsloopError):
    """The stream ended before `message_stop`: what came is not a whole reply (a tool input may be missing)."""


# Transport errors raised while the stream is being read come from the SDK's HTTP client, not as APIError.
RETRYABLE = (
    anthropic.RateLimitError,
    anthropic.InternalServerError,
    anthropic.APIConnectionError,
    httpx2.TransportError,
    IncompleteStream,
)
OVERFLOW_HINTS = ("prompt is too long", "context window", "too many tokens", "context length")
# The 400 a current model answers when a thinking block's prefix changed; `drop_block` (beta) heals it.
PREFIX_MISMATCH = "bound to a different conversation"
BINDING_BETA = "thinking-binding-controls-2026-08-01"


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
        client: anthropic.AsyncAnthropic | Mapping[str, Any],
        chain: Sequence[str],
        *,
        ids: Mapping[str, str] | None = None,
        attempts_per_model: int = 3,
        empty_retries: int = 2,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        retry_after_cap: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not chain:
            raise ValueError("the model chain is empty")
        self._client = client  # one client, or one per provider the chain names
        self._ids = ids
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

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
        """One answer. Empty and degenerate responses are retried (and still charged); a stop at
        `max_tokens` with only thinking goes back to the loop, which owns the token budget. `sink` gets the
        text as it streams (each attempt announced: a retry voids what came before)."""
        spent = Usage()
        bills: list[tuple[str, Usage]] = []
        failures: list[str] = []
        drop_block = request.drop_block
        while True:
            try:
                response = await self._with_retries(request, drop_block, sink)
            except ModelError as e:  # what the attempts before it cost is still owed
                e.billed, e.usage = (*bills, *e.billed), spent + e.usage
                raise
            drop_block = response.drop_block
            spent = spent + response.usage
            bills.append((response.model, response.usage))
            degenerate = response.stop_reason == "degenerate"
            final = response.stop_reason in ("refusal", "max_tokens")  # the loop decides what these mean
            if not degenerate and (final or not only_thinking(response.content)):
                return dataclasses.replace(response, usage=spent, billed=tuple(bills))
            failures.append("degenerate output" if degenerate else "an empty response")
            log.warning(
                "model.degenerate_output" if degenerate else "model.empty_response",
                model=response.model,
                attempt=len(failures),
            )
            if len(failures) > self.empty_retries:
                raise ModelError(
                    f"{response.model} returned {', then '.join(failures)}",
                    usage=spent,
                    model=response.model,
                    billed=tuple(bills),
                )

    async def _with_retries(
        self, request: ModelRequest, drop_block: bool, sink: AnswerSink | None = None
    ) -> ModelResponse:
        while True:
            last: BaseException | None = None
            attempt = 0
            while attempt < self.attempts_per_model:
                try:
                    return await self._stream_once(self.model, request, drop_block=drop_block, sink=sink)
                except anthropic.BadRequestError as e:
                    message = str(e).lower()
                    if drop_block and split(self.model)[0] != "anthropic":
                        # A cloud provider refusing the beta that heals thinking: the next model, not a 400.
                        last = e
                        break
                    if PREFIX_MISMATCH in message and not drop_block and thinks_adaptively(self.model):
                        # Self-heal: a thinking block no longer matches its prefix. Ask the API to drop such
                        # blocks for the rest of this run (the loop records it) instead of ending the run.
                        log.warning(
                            "model.thinking_prefix_mismatch",
                            model=self.model,
                            error=e.api_message if hasattr(e, "api_message") else str(e),
                            action="retrying with prefix_mismatch_behavior=drop_block for this run",
                        )
                        drop_block = True
                        continue
                    if any(hint in message for hint in OVERFLOW_HINTS):
                        raise ContextOverflow(str(e)) from e
                    raise ModelError(f"request rejected by the API: {e.api_message or e}") from e
                except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as e:
                    hint = CREDENTIALS_HINT[split(self.model)[0]]
                    raise ModelError(f"{type(e).__name__}: {e.api_message or e} ({hint})") from e
                except anthropic.NotFoundError as e:
                    last = e
                    break  # this model does not exist for this key: try the next one
                except Exception as e:
                    if not _is_transient(e):
                        raise
                    last = e
                    attempt += 1
                    if attempt < self.attempts_per_model:
                        delay = self._delay(attempt - 1, e)
                        log.warning(
                            "model.retry",
                            model=self.model,
                            attempt=attempt,
                            error=type(e).__name__,
                            delay_s=round(delay, 3),
                        )
                        await self._sleep(delay)
            if self._index + 1 >= len(self._chain):
                raise ModelError(f"{self.model} unavailable after retries: {type(last).__name__}: {last}")
            log.warning(
                "model.fallback",
                from_model=self.model,
                to_model=self._chain[self._index + 1],
                error=type(last).__name__,
            )
            self._index += 1

    def _delay(self, attempt: int, error: BaseException) -> float:
        hinted = retry_after_seconds(error)
        if hinted is not None:
            return min(hinted, self.retry_after_cap)
        backoff = min(self.backoff_cap, self.backoff_base * 2**attempt)
        return float(backoff * (0.5 + random.random() / 2))

    async def _stream_once(
        self, model: str, request: ModelRequest, *, drop_block: bool, sink: AnswerSink | None = None
    ) -> ModelResponse:
        route = Route(self._client, model, self._ids)
        kwargs: dict[str, Any] = {
            **route.extra,
            "model": route.model_id,
            "max_tokens": request.max_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}],
            "messages": with_cache_breakpoints(request.messages),
            "stream": True,
            **thinking_params(model, request, drop_block=drop_block),
        }
        if request.tools:
            kwargs["tools"] = request.tools
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        drop_block = drop_block and "thinking" in kwargs
        # The events as the JSON the API sent (cast_to=object): `messages.create(stream=True)` builds a typed
        # object per event, which costs several times the JSON parsing, and the loop needs only
        # dicts. `post` is the SDK's own: the same retries, errors and `event: error` handling.
        # The beta header only when needed: block_binding exists only on the beta thinking types.
        events: Any = await route.client.post(
            "/v1/messages",
            body=kwargs,
            cast_to=object,
            stream=True,
            stream_cls=anthropic.AsyncStream[object],
            options={"headers": {"anthropic-beta": BINDING_BETA}} if drop_block else {},
        )
        turn = _Turn(model, named_by_api=route.provider == "anthropic")
        feed = _Feed(sink)
        await feed.call("attempt")
        async with events:
            async for event in events:
                await feed.event(event)
                if turn.add(event):  # degenerate: hang up, and pay for what was generated
                    log.warning("model.degenerate_stream", model=model, chars=turn.streamed)
                    return ModelResponse(
                        content=[],
                        stop_reason="degenerate",
                        usage=turn.usage(billed_text=True),
                        model=model,
                        drop_block=drop_block,
                    )
        if not turn.stopped:
            raise IncompleteStream(f"the stream from {model} ended before message_stop")
        if turn.dropped:
            log.warning("model.thinking_dropped", model=model, blocks=turn.dropped)
        return ModelResponse(
            content=turn.content(),
            stop_reason=turn.stop_reason,
            usage=turn.usage(),
            model=turn.model,
            drop_block=drop_block,
        )


class _Feed:
    """Hands a turn's text deltas (and the start of any tool_use block) to the step's sink. A sink that fails
    stops hearing this attempt: streaming to Slack is a courtesy, the model call is what matters."""

    def __init__(self, sink: AnswerSink | None) -> None:
        self.sink = sink

    async def event(self, event: dict[str, Any]) -> None:
        if self.sink is None:
            return
        kind = event["type"]
        if kind == "content_block_delta" and event["delta"]["type"] == "text_delta":
            await self.call("text", event["delta"]["text"])
        elif kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
            await self.call("tool_use")

    async def call(self, name: str, *args: Any) -> None:
        if self.sink is None:
            return
        try:
            await getattr(self.sink, name)(*args)
        except Exception:
            log.exception("model.sink_failed", call=name)
            self.sink = None


class _Turn:
    """One streamed assistant turn, assembled from the raw events.

    The SDK's `messages.stream()` helper rebuilds a full message snapshot on every event; an agent loop only
    needs the blocks at the end, so this keeps them as the dicts that go back to the API: each block as its
    `content_block_start` gave it, with the deltas appended (text, thinking, signature, citations, tool input
    JSON), nothing dropped or reordered — current models bind thinking to the exact turn.
    """

    def __init__(self, model: str, *, named_by_api: bool = True) -> None:
        self.model = model
        self.named_by_api = named_by_api  # else the label stays: a provider's id is not what prices are keyed by
        self.blocks: list[dict[str, Any]] = []
        self.json: dict[int, list[str]] = {}
        self.stop_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self.output_tokens = 0
        self.streamed = 0
        self.dropped: list[str] = []
        self.detector = RepetitionDetector()
        self.open: set[int] = set()  # blocks started and not (validly) finished
        self.streamed_thinking = 0
        self.stopped = False

    def add(self, event: dict[str, Any]) -> bool:
        """Take one event (the API's JSON); True when the streamed text has degenerated into a repeating
        pattern."""
        kind = event["type"]
        if kind == "content_block_delta":
            delta, index = event["delta"], event["index"]
            block, what = self.blocks[index], delta["type"]
            if what == "text_delta":
                block["text"] += delta["text"]
                self.streamed += len(delta["text"])
                return self.detector.feed(delta["text"])
            if what == "input_json_delta":
                self.json.setdefault(index, []).append(delta["partial_json"])
            elif what == "thinking_delta":
                block["thinking"] += delta["thinking"]
                self.streamed_thinking += len(delta["thinking"])
            elif what == "signature_delta":
                block["signature"] = delta["signature"]
            elif what == "citations_delta":
                block.setdefault("citations", []).append(_no_none(delta["citation"]))
        elif kind == "content_block_start":
            self.blocks.append(_no_none(event["content_block"]))
            self.open.add(event["index"])
        elif kind == "content_block_stop":
            index = event["index"]
            self.open.discard(index)
            if (parts := self.json.pop(index, None)) is not None:
                try:
                    self.blocks[index]["input"] = json.loads("".join(parts) or "{}")
                except ValueError:  # cut off mid-input (max_tokens): never run a call with half its arguments
                    self.open.add(index)
        elif kind == "message_start":
            message = event["message"]
            if self.named_by_api:
                self.model = message.get("model") or self.model
            self._usage = dict(message.get("usage") or {})
            self.output_tokens = self._usage.get("output_tokens") or 0
            self.dropped = [f"{t.get('path')} ({t.get('reason')})" for t in message.get("input_transformations") or ()]
        elif kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason")
            usage = event.get("usage") or {}
            self.output_tokens = usage.get("output_tokens") or self.output_tokens
            # Cumulative counts, when given (a server-side fallback, server tools), replace message_start's.
            for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                if (value := usage.get(name)) is not None and self._usage is not None:
                    self._usage[name] = value
        elif kind == "message_stop":
            self.stopped = True
        return False

    def content(self) -> list[dict[str, Any]]:
        """The blocks, less a tool call that never completed (cut off by max_tokens); it is the last block."""
        return [b for i, b in enumerate(self.blocks) if not (i in self.open and b.get("type") == "tool_use")]

    def usage(self, *, billed_text: bool = False) -> Usage:
        u = self._usage or {}
        usage = Usage(
            input_tokens=u.get("input_tokens") or 0,
            output_tokens=self.output_tokens,
            cache_read_tokens=u.get("cache_read_input_tokens") or 0,
            cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
        )
        if billed_text:  # a stream we hung up on: the count lags behind what was generated (thinking included)
            generated = -(-(self.streamed + self.streamed_thinking) // 4)
            usage = dataclasses.replace(usage, output_tokens=max(usage.output_tokens, generated))
        return usage
