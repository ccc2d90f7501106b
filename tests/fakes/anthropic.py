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

Script items are consumed one per accepted ``POST /v1/messages`` (FIFO). Requests
rejected by auth or validation are recorded but consume nothing.

Token model (see ``count_tokens``): the prompt is a list of blocks in the order
tools, system, message content; each block costs ``count_tokens(block)`` with its
``cache_control`` removed (a string ``system`` or message ``content`` counts as one
``{"type": "text", "text": ...}`` block).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "FakeAnthropic",
    "RecordedRequest",
    "count_tokens",
    "error",
    "repeating_text",
    "reply",
    "text",
    "tool_use",
]

# --------------------------------------------------------------------------- tokens


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def count_tokens(obj: Any) -> int:
    """The fake's deterministic token estimate: a quarter of the canonical JSON length."""
    return max(1, len(_canonical(obj)) // 4)


# --------------------------------------------------------------------------- script items

_tool_ids = itertools.count(1)


def text(value: str) -> dict[str, Any]:
    """A text content block for ``reply``."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool_use content block for ``reply``; the id defaults to a process-unique ``toolu_NNN``."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_tool_ids):03d}", "name": name, "input": input}


@dataclass(frozen=True)
class Reply:
    content: list[dict[str, Any]]
    stop_reason: str
    model: str | None = None


@dataclass(frozen=True)
class Error:
    status: int
    type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.type, "message": self.message}}


@dataclass(frozen=True)
class RepeatingText:
    unit: str
    max_chunks: int = 5000


ScriptItem = Reply | Error | RepeatingText | Callable[[dict[str, Any]], "Reply | Error | RepeatingText"]


def reply(*blocks: dict[str, Any], stop_reason: str | None = None, model: str | None = None) -> Reply:
    """A successful Message. ``stop_reason`` defaults to tool_use/end_turn from the blocks;
    ``model`` defaults to the request's model."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return Reply(content=[copy.deepcopy(b) for b in blocks], stop_reason=stop_reason, model=model)


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
) -> Error:
    """An HTTP error with Anthropic's error body, e.g. ``error(429, "rate_limit_error",
    headers={"retry-after": "0.01"})``. Sent before any SSE for streamed requests."""
    return Error(status, type, message or _DEFAULT_ERROR_MESSAGES.get(type, type), dict(headers or {}))


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


def _validate_messages(messages: list[Any], has_tools: bool) -> None:
    """Per-message shape, then the turn rules on merged turns: the API combines
    consecutive same-role messages into one turn (documented in the SDK's ``messages``
    docstring), so the tool_use/tool_result rules apply to those merged turns."""
    # turns: [role, [(message index, block index, block)]]
    turns: list[tuple[str, list[tuple[int, int, dict[str, Any]]]]] = []
    seen_tool_use_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise _Invalid(f"{where}: Input should be a valid dictionary")
        role = message.get("role")
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
            blocks = [text(content)] if content else []
        elif isinstance(content, list):
            if not content and not is_final_assistant:
                raise _Invalid(
                    f"{where}: all messages must have non-empty content except for the optional final assistant message"
                )
            blocks = content
        else:
            raise _Invalid(f"{where}.content: Input should be a valid string or list")
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
        if is_final_assistant and blocks and blocks[-1]["type"] == "text":
            if blocks[-1]["text"] != blocks[-1]["text"].rstrip():  # prefill
                raise _Invalid("messages: final assistant content cannot end with trailing whitespace")

        if turns and turns[-1][0] == role:
            turns[-1][1].extend((i, j, b) for j, b in enumerate(blocks))
        else:
            turns.append((role, [(i, j, b) for j, b in enumerate(blocks)]))

    if turns[0][0] != "user":
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


def _validate(body: dict[str, Any]) -> None:
    for key in sorted(body.keys() - _TOP_LEVEL_PARAMS):
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
    _validate_messages(body["messages"], has_tools=bool(body.get("tools")))


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
        content = message["content"]
        blocks = ([text(content)] if content else []) if isinstance(content, str) else content
        items += [(message["role"], block) for block in blocks]

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


# --------------------------------------------------------------------------- the server


class FakeAnthropic:
    """A fake ``POST /v1/messages`` on 127.0.0.1 with a random port; see the module docstring."""

    def __init__(
        self,
        api_key: str = "sk-ant-test",
        *,
        min_cacheable_tokens: int = 1024,
        context_window: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.min_cacheable_tokens = min_cacheable_tokens
        # When set, prompts over this many tokens get 400 "prompt is too long: …".
        self.context_window = context_window
        self.requests: list[RecordedRequest] = []
        self._script: list[ScriptItem] = []
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
            ttl = _TTL_SECONDS[blocks[bp].cache_control.get("ttl", "5m")]
            self._cache[blocks[bp].key] = (now + ttl, ttl)
            creation = max(creation, cumulative[bp] - read)
        return {
            "input_tokens": total - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }

    def _check_semantics(self, body: dict[str, Any]) -> None:
        """Rules needing the whole prompt: breakpoint count and order, context window."""
        found = _count_cache_controls(body)
        if found > _MAX_BREAKPOINTS:
            raise _Invalid(f"A maximum of {_MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")
        blocks = _prompt_blocks(body)
        ttls = [b.cache_control.get("ttl", "5m") for b in blocks if b.cache_control]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
            raise _Invalid("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
        total = sum(b.tokens for b in blocks)
        if self.context_window is not None and total > self.context_window:
            raise _Invalid(f"prompt is too long: {total} tokens > {self.context_window} maximum")

    def _message(self, seq: int, body: dict[str, Any], outcome: Reply | RepeatingText, stream: bool) -> dict[str, Any]:
        """The Message JSON for an accepted request (also what a stream adds up to)."""
        if isinstance(outcome, Reply):
            content, stop_reason, model = copy.deepcopy(outcome.content), outcome.stop_reason, outcome.model
        elif stream:  # filled in chunk by chunk by _stream_repeating
            content, stop_reason, model = [], None, None
        else:
            content, stop_reason, model = [text(outcome.unit * outcome.max_chunks)], "max_tokens", None
        return {
            "id": f"msg_fake_{seq:04d}",
            "type": "message",
            "role": "assistant",
            "model": model or body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {**self._account(body), "output_tokens": count_tokens(content)},
        }

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

        outcome = self._check_headers(headers)
        if outcome is None and body is None:
            outcome = error(400, "invalid_request_error", "The request body is not a valid JSON object.")
        if outcome is None:
            assert body is not None
            try:
                _validate(body)
                self._check_semantics(body)
            except _Invalid as exc:
                outcome = error(400, "invalid_request_error", str(exc))
        if outcome is None:
            assert body is not None
            outcome = self._next_item(body)

        # Everything up to here is synchronous, so a waiter woken below already sees the
        # full response of a non-streamed request.
        if isinstance(outcome, Error):
            rec.status, rec.response = outcome.status, outcome.body()
        else:
            assert body is not None
            rec.status, rec.response = 200, self._message(seq, body, outcome, rec.stream)
        self.requests.append(rec)
        async with self._changed:
            self._changed.notify_all()

        try:
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
            start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
            await send("message_start", {"type": "message_start", "message": start})
            if isinstance(outcome, RepeatingText):
                await self._stream_repeating(request, rec, outcome, send)
            elif not message["content"]:
                await send("ping", {"type": "ping"})
            for index, block in enumerate(message["content"] if isinstance(outcome, Reply) else []):
                await self._stream_block(index, block, send)
            await send(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": message["usage"]["output_tokens"]},
                },
            )
            await send("message_stop", {"type": "message_stop"})
            await resp.write_eof()
        except ConnectionError:  # includes aiohttp's ClientConnectionResetError
            rec.cancelled = not self._closing
        return resp

    @staticmethod
    async def _stream_block(index: int, block: dict[str, Any], send: Callable[..., Any]) -> None:
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _split(json.dumps(block["input"]))]
        elif block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _split(block["text"])]
        else:
            raise ValueError(f"fake cannot stream a {block['type']!r} block")
        await send("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            await send("ping", {"type": "ping"})  # the real API pings after the first block starts
        for delta in deltas:
            await send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        await send("content_block_stop", {"type": "content_block_stop", "index": index})

    async def _stream_repeating(
        self, request: web.Request, rec: RecordedRequest, outcome: RepeatingText, send: Callable[..., Any]
    ) -> None:
        """Text deltas of ``outcome.unit`` until the client hangs up, keeping ``rec.response``
        equal to what was sent so far."""
        message = rec.response
        assert message is not None
        block = text("")
        message["content"] = [block]
        await send("content_block_start", {"type": "content_block_start", "index": 0, "content_block": text("")})
        await send("ping", {"type": "ping"})
        for _ in range(outcome.max_chunks):
            if self._closing or request.transport is None or request.transport.is_closing():
                raise ConnectionResetError("client went away")
            delta = {"type": "text_delta", "text": outcome.unit}
            await send("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            block["text"] += outcome.unit
            message["usage"]["output_tokens"] = count_tokens(message["content"])
            await asyncio.sleep(0)  # yield: lets the client read (and hang up) between chunks
        await send("content_block_stop", {"type": "content_block_stop", "index": 0})
        message["stop_reason"] = "max_tokens"


def _split(value: str, parts: int = 3) -> list[str]:
    """``value`` in up to ``parts`` non-empty pieces (none for an empty string)."""
    size = max(1, -(-len(value) // parts))
    return [value[i : i + size] for i in range(0, len(value), size)]
