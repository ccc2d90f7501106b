"""The stand-in's records and identifiers: what a test reads back (``ApiCall``, ``Message``, ``ThreadStatus``,
``ResponseUrlCall``), Slack-style timestamps and ids, and the error a Web API method raises."""

from __future__ import annotations

import copy
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

_TS_BASE_US = 1_700_000_000_000_000
_ts_counter = itertools.count(1)
_id_counter = itertools.count(1)


def next_ts() -> str:
    """A Slack-style message timestamp, unique and increasing across the whole process.

    Shared by the fake (messages it stores) and the builders (events "typed" by users),
    so every message in a test has a distinct ts and they sort in creation order.
    """
    us = _TS_BASE_US + 100 * next(_ts_counter)
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _next_id(prefix: str, width: int = 9) -> str:
    return f"{prefix}{next(_id_counter):0{width}X}"


@dataclass
class ApiCall:
    """One Web API request as the fake saw it, with the JSON it answered."""

    method: str
    args: dict[str, Any]  # query + body merged, JSON-string fields decoded, token removed
    token: str | None
    response: dict[str, Any]
    status: int = 200
    encoding: str = "query"  # where the arguments were: "json", "form" or "query" (URL only)
    at: float = field(default_factory=time.monotonic)
    peer: str = ""  # the client's address and port: one per TCP connection

    @property
    def ok(self) -> bool:
        return bool(self.response.get("ok"))

    @property
    def error(self) -> str | None:
        return self.response.get("error")


@dataclass
class Message:
    """A message as stored in a channel (roots and thread replies alike)."""

    channel: str
    ts: str
    text: str = ""
    user: str | None = None
    bot_id: str | None = None
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None
    edited: dict[str, str] | None = None  # {"user", "ts"} once chat.update touched it
    subtype: str | None = None
    team: str | None = None
    metadata: dict[str, Any] | None = None  # chat.postMessage(metadata=...): {"event_type", "event_payload"}
    attachments: list[dict[str, Any]] | None = None  # legacy attachments (incoming webhooks post these)
    # chat.startStream: "streaming" until stopStream ("stopped") or its lifetime passes ("expired", computed)
    stream_state: str | None = None
    stream_started_at: float | None = None  # time.monotonic() at startStream
    stream_lifetime: float = 300.0

    @property
    def stream(self) -> dict[str, Any] | None:
        """The stand-in-only view of a streamed message: {"state": streaming|stopped|expired, "started_at"}."""
        if self.stream_state is None or self.stream_started_at is None:
            return None
        state = self.stream_state
        if state == "streaming" and time.monotonic() - self.stream_started_at >= self.stream_lifetime:
            state = "expired"
        return {"state": state, "started_at": self.stream_started_at}

    def to_api(self, *, include_metadata: bool = False) -> dict[str, Any]:
        """The message as Slack's API renders it (without thread bookkeeping); metadata only when asked for."""
        out: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text}
        for key in ("subtype", "user", "bot_id", "team", "thread_ts", "blocks", "attachments", "edited"):
            if value := getattr(self, key):
                out[key] = copy.deepcopy(value)
        if include_metadata and self.metadata:
            out["metadata"] = copy.deepcopy(self.metadata)
        if (stream := self.stream) is not None:
            out["_stream"] = stream  # stand-in only: the sandbox renders a message that is still growing
        return out


@dataclass
class ThreadStatus:
    """A thread's loading status (assistant.threads.setStatus), as set at `set_at` (time.monotonic())."""

    status: str
    loading_messages: list[str] | None
    set_at: float


@dataclass
class ResponseUrlCall:
    """A POST to a ``response_url``; channel/message_ts are known when the fake minted it."""

    id: str
    body: dict[str, Any]
    channel: str | None = None
    message_ts: str | None = None


class _SlackError(Exception):
    """Raised by method handlers; becomes ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, *, status: int = 200, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.error = error
        self.status = status
        self.headers = headers or {}
        self.extra = extra


def _invalid(error: str, problems: list[str], **extra: Any) -> _SlackError:
    """Slack's shape for a refusal with reasons: each also as an ``[ERROR]`` line in response_metadata."""
    return _SlackError(error, **extra, response_metadata={"messages": [f"[ERROR] {p}" for p in problems]})


def _invalid_arguments(*problems: str) -> _SlackError:
    return _invalid("invalid_arguments", list(problems))


def _invalid_blocks(errors: list[str]) -> _SlackError:
    return _invalid("invalid_blocks", errors, errors=errors)


def _require(args: dict[str, Any], *keys: str) -> None:
    """invalid_arguments naming every one of `keys` that `args` lacks (or holds empty)."""
    if missing := [k for k in keys if not args.get(k)]:
        raise _invalid_arguments(*(f"missing required field: {k}" for k in missing))


def _json_array(args: dict[str, Any], key: str) -> list[Any] | None:
    """An array argument as Slack takes it: a list, or a JSON string of one (form-encoded calls send those)."""
    value = args.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _invalid_arguments(f"must be an array [json-pointer:/{key}]") from None
    if value is not None and not isinstance(value, list):
        raise _invalid_arguments(f"must be an array [json-pointer:/{key}]")
    return value
