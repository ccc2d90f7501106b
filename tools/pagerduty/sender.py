"""The PagerDuty outbox's sender (a service of the reach): delivers each stored note exactly once, and each change
event at least once.

Every POLL_S it claims the next item due (one sender per item across replicas: tools/pagerduty/store.py; the claim
of a process on this host that died holding it is taken at once, another host's lapses after CLAIM_S). A note
whose earlier attempt may have reached PagerDuty (its attempts counter is above zero: a call that died, a
process killed before it recorded the answer) is first looked for on the incident (GET notes, its marker line),
and adopted when found: PagerDuty's notes take no idempotency key, so this read-back is what keeps a note from
being written twice. A change event has neither (Events v2 `change/enqueue` takes no dedupe key, and `GET
/change_events` lists an event only once PagerDuty processed it, and needs the REST token change events don't):
one whose answer was lost is sent again. The attempt is counted before the call. A 429, a 5xx or no answer puts
the item back with capped backoff (Retry-After wins when longer), forever; another refusal (a 400, a 404, a bad
token) is logged and the item is marked failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import structlog

from bot.core.redact import redact
from bot.run.liveness import dead_owners, owner_id
from bot.store import Store
from tools.pagerduty.client import PagerDuty, PagerDutyError
from tools.pagerduty.settings import PagerDutyConfig
from tools.pagerduty.store import PagerItem, claim_item, claim_owners, item_attempt, item_done, item_retry, marker

log = structlog.get_logger("opsloop.pagerduty")

POLL_S = 1.0
CLAIM_S = 120.0  # longer than one item's calls with their in-call retries
MAX_BACKOFF_S = 300.0


class NoteSender:
    """One process's sender of the PagerDuty outbox (a tools.api.Service)."""

    def __init__(self, store: Store, config: PagerDutyConfig, *, poll_s: float = POLL_S) -> None:
        self.store, self.config, self.poll_s = store, config, poll_s
        self.client = PagerDuty(config, attempts=1)  # retries are the outbox's, item by item
        self.owner = owner_id()
        self.name = "pagerduty.notes"
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._forever(), name="opsloop-pagerduty-sender")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _forever(self) -> None:
        while True:
            try:
                while await self.send_one():
                    pass
            except Exception as e:  # the store is down: the next poll tries again
                log.warning("pagerduty.sender_failed", error=f"{type(e).__name__}: {redact(str(e))}")
            await asyncio.sleep(self.poll_s)  # nothing to wait on but the clock: notes are not urgent

    async def send_one(self) -> bool:
        """Claim and deliver one item due; False when none is."""
        now, dead = self.store.now(), dead_owners(await claim_owners(self.store), me=self.owner)
        item = await claim_item(self.store, self.owner, now=now, until=now + CLAIM_S, dead=dead)
        if item is None:
            return False
        try:
            ref = await self._deliver(item)
        except PagerDutyError as e:
            if e.transient:
                delay = min(MAX_BACKOFF_S, 2.0 ** min(item.attempts, 10))
                delay = min(max(delay, e.retry_after or 0.0), 600.0)
                await item_retry(self.store, item.key, self.owner, next_at=self.store.now() + delay, error=str(e))
                log.info("pagerduty.retry", key=item.key, error=str(e), in_s=delay)
            else:
                await item_done(self.store, item.key, self.owner, state="failed", error=str(e))
                log.error("pagerduty.refused", key=item.key, error=str(e))
            return True
        if ref is not None:
            await item_done(self.store, item.key, self.owner, state="sent", ref=ref)
        return True

    async def _deliver(self, item: PagerItem) -> str | None:
        """PagerDuty's id for the note (or "" for a change event); None when the claim was lost."""
        if item.kind == "note":
            what = item.key.rsplit(":", 1)[-1]
            if item.attempts > 0:  # an earlier attempt may have reached PagerDuty: look before writing again
                mark = marker(item.run_id, what)
                for note in await self.client.notes(item.incident_id):
                    if note.content.rstrip().endswith(mark):
                        log.info("pagerduty.note_found", key=item.key, note=note.id)
                        return note.id
            if not await item_attempt(self.store, item.key, self.owner):
                return None
            if not self.config.notes_from:
                raise PagerDutyError("[pagerduty] notes_from is not set: PagerDuty needs a From email for notes", 400)
            return (await self.client.add_note(item.incident_id, item.content, self.config.notes_from)).id
        if not await item_attempt(self.store, item.key, self.owner):
            return None
        link = str(item.details.get("slack_thread", ""))
        await self.client.send_change(
            item.content, source="opsloop", at=datetime.now(UTC), details=item.details, link=link
        )
        return ""
