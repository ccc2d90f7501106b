"""Whether bolt can read a Slack payload at all, checked before bolt sees it.

bolt reads parts of every payload without looking at their types: building the request (`"id" in user`), the
arguments it hands every middleware and listener (`body["actions"][0]`), and its matchers (`action["action_id"]`,
`body["event"]["type"]`). A payload from outside with a float for `user` or a dict for `actions` raised inside bolt,
so the envelope was never acked (Slack resends it) and the harness saw a listener start that never ended. Here such
a payload is refused at the door, logged once, and acked: nothing about it can be acted on.

`bolt_request` builds bolt's request (what the Socket Mode handler and the HTTP receiver would build anyway) and
runs the same readers on it, so the check follows bolt's own code rather than a copy of its rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slack_bolt.request import payload_utils as read
from slack_bolt.request.async_request import AsyncBoltRequest

from bot.core.errors import OpsloopError

# What bolt builds for every middleware and listener, whether or not it is asked for (kwargs_injection).
_READERS: tuple[Callable[[dict[str, Any]], Any], ...] = tuple(
    getattr(read, f"to_{part}")
    for part in ("options", "shortcut", "action", "view", "command", "event", "message", "step")
)

_CALLBACK_TYPES = frozenset({"shortcut", "message_action", "interactive_message", "dialog_submission"})


class Unreadable(OpsloopError, ValueError):
    """A Slack payload bolt would crash on; the message says which part, never the payload's text."""


def bolt_request(
    body: str | dict[str, Any], *, mode: str, headers: Mapping[str, str | Sequence[str]] | None = None, query: str = ""
) -> AsyncBoltRequest:
    """bolt's request for `body`, or Unreadable when bolt (or its matchers) would raise reading it."""
    try:
        request = AsyncBoltRequest(body=body, mode=mode, headers=dict(headers or {}), query=query)
    except (TypeError, KeyError, IndexError, AttributeError, ValueError) as e:
        raise Unreadable(f"bolt cannot read it ({type(e).__name__})") from None
    problem = _problem(request.body)
    if problem:
        raise Unreadable(problem)
    return request


def _problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the payload is not an object"
    for reader in _READERS:
        try:
            reader(body)
        except (TypeError, KeyError, IndexError, AttributeError) as e:
            return f"{reader.__name__} cannot read it ({type(e).__name__})"
    kind = body.get("type")
    if "type" in body and not isinstance(kind, str):
        return "type is not a string"
    if "event" in body and not (isinstance(body["event"], dict) and isinstance(body["event"].get("type"), str)):
        return "event is not an object with a type"
    if kind == "block_actions":
        actions = body.get("actions")
        if not (
            isinstance(actions, list)
            and actions
            and all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions)
        ):
            return "actions is not a list of actions with an action_id"
    if kind in ("view_submission", "view_closed"):
        view = body.get("view")
        if not (isinstance(view, dict) and isinstance(view.get("callback_id"), str)):
            return "view is not an object with a callback_id"
    if kind in _CALLBACK_TYPES and not isinstance(body.get("callback_id"), str):
        return "callback_id is not a string"
    return None
