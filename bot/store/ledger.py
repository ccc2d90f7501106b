"""`Ledger`: the synchronous store, one class over every table group (each in its own module of bot/store/)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from bot.core.redact import redact, redact_value
from bot.core.types import (
    AcceptedMention,
    AcceptedReply,
    CallResult,
    InboxItem,
    InboxState,
    Injected,
    OutboxKind,
    OutboxState,
    Run,
    RunNews,
    RunStatus,
    StepEntry,
    Totals,
)
from bot.run.history import continue_history
from bot.run.prompts import alert_user
from bot.store.alerts import STORM_WINDOW_S, AcceptedAlert, AlertGroup, AlertOutcome, Alerts
from bot.store.approvals import Approvals
from bot.store.backends import WAKE_RUNS
from bot.store.events import Events
from bot.store.feedback import FeedbackRows
from bot.store.inbox import Inbox
from bot.store.lane import lane
from bot.store.outbox import Outbox
from bot.store.rows import _decode_run, new_id
from bot.store.runs import Runs
from bot.store.summaries import SummaryRows
from bot.store.trace import Trace

T = TypeVar("T")


# The approval rule for a reply stored in a run's inbox (bot/run/approvals.py `supersede_by_reply`): given the
# ledger inside the transaction that stores the reply, it returns the ids of the approvals the reply supersedes.
ReplyRule = Callable[["Ledger", Run, InboxItem], tuple[str, ...]]


class Ledger(Runs, Trace, Events, Inbox, Approvals, Outbox, FeedbackRows, Alerts, SummaryRows):
    """Synchronous store on SQLite (a file path) or Postgres (a postgresql:// URL); use only from the thread
    that created it. Its SQL is written once for both (see bot.store.backends)."""

    def call(self, fn: Callable[[Ledger], T]) -> T:
        """`fn(self)` as one unit: on Postgres one SERIALIZABLE transaction, retried whole on a conflict."""
        return self.sql.call(lambda: fn(self))

    @lane.normal
    def note_kind(self, channel: str, kind: str | None) -> None:
        """What Slack says `channel` is now (public/private/im/mpim; None: unknown), at a run's drive start: each
        reach's tables take it (`Tables.on_kind`: incident memory narrows who its records are offered to)."""
        with self._atomic():
            self._hooks("on_kind", channel, kind)

    # --- what spans table groups, in one transaction: a run with its first messages, a turn with the inbox
    # items it consumed and the run's totals, and store-then-ack (a mention or a reply claimed and stored)
    @lane.normal
    def create_run(
        self,
        *,
        channel: str,
        thread_ts: str,
        requester: str,
        task: str,
        model: str,
        mention_ts: str = "",
        history: Iterable[dict[str, Any]] = (),
        team_id: str | None = None,
        title: str | None = None,
    ) -> Run:
        """Create a run with its first user message(s); `history` continues an earlier run; `title` is what people
        see it by (None: its task)."""
        now = self.sql.now()
        run_id = new_id("run")
        with self._atomic():
            row = self._insert_returning(
                "runs",
                {
                    "id": run_id,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "mention_ts": mention_ts,
                    "requester": requester,
                    "task": redact(task),
                    "status": RunStatus.RUNNING.value,
                    "model": model,
                    "created_at": now,
                    "updated_at": now,
                    **({"team_id": team_id} if team_id else {}),
                    **({"title": redact(title)} if title else {}),
                },
            )
            for seq, message in enumerate(history):
                self._put_message(run_id, seq, message)
        return _decode_run(row)

    @lane.normal
    def open_run(
        self,
        *,
        channel: str,
        thread_ts: str,
        requester: str,
        task: str,
        prompt: str,
        model: str,
        mention_ts: str,
        team_id: str | None = None,
    ) -> tuple[Run, bool]:
        """The thread's active run, or a new one continuing the thread's history: (run, created).

        Check-and-create happens on the writer thread, so two mentions racing in one
        thread still get one run.
        """
        previous = self.thread_run(channel, thread_ts)
        if previous is not None and previous.active:
            return previous, False
        history = continue_history(self.history(previous.id) if previous else [], prompt)
        with self._atomic():
            run = self.create_run(
                channel=channel,
                thread_ts=thread_ts,
                requester=requester,
                task=task,
                model=model,
                mention_ts=mention_ts,
                history=history,
                team_id=team_id,
            )
            if previous is not None and previous.system is not None and previous.tools is not None:
                # The carried-over turns' thinking is bound to the earlier run's system and tools: keep them
                # (a tool change since then reaches the model as a note, see bot.run.loop.tool_changes).
                self.fix_prompt(run.id, system=previous.system, tools=previous.tools)
                run = self.get_run(run.id)
        return run, True

    @lane.normal
    def put_message(
        self,
        run_id: str,
        seq: int,
        message: dict[str, Any],
        *,
        consumed_inbox: Iterable[str] = (),
        totals: Totals | None = None,
        steps: Iterable[StepEntry] = (),
    ) -> None:
        """Store message `seq` (insert or replace), mark inbox items consumed, save the run's totals and write
        the step's trace rows (`steps`), in one transaction."""
        with self._atomic():
            self._add_steps(run_id, steps)
            self._put_message(run_id, seq, message)
            for inbox_id in consumed_inbox:
                self.put_inbox_state(inbox_id, InboxState.CONSUMED)
            if totals is not None:
                self.save_totals(run_id, totals)

    @lane.normal
    def answer_turn(
        self,
        run_id: str,
        seq: int,
        message: dict[str, Any],
        *,
        calls: dict[str, Any] | None = None,
        results: Iterable[CallResult] = (),
        totals: Totals | None = None,
        steps: Iterable[StepEntry] = (),
    ) -> RunNews:
        """A tool step's end in one round trip: the model's turn of calls (message `seq - 1`, when given: a turn
        of read-only calls that ended quickly is stored here, see bot.run.loop `store_turn`), the results of its
        calls that claimed no started marker, the turn of results that answers them (message `seq`), the totals
        and the trace rows, in one transaction; then what the next step starts with (`run_news`). A result and
        the turn carrying it are never apart."""
        with self._atomic():
            if calls is not None:
                self._put_message(run_id, seq - 1, calls)
            self.save_tool_results(run_id, results)
            self.put_message(run_id, seq, message, totals=totals, steps=steps)
        return self.run_news(run_id)

    @lane.normal
    def run_news(self, run_id: str) -> RunNews:
        """The Stop flag and the queued thread replies, read together: a run asks at the start of every step."""
        return RunNews(
            stop_requested_by=self.stop_requested_by(run_id),
            inbox=[Injected(id=i.id, user=i.user, text=i.text) for i in self.queued_inbox(run_id)],
        )

    @lane.urgent
    def accept_mention(
        self,
        event_id: str,
        *,
        channel: str,
        thread_ts: str,
        requester: str,
        task: str,
        prompt: str,
        model: str,
        mention_ts: str,
        on_reply: ReplyRule,
        team_id: str | None = None,
        askers: Iterable[str] = (),
    ) -> AcceptedMention | None:
        """Claim a mention's event and store it in one transaction: a new run, or (the thread's run is going)
        a redirect queued like a reply, to which `on_reply` applies the approval rule in the same transaction.
        `askers`: the other people whose words the request carries (recorded on the run: askers of its calls).
        None: a duplicate delivery. Raises when the store fails: no ack."""
        with self._durably(), self._atomic():  # a redirect may decide approvals: FULL, like every decision
            if not self.claim_event(event_id):
                return None
            run, created = self.open_run(
                channel=channel,
                thread_ts=thread_ts,
                requester=requester,
                task=task,
                prompt=prompt,
                model=model,
                mention_ts=mention_ts,
                team_id=team_id,
            )
            if more := sorted(set(askers) - set(run.askers) - {""}):
                self._update_run(run.id, askers=json.dumps(sorted({*run.askers, *more})))
                run = self.get_run(run.id)
            redirect = (
                None if created else self._queue_reply(run, ts=mention_ts, user=requester, text=task, on_reply=on_reply)
            )
            return AcceptedMention(run=run, created=created, redirect=redirect)

    @lane.urgent
    def accept_reply(
        self,
        event_id: str,
        *,
        channel: str,
        thread_ts: str,
        ts: str,
        user: str,
        text: str,
        on_reply: ReplyRule,
    ) -> AcceptedReply | None:
        """Claim a thread reply's event and put it in the active run's inbox in one transaction, with what
        `on_reply` (the approval rule: bot/run/approvals.py) decides about the run's pending approvals.
        None: a duplicate, or no active run in the thread."""
        with self._durably(), self._atomic():
            if not self.claim_event(event_id):
                return None
            run = self.active_run(channel, thread_ts)
            return self._queue_reply(run, ts=ts, user=user, text=text, on_reply=on_reply) if run is not None else None

    def _queue_reply(self, run: Run, *, ts: str, user: str, text: str, on_reply: ReplyRule) -> AcceptedReply:
        """Inside a transaction: the reply joins the run's inbox; `on_reply` decides, through the plain
        operations, which approvals it supersedes (and marks it as superseding them rather than queued)."""
        inbox_id = self.add_inbox(run_id=run.id, channel=run.channel, ts=ts, user=user, text=text)
        superseded = on_reply(self, run, self.get_inbox(inbox_id))
        self._wake(WAKE_RUNS)
        return AcceptedReply(item=self.get_inbox(inbox_id), superseded=superseded)

    # --- alerts (docs/alerts.md): claimed, counted against the storm limit and stored in one transaction ---------
    @lane.urgent
    def accept_slack_alert(
        self,
        event_id: str,
        *,
        channel: str,
        ts: str,
        task: str,
        prompt: str,
        model: str,
        summary: str,
        limit: int,
    ) -> AcceptedAlert:
        """An alert message posted in Slack: deduplicated by event id and by message ts; a new run in its thread
        (no human requester), or DROPPED past `limit` alert runs in the channel's last ten minutes."""
        with self._durably(), self._atomic():
            if not self.claim_event(event_id) or not self.claim_event(f"alert:{channel}:{ts}"):
                return AcceptedAlert(AlertOutcome.DUPLICATE)
            key = f"slack:{channel}:{ts}"
            row: dict[str, Any] = dict(key=key, source="slack", channel=channel, summary=summary, thread_ts=ts)
            if self._over_storm_limit(channel, limit):
                self._put_group(**row, state="dropped")
                return AcceptedAlert(AlertOutcome.DROPPED, group=self.alert_group(key))
            run = self.create_run(
                channel=channel,
                thread_ts=ts,
                requester="",
                task=task,
                model=model,
                mention_ts=ts,
                history=continue_history([], prompt),
            )
            self._put_group(**row, state="started", run_id=run.id)
            self._wake(WAKE_RUNS)
            return AcceptedAlert(AlertOutcome.STARTED, group=self.alert_group(key), run=run)

    @lane.normal
    def accept_alert_group(
        self,
        key: str,
        *,
        source: str,
        sender: str,
        channel: str,
        status: str,
        fingerprints: list[str],
        summary: str,
        update: str,
        limit: int,
        reopen_after: float,
        root_text: Callable[[AlertGroup | None], str],
        payload: dict[str, Any] | None = None,
        owner: str | None = None,
        claim_seconds: float = 0.0,
        delivery: str | None = None,
    ) -> AcceptedAlert:
        """One notification of a thread-opening source (`key`: its alert's dedupe key, "am:<groupKey>"), stored
        before its 200; `delivery`: the notification's own id, claimed once (DUPLICATE when seen). A new firing
        group: STARTED or DROPPED (storm).
        STARTED stores what opens it (the payload, redacted) and enqueues its root post (`root_text(previous
        occurrence)`) in the outbox in the same transaction, claimed by `owner` for `claim_seconds`: the thread
        is opened after the ack (`open_alert_run` once the root is posted), and if this process dies first a
        recovery pass does it (`claim_alert_group`). A known group: REPEAT (same firing set), CHANGED or
        RESOLVED (`update` queued for the group's active run, like a reply, said by `sender`: "PagerDuty"); firing
        once its occurrence is over (`_occurrence_over`, `reopen_after` seconds): REOPENED, a new occurrence opened
        like a new group."""
        firing = sorted(set(fingerprints))
        with self._durably(), self._atomic():
            if delivery is not None and not self.claim_event(f"alert:{source}:{delivery}"):
                return AcceptedAlert(AlertOutcome.DUPLICATE)
            group = self.alert_group(key)
            previous = None
            if group is not None and status == "firing" and firing and self._occurrence_over(group, reopen_after):
                previous, group = self._archive_group(group), None
            if group is None:
                if status != "firing" or not firing:
                    return AcceptedAlert(AlertOutcome.IGNORED)
                occurrence, before = (previous.occurrence + 1, previous.key) if previous else (1, None)
                row: dict[str, Any] = dict(
                    key=key, source=source, channel=channel, fingerprints=firing, summary=summary
                )
                row |= dict(occurrence=occurrence, previous=before)
                if self._over_storm_limit(channel, limit):
                    self._put_group(**row, state="dropped")
                    return AcceptedAlert(AlertOutcome.DROPPED, group=self.alert_group(key), previous=previous)
                self._put_group(
                    **row,
                    state="opening",
                    payload=json.dumps(redact_value(payload or {})),
                    owner=owner,
                    claimed_until=self.sql.now() + claim_seconds if owner else None,
                )
                self._enqueue_alert_root(key, root_text(previous))
                outcome = AlertOutcome.REOPENED if previous else AlertOutcome.STARTED
                return AcceptedAlert(outcome, group=self.alert_group(key), previous=previous)
            if group.status == status and (status == "resolved" or tuple(firing) == group.fingerprints):
                first = status == "firing" and group.state == "started" and not group.repeat_noted
                self._update_group(key, seen_at=self.sql.now(), **({"repeat_noted": 1} if first else {}))
                return AcceptedAlert(AlertOutcome.REPEAT, group=group, note=first)
            if status == "firing" and group.status == "resolved" and group.state != "started":
                self._update_group(key, seen_at=self.sql.now())
                return AcceptedAlert(AlertOutcome.DUPLICATE, group=group)
            self._update_group(
                key,
                status=status,
                fingerprints=firing if status == "firing" else group.fingerprints,
                repeat_noted=0,
                seen_at=self.sql.now(),
            )
            group = self.alert_group(key)
            outcome = AlertOutcome.RESOLVED if status == "resolved" else AlertOutcome.CHANGED
            assert group is not None
            run = self.find_run(group.run_id) if group.run_id else None
            if run is not None and run.active:
                self.add_inbox(
                    run_id=run.id, channel=run.channel, ts=group.thread_ts or "", user=alert_user(sender), text=update
                )
                self._wake(WAKE_RUNS)
            return AcceptedAlert(outcome, group=group, run=run if run is not None and run.active else None)

    def _occurrence_over(self, group: AlertGroup, reopen_after: float) -> bool:
        """Is `group`'s occurrence over, so that a firing notification starts a new one? Its run ended (or it
        was dropped), and it was resolved, or Alertmanager said nothing of it for `reopen_after` seconds. A
        group still opening, or whose run is still going, goes on."""
        if group.state not in ("started", "dropped", "unopened"):
            return False
        run = self.find_run(group.run_id) if group.run_id else None
        if run is not None and run.active:
            return False
        return group.status == "resolved" or self.sql.now() - group.seen_at > reopen_after

    def _enqueue_alert_root(self, key: str, text: str) -> str:
        """Inside a transaction: the group's next root post, by a key of its own per occurrence and attempt
        (enqueued once)."""
        group = self.alert_group(key)
        assert group is not None
        attempt = group.attempts + 1
        item = self.enqueue(
            kind=OutboxKind.POST,
            key=f"alert_root:{key}#{group.occurrence}:{attempt}",
            channel=group.channel,
            text=text,
        )
        self._update_group(key, root_item=item, attempts=attempt)
        return item

    @lane.normal
    def retry_alert_root(self, key: str, owner: str, *, text: str) -> str | None:
        """Slack refused the group's root post for good: its claimant enqueues the next attempt (and only then,
        so two openers never make two roots). None: not `owner`'s to open."""
        with self._atomic():
            group = self.alert_group(key)
            if group is None or group.state != "opening" or group.owner != owner:
                return None
            item = self.outbox_item(group.root_item) if group.root_item else None
            if item is not None and item.state != OutboxState.FAILED:
                return item.id  # still on its way (or sent): no second root
            return self._enqueue_alert_root(key, text)

    @lane.normal
    def open_alert_run(
        self,
        key: str,
        *,
        thread_ts: str,
        task: str,
        prompt: str,
        model: str,
        title: str | None = None,
        pointer: str = "",
    ) -> Run | None:
        """The group's root is posted: its run (no human requester) starts in that thread, once (compare-and-set
        on `opening`), and `pointer` is posted once in the previous occurrence's thread, if it had one. None:
        already opened."""
        with self._durably(), self._atomic():
            group = self.alert_group(key)
            if group is None or group.state != "opening":
                return None
            before = self.alert_group(group.previous) if group.previous else None
            if pointer and before is not None and before.thread_ts:
                self.enqueue(
                    kind=OutboxKind.POST,
                    key=f"alert_pointer:{key}#{group.occurrence}",
                    channel=before.channel,
                    text=pointer,
                    thread_ts=before.thread_ts,
                )
            run = self.create_run(
                channel=group.channel,
                thread_ts=thread_ts,
                requester="",
                task=task,
                model=model,
                mention_ts=thread_ts,
                history=continue_history([], prompt),
                title=title,
            )
            self._update_group(key, state="started", thread_ts=thread_ts, run_id=run.id, owner=None, claimed_until=None)
            self._wake(WAKE_RUNS)
            return run

    @lane.normal
    def claim_storm_thread(self, channel: str, *, text: str) -> AlertGroup:
        """`channel`'s alert-storm thread, claimed by compare-and-set: the live one (younger than the storm
        window), or a new row keyed by channel and ten-minute window (insert-or-nothing, so two replicas in one
        storm share one) whose root post `text` is enqueued once. Its `root_item` is that post."""
        now = self.sql.now()
        with self._atomic():
            rows = self._select(
                "SELECT key FROM alert_groups WHERE source = ? AND channel = ? AND created_at >= ? "
                "ORDER BY created_at DESC LIMIT 1",
                ["storm", channel, now - STORM_WINDOW_S],
            )
            key = str(rows[0]["key"]) if rows else f"storm:{channel}:{int(now // STORM_WINDOW_S)}"
            self._put_group(key=key, source="storm", channel=channel, state="storm", conflict=" ON CONFLICT DO NOTHING")
            group = self.alert_group(key)
            assert group is not None
            if group.root_item is None and group.thread_ts is None:
                item = self.enqueue(
                    kind=OutboxKind.POST,
                    key=f"alert_{key}",
                    channel=channel,
                    text=text,
                )
                self._update_group(key, root_item=item)
                group = self.alert_group(key)
                assert group is not None
            return group
