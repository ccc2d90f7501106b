"""`opsloop eval [DIR…]` and `opsloop eval add RUN_ID DIR`.

The model: Claude through bot.run.model.AnthropicModel (the real anthropic client, ANTHROPIC_API_KEY and
ANTHROPIC_BASE_URL as `opsloop run` reads them), `--model` alone, no fallbacks; or with `--script golden|bad`,
each case's own script (no key needed). Exit status: 0 when every run passed every check (with `--baseline`:
when no case got worse than the baseline), 1 otherwise, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TextIO

from bot import ModelClient
from bot.config.settings import Settings
from bot.core.pricing import model_problems, price_for
from bot.eval import report
from bot.eval.case import SCRIPTS, Case, CaseError, cases, load
from bot.eval.report import Result
from bot.eval.runner import run_case
from bot.eval.score import judge, score
from bot.eval.script import ScriptedModel
from bot.replay.cli import write

CLEAR_LINE = "\x1b[K"  # erase to the end of the line: a shorter redraw leaves nothing of the longer one before


def _fail(line: str) -> int:
    print(f"opsloop: eval: {line}", file=sys.stderr)
    return 2


class Progress:
    """One line while it runs: on a terminal, a bar redrawn in place, cut to the terminal's width (a wrapped line
    could not be redrawn) and ended by a newline when the last run finishes or the command stops early (`close`);
    otherwise a plain line per finished run."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total, self.done, self.failed, self.out = total, 0, 0, out or sys.stderr
        self.tty = self.out.isatty()
        self.drawn = False  # a bar is on the terminal's current line

    def finished(self, r: Result) -> None:
        self.done += 1
        self.failed += not r.passed
        if not self.tty:
            self.out.write(f"[{self.done}/{self.total}] {r.case} on {r.model}: {'pass' if r.passed else 'FAIL'}\n")
            self.out.flush()
            return
        columns = self.columns()
        width = max(min(30, columns // 4), 5)
        bar = "#" * (width * self.done // self.total)
        line = f"[{bar:<{width}}] {self.done}/{self.total} · {self.failed} failed · {r.case}"
        self.out.write("\r" + line[: columns - 1] + CLEAR_LINE)
        self.drawn = True
        if self.done == self.total:
            self.close()
        self.out.flush()

    def close(self) -> None:
        """End the bar's line, so what follows (the table, an error) starts on a line of its own."""
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False

    def columns(self) -> int:
        try:
            return os.get_terminal_size(self.out.fileno()).columns or 80
        except (OSError, ValueError):  # not a real terminal (a stream that only says it is one)
            return 80


def cmd_eval(settings: Settings, args: argparse.Namespace) -> int:
    from bot.core.log import configure_logging

    configure_logging("error")  # the table is the output; the runs' traces would interleave with it
    if args.paths and args.paths[0] == "add":
        from bot.eval.add import cmd_add

        return cmd_add(settings, args.paths[1:], (getattr(args, "found_config", None) or (None, None))[0])
    if args.repeat < 1 or args.concurrency < 1:
        return _fail("--repeat and --concurrency must be 1 or more")
    model_name = args.model or settings.model.primary
    for name in (model_name, *([args.judge] if args.judge else [])):
        if errors := model_problems([name])[0]:
            return _fail(f"--model {name}: {errors[0]}")
    baseline = None
    if args.baseline:
        try:
            baseline = json.loads(Path(args.baseline).read_text(encoding="utf-8"))
            report.regressions([], baseline)  # its format, checked before anything is spent
        except (OSError, ValueError) as e:
            return _fail(f"--baseline {args.baseline}: {getattr(e, 'strerror', None) or e}")
    try:
        found = [load(p) for p in cases(args.paths or ["evals"])]
    except CaseError as e:
        return _fail(str(e))
    if not found:  # a gate that checks nothing must not pass
        return _fail(f"no cases (folders with case.yaml) in {', '.join(args.paths or ['evals'])}")
    if args.script and (missing := [c.name for c in found if args.script not in c.scripts]):
        return _fail(f"no {args.script} script in {', '.join(missing)}")
    if not args.script and settings.anthropic_api_key is None:
        return _fail("needs ANTHROPIC_API_KEY to ask --model (or --script golden to play each case's own script)")
    try:
        results = asyncio.run(_run(settings, args, found, model_name))
    except KeyboardInterrupt:
        print("opsloop: eval: interrupted; no table or file written", file=sys.stderr)
        return 130
    now = time.time()
    print(report.table(results))
    for path, text in (
        (args.json, json.dumps(report.to_json(results, generated_at=now), indent=2, ensure_ascii=False) + "\n"),
        (args.html, report.html_page(results, generated_at=now)),
    ):
        if path and (problem := write(path, text)):
            return _fail(problem)
    if baseline is not None:
        worse = report.regressions(results, baseline)
        for line in worse:
            print(f"REGRESSION {line}")
        print(f"{len(worse)} case(s) worse than {args.baseline}" if worse else f"no case worse than {args.baseline}")
        return 1 if worse else 0
    return 0 if all(r.passed for r in results) else 1


async def _run(settings: Settings, args: argparse.Namespace, found: list[Case], model_name: str) -> list[Result]:
    async with AsyncExitStack() as stack:
        llm = None
        if not args.script or args.judge:
            from bot.app.wiring import anthropic_client
            from bot.run.model import AnthropicModel

            llm = anthropic_client(settings)
            stack.push_async_callback(llm.close)

        def model_for(case: Case) -> ModelClient:
            if args.script:
                return ScriptedModel(case.scripts[args.script], name=model_name)
            assert llm is not None
            return AnthropicModel(llm, [model_name])

        def judge_model() -> ModelClient:
            assert llm is not None
            return AnthropicModel(llm, [args.judge])

        progress = Progress(len(found) * args.repeat)
        stack.callback(progress.close)  # also when interrupted: the shell's prompt or the error on its own line
        gate = asyncio.Semaphore(args.concurrency)

        async def one(case: Case, i: int) -> Result:
            async with gate:
                model = model_for(case)
                try:
                    ran = await run_case(case, model=model, price_for=lambda m: price_for(m, settings.model.prices)[0])
                except Exception as e:  # one broken run is that case's failure, not the suite's end
                    r = Result(case=case.name, model=model.model, repeat=i, error=f"{type(e).__name__}: {e}")
                else:
                    r = Result(
                        case=case.name,
                        model=ran.model,
                        repeat=i,
                        checks=tuple(score(ran)),
                        steps=ran.steps,
                        tokens=ran.tokens,
                        cost_usd=ran.cost_usd,
                        seconds=ran.seconds,
                        stop_reason=ran.stop_reason,
                        answer=ran.answer,
                        judge=await judge(judge_model(), ran) if args.judge else None,
                    )
                progress.finished(r)
                return r

        return list(await asyncio.gather(*(one(c, i) for c in found for i in range(args.repeat))))


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "paths",
        nargs="*",
        metavar="DIR",
        help="case folders, or folders of them (default: evals); `add RUN_ID DIR` makes a case from a stored run",
    )
    s.add_argument("--model", help="the model to evaluate (default: the configured primary)")
    s.add_argument("--repeat", type=int, default=1, help="runs per case (default 1); the table shows the pass rate")
    s.add_argument("--concurrency", type=int, default=4, help="cases run at once (default 4)")
    s.add_argument("--baseline", metavar="FILE", help="an earlier --json file: exit 1 if any case got worse")
    s.add_argument("--json", metavar="FILE", help="write every run and the per-case rows as JSON")
    s.add_argument("--html", metavar="FILE", help="write the table as one HTML page")
    s.add_argument("--judge", metavar="MODEL", help="also score each answer with this model's rubric (shown apart)")
    s.add_argument("--script", choices=SCRIPTS, help="play each case's own golden or bad script (no key needed)")
    s.add_argument("--db", help="for `eval add`: the SQLite file or postgresql:// URL (default: $OPSLOOP_DB)")
