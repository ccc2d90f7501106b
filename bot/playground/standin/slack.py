"""A local Slack stand-in that speaks the real wire protocols, on one loopback aiohttp server (use as
``async with``). Shipped for `opsloop demo` and `opsloop sandbox`; the tests import it from
``tests/support/fakes/slack.py``.

It serves the Web API (``/api/<method>``: the methods opsloop uses, with Slack's success and ``ok: false``
shapes, Block Kit validation and 429s), Socket Mode (``/ws``: ``apps.connections.open`` hands out this URL; the
stand-in sends ``hello``, then ``events_api`` / ``interactive`` envelopes, and records every frame the app
sends back: the acks) and ``response_url`` endpoints. Drive it with the real clients
(``AsyncWebClient(base_url=slack.api_url)``, bolt's ``AsyncSocketModeHandler``); observe it through plain
attributes (``calls``, ``messages``, ``reactions``, ``ephemerals``, ``acks``, ``responses``) and wait with
``wait_for_message`` / ``wait_ack`` / ``wait_connected`` / ``wait_until``, never with sleeps. ``watch``
callbacks run synchronously on every recorded call, message and ack frame, before the app gets its HTTP
response, so a test can act at an exact point (SIGKILL the app between a ``chat.postMessage`` and its reply).
With several live sockets (two processes of one app) envelopes go to the newest; ``delivered_on`` says which
got each. What only tests use (failures, incoming webhooks, other deliveries) is added by the tests' subclass,
``tests/support/fakes/slack.py``.

Wire facts it relies on (slack_sdk 3.48, ``slack_sdk/web/async_client.py``): the ``chat.*`` methods (the
streams included) send JSON bodies (``blocks`` a real list) with the token in ``Authorization: Bearer``;
methods called with ``params=`` (``auth.test``, ``reactions.add``, ``apps.connections.open``) are POSTs with
their arguments in the query string and an empty form body; ``conversations.replies``, ``users.info`` and
``usergroups.*`` are GETs; other callers (curl, ``api_call(data=...)``) send form bodies whose ``blocks`` is a
JSON string. All are normalised into ``ApiCall.args``. A streamed message is a normal message whose text
grows, plus the stand-in-only ``_stream`` key (``{"state", "started_at"}``); once ``stream_lifetime_seconds``
(Slack: about 5 minutes) passed, appends and stops fail with ``message_not_in_streaming_state``.

Its modules, one concern each: ``records`` (ids, the records, the Web API error), ``blockkit``
(``block_errors``), ``payloads`` (events and interactivity payloads), ``workspace`` (the state, seeding,
lookups and waits), ``methods`` (the Web API methods), and this one, the one to import: the server (Web API
dispatch, Socket Mode, response_url) and ``FakeSlack``'s method table.
"""

# The waits take ``timeout=`` like asyncio.wait_for; that is this fake's public API.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, Self

from aiohttp import WSCloseCode, WSMsgType, web

from bot.playground.standin.blockkit import block_errors
from bot.playground.standin.methods import WebApiMethods
from bot.playground.standin.payloads import (
    STORED_SUBTYPES,
    _find_action,
    app_home_opened_event,
    block_action_payload,
    mention_event,
    message_event,
    message_shortcut_payload,
)
from bot.playground.standin.records import (
    ApiCall,
    Message,
    ResponseUrlCall,
    ThreadStatus,
    _next_id,
    _SlackError,
    next_ts,
)

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

_JSON_FIELDS = ("blocks", "attachments", "metadata", "user_auth_blocks", "view")


class FakeSlack(WebApiMethods):
    """Fake Slack Web API + Socket Mode + response_url server (use as ``async with``)."""

    # Web API method name -> its handler (sync: state changes are atomic on the loop); filled below.
    _METHODS: ClassVar[dict[str, Callable[[FakeSlack, dict[str, Any]], dict[str, Any]]]]

    # ---- lifecycle ---------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/response_url/{rid}", self._handle_response_url)
        app.router.add_get("/ws", self._handle_ws)
        return app

    async def __aenter__(self) -> Self:
        self._runner = web.AppRunner(self._app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._stream_timers:
            timer.cancel()
        # Close sockets ourselves: the runner would otherwise wait on their handlers.
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_url(self) -> str:
        """Pass as ``AsyncWebClient(base_url=...)`` / ``SLACK_API_URL`` (ends with a slash)."""
        return f"{self.base_url}/api/"

    @property
    def ws_url(self) -> str:
        return f"{self.base_url.replace('http://', 'ws://', 1)}/ws"

    # ---- Socket Mode: sending ----------------------------------------------------------------

    def _pick_socket(self) -> web.WebSocketResponse | None:
        """The socket for the next envelope: the newest live one (the tests' subclass spreads them)."""
        return self._live_socket()

    async def _send(self, kind: str, payload: dict[str, Any], timeout: float, **fields: Any) -> str:
        """Send `payload` in a new envelope of type `kind`; returns its id."""
        envelope = {"envelope_id": str(uuid.uuid4()), "payload": payload, "type": kind, **fields}
        await self._send_envelope(envelope, timeout)
        return str(envelope["envelope_id"])

    async def _send_envelope(self, envelope: dict[str, Any], timeout: float) -> None:
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
        timeout: float = 5.0,
    ) -> str:
        """Deliver ``event`` in an ``events_api`` envelope; returns the envelope id.

        Like Slack, a first delivery carries ``retry_attempt: 0, retry_reason: ""``; a
        redelivery (``retry_attempt >= 1``) gives its reason as ``"timeout"``. A
        user message event (app_mention / plain message) is also stored in the channel,
        once per ts, so replies, reactions and conversations.replies see it.
        """
        event = copy.deepcopy(event)
        self._store_event_message(event)
        ts = event.get("event_ts") or event.get("ts")
        payload = {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or _next_id("Ev", 10),
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
        reason = "timeout" if retry_attempt else ""
        fields = {"accepts_response_payload": False, "retry_attempt": retry_attempt, "retry_reason": reason}
        return await self._send("events_api", payload, timeout, **fields)

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
        # Slack waits for a payload in the ack only for views and option loads.
        accepts = payload.get("type") in ("view_submission", "block_suggestion", "dialog_suggestion")
        return await self._send("interactive", payload, timeout, accepts_response_payload=accepts)

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
        msg = self._stored(channel, message_ts)
        found = _find_action(msg.blocks or [], action_id)
        if found is None:
            raise LookupError(f"message {message_ts} has no element with action_id {action_id!r}")
        payload = self._action_payload(user, msg, action_id, value if value is not None else found[1].get("value"))
        return await self.send_interactive(payload, timeout=timeout)

    def _stored(self, channel: str, message_ts: str) -> Message:
        if (msg := self.message(channel, message_ts)) is None:
            raise LookupError(f"no message {message_ts} in {channel}")
        return msg

    def _action_payload(self, user: str, msg: Message, action_id: str, value: str | None) -> dict[str, Any]:
        """The block_actions payload of `user`'s click on `msg`, as this workspace sends it."""
        user_name = self.users.get(user, {}).get("name")
        return block_action_payload(
            user,
            msg.channel,
            msg.ts,
            action_id,
            value,
            team_id=self.team_id,
            message=msg.to_api(),
            user_name=user_name,
            api_app_id=self.app_id,
        )

    async def feedback(self, user: str, channel: str, message_ts: str, *, positive: bool, timeout: float = 5.0) -> str:
        """Click the thumbs-up (``positive``) or thumbs-down of the feedback_buttons on a stored message."""
        msg = self._stored(channel, message_ts)
        found = next(
            (
                (b.get("block_id", ""), el)
                for b in msg.blocks or []
                if b.get("type") == "context_actions"
                for el in b.get("elements") or []
                if el.get("type") == "feedback_buttons"
            ),
            None,
        )
        if found is None:
            raise LookupError(f"message {message_ts} has no feedback_buttons")
        block_id, element = found
        button = element["positive_button" if positive else "negative_button"]
        payload = self._action_payload(user, msg, element["action_id"], button["value"])
        payload["actions"][0].update({"type": "feedback_buttons", "block_id": block_id, "text": button["text"]})
        return await self.send_interactive(payload, timeout=timeout)

    async def shortcut(
        self, user: str, channel: str, message_ts: str, callback_id: str, *, timeout: float = 5.0
    ) -> str:
        """Run the message shortcut ``callback_id`` on a stored message (a person's or a bot's)."""
        msg = self._stored(channel, message_ts)
        message = msg.to_api()
        if msg.bot_id and msg.user == self.bot_user_id:
            message.update(self._bot_message_dict(msg))
        payload = message_shortcut_payload(
            user,
            channel,
            message,
            callback_id=callback_id,
            team_id=self.team_id,
            user_name=self.users.get(user, {}).get("name"),
            api_app_id=self.app_id,
            channel_name=self.channels.get(channel, {}).get("name", "incident"),
        )
        payload["response_url"] = self.new_response_url(channel)  # Slack sends one with every message_action
        return await self.send_interactive(payload, timeout=timeout)

    def new_response_url(self, channel: str | None = None, message_ts: str | None = None) -> str:
        rid = uuid.uuid4().hex
        self._response_urls[rid] = (channel, message_ts)
        return f"{self.base_url}/response_url/{rid}"

    def _store_event_message(self, event: dict[str, Any]) -> None:
        if event.get("type") not in ("app_mention", "message") or event.get("subtype") not in STORED_SUBTYPES:
            return
        channel, ts = event.get("channel"), event.get("ts")
        if not channel or not ts or self.message(channel, ts) is not None:
            return  # an app_mention and its message twin, or a redelivery: stored once
        fields: dict[str, Any] = {k: event.get(k) for k in ("user", "bot_id", "thread_ts", "blocks", "team", "subtype")}
        self._add_message(Message(channel=channel, ts=ts, text=event.get("text", ""), **fields))

    # ---- Socket Mode: the WebSocket ----------------------------------------------------------

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
                    self.acked_at[envelope_id] = time.monotonic()
                self._changed()
        finally:
            self._sockets.remove(ws)
            self._changed()
        return ws

    # ---- response_url ------------------------------------------------------------------------

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
            self._remove_message(target)
        elif target is not None and body.get("replace_original"):
            target.text = body.get("text", "")
            target.blocks = body.get("blocks")
            target.edited = {"user": self.bot_user_id, "ts": next_ts()}
        self._changed()
        return web.json_response({"ok": True})

    # ---- Web API -----------------------------------------------------------------------------

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
            ApiCall(
                method,
                args,
                token,
                body,
                status=status,
                encoding=encoding,
                peer=str(request.transport.get_extra_info("peername") if request.transport else ""),
            )
        )
        self._changed()
        return web.json_response(body, status=status, headers=headers)

    def _check_token(self, method: str, token: str | None) -> None:
        """apps.connections.open takes the app token, every other method the bot token."""
        if not token:
            raise _SlackError("not_authed")
        connect = method == "apps.connections.open"
        wanted, other = (self.app_token, self.bot_token) if connect else (self.bot_token, self.app_token)
        if token != wanted:
            raise _SlackError("not_allowed_token_type" if token == other else "invalid_auth")

    # ---- the connection methods (auth.test, apps.connections.open) ---------------------------

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


# The Web API methods served; each is the method `_<its name in snake case>` ("chat.postMessage": _chat_post_message).
API_METHODS = (
    *("auth.test", "apps.connections.open", "reactions.add", "views.publish", "assistant.threads.setStatus"),
    *("chat.postMessage", "chat.update", "chat.postEphemeral", "chat.startStream", "chat.appendStream"),
    *("chat.stopStream", "conversations.replies", "conversations.history", "conversations.info"),
    *("conversations.list", "users.info", "users.conversations", "usergroups.list", "usergroups.users.list"),
)


FakeSlack._METHODS = {
    name: getattr(FakeSlack, "_" + re.sub("([A-Z])", r"_\1", name.replace(".", "_")).lower()) for name in API_METHODS
}
