"""The PagerDuty reach's tables: which runs work on which incident, and its outbox (notes and change events stored
first, in the transaction that decides them, then delivered by the sender: tools/pagerduty/sender.py).

An item is enqueued once by its key (`note:<run>:summary`, `note:<run>:final`, `change:<run>:<call>`), claimed by
one sender at a time (compare-and-set on owner and claimed_until, as the Slack outbox does; a dead process's claim
is taken at once), counted before each attempt so a later sender knows an earlier one may have reached PagerDuty,
and recorded once PagerDuty accepted it. Store functions (bot.store.lane): `fn(ledger, ...)` on the store's thread,
`await fn(store, ...)` from the bot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.redact import redact
from bot.core.types import CallResult, StopReason
from bot.run.report import STOP_WORDS
from bot.run.summary import Confidence, HypothesisStatus, Summary, render_text
from bot.store import Ledger
from bot.store.lane import lane
from bot.store.migrations import Migration, Tables
from bot.store.rows import _decode

NOTE_MAX = 20_000  # a note's content, its marker line included: PagerDuty keeps notes short; the thread has it all
# The tools whose approved calls are PagerDuty's own actions, never also sent to it as changes.
OWN_TOOLS = frozenset({"pagerduty_acknowledge", "pagerduty_resolve"})
_TABLES = (
    "CREATE TABLE pagerduty_runs (run_id TEXT PRIMARY KEY, incident_id TEXT NOT NULL, service_id TEXT, "
    "channel TEXT, thread_ts TEXT, created_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE pagerduty_outbox (key TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, "
    "incident_id TEXT NOT NULL, content TEXT NOT NULL, details TEXT, state TEXT NOT NULL, attempts INTEGER NOT NULL, "
    "owner TEXT, claimed_until DOUBLE PRECISION, next_at DOUBLE PRECISION NOT NULL, error TEXT, ref TEXT, "
    "created_at DOUBLE PRECISION NOT NULL, sent_at DOUBLE PRECISION)",
    "CREATE INDEX idx_pagerduty_outbox_due ON pagerduty_outbox (state, next_at)",
)


@dataclass(frozen=True)
class PagerRun:
    run_id: str
    incident_id: str
    service_id: str
    link: str  # the run's Slack thread


@dataclass(frozen=True)
class PagerItem:
    key: str
    kind: str  # "note" | "change"
    run_id: str
    incident_id: str
    content: str
    details: dict[str, str]
    state: str
    attempts: int
    ref: str | None = None
    error: str | None = None


def thread_link(channel: str, ts: str | None) -> str:
    """The thread's link, as Slack resolves it in the reader's workspace."""
    return (
        f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if ts
        else f"https://slack.com/archives/{channel}"
    )


def marker(run_id: str, what: str) -> str:
    """The last line of every note opsloop writes: what a read-back looks for before a resend."""
    return f"[opsloop {run_id} {what}]"


def note_text(body: str, link: str, run_id: str, what: str) -> str:
    """`body`, the thread's link and the marker, bounded to NOTE_MAX (the body cut, never the marker)."""
    tail = f"\n\nSlack thread: {link}\n{marker(run_id, what)}"
    room = NOTE_MAX - len(tail)
    body = redact(body)
    return (body if len(body) <= room else body[: room - 40] + "\n… [cut: the whole text is in the thread]") + tail


def likely_cause(summary: Summary) -> bool:
    """A hypothesis opsloop may call the likely cause: confirmed, or supported with high confidence."""
    return any(
        h.status == HypothesisStatus.CONFIRMED
        or (h.status == HypothesisStatus.SUPPORTED and h.confidence == Confidence.HIGH)
        for h in summary.hypotheses
    )


def _enqueue(
    ledger: Ledger,
    run: PagerRun,
    key: str,
    content: str,
    *,
    kind: str = "note",
    details: Mapping[str, str] | None = None,
) -> None:
    """An item of `run` (a note, or a change event with its `details`), enqueued once by its key."""
    now = ledger.sql.now()
    ledger._write(
        "INSERT INTO pagerduty_outbox (key, kind, run_id, incident_id, content, details, state, attempts, "
        "next_at, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (key) DO NOTHING",
        [key, kind, run.run_id, run.incident_id, content, json.dumps(dict(details or {})), now, now],
    )


def _note(ledger: Ledger, run: PagerRun, what: str, body: str) -> None:
    """The run's note `what` (summary | final), enqueued once by its key."""
    _enqueue(ledger, run, f"note:{run.run_id}:{what}", note_text(body, run.link, run.run_id, what))


@lane.normal
def link_run(ledger: Ledger, run_id: str, incident_id: str, service_id: str) -> None:
    """Run `run_id` works on PagerDuty incident `incident_id` (the first link stays)."""
    with ledger._atomic():
        rows = ledger._select("SELECT channel, thread_ts FROM runs WHERE id = ?", [run_id])
        channel, ts = (rows[0]["channel"], rows[0]["thread_ts"]) if rows else (None, None)
        ledger._write(
            "INSERT INTO pagerduty_runs (run_id, incident_id, service_id, channel, thread_ts, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            [run_id, incident_id, service_id, channel, ts, ledger.sql.now()],
        )


@lane.normal
def pager_run(ledger: Ledger, run_id: str) -> PagerRun | None:
    rows = ledger._select("SELECT * FROM pagerduty_runs WHERE run_id = ?", [run_id])
    if not rows:
        return None
    r = rows[0]
    return PagerRun(
        run_id, str(r["incident_id"]), str(r["service_id"] or ""), thread_link(str(r["channel"] or ""), r["thread_ts"])
    )


def summary_noted(ledger: Ledger, run_id: str, summary: Summary) -> None:
    """`Tables.on_summary`: the first accepted summary of an incident's run that names a likely cause becomes
    a note (once: its key)."""
    run = pager_run(ledger, run_id)
    if run is None or not likely_cause(summary):
        return
    _note(ledger, run, "summary", "opsloop's investigation found a likely cause.\n\n" + render_text(summary))


def final_noted(ledger: Ledger, run_id: str, labels: Mapping[str, str], incident: tuple[str, str] | None) -> None:
    """At the run's end (in its ending transaction): its answer, or its handoff report, becomes a note on its
    incident (`incident`, from its alert's labels, else the one linked at its start); once: its key."""
    if incident is not None:
        link_run(ledger, run_id, *incident)
    run = pager_run(ledger, run_id)
    rows = ledger._select("SELECT output, stop_reason, stop_detail FROM runs WHERE id = ?", [run_id])
    if run is None or not rows:
        return
    output, reason = str(rows[0]["output"] or "").strip(), str(rows[0]["stop_reason"] or "")
    if reason == StopReason.COMPLETED.value and output:
        body = "opsloop's answer:\n\n" + output
    else:
        words = STOP_WORDS.get(reason, reason or "stopped")
        body = f"opsloop handed this incident back: it {words}"
        if detail := str(rows[0]["stop_detail"] or "").strip():
            body += f" ({detail})"
        if output:
            body += "\n\nIts conclusion:\n" + output
        last = ledger.last_summary(run_id)
        if last is not None:
            body += "\n\nWhere it left off:\n" + render_text(last)
    _note(ledger, run, "final", body)


def change_noted(ledger: Ledger, run_id: str, result: CallResult) -> None:
    """`Tables.on_approved`: an approved change of an incident's run becomes a change event (PagerDuty's own
    acknowledge and resolve excepted), at least once: PagerDuty's change events take no dedupe key and are listed
    only once processed, so an attempt whose answer was lost is sent again; both copies carry its `opsloop_key`."""
    run = pager_run(ledger, run_id)
    if run is None or result.tool in OWN_TOOLS:
        return
    outcome = "failed" if result.is_error else "done"
    args = ", ".join(f"{k}={v}" for k, v in sorted(result.args.items()))
    summary = redact(f"opsloop: {result.tool}({args}) {outcome}, approved by {result.confirmed_by}")
    key = f"change:{run_id}:{result.tool_use_id}"
    details = {
        "opsloop_key": key,  # the same in a resend: change events take no dedupe key (sent at least once)
        "tool": result.tool,
        "arguments": redact(json.dumps(result.args, sort_keys=True)),
        "approved_by": str(result.confirmed_by),
        "outcome": outcome,
        "result": redact(result.content[:1000]),
        "incident": run.incident_id,
        "slack_thread": run.link,
    }
    _enqueue(ledger, run, key, summary, kind="change", details=details)


@lane.normal
def claim_owners(ledger: Ledger) -> list[str]:
    """Who holds claims on pending items (to spot a process on this host that died holding one)."""
    rows = ledger._select(
        "SELECT DISTINCT owner FROM pagerduty_outbox WHERE state = 'pending' AND owner IS NOT NULL", []
    )
    return [str(r["owner"]) for r in rows]


@lane.normal
def claim_item(ledger: Ledger, owner: str, *, now: float, until: float, dead: Sequence[str] = ()) -> PagerItem | None:
    """Take the next item due, compare-and-set: two senders never hold one item at once. A claim lapses at its
    `claimed_until`, or at once when its owner is in `dead` (a process on this host that is gone)."""
    free = f"(owner IS NULL OR claimed_until < ? OR owner IN ({', '.join('?' * len(dead)) or 'NULL'}))"
    with ledger._atomic():
        rows = ledger._select(
            f"SELECT key FROM pagerduty_outbox WHERE state = 'pending' AND next_at <= ? AND {free} "
            f"ORDER BY next_at, created_at LIMIT 1{ledger._skip_locked()}",
            [now, now, *dead],
        )
        if not rows:
            return None
        key = rows[0]["key"]
        if (
            ledger._write(
                "UPDATE pagerduty_outbox SET owner = ?, claimed_until = ? "
                f"WHERE key = ? AND state = 'pending' AND {free}",
                [owner, until, key, now, *dead],
            )
            != 1
        ):
            return None
        return _decode(PagerItem, ledger._select("SELECT * FROM pagerduty_outbox WHERE key = ?", [key])[0])


@lane.normal
def item_attempt(ledger: Ledger, key: str, owner: str) -> bool:
    """About to call PagerDuty: counted first, so whoever comes next reads back before a resend. False: the claim
    was lost."""
    return (
        ledger._write(
            "UPDATE pagerduty_outbox SET attempts = attempts + 1 WHERE key = ? AND owner = ? AND state = 'pending'",
            [key, owner],
        )
        == 1
    )


@lane.normal
def item_done(
    ledger: Ledger, key: str, owner: str, *, state: str, ref: str | None = None, error: str | None = None
) -> None:
    """Sent (`ref`: PagerDuty's note id) or failed for good (`error`): the claim goes."""
    ledger._write(
        "UPDATE pagerduty_outbox SET state = ?, ref = ?, error = ?, sent_at = ?, owner = NULL, claimed_until = NULL "
        "WHERE key = ? AND owner = ? AND state = 'pending'",
        [state, ref, redact(error) if error else None, ledger.sql.now(), key, owner],
    )


@lane.normal
def item_retry(ledger: Ledger, key: str, owner: str, *, next_at: float, error: str) -> None:
    ledger._write(
        "UPDATE pagerduty_outbox SET next_at = ?, error = ?, owner = NULL, claimed_until = NULL "
        "WHERE key = ? AND owner = ? AND state = 'pending'",
        [next_at, redact(error), key, owner],
    )


@lane.normal
def pager_items(ledger: Ledger, run_id: str | None = None) -> list[PagerItem]:
    """Every outbox item (of one run), oldest first."""
    where, params = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    return [
        _decode(PagerItem, r)
        for r in ledger._select(f"SELECT * FROM pagerduty_outbox {where} ORDER BY created_at, key", params)
    ]


TABLES = Tables(
    name="pagerduty",
    migrations=(Migration("pagerduty_m001_runs_outbox", sqlite=_TABLES, postgres=_TABLES),),
    on_summary=summary_noted,
    on_approved=change_noted,
)
