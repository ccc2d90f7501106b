"""The stand-in's methods for what the bot shows besides messages: ``reactions.add``, a thread's loading status
(``assistant.threads.setStatus``, which Slack drops after its expiry) and the Home tab (``views.publish``)."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from bot.playground.standin.blockkit import block_errors
from bot.playground.standin.records import ThreadStatus, _invalid_arguments, _json_array, _next_id, _SlackError
from bot.playground.standin.workspace import Workspace

LOADING_MESSAGES_MAX = 10
VIEW_BLOCKS_MAX = 100  # views.publish: a Home tab holds at most 100 blocks


class SurfaceMethods(Workspace):
    """reactions.add, assistant.threads.setStatus and views.publish (sync: state changes are atomic on the loop)."""

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
                    f"no more than {LOADING_MESSAGES_MAX} items allowed [json-pointer:/loading_messages]"
                )
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
            raise _SlackError(
                "invalid_blocks", errors=errors, response_metadata={"messages": [f"[ERROR] {e}" for e in errors]}
            )
        if str(user) not in self.users:
            raise _SlackError("user_not_found")
        published = {"id": _next_id("V", 10), "type": "home", "blocks": copy.deepcopy(view_blocks)}
        self.home_views[str(user)] = published
        self._changed()
        return {"view": copy.deepcopy(published)}
