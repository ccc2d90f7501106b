"""The `opsloop` command: run, check, ask, runs, show, audit, demo, sandbox, export, replay, eval."""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from bot.app.settings import load_settings
from bot.app.startup import NO_CONFIG, Listen, find_config, loaded_config, no_database
from bot.config.settings import ConfigError, Settings
from bot.core.log import configure_logging
from bot.core.types import AuditEntry, Run
from bot.run.report import CONCLUSION, STOP_WORDS, is_conclusion
from bot.run.summary import render_text
from bot.store import Ledger
from bot.store.backends import describe, is_postgres, unparsable

if TYPE_CHECKING:
    from bot.app.timeline import RunRecord


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


def _listen(args: argparse.Namespace) -> Listen:
    return Listen(port=args.port, metrics_port=args.metrics_port, metrics_host=args.metrics_host)


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app.startup import preflight

    configure_logging(settings.log_level)
    log = structlog.get_logger("opsloop")
    path, how = getattr(args, "found_config", (settings.config_path, "--config"))
    if path:  # which config runs, in the log stream (a default config opens approvals to everyone)
        log.info("config.loaded", path=path, found_by=how)
    else:
        log.warning("config.missing", problem=NO_CONFIG)
    found = asyncio.run(preflight(settings, _listen(args)))
    for line in found.warnings:
        log.warning("startup.warning", problem=line)
    if found.problems:
        return _fail(found.problems)
    settings = found.settings or settings  # its `#name` channels resolved (else start-up resolves them)
    from slack_sdk.errors import SlackApiError

    from bot.app.metrics import MetricsPortError
    from bot.app.wiring import ListenError, serve  # imported late: `opsloop runs` needs no Slack or anthropic
    from bot.store import StoreUnavailable
    from bot.store.migrations import SchemaTooNew
    from tools.api import ToolConfigError

    try:
        asyncio.run(serve(settings, port=args.port, metrics_port=args.metrics_port, metrics_host=args.metrics_host))
    except KeyboardInterrupt:
        pass
    except SlackApiError as e:  # Slack answered, and said no (a revoked token): retrying would not fix it
        return _fail([f"slack: {e.response.get('error') or e}: check SLACK_BOT_TOKEN and SLACK_APP_TOKEN"])
    except Exception as e:  # ListenError: a listener's port, taken between the test bind and the real one
        return _said(settings, e, MetricsPortError, StoreUnavailable, SchemaTooNew, ToolConfigError, ListenError)
    return 0


def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app.check import check

    configure_logging("error")  # check's report is its output: a library's warning would say a problem twice
    return asyncio.run(check(settings, listen=_listen(args)))


def _store_problem(settings: Settings, e: BaseException) -> str | None:
    """The one line for a database that can't be opened (SQLite or Postgres), or None for any other error."""
    import sqlite3

    from bot.core.unreachable import reason

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    if is_postgres(settings.db_path):
        import psycopg

        errors = (sqlite3.Error, psycopg.Error)
    if not isinstance(e, errors):
        return None
    if is_postgres(settings.db_path) and unparsable(settings.db_path):  # the driver's reason quotes the password
        return f"store: can't open {describe(settings.db_path)}: write / ? # @ in its password as %2F %3F %23 %40"
    return f"store: can't open {describe(settings.db_path)}: {type(e).__name__}: {reason(e)}"


def _said(settings: Settings, e: Exception, *one_line: type[Exception]) -> int:
    """Exit 2 after the lines of an error a command says without a traceback: a config's problems, an error of
    `one_line` (its message), a store that can't be opened or migrated; any other error is raised as it is."""
    if isinstance(e, ConfigError):
        return _fail(e.problems)
    if (problem := str(e) if isinstance(e, one_line) else _store_problem(settings, e)) is None:
        raise e
    return _fail([problem])


def _reads_store(fn: Callable[[Settings, argparse.Namespace], int]) -> Callable[[Settings, argparse.Namespace], int]:
    """A read-only store command: never creates a database, and a database that can't be opened is one line. A
    command given a run id gets the one stored run id it starts (`resolve_run`)."""

    @functools.wraps(fn)
    def command(settings: Settings, args: argparse.Namespace) -> int:
        by_file = getattr(args, "suite", None) or (fn.__name__ == "cmd_replay" and Path(args.run_id or "").is_file())
        if not by_file and not is_postgres(settings.db_path) and not Path(settings.db_path).is_file():
            return _fail([no_database(settings.db_path)])
        try:
            if not by_file and getattr(args, "run_id", None) and (status := resolve_run(settings, args)) is not None:
                return status
            return fn(settings, args)
        except Exception as e:
            return _said(settings, e)

    return command


@_reads_store
def cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    ledger = Ledger(settings.db_path)
    rows, now = ledger.list_runs(limit=args.limit), ledger.sql.now()
    print(f"{'run':<22} {'created':<20} {'status':<17} {'stop reason':<19} {'iter':>4} {'cost':>8}  task")
    for r in rows:
        status = INTERRUPTED if r.interrupted(now) else r.status
        print(
            f"{r.id:<22} {_when(r.created_at):<20} {status:<17} {r.stop_reason or '-':<19} "
            f"{r.iterations:>4} {r.cost_usd:>8.4f}  {_shown((r.headline or '')[:60])}"
        )
    return 0


INTERRUPTED = "interrupted"  # `runs`' status of a terminal run whose `opsloop ask` died before the run ended
INTERRUPTED_WORDS = (
    "interrupted: its `opsloop ask` was killed before the run ended, and nothing drives it any more "
    "(a Slack process never takes a terminal run over); what it did is below"
)
AMBIGUOUS_SHOWN = 10  # candidates listed for an ambiguous run id prefix


def resolve_run(settings: Settings, args: argparse.Namespace) -> int | None:
    """Replace `args.run_id` by the one stored run id it starts (git's short ids): None when it names exactly one
    run, else the exit status after one line for no match, or the candidates for an ambiguous prefix."""
    ledger = Ledger(settings.db_path)
    try:
        found = ledger.runs_starting(args.run_id, limit=AMBIGUOUS_SHOWN + 1)
    finally:
        ledger.close()
    exact = [r for r in found if r.id == args.run_id]
    if len(exact) == 1 or len(found) == 1:
        args.run_id = (exact or found)[0].id
        return None
    if not found:
        return _fail([f"no run {args.run_id!r} in {describe(settings.db_path)}"])
    more = ["  … and more: give more of the id"] if len(found) > AMBIGUOUS_SHOWN else []
    return _fail(
        [f"run id {args.run_id!r} is ambiguous; it starts these runs (newest first):"]
        + [f"  {r.id}  {_when(r.created_at)}  {_shown((r.headline or r.task)[:60])}" for r in found[:AMBIGUOUS_SHOWN]]
        + more
    )


@_reads_store
def cmd_forget(settings: Settings, args: argparse.Namespace) -> int:
    """Take one run out of incident memory (its record, facets and full-text entry); the run itself stays."""
    from tools.memory.store import forget
    from tools.reaches import TABLES

    if not forget(Ledger(settings.db_path, TABLES), args.run_id):
        return _fail([f"run {args.run_id!r} is not in incident memory ({describe(settings.db_path)})"])
    print(f"forgot {args.run_id}: it is no longer searched or offered")
    return 0


@_reads_store
def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app.timeline import TextTimeline, read_run

    ledger = Ledger(settings.db_path)
    if args.json and not args.html:
        return show_json(ledger, args.run_id)
    if (record := read_run(ledger, args.run_id)) is None:
        return _fail([f"no run {args.run_id!r} in {describe(settings.db_path)}"])
    if args.html:
        return write_timeline(settings, record, args.html)
    run, line = record.run, TextTimeline(record)
    u = run.usage
    stop = f"{run.stop_reason.value} ({STOP_WORDS.get(run.stop_reason.value, '')})" if run.stop_reason else "-"
    print(_shown(f"run {run.id} · {run.status} · {stop}"))
    if run.interrupted(ledger.sql.now()):
        print(f"  {INTERRUPTED_WORDS}")
    if run.stop_detail:
        print(_shown(f"  {run.stop_detail}"))
    print(f"task: {_shown(run.task)}")
    print(_shown(f"asked by {line.who(run.requester)} in {run.channel} at {_when(run.created_at)} · model {run.model}"))
    print(
        f"{run.iterations} steps · {u.paid_tokens:,} tokens (in {u.input_tokens:,} · out {u.output_tokens:,} · "
        f"cache read {u.cache_read_tokens:,} · write {u.cache_write_tokens:,}) · ${run.cost_usd:.4f}\n"
    )
    for text in line.lines():
        print(_shown(text))
    return _ending(ledger, run, line.named)


def show_json(ledger: Ledger, run_id: str) -> int:
    """`show --json`: the run's header, then each trace step as its stored JSON (cut at 400 characters)."""
    run = ledger.get_run(run_id)
    u = run.usage
    print(_shown(f"run {run.id} · {run.status} · {run.stop_reason or '-'} {run.stop_detail or ''}".rstrip()))
    print(f"task: {_shown(run.task)}")
    print(f"requester {run.requester} · channel {run.channel} · thread {run.thread_ts} · model {run.model}")
    print(
        f"iterations {run.iterations} · tokens in {u.input_tokens} out {u.output_tokens} "
        f"cache read {u.cache_read_tokens} write {u.cache_write_tokens} · ${run.cost_usd:.4f}"
    )
    for step in ledger.steps(run_id):
        data = json.dumps(step.data, ensure_ascii=False)
        print(f"{_when(step.at)}  {step.kind:<9} {_shown(data[:400])}")
    return _ending(ledger, run, str)


def _ending(ledger: Ledger, run: Run, named: Callable[[str], str]) -> int:
    """What `show` ends with: the run's last living summary and its answer (`named`: people by name, or as ids)."""
    if (last := ledger.last_summary(run.id)) is not None:
        print(f"\nSummary\n{_shown(named(render_text(last)))}")
    if run.output:
        print(f"\n{CONCLUSION}" if is_conclusion(run.stop_reason) else "")
        print(_shown(named(run.output)))
    return 0


def write_timeline(settings: Settings, record: RunRecord, path: str) -> int:
    """The run as one self-contained HTML page (redacted), for a postmortem; `-` writes to stdout."""
    import time

    from bot.app.timeline import render
    from bot.core.pricing import price_for

    page = render(record, price_for=lambda m: price_for(m, settings.model.prices)[0], generated_at=time.time())
    if path == "-":
        sys.stdout.write(page)
        return 0
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        return _fail([f"cannot write {path}: {e.strerror or e}"])
    print(f"wrote the timeline of {record.run.id} to {path}")
    return 0


AUDIT_FIELDS = [
    *("id", "run_id", "created_at", "decided_at", "tool", "category", "state", "decided_by", "decided_name"),
    *("approvals", "requester", "args", "preview", "reason", "result", "result_is_error", "run_tokens"),
    "run_cost_usd",
]


def _audit_row(entry: AuditEntry) -> dict[str, Any]:
    """One approval as the audit prints it (the stored values, JSON lists as lists, is_error as 0/1)."""
    fields = {f.name: getattr(entry.approval, f.name) for f in dataclasses.fields(entry.approval)}
    fields.update(
        approvals=list(entry.approval.approvals),
        result=entry.result,
        result_is_error=None if entry.result_is_error is None else int(entry.result_is_error),
    )
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


@_reads_store
def cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    """Approval decisions; with --feedback, the feedback clicks instead (another record, so another shape: a
    CSV has one header, and the approval export's columns stay what existing consumers read)."""
    ledger = Ledger(settings.db_path)
    fields = FEEDBACK_FIELDS if args.feedback else AUDIT_FIELDS
    if args.feedback:
        rows: list[dict[str, Any]] = [
            {k: getattr(f, k) for k in FEEDBACK_FIELDS} | {"at": _when(f.at), "value": f.value.value}
            for f in ledger.feedback()
        ]
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


def cmd_ask(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app.ask import ask
    from bot.config.settings import is_user_id
    from tools.api import ToolConfigError

    configure_logging("error")  # the terminal shows the run; warnings would interleave with it
    user = args.as_user or settings.approvals.terminal_user
    if args.as_user is not None and not is_user_id(args.as_user):
        return _fail([f"--as: {args.as_user!r} is not a Slack user id (U…/W…)"])
    try:
        return asyncio.run(
            ask(settings, args.question, user=user, json_lines=args.json, stdin=sys.stdin, stdout=sys.stdout)
        )
    except Exception as e:
        return _said(settings, e, ToolConfigError)


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.demo.play import play  # imported late: it starts Slack and the app

    configure_logging("error")  # the transcript is the output; warnings would interleave with it
    tty = sys.stdout.isatty()
    pace = args.pace if args.pace is not None else (0.6 if tty else 0.0)
    try:
        return asyncio.run(
            play(
                settings,
                interactive=args.interactive,
                color=tty and not args.no_color,
                pace=pace,
                db_path=Path(args.db) if args.db else None,
            )
        )
    except KeyboardInterrupt:
        return 130


def cmd_sandbox(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.sandbox.server import serve_sandbox

    configure_logging("error")
    try:
        asyncio.run(
            serve_sandbox(
                settings,
                port=args.port,
                own_tools=bool(args.config or settings.config_path),
                db_path=Path(args.db) if args.db else None,
            )
        )
    except KeyboardInterrupt:
        pass
    except OSError as e:
        return _fail([f"sandbox: {e}"])
    except Exception as e:
        from tools.api import ToolConfigError

        return _said(settings, e, ToolConfigError)
    return 0


@_reads_store
def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    from bot.replay.cli import cmd_export as export

    return export(settings, args)


@_reads_store
def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from bot.playground.demo.model import IncidentModel  # without an API key: the demo's scripted model
    from bot.replay.cli import cmd_replay as replay

    return replay(settings, args, scripted=lambda name: IncidentModel(name=name))


def cmd_eval(settings: Settings, args: argparse.Namespace) -> int:
    from bot.eval.cli import cmd_eval as evaluate

    if args.db:
        settings = dataclasses.replace(settings, db_path=args.db)
    return evaluate(settings, args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opsloop", description="Slack incident bot with approval-gated tools.")
    p.add_argument("--version", action="version", version=f"opsloop {_version()}", help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")
    for name, fn, help_ in [
        ("run", cmd_run, "start the bot (Socket Mode with SLACK_APP_TOKEN, else HTTP mode)"),
        ("check", cmd_check, "validate config and tokens; list tools with their category"),
        ("ask", cmd_ask, "one investigation in this terminal, with approvals at its prompt (no Slack needed)"),
        ("runs", cmd_runs, "list runs"),
        ("show", cmd_show, "one run as a readable timeline (--json: its raw step trace; --html: a page)"),
        ("forget", cmd_forget, "take one run out of incident memory"),
        ("audit", cmd_audit, "every approval decision ever made"),
        ("demo", cmd_demo, "a whole incident end to end with no credentials"),
        ("sandbox", cmd_sandbox, "the Slack stand-in and the app in your browser, with your config and tools"),
        ("export", cmd_export, "write one run as a self-contained, redacted incident record (JSON)"),
        ("replay", cmd_replay, "rerun a stored incident on another model or prompt, against the recorded world"),
        ("eval", cmd_eval, "run the incident cases in evals/ on a model and score what it found"),
    ]:
        s = sub.add_parser(name, help=help_, description=help_)
        s.add_argument("--config", help="TOML config file (default: $OPSLOOP_CONFIG, else ./opsloop.toml)")
        s.set_defaults(fn=fn)
        if name in ("run", "check"):  # check test-binds what run will listen on
            s.add_argument("--port", type=int, default=3000, help="HTTP mode port (default 3000)")
            s.add_argument("--metrics-port", type=int, help="serve /metrics and /healthz on this port (default: off)")
            s.add_argument(
                "--metrics-host",
                default="0.0.0.0",
                help="address for --metrics-port (default 0.0.0.0: probes and scrapes reach a pod's IP)",
            )
        if name in STORE_COMMANDS:
            s.add_argument("--db", help="the SQLite file or postgresql:// URL (default: $OPSLOOP_DB, else opsloop.db)")
        if name == "ask":
            s.add_argument("question", help='what to investigate ("why is web-03 out of disk?")')
            s.add_argument("--as", dest="as_user", metavar="U…", help="answer approvals as this Slack user")
            s.add_argument("--json", action="store_true", help="the run's events as JSON lines, for scripts")
        if name == "runs":
            s.add_argument("--limit", type=int, default=50, help="how many runs, newest first (default 50)")
        if name in ("show", "forget"):
            s.add_argument("run_id", help=RUN_ID_HELP)
        if name == "show":
            s.add_argument("--html", metavar="FILE", help="write the run as one HTML page (- for stdout)")
            s.add_argument("--json", action="store_true", help="each trace step as its stored JSON, not the timeline")
        if name == "demo":
            s.add_argument("--interactive", action="store_true", help="you approve, deny and reply at a prompt")
            s.add_argument("--pace", type=float, help="seconds between the people's moves (default 0.6 on a tty)")
            s.add_argument("--no-color", action="store_true", help="no ANSI colours")
        if name in ("demo", "sandbox"):
            s.add_argument("--db", help="keep the SQLite database here (default: a temp dir, removed at exit)")
        if name == "sandbox":
            s.add_argument("--port", type=int, default=8765, help="the page's port on 127.0.0.1 (default 8765)")
        if name == "audit":
            s.add_argument(
                "--format",
                choices=["jsonl", "csv"],
                default="jsonl",
                help="one JSON object a line, or CSV (default jsonl)",
            )
            s.add_argument(
                "--feedback",
                action="store_true",
                help="export the feedback clicks on answers and reports instead of approvals",
            )
        if name in ("export", "replay"):
            from bot.replay.cli import add_arguments

            add_arguments(name, s)
        if name == "eval":
            from bot.eval.cli import add_arguments as eval_arguments

            eval_arguments(s)
    return p


RUN_ID_HELP = "a run's id, or the start of one that no other run's id starts with (run_45a3)"
STORE_COMMANDS = ("run", "check", "ask", "runs", "show", "forget", "audit", "export", "replay")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opsloop")
    except PackageNotFoundError:
        return "unknown (not installed)"


SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what the shell reports for any tool whose reader went away


def main(argv: Sequence[str] | None = None) -> int:
    """The command; output cut short by its reader going away (`opsloop show … | head`) ends it quietly with
    141, as a tool killed by SIGPIPE ends: a pipeline with `set -o pipefail` still learns the output was not
    all read, and nothing is printed about it."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # inside the try: the interpreter's own flush at exit would raise past it
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush then writes nowhere
        return SIGPIPE_STATUS
    return status


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    path, how = find_config(args.config, os.environ, Path.cwd())
    try:
        settings = load_settings(path)
    except ConfigError as e:
        if args.command == "check":  # check's own voice: `error:` lines and its verdict
            from bot.app.check import report

            return report(stops=e.problems)
        return _fail(e.problems)
    if args.command in STORE_COMMANDS and args.db:
        settings = dataclasses.replace(settings, db_path=args.db)
    args.found_config = (path, how)  # `run` logs it (its stderr is one JSON stream); `check` prints it
    if args.command == "check":  # say which config runs: a default config opens approvals to everyone
        print(f"opsloop: {loaded_config(path, how)}" if path else f"opsloop: warning: {NO_CONFIG}", file=sys.stderr)
    result: int = args.fn(settings, args)
    return result


if __name__ == "__main__":
    sys.exit(main())
