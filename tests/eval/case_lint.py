"""The case linter, test-only (test_cases.py runs it over evals/): every fixture, decision, expectation and script
call checked against the tool schemas the case's config builds (the real registry), so a fixture that stops
matching its tool is caught in `make test`."""

from __future__ import annotations

from typing import Any

from bot.eval.case import Case, Match
from bot.run.summary import TOOL_NAME as SUMMARY_TOOL
from tools import Category, ToolError
from tools.config import build_registry
from tools.reaches import parse_reaches
from tools.registry import ToolRegistry


async def registry_for(case: Case) -> ToolRegistry:
    config = case.config
    reaches = parse_reaches({k: v for k, v in config.items() if k != "tools"}, base_dir=case.folder, env={})
    return await build_registry(config.get("tools"), base_dir=case.folder, reaches=reaches)


async def lint(case: Case) -> list[str]:
    """Every problem of `case` against its tools, one line each (empty: none)."""
    registry = await registry_for(case)
    try:
        return _problems(case, registry)
    finally:
        await registry.aclose()


def _problems(case: Case, registry: ToolRegistry) -> list[str]:
    out: list[str] = []

    def check(m: Match, where: str, *, change: bool = False) -> None:
        tool = registry.get(m.tool)
        if tool is None:
            out.append(f"{case.name}: {where}: no tool {m.tool!r} with this config")
            return
        props = tool.api_schema()["input_schema"].get("properties", {})
        if unknown := sorted(set(m.match) - set(props)):
            out.append(f"{case.name}: {where}: {m.tool} has no argument {', '.join(unknown)}")
        if m.args is not None:
            _valid(tool, m.args, f"{case.name}: {where}", out, exact=not m.match)
        if change and tool.category == Category.READ_ONLY:
            out.append(f"{case.name}: {where}: {m.tool} is read-only: nobody approves it")

    for i, f in enumerate(case.fixtures):
        check(f, f"fixtures[{i}]")
    for i, d in enumerate(case.decisions):
        check(d, f"people[{i}] ({'approve' if d.approve else 'deny'})", change=True)
    for i, m in enumerate(case.expect.evidence):
        check(m, f"expect.evidence[{i}]")
    for i, fb in enumerate(case.expect.forbidden):
        check(fb, f"expect.forbidden[{i}]")
    for which, turns in case.scripts.items():
        for i, turn in enumerate(turns):
            for j, (name, args) in enumerate(turn.calls):
                if name == SUMMARY_TOOL:
                    continue
                tool = registry.get(name)
                where = f"{case.name}: {which}[{i}].calls[{j}]"
                if tool is None:
                    out.append(f"{where}: no tool {name!r} with this config")
                else:
                    _valid(tool, args, where, out)
    return out


def _valid(tool: Any, args: dict[str, Any], where: str, out: list[str], *, exact: bool = True) -> None:
    """`args` pass the tool's schema; with `exact` false (a fixture that also has patterns) the required
    arguments the patterns give may be missing."""
    try:
        tool.validate(args)
    except ToolError as e:
        if exact or "required" not in str(e):
            out.append(f"{where}: {e}")
