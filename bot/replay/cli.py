"""`opsloop export RUN_ID` and `opsloop replay RUN_ID|FILE|--suite DIR`: the commands, over bot/replay/.

The replay's model: Claude through bot.run.model.AnthropicModel (the real anthropic client) with ANTHROPIC_API_KEY,
`--model` alone (no fallbacks: the comparison is of that model); without a key, the demo's scripted incident
model priced as `--model`, and the output says so. A replay needs no Slack and reaches none.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

from bot import ModelClient, Toolbox
from bot.config.settings import EFFORTS, ConfigError, Settings
from bot.core.pricing import model_problems, price_for, thinks_adaptively
from bot.core.providers import label as provider_label
from bot.core.providers import split
from bot.replay.compare import Comparison, compare, exit_status, html_page, text
from bot.replay.record import Incident, export_run
from bot.replay.runner import replay
from bot.replay.suite import table
from bot.store import Ledger
from bot.store.backends import describe


def _shown(value: str) -> str:
    from handlers.mrkdwn import reveal

    return reveal(value, prose=True)


def write(path: str, text: str) -> str | None:
    """Write `text` to the file `path`; what went wrong, in one line (None: written)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        return f"cannot write {path}: {e.strerror or e}"
    return None


def _fail(line: str) -> int:
    print(f"opsloop: {line}", file=sys.stderr)
    return 2


async def categories(settings: Settings) -> dict[str, str]:
    """Each configured tool's category, from the registry `opsloop run` would build."""
    from tools.config import build_registry

    registry = await build_registry(settings.tools, reaches=settings.reaches)
    try:
        return {t.name: t.category.value for t in registry}
    finally:
        await registry.aclose()


def export_incident(settings: Settings, run_id: str) -> Incident | None:
    """The run's record. Its limits, effort and categories are stored with it; only a run stored without them
    (older than m011) takes them from this config, and its record says `"limits_source": "config at export"`."""
    ledger = Ledger(settings.db_path)
    try:
        run = ledger.find_run(run_id)
        if run is None or run.settings is not None:
            return export_run(ledger, run_id)
        try:
            cats = asyncio.run(categories(settings))
        except ConfigError as e:  # the record still says what the approvals tell; the rest counts as destructive
            print(f"opsloop: tools: {e}; categories come from the run's approvals only", file=sys.stderr)
            cats = {}
        print(
            f"opsloop: run {run_id} was stored without its limits and tool categories; the record takes "
            "them from this config (limits_source: config at export)",
            file=sys.stderr,
        )
        return export_run(ledger, run_id, categories=cats, limits=settings.limits)
    finally:
        ledger.close()


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    incident = export_incident(settings, args.run_id)
    if incident is None:
        return _fail(f"no run {args.run_id!r} in {describe(settings.db_path)}")
    sys.stdout.write(incident.dumps())
    return 0


async def _compare(
    settings: Settings,
    args: argparse.Namespace,
    prompt: str | None,
    scripted: Callable[[str], ModelClient] | None,
    incidents: Sequence[tuple[str, Incident]],
) -> list[Comparison]:
    """Each (name, incident) replayed in turn and compared, with the model client (and --live-readonly's
    registry) open throughout."""
    name = args.model or settings.model.primary
    client: Callable[[], ModelClient]
    async with AsyncExitStack() as stack:
        route = provider_label(name, settings.model.provider)  # "bedrock:claude-x" when [model] provider says so
        if settings.anthropic_api_key is None and scripted is not None and split(route)[0] == "anthropic":
            label, client = f"scripted model (priced as {name})", lambda: scripted(name)
        else:
            from bot.app.wiring import model_clients
            from bot.run.model import AnthropicModel

            clients = model_clients(
                dataclasses.replace(settings, model=dataclasses.replace(settings.model, primary=route, fallbacks=()))
            )
            for llm in clients.values():
                stack.push_async_callback(llm.close)
            label, client = route, lambda: AnthropicModel(clients, [route], ids=settings.model.ids)
        live: Toolbox | None = None
        if args.live_readonly:
            from tools.config import build_registry

            live = registry = await build_registry(settings.tools, reaches=settings.reaches)
            stack.push_async_callback(registry.aclose)
        comparisons = []
        for incident_name, incident in incidents:
            replayed = await replay(
                incident,
                model=client(),
                price_for=lambda model: price_for(model, settings.model.prices)[0],
                system_prompt=prompt,
                max_tokens=incident.max_tokens or settings.model.max_tokens,
                effort=args.effort or incident.effort or settings.model.effort,
                thinking_display=settings.model.thinking_display,
                live=live,
                context_budget_tokens=settings.model.context_budget_tokens,
            )
            comparisons.append(compare(replayed, name=incident_name, model_label=label))
        return comparisons


def model_choice(settings: Settings, model: str, effort: str | None) -> str | None:
    """Why `--model`/`--effort` cannot be replayed (None: they can). A replay is priced per model, so a model
    without a known price is refused (priced like the dearest one, a cost delta would be invented); a retired
    model would only answer 404; an effort must be one the API takes, on a model that takes one."""
    if effort is not None and effort not in EFFORTS:
        return f"replay: --effort {effort!r} is not one of {', '.join(EFFORTS)}"
    errors, warnings = model_problems([model])
    if errors:
        return f"replay: --model: {errors[0]}"
    for line in warnings:
        print(f"opsloop: replay: {line}", file=sys.stderr)
    if not price_for(model, settings.model.prices)[1]:
        return (
            f"replay: --model {model}: no price known for this model, so the replay's cost cannot be compared; "
            f'check the name, or give its price under [model.prices."{model}"] (input, output per MTok)'
        )
    if effort is not None and not thinks_adaptively(model):
        return (
            f"replay: --effort {effort}: {model} takes no output_config.effort (it does not think adaptively); "
            "replay it without --effort"
        )
    return None


def cmd_replay(
    settings: Settings, args: argparse.Namespace, *, scripted: Callable[[str], ModelClient] | None = None
) -> int:
    """`scripted`: the model client to use (by model name) when there is no ANTHROPIC_API_KEY."""
    from bot.core.log import configure_logging

    configure_logging("error")  # the comparison is the output; the replay's own trace would interleave with it
    if bool(args.suite) == bool(args.run_id):
        return _fail("replay: give a RUN_ID (or an incident file), or --suite DIR")
    if (problem := model_choice(settings, args.model or settings.model.primary, args.effort)) is not None:
        return _fail(problem)
    try:
        prompt = Path(args.prompt).read_text(encoding="utf-8") if args.prompt else None
    except OSError as e:
        return _fail(f"replay: --prompt {args.prompt}: {e.strerror or e}")
    if args.suite:
        folder = Path(args.suite)
        if not folder.is_dir():
            return _fail(f"replay: {folder} is not a folder")
        try:
            incidents = [(p.stem, Incident.load(p)) for p in sorted(folder.glob("*.json")) if p.is_file()]
        except (OSError, ValueError, TypeError) as e:
            return _fail(f"replay: {folder}: {e}")
        if not incidents:  # a gate that checks nothing must not pass
            return _fail(f"replay: no incident records (*.json) in {folder}")
        rows = asyncio.run(_compare(settings, args, prompt, scripted, incidents))
        print(_shown(table(rows, rows[0].model if rows else args.model or "")))
        return exit_status(rows)
    source = Path(args.run_id)
    try:
        incident = Incident.load(source) if source.is_file() else export_incident(settings, args.run_id)
    except (OSError, ValueError, TypeError) as e:
        return _fail(f"replay: {source}: {e}")
    if incident is None:
        return _fail(f"no run {args.run_id!r} in {describe(settings.db_path)}")
    name = source.stem if source.is_file() else incident.run_id
    (comparison,) = asyncio.run(_compare(settings, args, prompt, scripted, [(name, incident)]))
    print(_shown(text(comparison)))
    if args.html:
        page = html_page(comparison, generated_at=time.time())
        if args.html == "-":
            sys.stdout.write(page)
        elif problem := write(args.html, page):
            return _fail(problem)
        else:
            print(f"wrote the comparison to {args.html}")
    return exit_status([comparison])


def add_arguments(name: str, s: argparse.ArgumentParser) -> None:
    if name == "export":
        s.add_argument("run_id", help="a run's id, or the start of one that no other run's id starts with")
    if name == "replay":
        s.add_argument(
            "run_id", nargs="?", help="a stored run's id (or its unique start), or an exported incident file"
        )
        s.add_argument("--suite", metavar="DIR", help="replay every incident record (*.json) in DIR")
        s.add_argument("--model", help="the model to replay on (default: the configured primary)")
        s.add_argument("--effort", help="output_config.effort for the replay (default: the configured one)")
        s.add_argument("--prompt", metavar="FILE", help="a system prompt to replay with (default: the run's own)")
        s.add_argument(
            "--live-readonly", action="store_true", help="run unrecorded read-only calls for real (never a change)"
        )
        s.add_argument("--html", metavar="FILE", help="also write the comparison as one HTML page (- for stdout)")
