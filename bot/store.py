"""Everything a run knows, in SQLite (the embedded default) or Postgres (several replicas), owned by one
writer thread per process.

`Ledger` is the synchronous store bound to the thread that opened it (the CLI uses it directly); its SQL is
written once for both databases (bot/backends.py runs it, bot/migrations.py shapes the schema). `Store` is
the async facade the bot uses: every call runs on the store's own thread, so a connection never crosses
threads, and on Postgres each call is one serializable transaction, so replicas sharing the database get
the same guarantees one process gets from SQLite's single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bot.backends import (
    WAKE_OUTBOX,
    WAKE_RUNS,
    PgListener,
    PostgresBackend,
    SqliteBackend,
    describe,
    is_postgres,
    open_backend,
)
from bot.errors import OpsloopError
from bot.history import continue_history
from bot.redact import redact, redact_value
from bot.types import (
    ACTIVE_STATUSES,
    AcceptedMention,
    AcceptedReply,
    Approval,
    ApprovalState,
    AuditEntry,
    DecisionCause,
    InboxItem,
    InboxState,
    OutboxItem,
    OutboxKind,
    OutboxPost,
    OutboxState,
    Run,
    RunStatus,
    Step,
    StopReason,
    ToolResultRow,
    Totals,
    Usage,
)

T = TypeVar("T")
log = structlog.get_logger("opsloop.store")

class StoreUnavailable(OpsloopError):
    """The database kept failing (locked, disk full, I/O, connection lost) past the retries. Not a run's failure:
    the run waits and resumes when the store works again."""

    def __init__(self, message: str, *, disk_full: bool) -> None:
        super().__init__(message)
        self.disk_full = disk_full


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
        id=row["id"], channel=row["channel"], thread_ts=row["thread_ts"], mention_ts=row["mention_ts"],
        requester=row["requester"], task=row["task"], status=RunStatus(row["status"]), model=row["model"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        stop_detail=row["stop_detail"], stopped_by=row["stopped_by"], output=row["output"],
        iterations=row["iterations"] or 0,
        usage=Usage(input_tokens=row["input_tokens"] or 0, output_tokens=row["output_tokens"] or 0,
                    cache_read_tokens=row["cache_read_tokens"] or 0, cache_write_tokens=row["cache_write_tokens"] or 0),
        cost_usd=row["cost_usd"] or 0.0, agent_seconds=row["agent_seconds"] or 0.0, condensed=bool(row["condensed"]),
        tools_called=tuple(json.loads(row["tools_called"] or "[]")), status_ts=row["status_ts"],
        stop_requested_by=row["stop_requested_by"], created_at=row["created_at"], updated_at=row["updated_at"],
        system=row["system"], tools=json.loads(row["tools"]) if row["tools"] else None,
        drop_block=bool(row["drop_block"]), owner=row.get("owner"), lease_until=row.get("lease_until"),
    )


def _decode_approval(row: dict[str, Any]) -> Approval:
    return Approval(
        id=row["id"], run_id=row["run_id"], tool_use_id=row["tool_use_id"], tool=row["tool"],
        category=row["category"], args=json.loads(row["args"]) if row["args"] else {}, args_hash=row["args_hash"],
        preview=row["preview"], preview_hash=row["preview_hash"], requester=row["requester"],
        channel=row["channel"], thread_ts=row["thread_ts"], message_ts=row["message_ts"],
        state=ApprovalState(row["state"]), cause=DecisionCause(row["cause"]) if row["cause"] else None,
        required=row["required"] or 1, approvals=tuple(json.loads(row["approvals"] or "[]")),
        decided_by=row["decided_by"], decided_name=row["decided_name"], reason=row["reason"],
        created_at=row["created_at"], expires_at=row["expires_at"], decided_at=row["decided_at"],
        run_tokens=row["run_tokens"], run_cost_usd=row["run_cost_usd"],
    )


def _decode_inbox(row: dict[str, Any]) -> InboxItem:
    return InboxItem(id=row["id"], run_id=row["run_id"], channel=row["channel"], ts=row["ts"], user=row["user"],
                     text=row["text"], state=InboxState(row["state"]), created_at=row["created_at"])


def _decode_outbox(row: dict[str, Any]) -> OutboxItem:
    return OutboxItem(
        id=row["id"], key=row["key"], kind=OutboxKind(row["kind"]), run_id=row["run_id"], channel=row["channel"],
        thread_ts=row["thread_ts"], target=row["target"], approval_id=row["approval_id"], text=row["text"] or "",
        blocks=json.loads(row["blocks"]) if row["blocks"] else None, state=OutboxState(row["state"]), ts=row["ts"],
        attempts=row["attempts"] or 0, unsure=bool(row["unsure"]), plain=bool(row["plain"]), owner=row["owner"],
        claimed_until=row["claimed_until"], next_at=row["next_at"] or 0.0, error=row["error"],
        created_at=row["created_at"], sent_at=row["sent_at"],
    )


def _decode_tool_result(row: dict[str, Any]) -> ToolResultRow:
    return ToolResultRow(run_id=row["run_id"], tool_use_id=row["tool_use_id"], tool=row["tool"],
                         args=json.loads(row["args"]) if row["args"] else {}, content=row["content"],
                         is_error=bool(row["is_error"]), confirmed_by=row["confirmed_by"],
                         created_at=row["created_at"])


class Ledger:
    """Synchronous store on SQLite (a file path) or Postgres (a postgresql:// URL); use only from the thread
    that created it. Its SQL is written once for both (see bot.backends)."""

    def __init__(self, location: str | Path) -> None:
        self.sql = open_backend(location)
        self.backend = self.sql.name
        self.schema = self.sql.version
        if isinstance(self.sql, SqliteBackend):
            self.db = self.sql.db  # the sqlite-utils Database (tests and the CLI's SQLite-only paths use it)

    def close(self) -> None:
        self.sql.close()

    def call(self, fn: Callable[[Ledger], T]) -> T:
        """`fn(self)` as one unit: on Postgres one SERIALIZABLE transaction, retried whole on a conflict."""
        return self.sql.call(lambda: fn(self))

    def _write(self, sql: str, params: list[Any]) -> int:
        """Execute one statement; it commits unless a transaction is open."""
        return self.sql.execute(sql, _no_nul(params))

    def _select(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        return self.sql.select(sql, _no_nul(params))

    def _insert(self, table: str, fields: dict[str, Any]) -> None:
        columns = ", ".join(f'"{k}"' for k in fields)
        self._write(f"INSERT INTO {table} ({columns}) VALUES ({_marks(list(fields))})", list(fields.values()))

    def _rows(self, table: str, where: str, params: list[Any], order_by: str | None = None,
              limit: int | None = None) -> list[dict[str, Any]]:
        sql = f"SELECT * FROM {table} WHERE {where}"
        if order_by:
            sql += f" ORDER BY {order_by}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._select(sql, params)

    def _skip_locked(self, of: str = "") -> str:
        """Postgres: a row another replica is claiming right now is skipped, not waited for (and retried)."""
        return f" FOR UPDATE{f' OF {of}' if of else ''} SKIP LOCKED" if self.backend == "postgres" else ""

    def _wake(self, payload: str) -> None:
        """Tell the other replicas, when this transaction commits (Postgres NOTIFY; SQLite: they poll)."""
        self.sql.notify(payload)

    def _atomic(self) -> contextlib.AbstractContextManager[Any]:
        return self.sql.atomic()

    def _durably(self) -> contextlib.AbstractContextManager[Any]:
        return self.sql.durably()

    # --- runs -------------------------------------------------------------
    def create_run(
        self, *, channel: str, thread_ts: str, requester: str, task: str, model: str,
        mention_ts: str = "", history: Iterable[dict[str, Any]] = (),
    ) -> Run:
        """Create a run with its first user message(s); `history` continues an earlier run."""
        now = self.sql.now()
        run_id = new_id("run")
        with self._atomic():
            self._insert("runs", {
                "id": run_id, "channel": channel, "thread_ts": thread_ts,
                "mention_ts": mention_ts, "requester": requester, "task": redact(task),
                "status": RunStatus.RUNNING.value, "model": model, "created_at": now, "updated_at": now,
            })
            for seq, message in enumerate(history):
                self._put_message(run_id, seq, message)
        return self.get_run(run_id)

    def open_run(
        self, *, channel: str, thread_ts: str, requester: str, task: str, prompt: str, model: str, mention_ts: str,
    ) -> tuple[Run, bool]:
        """The thread's active run, or a new one continuing the thread's history: (run, created).

        Check-and-create happens on the writer thread, so two mentions racing in one
        thread still get one run.
        """
        if (active := self.active_run(channel, thread_ts)) is not None:
            return active, False
        previous = self.latest_run(channel, thread_ts)
        history = continue_history(self.history(previous.id) if previous else [], prompt)
        with self._atomic():
            run = self.create_run(channel=channel, thread_ts=thread_ts, requester=requester, task=task, model=model,
                                  mention_ts=mention_ts, history=history)
            if previous is not None and previous.system is not None and previous.tools is not None:
                # The carried-over turns' thinking is bound to the earlier run's system and tools: keep them
                # (a tool change since then reaches the model as a note, see bot.runtime.tool_changes).
                self.fix_prompt(run.id, system=previous.system, tools=previous.tools)
                run = self.get_run(run.id)
        return run, True

    def get_run(self, run_id: str) -> Run:
        run = self.find_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        return run

    def find_run(self, run_id: str) -> Run | None:
        rows = self._select("SELECT * FROM runs WHERE id = ?", [run_id])
        return _decode_run(rows[0]) if rows else None

    def fix_prompt(self, run_id: str, *, system: str, tools: list[dict[str, Any]]) -> None:
        """Store the system prompt and tool schemas a run starts with (exactly, never redacted)."""
        self._update_run(run_id, system=system, tools=tools)

    def set_status(self, run_id: str, status: RunStatus) -> None:
        """Running <-> waiting_approval; `finish_run` ends a run."""
        self._update_run(run_id, status=status.value)

    def set_drop_block(self, run_id: str) -> None:
        """Every later request of this run asks the API to drop mismatched thinking blocks."""
        self._update_run(run_id, drop_block=1)

    def set_status_ts(self, run_id: str, ts: str) -> None:
        """The ts of the run's status message in the thread."""
        self._update_run(run_id, status_ts=ts)

    def save_totals(self, run_id: str, totals: Totals) -> None:
        """The run's counters so far."""
        extra = {"model": totals.model} if totals.model is not None else {}
        self._update_run(run_id, iterations=totals.iterations, cost_usd=totals.cost_usd,
                         agent_seconds=totals.agent_seconds, tools_called=totals.tools_called,
                         condensed=int(totals.condensed), **totals.usage.to_dict(), **extra)

    def finish_run(
        self, run_id: str, *, stop_reason: StopReason, stop_detail: str, stopped_by: str | None = None,
        output: str | None = None,
    ) -> None:
        self._update_run(run_id, status=RunStatus.FINISHED.value, stop_reason=stop_reason.value,
                         stop_detail=stop_detail, stopped_by=stopped_by, output=output)

    def _update_run(self, run_id: str, **fields: Any) -> None:
        # Plain SQL on the hot path: the loop calls this every step (sqlite-utils' update introspects the table).
        if "tools_called" in fields:
            fields["tools_called"] = json.dumps(list(fields["tools_called"]))
        if "tools" in fields:  # stored exactly as sent: never redacted, never re-serialised differently
            fields["tools"] = json.dumps(fields["tools"])
        fields = {k: redact(v) if isinstance(v, str) and k not in _EXACT_RUN_FIELDS else v for k, v in fields.items()}
        fields["updated_at"] = self.sql.now()
        self._write(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                    [*fields.values(), run_id])

    def stop_requested_by(self, run_id: str) -> str | None:
        """Who asked this run to stop, if anyone: asked twice a step, so one column, not the whole row."""
        rows = self._select("SELECT stop_requested_by FROM runs WHERE id = ?", [run_id])
        return str(rows[0]["stop_requested_by"]) if rows and rows[0]["stop_requested_by"] else None

    def request_stop(self, run_id: str, user: str) -> bool:
        """Mark a run to stop; False when it is not active (already finished)."""
        marked = self._write(
            "UPDATE runs SET stop_requested_by = ?, updated_at = ? "
            "WHERE id = ? AND status IN (?, ?) AND stop_requested_by IS NULL",
            [user, self.sql.now(), run_id, *ACTIVE_STATES],
        ) == 1
        if marked:
            self._wake(WAKE_RUNS)  # the replica driving it cancels the drive now, not at its next poll
        return marked

    def active_run(self, channel: str, thread_ts: str) -> Run | None:
        rows = self._rows("runs", "channel = ? AND thread_ts = ? AND status IN (?, ?)",
                          [channel, thread_ts, *ACTIVE_STATES], order_by="created_at desc", limit=1)
        return _decode_run(rows[0]) if rows else None

    def latest_run(self, channel: str, thread_ts: str) -> Run | None:
        rows = self._rows("runs", "channel = ? AND thread_ts = ?", [channel, thread_ts],
                          order_by="created_at desc", limit=1)
        return _decode_run(rows[0]) if rows else None

    def active_runs(self) -> list[Run]:
        return [
            _decode_run(r)
            for r in self._rows("runs", "status IN (?, ?)", list(ACTIVE_STATES), order_by="created_at")
        ]

    def list_runs(self, limit: int = 50) -> list[Run]:
        return [_decode_run(r) for r in self._rows("runs", "1 = 1", [], order_by="created_at desc", limit=limit)]

    # --- history ----------------------------------------------------------
    def _put_message(self, run_id: str, seq: int, message: dict[str, Any]) -> None:
        self._write(
            "INSERT INTO messages (run_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, seq) DO UPDATE SET role = excluded.role, content = excluded.content, "
            "created_at = excluded.created_at",
            [run_id, seq, message["role"], json.dumps(message["content"]), self.sql.now()],
        )

    def put_message(
        self, run_id: str, seq: int, message: dict[str, Any], *, consumed_inbox: Iterable[str] = (),
        totals: Totals | None = None,
    ) -> None:
        """Store message `seq` (insert or replace), mark inbox items consumed and save the run's totals,
        in one transaction."""
        with self._atomic():
            self._put_message(run_id, seq, message)
            for inbox_id in consumed_inbox:
                self.put_inbox_state(inbox_id, InboxState.CONSUMED)
            if totals is not None:
                self.save_totals(run_id, totals)

    def replace_history(self, run_id: str, history: list[dict[str, Any]]) -> None:
        """Swap the whole history (after condensation) in one transaction."""
        with self._atomic():
            self._write("DELETE FROM messages WHERE run_id = ?", [run_id])
            for seq, message in enumerate(history):
                self._put_message(run_id, seq, message)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"role": r["role"], "content": json.loads(r["content"])}
            for r in self._rows("messages", "run_id = ?", [run_id], order_by="seq")
        ]

    # --- tool results (so a resumed run never executes a call twice) -------
    def save_tool_result(
        self, run_id: str, *, tool_use_id: str, tool: str, args: dict[str, Any], content: str | None,
        is_error: bool, confirmed_by: str | None,
    ) -> bool:
        """A call's result. `content` None claims the call's "started" marker, compare-and-set and durably:
        True only for the one caller that inserted it, the only one that may run the call, and never once a
        Stop was recorded for the run (a Stop wins over an approval not yet acted on, in any process)."""
        row = [run_id, tool_use_id, tool, json.dumps(redact_value(args)),
               redact(content) if content is not None else None, int(is_error), confirmed_by, self.sql.now()]
        columns = "(run_id, tool_use_id, tool, args, content, is_error, confirmed_by, created_at)"
        if content is None:
            with self._durably():
                return self._write(
                    f"INSERT INTO tool_results {columns} SELECT ?, ?, ?, ?, ?, ?, ?, ? "
                    "WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = ? AND stop_requested_by IS NOT NULL) "
                    "ON CONFLICT DO NOTHING",
                    [*row, run_id]) == 1
        self._write(f"INSERT INTO tool_results {columns} VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (run_id, tool_use_id) DO UPDATE SET tool = excluded.tool, args = excluded.args, "
                    "content = excluded.content, is_error = excluded.is_error, confirmed_by = excluded.confirmed_by, "
                    "created_at = excluded.created_at", row)
        return True

    def tool_results(self, run_id: str, ids: Sequence[str] | None = None) -> dict[str, ToolResultRow]:
        """The run's stored results by tool_use_id (only those of `ids` when given: one turn's calls)."""
        where, params = "run_id = ?", [run_id]
        if ids is not None:
            where += f" AND tool_use_id IN ({_marks(ids)})"
            params += list(ids)
        rows = self._rows("tool_results", where, params)
        return {r["tool_use_id"]: _decode_tool_result(r) for r in rows}

    # --- trace ------------------------------------------------------------
    def add_step(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        self._write("INSERT INTO steps (run_id, kind, data, at) VALUES (?, ?, ?, ?)",
                    [run_id, kind, json.dumps(redact_value(data), default=str), self.sql.now()])

    def steps(self, run_id: str) -> list[Step]:
        return [
            Step(id=r["id"], run_id=r["run_id"], kind=r["kind"], data=json.loads(r["data"]), at=r["at"])
            for r in self._rows("steps", "run_id = ?", [run_id], order_by="id")
        ]

    # --- event dedupe -----------------------------------------------------
    def claim_event(self, event_id: str) -> bool:
        """True the first time an event id is seen; Slack redelivers."""
        return self._write(
            "INSERT INTO events (event_id, received_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [event_id, self.sql.now()]
        ) == 1

    def prune_events(self, older_than: float) -> int:
        """Forget event ids received before `older_than` (Slack redelivers within minutes); how many went."""
        return self._write("DELETE FROM events WHERE received_at < ?", [older_than])

    # --- store, then ack: one delivery, one transaction -------------------
    def accept_mention(
        self, event_id: str, *, channel: str, thread_ts: str, requester: str, task: str, prompt: str, model: str,
        mention_ts: str,
    ) -> AcceptedMention | None:
        """Claim a mention's event and store it in one transaction: a new run, or (the thread's run is going)
        a redirect queued like a reply. None: a duplicate delivery. Raises when the store fails: no ack."""
        with self._durably(), self._atomic():  # a redirect may decide approvals: FULL, like every decision
            if not self.claim_event(event_id):
                return None
            run, created = self.open_run(channel=channel, thread_ts=thread_ts, requester=requester, task=task,
                                         prompt=prompt, model=model, mention_ts=mention_ts)
            redirect = None if created else self._queue_reply(run, ts=mention_ts, user=requester, text=task)
            return AcceptedMention(run=run, created=created, redirect=redirect)

    def accept_reply(
        self, event_id: str, *, channel: str, thread_ts: str, ts: str, user: str, text: str,
    ) -> AcceptedReply | None:
        """Claim a thread reply's event and put it in the active run's inbox in one transaction, superseding the
        run's pending approvals (cause REPLY). None: a duplicate, or no active run in the thread."""
        with self._durably(), self._atomic():
            if not self.claim_event(event_id):
                return None
            run = self.active_run(channel, thread_ts)
            return self._queue_reply(run, ts=ts, user=user, text=text) if run is not None else None

    def _queue_reply(self, run: Run, *, ts: str, user: str, text: str) -> AcceptedReply:
        """Inside a transaction: the reply declines every pending approval of the run (compare-and-set), and is
        kept on record as superseding them; with none pending it is queued for the model."""
        now = self.sql.now()
        superseded = tuple(
            a.id for a in self.pending_approvals(run.id)
            if self._transition_approval(a.id, expect=ApprovalState.PENDING, state=ApprovalState.SUPERSEDED.value,
                                         cause=DecisionCause.REPLY.value, decided_by=user, reason=text,
                                         decided_at=now)
        )
        inbox_id = self.add_inbox(run_id=run.id, channel=run.channel, ts=ts, user=user, text=text)
        if superseded:  # the reply reaches the model inside the decision; on record, not in the queue
            self.put_inbox_state(inbox_id, InboxState.SUPERSEDING)
        self._wake(WAKE_RUNS)
        return AcceptedReply(item=self.get_inbox(inbox_id), superseded=superseded)

    def get_inbox(self, inbox_id: str) -> InboxItem:
        return _decode_inbox(self._rows("inbox", "id = ?", [inbox_id])[0])

    # --- outbox: Slack posts stored first, sent exactly once (handlers/outbox.py) ----
    def enqueue(
        self, *, kind: OutboxKind, key: str, channel: str, text: str, blocks: list[dict[str, Any]] | None = None,
        run_id: str | None = None, thread_ts: str | None = None, target: str | None = None,
        approval_id: str | None = None,
    ) -> str:
        """Store a post or update for the sender; the same `key` again returns the first item's id.

        Joins the caller's transaction when one is open (sqlite-utils nests it as a savepoint), so a
        state change and the message saying so commit together."""
        with self._atomic():
            return self._enqueue(kind=kind, key=key, channel=channel, text=text, blocks=blocks, run_id=run_id,
                                 thread_ts=thread_ts, target=target, approval_id=approval_id)

    def enqueue_posts(self, posts: Sequence[OutboxPost]) -> list[str]:
        """Several thread posts (one answer in parts) in one transaction, in order; their item ids."""
        with self._atomic():
            return [self._enqueue(kind=OutboxKind.POST, key=p.key, channel=p.channel, text=p.text, blocks=p.blocks,
                                  run_id=p.run_id, thread_ts=p.thread_ts, target=None, approval_id=p.approval_id)
                    for p in posts]

    def _enqueue(
        self, *, kind: OutboxKind, key: str, channel: str, text: str, blocks: list[dict[str, Any]] | None,
        run_id: str | None, thread_ts: str | None, target: str | None, approval_id: str | None,
    ) -> str:
        """One insert-or-nothing by key, redacted (the store is a boundary too); no transaction of its own."""
        item_id = new_id("out")
        now = self.sql.now()
        inserted = self._write(
            "INSERT INTO outbox (id, key, kind, run_id, channel, thread_ts, target, approval_id, text, "
            "blocks, state, attempts, unsure, plain, next_at, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?, ?) ON CONFLICT DO NOTHING",
            [item_id, key, kind.value, run_id, channel, thread_ts, target, approval_id, redact(text),
             json.dumps(redact_value(blocks)) if blocks is not None else None, OutboxState.PENDING.value, now, now],
        )
        if inserted:
            self._wake(WAKE_OUTBOX)
            return item_id
        return str(self._select("SELECT id FROM outbox WHERE key = ?", [key])[0]["id"])

    def report(self, run_id: str, posts: Sequence[OutboxPost]) -> None:
        """Enqueue a finished run's answer or handoff report and mark it reported, together: enqueued once
        (keys are unique), and a crash before this leaves the run in `unreported_runs` for the next driver."""
        with self._atomic():
            self.enqueue_posts(posts)
            self._write("UPDATE runs SET reported = 1 WHERE id = ?", [run_id])

    def unreported_runs(self) -> list[Run]:
        """Finished runs whose answer or report was never enqueued (the process died in between)."""
        rows = self._select("SELECT * FROM runs WHERE status = ? AND reported IS NULL ORDER BY updated_at",
                            [RunStatus.FINISHED.value])
        return [_decode_run(r) for r in rows]

    def outbox_item(self, item_id: str) -> OutboxItem | None:
        rows = self._select("SELECT * FROM outbox WHERE id = ?", [item_id])
        return _decode_outbox(rows[0]) if rows else None

    def outbox_by_key(self, key: str) -> OutboxItem | None:
        rows = self._select("SELECT * FROM outbox WHERE key = ?", [key])
        return _decode_outbox(rows[0]) if rows else None

    def outbox_items(self, run_id: str | None = None) -> list[OutboxItem]:
        """Every outbox item (of one run), in the order it was enqueued."""
        where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        return [_decode_outbox(r) for r in self._select(f"SELECT * FROM outbox {where} ORDER BY rowid", params)]

    def claim_outbox(self, owner: str, *, now: float, until: float) -> OutboxItem | None:
        """Take the next item due, compare-and-set: two senders never hold one item at once (a claim lapses at
        `claimed_until`). Posts go out in order per thread; an update only once its message was posted, and only
        the newest update of a message is sent (older ones nobody holds are superseded here)."""
        with self._atomic():
            self._write(
                "UPDATE outbox SET state = 'superseded' WHERE kind = 'update' AND state = 'pending' "
                "AND (owner IS NULL OR claimed_until < ?) AND EXISTS (SELECT 1 FROM outbox n WHERE "
                "n.kind = 'update' AND n.target = outbox.target AND n.state = 'pending' AND n.rowid > outbox.rowid)",
                [now],
            )
            rows = self._select(
                f"""
                UPDATE outbox SET owner = ?, claimed_until = ? WHERE id = (
                    SELECT o.id FROM outbox o
                    WHERE o.state = 'pending' AND o.next_at <= ?
                      AND (o.owner IS NULL OR o.claimed_until < ?)
                      AND (o.kind != 'post' OR NOT EXISTS (
                          SELECT 1 FROM outbox e WHERE e.kind = 'post' AND e.state = 'pending'
                            AND e.channel = o.channel AND e.thread_ts IS NOT DISTINCT FROM o.thread_ts
                            AND e.rowid < o.rowid))
                      AND (o.kind != 'update' OR (
                          EXISTS (SELECT 1 FROM outbox t WHERE t.id = o.target AND t.state != 'pending')
                          AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.kind = 'update' AND e.target = o.target
                                            AND e.state = 'pending' AND e.rowid < o.rowid)))
                    ORDER BY o.next_at, o.rowid LIMIT 1{self._skip_locked("o")})
                RETURNING *
                """,
                [owner, until, now, now],
            )
        return _decode_outbox(rows[0]) if rows else None

    def outbox_attempt(self, item_id: str, owner: str, *, until: float, unsure: bool) -> bool:
        """About to call Slack for a held item: count it and extend the claim; a post stays `unsure` until its
        answer is recorded. False: the claim was lost (it lapsed and another sender took the item)."""
        return self._write(
            "UPDATE outbox SET attempts = attempts + 1, unsure = CASE WHEN ? = 1 THEN 1 ELSE unsure END, "
            "claimed_until = ? WHERE id = ? AND owner = ? AND state = 'pending'",
            [int(unsure), until, item_id, owner],
        ) == 1

    def renew_outbox_claim(self, item_id: str, owner: str, *, until: float) -> bool:
        return self._write("UPDATE outbox SET claimed_until = ? WHERE id = ? AND owner = ? AND state = 'pending'",
                           [until, item_id, owner]) == 1

    def outbox_sent(self, item_id: str, owner: str, *, ts: str, now: float) -> bool:
        """Slack has it: record its ts (a card's also on its approval) and let the claim go, in one transaction."""
        with self._atomic():
            if self._write(
                "UPDATE outbox SET state = 'sent', ts = ?, sent_at = ?, unsure = 0, owner = NULL, "
                "claimed_until = NULL WHERE id = ? AND owner = ? AND state = 'pending'",
                [ts, now, item_id, owner],
            ) != 1:
                return False
            self._write(
                "UPDATE approvals SET message_ts = ? WHERE message_ts IS NULL AND id = "
                "(SELECT approval_id FROM outbox WHERE id = ? AND kind = 'post')",
                [ts, item_id],
            )
            return True

    def outbox_retry(self, item_id: str, owner: str, *, next_at: float, error: str, unsure: bool) -> None:
        """Not sent this time: let the claim go until `next_at`. `unsure`: the failed call may still have posted."""
        self._write(
            "UPDATE outbox SET next_at = ?, error = ?, unsure = ?, owner = NULL, claimed_until = NULL "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            [next_at, redact(error), int(unsure), item_id, owner],
        )

    def outbox_plain(self, item_id: str, owner: str, *, error: str) -> bool:
        """Slack refused the post's content: from now on its plain-text fallback is sent (once refused, failed)."""
        return self._write(
            "UPDATE outbox SET plain = 1, unsure = 0, error = ? WHERE id = ? AND owner = ? AND state = 'pending'",
            [redact(error), item_id, owner],
        ) == 1

    def outbox_failed(self, item_id: str, owner: str, *, error: str) -> None:
        """Slack will never accept it (logged by the sender): stop trying."""
        self._write(
            "UPDATE outbox SET state = 'failed', error = ?, unsure = 0, owner = NULL, claimed_until = NULL "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            [redact(error), item_id, owner],
        )

    def release_outbox(self, owner: str) -> int:
        """This sender stops: its claims go back at once, so the next sender continues without waiting."""
        released = self._write("UPDATE outbox SET owner = NULL, claimed_until = NULL WHERE owner = ? "
                               "AND state = 'pending'", [owner])
        if released:
            self._wake(WAKE_OUTBOX)
        return released

    # --- inbox ------------------------------------------------------------
    def add_inbox(self, *, run_id: str, channel: str, ts: str, user: str, text: str) -> str:
        inbox_id = new_id("msg")
        self._insert("inbox", {
            "id": inbox_id, "run_id": run_id, "channel": channel, "ts": ts, "user": user,
            "text": redact(text), "state": InboxState.QUEUED.value, "created_at": self.sql.now(),
        })
        return inbox_id

    def put_inbox_state(self, inbox_id: str, state: InboxState) -> None:
        self._write("UPDATE inbox SET state = ? WHERE id = ?", [state.value, inbox_id])

    def queued_inbox(self, run_id: str) -> list[InboxItem]:
        return [
            _decode_inbox(r)
            for r in self._rows("inbox", "run_id = ? AND state = 'queued'", [run_id], order_by="created_at")
        ]

    # --- approvals --------------------------------------------------------
    def create_approval(
        self, *, run_id: str, tool_use_id: str, tool: str, category: str, args: dict[str, Any],
        requester: str | None, expires_at: float, args_hash: str | None = None, preview: str | None = None,
        preview_hash: str | None = None, channel: str | None = None, thread_ts: str | None = None,
        required: int = 1, run_tokens: int | None = None, run_cost_usd: float | None = None,
    ) -> Approval:
        """A new pending approval for one call, bound to its arguments (and preview) hash."""
        fields: dict[str, Any] = {
            "id": new_id("apr"), "run_id": run_id, "tool_use_id": tool_use_id, "tool": tool, "category": category,
            "args": json.dumps(redact_value(args or {})), "args_hash": args_hash, "preview": preview,
            "preview_hash": preview_hash, "requester": requester, "channel": channel, "thread_ts": thread_ts,
            "required": required, "expires_at": expires_at, "run_tokens": run_tokens, "run_cost_usd": run_cost_usd,
        }
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        fields.update(state=ApprovalState.PENDING.value, created_at=self.sql.now())
        self._insert("approvals", fields)
        return self.get_approval(fields["id"])

    def get_approval(self, approval_id: str) -> Approval:
        approval = self.find_approval(approval_id)
        if approval is None:
            raise KeyError(f"no approval {approval_id!r}")
        return approval

    def find_approval(self, approval_id: str) -> Approval | None:
        rows = self._rows("approvals", "id = ?", [approval_id])
        return _decode_approval(rows[0]) if rows else None

    def approval_for_call(self, run_id: str, tool_use_id: str) -> Approval | None:
        """The newest approval asked for this call."""
        rows = self._rows("approvals", "run_id = ? AND tool_use_id = ?", [run_id, tool_use_id],
                          order_by="created_at desc", limit=1)
        return _decode_approval(rows[0]) if rows else None

    def pending_approvals(self, run_id: str | None = None) -> list[Approval]:
        where, params = "state = 'pending'", []
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        return [_decode_approval(r) for r in self._rows("approvals", where, params)]

    def decide_approval(
        self, approval_id: str, *, state: ApprovalState, cause: DecisionCause, decided_at: float,
        decided_by: str | None = None, decided_name: str | None = None, reason: str | None = None,
    ) -> bool:
        """End a pending approval; False when it was no longer pending (a second click, one after expiry)."""
        fields: dict[str, Any] = {"state": state.value, "cause": cause.value, "decided_at": decided_at,
                                  "decided_by": decided_by, "decided_name": decided_name, "reason": reason}
        with self._durably():
            decided = self._transition_approval(approval_id, expect=ApprovalState.PENDING,
                                                **{k: v for k, v in fields.items() if v is not None})
        if decided:
            self._wake(WAKE_RUNS)  # the paused run is runnable: any replica picks it up at once
        return decided

    def set_card_ts(self, approval_id: str, message_ts: str, *, expect: ApprovalState) -> bool:
        """Record the card's ts, if the approval is still in state `expect`."""
        return self._transition_approval(approval_id, expect=expect, message_ts=message_ts)

    def _transition_approval(self, approval_id: str, *, expect: ApprovalState, **fields: Any) -> bool:
        """Compare-and-set on state: a second click, or one after expiry, changes nothing."""
        if "approvals" in fields:
            fields["approvals"] = json.dumps(fields["approvals"])
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items()}
        sets = ", ".join(f"{k} = ?" for k in fields)
        return self._write(
            f"UPDATE approvals SET {sets} WHERE id = ? AND state = ?", [*fields.values(), approval_id, expect.value]
        ) == 1

    def add_approver(self, approval_id: str, user: str, *, decided_name: str, now: float) -> bool:
        """Record one approval; the last one required flips the state to approved.

        Read-modify-write is safe here: every call is one unit (the single writer thread on SQLite, one
        serializable transaction on Postgres, where two replicas' clicks at once are retried one after the other).
        """
        a = self.find_approval(approval_id)
        if a is None or not a.pending or user in a.approvals:
            return False
        approvals = [*a.approvals, user]
        fields: dict[str, Any] = {"approvals": approvals}
        if len(approvals) >= a.required:
            fields.update(state=ApprovalState.APPROVED.value, cause=DecisionCause.CLICK.value, decided_by=user,
                          decided_name=decided_name, decided_at=now)
        with self._durably():
            added = self._transition_approval(approval_id, expect=ApprovalState.PENDING, **fields)
        if added and fields.get("state"):
            self._wake(WAKE_RUNS)
        return added

    def audit(self) -> list[AuditEntry]:
        """Every approval decision with the result of the call it allowed."""
        sql = """
            SELECT a.*, r.content AS result, r.is_error AS result_is_error
            FROM approvals a LEFT JOIN tool_results r
              ON r.run_id = a.run_id AND r.tool_use_id = a.tool_use_id
            ORDER BY a.created_at
        """
        rows = self._select(sql, [])
        return [AuditEntry(approval=_decode_approval(r), result=r["result"],
                           result_is_error=bool(r["result_is_error"]) if r["result_is_error"] is not None else None)
                for r in rows]

    # --- timeline and metrics queries
    def inbox(self, run_id: str) -> list[InboxItem]:
        """Every thread reply stored for a run (queued, consumed or superseding), oldest first."""
        return [_decode_inbox(r) for r in self._select("SELECT * FROM inbox WHERE run_id = ? ORDER BY created_at",
                                                       [run_id])]

    def run_approvals(self, run_id: str) -> list[Approval]:
        """Every approval a run asked for, oldest first."""
        rows = self._select("SELECT * FROM approvals WHERE run_id = ? ORDER BY created_at", [run_id])
        return [_decode_approval(r) for r in rows]

    def active_run_counts(self) -> dict[RunStatus, int]:
        """How many runs are in each active state (a state with no run is absent)."""
        rows = self._select("SELECT status, COUNT(*) AS n FROM runs WHERE status IN (?, ?) GROUP BY status",
                            list(ACTIVE_STATES))
        return {RunStatus(r["status"]): int(r["n"]) for r in rows}

    def pending_approval_count(self) -> int:
        return int(self._select("SELECT COUNT(*) AS n FROM approvals WHERE state = 'pending'", [])[0]["n"])

    def approval_waits(self) -> list[tuple[ApprovalState, float]]:
        """(outcome, seconds from the card to the decision) for every decided approval."""
        rows = self._select("SELECT state, decided_at - created_at AS waited FROM approvals "
                            "WHERE state != 'pending' AND decided_at IS NOT NULL", [])
        return [(ApprovalState(r["state"]), max(0.0, float(r["waited"]))) for r in rows]

    def probe_write(self) -> None:
        """Raises when the database takes no writes (checked without writing anything)."""
        self.sql.probe_write()

    # --- approval policy queries
    def requesters(self, approval_id: str) -> list[str]:
        """Everyone who asked for the call behind an approval (none of them may approve it alone).

        The approval's requester, every earlier run's requester in the same thread (the run
        continues their history), and everyone whose thread messages were consumed into the
        history before the call: queued replies, redirect mentions and replies that
        superseded an earlier approval. Unknown approval: nobody.
        """
        sql = """
            WITH cur AS (
                SELECT a.requester, a.created_at AS asked_at, r.id AS run_id, r.channel, r.thread_ts,
                       r.created_at AS run_at
                FROM approvals a JOIN runs r ON r.id = a.run_id WHERE a.id = ?
            ), thread_runs AS (
                SELECT t.id, t.requester FROM runs t, cur
                WHERE t.channel = cur.channel AND t.thread_ts = cur.thread_ts AND t.created_at <= cur.run_at
            )
            SELECT requester AS "user" FROM cur
            UNION SELECT requester FROM thread_runs
            UNION SELECT i."user" FROM inbox i JOIN thread_runs t ON i.run_id = t.id, cur
                WHERE i.state IN ('consumed', 'superseding')
                  AND (i.run_id != cur.run_id OR i.created_at <= cur.asked_at)
        """
        rows = self._select(sql, [approval_id])
        found = {r["user"] for r in rows if r["user"]}
        if not found:  # an approval whose run row is gone still names its requester
            found |= {r["requester"] for r in self._select("SELECT requester FROM approvals WHERE id = ?",
                                                           [approval_id]) if r["requester"]}
        return sorted(found)


    # --- leases: one driver per run ------------------------------------------
    def claim_run(self, run_id: str, owner: str, *, until: float, now: float, dead: Sequence[str] = ()) -> bool:
        """Take (or keep) an active run's lease: free, already ours, lapsed, or held by an owner known to be
        dead (a crashed process on this host). Compare-and-set."""
        return self._write(
            "UPDATE runs SET owner = ?, lease_until = ? WHERE id = (SELECT id FROM runs WHERE id = ? "
            "AND status IN (?, ?) "
            f"AND (owner IS NULL OR owner = ? OR lease_until < ? OR owner IN ({_marks(dead)})){self._skip_locked()})",
            [owner, until, run_id, *ACTIVE_STATES, owner, now, *dead],
        ) == 1

    def lease_owners(self) -> list[str]:
        """Who holds the leases of active runs (to spot a crashed process on this host)."""
        rows = self._select("SELECT DISTINCT owner FROM runs WHERE owner IS NOT NULL AND status IN (?, ?)",
                            list(ACTIVE_STATES))
        return [str(r["owner"]) for r in rows]

    def renew_leases(self, owner: str, run_ids: Sequence[str], *, until: float) -> list[str]:
        """Extend this owner's leases on `run_ids` (the heartbeat); returns the ids it still holds."""
        held = []
        for run_id in run_ids:
            if self._write("UPDATE runs SET lease_until = ? WHERE id = ? AND owner = ?", [until, run_id, owner]):
                held.append(run_id)
        return held

    def stop_requested_among(self, run_ids: Sequence[str]) -> list[str]:
        """Which of these runs someone asked to stop (a Stop received by any process)."""
        rows = self._select(f"SELECT id FROM runs WHERE id IN ({_marks(run_ids)}) AND stop_requested_by IS NOT NULL",
                            list(run_ids))
        return [str(r["id"]) for r in rows]

    def release_run(self, run_id: str, owner: str) -> None:
        """Give a run back (paused, finished, or this process is stopping): the next driver takes it at once."""
        if self._write("UPDATE runs SET owner = NULL, lease_until = NULL WHERE id = ? AND owner = ?", [run_id, owner]):
            self._wake(WAKE_RUNS)

    def runnable_runs(self, *, now: float, dead: Sequence[str] = ()) -> list[Run]:
        """Active runs nobody drives that have something to do: running ones (a dead driver's included),
        and paused ones whose approval was decided (anywhere) or whose stop was requested."""
        rows = self._select(
            "SELECT * FROM runs WHERE status IN (?, ?) "
            f"AND (owner IS NULL OR lease_until < ? OR owner IN ({_marks(dead)})) "
            "AND (status = ? OR stop_requested_by IS NOT NULL OR NOT EXISTS "
            "(SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.state = ?)) ORDER BY created_at",
            [*ACTIVE_STATES, now, *dead, RunStatus.RUNNING.value, ApprovalState.PENDING.value],
        )
        return [_decode_run(r) for r in rows]

    def due_approvals(self, *, now: float) -> list[Approval]:
        """Pending approvals past their expiry: the sweeper expires them."""
        rows = self._select("SELECT * FROM approvals WHERE state = ? AND expires_at <= ?",
                            [ApprovalState.PENDING.value, now])
        return [_decode_approval(r) for r in rows]


class _Writer:
    """The store's one thread (a sqlite-utils Database is bound to the thread that opened it). Work waits in a
    priority queue: what Slack waits on for its ack (accepting an event, a click's decision) goes ahead of
    the runs' bookkeeping, so a busy bot still acks within Slack's 3 seconds."""

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._thread = threading.Thread(target=self._work, name="opsloop-store", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T], *, urgent: bool = False) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((0 if urgent else 1, next(self._order), (fn, loop, future)))
        return future

    def close(self) -> None:
        self._queue.put((2, next(self._order), None))  # after everything already queued
        self._thread.join()

    def _work(self) -> None:
        while (job := self._queue.get()[2]) is not None:
            fn, loop, future = job
            try:
                outcome: tuple[Any, BaseException | None] = (fn(), None)
            except BaseException as e:  # handed to the caller, whatever it is
                outcome = (None, e)
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody to tell
                loop.call_soon_threadsafe(_settle, future, *outcome)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Store:
    """Async facade over Ledger: every call runs on one dedicated writer thread.

    `path` is a SQLite file path or a postgresql:// URL (then also `listen` for other replicas' news)."""

    def __init__(self, path: str | Path, *, retry_seconds: float = 10.0) -> None:
        self.path = str(path)
        self.retry_seconds = retry_seconds
        self.backend = "postgres" if is_postgres(self.path) else "sqlite"
        self.where = describe(self.path)  # without a password: for logs
        self._writer = _Writer()
        self._ledger: Ledger | None = None
        self._listener: PgListener | None = None

    async def open(self) -> Store:
        """Connect and migrate. A database that is down or starting (Postgres next to us in a deploy) is retried
        for `retry_seconds`, then StoreUnavailable says where (without the password) and why."""
        def _open() -> None:
            self._ledger = Ledger(self.path)

        deadline = time.monotonic() + self.retry_seconds
        delay = 0.1
        while True:
            try:
                await self._submit(_open)
                return self
            except Exception as e:
                backend = PostgresBackend if self.backend == "postgres" else SqliteBackend
                transient = backend.transient(e)
                if transient is None or time.monotonic() + delay > deadline:
                    if transient is None:
                        raise
                    raise StoreUnavailable(f"can't open the store at {self.where}: {type(e).__name__}: {e}".strip(),
                                           disk_full=transient.disk_full) from e
                log.warning("store.open_retry", where=self.where, error=f"{type(e).__name__}: {e}".strip(),
                            delay_s=round(delay, 2))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def now(self) -> float:
        """The store's clock (epoch seconds): every replica's leases, claims and expiries are measured against the
        database server's clock, so replicas on machines whose clocks disagree still agree on who holds what.
        SQLite: this machine's clock."""
        ledger = self._ledger
        return ledger.sql.now() if ledger is not None else time.time()

    def listen(self, on_wake: Callable[[str], None]) -> PgListener | None:
        """Postgres: call `on_wake(WAKE_RUNS | WAKE_OUTBOX)` whenever another replica (or this one) commits news
        for the run schedulers or the senders, so a decision or a Stop anywhere reaches its run at once. SQLite:
        nothing (the schedulers' poll finds it)."""
        if self.backend != "postgres" or self._listener is not None:
            return self._listener
        self._listener = PgListener(self.path, on_wake)
        self._listener.start()
        return self._listener

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._ledger is not None:
            await self._submit(self._ledger.close)
            self._ledger = None
        await asyncio.to_thread(self._writer.close)

    async def _submit(self, fn: Callable[[], T], *, urgent: bool = False) -> T:
        return await self._writer.submit(fn, urgent=urgent)

    async def _call(self, fn: Callable[[Ledger], T], *, urgent: bool = False) -> T:
        """Run `fn(ledger)` on the writer thread as one unit (`Ledger.call`), retrying transient errors
        ("database is locked", a full disk, a lost Postgres connection, a failover) with backoff; after
        `retry_seconds` they become StoreUnavailable, and the run waits instead of failing. Each call is one
        statement or one transaction, so a failed attempt left nothing behind and a retry is safe."""
        ledger = self._ledger
        if ledger is None:  # said here, before the closed store's executor refuses the call
            raise RuntimeError("store is not open")
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                return await self._submit(lambda: ledger.call(fn), urgent=urgent)
            except Exception as e:
                transient = ledger.sql.transient(e)
                if transient is None:
                    raise
                if time.monotonic() + delay > deadline:
                    raise StoreUnavailable(str(e), disk_full=transient.disk_full) from e
                log.warning("store.retry", error=f"{type(e).__name__}: {e}".strip(), delay_s=round(delay, 2))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # Each method runs its Ledger namesake on the writer thread; see Ledger for what it does. `urgent=True`:
    # on the path of a Slack ack (events, clicks), so it goes ahead of the runs' bookkeeping.
    # --- runs
    async def create_run(
        self, *, channel: str, thread_ts: str, requester: str, task: str, model: str,
        mention_ts: str = "", history: Iterable[dict[str, Any]] = (),
    ) -> Run:
        history = list(history)
        return await self._call(lambda db: db.create_run(channel=channel, thread_ts=thread_ts, requester=requester,
                                                         task=task, model=model, mention_ts=mention_ts,
                                                         history=history))

    async def open_run(
        self, *, channel: str, thread_ts: str, requester: str, task: str, prompt: str, model: str, mention_ts: str,
    ) -> tuple[Run, bool]:
        return await self._call(lambda db: db.open_run(channel=channel, thread_ts=thread_ts, requester=requester,
                                                       task=task, prompt=prompt, model=model, mention_ts=mention_ts))

    async def get_run(self, run_id: str) -> Run:
        return await self._call(lambda db: db.get_run(run_id))

    async def find_run(self, run_id: str) -> Run | None:
        return await self._call(lambda db: db.find_run(run_id), urgent=True)

    async def active_run(self, channel: str, thread_ts: str) -> Run | None:
        return await self._call(lambda db: db.active_run(channel, thread_ts))

    async def latest_run(self, channel: str, thread_ts: str) -> Run | None:
        return await self._call(lambda db: db.latest_run(channel, thread_ts))

    async def active_runs(self) -> list[Run]:
        return await self._call(lambda db: db.active_runs())

    async def list_runs(self, limit: int = 50) -> list[Run]:
        return await self._call(lambda db: db.list_runs(limit))

    async def fix_prompt(self, run_id: str, *, system: str, tools: list[dict[str, Any]]) -> None:
        await self._call(lambda db: db.fix_prompt(run_id, system=system, tools=tools))

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        await self._call(lambda db: db.set_status(run_id, status))

    async def set_drop_block(self, run_id: str) -> None:
        await self._call(lambda db: db.set_drop_block(run_id))

    async def set_status_ts(self, run_id: str, ts: str) -> None:
        await self._call(lambda db: db.set_status_ts(run_id, ts))

    async def save_totals(self, run_id: str, totals: Totals) -> None:
        await self._call(lambda db: db.save_totals(run_id, totals))

    async def finish_run(
        self, run_id: str, *, stop_reason: StopReason, stop_detail: str, stopped_by: str | None = None,
        output: str | None = None,
    ) -> None:
        await self._call(lambda db: db.finish_run(run_id, stop_reason=stop_reason, stop_detail=stop_detail,
                                                  stopped_by=stopped_by, output=output))

    async def stop_requested_by(self, run_id: str) -> str | None:
        return await self._call(lambda db: db.stop_requested_by(run_id))

    async def request_stop(self, run_id: str, user: str) -> bool:
        return await self._call(lambda db: db.request_stop(run_id, user), urgent=True)

    # --- history, results, trace
    async def history(self, run_id: str) -> list[dict[str, Any]]:
        return await self._call(lambda db: db.history(run_id))

    async def put_message(
        self, run_id: str, seq: int, message: dict[str, Any], *, consumed_inbox: Iterable[str] = (),
        totals: Totals | None = None,
    ) -> None:
        consumed = list(consumed_inbox)
        await self._call(lambda db: db.put_message(run_id, seq, message, consumed_inbox=consumed, totals=totals))

    async def replace_history(self, run_id: str, history: list[dict[str, Any]]) -> None:
        await self._call(lambda db: db.replace_history(run_id, history))

    async def save_tool_result(
        self, run_id: str, *, tool_use_id: str, tool: str, args: dict[str, Any], content: str | None,
        is_error: bool, confirmed_by: str | None,
    ) -> bool:
        return await self._call(lambda db: db.save_tool_result(run_id, tool_use_id=tool_use_id, tool=tool, args=args,
                                                        content=content, is_error=is_error,
                                                        confirmed_by=confirmed_by))

    async def tool_results(self, run_id: str, ids: Sequence[str] | None = None) -> dict[str, ToolResultRow]:
        return await self._call(lambda db: db.tool_results(run_id, ids))

    async def add_step(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        await self._call(lambda db: db.add_step(run_id, kind, data))

    async def steps(self, run_id: str) -> list[Step]:
        return await self._call(lambda db: db.steps(run_id))

    async def claim_event(self, event_id: str) -> bool:
        return await self._call(lambda db: db.claim_event(event_id), urgent=True)

    async def prune_events(self, older_than: float) -> int:
        return await self._call(lambda db: db.prune_events(older_than))

    # --- store, then ack
    async def accept_mention(
        self, event_id: str, *, channel: str, thread_ts: str, requester: str, task: str, prompt: str, model: str,
        mention_ts: str,
    ) -> AcceptedMention | None:
        return await self._call(lambda db: db.accept_mention(
            event_id, channel=channel, thread_ts=thread_ts, requester=requester, task=task, prompt=prompt,
            model=model, mention_ts=mention_ts), urgent=True)

    async def accept_reply(
        self, event_id: str, *, channel: str, thread_ts: str, ts: str, user: str, text: str,
    ) -> AcceptedReply | None:
        return await self._call(lambda db: db.accept_reply(event_id, channel=channel, thread_ts=thread_ts, ts=ts,
                                                           user=user, text=text), urgent=True)

    # --- outbox
    async def enqueue(
        self, *, kind: OutboxKind, key: str, channel: str, text: str, blocks: list[dict[str, Any]] | None = None,
        run_id: str | None = None, thread_ts: str | None = None, target: str | None = None,
        approval_id: str | None = None,
    ) -> str:
        return await self._call(lambda db: db.enqueue(kind=kind, key=key, channel=channel, text=text, blocks=blocks,
                                                      run_id=run_id, thread_ts=thread_ts, target=target,
                                                      approval_id=approval_id))

    async def enqueue_posts(self, posts: Sequence[OutboxPost]) -> list[str]:
        posts = list(posts)
        return await self._call(lambda db: db.enqueue_posts(posts))

    async def outbox_item(self, item_id: str) -> OutboxItem | None:
        return await self._call(lambda db: db.outbox_item(item_id))

    async def outbox_by_key(self, key: str) -> OutboxItem | None:
        return await self._call(lambda db: db.outbox_by_key(key))

    async def outbox_items(self, run_id: str | None = None) -> list[OutboxItem]:
        return await self._call(lambda db: db.outbox_items(run_id))

    async def claim_outbox(self, owner: str, *, now: float, until: float) -> OutboxItem | None:
        return await self._call(lambda db: db.claim_outbox(owner, now=now, until=until))

    async def outbox_attempt(self, item_id: str, owner: str, *, until: float, unsure: bool) -> bool:
        return await self._call(lambda db: db.outbox_attempt(item_id, owner, until=until, unsure=unsure))

    async def renew_outbox_claim(self, item_id: str, owner: str, *, until: float) -> bool:
        return await self._call(lambda db: db.renew_outbox_claim(item_id, owner, until=until))

    async def outbox_sent(self, item_id: str, owner: str, *, ts: str, now: float) -> bool:
        return await self._call(lambda db: db.outbox_sent(item_id, owner, ts=ts, now=now))

    async def outbox_retry(self, item_id: str, owner: str, *, next_at: float, error: str, unsure: bool) -> None:
        await self._call(lambda db: db.outbox_retry(item_id, owner, next_at=next_at, error=error, unsure=unsure))

    async def outbox_plain(self, item_id: str, owner: str, *, error: str) -> bool:
        return await self._call(lambda db: db.outbox_plain(item_id, owner, error=error))

    async def outbox_failed(self, item_id: str, owner: str, *, error: str) -> None:
        await self._call(lambda db: db.outbox_failed(item_id, owner, error=error))

    async def release_outbox(self, owner: str) -> int:
        return await self._call(lambda db: db.release_outbox(owner))

    # --- inbox
    async def add_inbox(self, *, run_id: str, channel: str, ts: str, user: str, text: str) -> str:
        return await self._call(lambda db: db.add_inbox(run_id=run_id, channel=channel, ts=ts, user=user, text=text))

    async def put_inbox_state(self, inbox_id: str, state: InboxState) -> None:
        await self._call(lambda db: db.put_inbox_state(inbox_id, state))

    async def queued_inbox(self, run_id: str) -> list[InboxItem]:
        return await self._call(lambda db: db.queued_inbox(run_id))

    async def inbox(self, run_id: str) -> list[InboxItem]:
        return await self._call(lambda db: db.inbox(run_id))

    # --- approvals
    async def create_approval(
        self, *, run_id: str, tool_use_id: str, tool: str, category: str, args: dict[str, Any],
        requester: str | None, expires_at: float, args_hash: str | None = None, preview: str | None = None,
        preview_hash: str | None = None, channel: str | None = None, thread_ts: str | None = None,
        required: int = 1, run_tokens: int | None = None, run_cost_usd: float | None = None,
    ) -> Approval:
        return await self._call(lambda db: db.create_approval(
            run_id=run_id, tool_use_id=tool_use_id, tool=tool, category=category, args=args, requester=requester,
            expires_at=expires_at, args_hash=args_hash, preview=preview, preview_hash=preview_hash, channel=channel,
            thread_ts=thread_ts, required=required, run_tokens=run_tokens, run_cost_usd=run_cost_usd))

    async def get_approval(self, approval_id: str) -> Approval:
        return await self._call(lambda db: db.get_approval(approval_id), urgent=True)

    async def find_approval(self, approval_id: str) -> Approval | None:
        return await self._call(lambda db: db.find_approval(approval_id), urgent=True)

    async def approval_for_call(self, run_id: str, tool_use_id: str) -> Approval | None:
        return await self._call(lambda db: db.approval_for_call(run_id, tool_use_id))

    async def pending_approvals(self, run_id: str | None = None) -> list[Approval]:
        return await self._call(lambda db: db.pending_approvals(run_id))

    async def run_approvals(self, run_id: str) -> list[Approval]:
        return await self._call(lambda db: db.run_approvals(run_id))

    async def decide_approval(
        self, approval_id: str, *, state: ApprovalState, cause: DecisionCause, decided_at: float,
        decided_by: str | None = None, decided_name: str | None = None, reason: str | None = None,
    ) -> bool:
        return await self._call(lambda db: db.decide_approval(approval_id, state=state, cause=cause,
                                                              decided_at=decided_at, decided_by=decided_by,
                                                              decided_name=decided_name, reason=reason), urgent=True)

    async def set_card_ts(self, approval_id: str, message_ts: str, *, expect: ApprovalState) -> bool:
        return await self._call(lambda db: db.set_card_ts(approval_id, message_ts, expect=expect), urgent=True)

    async def add_approver(self, approval_id: str, user: str, *, decided_name: str, now: float) -> bool:
        return await self._call(lambda db: db.add_approver(approval_id, user, decided_name=decided_name, now=now),
                                urgent=True)

    async def requesters(self, approval_id: str) -> list[str]:
        return await self._call(lambda db: db.requesters(approval_id), urgent=True)

    async def audit(self) -> list[AuditEntry]:
        return await self._call(lambda db: db.audit())

    # --- metrics and health
    async def active_run_counts(self) -> dict[RunStatus, int]:
        return await self._call(lambda db: db.active_run_counts())

    async def pending_approval_count(self) -> int:
        return await self._call(lambda db: db.pending_approval_count())

    async def approval_waits(self) -> list[tuple[ApprovalState, float]]:
        return await self._call(lambda db: db.approval_waits())

    async def probe_write(self) -> None:
        await self._call(lambda db: db.probe_write())

    # --- leases
    async def claim_run(self, run_id: str, owner: str, *, until: float, now: float, dead: Sequence[str] = ()) -> bool:
        return await self._call(lambda db: db.claim_run(run_id, owner, until=until, now=now, dead=dead))

    async def lease_owners(self) -> list[str]:
        return await self._call(lambda db: db.lease_owners())

    async def renew_leases(self, owner: str, run_ids: Sequence[str], *, until: float) -> list[str]:
        return await self._call(lambda db: db.renew_leases(owner, run_ids, until=until), urgent=True)

    async def stop_requested_among(self, run_ids: Sequence[str]) -> list[str]:
        return await self._call(lambda db: db.stop_requested_among(run_ids), urgent=True)

    async def release_run(self, run_id: str, owner: str) -> None:
        await self._call(lambda db: db.release_run(run_id, owner))

    async def runnable_runs(self, *, now: float, dead: Sequence[str] = ()) -> list[Run]:
        return await self._call(lambda db: db.runnable_runs(now=now, dead=dead))

    async def due_approvals(self, *, now: float) -> list[Approval]:
        return await self._call(lambda db: db.due_approvals(now=now))

    async def report(self, run_id: str, posts: Sequence[OutboxPost]) -> None:
        await self._call(lambda db: db.report(run_id, posts))

    async def unreported_runs(self) -> list[Run]:
        return await self._call(lambda db: db.unreported_runs())
