"""A local Slack stand-in that speaks the real wire protocols, on one loopback aiohttp server.

Shipped with opsloop for `opsloop demo` and `opsloop sandbox`, and used by the tests
(``tests/fakes/slack.py`` re-exports it). ``watch(callback)`` calls back on every change.

It serves three things:

* the Web API (``/api/<method>``) for the methods opsloop uses, with Slack's real
  success and ``ok: false`` shapes (including Block Kit validation and 429 rate limits);
* Socket Mode (``/ws``): ``apps.connections.open`` hands out this WebSocket URL, the
  fake sends ``hello`` and then ``events_api`` / ``interactive`` envelopes and records
  every frame the app sends back (the acks);
* ``response_url`` endpoints (``/response_url/<id>``).

Drive it with the real clients: ``AsyncWebClient(base_url=slack.api_url)`` and bolt's
``AsyncSocketModeHandler``. Tests observe it through plain attributes (``calls``,
``messages``, ``reactions``, ``ephemerals``, ``acks``, ``responses``) and wait on it with
``wait_for_call`` / ``wait_for_message`` / ``wait_ack`` / ``wait_connected`` -- never
with sleeps.

Several live sockets (two processes of one app): envelopes go to the newest by default;
``delivery = "round_robin"`` spreads them one per socket in turn, as Slack does over an
app's open connections, and ``delivered_on`` says which connection got each envelope.
``watch`` callbacks run synchronously on every recorded call, message and ack frame, before
the app gets its HTTP response: a test can act at an exact point (e.g. SIGKILL the app
between a ``chat.postMessage`` and its reply).

Wire facts this fake relies on (slack_sdk 3.48, see ``slack_sdk/web/async_client.py``):

* ``chat.postMessage``, ``chat.update`` and ``chat.postEphemeral`` are sent as JSON bodies
  (``blocks`` is a real list); the token travels in ``Authorization: Bearer``. So are
  ``chat.startStream`` / ``appendStream`` / ``stopStream``: a streamed message is a normal message
  whose text grows, plus the stand-in-only ``_stream`` key (``{"state", "started_at"}``) in its API
  form; ``stream_lifetime_seconds`` (Slack: about 5 minutes) closes it, after which appends and
  stops fail with ``message_not_in_streaming_state`` and leave it as it was.
* Methods called with ``params=`` -- ``auth.test``, ``reactions.add``,
  ``apps.connections.open`` -- are POSTs whose arguments sit in the **query string**,
  with an empty form-encoded body.
* ``conversations.replies``, ``users.info``, ``usergroups.list`` and ``usergroups.users.list`` are GETs.
* Other callers (curl, ``api_call(data=...)``) send form bodies in which ``blocks`` is a
  JSON string; all of these are accepted and normalised into ``ApiCall.args``.
"""

# The waits take ``timeout=`` like asyncio.wait_for; that is this fake's public API.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from aiohttp import WSCloseCode, WSMsgType, web

T = TypeVar("T")

__all__ = [
    "ApiCall",
    "FakeSlack",
    "Message",
    "ResponseUrlCall",
    "ThreadStatus",
    "app_home_opened_event",
    "block_action_payload",
    "block_errors",
    "mention_event",
    "message_event",
    "message_shortcut_payload",
    "next_ts",
]

# --------------------------------------------------------------------------------------
# Identifiers and timestamps
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


@dataclass
class ApiCall:
    """One Web API request as the fake saw it, with the JSON it answered."""

    method: str
    args: dict[str, Any]  # query + body merged, JSON-string fields decoded, token removed
    token: str | None
    response: dict[str, Any]
    status: int = 200
    http_method: str = "POST"
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
        if self.subtype:
            out["subtype"] = self.subtype
        if self.user:
            out["user"] = self.user
        if self.bot_id:
            out["bot_id"] = self.bot_id
        if self.team:
            out["team"] = self.team
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if self.blocks:
            out["blocks"] = copy.deepcopy(self.blocks)
        if self.attachments:
            out["attachments"] = copy.deepcopy(self.attachments)
        if self.edited:
            out["edited"] = dict(self.edited)
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


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: int | None
    remaining: int


class _SlackError(Exception):
    """Raised by method handlers; becomes ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, *, status: int = 200, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.error = error
        self.status = status
        self.headers = headers or {}
        self.extra = extra


def _invalid_arguments(*problems: str) -> _SlackError:
    return _SlackError(
        "invalid_arguments",
        response_metadata={"messages": [f"[ERROR] {p}" for p in problems]},
    )


# --------------------------------------------------------------------------------------
# Block Kit validation
# --------------------------------------------------------------------------------------

ALLOWED_BLOCK_TYPES = frozenset({"section", "header", "divider", "context", "actions", "rich_text", "image",
                                 "context_actions", "markdown", "plan", "task_card"})
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
# Slack documents no limit for a plan's or a task card's title; the stand-in holds them to a block_id's 255.
TASK_TITLE_MAX = 255
STATUS_EXPIRY_SECONDS = 120.0  # assistant.threads.setStatus: Slack drops a status this long after it was set
LOADING_MESSAGES_MAX = 10
VIEW_BLOCKS_MAX = 100  # views.publish: a Home tab holds at most 100 blocks
STREAM_LIFETIME_SECONDS = 300.0  # chat.startStream: Slack closes a stream about 5 minutes after it starts
STREAM_TEXT_MAX = 12_000  # markdown_text per startStream/appendStream/stopStream call
_TEXT_TYPES = ("plain_text", "mrkdwn")


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


def _check_text_object(obj: Any, ptr: str, errors: list[str], *, max_len: int, plain_only: bool = False) -> None:
    if not isinstance(obj, dict):
        errors.append(f"must be an object [json-pointer:{ptr}]")
        return
    allowed = ("plain_text",) if plain_only else _TEXT_TYPES
    if obj.get("type") not in allowed:
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/type]")
    text = obj.get("text")
    if not isinstance(text, str):
        errors.append(f"missing required field: text [json-pointer:{ptr}]")
    elif not text:
        errors.append(f"must be more than 0 characters [json-pointer:{ptr}/text]")
    elif len(text) > max_len:
        errors.append(f"must be less than {max_len + 1} characters [json-pointer:{ptr}/text]")
    if "verbatim" in obj and (obj.get("type") != "mrkdwn" or not isinstance(obj["verbatim"], bool)):
        errors.append(f"verbatim is only usable on a mrkdwn text object, as a boolean [json-pointer:{ptr}/verbatim]")


def _check_unique_id(obj: dict[str, Any], key: str, ptr: str, seen: dict[str, str], errors: list[str]) -> None:
    """block_id / action_id: at most 255 characters and unique within the message."""
    value = obj.get(key)
    if value is None:
        return
    if not isinstance(value, str) or len(value) > 255:
        errors.append(f"must be less than 256 characters [json-pointer:{ptr}/{key}]")
    elif value in seen:
        errors.append(f"duplicate {key} {value!r} [json-pointer:{ptr}/{key}]")
    else:
        seen[value] = ptr


def _check_element(el: Any, ptr: str, errors: list[str], action_ids: dict[str, str]) -> None:
    """An interactive element (button or any other with an action_id)."""
    if not isinstance(el, dict):
        errors.append(f"must be an object [json-pointer:{ptr}]")
        return
    _check_unique_id(el, "action_id", ptr, action_ids, errors)
    if el.get("type") == "button":
        _check_text_object(el.get("text"), f"{ptr}/text", errors, max_len=75, plain_only=True)
        value = el.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > 2000):
            errors.append(f"must be less than 2001 characters [json-pointer:{ptr}/value]")
        url = el.get("url")
        if url is not None and len(str(url)) > 3000:
            errors.append(f"must be less than 3001 characters [json-pointer:{ptr}/url]")
        style = el.get("style")
        if style is not None and style not in ("primary", "danger"):
            errors.append(f"must be a valid enum value [json-pointer:{ptr}/style]")


def _check_context_action(el: Any, ptr: str, errors: list[str], action_ids: dict[str, str]) -> None:
    """An element of a context_actions block: feedback_buttons (two buttons with text and value) or icon_button."""
    if not isinstance(el, dict) or el.get("type") not in ("feedback_buttons", "icon_button"):
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/type]")
        return
    _check_unique_id(el, "action_id", ptr, action_ids, errors)
    if el["type"] == "icon_button":
        return
    for side in ("positive_button", "negative_button"):
        button = el.get(side)
        if not isinstance(button, dict):
            errors.append(f"missing required field: {side} [json-pointer:{ptr}]")
            continue
        _check_text_object(button.get("text"), f"{ptr}/{side}/text", errors, max_len=75, plain_only=True)
        value = button.get("value")
        if not isinstance(value, str) or not value or len(value) > 2000:
            errors.append(f"must be between 1 and 2000 characters [json-pointer:{ptr}/{side}/value]")


def _check_title(block: dict[str, Any], ptr: str, errors: list[str]) -> None:
    title = block.get("title")
    if not isinstance(title, str):
        errors.append(f"missing required field: title [json-pointer:{ptr}]")
    elif not title.strip():
        errors.append(f"must be more than 0 characters [json-pointer:{ptr}/title]")
    elif len(title) > TASK_TITLE_MAX:
        errors.append(f"must be less than {TASK_TITLE_MAX + 1} characters [json-pointer:{ptr}/title]")


def _check_rich_text(obj: Any, ptr: str, errors: list[str]) -> None:
    """A single rich_text object (a task card's details or output): rich_text_section elements of text/user."""
    if not isinstance(obj, dict) or obj.get("type") != "rich_text":
        errors.append(f"must be a rich_text object [json-pointer:{ptr}]")
        return
    elements = obj.get("elements")
    if not isinstance(elements, list) or not elements:
        errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
        return
    for j, section in enumerate(elements):
        sp = f"{ptr}/elements/{j}"
        if not isinstance(section, dict) or section.get("type") not in (
                "rich_text_section", "rich_text_list", "rich_text_preformatted", "rich_text_quote"):
            errors.append(f"must be a valid enum value [json-pointer:{sp}/type]")
            continue
        for k, el in enumerate(section.get("elements") or []):
            ep = f"{sp}/elements/{k}"
            etype = el.get("type") if isinstance(el, dict) else None
            if etype == "text":
                if not isinstance(el.get("text"), str) or not el["text"]:
                    errors.append(f"must be more than 0 characters [json-pointer:{ep}/text]")
            elif etype == "user":
                if not isinstance(el.get("user_id"), str) or not el["user_id"]:
                    errors.append(f"missing required field: user_id [json-pointer:{ep}]")
            elif etype not in ("link", "emoji", "channel", "usergroup", "date", "broadcast", "color",
                               "rich_text_section"):
                errors.append(f"must be a valid enum value [json-pointer:{ep}/type]")


def _check_task_card(block: Any, ptr: str, errors: list[str], task_ids: set[str]) -> None:
    """A task_card, alone or in a plan: task_id, title and a known status required; details/output rich_text."""
    if not isinstance(block, dict) or block.get("type") != "task_card":
        errors.append(f"must be a task_card [json-pointer:{ptr}/type]")
        return
    task_id = block.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        errors.append(f"missing required field: task_id [json-pointer:{ptr}]")
    elif len(task_id) > 255:
        errors.append(f"must be less than 256 characters [json-pointer:{ptr}/task_id]")
    elif task_id in task_ids:
        errors.append(f"duplicate task_id {task_id!r} [json-pointer:{ptr}/task_id]")
    else:
        task_ids.add(task_id)
    _check_title(block, ptr, errors)
    status = block.get("status")
    if status is None:
        errors.append(f"missing required field: status [json-pointer:{ptr}]")
    elif status not in TASK_STATUSES:
        errors.append(f"must be a valid enum value [json-pointer:{ptr}/status]")
    for key in ("details", "output"):
        if block.get(key) is not None:
            _check_rich_text(block[key], f"{ptr}/{key}", errors)
    sources = block.get("sources")
    if sources is not None:
        if not isinstance(sources, list):
            errors.append(f"must be an array [json-pointer:{ptr}/sources]")
        else:
            for j, src in enumerate(sources):
                if not isinstance(src, dict) or src.get("type") != "url" or not src.get("url") or not src.get("text"):
                    errors.append(f"must be a url source with url and text [json-pointer:{ptr}/sources/{j}]")


def block_errors(blocks: Any) -> list[str]:
    """Slack-style ``invalid_blocks`` error strings for ``blocks`` (empty when valid).

    Each string names the problem and ends with ``[json-pointer:/blocks/...]``, as
    Slack's do. The wording follows Slack's where known; tests should match on the
    pointer and the key words, not the whole sentence.
    """
    errors: list[str] = []
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    if len(blocks) > 50:
        errors.append("no more than 50 items allowed [json-pointer:/blocks]")
    block_ids: dict[str, str] = {}
    action_ids: dict[str, str] = {}
    for i, block in enumerate(blocks):
        ptr = f"/blocks/{i}"
        if not isinstance(block, dict):
            errors.append(f"must be an object [json-pointer:{ptr}]")
            continue
        btype = block.get("type")
        if btype is None:
            errors.append(f"missing required field: type [json-pointer:{ptr}]")
            continue
        if btype not in ALLOWED_BLOCK_TYPES:
            errors.append(f"unsupported type: {btype} [json-pointer:{ptr}/type]")
            continue
        _check_unique_id(block, "block_id", ptr, block_ids, errors)

        if btype == "section":
            text, fields = block.get("text"), block.get("fields")
            if text is None and not fields:
                errors.append(f"must define either `text` or `fields` [json-pointer:{ptr}]")
            if text is not None:
                _check_text_object(text, f"{ptr}/text", errors, max_len=3000)
            if fields is not None:
                if not isinstance(fields, list):
                    errors.append(f"must be an array [json-pointer:{ptr}/fields]")
                else:
                    if len(fields) > 10:
                        errors.append(f"no more than 10 items allowed [json-pointer:{ptr}/fields]")
                    for j, f in enumerate(fields):
                        _check_text_object(f, f"{ptr}/fields/{j}", errors, max_len=2000)
            if block.get("accessory") is not None:
                _check_element(block["accessory"], f"{ptr}/accessory", errors, action_ids)
        elif btype == "header":
            _check_text_object(block.get("text"), f"{ptr}/text", errors, max_len=150, plain_only=True)
        elif btype == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not elements:
                errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
            elif len(elements) > 10:
                errors.append(f"no more than 10 items allowed [json-pointer:{ptr}/elements]")
            else:
                for j, el in enumerate(elements):
                    if isinstance(el, dict) and el.get("type") in _TEXT_TYPES:
                        _check_text_object(el, f"{ptr}/elements/{j}", errors, max_len=3000)
                    elif not (isinstance(el, dict) and el.get("type") == "image"):
                        errors.append(f"must be a valid enum value [json-pointer:{ptr}/elements/{j}/type]")
        elif btype == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not elements:
                errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
            else:
                if len(elements) > 25:
                    errors.append(f"no more than 25 items allowed [json-pointer:{ptr}/elements]")
                for j, el in enumerate(elements):
                    _check_element(el, f"{ptr}/elements/{j}", errors, action_ids)
        elif btype == "context_actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not elements:
                errors.append(f"must provide at least 1 item [json-pointer:{ptr}/elements]")
            elif len(elements) > 5:
                errors.append(f"no more than 5 items allowed [json-pointer:{ptr}/elements]")
            else:
                for j, el in enumerate(elements):
                    _check_context_action(el, f"{ptr}/elements/{j}", errors, action_ids)
        elif btype == "markdown":
            text = block.get("text")
            if not isinstance(text, str) or not text:
                errors.append(f"missing required field: text [json-pointer:{ptr}]")
            elif len(text) > 12_000:
                errors.append(f"must be less than 12001 characters [json-pointer:{ptr}/text]")
        elif btype == "plan":
            _check_title(block, ptr, errors)
            tasks = block.get("tasks")
            if tasks is not None:
                if not isinstance(tasks, list):
                    errors.append(f"must be an array [json-pointer:{ptr}/tasks]")
                else:
                    seen_tasks: set[str] = set()
                    for j, task in enumerate(tasks):
                        _check_task_card(task, f"{ptr}/tasks/{j}", errors, seen_tasks)
        elif btype == "task_card":
            _check_task_card(block, ptr, errors, set())
        elif btype == "image":
            for key in ("image_url", "alt_text"):
                if not block.get(key) and not (key == "image_url" and block.get("slack_file")):
                    errors.append(f"missing required field: {key} [json-pointer:{ptr}]")
    return errors


# --------------------------------------------------------------------------------------
# Payload builders (real-shaped events and interactivity payloads)
# --------------------------------------------------------------------------------------

_MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def _rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """The rich_text block Slack attaches to user messages (user mentions split out)."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for m in _MENTION_RE.finditer(text):
        if m.start() > pos:
            elements.append({"type": "text", "text": text[pos : m.start()]})
        elements.append({"type": "user", "user_id": m.group(1)})
        pos = m.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    return [
        {
            "type": "rich_text",
            "block_id": uuid.uuid4().hex[:5],
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]


# Message subtypes Slack keeps in the channel's history (others, like message_changed, are not messages).
STORED_SUBTYPES = (None, "file_share", "thread_broadcast")


def mention_event(
    channel: str,
    user: str,
    text: str,
    ts: str | None = None,
    thread_ts: str | None = None,
    *,
    bot_user_id: str = "UBOT",
    team_id: str = "T1",
) -> dict[str, Any]:
    """An ``app_mention`` event. ``text`` gets a leading ``<@UBOT>`` unless it mentions the bot."""
    if f"<@{bot_user_id}>" not in text:
        text = f"<@{bot_user_id}> {text}"
    ts = ts or next_ts()
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "team": team_id,
        "blocks": _rich_text_blocks(text),
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message_event(
    channel: str,
    user: str | None,
    text: str,
    ts: str | None = None,
    thread_ts: str | None = None,
    bot_id: str | None = None,
    subtype: str | None = None,
    *,
    team_id: str = "T1",
    channel_type: str = "channel",
) -> dict[str, Any]:
    """A ``message`` event (``message.channels`` subscription) as a user or a bot posts it."""
    ts = ts or next_ts()
    event: dict[str, Any] = {"type": "message"}
    if subtype:
        event["subtype"] = subtype
    if user:
        event["user"] = user
    event.update({"text": text, "ts": ts, "team": team_id})
    if bot_id:
        event["bot_id"] = bot_id
        event["app_id"] = "A" + bot_id[1:]
        event["bot_profile"] = {"id": bot_id, "name": "bot", "app_id": "A" + bot_id[1:], "team_id": team_id}
    else:
        event["client_msg_id"] = str(uuid.uuid4())
    event["blocks"] = _rich_text_blocks(text)
    if thread_ts:
        event["thread_ts"] = thread_ts
        if user:
            event["parent_user_id"] = user
    event.update({"channel": channel, "event_ts": ts, "channel_type": channel_type})
    return event


def _find_action(blocks: Iterable[dict[str, Any]], action_id: str) -> tuple[str, dict[str, Any]] | None:
    for block in blocks:
        candidates = list(block.get("elements") or [])
        if block.get("accessory"):
            candidates.append(block["accessory"])
        for el in candidates:
            if isinstance(el, dict) and el.get("action_id") == action_id:
                return block.get("block_id", ""), el
    return None


def block_action_payload(
    user: str,
    channel: str,
    message_ts: str,
    action_id: str,
    value: str | None,
    *,
    response_url: str | None = None,
    team_id: str = "T1",
    message: dict[str, Any] | None = None,
    user_name: str | None = None,
    channel_name: str = "incident",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """A ``block_actions`` payload for a button click on a message.

    Without ``message``, a minimal bot message carrying one button with ``action_id``
    is made up. ``block_id`` and the button's text come from the message when the
    button is found in it. With ``response_url=None`` the payload carries ``None``;
    ``FakeSlack.send_interactive`` replaces it with a URL served by the fake (a real
    one would leave loopback).
    """
    if message is None:
        message = {
            "type": "message",
            "user": "UBOT",
            "bot_id": "BBOT",
            "ts": message_ts,
            "text": "",
            "team": team_id,
            "blocks": [
                {
                    "type": "actions",
                    "block_id": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": action_id,
                            "text": {"type": "plain_text", "text": action_id, "emoji": True},
                            **({"value": value} if value is not None else {}),
                        }
                    ],
                }
            ],
        }
    else:
        message = copy.deepcopy(message)
        message.setdefault("ts", message_ts)
    found = _find_action(message.get("blocks") or [], action_id)
    block_id, element = found if found else (uuid.uuid4().hex[:5], {})
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id,
        "text": element.get("text") or {"type": "plain_text", "text": action_id, "emoji": True},
        "type": element.get("type", "button"),
        "action_ts": f"{time.time():.6f}",
    }
    if value is not None:
        action["value"] = value
    if element.get("style"):
        action["style"] = element["style"]
    name = user_name or user.lower()
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if message.get("thread_ts"):
        container["thread_ts"] = message["thread_ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": "fake-verification-token",
        "container": container,
        "trigger_id": f"{next(_id_counter)}.{next(_id_counter)}.{uuid.uuid4().hex}",
        "team": {"id": team_id, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": channel_name},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }


def message_shortcut_payload(user: str, channel: str, message: dict[str, Any], *, callback_id: str,
                             team_id: str = "T1", user_name: str | None = None, api_app_id: str = "A1",
                             channel_name: str = "incident") -> dict[str, Any]:
    """A ``message_action`` payload: a person ran the message shortcut ``callback_id`` on ``message``."""
    name = user_name or user.lower()
    return {
        "type": "message_action",
        "token": "fake-verification-token",
        "action_ts": f"{time.time():.6f}",
        "team": {"id": team_id, "domain": "fake"},
        "user": {"id": user, "username": name, "name": name, "team_id": team_id},
        "channel": {"id": channel, "name": channel_name},
        "is_enterprise_install": False,
        "enterprise": None,
        "callback_id": callback_id,
        "trigger_id": f"{next(_id_counter)}.{next(_id_counter)}.{uuid.uuid4().hex}",
        "response_url": None,
        "message_ts": message["ts"],
        "message": copy.deepcopy(message),
        "api_app_id": api_app_id,
    }


def app_home_opened_event(user: str, *, tab: str = "home", channel: str = "D0HOME") -> dict[str, Any]:
    """The ``app_home_opened`` event Slack sends when ``user`` opens the app's Home (or Messages) tab."""
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab,
            "event_ts": f"{time.time():.6f}"}


# --------------------------------------------------------------------------------------
# The fake
# --------------------------------------------------------------------------------------

_JSON_FIELDS = ("blocks", "attachments", "metadata", "user_auth_blocks", "view")


class FakeSlack:
    """Fake Slack Web API + Socket Mode + response_url server (use as ``async with``)."""

    def __init__(
        self,
        bot_token: str = "xoxb-test",
        app_token: str = "xapp-test",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        team_id: str = "T1",
        *,
        app_id: str = "A1",
        bot_name: str = "opsloop",
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.app_id = app_id

        # Observable state (plain attributes on purpose: tests read them directly).
        self.calls: list[ApiCall] = []
        self.messages: defaultdict[str, list[Message]] = defaultdict(list)
        self.reactions: list[tuple[str, str, str]] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.responses: list[ResponseUrlCall] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.usergroup_handles: dict[str, str] = {}  # group id -> handle ("oncall"), for usergroups.list
        self.envelopes: list[dict[str, Any]] = []  # every envelope sent to the app
        self.incoming_posts: list[dict[str, Any]] = []  # every body posted to an incoming webhook
        self.frames: list[dict[str, Any]] = []  # every JSON frame the app sent back
        self.acks: dict[str, dict[str, Any]] = {}  # envelope_id -> first frame acking it
        self.connections = 0  # WebSocket connections accepted so far
        # Which live socket gets an envelope: "newest" (default; the last connection wins, as after a
        # reconnect) or "round_robin" (each envelope to the next live socket, as Slack spreads envelopes
        # over an app's open connections, e.g. two processes during a rolling deploy).
        self.delivery = "newest"
        self.delivered_on: dict[str, int] = {}  # envelope_id -> number (1, 2, ...) of the connection it went to
        self._socket_numbers: dict[web.WebSocketResponse, int] = {}
        self._by_id: dict[str, dict[str, Any]] = {}  # envelope_id -> envelope, from before it is sent
        self._round_robin = 0

        # assistant.threads.setStatus: (channel, thread_ts) -> the status last set; Slack drops it once it is
        # `status_expiry_seconds` old (shorten it in tests). `status_lapses` records every status that expired
        # before the next setStatus on its thread replaced it: (channel, thread_ts, status).
        self.statuses: dict[tuple[str, str], ThreadStatus] = {}
        self.status_expiry_seconds = STATUS_EXPIRY_SECONDS
        self.status_lapses: list[tuple[str, str, str]] = []
        self.home_views: dict[str, dict[str, Any]] = {}  # user -> the Home tab view views.publish published
        # Block types this workspace does not know (an older Slack): a message carrying one gets invalid_blocks.
        self.unsupported_block_types: set[str] = set()
        # chat.startStream: a stream's append/stop fail with message_not_in_streaming_state once it is this old
        # (shorten it in tests); the message stays as it was and chat.update still works on it.
        self.stream_lifetime_seconds = STREAM_LIFETIME_SECONDS
        self._stream_timers: set[asyncio.TimerHandle] = set()  # each stream's expiry, announced as a change

        self._failures: defaultdict[str, list[_Failure]] = defaultdict(list)
        self._response_urls: dict[str, tuple[str | None, str | None]] = {}
        self._incoming: dict[str, tuple[str, str, str]] = {}  # hook id -> (channel, bot_id, app_id)
        self._deliveries: set[asyncio.Task[str]] = set()
        self.channels: dict[str, dict[str, Any]] = {}  # conversations Slack knows (add_channel): id -> its record
        self._sockets: list[web.WebSocketResponse] = []
        self._changed_event = asyncio.Event()
        self._watchers: list[Callable[[], None]] = []
        self._runner: web.AppRunner | None = None
        self._base_url = ""
        self.add_user(bot_user_id, name=bot_name, is_bot=True)

    # ---- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> FakeSlack:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/response_url/{rid}", self._handle_response_url)
        app.router.add_get("/ws", self._handle_ws)
        app.router.add_post("/services/{hook}", self._handle_incoming_webhook)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._stream_timers:
            timer.cancel()
        for task in list(self._deliveries):
            task.cancel()
        await asyncio.gather(*self._deliveries, return_exceptions=True)
        # Close sockets ourselves: the runner would otherwise wait on their handlers.
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def api_url(self) -> str:
        """Pass as ``AsyncWebClient(base_url=...)`` / ``SLACK_API_URL`` (ends with a slash)."""
        return f"{self._base_url}/api/"

    @property
    def ws_url(self) -> str:
        return f"{self._base_url.replace('http://', 'ws://', 1)}/ws"

    # ---- directory -------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        is_bot: bool = False,
        real_name: str | None = None,
        display_name: str | None = None,
    ) -> None:
        real_name = real_name or name.title()
        display_name = display_name if display_name is not None else name
        self.users[user_id] = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "tz": "UTC",
            "is_bot": is_bot,
            "is_app_user": False,
            "profile": {
                "display_name": display_name,
                "display_name_normalized": display_name,
                "real_name": real_name,
                "real_name_normalized": real_name,
                "team": self.team_id,
            },
        }

    def add_channel(self, channel_id: str, name: str, *, is_member: bool = True, members: Iterable[str] = (),
                    kind: str = "public_channel") -> None:
        """A conversation Slack knows: `kind` is public_channel, private_channel, mpim or im; `members` are the
        people in it, plus the bot when `is_member`. Unknown ids answer channel_not_found, and so does a private
        one (private channel, mpim, DM) the bot is not in, as for a bot token on Slack."""
        people = set(members) | ({self.bot_user_id} if is_member else set())
        self.channels[channel_id] = {
            "id": channel_id, "name": name, "is_channel": kind == "public_channel", "is_member": is_member,
            "is_private": kind != "public_channel", "is_group": kind == "private_channel", "is_im": kind == "im",
            "is_mpim": kind == "mpim", "_kind": kind, "_members": people,
        }

    def add_incoming_webhook(self, channel: str, *, bot_id: str = "B0ALERTMGR", app_id: str | None = None) -> str:
        """An incoming-webhook URL that posts into `channel` as the integration `bot_id`, as Slack's do: the
        post becomes a `bot_message` in the channel, delivered to the app as a `message` event."""
        hook = uuid.uuid4().hex
        self._incoming[hook] = (channel, bot_id, app_id or "A" + bot_id[1:])
        return f"{self._base_url}/services/{hook}"

    async def _handle_incoming_webhook(self, request: web.Request) -> web.Response:
        target = self._incoming.get(request.match_info["hook"])
        if target is None:
            return web.Response(status=404, text="no_service")
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(body, dict) or not (body.get("text") or body.get("attachments") or body.get("blocks")):
            return web.Response(status=400, text="no_text")
        channel, bot_id, app_id = target
        self.incoming_posts.append(body)
        ts = next_ts()
        msg = Message(channel=channel, ts=ts, text=str(body.get("text") or ""), bot_id=bot_id, subtype="bot_message",
                      blocks=body.get("blocks"), attachments=body.get("attachments"), team=self.team_id)
        self._add_message(msg)
        event: dict[str, Any] = {**msg.to_api(), "channel": channel, "event_ts": ts, "channel_type": "channel",
                                 "app_id": app_id, "username": str(body.get("username") or "incoming-webhook")}
        task = asyncio.create_task(self.send_event(event))  # Slack answers the webhook before delivering the event
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)
        return web.Response(text="ok")

    def add_usergroup(self, group_id: str, users: Iterable[str], *, handle: str | None = None) -> None:
        self.usergroups[group_id] = list(users)
        self.usergroup_handles[group_id] = handle or group_id.lower()

    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        *,
        status: int | None = None,
        retry_after: int = 1,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail (after the token check).

        ``status`` defaults to 429 for ``ratelimited`` (sent with ``Retry-After``), 500
        for ``internal_error``/``fatal_error``, otherwise 200 (a plain ``ok: false``).
        """
        if status is None:
            status = 429 if error == "ratelimited" else 500 if error in ("internal_error", "fatal_error") else 200
        self._failures[method].append(_Failure(error, status, retry_after if status == 429 else None, times))

    def add_message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        bot_id: str | None = None,
    ) -> Message:
        """Seed a message someone else posted (no event is delivered for it); `bot_id`: another bot's post."""
        msg = Message(
            channel=channel,
            ts=ts or next_ts(),
            text=text,
            user=user or None,
            bot_id=bot_id,
            subtype="bot_message" if bot_id else None,
            thread_ts=thread_ts,
            blocks=blocks,
            team=self.team_id,
        )
        self._add_message(msg)
        return msg

    # ---- lookups -----------------------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self.messages.get(channel, []) if m.ts == ts), None)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """Root (if stored) and replies of a thread, oldest first."""
        return [m for m in self.messages.get(channel, []) if m.ts == thread_ts or m.thread_ts == thread_ts]

    def thread_status(self, channel: str, thread_ts: str) -> str | None:
        """The loading status a person sees under the thread now; None when none is set or it expired."""
        st = self.statuses.get((channel, thread_ts))
        if st is None or not st.status or time.monotonic() - st.set_at >= self.status_expiry_seconds:
            return None
        return st.status

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    # ---- waiting -----------------------------------------------------------------------

    def _changed(self) -> None:
        """Wake every waiter; each re-checks its predicate. Watchers see every intermediate state."""
        self._changed_event.set()
        self._changed_event = asyncio.Event()
        for callback in list(self._watchers):
            callback()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (synchronously, on the loop) after every change; returns the unwatch function."""
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    async def _wait(self, check: Callable[[], T | None], timeout: float, what: Callable[[], str]) -> T:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # No await between the check and taking the event: no lost wake-ups.
                    result = check()
                    if result is not None:
                        return result
                    await self._changed_event.wait()
        except TimeoutError:
            raise TimeoutError(f"FakeSlack: timed out after {timeout}s waiting for {what()}") from None

    async def wait_for_call(
        self,
        method: str,
        where: Callable[[ApiCall], bool] | None = None,
        timeout: float = 5.0,
    ) -> ApiCall:
        """The first call of ``method`` (already made or still to come) matching ``where``."""

        def check() -> ApiCall | None:
            return next((c for c in self.calls if c.method == method and (where is None or where(c))), None)

        return await self._wait(
            check,
            timeout,
            lambda: f"a matching {method} call; calls so far: {[(c.method, c.error) for c in self.calls]}",
        )

    async def wait_until(self, check: Callable[[], T | None], timeout: float = 5.0, what: str = "a change") -> T:
        """The first value ``check`` returns that is not None, checked after every change."""
        return await self._wait(check, timeout, lambda: what)

    async def wait_for_message(
        self,
        channel: str,
        where: Callable[[Message], bool] | None = None,
        timeout: float = 5.0,
    ) -> Message:
        """The first message in ``channel`` matching ``where`` (edits count: state is live)."""

        def check() -> Message | None:
            return next((m for m in self.messages.get(channel, []) if where is None or where(m)), None)

        return await self._wait(
            check,
            timeout,
            lambda: f"a matching message in {channel}; there: {[m.text[:60] for m in self.messages.get(channel, [])]}",
        )

    async def wait_ack(self, envelope_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """The frame the app sent to ack ``envelope_id`` (``{"envelope_id", maybe "payload"}``)."""
        return await self._wait(lambda: self.acks.get(envelope_id), timeout, lambda: f"ack of {envelope_id}")

    async def wait_connected(self, timeout: float = 5.0, *, connects: int = 1) -> None:
        """Until a socket is open and at least ``connects`` sockets were accepted in total."""
        await self._wait(
            lambda: True if self._live_socket() is not None and self.connections >= connects else None,
            timeout,
            lambda: f"socket mode connection #{connects} (accepted so far: {self.connections})",
        )

    async def wait_for_response(
        self, where: Callable[[ResponseUrlCall], bool] | None = None, timeout: float = 5.0
    ) -> ResponseUrlCall:
        return await self._wait(
            lambda: next((r for r in self.responses if where is None or where(r)), None),
            timeout,
            lambda: "a matching response_url POST",
        )

    # ---- Socket Mode: sending ----------------------------------------------------------

    def _live_socket(self) -> web.WebSocketResponse | None:
        live = [ws for ws in self._sockets if not ws.closed]
        return live[-1] if live else None  # the newest connection wins

    def _pick_socket(self) -> web.WebSocketResponse | None:
        """The socket for the next envelope, by ``delivery`` (round robin advances once per envelope)."""
        live = [ws for ws in self._sockets if not ws.closed]
        if self.delivery != "round_robin" or not live:
            return self._live_socket()
        self._round_robin += 1
        return live[self._round_robin % len(live)]

    def connection_number(self, envelope_id: str) -> int | None:
        """Which connection (1 = the first accepted) an envelope was sent on."""
        return self.delivered_on.get(envelope_id)

    def envelope(self, envelope_id: str) -> dict[str, Any] | None:
        """An envelope by id, known from just before it is sent (so a watcher can read an ack that
        arrives while the send is still returning)."""
        return self._by_id.get(envelope_id)

    async def _send_envelope(self, envelope: dict[str, Any], timeout: float) -> None:
        self._by_id[envelope["envelope_id"]] = envelope
        async with asyncio.timeout(timeout):
            while True:
                await self.wait_connected(timeout=timeout)
                ws = self._pick_socket()
                if ws is None:
                    continue
                try:
                    await ws.send_str(json.dumps(envelope))
                except ConnectionError:
                    continue  # replaced mid-send; wait for the next socket
                self.delivered_on[envelope["envelope_id"]] = self._socket_numbers.get(ws, 0)
                self.envelopes.append(envelope)
                return

    async def send_event(
        self,
        event: dict[str, Any],
        event_id: str | None = None,
        retry_attempt: int = 0,
        *,
        retry_reason: str | None = None,
        timeout: float = 5.0,
    ) -> str:
        """Deliver ``event`` in an ``events_api`` envelope; returns the envelope id.

        Like Slack, a first delivery carries ``retry_attempt: 0, retry_reason: ""``; a
        redelivery (``retry_attempt >= 1``) defaults its reason to ``"timeout"``. A
        user message event (app_mention / plain message) is also stored in the channel,
        once per ts, so replies, reactions and conversations.replies see it.
        """
        event = copy.deepcopy(event)
        self._store_event_message(event)
        event_id = event_id or _next_id("Ev", 10)
        ts = event.get("event_ts") or event.get("ts")
        payload = {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(float(ts)) if ts else int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{event.get('type', 'event')}-{self.team_id}-{event.get('channel', '')}",
        }
        if retry_reason is None:
            retry_reason = "timeout" if retry_attempt else ""
        envelope_id = str(uuid.uuid4())
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        await self._send_envelope(envelope, timeout)
        return envelope_id

    async def send_interactive(self, payload: dict[str, Any], *, timeout: float = 5.0) -> str:
        """Deliver an interactivity payload in an ``interactive`` envelope.

        A missing/None ``response_url`` on a ``block_actions`` payload is replaced with
        a fresh one served by this fake (tied to the payload's channel and message).
        """
        payload = copy.deepcopy(payload)
        if payload.get("type") == "block_actions" and not payload.get("response_url"):
            channel = (payload.get("channel") or {}).get("id")
            message_ts = (payload.get("message") or {}).get("ts") or (payload.get("container") or {}).get("message_ts")
            payload["response_url"] = self.new_response_url(channel, message_ts)
        envelope_id = str(uuid.uuid4())
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": "interactive",
            # Slack waits for a payload in the ack only for views and option loads.
            "accepts_response_payload": payload.get("type")
            in ("view_submission", "block_suggestion", "dialog_suggestion"),
        }
        await self._send_envelope(envelope, timeout)
        return envelope_id

    async def click(
        self,
        user: str,
        channel: str,
        message_ts: str,
        action_id: str,
        value: str | None = None,
        *,
        timeout: float = 5.0,
    ) -> str:
        """Click the button ``action_id`` on a stored message, as Slack delivers it.

        The payload carries the message as currently stored, the button's block_id,
        text and (unless given) value, and a response_url served by this fake.
        """
        msg = self.message(channel, message_ts)
        if msg is None:
            raise LookupError(f"no message {message_ts} in {channel}")
        found = _find_action(msg.blocks or [], action_id)
        if found is None:
            raise LookupError(f"message {message_ts} has no element with action_id {action_id!r}")
        _, element = found
        user_name = self.users.get(user, {}).get("name")
        payload = block_action_payload(
            user,
            channel,
            message_ts,
            action_id,
            value if value is not None else element.get("value"),
            team_id=self.team_id,
            message=msg.to_api(),
            user_name=user_name,
            api_app_id=self.app_id,
        )
        return await self.send_interactive(payload, timeout=timeout)

    async def feedback(self, user: str, channel: str, message_ts: str, *, positive: bool,
                       timeout: float = 5.0) -> str:
        """Click the thumbs-up (``positive``) or thumbs-down of the feedback_buttons on a stored message."""
        msg = self.message(channel, message_ts)
        if msg is None:
            raise LookupError(f"no message {message_ts} in {channel}")
        found = next(((b.get("block_id", ""), el) for b in msg.blocks or [] if b.get("type") == "context_actions"
                      for el in b.get("elements") or [] if el.get("type") == "feedback_buttons"), None)
        if found is None:
            raise LookupError(f"message {message_ts} has no feedback_buttons")
        block_id, element = found
        button = element["positive_button" if positive else "negative_button"]
        payload = block_action_payload(user, channel, message_ts, element["action_id"], button["value"],
                                       team_id=self.team_id, message=msg.to_api(),
                                       user_name=self.users.get(user, {}).get("name"), api_app_id=self.app_id)
        payload["actions"][0].update({"type": "feedback_buttons", "block_id": block_id, "text": button["text"]})
        return await self.send_interactive(payload, timeout=timeout)

    async def shortcut(self, user: str, channel: str, message_ts: str, callback_id: str, *,
                       timeout: float = 5.0) -> str:
        """Run the message shortcut ``callback_id`` on a stored message (a person's or a bot's)."""
        msg = self.message(channel, message_ts)
        if msg is None:
            raise LookupError(f"no message {message_ts} in {channel}")
        message = msg.to_api()
        if msg.bot_id and msg.user == self.bot_user_id:
            message.update(self._bot_message_dict(msg))
        payload = message_shortcut_payload(user, channel, message, callback_id=callback_id, team_id=self.team_id,
                                           user_name=self.users.get(user, {}).get("name"), api_app_id=self.app_id,
                                           channel_name=self.channels.get(channel, {}).get("name", "incident"))
        payload["response_url"] = self.new_response_url(channel)  # Slack sends one with every message_action
        return await self.send_interactive(payload, timeout=timeout)

    async def disconnect_socket(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message; the SDK then reconnects on a new socket."""
        ws = self._live_socket()
        if ws is None:
            raise RuntimeError("no Socket Mode connection to disconnect")
        await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

    def new_response_url(self, channel: str | None = None, message_ts: str | None = None) -> str:
        rid = uuid.uuid4().hex
        self._response_urls[rid] = (channel, message_ts)
        return f"{self._base_url}/response_url/{rid}"

    def _store_event_message(self, event: dict[str, Any]) -> None:
        if event.get("type") not in ("app_mention", "message") or event.get("subtype") not in STORED_SUBTYPES:
            return
        channel, ts = event.get("channel"), event.get("ts")
        if not channel or not ts or self.message(channel, ts) is not None:
            return  # an app_mention and its message twin, or a redelivery: stored once
        self._add_message(
            Message(
                channel=channel,
                ts=ts,
                text=event.get("text", ""),
                user=event.get("user"),
                bot_id=event.get("bot_id"),
                thread_ts=event.get("thread_ts"),
                blocks=event.get("blocks"),
                team=event.get("team"),
                subtype=event.get("subtype"),
            )
        )

    def _add_message(self, msg: Message) -> None:
        msgs = self.messages[msg.channel]
        msgs.append(msg)
        msgs.sort(key=lambda m: float(m.ts))
        self._changed()

    # ---- Socket Mode: the WebSocket ----------------------------------------------------

    async def _handle_ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len([s for s in self._sockets if not s.closed]) + 1,
                "debug_info": {
                    "host": "applink-fake",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": self.app_id},
            }
        )
        # Registered only after hello, so no envelope can overtake it.
        self._sockets.append(ws)
        self.connections += 1
        self._socket_numbers[ws] = self.connections
        self._changed()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    frame = json.loads(msg.data)
                except ValueError:
                    frame = {"_raw": msg.data}
                self.frames.append(frame)
                envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
                if envelope_id and envelope_id not in self.acks:
                    self.acks[envelope_id] = frame
                self._changed()
        finally:
            self._sockets.remove(ws)
            self._changed()
        return ws

    # ---- response_url --------------------------------------------------------------------

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        channel, message_ts = self._response_urls.get(rid, (None, None))
        self.responses.append(ResponseUrlCall(rid, body, channel, message_ts))
        target = self.message(channel, message_ts) if channel and message_ts else None
        if target is not None and body.get("delete_original"):
            self.messages[target.channel].remove(target)
        elif target is not None and body.get("replace_original"):
            target.text = body.get("text", "")
            target.blocks = body.get("blocks")
            target.edited = {"user": self.bot_user_id, "ts": next_ts()}
        self._changed()
        return web.json_response({"ok": True})

    # ---- Web API -------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        encoding = "query"
        if request.method == "POST" and request.body_exists:
            if request.content_type == "application/json":
                try:
                    body = await request.json()
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    return self._reply(method, args, None, request, "json", _SlackError("invalid_json"))
                args.update(body)
                encoding = "json"
            else:
                form = await request.post()
                if form:
                    args.update({k: v for k, v in form.items() if isinstance(v, str)})
                    encoding = "form"
        token = args.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[len("Bearer ") :].strip() or token
        try:
            for key in _JSON_FIELDS:
                if isinstance(args.get(key), str) and args[key]:
                    try:
                        args[key] = json.loads(args[key])
                    except ValueError:
                        if key == "blocks":
                            raise _SlackError("invalid_blocks_format") from None
            handler = self._METHODS.get(method)
            if handler is None:
                raise _SlackError("unknown_method", req_method=method)
            self._check_token(method, token)
            self._maybe_fail(method)
            result = handler(self, args)
        except _SlackError as err:
            return self._reply(method, args, token, request, encoding, err)
        return self._reply(method, args, token, request, encoding, {"ok": True, **result})

    def _reply(
        self,
        method: str,
        args: dict[str, Any],
        token: str | None,
        request: web.Request,
        encoding: str,
        result: dict[str, Any] | _SlackError,
    ) -> web.Response:
        status, headers = 200, {}
        if isinstance(result, _SlackError):
            status, headers = result.status, result.headers
            body = {"ok": False, "error": result.error, **result.extra}
        else:
            body = result
        self.calls.append(
            ApiCall(method, args, token, body, status=status, http_method=request.method, encoding=encoding,
                    peer=str(request.transport.get_extra_info("peername") if request.transport else ""))
        )
        self._changed()
        return web.json_response(body, status=status, headers=headers)

    def _check_token(self, method: str, token: str | None) -> None:
        if not token:
            raise _SlackError("not_authed")
        if method == "apps.connections.open":
            if token == self.app_token:
                return
            raise _SlackError("not_allowed_token_type" if token == self.bot_token else "invalid_auth")
        if token == self.bot_token:
            return
        raise _SlackError("not_allowed_token_type" if token == self.app_token else "invalid_auth")

    def _maybe_fail(self, method: str) -> None:
        queue = self._failures.get(method)
        if not queue:
            return
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.pop(0)
        headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
        raise _SlackError(failure.error, status=failure.status, headers=headers)

    # ---- method handlers (sync: state changes are atomic on the loop) --------------------

    @staticmethod
    def _text_and_blocks(args: dict[str, Any], *, required: bool = True) -> tuple[str | None, list[Any] | None]:
        text = args.get("text")
        if text is None and args.get("markdown_text"):
            text = args["markdown_text"]
        blocks = args.get("blocks")
        if blocks is not None:
            if not isinstance(blocks, list):
                raise _SlackError("invalid_blocks_format")
            errors = block_errors(blocks)
            if errors:
                raise _SlackError(
                    "invalid_blocks",
                    errors=errors,
                    response_metadata={"messages": [f"[ERROR] {e}" for e in errors]},
                )
        if required and not text and not blocks and not args.get("attachments"):
            raise _SlackError("no_text")
        if text is not None and len(str(text)) > 40_000:
            raise _SlackError("msg_too_long")
        return (str(text) if text is not None else None), blocks

    @staticmethod
    def _channel(args: dict[str, Any]) -> str:
        channel = args.get("channel")
        if not channel:
            raise _SlackError("channel_not_found")
        return str(channel)

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake-team.slack.com/",
            "team": "Fake Team",
            "user": self.users[self.bot_user_id]["name"],
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.ws_url}

    def _bot_message_dict(self, msg: Message) -> dict[str, Any]:
        out = msg.to_api()
        out["app_id"] = self.app_id
        out["bot_profile"] = {"id": self.bot_id, "app_id": self.app_id, "name": "opsloop", "team_id": self.team_id}
        return out

    def _check_block_types(self, args: dict[str, Any]) -> None:
        blocks = args.get("blocks")
        bad = [f"unsupported type: {b.get('type')} [json-pointer:/blocks/{i}/type]"
               for i, b in enumerate(blocks if isinstance(blocks, list) else [])
               if isinstance(b, dict) and b.get("type") in self.unsupported_block_types]
        if bad:
            raise _SlackError("invalid_blocks", errors=bad,
                              response_metadata={"messages": [f"[ERROR] {e}" for e in bad]})

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        self._check_block_types(args)
        text, blocks = self._text_and_blocks(args)
        # Slack accepts a thread_ts that names no message; so does the fake.
        thread_ts = args.get("thread_ts") or None
        metadata = self._metadata(args)
        msg = Message(
            channel=channel,
            ts=next_ts(),
            text=text or "",
            user=self.bot_user_id,
            bot_id=self.bot_id,
            thread_ts=str(thread_ts) if thread_ts else None,
            blocks=blocks,
            team=self.team_id,
            metadata=metadata,
        )
        self._add_message(msg)
        return {"channel": channel, "ts": msg.ts, "message": self._bot_message_dict(msg)}

    @staticmethod
    def _metadata(args: dict[str, Any]) -> dict[str, Any] | None:
        """Message metadata as Slack takes it: an event_type string and an event_payload object."""
        metadata = args.get("metadata")
        if metadata is None:
            return None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("event_type"), str) or not isinstance(
                metadata.get("event_payload"), dict):
            raise _SlackError("invalid_metadata_format")
        return {"event_type": metadata["event_type"], "event_payload": copy.deepcopy(metadata["event_payload"])}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        ts = args.get("ts")
        if not ts:
            raise _invalid_arguments("missing required field: ts")
        msg = self.message(channel, str(ts))
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.user != self.bot_user_id:
            raise _SlackError("cant_update_message")
        self._check_block_types(args)
        text, blocks = self._text_and_blocks(args)
        # Omitted fields are kept (Slack documents this for blocks; [] clears them).
        if text is not None:
            msg.text = text
        if "blocks" in args:
            msg.blocks = blocks or None
        if "metadata" in args:  # chat.update takes message metadata too
            msg.metadata = self._metadata(args)
        msg.edited = {"user": self.bot_user_id, "ts": next_ts()}
        self._changed()
        return {"channel": channel, "ts": msg.ts, "text": msg.text, "message": self._bot_message_dict(msg)}

    # ---- streams (chat.startStream / appendStream / stopStream) -------------------------------------------

    @staticmethod
    def _stream_text(args: dict[str, Any]) -> str:
        """The markdown a stream call adds: `markdown_text`, then the text of any markdown_text chunks."""
        parts: list[str] = []
        text = args.get("markdown_text")
        if text is not None:
            if not isinstance(text, str):
                raise _invalid_arguments("must be a string [json-pointer:/markdown_text]")
            parts.append(text)
        chunks = _json_array(args, "chunks")
        if chunks is not None:
            for i, chunk in enumerate(chunks):
                kind = chunk.get("type") if isinstance(chunk, dict) else None
                if kind not in ("markdown_text", "task_update", "plan_update", "blocks"):
                    raise _invalid_arguments(f"must be a valid enum value [json-pointer:/chunks/{i}/type]")
                if kind == "markdown_text":
                    parts.append(str(chunk.get("text") or ""))
        added = "".join(parts)
        if len(added) > STREAM_TEXT_MAX:
            raise _SlackError("msg_too_long")
        return added

    def _streaming(self, args: dict[str, Any]) -> Message:
        """The stream an append/stop names: it must be this bot's, started with startStream and still open."""
        missing = [k for k in ("channel", "ts") if not args.get(k)]
        if missing:
            raise _invalid_arguments(*(f"missing required field: {k}" for k in missing))
        msg = self.message(str(args["channel"]), str(args["ts"]))
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.user != self.bot_user_id:
            raise _SlackError("cant_update_message")
        stream = msg.stream
        if stream is None or stream["state"] != "streaming":
            raise _SlackError("message_not_in_streaming_state")  # the message stays as it was
        return msg

    def _chat_start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in ("channel", "thread_ts") if not args.get(k)]
        channel = str(args.get("channel") or "")
        if channel[:1] in ("C", "G"):  # a channel stream names who it is for (Slack requires both)
            missing += [k for k in ("recipient_user_id", "recipient_team_id") if not args.get(k)]
        if missing:
            raise _invalid_arguments(*(f"missing required field: {k}" for k in missing))
        if "metadata" in args:
            raise _invalid_arguments("unknown field: metadata (chat.stopStream takes it) [json-pointer:/metadata]")
        mode = args.get("task_display_mode")
        if mode is not None and mode not in ("timeline", "plan"):
            raise _invalid_arguments("must be a valid enum value [json-pointer:/task_display_mode]")
        text = self._stream_text(args)
        msg = Message(channel=channel, ts=next_ts(), text=text, user=self.bot_user_id, bot_id=self.bot_id,
                      thread_ts=str(args["thread_ts"]), team=self.team_id, stream_state="streaming",
                      stream_started_at=time.monotonic(), stream_lifetime=self.stream_lifetime_seconds)
        self._add_message(msg)
        timer = asyncio.get_running_loop().call_later(self.stream_lifetime_seconds, self._changed)  # it expired
        self._stream_timers.add(timer)
        return {"channel": channel, "ts": msg.ts}

    def _chat_append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        text = self._stream_text(args)
        if not text and not args.get("chunks"):
            raise _invalid_arguments("missing required field: markdown_text or chunks")
        if len(msg.text) + len(text) > 40_000:
            raise _SlackError("msg_too_long")
        msg.text += text
        self._changed()
        return {"channel": msg.channel, "ts": msg.ts}

    def _chat_stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        text = self._stream_text(args)
        blocks = args.get("blocks")
        if blocks is not None:
            if not isinstance(blocks, list):
                raise _SlackError("invalid_blocks_format")
            if errors := block_errors(blocks):  # at most 50, each valid (feedback buttons as postMessage's)
                raise _SlackError("invalid_blocks", errors=errors,
                                  response_metadata={"messages": [f"[ERROR] {e}" for e in errors]})
        metadata = self._metadata(args)
        if len(msg.text) + len(text) > 40_000:
            raise _SlackError("msg_too_long")
        msg.text += text
        if blocks:
            msg.blocks = copy.deepcopy(blocks)
        if metadata is not None:
            msg.metadata = metadata
        msg.stream_state = "stopped"
        self._changed()
        return {"channel": msg.channel, "ts": msg.ts, "message": self._bot_message_dict(msg)}

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        user = args.get("user")
        if not user:
            raise _invalid_arguments("missing required field: user")
        text, blocks = self._text_and_blocks(args)
        ts = next_ts()
        self.ephemerals.append(
            {
                "channel": channel,
                "user": str(user),
                "text": text or "",
                "blocks": blocks,
                "thread_ts": args.get("thread_ts"),
                "ts": ts,
            }
        )
        self._changed()
        return {"message_ts": ts}

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        ts = args.get("timestamp")
        name = str(args.get("name") or "").strip(":")
        if not name:
            raise _SlackError("invalid_name")
        if not ts or self.message(channel, str(ts)) is None:
            raise _SlackError("message_not_found")
        key = (channel, str(ts), name)
        if key in self.reactions:
            raise _SlackError("already_reacted")
        self.reactions.append(key)
        self._changed()
        return {}

    def _thread_dicts(self, channel: str, root_ts: str, *, include_metadata: bool = False) -> list[dict[str, Any]]:
        msgs = self.thread(channel, root_ts)
        root = next((m for m in msgs if m.ts == root_ts), None)
        replies = [m for m in msgs if m.ts != root_ts]
        out: list[dict[str, Any]] = []
        if root is not None:
            d = root.to_api(include_metadata=include_metadata)
            if replies:
                users = list(dict.fromkeys(m.user or m.bot_id or "" for m in replies))
                d.update(
                    {
                        "thread_ts": root_ts,
                        "reply_count": len(replies),
                        "reply_users_count": len(users),
                        "latest_reply": replies[-1].ts,
                        "reply_users": users,
                    }
                )
            out.append(d)
        for m in replies:
            d = m.to_api(include_metadata=include_metadata)
            if root is not None and root.user:
                d["parent_user_id"] = root.user
            out.append(d)
        for d in out:
            names = [n for (c, t, n) in self.reactions if c == channel and t == d["ts"]]
            if names:
                d["reactions"] = [{"name": n, "users": [self.bot_user_id], "count": 1} for n in dict.fromkeys(names)]
        return out

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        ts = args.get("ts")
        if not ts:
            raise _invalid_arguments("missing required field: ts")
        msg = self.message(channel, str(ts))
        if msg is None:
            raise _SlackError("thread_not_found")
        root_ts = msg.thread_ts or msg.ts  # asking with a reply's ts returns its whole thread
        # Message metadata comes back only when asked for, as on Slack.
        include_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        messages = self._thread_dicts(channel, root_ts, include_metadata=include_metadata)
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        if latest := args.get("latest"):
            messages = [m for m in messages if float(m["ts"]) < float(latest) or (inclusive and m["ts"] == latest)]
        if oldest := args.get("oldest"):
            messages = [m for m in messages if float(m["ts"]) > float(oldest) or (inclusive and m["ts"] == oldest)]
        # Pages oldest first, like Slack: `limit` per page (default and max 1000), an opaque next_cursor.
        limit = min(int(args.get("limit") or 1000), 1000)
        start = int(str(args.get("cursor") or "offset:0").removeprefix("offset:") or 0)
        page, more = messages[start : start + limit], start + limit < len(messages)
        out: dict[str, Any] = {"messages": page, "has_more": more}
        if more:
            out["response_metadata"] = {"next_cursor": f"offset:{start + limit}"}
        return out

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """A channel's top-level messages, newest first, paged like Slack (metadata only when asked for)."""
        channel = self._channel(args)
        include_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        top = [m for m in self.messages.get(channel, []) if m.thread_ts in (None, m.ts)]
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        if latest := args.get("latest"):
            top = [m for m in top if float(m.ts) < float(latest) or (inclusive and m.ts == latest)]
        if oldest := args.get("oldest"):
            top = [m for m in top if float(m.ts) > float(oldest) or (inclusive and m.ts == oldest)]
        messages = [m.to_api(include_metadata=include_metadata) for m in reversed(top)]
        limit = min(int(args.get("limit") or 100), 1000)
        start = int(str(args.get("cursor") or "offset:0").removeprefix("offset:") or 0)
        page, more = messages[start : start + limit], start + limit < len(messages)
        out: dict[str, Any] = {"messages": page, "has_more": more}
        if more:
            out["response_metadata"] = {"next_cursor": f"offset:{start + limit}"}
        return out

    def _assistant_threads_set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread's loading status; an empty status clears it. Slack drops it after its expiry."""
        missing = [k for k in ("channel_id", "thread_ts") if not args.get(k)]
        if not isinstance(args.get("status"), str):
            missing.append("status")
        if missing:
            raise _invalid_arguments(*(f"missing required field: {k}" for k in missing))
        loading = _json_array(args, "loading_messages")
        if loading is not None:
            if not all(isinstance(m, str) for m in loading):
                raise _invalid_arguments("must be an array of strings [json-pointer:/loading_messages]")
            if len(loading) > LOADING_MESSAGES_MAX:
                raise _invalid_arguments(
                    f"no more than {LOADING_MESSAGES_MAX} items allowed [json-pointer:/loading_messages]")
        channel, thread_ts, status = str(args["channel_id"]), str(args["thread_ts"]), str(args["status"])
        if self.message(channel, thread_ts) is None:
            raise _SlackError("thread_not_found")
        now = time.monotonic()
        before = self.statuses.get((channel, thread_ts))
        if before is not None and before.status and now - before.set_at >= self.status_expiry_seconds:
            self.status_lapses.append((channel, thread_ts, before.status))
        if status:
            self.statuses[(channel, thread_ts)] = ThreadStatus(status, list(loading) if loading else None, now)
        else:
            self.statuses.pop((channel, thread_ts), None)
        self._changed()
        return {}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        """Publish a user's Home tab: a `home` view with valid blocks (at most 100)."""
        user = args.get("user_id")
        if not user:
            raise _invalid_arguments("missing required field: user_id")
        view = args.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                raise _SlackError("invalid_arguments") from None
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _invalid_arguments("must be a home view [json-pointer:/view/type]")
        view_blocks = view.get("blocks")
        if not isinstance(view_blocks, list):
            raise _invalid_arguments("missing required field: blocks [json-pointer:/view]")
        errors = [e for e in block_errors(view_blocks) if "no more than 50 items" not in e]
        if len(view_blocks) > VIEW_BLOCKS_MAX:
            errors.append(f"no more than {VIEW_BLOCKS_MAX} items allowed [json-pointer:/view/blocks]")
        if errors:
            raise _SlackError("invalid_blocks", errors=errors,
                              response_metadata={"messages": [f"[ERROR] {e}" for e in errors]})
        if str(user) not in self.users:
            raise _SlackError("user_not_found")
        published = {"id": _next_id("V", 10), "type": "home", "blocks": copy.deepcopy(view_blocks)}
        self.home_views[str(user)] = published
        self._changed()
        return {"view": copy.deepcopy(published)}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = args.get("usergroup")
        if group not in self.usergroups:
            raise _SlackError("no_such_subteam")
        return {"users": list(self.usergroups[group])}

    def _usergroups_list(self, args: dict[str, Any]) -> dict[str, Any]:
        """The workspace's user groups as Slack lists them (users only with include_users, as Slack)."""
        groups = []
        for group_id, users in self.usergroups.items():
            handle = self.usergroup_handles.get(group_id, group_id.lower())
            group: dict[str, Any] = {"id": group_id, "team_id": self.team_id, "is_usergroup": True,
                                     "name": handle.replace("-", " ").title(), "description": "", "handle": handle,
                                     "is_external": False, "date_delete": 0, "user_count": len(users)}
            if str(args.get("include_users") or "").lower() in ("1", "true"):
                group["users"] = list(users)
            groups.append(group)
        return {"usergroups": groups}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(args.get("user") or ""))
        if user is None:
            raise _SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def _visible(self, channel_id: str) -> dict[str, Any]:
        """A conversation the bot's token may see: public, or private with the bot in it (else channel_not_found)."""
        channel = self.channels.get(channel_id)
        if channel is None or (channel["_kind"] != "public_channel" and self.bot_user_id not in channel["_members"]):
            raise _SlackError("channel_not_found")
        return channel

    def _public(self, channel: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in channel.items() if not k.startswith("_")}
        if channel["_kind"] == "im":  # a DM names the other person; it has no is_member
            out.pop("is_member", None)
            out["user"] = next((u for u in sorted(channel["_members"]) if u != self.bot_user_id), "")
        return out

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._visible(self._channel(args))
        return {"channel": self._public(channel)}

    @staticmethod
    def _page(items: list[Any], args: dict[str, Any], *, default: int = 100) -> tuple[list[Any], str]:
        """One page of `items` by Slack's cursor rules: `limit` (at most 1000), an opaque next_cursor ("": the end)."""
        try:
            limit = max(1, min(int(args.get("limit") or default), 1000))
            start = int(str(args.get("cursor") or "offset:0").removeprefix("offset:") or 0)
        except ValueError:
            raise _SlackError("invalid_cursor") from None
        more = start + limit < len(items)
        return items[start : start + limit], f"offset:{start + limit}" if more else ""

    def _users_conversations(self, args: dict[str, Any]) -> dict[str, Any]:
        """The conversations `user` (default: the bot) is in, of `types` (default public_channel); a private one
        only when the bot is in it too (a bot token sees no more)."""
        user = str(args.get("user") or self.bot_user_id)
        if user not in self.users:
            raise _SlackError("user_not_found")
        types = {t.strip() for t in str(args.get("types") or "public_channel").split(",") if t.strip()}
        if types - {"public_channel", "private_channel", "mpim", "im"}:
            raise _SlackError("invalid_types")
        found = [self._public(c) for c in self.channels.values()
                 if c["_kind"] in types and user in c["_members"]
                 and (c["_kind"] == "public_channel" or self.bot_user_id in c["_members"])]
        page, cursor = self._page(found, args)
        return {"channels": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._visible(self._channel(args))
        page, cursor = self._page(sorted(channel["_members"]), args)
        return {"members": page, "response_metadata": {"next_cursor": cursor}}

    _METHODS: ClassVar[dict[str, Callable[[FakeSlack, dict[str, Any]], dict[str, Any]]]] = {
        "auth.test": _auth_test,
        "apps.connections.open": _apps_connections_open,
        "chat.postMessage": _chat_post_message,
        "chat.update": _chat_update,
        "chat.postEphemeral": _chat_post_ephemeral,
        "chat.startStream": _chat_start_stream,
        "chat.appendStream": _chat_append_stream,
        "chat.stopStream": _chat_stop_stream,
        "reactions.add": _reactions_add,
        "conversations.replies": _conversations_replies,
        "conversations.history": _conversations_history,
        "usergroups.users.list": _usergroups_users_list,
        "usergroups.list": _usergroups_list,
        "users.info": _users_info,
        "assistant.threads.setStatus": _assistant_threads_set_status,
        "views.publish": _views_publish,
        "conversations.info": _conversations_info,
        "conversations.members": _conversations_members,
        "users.conversations": _users_conversations,
    }
