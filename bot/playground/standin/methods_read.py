"""The stand-in's read methods: ``conversations.*`` (replies, history, info, list, members), ``users.*`` (info,
conversations) and ``usergroups.users.list``, paged by Slack's cursor rules, seen as a bot token sees them."""

from __future__ import annotations

import copy
from typing import Any

from bot.playground.standin.records import _invalid_arguments, _SlackError
from bot.playground.standin.workspace import Workspace


class ReadMethods(Workspace):
    """conversations.*, users.* and usergroups.users.list (sync: state changes are atomic on the loop)."""

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
            if str(args.get("include_users") or "").lower() in ("1", "true"):
                group["users"] = list(users)
            groups.append(group)
        return {"usergroups": groups}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = args.get("usergroup")
        if group not in self.usergroups:
            raise _SlackError("no_such_subteam")
        return {"users": list(self.usergroups[group])}

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
        found = [
            self._public(c)
            for c in self.channels.values()
            if c["_kind"] in types
            and user in c["_members"]
            and (c["_kind"] == "public_channel" or self.bot_user_id in c["_members"])
        ]
        page, cursor = self._page(found, args)
        return {"channels": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_list(self, args: dict[str, Any]) -> dict[str, Any]:
        """The conversations of `types` (default public_channel) the bot's token can see: every public channel, a
        private one only with the bot in it; paged by `limit` and `cursor` (archived ones: none are kept here)."""
        types = {t.strip() for t in str(args.get("types") or "public_channel").split(",") if t.strip()}
        if types - {"public_channel", "private_channel", "mpim", "im"}:
            raise _SlackError("invalid_types")
        found = [
            self._public(c)
            for c in self.channels.values()
            if c["_kind"] in types and (c["_kind"] == "public_channel" or self.bot_user_id in c["_members"])
        ]
        page, cursor = self._page(found, args)
        return {"channels": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._visible(self._channel(args))
        page, cursor = self._page(sorted(channel["_members"]), args)
        return {"members": page, "response_metadata": {"next_cursor": cursor}}
