"""The stand-in's Web API methods, with Slack's checks and error shapes: the chat methods (``chat.postMessage``,
``update``, ``postEphemeral`` and the streams ``startStream`` / ``appendStream`` / ``stopStream``), what the bot
shows besides messages (``reactions.add``, a thread's loading status, the Home tab), and the reads
(``conversations.*``, ``users.*``, ``usergroups.*``), paged by Slack's cursor rules and seen as a bot token sees
them. Sync: state changes are atomic on the loop."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

from bot.playground.standin.blockkit import BLOCKS_TEXT_MAX, block_errors, blocks_text_length
from bot.playground.standin.records import (
    Message,
    ThreadStatus,
    _invalid_arguments,
    _invalid_blocks,
    _json_array,
    _next_id,
    _require,
    _SlackError,
    next_ts,
)
from bot.playground.standin.workspace import Workspace

STREAM_TEXT_MAX = 12_000  # markdown_text per startStream/appendStream/stopStream call
LOADING_MESSAGES_MAX = 10
VIEW_BLOCKS_MAX = 100  # views.publish: a Home tab holds at most 100 blocks
KINDS = {"public_channel", "private_channel", "mpim", "im"}


def _flag(args: dict[str, Any], key: str) -> bool:
    return str(args.get(key, "")).lower() in ("1", "true")


class WebApiMethods(Workspace):
    """Every Web API method the stand-in serves, as ``_<method in snake case>`` (``slack.API_METHODS``)."""

    # ---- chat --------------------------------------------------------------------------------

    @staticmethod
    def _blocks(args: dict[str, Any]) -> list[Any] | None:
        blocks = args.get("blocks")
        if blocks is not None:
            if not isinstance(blocks, list):
                raise _SlackError("invalid_blocks_format")
            if errors := block_errors(blocks):  # at most 50, each valid (feedback buttons included)
                raise _invalid_blocks(errors)
            if blocks_text_length(blocks) > BLOCKS_TEXT_MAX:
                raise _SlackError("msg_blocks_too_long")
        return blocks

    def _text_and_blocks(self, args: dict[str, Any]) -> tuple[str | None, list[Any] | None]:
        text = args.get("text")
        if text is None and args.get("markdown_text"):
            text = args["markdown_text"]
        blocks = self._blocks(args)
        if not text and not blocks and not args.get("attachments"):
            raise _SlackError("no_text")
        if text is not None and len(str(text)) > 40_000:
            raise _SlackError("msg_too_long")
        return (str(text) if text is not None else None), blocks

    def _check_block_types(self, args: dict[str, Any]) -> None:
        blocks = args.get("blocks")
        if bad := [
            f"unsupported type: {b.get('type')} [json-pointer:/blocks/{i}/type]"
            for i, b in enumerate(blocks if isinstance(blocks, list) else [])
            if isinstance(b, dict) and b.get("type") in self.unsupported_block_types
        ]:
            raise _invalid_blocks(bad)

    @staticmethod
    def _metadata(args: dict[str, Any]) -> dict[str, Any] | None:
        """Message metadata as Slack takes it: an event_type string and an event_payload object."""
        metadata = args.get("metadata")
        if metadata is None:
            return None
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("event_type"), str)
            or not isinstance(metadata.get("event_payload"), dict)
        ):
            raise _SlackError("invalid_metadata_format")
        return {"event_type": metadata["event_type"], "event_payload": copy.deepcopy(metadata["event_payload"])}

    def _bot_message(self, args: dict[str, Any], **fields: Any) -> Message:
        """A new message of this bot in `args`' channel, stored."""
        msg = Message(
            self._channel(args), next_ts(), user=self.bot_user_id, bot_id=self.bot_id, team=self.team_id, **fields
        )
        self._add_message(msg)
        return msg

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        self._channel(args)
        self._check_block_types(args)
        text, blocks = self._text_and_blocks(args)
        # Slack accepts a thread_ts that names no message; so does the fake.
        thread_ts = str(args["thread_ts"]) if args.get("thread_ts") else None
        metadata = self._metadata(args)
        msg = self._bot_message(args, text=text or "", thread_ts=thread_ts, blocks=blocks, metadata=metadata)
        return {"channel": msg.channel, "ts": msg.ts, "message": self._bot_message_dict(msg)}

    def _own_message(self, channel: str, ts: str) -> Message:
        """A message this bot posted (message_not_found, cant_update_message)."""
        msg = self.message(channel, ts)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.user != self.bot_user_id:
            raise _SlackError("cant_update_message")
        return msg

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        _require(args, "ts")
        msg = self._own_message(channel, str(args["ts"]))
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

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        _require(args, "user")
        text, blocks = self._text_and_blocks(args)
        ts = next_ts()
        note = {"channel": channel, "user": str(args["user"]), "text": text or "", "blocks": blocks}
        self.ephemerals.append({**note, "thread_ts": args.get("thread_ts"), "ts": ts})
        self._changed()
        return {"message_ts": ts}

    # ---- streams (chat.startStream / appendStream / stopStream) ------------------------------

    @staticmethod
    def _stream_text(args: dict[str, Any]) -> str:
        """The markdown a stream call adds: `markdown_text`, then the text of any markdown_text chunks."""
        parts: list[str] = []
        text = args.get("markdown_text")
        if text is not None:
            if not isinstance(text, str):
                raise _invalid_arguments("must be a string [json-pointer:/markdown_text]")
            parts.append(text)
        for i, chunk in enumerate(_json_array(args, "chunks") or []):
            kind = chunk.get("type") if isinstance(chunk, dict) else None
            if kind not in ("markdown_text", "task_update", "plan_update", "blocks"):
                raise _invalid_arguments(f"must be a valid enum value [json-pointer:/chunks/{i}/type]")
            if kind == "markdown_text":
                parts.append(str(chunk.get("text") or ""))
        if len(added := "".join(parts)) > STREAM_TEXT_MAX:
            raise _SlackError("msg_too_long")
        return added

    def _streaming(self, args: dict[str, Any]) -> Message:
        """The stream an append/stop names: it must be this bot's, started with startStream and still open."""
        _require(args, "channel", "ts")
        msg = self._own_message(str(args["channel"]), str(args["ts"]))
        if msg.stream is None or msg.stream["state"] != "streaming":
            raise _SlackError("message_not_in_streaming_state")  # the message stays as it was
        return msg

    def _chat_start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        # a channel stream names who it is for (Slack requires both)
        recipient = ("recipient_user_id", "recipient_team_id") if channel[:1] in ("C", "G") else ()
        _require(args, "channel", "thread_ts", *recipient)
        if "metadata" in args:
            raise _invalid_arguments("unknown field: metadata (chat.stopStream takes it) [json-pointer:/metadata]")
        if args.get("task_display_mode") not in (None, "timeline", "plan"):
            raise _invalid_arguments("must be a valid enum value [json-pointer:/task_display_mode]")
        msg = self._bot_message(
            args,
            text=self._stream_text(args),
            thread_ts=str(args["thread_ts"]),
            stream_state="streaming",
            stream_started_at=time.monotonic(),
            stream_lifetime=self.stream_lifetime_seconds,
        )
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
        blocks = self._blocks(args)
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

    # ---- reactions, loading status, Home tab -------------------------------------------------

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        ts = args.get("timestamp")
        name = str(args.get("name") or "").strip(":")
        if not name:
            raise _SlackError("invalid_name")
        if not ts or self.message(channel, str(ts)) is None:
            raise _SlackError("message_not_found")
        if (key := (channel, str(ts), name)) in self.reactions:
            raise _SlackError("already_reacted")
        self.reactions.append(key)
        self._changed()
        return {}

    def _assistant_threads_set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread's loading status; an empty status clears it. Slack drops it after its expiry."""
        _require(args, "channel_id", "thread_ts", *(() if isinstance(args.get("status"), str) else ("status",)))
        loading = _json_array(args, "loading_messages")
        if loading is not None and not all(isinstance(m, str) for m in loading):
            raise _invalid_arguments("must be an array of strings [json-pointer:/loading_messages]")
        if loading is not None and len(loading) > LOADING_MESSAGES_MAX:
            raise _invalid_arguments(
                f"no more than {LOADING_MESSAGES_MAX} items allowed [json-pointer:/loading_messages]"
            )
        channel, thread_ts = key = str(args["channel_id"]), str(args["thread_ts"])
        if self.message(channel, thread_ts) is None:
            raise _SlackError("thread_not_found")
        now = time.monotonic()
        before = self.statuses.get(key)
        if before is not None and before.status and now - before.set_at >= self.status_expiry_seconds:
            self.status_lapses.append((channel, thread_ts, before.status))
        if status := str(args["status"]):
            self.statuses[key] = ThreadStatus(status, list(loading) if loading else None, now)
        else:
            self.statuses.pop(key, None)
        self._changed()
        return {}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        """Publish a user's Home tab: a `home` view with valid blocks (at most 100)."""
        _require(args, "user_id")
        view = args.get("view")
        if isinstance(view, str):  # the API decoded a JSON string `view`: this one is not JSON
            raise _SlackError("invalid_arguments")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _invalid_arguments("must be a home view [json-pointer:/view/type]")
        if not isinstance(blocks := view.get("blocks"), list):
            raise _invalid_arguments("missing required field: blocks [json-pointer:/view]")
        errors = [e for e in block_errors(blocks) if "no more than 50 items" not in e]
        if len(blocks) > VIEW_BLOCKS_MAX:
            errors.append(f"no more than {VIEW_BLOCKS_MAX} items allowed [json-pointer:/view/blocks]")
        if errors:
            raise _invalid_blocks(errors)
        if (user := str(args["user_id"])) not in self.users:
            raise _SlackError("user_not_found")
        self.home_views[user] = {"id": _next_id("V", 10), "type": "home", "blocks": copy.deepcopy(blocks)}
        self._changed()
        return {"view": copy.deepcopy(self.home_views[user])}

    # ---- reads -------------------------------------------------------------------------------

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

    def _messages_page(
        self, items: list[Any], args: dict[str, Any], ts: Callable[[Any], str], *, default: int
    ) -> dict[str, Any]:
        """Messages between `oldest` and `latest` (each excluded unless `inclusive`), a page of them."""
        inclusive = _flag(args, "inclusive")
        if latest := args.get("latest"):
            items = [m for m in items if float(ts(m)) < float(latest) or (inclusive and ts(m) == latest)]
        if oldest := args.get("oldest"):
            items = [m for m in items if float(ts(m)) > float(oldest) or (inclusive and ts(m) == oldest)]
        page, cursor = self._page(items, args, default=default)
        out: dict[str, Any] = {"messages": page, "has_more": bool(cursor)}
        if cursor:
            out["response_metadata"] = {"next_cursor": cursor}
        return out

    def _thread_dicts(self, channel: str, root_ts: str, *, include_metadata: bool = False) -> list[dict[str, Any]]:
        msgs = self.thread(channel, root_ts)
        root = next((m for m in msgs if m.ts == root_ts), None)
        replies = [m for m in msgs if m.ts != root_ts]
        out: list[dict[str, Any]] = []
        if root is not None:
            d = root.to_api(include_metadata=include_metadata)
            if replies:
                users = list(dict.fromkeys(m.user or m.bot_id or "" for m in replies))
                d.update(thread_ts=root_ts, reply_count=len(replies), reply_users_count=len(users))
                d.update(latest_reply=replies[-1].ts, reply_users=users)
            out.append(d)
        for m in replies:
            d = m.to_api(include_metadata=include_metadata)
            if root is not None and root.user:
                d["parent_user_id"] = root.user
            out.append(d)
        for d in out:
            if names := [n for (c, t, n) in self.reactions if c == channel and t == d["ts"]]:
                d["reactions"] = [{"name": n, "users": [self.bot_user_id], "count": 1} for n in dict.fromkeys(names)]
        return out

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A whole thread, oldest first (asked with a reply's ts too); metadata only when asked for, as on Slack."""
        channel = self._channel(args)
        _require(args, "ts")
        if (msg := self.message(channel, str(args["ts"]))) is None:
            raise _SlackError("thread_not_found")
        thread = self._thread_dicts(
            channel, msg.thread_ts or msg.ts, include_metadata=_flag(args, "include_all_metadata")
        )
        return self._messages_page(thread, args, lambda m: str(m["ts"]), default=1000)

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        """A channel's top-level messages, newest first, paged like Slack (metadata only when asked for)."""
        channel = self._channel(args)
        top = [m for m in reversed(self.messages.get(channel, [])) if m.thread_ts in (None, m.ts)]
        page = self._messages_page(top, args, lambda m: str(m.ts), default=100)
        page["messages"] = [m.to_api(include_metadata=_flag(args, "include_all_metadata")) for m in page["messages"]]
        return page

    def _usergroups_list(self, args: dict[str, Any]) -> dict[str, Any]:
        """The workspace's user groups as Slack lists them (users only with include_users, as Slack)."""
        groups = []
        for group_id, users in self.usergroups.items():
            handle = self.usergroup_handles.get(group_id, group_id.lower())
            group: dict[str, Any] = {
                "id": group_id,
                "team_id": self.team_id,
                "is_usergroup": True,
                "name": handle.replace("-", " ").title(),
                "description": "",
                "handle": handle,
                "is_external": False,
                "date_delete": 0,
                "user_count": len(users),
            }
            if _flag(args, "include_users"):
                group["users"] = list(users)
            groups.append(group)
        return {"usergroups": groups}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        if (group := args.get("usergroup")) not in self.usergroups:
            raise _SlackError("no_such_subteam")
        return {"users": list(self.usergroups[group])}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        if (user := self.users.get(str(args.get("user") or ""))) is None:
            raise _SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def _sees(self, channel: dict[str, Any]) -> bool:
        """The bot's token sees a conversation that is public, or private with the bot in it."""
        return channel["_kind"] == "public_channel" or self.bot_user_id in channel["_members"]

    def _visible(self, channel_id: str) -> dict[str, Any]:
        channel = self.channels.get(channel_id)
        if channel is None or not self._sees(channel):
            raise _SlackError("channel_not_found")
        return channel

    def _public(self, channel: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in channel.items() if not k.startswith("_")}
        if channel["_kind"] == "im":  # a DM names the other person; it has no is_member
            out.pop("is_member", None)
            out["user"] = next((u for u in sorted(channel["_members"]) if u != self.bot_user_id), "")
        return out

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"channel": self._public(self._visible(self._channel(args)))}

    def _conversations_list(self, args: dict[str, Any], *, user: str | None = None) -> dict[str, Any]:
        """The conversations of `types` (default public_channel) the bot's token can see (of them, those `user`
        is in); paged by `limit` and `cursor` (archived ones: none are kept here)."""
        types = {t.strip() for t in str(args.get("types") or "public_channel").split(",") if t.strip()}
        if types - KINDS:
            raise _SlackError("invalid_types")
        found = [
            self._public(c)
            for c in self.channels.values()
            if c["_kind"] in types and (user is None or user in c["_members"]) and self._sees(c)
        ]
        page, cursor = self._page(found, args)
        return {"channels": page, "response_metadata": {"next_cursor": cursor}}

    def _users_conversations(self, args: dict[str, Any]) -> dict[str, Any]:
        """The conversations `user` (default: the bot) is in, as conversations.list shows them."""
        if (user := str(args.get("user") or self.bot_user_id)) not in self.users:
            raise _SlackError("user_not_found")
        return self._conversations_list(args, user=user)
