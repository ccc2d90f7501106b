"""A fake Anthropic Messages API server for tests.

It speaks the wire protocol the real ``anthropic`` SDK expects (JSON Messages, SSE
streams, Anthropic's error bodies), rejects the requests the real API rejects, and
keeps deterministic token and prompt-cache accounting so tests can prove that
caching works::

    fake = FakeAnthropic(api_key="sk-ant-test")
    async with fake:
        client = AsyncAnthropic(api_key="sk-ant-test", base_url=fake.base_url)
        fake.script(reply(tool_use("lookup", {"q": "x"})), reply(text("done")))
        ...
        fake.assert_complete()

Script items are consumed one per accepted ``POST /v1/messages`` (FIFO; the beta
client's ``/v1/messages?beta=true`` is the same route). Requests rejected by auth or
validation are recorded but consume nothing. An item may be a callable that gets the
request body and returns the item, e.g. a model-dependent answer::

    fake.script(lambda body: error(529, "overloaded_error") if body["model"] == "x" else reply(text("ok")))

``fake.fail_model(model)`` answers every request for one model with 529 (or a given
error) without consuming the script, until ``fake.restore_model(model)``.

Token model (see ``count_tokens``): the prompt is a list of blocks in the order
tools, system, message content; each block costs ``count_tokens(block)`` with its
``cache_control`` removed (a string ``system`` or message ``content`` counts as one
``{"type": "text", "text": ...}`` block).

Current models (``claude-sonnet-5-5``, ``claude-opus-5-5``, ``claude-haiku-5-5``,
``claude-fable-5-2`` and their dated variants) behave as the late-2026 API does;
every other model id keeps the older behaviour (no thinking unless scripted, no
prefix check, ``temperature`` & co. are "Extra inputs"):

- Adaptive thinking is always on: a reply starts with a ``thinking`` block, and a
  scripted reply that has both text and ``tool_use`` returns the text as thinking.
  Thinking text is empty unless the request asks for
  ``thinking: {"type": "adaptive", "display": "summarized"}``. Script thinking with
  ``thinking("summary")``/``redacted_thinking()``; ``reply(..., thinking_tokens=N)``
  sets the reasoning it cost (default ``DEFAULT_THINKING_TOKENS``).
- Thinking tokens are output tokens (``usage.output_tokens_details.thinking_tokens``)
  and count toward ``max_tokens``: if they reach it the reply is only its leading
  thinking; otherwise visible output past the limit is cut (a cut ``tool_use`` is
  dropped) and ``stop_reason`` is ``max_tokens``.
- Each thinking block's ``signature`` (a ``redacted_thinking``'s ``data``) binds the
  answering model, the account (Sonnet/Haiku 5.5) and the prompt before it: ``system``,
  ``tools``, every earlier message and block, ``cache_control`` markers ignored. A
  block sent back after that prefix changed (or a block removed, moved or edited)
  fails with 400, unless ``thinking.block_binding.prefix_mismatch_behavior`` is
  ``"drop_block"`` and the ``thinking-binding-controls-2026-08-01`` beta is sent; then
  it is dropped and listed in ``input_transformations``. Blocks of another model are
  dropped silently. Dropped blocks are not part of the prompt (tokens, cache).
- Rejected: ``thinking`` types other than adaptive, ``budget_tokens``,
  ``temperature``/``top_p``/``top_k``, assistant prefill, forced ``tool_choice``, an
  unknown ``output_config.effort`` or ``thinking.display``. ``role: "system"``
  messages are accepted and stay out of the turn rules.

Effort (opt-in, ``FakeAnthropic(thinking_by_effort=EFFORT_THINKING_TOKENS)``): a reply
without an explicit ``thinking_tokens`` spends the tokens listed for the request's
``output_config.effort`` (or the model's default effort: high on Sonnet 5.5 and Fable,
medium on Opus and Haiku 5.5). The numbers are the fake's assumption, not measured.

Server-held threads (beta ``message-threads-2026-08-12``, what the SDK's tool runner
sends): ``thread: {"type": "create"}`` stores the conversation under the reply's ``id``;
``{"type": "continue", "previous_message_id": ...}`` sends only the new messages and no
``system``/``tools``. The fake rebuilds the whole prompt (held turns without their
``cache_control``, then the new messages) and validates, signs and accounts it, cache
included, like a full request. A message id continues once (``thread_already_continued``);
an unknown one is ``thread_not_found`` (both in ``error.details.error_code``).

``FakeAnthropic.cost_usd()`` prices every answered request with the fake's own price
list (``RecordedRequest.cost_usd`` per request).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hashlib
import hmac
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "CURRENT_MODELS",
    "DEFAULT_THINKING_SUMMARY",
    "DEFAULT_THINKING_TOKENS",
    "EFFORT_THINKING_TOKENS",
    "FakeAnthropic",
    "RecordedRequest",
    "count_tokens",
    "error",
    "redacted_thinking",
    "repeating_text",
    "reply",
    "text",
    "thinking",
    "tool_use",
]

# --------------------------------------------------------------------------- tokens


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def count_tokens(obj: Any) -> int:
    """The fake's deterministic token estimate: a quarter of the canonical JSON length."""
    return max(1, len(_canonical(obj)) // 4)


# --------------------------------------------------------------------------- models and prices

# The key the tests and the benchmarks give the fake and the bot (tests/conftest.py re-exports it).
API_KEY = "sk-ant-test-key-000000"
CURRENT_MODELS = ("claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-fable-5-2")
_ACCOUNT_BOUND = frozenset({"claude-sonnet-5-5", "claude-haiku-5-5"})


def _family(model: str) -> str | None:
    """The current model a model id names (dated or suffixed ids by prefix), else None."""
    return next((family for family in CURRENT_MODELS if model.startswith(family)), None)


@dataclass(frozen=True)
class _Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_write: float  # 5-minute writes; the fake prices 1-hour writes the same
    cache_read: float


_LONG_PROMPT_TOKENS = 100_000
# Model prefix -> (price for prompts up to _LONG_PROMPT_TOKENS, price above). Kept apart
# from bot/core/pricing.py on purpose: tests compare the bot's cost against this one.
_PRICES = {
    "claude-sonnet-5-5": (_Price(2.0, 10.0, 2.50, 0.10),) * 2,
    "claude-opus-5-5": (_Price(4.0, 20.0, 5.0, 0.20),) * 2,
    "claude-haiku-5-5": (_Price(0.10, 0.50, 0.125, 0.01), _Price(0.50, 2.50, 0.625, 0.05)),
    "claude-fable-5-2": (_Price(8.0, 40.0, 10.0, 0.20),) * 2,
    "claude-haiku-4-5": (_Price(1.0, 5.0, 1.25, 0.10),) * 2,
    "claude-sonnet-4-5": (_Price(3.0, 15.0, 3.75, 0.30),) * 2,
}


def cost_usd(model: str, usage: dict[str, Any]) -> float | None:
    """What ``usage`` costs on ``model``; None for a model without a price."""
    prefixes = [p for p in _PRICES if model.startswith(p)]
    if not prefixes:
        return None
    input_tokens = usage["input_tokens"]
    write, read = usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]
    short, long = _PRICES[max(prefixes, key=len)]
    price = long if input_tokens + write + read > _LONG_PROMPT_TOKENS else short
    total = (
        input_tokens * price.input
        + write * price.cache_write
        + read * price.cache_read
        + usage["output_tokens"] * price.output
    )
    return total / 1_000_000


# --------------------------------------------------------------------------- script items

_tool_ids = itertools.count(1)
DEFAULT_THINKING_TOKENS = 50
DEFAULT_THINKING_SUMMARY = "Considering the next step."
# Opt-in reasoning per reply by effort: the fake's assumption, documented in the module docstring.
EFFORT_THINKING_TOKENS = {"low": 200, "medium": 800, "high": 2000, "xhigh": 5000, "max": 12000}
_DEFAULT_EFFORT = {
    "claude-sonnet-5-5": "high",
    "claude-opus-5-5": "medium",
    "claude-haiku-5-5": "medium",
    "claude-fable-5-2": "high",
}
THREADS_BETA = "message-threads-2026-08-12"


def text(value: str) -> dict[str, Any]:
    """A text content block for ``reply``."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool_use content block for ``reply``; the id defaults to a process-unique ``toolu_NNN``."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_tool_ids):03d}", "name": name, "input": input}


def thinking(summary: str = "") -> dict[str, Any]:
    """A thinking block for ``reply``: ``summary`` is its text when the request asks for a
    summarized display (``DEFAULT_THINKING_SUMMARY`` if empty); the fake signs it."""
    return {"type": "thinking", "thinking": summary, "signature": ""}


def redacted_thinking() -> dict[str, Any]:
    """A redacted_thinking block for ``reply``; the fake fills in its ``data``."""
    return {"type": "redacted_thinking", "data": ""}


@dataclass(frozen=True)
class Reply:
    content: list[dict[str, Any]]
    stop_reason: str
    model: str | None = None
    thinking_tokens: int | None = DEFAULT_THINKING_TOKENS  # reasoning billed as output; None: by effort


@dataclass(frozen=True)
class Error:
    status: int
    type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] | None = None  # error.details, e.g. {"error_code": "thread_not_found"}

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"type": self.type, "message": self.message}
        return {"type": "error", "error": {**err, "details": self.details} if self.details else err}


@dataclass(frozen=True)
class RepeatingText:
    unit: str
    max_chunks: int = 5000


ScriptItem = Reply | Error | RepeatingText | Callable[[dict[str, Any]], "Reply | Error | RepeatingText"]


def reply(
    *blocks: dict[str, Any],
    stop_reason: str | None = None,
    model: str | None = None,
    thinking_tokens: int | None = None,
) -> Reply:
    """A successful Message. ``stop_reason`` defaults to tool_use/end_turn from the blocks;
    ``model`` defaults to the request's model; ``thinking_tokens`` is the reasoning a
    current model spent on it (billed as output, counted toward ``max_tokens``); None means
    ``DEFAULT_THINKING_TOKENS``, or the effort's share when the fake has ``thinking_by_effort``."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return Reply([copy.deepcopy(b) for b in blocks], stop_reason, model, thinking_tokens)


_DEFAULT_ERROR_MESSAGES = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "api_error": "Internal server error",
    "overloaded_error": "Overloaded",
}


def error(
    status: int,
    type: str,
    message: str | None = None,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> Error:
    """An HTTP error with Anthropic's error body, e.g. ``error(429, "rate_limit_error",
    headers={"retry-after": "0.01"})``. Sent before any SSE for streamed requests."""
    return Error(status, type, message or _DEFAULT_ERROR_MESSAGES.get(type, type), dict(headers or {}), details)


def repeating_text(unit: str, max_chunks: int = 5000) -> RepeatingText:
    """Streams ``unit`` as text deltas until the client disconnects (or ``max_chunks``,
    then stop_reason max_tokens). Non-streamed: one reply of ``unit * max_chunks``."""
    return RepeatingText(unit, max_chunks)


# --------------------------------------------------------------------------- recording


@dataclass(eq=False)
class RecordedRequest:
    """One request as the fake saw it and what it sent back."""

    body: dict[str, Any] | None  # parsed JSON (None if the body was not a JSON object)
    headers: dict[str, str]  # lower-cased names
    request_id: str
    stream: bool = False
    status: int = 0  # HTTP status sent back
    response: dict[str, Any] | None = None  # Message JSON (streams: what was sent so far) or error body
    cancelled: bool = False  # a stream the client went away from
    finished: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def error(self) -> dict[str, Any] | None:
        """``{"type", "message"}`` of an error response, else None."""
        return self.response["error"] if self.response and self.response.get("type") == "error" else None

    @property
    def usage(self) -> dict[str, int] | None:
        return self.response.get("usage") if self.response else None

    @property
    def cost_usd(self) -> float | None:
        """What this request cost at the fake's prices for the model that answered; None if it
        was not answered (an error) or that model has no price."""
        if self.status != 200 or self.response is None:
            return None
        return cost_usd(self.response["model"], self.response["usage"])

    async def wait_finished(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 (test helper)
        """Wait until the fake is done with this request: a stream fully sent or abandoned by
        the client (``cancelled``); a JSON response handed to the server for sending."""
        async with asyncio.timeout(timeout):
            await self.finished.wait()


# --------------------------------------------------------------------------- validation


class _Invalid(Exception):
    """A request the real API would answer with 400 invalid_request_error."""


_TOP_LEVEL_PARAMS = frozenset(
    {
        "model", "max_tokens", "messages", "cache_control", "container", "diagnostics", "inference_geo",
        "metadata", "output_config", "service_tier", "speed", "stop_sequences", "stream", "system",
        "thinking", "tool_choice", "tools",
    }
)  # fmt: skip
# Keys of the SDK's *BlockParam TypedDicts; anything else is "Extra inputs are not permitted".
_BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"},
}
_OTHER_BLOCK_TYPES = {
    "image", "document", "search_result", "thinking", "redacted_thinking", "server_tool_use",
    "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
    "tool_search_tool_result", "container_upload", "mcp_tool_use", "mcp_tool_result",
}  # fmt: skip
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_MAX_BREAKPOINTS = 4
_LOOKBACK_BLOCKS = 20
_SAMPLING_PARAMS = ("temperature", "top_k", "top_p")  # rejected by current models, "extra" for older ones
_THINKING_KEYS = frozenset({"type", "display", "block_binding", "budget_tokens"})
_THINKING_TYPES = ("adaptive", "enabled", "disabled", "between_tools")
_DISPLAYS = ("summarized", "omitted")
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_OUTPUT_CONFIG_KEYS = frozenset({"effort", "format", "task_budget"})


def _check_text(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise _Invalid(f"{where}: Input should be a valid string")
    if not value:
        raise _Invalid(f"{where}: text content blocks must be non-empty")
    if not value.strip():
        raise _Invalid(f"{where}: text content blocks must contain non-whitespace text")


def _check_cache_control(cc: Any, where: str) -> None:
    if cc is None:
        return
    if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
        raise _Invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
    if "ttl" in cc and cc["ttl"] not in _TTL_SECONDS:
        raise _Invalid(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
    for key in cc.keys() - {"type", "ttl"}:
        raise _Invalid(f"{where}.cache_control.{key}: Extra inputs are not permitted")


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _Invalid(f"{where}: Input should be a valid content block with a 'type'")
    kind = block["type"]
    if kind not in _BLOCK_KEYS and kind not in _OTHER_BLOCK_TYPES:
        raise _Invalid(f"{where}.type: Input tag '{kind}' found using 'type' does not match any of the expected tags")
    for key in sorted(block.keys() - _BLOCK_KEYS.get(kind, block.keys())):
        raise _Invalid(f"{where}.{kind}.{key}: Extra inputs are not permitted")
    _check_cache_control(block.get("cache_control"), where)
    if kind == "text":
        _check_text(block.get("text"), f"{where}.text")
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not _TOOL_USE_ID.match(block["id"]):
            raise _Invalid(f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        if not isinstance(block.get("name"), str):
            raise _Invalid(f"{where}.name: Field required")
        if not isinstance(block.get("input"), dict):
            raise _Invalid(f"{where}.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise _Invalid(f"{where}.tool_use_id: Field required")
        content = block.get("content", "")
        if isinstance(content, list):
            for k, inner in enumerate(content):
                _check_block(inner, f"{where}.content.{k}")
        elif not isinstance(content, str):
            raise _Invalid(f"{where}.content: Input should be a valid string or list")


def _blocks_of(content: str | list[Any]) -> list[Any]:
    """A message's content as blocks: a string is one text block (none if empty)."""
    if isinstance(content, str):
        return [text(content)] if content else []
    return content


def _validate_messages(messages: list[Any], has_tools: bool, current_model: bool) -> None:
    """Per-message shape, then the turn rules on merged turns: the API combines
    consecutive same-role messages into one turn (documented in the SDK's ``messages``
    docstring), so the tool_use/tool_result rules apply to those merged turns.
    ``role: "system"`` messages (current models only) stay out of the turns."""
    # turns: [role, [(message index, block index, block)]]
    turns: list[tuple[str, list[tuple[int, int, dict[str, Any]]]]] = []
    seen_tool_use_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise _Invalid(f"{where}: Input should be a valid dictionary")
        role = message.get("role")
        if role == "system" and current_model:
            _check_system_message(message, where)
            continue
        if role == "system":
            raise _Invalid(f"{where}.role: the fake does not model role 'system' messages; use `system`")
        if role not in ("user", "assistant"):
            raise _Invalid(f"{where}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        is_final_assistant = role == "assistant" and i == len(messages) - 1
        if isinstance(content, str):
            if not content and not is_final_assistant:
                raise _Invalid(
                    f"{where}: all messages must have non-empty content except for the optional final assistant message"
                )
            if content and not content.strip():
                raise _Invalid(f"{where}: text content blocks must contain non-whitespace text")
        elif isinstance(content, list):
            if not content and not is_final_assistant:
                raise _Invalid(
                    f"{where}: all messages must have non-empty content except for the optional final assistant message"
                )
        else:
            raise _Invalid(f"{where}.content: Input should be a valid string or list")
        blocks = _blocks_of(content)
        for j, block in enumerate(blocks):
            bwhere = f"{where}.content.{j}"
            _check_block(block, bwhere)
            if block["type"] == "tool_use":
                if role != "assistant":
                    raise _Invalid(f"{bwhere}: `tool_use` blocks can only be in `assistant` messages")
                if block["id"] in seen_tool_use_ids:
                    raise _Invalid(f"{bwhere}: `tool_use` ids must be unique")
                seen_tool_use_ids.add(block["id"])
            if block["type"] == "tool_result" and role != "user":
                raise _Invalid(f"{bwhere}: `tool_result` blocks can only be in `user` messages")
            if block["type"] in ("tool_use", "tool_result") and not has_tools:
                raise _Invalid(
                    f"{bwhere}: Requests which include `tool_use` or `tool_result` blocks must define tools."
                )
        last = blocks[-1] if is_final_assistant and blocks else None
        if last is not None and last["type"] == "text" and last["text"] != last["text"].rstrip():  # prefill
            raise _Invalid("messages: final assistant content cannot end with trailing whitespace")

        if turns and turns[-1][0] == role:
            turns[-1][1].extend((i, j, b) for j, b in enumerate(blocks))
        else:
            turns.append((role, [(i, j, b) for j, b in enumerate(blocks)]))

    if not turns or turns[0][0] != "user":
        raise _Invalid('messages: first message must use the "user" role')

    for t, (role, blocks) in enumerate(turns):
        if role == "assistant":
            wanted = [b["id"] for _, _, b in blocks if b["type"] == "tool_use"]
            answered = set()
            if t + 1 < len(turns):
                answered = {b["tool_use_id"] for _, _, b in turns[t + 1][1] if b["type"] == "tool_result"}
            missing = [tid for tid in wanted if tid not in answered]
            if missing:
                i = turns[t + 1][1][0][0] if t + 1 < len(turns) else blocks[-1][0]
                raise _Invalid(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately"
                    f" after: {', '.join(missing)}. Each `tool_use` block must have a corresponding"
                    " `tool_result` block in the next message."
                )
            continue
        offered = set()
        if t > 0:
            offered = {b["id"] for _, _, b in turns[t - 1][1] if b["type"] == "tool_use"}
        seen_other = False
        for i, j, b in blocks:
            if b["type"] != "tool_result":
                seen_other = True
                continue
            if b["tool_use_id"] not in offered:
                raise _Invalid(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks:"
                    f" {b['tool_use_id']}. Each `tool_result` block must have a corresponding `tool_use`"
                    " block in the previous message."
                )
            if seen_other:
                raise _Invalid(
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in the user message,"
                    " before any other content"
                )


def _validate_tools(tools: Any, tool_choice: Any) -> None:
    if not isinstance(tools, list):
        raise _Invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for t, tool in enumerate(tools):
        where = f"tools.{t}"
        if not isinstance(tool, dict):
            raise _Invalid(f"{where}: Input should be a valid dictionary")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _Invalid(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if name in names:
            raise _Invalid("tools: Tool names must be unique.")
        names.add(name)
        _check_cache_control(tool.get("cache_control"), where)
        if tool.get("type") in (None, "custom"):  # server tools (web_search_…) have no input_schema
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                raise _Invalid(f"{where}.custom.input_schema: Field required")
            if schema.get("type") != "object":
                raise _Invalid(f"{where}.custom.input_schema.type: Input should be 'object'")
    if tool_choice is not None:
        kind = tool_choice.get("type") if isinstance(tool_choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise _Invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
        if kind == "tool" and tool_choice.get("name") not in names:
            raise _Invalid(f"tool_choice: Tool '{tool_choice.get('name')}' not found in tools")


def _check_system_message(message: dict[str, Any], where: str) -> None:
    """A mid-conversation ``role: "system"`` message: a non-empty string or text blocks."""
    content = message.get("content")
    if isinstance(content, str):
        _check_text(content, f"{where}.content")
        return
    if not isinstance(content, list) or not content:
        raise _Invalid(f"{where}.content: Input should be a non-empty string or list")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _Invalid(f"{where}.content.{j}.type: Input should be 'text'")
        _check_block(block, f"{where}.content.{j}")


def _unsupported_thinking(name: str) -> _Invalid:
    return _Invalid(
        f'"{name}" is not supported for this model. Use "thinking.type.adaptive" and "output_config.effort"'
        " to control thinking behavior."
    )


def _check_thinking(config: Any) -> None:
    """Current models think adaptively; only the display and block binding are settable."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise _Invalid("thinking: Input should be a valid dictionary")
    kind = config.get("type")
    if kind not in _THINKING_TYPES:
        raise _Invalid(f"thinking.type: Input tag '{kind}' found using 'type' does not match any of the expected tags")
    if kind != "adaptive":
        raise _unsupported_thinking(f"thinking.type.{kind}")
    if "budget_tokens" in config:
        raise _unsupported_thinking("thinking.budget_tokens")
    for key in sorted(config.keys() - _THINKING_KEYS):
        raise _Invalid(f"thinking.adaptive.{key}: Extra inputs are not permitted")
    if config.get("display") not in (None, *_DISPLAYS):
        raise _Invalid("thinking.adaptive.display: Input should be 'summarized' or 'omitted'")
    binding = config.get("block_binding")
    if binding is None:
        return
    if not isinstance(binding, dict):
        raise _Invalid("thinking.adaptive.block_binding: Input should be a valid dictionary")
    for key in sorted(binding.keys() - {"prefix_mismatch_behavior"}):
        raise _Invalid(f"thinking.adaptive.block_binding.{key}: Extra inputs are not permitted")
    if binding.get("prefix_mismatch_behavior") not in (None, "error", "drop_block"):
        raise _Invalid(
            "thinking.adaptive.block_binding.prefix_mismatch_behavior: Input should be 'error' or 'drop_block'"
        )


def _check_output_config(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise _Invalid("output_config: Input should be a valid dictionary")
    for key in sorted(config.keys() - _OUTPUT_CONFIG_KEYS):
        raise _Invalid(f"output_config.{key}: Extra inputs are not permitted")
    if config.get("effort") not in (None, *_EFFORTS):
        raise _Invalid("output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")


def _check_current_model_params(body: dict[str, Any]) -> None:
    """What the late-2026 models refuse: sampling knobs, fixed thinking, prefill, forced tools."""
    for key in _SAMPLING_PARAMS:
        if key in body:
            raise _Invalid(f"`{key}` is deprecated for this model.")
    _check_thinking(body.get("thinking"))
    _check_output_config(body.get("output_config"))
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise _Invalid('tool_choice: type "tool" and "any" are not supported for this model.')
    roles = [m.get("role") for m in body["messages"] if isinstance(m, dict) and m.get("role") != "system"]
    if roles and roles[-1] == "assistant":
        raise _Invalid(
            "This model does not support assistant message prefill. The conversation must end with a user message."
        )


def _validate(body: dict[str, Any]) -> None:
    current_model = isinstance(body.get("model"), str) and _family(body["model"]) is not None
    allowed = _TOP_LEVEL_PARAMS | (frozenset(_SAMPLING_PARAMS) if current_model else frozenset())
    for key in sorted(body.keys() - allowed):
        raise _Invalid(f"{key}: Extra inputs are not permitted")
    if "model" not in body:
        raise _Invalid("model: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise _Invalid("model: Input should be a valid string")
    if "max_tokens" not in body:
        raise _Invalid("max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise _Invalid("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _Invalid("max_tokens: Input should be greater than or equal to 1")
    if "messages" not in body:
        raise _Invalid("messages: Field required")
    if not isinstance(body["messages"], list):
        raise _Invalid("messages: Input should be a valid list")
    if not body["messages"]:
        raise _Invalid("messages: at least one message is required")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _Invalid("stream: Input should be a valid boolean")
    if current_model:
        _check_current_model_params(body)

    system = body.get("system")
    if isinstance(system, list):
        for k, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _Invalid(f"system.{k}.type: Input should be 'text'")
            _check_block(block, f"system.{k}")
    elif system is not None and not isinstance(system, str):
        raise _Invalid("system: Input should be a valid string or list")
    if "tools" in body:
        _validate_tools(body["tools"], body.get("tool_choice"))
    elif body.get("tool_choice") not in (None, {"type": "none"}, {"type": "auto"}):
        raise _Invalid("tool_choice: may only be specified while providing tools")
    _check_cache_control(body.get("cache_control"), "cache_control")
    _validate_messages(body["messages"], has_tools=bool(body.get("tools")), current_model=current_model)


# --------------------------------------------------------------------------- prompt blocks and cache


@dataclass(frozen=True)
class _Block:
    key: str  # sha256 of (model, every block up to and including this one) without cache_control
    tokens: int
    cache_control: dict[str, Any] | None


def _without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    """The block as cache keys and token counts see it. Only the block's own (and, for a
    tool_result, its content blocks') ``cache_control`` is removed: tool inputs and
    schemas are user data and stay untouched."""
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if out.get("type") == "tool_result" and isinstance(out.get("content"), list):
        out["content"] = [_without_cache_control(b) if isinstance(b, dict) else b for b in out["content"]]
    return out


def _cache_control_of(block: dict[str, Any]) -> dict[str, Any] | None:
    """A block's breakpoint; a marker on a tool_result's inner block marks the tool_result."""
    if block.get("cache_control"):
        return block["cache_control"]
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        inner = [b["cache_control"] for b in block["content"] if isinstance(b, dict) and b.get("cache_control")]
        return inner[-1] if inner else None
    return None


def _count_cache_controls(body: dict[str, Any]) -> int:
    blocks: list[Any] = list(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body["messages"]:
        if isinstance(message["content"], list):
            for block in message["content"]:
                blocks.append(block)
                if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                    blocks += block["content"]
    count = sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))
    return count + (1 if body.get("cache_control") else 0)


def _prompt_blocks(body: dict[str, Any]) -> list[_Block]:
    """The prompt as a list of blocks in cache-prefix order: tools, system, messages."""
    items: list[tuple[str, dict[str, Any]]] = [("tools", tool) for tool in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str) and system:
        items.append(("system", text(system)))
    elif isinstance(system, list):
        items += [("system", block) for block in system]
    for message in body["messages"]:
        items += [(message["role"], block) for block in _blocks_of(message["content"])]

    digest = hashlib.sha256(body["model"].encode())
    out = []
    for where, block in items:
        bare = _without_cache_control(block)
        digest.update(_canonical([where, bare]).encode() + b"\n")
        out.append(_Block(digest.copy().hexdigest(), count_tokens(bare), _cache_control_of(block)))
    if body.get("cache_control") and out:  # top-level: a marker on the last block
        last = out[-1]
        out[-1] = _Block(last.key, last.tokens, body["cache_control"])
    return out


# --------------------------------------------------------------------------- thinking binding

_SIGNING_KEY = b"fake-anthropic/thinking-binding"
_THINKING_BLOCKS = ("thinking", "redacted_thinking")
_BINDING_BETA = "thinking-binding-controls-2026-08-01"
_PREFIX_MISMATCH = (
    "{path}: Invalid `signature` in `thinking` block. The block is bound to a different conversation."
    ' Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)
_NEEDS_BETA = f"That setting requires the `{_BINDING_BETA}` value in the `anthropic-beta` header."


def _account_of(model: str, api_key: str) -> str:
    """Sonnet and Haiku 5.5 bind their thinking to the account (here: the API key)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16] if model in _ACCOUNT_BOUND else ""


def _bare(block: dict[str, Any]) -> dict[str, Any]:
    """A block as the binding compares it: no ``cache_control`` markers, no null fields."""
    return {k: v for k, v in _without_cache_control(block).items() if v is not None}


def _sealed_value(block: dict[str, Any]) -> Any:
    return block.get("signature") if block["type"] == "thinking" else block.get("data")


def _sealed_text(block: dict[str, Any]) -> str:
    """What a seal covers of its own block: a thinking block's text (editing it breaks the seal)."""
    return f"thinking:{block.get('thinking')}" if block["type"] == "thinking" else "redacted_thinking"


def _origin(sealed: Any) -> tuple[str, str] | None:
    """The (model, account) a signature names, or None if it is not one of the fake's."""
    if not isinstance(sealed, str) or "." not in sealed:
        return None
    head = sealed.split(".", 1)[0]
    try:
        origin = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, binascii.Error):
        return None
    valid = isinstance(origin, list) and len(origin) == 2 and all(isinstance(part, str) for part in origin)
    return (origin[0], origin[1]) if valid else None


class _Transcript:
    """A running digest of the prompt as the model sees it: ``system`` and ``tools``, then
    every block in order (a string content counts as its one text block). A thinking
    block's seal covers the digest up to it, so any change before it breaks the seal."""

    def __init__(self, body: dict[str, Any]) -> None:
        head = [
            [_bare(block) for block in _blocks_of(body.get("system") or "")],
            [_bare(tool) for tool in body.get("tools") or []],
        ]
        self._digest = hashlib.sha256(_canonical(head).encode())

    def copy(self) -> _Transcript:
        clone = copy.copy(self)
        clone._digest = self._digest.copy()
        return clone

    def add(self, role: str, block: dict[str, Any]) -> None:
        self._digest.update(_canonical([role, _bare(block)]).encode() + b"\n")

    def seal(self, model: str, account: str, block: dict[str, Any]) -> str:
        """The signature (or redacted ``data``) ``block`` gets at this point of the prompt."""
        head = base64.urlsafe_b64encode(_canonical([model, account]).encode()).decode().rstrip("=")
        covered = "\n".join([head, self._digest.hexdigest(), _sealed_text(block)])
        return f"{head}.{hmac.new(_SIGNING_KEY, covered.encode(), hashlib.sha256).hexdigest()}"

    def failed_check(self, block: dict[str, Any], model: str, api_key: str) -> str | None:
        """Why a thinking block sent back here is unusable (an ``input_transformations``
        reason, checked in the API's order of precedence), or None if it is valid."""
        sealed = _sealed_value(block)
        origin = _origin(sealed)
        if origin is None:
            return "prefix_binding_mismatch"
        made_by, account = origin
        if account != _account_of(made_by, api_key):
            return "organization_binding_mismatch"
        if made_by != model:
            return "model_binding_mismatch"
        if not hmac.compare_digest(sealed.encode(), self.seal(made_by, account, block).encode()):
            return "prefix_binding_mismatch"
        return None


@dataclass(frozen=True)
class _Prompt:
    """A request as the model sees it: thinking blocks that failed their binding removed."""

    body: dict[str, Any]
    transcript: _Transcript  # of ``body``, for sealing the reply's thinking
    transformations: list[dict[str, str]] | None  # None: not reported (no beta header)


def _bind_thinking(body: dict[str, Any], headers: dict[str, str], api_key: str) -> _Prompt:
    """Check every thinking block the request sends back (current models only) and drop the
    ones the model may not read; 400 on a prefix mismatch unless the request opted into
    ``drop_block`` with the beta header."""
    model = _family(body["model"])
    transcript = _Transcript(body)
    messages, dropped = [], []
    for i, message in enumerate(body["messages"]):
        kept = []
        for j, block in enumerate(_blocks_of(message["content"])):
            if model and message["role"] == "assistant" and block["type"] in _THINKING_BLOCKS:
                reason = transcript.failed_check(block, model, api_key)
                if reason:
                    dropped.append({"type": "thinking_dropped", "path": f"messages.{i}.content.{j}", "reason": reason})
                    continue
            transcript.add(message["role"], block)
            kept.append(block)
        messages.append({**message, "content": kept} if isinstance(message["content"], list) else message)
    if model is None:
        return _Prompt(body, transcript, None)

    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    binding = (body.get("thinking") or {}).get("block_binding") or {}
    wants_drop = binding.get("prefix_mismatch_behavior") == "drop_block"
    mismatched = [d for d in dropped if d["reason"] == "prefix_binding_mismatch"]
    if mismatched and not (wants_drop and _BINDING_BETA in betas):
        message = _PREFIX_MISMATCH.format(path=mismatched[0]["path"])
        raise _Invalid(f"{message} {_NEEDS_BETA}" if wants_drop else message)
    return _Prompt({**body, "messages": messages}, transcript, dropped if _BINDING_BETA in betas else None)


def _between_tools_as_thinking(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Current models write the text of a turn that calls tools into thinking."""
    if not any(b["type"] == "tool_use" for b in blocks):
        return blocks
    return [thinking(b["text"]) if b["type"] == "text" else b for b in blocks]


def _displayed(block: dict[str, Any], summarized: bool) -> dict[str, Any]:
    """A scripted thinking block as the display setting shows it (unsealed yet)."""
    if block["type"] != "thinking":
        return block
    return thinking((block["thinking"] or DEFAULT_THINKING_SUMMARY) if summarized else "")


def _visible(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in blocks if b["type"] not in _THINKING_BLOCKS]


def _output_usage(content: list[dict[str, Any]], thinking_tokens: int | None) -> dict[str, Any]:
    """Output tokens: the visible blocks plus, on a current model, the reasoning."""
    if thinking_tokens is None:
        return {"output_tokens": count_tokens(content)}
    visible = _visible(content)
    return {
        "output_tokens": thinking_tokens + (count_tokens(visible) if visible else 0),
        "output_tokens_details": {"thinking_tokens": thinking_tokens},
    }


def _fit(blocks: list[dict[str, Any]], thinking_tokens: int, max_tokens: int) -> tuple[list[dict[str, Any]], int, bool]:
    """``blocks`` cut to what ``max_tokens`` leaves after the reasoning: (blocks, thinking
    tokens, whether anything was cut). A cut text keeps its longest fitting prefix; a
    tool_use that does not fit is dropped; nothing after a cut is kept."""
    if thinking_tokens >= max_tokens:
        return list(itertools.takewhile(lambda b: b["type"] in _THINKING_BLOCKS, blocks)), max_tokens, True
    kept: list[dict[str, Any]] = []
    for block in blocks:
        if _output_usage([*kept, block], thinking_tokens)["output_tokens"] <= max_tokens:
            kept.append(block)
            continue
        if block["type"] == "text":
            kept += _longest_fitting_text(kept, block["text"], thinking_tokens, max_tokens)
        return kept, thinking_tokens, True
    return kept, thinking_tokens, False


def _longest_fitting_text(
    kept: list[dict[str, Any]], value: str, thinking_tokens: int, max_tokens: int
) -> list[dict[str, Any]]:
    """The longest non-blank prefix of ``value`` that still fits after ``kept`` (as a list of
    at most one text block)."""
    lo, hi = 0, len(value)
    while lo < hi:  # binary search: output tokens grow with the prefix length
        mid = (lo + hi + 1) // 2
        if _output_usage([*kept, text(value[:mid])], thinking_tokens)["output_tokens"] <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    prefix = value[:lo].rstrip()
    return [text(prefix)] if prefix else []


# --------------------------------------------------------------------------- the server


@dataclass
class _HeldThread:
    """A conversation the server holds up to one reply: its create-only fields and turns."""

    fields: dict[str, Any]
    messages: list[dict[str, Any]]
    continued: bool = False


class FakeAnthropic:
    """A fake ``POST /v1/messages`` on 127.0.0.1 with a random port; see the module docstring."""

    def __init__(
        self,
        api_key: str = "sk-ant-test",
        *,
        min_cacheable_tokens: int = 1024,
        context_window: int | None = None,
        thinking_by_effort: dict[str, int] | None = None,
    ) -> None:
        self.api_key = api_key
        self.latency_seconds = 0.0  # each answered request waits this long before its response (benchmarks)
        # Streamed text: each text block in deltas of this many characters (None: three pieces), with
        # `text_delta_seconds` between deltas (pacing, e.g. 40 tokens/s ≈ 4 characters every 0.025 s).
        self.text_delta_chars: int | None = None
        self.text_delta_seconds = 0.0
        self.text_deltas_sent = 0  # text deltas written so far (a test can act mid-stream)
        self.text_delta_times: list[float] = []  # time.monotonic() as each text delta was written (benchmarks)
        # marker -> seconds: once a text block's streamed text contains `marker`, pause that long (once), e.g.
        # to leave a client with half a secret in its buffer for a while.
        self.pause_after: dict[str, float] = {}
        self.thinking_by_effort = thinking_by_effort  # e.g. EFFORT_THINKING_TOKENS; None: DEFAULT_THINKING_TOKENS
        self._threads: dict[str, _HeldThread] = {}  # reply id -> the conversation the server holds up to it
        self.min_cacheable_tokens = min_cacheable_tokens
        # When set, prompts over this many tokens get 400 "prompt is too long: …".
        self.context_window = context_window
        self.requests: list[RecordedRequest] = []
        self._script: list[ScriptItem] = []
        self._failing: dict[str, Error] = {}  # model (prefix) -> the error every request for it gets
        self._cache: dict[str, tuple[float, float]] = {}  # key -> (expires_at, ttl seconds)
        self._clock_offset = 0.0
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # -- lifecycle

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle_messages)
        # A streaming handler whose client stopped reading (but kept the connection) would
        # otherwise hold cleanup for aiohttp's default 60 s.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- test-facing API

    def script(self, *items: ScriptItem) -> None:
        """Append responses, consumed one per accepted request (FIFO)."""
        self._script.extend(items)

    def forget(self) -> None:
        """Drop the requests recorded and the conversations held so far (a long benchmark keeps none of them: a
        growing heap makes the garbage collector's pauses land on whichever contender runs)."""
        self.requests.clear()
        self._threads.clear()

    def assert_complete(self) -> None:
        """Fail if scripted responses were never used."""
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted response(s) not used: {self._script!r}")

    async def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:  # noqa: ASYNC109
        """Wait until at least ``n`` requests arrived (a streaming one may still be in flight)."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: len(self.requests) >= n)
        except TimeoutError:
            raise AssertionError(f"expected {n} request(s) within {timeout}s, got {len(self.requests)}") from None
        return list(self.requests)

    def fail_model(self, model: str, err: Error | None = None) -> None:
        """Answer every later valid request for ``model`` (or an id starting with it) with
        ``err`` (default 529 overloaded) without consuming the script, until ``restore_model``."""
        self._failing[model] = err or error(529, "overloaded_error")

    def restore_model(self, model: str) -> None:
        """Stop failing ``model`` (see ``fail_model``)."""
        self._failing.pop(model, None)

    def cost_usd(self) -> float:
        """What every answered request cost, each at the price of the model that answered it."""
        answered = [r for r in self.requests if r.status == 200]
        unpriced = sorted({r.response["model"] for r in answered if r.cost_usd is None and r.response})
        if unpriced:
            raise AssertionError(f"the fake has no price for {', '.join(unpriced)}")
        return sum(r.cost_usd or 0.0 for r in answered)

    def advance(self, seconds: float) -> None:
        """Move the cache clock forward (entries live 5 minutes, or 1 hour with ttl "1h")."""
        self._clock_offset += seconds

    def now(self) -> float:
        return time.monotonic() + self._clock_offset

    # -- request handling

    def _check_headers(self, headers: dict[str, str]) -> Error | None:
        bearer = headers.get("authorization", "")
        key = bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else headers.get("x-api-key")
        if key != self.api_key:
            return error(401, "authentication_error", "invalid x-api-key")
        if "anthropic-version" not in headers:
            return error(400, "invalid_request_error", "anthropic-version: header is required")
        return None

    def _model_failure(self, model: str) -> Error | None:
        return next((err for prefix, err in self._failing.items() if model.startswith(prefix)), None)

    def _next_item(self, body: dict[str, Any]) -> Reply | Error | RepeatingText:
        if not self._script:
            return Error(500, "api_error", "fake: no scripted response left", {"x-should-retry": "false"})
        item = self._script.pop(0)
        if callable(item):
            try:
                item = item(copy.deepcopy(body))
            except Exception as exc:  # surface test bugs as a clear, non-retried error
                return Error(500, "api_error", f"fake: script callable raised {exc!r}", {"x-should-retry": "false"})
        if not isinstance(item, Reply | Error | RepeatingText):
            return Error(500, "api_error", f"fake: not a script item: {item!r}", {"x-should-retry": "false"})
        return item

    def _account(self, body: dict[str, Any]) -> dict[str, int]:
        """Input-side usage of an accepted request, reading and writing the prompt cache."""
        blocks = _prompt_blocks(body)
        cumulative = list(itertools.accumulate(b.tokens for b in blocks))
        total = cumulative[-1] if cumulative else 0
        breakpoints = [i for i, b in enumerate(blocks) if b.cache_control]
        now = self.now()

        # The longest live cached prefix ending at a breakpoint or up to 20 blocks before one.
        hit = -1
        for bp in breakpoints:
            for i in range(bp, max(-1, bp - _LOOKBACK_BLOCKS - 1), -1):
                entry = self._cache.get(blocks[i].key)
                if entry and entry[0] > now:
                    hit = max(hit, i)
                    break
        read = cumulative[hit] if hit >= 0 else 0
        if hit >= 0:  # a read refreshes the entry
            ttl = self._cache[blocks[hit].key][1]
            self._cache[blocks[hit].key] = (now + ttl, ttl)

        creation = 0
        for bp in breakpoints:
            if cumulative[bp] < self.min_cacheable_tokens:
                continue  # too short to cache at all
            ttl = _TTL_SECONDS[(blocks[bp].cache_control or {}).get("ttl", "5m")]
            self._cache[blocks[bp].key] = (now + ttl, ttl)
            creation = max(creation, cumulative[bp] - read)
        return {
            "input_tokens": total - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }

    def _check_semantics(self, body: dict[str, Any], shown: dict[str, Any]) -> None:
        """Rules needing the whole prompt: breakpoint count and order on the request, the
        context window on what the model is shown."""
        found = _count_cache_controls(body)
        if found > _MAX_BREAKPOINTS:
            raise _Invalid(f"A maximum of {_MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")
        blocks = _prompt_blocks(shown)
        ttls = [b.cache_control.get("ttl", "5m") for b in blocks if b.cache_control]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
            raise _Invalid("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
        total = sum(b.tokens for b in blocks)
        if self.context_window is not None and total > self.context_window:
            raise _Invalid(f"prompt is too long: {total} tokens > {self.context_window} maximum")

    def _message(self, seq: int, prompt: _Prompt, outcome: Reply | RepeatingText, stream: bool) -> dict[str, Any]:
        """The Message JSON for an accepted request (also what a stream adds up to)."""
        body = prompt.body
        model = (outcome.model if isinstance(outcome, Reply) else None) or body["model"]
        content, stop_reason, thinking_tokens = self._answer(prompt, model, outcome)
        if isinstance(outcome, RepeatingText) and not stream:
            content, stop_reason = [*content, text(outcome.unit * outcome.max_chunks)], "max_tokens"
        message = {
            "id": f"msg_fake_{seq:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {**self._account(body), **_output_usage(content, thinking_tokens)},
        }
        if prompt.transformations is not None:
            message["input_transformations"] = prompt.transformations
        return message

    def _answer(
        self, prompt: _Prompt, model: str, outcome: Reply | RepeatingText
    ) -> tuple[list[dict[str, Any]], str | None, int | None]:
        """The reply's content (thinking sealed), stop reason (None: a stream fills it in) and
        thinking tokens (None: an older model, whose output is its content alone)."""
        family = _family(model)
        scripted = copy.deepcopy(outcome.content) if isinstance(outcome, Reply) else []
        stop_reason = outcome.stop_reason if isinstance(outcome, Reply) else None
        if family is None:
            return self._sealed(prompt, model, scripted), stop_reason, None

        settings = prompt.body.get("thinking") or {}
        blocks = _between_tools_as_thinking(scripted)
        if not blocks or blocks[0]["type"] not in _THINKING_BLOCKS:
            blocks.insert(0, thinking())
        blocks = [_displayed(b, settings.get("display") == "summarized") for b in blocks]
        spent = outcome.thinking_tokens if isinstance(outcome, Reply) else DEFAULT_THINKING_TOKENS
        if spent is None:
            spent = self._default_thinking(prompt.body, family)
        if isinstance(outcome, Reply):
            blocks, spent, cut = _fit(blocks, spent, prompt.body["max_tokens"])
            stop_reason = "max_tokens" if cut else stop_reason
        return self._sealed(prompt, family, blocks), stop_reason, spent

    def _default_thinking(self, body: dict[str, Any], family: str) -> int:
        """Reasoning tokens of a reply that did not script them: by effort when configured."""
        if self.thinking_by_effort is None:
            return DEFAULT_THINKING_TOKENS
        effort = (body.get("output_config") or {}).get("effort") or _DEFAULT_EFFORT.get(family, "high")
        return self.thinking_by_effort[effort]

    def _thread_body(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any] | Error:
        """The whole request a threaded one stands for (the held turns, then the new ones), or its rejection."""
        thread = body.get("thread")
        if thread is None:
            return body
        if THREADS_BETA not in headers.get("anthropic-beta", ""):
            raise _Invalid(f"thread: requires the `{THREADS_BETA}` value in the `anthropic-beta` header.")
        if not isinstance(thread, dict) or thread.get("type") not in ("create", "continue"):
            raise _Invalid("thread.type: Input should be 'create' or 'continue'")
        full = {k: v for k, v in body.items() if k != "thread"}
        if thread["type"] == "create":
            return full
        for name in ("system", "tools"):
            if name in body:
                raise _Invalid(f"{name}: not allowed on a thread continue (the thread keeps its own)")
        held = self._threads.get(thread.get("previous_message_id") or "")
        if held is None:
            return error(404, "not_found_error", "thread not found", details={"error_code": "thread_not_found"})
        if held.continued:
            return error(
                400,
                "invalid_request_error",
                "this message was already continued",
                details={"error_code": "thread_already_continued"},
            )
        return {**full, **held.fields, "messages": [*held.messages, *body["messages"]]}

    def _hold_thread(self, full: dict[str, Any], rec: RecordedRequest) -> None:
        """After an answered threaded request: the server keeps the conversation under the reply's id."""
        thread = (rec.body or {}).get("thread")
        if not isinstance(thread, dict) or rec.status != 200 or rec.response is None:
            return
        if previous := self._threads.get(thread.get("previous_message_id") or ""):
            previous.continued = True
        turns = [*full["messages"], {"role": "assistant", "content": rec.response["content"]}]
        self._threads[rec.response["id"]] = _HeldThread(
            fields={k: full[k] for k in ("system", "tools") if k in full},
            messages=[{**m, "content": [_without_cache_control(b) for b in _blocks_of(m["content"])]} for m in turns],
        )

    def _sealed(self, prompt: _Prompt, model: str, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``blocks`` with every thinking block signed for where it stands in the prompt."""
        transcript, account = prompt.transcript.copy(), _account_of(model, self.api_key)
        for block in blocks:
            if block["type"] == "thinking":
                block["signature"] = transcript.seal(model, account, block)
            elif block["type"] == "redacted_thinking":
                block["data"] = transcript.seal(model, account, block)
            transcript.add("assistant", block)
        return blocks

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        seq = next(self._ids)
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = None
        rec = RecordedRequest(
            body=body,
            headers=headers,
            request_id=f"req_fake_{seq:04d}",
            stream=body is not None and body.get("stream") is True,
        )

        prompt: _Prompt | None = None
        outcome: Reply | Error | RepeatingText | None = self._check_headers(headers)
        if outcome is None and body is None:
            outcome = error(400, "invalid_request_error", "The request body is not a valid JSON object.")
        full = body
        if outcome is None:
            assert body is not None
            try:
                threaded = self._thread_body(body, headers)
                if isinstance(threaded, Error):
                    outcome = threaded
                else:
                    full = threaded
                    _validate(full)
                    prompt = _bind_thinking(full, headers, self.api_key)
                    self._check_semantics(full, prompt.body)
            except _Invalid as exc:
                outcome = error(400, "invalid_request_error", str(exc))
        if outcome is None:
            assert full is not None
            outcome = self._model_failure(full["model"]) or self._next_item(full)

        # Everything up to here is synchronous, so a waiter woken below already sees the
        # full response of a non-streamed request.
        if isinstance(outcome, Error):
            rec.status, rec.response = outcome.status, outcome.body()
        else:
            assert prompt is not None
            rec.status, rec.response = 200, self._message(seq, prompt, outcome, rec.stream)
            assert full is not None
            self._hold_thread(full, rec)
        self.requests.append(rec)
        async with self._changed:
            self._changed.notify_all()

        try:
            if self.latency_seconds and not isinstance(outcome, Error):
                await asyncio.sleep(self.latency_seconds)  # the model's time to answer (benchmarks)
            if isinstance(outcome, Error):
                return web.json_response(
                    rec.response, status=outcome.status, headers={"request-id": rec.request_id, **outcome.headers}
                )
            if not rec.stream:
                return web.json_response(rec.response, headers={"request-id": rec.request_id})
            return await self._stream(request, rec, outcome)
        finally:
            rec.finished.set()

    async def _stream(
        self, request: web.Request, rec: RecordedRequest, outcome: Reply | RepeatingText
    ) -> web.StreamResponse:
        """Send ``rec.response`` as the real SSE event sequence."""
        message = rec.response
        assert message is not None
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": rec.request_id,
            }
        )
        await resp.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode())

        try:
            input_usage = {k: v for k, v in message["usage"].items() if not k.startswith("output_tokens")}
            start = {**message, "content": [], "stop_reason": None, "usage": {**input_usage, "output_tokens": 1}}
            await send("message_start", {"type": "message_start", "message": start})
            if not message["content"] and isinstance(outcome, Reply):
                await send("ping", {"type": "ping"})
            for index, block in enumerate(message["content"]):
                await self._stream_block(index, block, send, request)
            if isinstance(outcome, RepeatingText):
                await self._stream_repeating(request, rec, outcome, send)
            output_usage = {k: v for k, v in message["usage"].items() if k.startswith("output_tokens")}
            await send(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": output_usage,
                },
            )
            await send("message_stop", {"type": "message_stop"})
            await resp.write_eof()
        except ConnectionError:  # includes aiohttp's ClientConnectionResetError
            rec.cancelled = not self._closing
        return resp

    async def _stream_block(
        self, index: int, block: dict[str, Any], send: Callable[..., Any], request: web.Request
    ) -> None:
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _split(json.dumps(block["input"]))]
        elif block["type"] == "text":
            start = {"type": "text", "text": ""}
            pieces = (
                _split(block["text"])
                if self.text_delta_chars is None
                else _split(block["text"], max(1, -(-len(block["text"]) // self.text_delta_chars)))
            )
            deltas = [{"type": "text_delta", "text": p} for p in pieces]
        elif block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _split(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":
            start, deltas = block, []
        else:
            raise ValueError(f"fake cannot stream a {block['type']!r} block")
        await send("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            await send("ping", {"type": "ping"})  # the real API pings after the first block starts
        streamed = ""
        for delta in deltas:
            if delta["type"] == "text_delta" and self.text_delta_seconds:
                if self._closing or request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("client went away")
                await asyncio.sleep(self.text_delta_seconds)  # the model writing (pacing, for benchmarks and tests)
            await send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            if delta["type"] == "text_delta":
                self.text_deltas_sent += 1
                self.text_delta_times.append(time.monotonic())
                streamed += delta["text"]
                for marker in [m for m in self.pause_after if m in streamed]:
                    await asyncio.sleep(self.pause_after.pop(marker))
                async with self._changed:
                    self._changed.notify_all()
        await send("content_block_stop", {"type": "content_block_stop", "index": index})

    async def _stream_repeating(
        self, request: web.Request, rec: RecordedRequest, outcome: RepeatingText, send: Callable[..., Any]
    ) -> None:
        """Text deltas of ``outcome.unit`` (after the blocks already sent) until the client hangs
        up, keeping ``rec.response`` equal to what was sent so far."""
        message = rec.response
        assert message is not None
        index, block = len(message["content"]), text("")
        thinking_tokens = message["usage"].get("output_tokens_details", {}).get("thinking_tokens")
        message["content"].append(block)
        await send("content_block_start", {"type": "content_block_start", "index": index, "content_block": text("")})
        if index == 0:
            await send("ping", {"type": "ping"})
        for _ in range(outcome.max_chunks):
            if self._closing or request.transport is None or request.transport.is_closing():
                raise ConnectionResetError("client went away")
            delta = {"type": "text_delta", "text": outcome.unit}
            await send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            block["text"] += outcome.unit
            message["usage"].update(_output_usage(message["content"], thinking_tokens))
            await asyncio.sleep(0)  # yield: lets the client read (and hang up) between chunks
        await send("content_block_stop", {"type": "content_block_stop", "index": index})
        message["stop_reason"] = "max_tokens"


def _split(value: str, parts: int = 3) -> list[str]:
    """``value`` in up to ``parts`` non-empty pieces (none for an empty string)."""
    size = max(1, -(-len(value) // parts))
    return [value[i : i + size] for i in range(0, len(value), size)]
