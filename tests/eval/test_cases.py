"""Every case in evals/: its golden script passes every check, its bad script fails at least one, and its fixtures,
decisions and scripts fit the tool schemas (the linter). The real run loop, gate and summary checks run each."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.pricing import Price, price_for
from bot.eval.case import cases, load
from bot.eval.runner import run_case
from bot.eval.score import score
from bot.eval.script import ScriptedModel
from tests.eval.case_lint import lint

EVALS = Path(__file__).resolve().parents[2] / "evals"
CASES = [p.name for p in cases([EVALS])]


def _price(model: str) -> Price:
    return price_for(model, {})[0]


def test_there_are_cases() -> None:
    assert len(CASES) >= 5


@pytest.mark.parametrize("name", CASES)
async def test_the_case_fits_its_tools(name: str) -> None:
    assert await lint(load(EVALS / name)) == []


@pytest.mark.parametrize("name", CASES)
async def test_the_golden_script_passes(name: str) -> None:
    case = load(EVALS / name)
    ran = await run_case(case, model=ScriptedModel(case.scripts["golden"]), price_for=_price)
    assert [c for c in score(ran) if not c.passed] == []


@pytest.mark.parametrize("name", CASES)
async def test_the_bad_script_fails(name: str) -> None:
    case = load(EVALS / name)
    ran = await run_case(case, model=ScriptedModel(case.scripts["bad"]), price_for=_price)
    assert [c.name for c in score(ran) if not c.passed] != []
