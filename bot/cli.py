"""The `opsloop` command: run, check, runs, show, audit, demo, sandbox, export, replay."""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config import ConfigError, Settings, load_settings, missing_for_run
from bot.log import configure_logging
from bot.store import Ledger
from bot.types import AuditEntry


def _shown(text: object) -> str:
    """Model- or Slack-derived text made safe for a terminal: escape sequences, bidi overrides and invisible
    characters written out as ⟨U+…⟩, so what is printed is what is there."""
    from handlers.mrkdwn import reveal

    return reveal(str(text), prose=True)


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if epoch else "-"


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(f"opsloop: {line}", file=sys.stderr)
    return 2


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    if problems := missing_for_run(settings):
        return _fail(problems)
    from slack_sdk.errors import SlackApiError

    from bot.app import serve  # imported late: `opsloop runs` needs no Slack or anthropic
    from bot.metrics import MetricsPortError
    from bot.migrations import SchemaTooNew
    from bot.store import StoreUnavailable

    configure_logging(settings.log_level)
    try:
        asyncio.run(serve(settings, port=args.port, metrics_port=args.metrics_port, metrics_host=args.metrics_host))
    except KeyboardInterrupt:
        pass
    except (MetricsPortError, StoreUnavailable, SchemaTooNew) as e:
        return _fail([str(e)])
    except SlackApiError as e:  # Slack answered, and said no (a revoked token): retrying would not fix it
        return _fail([f"slack: {e.response.get('error') or e}: check SLACK_BOT_TOKEN and SLACK_APP_TOKEN"])
    return 0


def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from bot.check import check

    return asyncio.run(check(settings))


def cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    ledger = Ledger(settings.db_path)
    rows = ledger.list_runs(limit=args.limit)
    print(f"{'run':<22} {'created':<20} {'status':<17} {'stop reason':<19} {'iter':>4} {'cost':>8}  task")
    for r in rows:
        print(f"{r.id:<22} {_when(r.created_at):<20} {r.status:<17} {r.stop_reason or '-':<19} "
              f"{r.iterations:>4} {r.cost_usd:>8.4f}  {_shown((r.task or '')[:60])}")
    return 0


def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    ledger = Ledger(settings.db_path)
    run = ledger.find_run(args.run_id)
    if run is None:
        return _fail([f"no run {args.run_id!r} in {settings.db_path}"])
    if args.html:
        return write_timeline(settings, ledger, args.run_id, args.html)
    u = run.usage
    print(_shown(f"run {run.id} · {run.status} · {run.stop_reason or '-'} {run.stop_detail or ''}".rstrip()))
    print(f"task: {_shown(run.task)}")
    print(f"requester {run.requester} · channel {run.channel} · thread {run.thread_ts} · model {run.model}")
    print(f"iterations {run.iterations} · tokens in {u.input_tokens} out {u.output_tokens} "
          f"cache read {u.cache_read_tokens} write {u.cache_write_tokens} · ${run.cost_usd:.4f}")
    for step in ledger.steps(args.run_id):
        data = json.dumps(step.data, ensure_ascii=False)
        print(f"{_when(step.at)}  {step.kind:<9} {_shown(data[:400])}")
    if run.output:
        print(f"\n{_shown(run.output)}")
    return 0


def write_timeline(settings: Settings, ledger: Ledger, run_id: str, path: str) -> int:
    """The run as one self-contained HTML page (redacted), for a postmortem; `-` writes to stdout."""
    import time

    from bot.pricing import price_for
    from bot.timeline import timeline_html

    page = timeline_html(ledger, run_id, price_for=lambda m: price_for(m, settings.model.prices)[0], now=time.time())
    if page is None:
        return _fail([f"no run {run_id!r} in {settings.db_path}"])
    if path == "-":
        sys.stdout.write(page)
        return 0
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        return _fail([f"cannot write {path}: {e.strerror or e}"])
    print(f"wrote the timeline of {run_id} to {path}")
    return 0


AUDIT_FIELDS = ["id", "run_id", "created_at", "decided_at", "tool", "category", "state", "decided_by", "decided_name",
                "approvals", "requester", "args", "preview", "reason", "result", "result_is_error", "run_tokens",
                "run_cost_usd"]


def _audit_row(entry: AuditEntry) -> dict[str, Any]:
    """One approval as the audit prints it (the stored values, JSON lists as lists, is_error as 0/1)."""
    fields = {f.name: getattr(entry.approval, f.name) for f in dataclasses.fields(entry.approval)}
    fields.update(approvals=list(entry.approval.approvals), result=entry.result,
                  result_is_error=None if entry.result_is_error is None else int(entry.result_is_error))
    return {k: fields.get(k) for k in AUDIT_FIELDS}


FEEDBACK_FIELDS = ["id", "run_id", "at", "user", "value", "channel", "message_ts"]


FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting so (OWASP: CSV injection)


def _csv_cell(value: Any) -> Any:
    """A CSV cell safe to open: control characters revealed as in every other output, and a text that a
    spreadsheet would read as a formula kept as text by a leading `'`. Numbers and empty cells stay as they are."""
    if not isinstance(value, str):
        return value
    shown = _shown(value)
    return f"'{shown}" if shown.startswith(FORMULA_LEAD) or value.startswith(FORMULA_LEAD) else shown


def cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    """Approval decisions; with --feedback, the feedback clicks instead (another record, so another shape: a
    CSV has one header, and the approval export's columns stay what existing consumers read)."""
    ledger = Ledger(settings.db_path)
    fields = FEEDBACK_FIELDS if args.feedback else AUDIT_FIELDS
    if args.feedback:
        rows: list[dict[str, Any]] = [
            {"id": f.id, "run_id": f.run_id, "at": _when(f.at), "user": f.user, "value": f.value.value,
             "channel": f.channel, "message_ts": f.message_ts} for f in ledger.feedback()]
    else:
        rows = [_audit_row(entry) for entry in ledger.audit()]
        for r in rows:
            r["created_at"], r["decided_at"] = _when(r["created_at"]), _when(r["decided_at"])
    if args.format == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=fields)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv_cell(json.dumps(v) if isinstance(v, dict | list) else v) for k, v in r.items()})
    else:
        for r in rows:
            print(json.dumps(r, ensure_ascii=False, default=str))
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.demo.play import play  # imported late: it starts Slack and the app

    configure_logging("error")  # the transcript is the output; warnings would interleave with it
    tty = sys.stdout.isatty()
    pace = args.pace if args.pace is not None else (0.6 if tty else 0.0)
    try:
        return asyncio.run(play(settings, interactive=args.interactive, color=tty and not args.no_color, pace=pace,
                                db_path=Path(args.db) if args.db else None))
    except KeyboardInterrupt:
        return 130


def cmd_sandbox(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.sandbox.server import serve_sandbox

    configure_logging("error")
    try:
        asyncio.run(serve_sandbox(settings, port=args.port, own_tools=bool(args.config or settings.config_path),
                                  db_path=Path(args.db) if args.db else None))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        return _fail([f"sandbox: {e}"])
    return 0


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    from bot.replay.cli import cmd_export as export

    return export(settings, args)


def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.demo.model import IncidentModel  # without an API key: the demo's scripted model
    from bot.replay.cli import cmd_replay as replay

    return replay(settings, args, scripted=lambda name: IncidentModel(name=name))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opsloop", description="Slack incident bot with approval-gated tools.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, fn, help_ in [
        ("run", cmd_run, "start the bot (Socket Mode with SLACK_APP_TOKEN, else HTTP mode)"),
        ("check", cmd_check, "validate config and tokens; list tools with their category"),
        ("runs", cmd_runs, "list runs"),
        ("show", cmd_show, "print one run's step trace"),
        ("audit", cmd_audit, "every approval decision ever made"),
        ("demo", cmd_demo, "a whole incident end to end with no credentials"),
        ("sandbox", cmd_sandbox, "the Slack stand-in and the app in your browser, with your config and tools"),
        ("export", cmd_export, "write one run as a self-contained, redacted incident record (JSON)"),
        ("replay", cmd_replay, "rerun a stored incident on another model or prompt, against the recorded world"),
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--config", help="TOML config file (default: $OPSLOOP_CONFIG)")
        s.set_defaults(fn=fn)
        if name == "run":
            s.add_argument("--port", type=int, default=3000, help="HTTP mode port (default 3000)")
            s.add_argument("--metrics-port", type=int, help="serve /metrics and /healthz on this port (default: off)")
            s.add_argument("--metrics-host", default="0.0.0.0",
                           help="address for --metrics-port (default 0.0.0.0: probes and scrapes reach a pod's IP)")
        if name == "runs":
            s.add_argument("--limit", type=int, default=50)
        if name == "show":
            s.add_argument("run_id")
            s.add_argument("--html", metavar="FILE", help="write the run as one HTML page (- for stdout)")
        if name == "demo":
            s.add_argument("--interactive", action="store_true", help="you approve, deny and reply at a prompt")
            s.add_argument("--pace", type=float, help="seconds between the people's moves (default 0.6 on a tty)")
            s.add_argument("--no-color", action="store_true", help="no ANSI colours")
        if name in ("demo", "sandbox"):
            s.add_argument("--db", help="keep the SQLite database here (default: a temp dir, removed at exit)")
        if name == "sandbox":
            s.add_argument("--port", type=int, default=8765, help="the page's port on 127.0.0.1 (default 8765)")
        if name == "audit":
            s.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
            s.add_argument("--feedback", action="store_true",
                           help="export the feedback clicks on answers and reports instead of approvals")
        if name in ("export", "replay"):
            from bot.replay.cli import add_arguments

            add_arguments(name, s)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as e:
        return _fail(e.problems)
    result: int = args.fn(settings, args)
    return result


if __name__ == "__main__":
    sys.exit(main())
