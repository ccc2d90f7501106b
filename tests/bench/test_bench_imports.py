"""bench/ builds on product code and the shared fakes only: it imports no test module and no private name.

Read with ast, not by importing (bench pulls in matplotlib and the peers): every `import` and `from … import`
at any depth counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_test_module(module: str) -> bool:
    return any(part.startswith("test_") or part == "conftest" for part in module.split("."))


def offences(source: str) -> list[str]:
    """The imports in `source` that reach a test module or a private name, as `module` / `module._name`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            module = node.module or ""
            if _is_test_module(module):
                found.append(module)
            found += [
                f"{module}.{a.name}"
                for a in node.names
                if _is_test_module(a.name) or (a.name.startswith("_") and not a.name.startswith("__"))
            ]
    return found


def test_the_check_sees_test_modules_and_private_names() -> None:
    source = (
        "from tests.tools.k8s.test_k8s_tools import NS\nimport tests.bot.app.test_cli\nfrom tests import test_docs\n"
        "from tests.support.fakes.anthropic import _cost_usd, reply\nfrom __future__ import annotations\n"
        "from tests.support.fakes.kube_scenes import crashloop\n"
    )
    assert offences(source) == [
        "tests.tools.k8s.test_k8s_tools",
        "tests.bot.app.test_cli",
        "tests.test_docs",
        "tests.support.fakes.anthropic._cost_usd",
    ]


def test_bench_imports_no_test_module_and_no_private_name() -> None:
    found = {
        str(path.relative_to(ROOT)): bad
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if (bad := offences(path.read_text(encoding="utf-8")))
    }
    assert found == {}
