"""Change events in the store, on both backends: first copy wins, one call all or nothing, read by time and
service, redacted at the boundary, swept after retention, and still there after the store is reopened."""

from __future__ import annotations

import pytest

from bot.store import Ledger, Store
from tools.changes.store import StoredChange, change_event, changes_between, record_changes, sweep_changes
from tools.reaches import TABLES


def event(id_: str, at: float, summary: str = "deploy", **extra: object) -> StoredChange:
    return StoredChange(id=id_, at=at, summary=summary, **extra)  # type: ignore[arg-type]


async def test_first_copy_wins_and_reads_are_by_time_and_service(db_url: str) -> None:
    store = await Store(db_url, tables=TABLES).open()
    try:
        assert (
            await record_changes(
                store,
                [
                    event("a", 100, "first", service="api"),
                    event("b", 200, service="db"),
                    event("a", 150, "second copy"),
                ],
            )
            == 2
        )
        assert await record_changes(store, [event("a", 300, "third copy")]) == 0
        assert [(e.id, e.summary) for e in await changes_between(store, 0, 1000)] == [("b", "deploy"), ("a", "first")]
        assert [e.id for e in await changes_between(store, 0, 1000, service="api")] == ["a"]
        assert await changes_between(store, 101, 199) == []
    finally:
        await store.close()
    reopened = await Store(db_url, tables=TABLES).open()  # what a 200 promised is there for the next process
    try:
        assert (await change_event(reopened, "a")).summary == "first"  # type: ignore[union-attr]
    finally:
        await reopened.close()


async def test_one_bad_event_stores_none_of_the_call(db_url: str) -> None:
    store = await Store(db_url, tables=TABLES).open()
    try:
        with pytest.raises(Exception, match=r"(?i)not[ -]null"):  # the backend's own integrity error
            await record_changes(store, [event("ok", 100), event("bad", 100, None)])  # type: ignore[arg-type]
        assert await changes_between(store, 0, 1000) == []
    finally:
        await store.close()


async def test_text_is_redacted_and_old_events_are_swept(db_url: str) -> None:
    store = await Store(db_url, tables=TABLES).open()
    try:
        secret = "ghp_" + "A" * 36
        await record_changes(
            store, [event("s", 100, f"deploy with token {secret}", labels={"k": secret}), event("t", 100)]
        )
        (one,) = [e for e in await changes_between(store, 0, 1000) if e.id == "s"]
        assert secret not in one.summary and secret not in str(one.labels)
        now = store.now()
        assert await sweep_changes(store, 30, now=now) == 0
        assert await sweep_changes(store, 0, now=now + 99 * 86400) == 0  # 0 keeps them forever
        assert await sweep_changes(store, 30, now=now + 31 * 86400, batch=1) == 1  # bounded
        assert await sweep_changes(store, 30, now=now + 31 * 86400) == 1
        assert await changes_between(store, 0, 1000) == []
    finally:
        await store.close()


def test_the_ledger_reads_what_the_store_wrote(db_url: str) -> None:
    ledger = Ledger(db_url, TABLES)
    try:
        record_changes(ledger, [event("x", 5)])
        assert change_event(ledger, "x") is not None and change_event(ledger, "y") is None
    finally:
        ledger.close()
