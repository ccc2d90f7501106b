"""What every table group shares: placeholders, NUL-safe parameters, ids, and rows decoded into records."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from bot.core.types import (
    ACTIVE_STATUSES,
    Approval,
    ApprovalState,
    DecisionCause,
    InboxItem,
    InboxState,
    OutboxItem,
    OutboxKind,
    OutboxState,
    Run,
    RunStatus,
    StopReason,
    Stream,
    StreamState,
    ToolResultRow,
    Usage,
)

ACTIVE_STATES: tuple[str, ...] = tuple(s.value for s in ACTIVE_STATUSES)
# Everything written is redacted here, at the boundary, except what must round-trip byte-exact to the
# Messages API: the run's fixed system prompt and tool schemas, and the message history (the runtime
# redacts what *enters* the history; assistant turns are stored exactly as the API returned them).
_EXACT_RUN_FIELDS = frozenset({"system", "tools"})


def _marks(values: Sequence[Any]) -> str:
    """SQL placeholders for an IN list; a never-matching NULL when it is empty."""
    return ", ".join("?" for _ in values) or "NULL"


def _no_nul(params: list[Any]) -> list[Any]:
    """NUL characters (a log padded by a crash, binary output) as U+FFFD, on both backends alike: Postgres text
    refuses them, and a tool's output must never fail the write that records it. JSON columns escape them."""
    return [p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _decode_run(row: dict[str, Any]) -> Run:
    return Run(
        id=row["id"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        mention_ts=row["mention_ts"],
        requester=row["requester"],
        task=row["task"],
        status=RunStatus(row["status"]),
        model=row["model"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        stop_detail=row["stop_detail"],
        stopped_by=row["stopped_by"],
        output=row["output"],
        iterations=row["iterations"] or 0,
        usage=Usage(
            input_tokens=row["input_tokens"] or 0,
            output_tokens=row["output_tokens"] or 0,
            cache_read_tokens=row["cache_read_tokens"] or 0,
            cache_write_tokens=row["cache_write_tokens"] or 0,
        ),
        cost_usd=row["cost_usd"] or 0.0,
        agent_seconds=row["agent_seconds"] or 0.0,
        condensed=bool(row["condensed"]),
        tools_called=tuple(json.loads(row["tools_called"] or "[]")),
        status_ts=row["status_ts"],
        stop_requested_by=row["stop_requested_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        system=row["system"],
        tools=json.loads(row["tools"]) if row["tools"] else None,
        drop_block=bool(row["drop_block"]),
        settings=json.loads(row["settings"]) if row.get("settings") else None,
        owner=row.get("owner"),
        lease_until=row.get("lease_until"),
        team_id=row.get("team_id"),
        askers=tuple(json.loads(row["askers"])) if row.get("askers") else (),
        title=row.get("title") or None,
    )


def _decode_approval(row: dict[str, Any]) -> Approval:
    return Approval(
        id=row["id"],
        run_id=row["run_id"],
        tool_use_id=row["tool_use_id"],
        tool=row["tool"],
        category=row["category"],
        args=json.loads(row["args"]) if row["args"] else {},
        args_hash=row["args_hash"],
        preview=row["preview"],
        preview_hash=row["preview_hash"],
        requester=row["requester"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        message_ts=row["message_ts"],
        state=ApprovalState(row["state"]),
        cause=DecisionCause(row["cause"]) if row["cause"] else None,
        required=row["required"] or 1,
        approvals=tuple(json.loads(row["approvals"] or "[]")),
        decided_by=row["decided_by"],
        decided_name=row["decided_name"],
        reason=row["reason"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_at=row["decided_at"],
        run_tokens=row["run_tokens"],
        run_cost_usd=row["run_cost_usd"],
    )


def _decode_inbox(row: dict[str, Any]) -> InboxItem:
    return InboxItem(
        id=row["id"],
        run_id=row["run_id"],
        channel=row["channel"],
        ts=row["ts"],
        user=row["user"],
        text=row["text"],
        state=InboxState(row["state"]),
        created_at=row["created_at"],
    )


def _decode_outbox(row: dict[str, Any]) -> OutboxItem:
    return OutboxItem(
        id=row["id"],
        key=row["key"],
        kind=OutboxKind(row["kind"]),
        run_id=row["run_id"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        target=row["target"],
        approval_id=row["approval_id"],
        text=row["text"] or "",
        blocks=json.loads(row["blocks"]) if row["blocks"] else None,
        state=OutboxState(row["state"]),
        ts=row["ts"],
        attempts=row["attempts"] or 0,
        unsure=bool(row["unsure"]),
        plain=bool(row["plain"]),
        owner=row["owner"],
        claimed_until=row["claimed_until"],
        next_at=row["next_at"] or 0.0,
        error=row["error"],
        created_at=row["created_at"],
        sent_at=row["sent_at"],
    )


def _decode_stream(row: dict[str, Any]) -> Stream:
    return Stream(
        id=row["id"],
        run_id=row["run_id"],
        step=row["step"] or 0,
        channel=row["channel"],
        thread_ts=row["thread_ts"] or "",
        ts=row["ts"],
        state=StreamState(row["state"]),
        start_text=row["start_text"] or "",
        sent=row["sent"] or "",
        final=row["final"],
        broken=bool(row["broken"]),
        created_at=row["created_at"] or 0.0,
    )


def _decode_tool_result(row: dict[str, Any]) -> ToolResultRow:
    return ToolResultRow(
        run_id=row["run_id"],
        tool_use_id=row["tool_use_id"],
        tool=row["tool"],
        args=json.loads(row["args"]) if row["args"] else {},
        content=row["content"],
        is_error=bool(row["is_error"]),
        confirmed_by=row["confirmed_by"],
        created_at=row["created_at"],
    )
