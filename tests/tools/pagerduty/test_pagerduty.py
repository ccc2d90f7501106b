"""The PagerDuty reach against the stateful fake (tests/support/fakes/pagerduty.py), every request and answer
checked against PagerDuty's OpenAPI: its config, its outbox delivered exactly once (429, 5xx, an answer lost
after PagerDuty accepted the note, two senders), its store hooks on both backends, and `opsloop check`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.app.check import check
from bot.app.settings import load_settings
from bot.config.reader import Reader
from bot.core.errors import ConfigError
from bot.core.types import CallResult, StopReason
from bot.run.summary import Summary
from bot.store import Store
from tests.bot.app.test_check import env_for
from tests.support.fakes.anthropic import reply, text
from tests.support.fakes.pagerduty import FakePagerDuty
from tools.pagerduty import store as pd_store
from tools.pagerduty.client import PagerDuty
from tools.pagerduty.reach import REACH
from tools.pagerduty.sender import NoteSender
from tools.pagerduty.settings import PagerDutyConfig
from tools.reaches import TABLES

TOKEN = "pd-token-0123456789"


@pytest.fixture
async def pd() -> AsyncIterator[FakePagerDuty]:
    async with FakePagerDuty(token=TOKEN) as fake:
        fake.add_user("opsloop@example.com", "opsloop")
        fake.add_user("bob@example.com", "Bob")
        fake.add_service("PSVC001", "checkout", routing_key="R0UTINGKEY")
        fake.add_incident("PINC001", service="PSVC001")
        yield fake
        assert fake.problems == []  # every request opsloop made and every answer matched the OpenAPI


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    yield s
    await s.close()


def config(pd: FakePagerDuty, **over: object) -> PagerDutyConfig:
    base = PagerDutyConfig(
        token=TOKEN,  # type: ignore[arg-type]
        from_emails={"U0BOB": "bob@example.com"},
        notes_from="opsloop@example.com",
        routing_key="R0UTINGKEY",  # type: ignore[arg-type]
        base_url=pd.url,
        events_url=pd.events_url,
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def likely() -> Summary:
    return Summary.from_json(
        {
            "situation": "checkout 5xx since 14:02",
            "hypotheses": [
                {"id": "db", "statement": "the pool is exhausted", "status": "supported", "confidence": "high"}
            ],
            "next_steps": ["raise the pool"],
        }
    )


async def paged_run(store: Store, output: str = "The pool was exhausted; raised to 50.") -> str:
    run = await store.create_run(channel="C0INC", thread_ts="1700000000.000100", requester="U1", task="t", model="m")
    await pd_store.link_run(store, run.id, "PINC001", "PSVC001")
    await store.add_summary(run.id, step=1, summary=likely())
    await store.add_summary(run.id, step=2, summary=likely())  # the second likely summary is no second note
    await store.finish_run(
        run.id,
        stop_reason=StopReason.COMPLETED,
        stop_detail="",
        output=output,
        at_end=[lambda ledger: pd_store.final_noted(ledger, run.id, {}, None)],
    )
    return run.id


async def drain(sender: NoteSender, store: Store) -> None:
    """Send until nothing is due, moving the clock past each backoff (the store's `now` is the only clock)."""
    for _ in range(20):
        while await sender.send_one():
            pass
        pending = [i for i in await pd_store.pager_items(store) if i.state == "pending"]
        if not pending:
            return
        await store.atomically(lambda ledger: ledger._write("UPDATE pagerduty_outbox SET next_at = 0", []))
    raise AssertionError("items still pending")


def test_config_reads_every_key_and_names_each_problem() -> None:
    raw = {
        "pagerduty": {
            "token_env": "PD_TOKEN",
            "from": {"U0BOB": "bob@example.com", "U0EVE": "not-an-email"},
            "notes_from": "opsloop@example.com",
            "services": ["PSVC001", "bad id"],
            "base_url": "ftp://x",
            "colour": "red",
        }
    }
    reader = Reader(raw)
    parsed = REACH.parse(reader, {"PD_TOKEN": TOKEN})
    assert parsed is not None and parsed.token == TOKEN and TOKEN not in repr(parsed)
    with pytest.raises(ConfigError) as e:
        reader.raise_if_problems()
    text = str(e.value)
    for part in ("pagerduty.from.U0EVE", "not-an-email", "bad id", "pagerduty.base_url", "pagerduty.colour"):
        assert part in text
    assert REACH.parse(Reader({}), {}) is None


async def test_the_summary_and_the_answer_become_one_note_each_with_the_link_and_marker(
    pd: FakePagerDuty, store: Store
) -> None:
    run_id = await paged_run(store)
    sender = NoteSender(store, config(pd))
    await drain(sender, store)
    summary, final = pd.notes("PINC001")
    assert "likely cause" in summary and "the pool is exhausted" in summary
    assert summary.endswith(f"[opsloop {run_id} summary]")
    assert "The pool was exhausted; raised to 50." in final and final.endswith(f"[opsloop {run_id} final]")
    assert "https://slack.com/archives/C0INC/p1700000000000100" in final
    posts = [r for r in pd.requests if r.method == "POST"]
    assert [r.headers["From"] for r in posts] == ["opsloop@example.com"] * 2


async def test_429_and_5xx_are_retried_and_the_note_lands_once(pd: FakePagerDuty, store: Store) -> None:
    pd.fail("POST", "/incidents/PINC001/notes", 429, times=1, retry_after=0)
    pd.fail("POST", "/incidents/PINC001/notes", 503, times=1)
    await paged_run(store)
    await drain(NoteSender(store, config(pd)), store)
    assert len(pd.notes("PINC001")) == 2
    assert len([r for r in pd.requests if r.method == "POST"]) == 4  # two refused, two accepted


async def test_an_answer_lost_after_pagerduty_accepted_is_read_back_not_sent_again(
    pd: FakePagerDuty, store: Store
) -> None:
    pd.drop_after_accept("POST", "/incidents/PINC001/notes", containing="final]")
    run_id = await paged_run(store)
    await drain(NoteSender(store, config(pd)), store)
    assert [n.endswith(f"{run_id} final]") for n in pd.notes("PINC001")] == [False, True]  # one of each
    gets = [r for r in pd.requests if r.method == "GET" and r.path.endswith("/notes")]
    assert len(gets) == 1  # read back once, before the resend that did not happen
    items = {i.key: i for i in await pd_store.pager_items(store, run_id)}
    assert items[f"note:{run_id}:final"].state == "sent" and items[f"note:{run_id}:final"].ref


async def test_two_senders_at_once_write_each_note_once(pd: FakePagerDuty, db_url: str) -> None:
    a = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    b = await Store(db_url, tables=TABLES, retry_seconds=5).open()
    try:
        await paged_run(a)
        senders = [NoteSender(a, config(pd)), NoteSender(b, config(pd))]

        async def send_all(sender: NoteSender) -> None:
            while await sender.send_one():
                pass

        await asyncio.gather(*(send_all(s) for s in senders))  # each claims what the other does not hold
        await drain(senders[0], a)
        assert len(pd.notes("PINC001")) == 2
    finally:
        await a.close()
        await b.close()


async def test_a_handoff_report_is_the_note_when_the_run_stopped(pd: FakePagerDuty, store: Store) -> None:
    run = await store.create_run(channel="C0INC", thread_ts="1700000000.000200", requester="U1", task="t", model="m")
    await pd_store.link_run(store, run.id, "PINC001", "PSVC001")
    await store.finish_run(
        run.id,
        stop_reason=StopReason.DEADLINE,
        stop_detail="30 min",
        output=None,
        at_end=[lambda ledger: pd_store.final_noted(ledger, run.id, {}, None)],
    )
    await drain(NoteSender(store, config(pd)), store)
    (note,) = pd.notes("PINC001")
    assert "handed this incident back" in note and "ran out of time" in note and "30 min" in note


async def test_an_approved_change_is_a_change_event_on_the_service_and_a_run_without_an_incident_writes_nothing(
    pd: FakePagerDuty, store: Store
) -> None:
    run = await store.create_run(channel="C0INC", thread_ts="1700000000.000300", requester="U1", task="t", model="m")
    await pd_store.link_run(store, run.id, "PINC001", "PSVC001")
    done = CallResult(
        tool_use_id="toolu_r",
        tool="restart_service",
        args={"unit": "nginx"},
        content="restarted",
        is_error=False,
        confirmed_by="U0BOB",
    )
    own = dataclasses.replace(done, tool_use_id="toolu_a", tool="pagerduty_acknowledge")
    await store.save_tool_results(run.id, [done, own])
    other = await store.create_run(channel="C0INC", thread_ts="1700000000.000400", requester="U1", task="t", model="m")
    await store.save_tool_results(other.id, [dataclasses.replace(done, tool_use_id="toolu_x")])
    await store.add_summary(other.id, step=1, summary=likely())
    await drain(NoteSender(store, config(pd)), store)
    (event,) = pd.change_events
    assert event["services"] == [{"id": "PSVC001", "type": "service_reference"}]
    assert "restart_service(unit=nginx) done, approved by U0BOB" in event["summary"]
    assert event["custom_details"]["slack_thread"].startswith("https://slack.com/archives/C0INC/")
    assert pd.notes("PINC001") == []


async def test_a_change_event_whose_answer_was_lost_is_sent_again_and_both_copies_say_they_are_one_change(
    pd: FakePagerDuty, store: Store
) -> None:
    """At least once: Events v2 takes no dedupe key for change events (docs/pagerduty.md says so)."""
    pd.drop_after_accept("POST", "/v2/change/enqueue")
    run = await store.create_run(channel="C0INC", thread_ts="1700000000.000500", requester="U1", task="t", model="m")
    await pd_store.link_run(store, run.id, "PINC001", "PSVC001")
    done = CallResult(
        tool_use_id="toolu_r", tool="restart_service", args={}, content="ok", is_error=False, confirmed_by="U0BOB"
    )
    await store.save_tool_results(run.id, [done])
    await drain(NoteSender(store, config(pd)), store)
    first, again = pd.change_events
    assert first["summary"] == again["summary"]
    assert (
        first["custom_details"]["opsloop_key"] == again["custom_details"]["opsloop_key"] == f"change:{run.id}:toolu_r"
    )
    (item,) = await pd_store.pager_items(store, run.id)
    assert item.state == "sent" and item.attempts == 2


async def test_pagerduty_change_events_are_read_in_the_window(pd: FakePagerDuty) -> None:
    now = datetime.now(UTC)
    pd.add_change_event("deploy checkout 2.1", now - timedelta(minutes=5), ["PSVC001"])
    pd.add_change_event("old deploy", now - timedelta(days=3), ["PSVC001"])
    found, more = await PagerDuty(config(pd)).change_events(now - timedelta(hours=1), now)
    assert [c.summary for c in found] == ["deploy checkout 2.1"] and found[0].services == ("PSVC001",) and not more


async def test_check_says_the_token_each_service_and_the_change_events_on_one_line_each(pd: FakePagerDuty) -> None:
    lines, problems = await REACH.check(config(pd, services=("PSVC001", "PNOPE01")))
    assert lines[0] == f"pagerduty: token ok (opsloop <opsloop@example.com>) at {pd.url}"
    assert "pagerduty.services PSVC001: checkout: ok" in lines
    assert any(line.startswith("pagerduty.services PNOPE01: ") and "404" in line for line in lines)
    assert problems == [next(p for p in problems if "PNOPE01" in p)]
    assert "pagerduty: change events on, by routing key" in lines
    lines, problems = await REACH.check(config(pd, token="wrong"))
    assert "401" in lines[0] and problems
    lines, problems = await REACH.check(config(pd, token=None))
    assert problems == ["pagerduty: OPSLOOP_PAGERDUTY_TOKEN is not set: no notes, no acknowledge or resolve"]


async def test_check_reads_each_route_of_the_alert_source_as_a_service_or_an_escalation_policy(
    pd: FakePagerDuty, fake_slack, fake_anthropic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pd.add_escalation_policy("PPOL001", "web on-call")
    fake_slack.add_channel("C0INCIDENT", "incident")
    config = tmp_path / "opsloop.toml"
    config.write_text(f"""
[approvals]
approvers = ["U1"]
[alerts.pagerduty]
listen = "127.0.0.1:0"
routes = {{ PSVC001 = "C0INCIDENT", PPOL001 = "C0INCIDENT", PNOPE02 = "C0INCIDENT", "*" = "C0INCIDENT" }}
[pagerduty]
notes_from = "opsloop@example.com"
base_url = "{pd.url}"
""")
    env = env_for(fake_slack, fake_anthropic, OPSLOOP_PAGERDUTY_TOKEN=TOKEN, OPSLOOP_PAGERDUTY_WEBHOOK_SECRET="whsec")
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env)) == 1  # `run` starts; the route to nothing is a problem
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert "pagerduty: alerts.pagerduty.routes PSVC001: service checkout: ok" in out
    assert "pagerduty: alerts.pagerduty.routes PPOL001: escalation policy web on-call: ok" in out
    line = "pagerduty: alerts.pagerduty.routes PNOPE02: no service or escalation policy has this id"
    assert line in out and f"opsloop: error: {line}" in err
    assert not any("routes *" in x for x in out)
    assert [r.path for r in pd.requests if "PNOPE02" in r.path] == ["/services/PNOPE02", "/escalation_policies/PNOPE02"]
