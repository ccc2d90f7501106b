"""The async Store is the Ledger's public methods, each marked once with its lane in the writer's queue
(bot.store.lane), typed with the Ledger method's own signature; a reach's store functions are marked the same way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy import api

from bot.core.types import StepEntry
from bot.store import Ledger, Store
from bot.store.lane import Entry
from tools.changes import store as changes
from tools.memory import store as memory

ENTRIES = {name: v for c in Ledger.__mro__ for name, v in vars(c).items() if isinstance(v, Entry)}
REACH_ENTRIES = {name: v for m in (memory, changes) for name, v in vars(m).items() if isinstance(v, Entry)}


def test_every_public_ledger_method_is_a_store_call() -> None:
    public = {n for c in Ledger.__mro__ for n, v in vars(c).items() if callable(v) and not n.startswith("_")}
    assert public - set(ENTRIES) == {"call", "close"}  # the Ledger's own plumbing; the Store has its own close


def test_the_ack_path_is_urgent_and_what_nobody_waits_on_is_background() -> None:
    every = ENTRIES | REACH_ENTRIES
    assert {n for n, e in every.items() if e.urgent} == {
        "accept_mention",
        "accept_reply",
        "accept_slack_alert",
        "claim_event",
        "decide_approval",
        "find_approval",
        "find_run",
        "get_approval",
        "note_incident_feedback",
        "record_approvers",
        "record_feedback",
        "renew_leases",
        "request_stop",
        "set_card_ts",
        "stop_requested_among",
    }
    assert {n for n, e in every.items() if e.background} == {
        "record_changes",
        "save_configmap_snapshots",
        "sweep_changes",
        "sweep_incidents",
    }


async def test_a_store_call_runs_the_ledger_method_on_the_writer_thread_with_its_arguments_settled(
    tmp_path: Path,
) -> None:
    store = await Store(tmp_path / "s.db").open()
    try:
        run = await store.create_run(channel="C1", thread_ts="1.0", requester="U1", task="t", model="m")
        seen: list[str] = []

        def steps() -> Iterator[StepEntry]:  # a generator is read on the caller's thread, once
            seen.append(threading.current_thread().name)
            yield "note", {"n": 1}

        await store.add_steps(run.id, steps())
        assert seen == [threading.current_thread().name]
        assert [(s.kind, s.data) for s in await store.steps(run.id)] == [("note", {"n": 1})]
    finally:
        await store.close()


@pytest.mark.slow
def test_mypy_holds_a_store_call_to_the_ledger_methods_signature(tmp_path: Path) -> None:
    (tmp_path / "calls.py").write_text(
        "from bot.store import Store\n\n\n"
        "async def f(store: Store) -> None:\n"
        "    run = await store.get_run(3)\n"
        "    await store.claim_run(run.id, 'me', until=1.0)\n"
        "    store.find_run('r').id\n"
    )
    out, _, status = api.run(["--strict", str(tmp_path / "calls.py")])
    assert status == 1
    assert [line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line] == [
        'Argument 1 has incompatible type "int"; expected "str"  [arg-type]',
        'Missing named argument "now"  [call-arg]',
        '"Coroutine[Any, Any, Run | None]" has no attribute "id"  [attr-defined]',
    ]


async def test_a_reach_function_is_a_store_call_on_the_store_and_the_call_itself_on_a_ledger(tmp_path: Path) -> None:
    store = await Store(tmp_path / "s.db", tables=[changes.TABLES]).open()
    try:
        assert await changes.record_changes(store, [changes.StoredChange(id="e1", at=1.0, summary="deploy")]) == 1
        ledger = Ledger(store.path, [changes.TABLES])
        try:
            assert changes.change_event(ledger, "e1") == await changes.change_event(store, "e1") is not None
        finally:
            ledger.close()
    finally:
        await store.close()
