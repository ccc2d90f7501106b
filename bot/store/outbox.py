"""The outbox: Slack posts stored first, sent exactly once (handlers/outbox.py is the sender); a finished run's
report enqueued with its "reported" mark."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bot.core.redact import redact, redact_value
from bot.core.types import (
    LIVE_STREAM_STATES,
    OutboxItem,
    OutboxKind,
    OutboxPost,
    OutboxState,
    Run,
    RunStatus,
    Stream,
    StreamState,
)
from bot.store.backends import WAKE_OUTBOX
from bot.store.lane import lane
from bot.store.rows import _decode, _decode_run, new_id
from bot.store.sql import LedgerBase


class Outbox(LedgerBase):
    """Outbox rows: claimed by one sender at a time, recorded once sent. The SQL, run on the store's thread."""

    @lane.normal
    def enqueue(
        self,
        *,
        kind: OutboxKind,
        key: str,
        channel: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
        thread_ts: str | None = None,
        target: str | None = None,
        approval_id: str | None = None,
    ) -> str:
        """Store a post or update for the sender; the same `key` again returns the first item's id. Redacted (the
        store is a boundary too).

        Joins the caller's transaction when one is open (sqlite-utils nests it as a savepoint), so a
        state change and the message saying so commit together."""
        with self._atomic():
            item_id = new_id("out")
            now = self.sql.now()
            inserted = self._write(
                "INSERT INTO outbox (id, key, kind, run_id, channel, thread_ts, target, approval_id, text, "
                "blocks, state, attempts, unsure, plain, next_at, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?, ?) ON CONFLICT DO NOTHING",
                [
                    item_id,
                    key,
                    kind.value,
                    run_id,
                    channel,
                    thread_ts,
                    target,
                    approval_id,
                    redact(text),
                    json.dumps(redact_value(blocks)) if blocks is not None else None,
                    OutboxState.PENDING.value,
                    now,
                    now,
                ],
            )
            if inserted:
                self._wake(WAKE_OUTBOX)
                return item_id
            return str(self._select("SELECT id FROM outbox WHERE key = ?", [key])[0]["id"])

    @lane.normal
    def enqueue_posts(self, posts: Sequence[OutboxPost]) -> list[str]:
        """Several thread posts (one answer in parts) in one transaction, in order; their item ids."""
        with self._atomic():
            return [
                self.enqueue(
                    kind=OutboxKind.POST,
                    key=p.key,
                    channel=p.channel,
                    text=p.text,
                    blocks=p.blocks,
                    run_id=p.run_id,
                    thread_ts=p.thread_ts,
                    approval_id=p.approval_id,
                )
                for p in posts
            ]

    @lane.normal
    def report(self, run_id: str, posts: Sequence[OutboxPost]) -> None:
        """Enqueue a finished run's answer or handoff report and mark it reported, together: enqueued once
        (keys are unique), and a crash before this leaves the run in `unreported_runs` for the next driver."""
        with self._atomic():
            self.enqueue_posts(posts)
            self._write("UPDATE runs SET reported = 1 WHERE id = ?", [run_id])

    @lane.normal
    def unreported_runs(self) -> list[Run]:
        """Finished runs whose answer or report was never enqueued (the process died in between)."""
        rows = self._select(
            "SELECT * FROM runs WHERE status = ? AND reported IS NULL ORDER BY updated_at", [RunStatus.FINISHED.value]
        )
        return [_decode_run(r) for r in rows]

    @lane.normal
    def outbox_item(self, item_id: str) -> OutboxItem | None:
        rows = self._select("SELECT * FROM outbox WHERE id = ?", [item_id])
        return _decode(OutboxItem, rows[0]) if rows else None

    @lane.normal
    def outbox_by_key(self, key: str) -> OutboxItem | None:
        rows = self._select("SELECT * FROM outbox WHERE key = ?", [key])
        return _decode(OutboxItem, rows[0]) if rows else None

    @lane.normal
    def outbox_items(self, run_id: str | None = None) -> list[OutboxItem]:
        """Every outbox item (of one run), in the order it was enqueued."""
        where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        return [_decode(OutboxItem, r) for r in self._select(f"SELECT * FROM outbox {where} ORDER BY rowid", params)]

    @lane.normal
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
        return _decode(OutboxItem, rows[0]) if rows else None

    @lane.normal
    def outbox_attempt(self, item_id: str, owner: str, *, until: float, unsure: bool) -> bool:
        """About to call Slack for a held item: count it and extend the claim; a post stays `unsure` until its
        answer is recorded. False: the claim was lost (it lapsed and another sender took the item)."""
        return (
            self._write(
                "UPDATE outbox SET attempts = attempts + 1, unsure = CASE WHEN ? = 1 THEN 1 ELSE unsure END, "
                "claimed_until = ? WHERE id = ? AND owner = ? AND state = 'pending'",
                [int(unsure), until, item_id, owner],
            )
            == 1
        )

    @lane.normal
    def renew_outbox_claim(self, item_id: str, owner: str, *, until: float) -> bool:
        return (
            self._write(
                "UPDATE outbox SET claimed_until = ? WHERE id = ? AND owner = ? AND state = 'pending'",
                [until, item_id, owner],
            )
            == 1
        )

    @lane.normal
    def outbox_sent(self, item_id: str, owner: str, *, ts: str, now: float) -> bool:
        """Slack has it: record its ts (a card's also on its approval) and let the claim go, in one transaction."""
        with self._atomic():
            if (
                self._write(
                    "UPDATE outbox SET state = 'sent', ts = ?, sent_at = ?, unsure = 0, owner = NULL, "
                    "claimed_until = NULL WHERE id = ? AND owner = ? AND state = 'pending'",
                    [ts, now, item_id, owner],
                )
                != 1
            ):
                return False
            self._write(
                "UPDATE approvals SET message_ts = ? WHERE message_ts IS NULL AND id = "
                "(SELECT approval_id FROM outbox WHERE id = ? AND kind = 'post')",
                [ts, item_id],
            )
            return True

    @lane.normal
    def outbox_retry(self, item_id: str, owner: str, *, next_at: float, error: str, unsure: bool) -> None:
        """Not sent this time: let the claim go until `next_at`. `unsure`: the failed call may still have posted."""
        self._write(
            "UPDATE outbox SET next_at = ?, error = ?, unsure = ?, owner = NULL, claimed_until = NULL "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            [next_at, redact(error), int(unsure), item_id, owner],
        )

    @lane.normal
    def outbox_plain(self, item_id: str, owner: str, *, error: str) -> bool:
        """Slack refused the post's content: from now on its plain-text fallback is sent (once refused, failed)."""
        return (
            self._write(
                "UPDATE outbox SET plain = 1, unsure = 0, error = ? WHERE id = ? AND owner = ? AND state = 'pending'",
                [redact(error), item_id, owner],
            )
            == 1
        )

    @lane.normal
    def outbox_failed(self, item_id: str, owner: str, *, error: str) -> None:
        """Slack will never accept it (logged by the sender): stop trying."""
        self._write(
            "UPDATE outbox SET state = 'failed', error = ?, unsure = 0, owner = NULL, claimed_until = NULL "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            [redact(error), item_id, owner],
        )

    @lane.normal
    def release_outbox(self, owner: str) -> int:
        """This sender stops: its claims go back at once, so the next sender continues without waiting."""
        released = self._write(
            "UPDATE outbox SET owner = NULL, claimed_until = NULL WHERE owner = ? AND state = 'pending'", [owner]
        )
        if released:
            self._wake(WAKE_OUTBOX)
        return released

    # --- streamed answers (handlers/stream.py streams them; the answer's outbox item finishes them) ---------------
    @lane.normal
    def stream_intent(self, *, run_id: str, step: int, channel: str, thread_ts: str, start_text: str) -> str | None:
        """Record that a stream is about to start (before chat.startStream is called, so a restart can find its
        message); None when the run already has a live stream (a resumed run never starts a second one)."""
        with self._atomic():
            if self._live_streams(run_id):
                return None
            stream_id, now = new_id("str"), self.sql.now()
            self._insert(
                "streams",
                {
                    "id": stream_id,
                    "run_id": run_id,
                    "step": step,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "state": StreamState.STARTING.value,
                    "start_text": redact(start_text),
                    "sent": "",
                    "broken": 0,
                    "created_at": now,
                    "updated_at": now,
                },
            )
            return stream_id

    def _live_streams(self, run_id: str) -> list[dict[str, Any]]:
        states = [s.value for s in LIVE_STREAM_STATES]
        return self._select(
            "SELECT * FROM streams WHERE run_id = ? AND state IN (?, ?) ORDER BY created_at DESC", [run_id, *states]
        )

    @lane.normal
    def live_stream(self, run_id: str) -> Stream | None:
        """The run's stream that is not finished yet (at most one), if any."""
        rows = self._live_streams(run_id)
        return _decode(Stream, rows[0]) if rows else None

    @lane.normal
    def streams(self, run_id: str) -> list[Stream]:
        """Every stream of a run, oldest first."""
        return [
            _decode(Stream, r)
            for r in self._select("SELECT * FROM streams WHERE run_id = ? ORDER BY created_at", [run_id])
        ]

    @lane.normal
    def stream_started(self, stream_id: str, *, ts: str, sent: str) -> None:
        """startStream answered (or its message was found again): its ts, and what it shows."""
        live = [s.value for s in LIVE_STREAM_STATES]
        self._update_stream(stream_id, "AND state IN (?, ?)", live, ts=ts, sent=sent, state=StreamState.STREAMING.value)

    @lane.normal
    def stream_sent(self, stream_id: str, *, sent: str) -> None:
        """An append reached Slack: what the message shows now."""
        self._update_stream(stream_id, sent=sent)

    @lane.normal
    def stream_broken(self, stream_id: str) -> None:
        """Slack refused an append (its lifetime, an error): no more appends; chat.update finishes it."""
        self._update_stream(stream_id, broken=1)

    @lane.normal
    def stream_answered(self, stream_id: str, *, final: str) -> None:
        """The step it streamed ended as the answer: the whole answer, for the outbox to finish the message."""
        self._update_stream(stream_id, final=final)

    @lane.normal
    def stream_ended(self, stream_id: str, state: StreamState) -> None:
        """Interim (stopped as it was), abandoned (no message) or finished."""
        self._update_stream(stream_id, state=state.value)

    def _update_stream(self, stream_id: str, where: str = "", params: Sequence[str] = (), **fields: Any) -> None:
        """Set `fields` (what the message shows redacted) and the update time, on the row `where` also holds."""
        values = [redact(v) if k in ("sent", "final") else v for k, v in fields.items()]
        sets = "".join(f"{k} = ?, " for k in fields)
        self._write(
            f"UPDATE streams SET {sets}updated_at = ? WHERE id = ? {where}",
            [*values, self.sql.now(), stream_id, *params],
        )

    @lane.normal
    def stream_finished(self, stream_id: str, item_id: str, owner: str, *, ts: str, now: float) -> bool:
        """The answer's outbox item finished the streamed message: both recorded in one transaction."""
        with self._atomic():
            if not self.outbox_sent(item_id, owner, ts=ts, now=now):
                return False
            self.stream_ended(stream_id, StreamState.FINISHED)
            return True
