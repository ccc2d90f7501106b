"""Change events in the store, on both backends: first copy wins, one call all or nothing, read by time and
service, redacted at the boundary, swept after retention, and still there after the store is reopened."""

from __future__ import annotations

import pytest

from bot.store import Ledger, Store, StoredChange


def event(id_: str, at: float, summary: str = "deploy", **extra: object) -> StoredChange:
    return StoredChange(id=id_, at=at, summary=summary, **extra)  # type: ignore[arg-type]


async def test_first_copy_wins_and_reads_are_by_time_and_service(db_url: str) -> None:
    store = await Store(db_url).open()
    try:
        assert (
            await store.record_changes(
                [event("a", 100, "first", service="api"), event("b", 200, service="db"), event("a", 150, "second copy")]
            )
            == 2
        )
        assert await store.record_changes([event("a", 300, "third copy")]) == 0
        assert [(e.id, e.summary) for e in await store.changes_between(0, 1000)] == [("b", "deploy"), ("a", "first")]
        assert [e.id for e in await store.changes_between(0, 1000, service="api")] == ["a"]
        assert await store.changes_between(101, 199) == []
    finally:
        await store.close()
    reopened = await Store(db_url).open()  # what a 200 promised is there for the next process
    try:
        assert (await reopened.change_event("a")).summary == "first"  # type: ignore[union-attr]
    finally:
        await reopened.close()


async def test_one_bad_event_stores_none_of_the_call(db_url: str) -> None:
    store = await Store(db_url).open()
    try:
        with pytest.raises(Exception, match=r"(?i)not[ -]null"):  # the backend's own integrity error
            await store.record_changes([event("ok", 100), event("bad", 100, None)])  # type: ignore[arg-type]
        assert await store.changes_between(0, 1000) == []
    finally:
        await store.close()


async def test_text_is_redacted_and_old_events_are_swept(db_url: str) -> None:
    store = await Store(db_url).open()
    try:
        secret = "ghp_" + "A" * 36
        await store.record_changes(
            [event("s", 100, f"deploy with token {secret}", labels={"k": secret}), event("t", 100)]
        )
        (one,) = [e for e in await store.changes_between(0, 1000) if e.id == "s"]
        assert secret not in one.summary and secret not in str(one.labels)
        now = store.now()
        assert await store.sweep_changes(30, now=now) == 0
        assert await store.sweep_changes(0, now=now + 99 * 86400) == 0  # 0 keeps them forever
        assert await store.sweep_changes(30, now=now + 31 * 86400, batch=1) == 1  # bounded
        assert await store.sweep_changes(30, now=now + 31 * 86400) == 1
        assert await store.changes_between(0, 1000) == []
    finally:
        await store.close()


def test_the_ledger_reads_what_the_store_wrote(db_url: str) -> None:
    ledger = Ledger(db_url)
    try:
        ledger.record_changes([event("x", 5)])
        assert ledger.change_event("x") is not None and ledger.change_event("y") is None
    finally:
        ledger.close()
