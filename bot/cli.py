"""The `opsloop` command: run, check, runs, show, audit, demo."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.config import ConfigError, Settings, load_settings, missing_for_run
from bot.log import configure_logging
from bot.store import Ledger


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if epoch else "-"


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(f"opsloop: {line}", file=sys.stderr)
    return 2


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    if problems := missing_for_run(settings):
        return _fail(problems)
    from bot.app import serve  # imported late: `opsloop runs` needs no Slack or anthropic

    configure_logging(settings.log_level)
    try:
        asyncio.run(serve(settings, port=args.port))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from bot.check import check

    return asyncio.run(check(settings))


def cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    ledger = Ledger(settings.db_path)
    rows = ledger.list_runs(limit=args.limit)
    print(f"{'run':<22} {'created':<20} {'status':<17} {'stop reason':<19} {'iter':>4} {'cost':>8}  task")
    for r in rows:
        print(f"{r['id']:<22} {_when(r['created_at']):<20} {r['status']:<17} {r['stop_reason'] or '-':<19} "
              f"{r['iterations']:>4} {r['cost_usd']:>8.4f}  {(r['task'] or '')[:60]}")
    return 0


def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    ledger = Ledger(settings.db_path)
    run = ledger.find_run(args.run_id)
    if run is None:
        return _fail([f"no run {args.run_id!r} in {settings.db_path}"])
    print(f"run {run['id']} · {run['status']} · {run['stop_reason'] or '-'} {run['stop_detail'] or ''}".rstrip())
    print(f"task: {run['task']}")
    print(f"requester {run['requester']} · channel {run['channel']} · thread {run['thread_ts']} · model {run['model']}")
    print(f"iterations {run['iterations']} · tokens in {run['input_tokens']} out {run['output_tokens']} "
          f"cache read {run['cache_read_tokens']} write {run['cache_write_tokens']} · ${run['cost_usd']:.4f}")
    for step in ledger.steps(args.run_id):
        data = json.dumps(step["data"], ensure_ascii=False)
        print(f"{_when(step['at'])}  {step['kind']:<9} {data[:400]}")
    if run["output"]:
        print(f"\n{run['output']}")
    return 0


AUDIT_FIELDS = ["id", "run_id", "created_at", "decided_at", "tool", "category", "state", "decided_by", "decided_name",
                "approvals", "requester", "args", "preview", "reason", "result", "result_is_error", "run_tokens",
                "run_cost_usd"]


def cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    rows = [{k: r.get(k) for k in AUDIT_FIELDS} for r in Ledger(settings.db_path).audit()]
    for r in rows:
        r["created_at"], r["decided_at"] = _when(r["created_at"]), _when(r["decided_at"])
    if args.format == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=AUDIT_FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()})
    else:
        for r in rows:
            print(json.dumps(r, ensure_ascii=False, default=str))
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    print("opsloop demo is not built yet: it arrives with its own issue. Run `make test` to see the "
          "end-to-end incident tests (fake Slack + fake Anthropic) instead.", file=sys.stderr)
    return 1


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
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--config", help="TOML config file (default: $OPSLOOP_CONFIG)")
        s.set_defaults(fn=fn)
        if name == "run":
            s.add_argument("--port", type=int, default=3000, help="HTTP mode port (default 3000)")
        if name == "runs":
            s.add_argument("--limit", type=int, default=50)
        if name == "show":
            s.add_argument("run_id")
        if name == "audit":
            s.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
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
