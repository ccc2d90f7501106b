"""A local Slack stand-in that speaks the real wire protocols, on one loopback aiohttp server.

Shipped with opsloop for `opsloop demo` and `opsloop sandbox`, and used by the tests
(``tests/support/fakes/slack.py`` re-exports it). ``watch(callback)`` calls back on every change.

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

Its modules, one concern each: ``records`` (ids, ``ApiCall``, ``Message``, ``ThreadStatus``, the Web API error),
``blockkit`` (``block_errors``), ``payloads`` (the event and interactivity builders), ``workspace`` (the state,
seeding, lookups and waits), ``server`` (aiohttp: Web API dispatch, Socket Mode, response_url, incoming webhooks),
``methods`` (the Web API methods); this module assembles ``FakeSlack`` and its method table, and is the one to
import.
"""

from __future__ import annotations

import re

from bot.playground.standin.blockkit import block_errors
from bot.playground.standin.methods import WebApiMethods
from bot.playground.standin.payloads import (
    app_home_opened_event,
    block_action_payload,
    mention_event,
    message_event,
    message_shortcut_payload,
)
from bot.playground.standin.records import ApiCall, Message, ResponseUrlCall, ThreadStatus, next_ts
from bot.playground.standin.server import SlackServer

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

# The Web API methods served; each is the method `_<its name in snake case>` ("chat.postMessage": _chat_post_message).
API_METHODS = (
    *("auth.test", "apps.connections.open", "reactions.add", "views.publish", "assistant.threads.setStatus"),
    *("chat.postMessage", "chat.update", "chat.postEphemeral", "chat.startStream", "chat.appendStream"),
    *("chat.stopStream", "conversations.replies", "conversations.history", "conversations.info"),
    *("conversations.members", "conversations.list", "users.info", "users.conversations", "usergroups.list"),
    "usergroups.users.list",
)


class FakeSlack(WebApiMethods, SlackServer):
    """Fake Slack Web API + Socket Mode + response_url server (use as ``async with``)."""


FakeSlack._METHODS = {
    name: getattr(FakeSlack, "_" + re.sub("([A-Z])", r"_\1", name.replace(".", "_")).lower()) for name in API_METHODS
}
