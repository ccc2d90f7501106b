"""The store's records: typed rows back, and every decision stored with its cause."""

from __future__ import annotations

import json

import sqlite_utils

from bot.core.types import ApprovalState, DecisionCause, InboxState, Run, RunStatus, StopReason, Totals, Usage
from bot.run.approvals import count_approval
from bot.store import Ledger
from bot.store.migrations import sqlite_migrations as migrations

NEVER = 2e9


def _ledger(db_url: str) -> tuple[Ledger, Run]:
    ledger = Ledger(db_url)
    run = ledger.create_run(channel="C1", thread_ts="1.0", requester="U1", task="web-03 is out of disk", model="m")
    return ledger, run


def _ask(ledger: Ledger, run: Run, call: str = "toolu_1", required: int = 1):
    return ledger.create_approval(
        run_id=run.id,
        tool_use_id=call,
        tool="clean_logs",
        category="destructive",
        args={"path": "/var/log"},
        requester="U1",
        expires_at=NEVER,
        required=required,
    )


def test_a_new_run_comes_back_as_a_typed_record(db_url) -> None:
    ledger, run = _ledger(db_url)
    assert (run.status, run.active, run.usage, run.tools_called, run.tools, run.stop_reason) == (
        RunStatus.RUNNING,
        True,
        Usage(),
        (),
        None,
        None,
    )
    ledger.save_totals(
        run.id,
        Totals(
            iterations=2,
            usage=Usage(input_tokens=10, output_tokens=5, cache_write_tokens=3),
            cost_usd=0.5,
            agent_seconds=1.0,
            tools_called=("check_disk",),
            condensed=False,
            model="m2",
        ),
    )
    ledger.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="done")
    done = ledger.get_run(run.id)
    assert (done.status, done.active, done.stop_reason, done.usage.paid_tokens, done.tools_called, done.model) == (
        RunStatus.FINISHED,
        False,
        StopReason.COMPLETED,
        18,
        ("check_disk",),
        "m2",
    )


def test_each_decision_is_stored_with_its_cause(db_url) -> None:
    ledger, run = _ledger(db_url)
    clicked, replied = _ask(ledger, run, "toolu_1"), _ask(ledger, run, "toolu_2")
    assert count_approval(ledger, clicked.id, "U2", decided_name="bob", now=1.0)
    assert ledger.decide_approval(
        replied.id,
        state=ApprovalState.SUPERSEDED,
        cause=DecisionCause.REPLY,
        decided_by="U3",
        reason="wait",
        decided_at=2.0,
    )
    assert not ledger.decide_approval(
        replied.id, state=ApprovalState.DENIED, cause=DecisionCause.CLICK, decided_by="U2", decided_at=3.0
    )  # no longer pending: nothing changes
    got = {a.tool_use_id: (a.state, a.cause, a.decided_by, a.reason) for a in ledger.run_approvals(run.id)}
    assert got == {
        "toolu_1": (ApprovalState.APPROVED, DecisionCause.CLICK, "U2", None),
        "toolu_2": (ApprovalState.SUPERSEDED, DecisionCause.REPLY, "U3", "wait"),
    }


def test_an_approval_needing_two_stays_pending_without_a_cause_after_one(db_url) -> None:
    ledger, run = _ledger(db_url)
    a = _ask(ledger, run, required=2)
    assert count_approval(ledger, a.id, "U2", decided_name="bob", now=1.0)
    a = ledger.get_approval(a.id)
    assert (a.state, a.cause, a.approvals, a.pending) == (ApprovalState.PENDING, None, ("U2",), True)


def test_the_card_ts_is_recorded_only_in_the_expected_state(db_url) -> None:
    ledger, run = _ledger(db_url)
    a = _ask(ledger, run)
    assert not ledger.set_card_ts(a.id, "9.0", expect=ApprovalState.APPROVED)
    assert ledger.set_card_ts(a.id, "9.1", expect=ApprovalState.PENDING)
    assert ledger.get_approval(a.id).message_ts == "9.1"


def test_inbox_items_come_back_with_their_state(db_url) -> None:
    ledger, run = _ledger(db_url)
    first = ledger.add_inbox(run_id=run.id, channel="C1", ts="2.0", user="U2", text="hold on")
    ledger.add_inbox(run_id=run.id, channel="C1", ts="3.0", user="U3", text="go")
    ledger.put_inbox_state(first, InboxState.SUPERSEDING)
    assert [(i.user, i.state) for i in ledger.inbox(run.id)] == [
        ("U2", InboxState.SUPERSEDING),
        ("U3", InboxState.QUEUED),
    ]
    assert [i.text for i in ledger.queued_inbox(run.id)] == ["go"]


def test_the_cause_of_decisions_made_before_m003_is_read_from_their_reason(tmp_path) -> None:
    db = sqlite_utils.Database(str(tmp_path / "old.db"))
    migrations.apply(db, stop_before="m003_decision_cause")
    rows = {
        "a1": ("approved", None),
        "a2": ("denied", "no"),
        "a3": ("expired", None),
        "a4": ("superseded", "run stopped (cancelled)"),
        "a5": ("superseded", "the call changed (arguments or dry-run preview); a new approval was requested"),
        "a6": ("superseded", "leave postgres alone"),
        "a7": ("pending", None),
    }
    for id_, (state, reason) in rows.items():
        db.table("approvals").insert(
            {
                "id": id_,
                "run_id": "r",
                "tool_use_id": id_,
                "tool": "t",
                "category": "mutating",
                "args": "{}",
                "state": state,
                "reason": reason,
                "created_at": 1.0,
            }
        )
    db.close()
    ledger = Ledger(tmp_path / "old.db")
    causes = {id_: ledger.get_approval(id_).cause for id_ in rows}
    assert causes == {
        "a1": DecisionCause.CLICK,
        "a2": DecisionCause.CLICK,
        "a3": DecisionCause.EXPIRY,
        "a4": DecisionCause.STOP,
        "a5": DecisionCause.CHANGED_CALL,
        "a6": DecisionCause.REPLY,
        "a7": None,
    }


def test_m013_keeps_each_persons_latest_click_on_each_answer(tmp_path) -> None:
    from bot.core.types import FeedbackValue

    db = sqlite_utils.Database(str(tmp_path / "old.db"))
    migrations.apply(db, stop_before="m013_feedback_once")
    for id_, user, ts, value, at in (
        ("fb1", "U2", "1.1", "positive", 1.0),
        ("fb2", "U2", "1.1", "negative", 2.0),
        ("fb3", "U3", "1.1", "positive", 1.5),
        ("fb4", "U2", "1.5", "positive", 0.5),
    ):
        db.table("feedback").insert(
            {
                "id": id_,
                "click": id_,
                "run_id": "r",
                "user": user,
                "value": value,
                "channel": "C1",
                "message_ts": ts,
                "at": at,
            }
        )
    db.close()
    ledger = Ledger(tmp_path / "old.db")
    assert [f.id for f in ledger.feedback()] == ["fb4", "fb3", "fb2"]
    assert ledger.feedback_counts() == {FeedbackValue.POSITIVE: 2, FeedbackValue.NEGATIVE: 1}


ALERT_PAYLOAD = {
    "version": "4",
    "groupKey": '{}:{alertname="DiskFull"}',
    "status": "firing",
    "commonLabels": {"alertname": "DiskFull"},
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "DiskFull", "instance": "web-03:9100"},
            "annotations": {},
            "startsAt": "2026-12-01T10:00:00Z",
            "fingerprint": "a1",
        }
    ],
}


def test_m014_titles_the_alert_runs_stored_before_it_from_their_payloads(tmp_path) -> None:
    db = sqlite_utils.Database(str(tmp_path / "old.db"))
    migrations.apply(db, stop_before="m014_run_titles")
    for id_, task in (
        ("r1", 'Alertmanager group {}:{alertname="DiskFull"} is firing'),
        ("r2", "disk full on web-03"),
        ("r3", "Alertmanager group {}:{x} is firing"),
    ):
        db.table("runs").insert(
            {
                "id": id_,
                "channel": "C1",
                "thread_ts": "1.0",
                "requester": "",
                "task": task,
                "status": "finished",
                "model": "m",
                "created_at": 1.0,
                "updated_at": 1.0,
            }
        )
    db.table("alert_groups").insert(
        {
            "key": "am:g1",
            "source": "webhook",
            "channel": "C1",
            "state": "started",
            "run_id": "r1",
            "payload": json.dumps(ALERT_PAYLOAD),
        }
    )
    db.table("alert_groups").insert(
        {
            "key": "am:g3",
            "source": "webhook",
            "channel": "C1",
            "state": "started",
            "run_id": "r3",
            "payload": "{not json",
        }
    )  # unreadable: the task stays the name
    db.close()
    ledger = Ledger(tmp_path / "old.db")
    runs = {r.id: (r.title, r.headline) for r in ledger.list_runs()}
    assert runs == {
        "r1": ("DiskFull web-03 (firing)", "DiskFull web-03 (firing)"),
        "r2": (None, "disk full on web-03"),
        "r3": (None, "Alertmanager group {}:{x} is firing"),
    }
