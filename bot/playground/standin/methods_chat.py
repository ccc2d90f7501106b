"""The stand-in's chat methods: ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral`` and the streams
(``chat.startStream`` / ``appendStream`` / ``stopStream``), with Slack's checks and error shapes."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from bot.playground.standin.blockkit import BLOCKS_TEXT_MAX, block_errors, blocks_text_length
from bot.playground.standin.records import Message, _invalid_arguments, _json_array, _SlackError, next_ts
from bot.playground.standin.workspace import Workspace

STREAM_TEXT_MAX = 12_000  # markdown_text per startStream/appendStream/stopStream call


class ChatMethods(Workspace):
    """The chat.* methods (sync: state changes are atomic on the loop)."""

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
            if blocks_text_length(blocks) > BLOCKS_TEXT_MAX:
                raise _SlackError("msg_blocks_too_long")
        if required and not text and not blocks and not args.get("attachments"):
            raise _SlackError("no_text")
        if text is not None and len(str(text)) > 40_000:
            raise _SlackError("msg_too_long")
        return (str(text) if text is not None else None), blocks

    def _check_block_types(self, args: dict[str, Any]) -> None:
        blocks = args.get("blocks")
        bad = [
            f"unsupported type: {b.get('type')} [json-pointer:/blocks/{i}/type]"
            for i, b in enumerate(blocks if isinstance(blocks, list) else [])
            if isinstance(b, dict) and b.get("type") in self.unsupported_block_types
        ]
        if bad:
            raise _SlackError(
                "invalid_blocks", errors=bad, response_metadata={"messages": [f"[ERROR] {e}" for e in bad]}
            )

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
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("event_type"), str)
            or not isinstance(metadata.get("event_payload"), dict)
        ):
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
        msg = Message(
            channel=channel,
            ts=next_ts(),
            text=text,
            user=self.bot_user_id,
            bot_id=self.bot_id,
            thread_ts=str(args["thread_ts"]),
            team=self.team_id,
            stream_state="streaming",
            stream_started_at=time.monotonic(),
            stream_lifetime=self.stream_lifetime_seconds,
        )
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
                raise _SlackError(
                    "invalid_blocks", errors=errors, response_metadata={"messages": [f"[ERROR] {e}" for e in errors]}
                )
            if blocks_text_length(blocks) > BLOCKS_TEXT_MAX:
                raise _SlackError("msg_blocks_too_long")
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

    # ---- ephemeral ---------------------------------------------------------------------------

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
