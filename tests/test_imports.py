"""Imports point one way: no cycle among bot/, handlers/ and tools/, and the runtime never reaches handlers/.

The imports are read with ast, not by importing: every `import` and `from … import` statement counts,
at module level or inside a function (a late import still ties two modules together), except those under
`if TYPE_CHECKING:` (annotations only, never executed).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "handlers", "tools")
RUNTIME = "bot.runtime"


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, except those inside an `if TYPE_CHECKING:` body (not its else)."""
    skipped = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node)
               for stmt in node.body for inner in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped]


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `name` imports (a `from package import module` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _statements(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        out |= {t for t in targets if t in known and t != name}
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(groups)


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_the_walk_sees_the_imports_it_should() -> None:
    edges = graph()
    assert "bot.guards" in edges[RUNTIME]
    assert "bot.types" in edges["bot.guards"]


def test_no_import_cycles_among_bot_handlers_and_tools() -> None:
    assert cycles(graph()) == []


def test_the_runtime_imports_nothing_from_handlers() -> None:
    edges = graph()
    runtime = reachable(edges, RUNTIME)
    into_handlers = sorted(f"{m} -> {t}" for m in runtime for t in edges[m] if t.split(".")[0] == "handlers")
    assert into_handlers == []


def test_every_module_imports_first() -> None:
    """Each module imported before any other of ours (no import-order workaround needed): one interpreter,
    our modules forgotten between imports (third-party ones stay loaded, so this is quick)."""
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {sorted(modules())!r}:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] in ('bot', 'handlers', 'tools')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, ""), done.stderr[-2000:]


def test_only_the_cli_imports_the_playground() -> None:
    """The stand-in, demo and sandbox ship in the package, but nothing the bot runs imports them."""
    edges = graph()
    inside = ("bot.playground", "bot.sandbox")  # bot.sandbox: the Makefile's old `python -m` path, forwarded
    users = sorted(m for m, targets in edges.items() if not m.startswith(inside)
                   and any(t.startswith("bot.playground") for t in targets))
    assert users == ["bot.cli"]
    runtime_side = reachable(edges, "bot.app") | reachable(edges, RUNTIME)
    assert sorted(m for m in runtime_side if m.startswith("bot.playground")) == []


# The tool API knows no backend: a whitelist of what tools/api.py and tools/registry.py may import, TYPE_CHECKING
# imports included (kubernetes-mcp-server's pkg/api/imports_test.go does the same).
TOOL_API_MAY_IMPORT = {
    "tools.api": {"bot.errors", "bot.redact", "tools.netguard"},
    "tools.registry": {"tools.api", "tools.schema", "tools.worker"},
}


def test_the_tool_api_imports_only_its_whitelist_even_for_type_checking() -> None:
    known = modules()
    for name, allowed in TOOL_API_MAY_IMPORT.items():
        tree = ast.parse(known[name].read_text())
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} if node.module in known else set()
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in known}
        assert found <= allowed, (name, sorted(found - allowed))


def test_the_runtime_loads_the_tool_api_and_no_reach() -> None:
    code = ("import sys, bot.runtime; print(' '.join(sorted(m for m in sys.modules "
            "if m.startswith(('tools.k8s', 'tools.remote', 'tools.config', 'tools.builtin', 'asyncssh')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
