"""Imports point one way, down the layers, with no cycle; the runtime never reaches handlers/. The layers are folders.

The layers, bottom first (a module imports only its own layer and the ones below it):
  0. the ground floor, bot/core/: types, errors, redaction, prices, wording; it imports nothing else of ours;
  1. the core: bot/config/, bot/store/, bot/run/ (the run loop and what it drives, the scheduler and the approval
     lifecycle), `bot` itself (the Protocols the run layer talks to, Slack's among them), and the tool API: the
     modules directly in tools/ (tools.api, tools.registry, ...);
  2. the reaches: each folder in tools/ (tools/k8s/, tools/remote/, tools/builtin/, ...);
  3. the list of reaches: tools.reaches and tools.config, which load every reach by name;
  4. handlers/ (the Slack side);
  5. the roof, bot/app/: the app's wiring, the CLI, `opsloop check`, start-up, metrics, the exported timelines;
  6. playground, replay, eval and bench: bot/playground/, bot/replay/, bot/eval/, bench/.
So the core imports no reach and no Slack code, a reach imports only the tool API and the core (and no other reach,
test below), and handlers/ imports no reach. bot/ holds only folders (and its `__init__`): a newcomer sees the
layers in `ls`. One exception, by rule: bot.app.cli, the command line, starts the layer-6 commands (demo, sandbox,
replay, eval), and imports them only inside the function that runs each one (never at module level).

The imports are read with ast, not by importing: every `import` and `from … import` statement counts, at
module level, inside a function (a late import still ties two modules together) or under `if TYPE_CHECKING:`
(a type-level tie is still a tie: mypy and a reader follow it). `from package import name` counts as importing
`package.name` when that is a module, else the package itself (its `__init__`).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "handlers", "tools")
LAYERED = (*PACKAGES, "bench")
RUNTIME = "bot.run.loop"
SCHEDULER = "bot.run.scheduler"
CLI = "bot.app.cli"

# The layers by folder, bottom first (the docstring's numbers); a reach is any folder of tools/.
GROUND = ("bot.core",)
CORE = ("bot.config", "bot.store", "bot.run")
REACH_LIST = ("tools.reaches", "tools.config")
ROOF = ("bot.app",)
TOP = ("bot.playground", "bot.replay", "bot.eval", "bench")
GROUND_LAYER, CORE_LAYER, REACH_LAYER, REACH_LIST_LAYER, HANDLERS_LAYER, ROOF_LAYER, TOP_LAYER = range(7)

# Upward imports still to go, each with why it is left: the list only shrinks.
KNOWN_UPWARD: set[str] = set()
# Reaches that import another reach, by folder, each with why: the list only shrinks.
KNOWN_ACROSS: set[str] = {
    # One reach in two folders: tools/remote/ holds the SSH machinery and the [ssh] reach, tools/builtin/ the host
    # tools on it (the users' `[tools] modules = ["tools.builtin"]`), and each names the other.
    "tools.builtin -> tools.remote",
    "tools.remote -> tools.builtin",
    # The change feed gathers recent changes from the clusters, the hosts and PagerDuty: it reads their clients.
    "tools.changes -> tools.k8s",
    "tools.changes -> tools.remote",
    "tools.changes -> tools.pagerduty",
}

# The core tool API and the registry import only these of ours, TYPE_CHECKING imports included (as
# kubernetes-mcp-server's pkg/api/imports_test.go): no backend (SSH, Kubernetes), no store, no Slack side.
MAY_IMPORT = {
    "tools.api": {"bot.core.errors", "bot.core.redact", "bot.core.types", "tools.netguard"},
    "tools.registry": {
        "bot.core.errors",
        "bot.core.redact",
        "bot.core.types",
        "tools.api",
        "tools.process",
        "tools.schema",
        "tools.worker",
    },
}


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module parsed once per test process: every test here walks the same few hundred files."""
    return ast.parse(path.read_text())


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(
    tree: ast.Module, *, type_checking: bool = True, module_level: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth; without `type_checking`, not those inside an `if TYPE_CHECKING:`
    body (not its else); with `module_level`, not those inside a function."""
    skipped = (
        {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and _type_checking(node)
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        if not type_checking
        else set()
    )
    if module_level:
        skipped |= {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(node)
        }
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped]


def imports(
    name: str, path: Path, known: dict[str, Path], *, type_checking: bool = True, module_level: bool = False
) -> set[str]:
    """The modules of `known` that `name` imports (a `from package import module` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _statements(_tree(path), type_checking=type_checking, module_level=module_level):
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


def graph(*, type_checking: bool = True, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    known = modules(packages)
    return {name: imports(name, path, known, type_checking=type_checking) for name, path in known.items()}


def reach(module: str) -> str | None:
    """The reach a module belongs to (`tools.<folder>`), or None: every folder of tools/ is a reach."""
    parts = module.split(".")
    return (
        ".".join(parts[:2]) if parts[0] == "tools" and len(parts) > 1 and (ROOT / "tools" / parts[1]).is_dir() else None
    )


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int:
    """The layer a module sits in, from its folder."""
    if _under(module, GROUND):
        return GROUND_LAYER
    if module in REACH_LIST:
        return REACH_LIST_LAYER
    if reach(module):
        return REACH_LAYER
    if module == "bot" or _under(module, CORE) or _under(module, ("tools",)):
        return CORE_LAYER
    if _under(module, ("handlers",)):
        return HANDLERS_LAYER
    if _under(module, ROOF):
        return ROOF_LAYER
    assert _under(module, TOP), f"{module} is in no layer: put it in a folder of one (and say so in the docstring)"
    return TOP_LAYER


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
    assert "bot.run.guards" in edges[RUNTIME]
    assert "bot.core.types" in edges["bot.run.guards"]
    assert "bot.config.settings" in edges["bot.app.settings"]


def test_no_import_cycles_at_run_time() -> None:
    assert cycles(graph(type_checking=False, packages=LAYERED)) == []


def test_no_import_cycles_type_checking_included_outside_the_store_and_tools() -> None:
    """handlers/ (approvals, stream, loading, the supervisor), the app, bench: no cycle, type-level ones included.
    The two groups still tied at type level are tested one by one below."""
    inside = ("bot.store", "tools")
    assert [
        g
        for g in cycles(graph(packages=LAYERED))
        if not any(all(m == p or m.startswith(p + ".") for m in g) for p in inside)
    ] == []


def test_no_import_cycles_type_checking_included_among_tools() -> None:
    assert [g for g in cycles(graph()) if g[0].startswith("tools")] == []


def test_no_import_cycles_type_checking_included_in_the_store() -> None:
    assert [g for g in cycles(graph()) if g[0].startswith("bot.store")] == []


def test_every_module_is_in_a_layer() -> None:
    """layer() fails naming a module in no layer's folder; every layer holds some."""
    assert {layer(m) for m in modules(LAYERED)} == set(range(TOP_LAYER + 1))


def test_bot_holds_only_folders() -> None:
    """A newcomer sees the layers in `ls bot/`: no flat module beside the folders, only the package's own file."""
    assert sorted(p.name for p in (ROOT / "bot").glob("*.py")) == ["__init__.py"]


def test_a_lower_layer_never_imports_a_higher_one() -> None:
    """TYPE_CHECKING imports included; the CLI's late imports of the commands it starts excepted (docstring)."""
    edges = graph(packages=LAYERED)
    known = modules(LAYERED)
    cli_top = imports(CLI, known[CLI], known, module_level=True)
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in edges.items()
        for t in targets
        if layer(t) > layer(m) and not (m == CLI and t not in cli_top)
    )
    assert upward == sorted(KNOWN_UPWARD)


def test_a_reach_imports_no_other_reach() -> None:
    """A reach imports only the tool API and the core: another reach is a folder of its own (by folder pairs)."""
    edges = graph()
    across = {
        f"{reach(m)} -> {reach(t)}"
        for m, targets in edges.items()
        for t in targets
        if reach(m) and reach(t) and reach(m) != reach(t)
    }
    assert sorted(across) == sorted(KNOWN_ACROSS)


def test_the_layer_walk_sees_an_upward_import() -> None:
    """The layer test would notice one: the runtime (the core) importing handlers or a reach is upward."""
    assert layer("bot.core.types") < layer(RUNTIME) == layer(SCHEDULER) == layer("bot.store.ledger")
    assert layer(RUNTIME) < layer("tools.k8s.clusters") < layer("tools.reaches") < layer("handlers.approvals")
    assert layer("handlers.approvals") < layer("bot.app.wiring") < layer("bench.k8s") == layer("bot.replay.cli")
    assert reach("tools.builtin.http") == "tools.builtin" and reach("tools.api") is None


def test_the_cli_imports_the_top_layer_commands_only_where_it_runs_them() -> None:
    known = modules(LAYERED)
    assert sorted(t for t in imports(CLI, known[CLI], known, module_level=True) if layer(t) > layer(CLI)) == []


@pytest.mark.parametrize("module", ["tools.registry"])
def test_the_tool_registry_imports_only_its_whitelist(module: str) -> None:
    known = modules()
    assert sorted(imports(module, known[module], known) - MAY_IMPORT[module]) == []


def test_the_tool_api_imports_only_its_whitelist() -> None:
    """The core tool API knows no backend: only core types and errors, and the generic network guard."""
    known = modules()
    assert sorted(imports("tools.api", known["tools.api"], known) - MAY_IMPORT["tools.api"]) == []


def test_the_runtime_imports_nothing_from_handlers() -> None:
    """The loop, and the scheduler and approval lifecycle that drive it: Slack is a Protocol to them (bot.SlackSide)."""
    edges = graph()
    runtime = reachable(edges, RUNTIME) | reachable(edges, SCHEDULER) | reachable(edges, "bot.run.approvals")
    into_handlers = sorted(f"{m} -> {t}" for m in runtime for t in edges[m] if t.split(".")[0] == "handlers")
    assert into_handlers == []


IMPORT_FIRST_SHARDS = 4  # one interpreter per shard, so the ~180 imports spread over the test workers


@pytest.mark.parametrize("shard", range(IMPORT_FIRST_SHARDS))
def test_every_module_imports_first(shard: int) -> None:
    """Each module imported before any other of ours (no import-order workaround needed): one interpreter per
    shard of the modules, ours forgotten between imports (third-party ones stay loaded, so this is quick)."""
    names = sorted(modules())[shard::IMPORT_FIRST_SHARDS]
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] in ('bot', 'handlers', 'tools')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, ""), done.stderr[-2000:]


def test_only_the_cli_imports_the_playground() -> None:
    """The stand-in, demo and sandbox ship in the package, but nothing the bot runs imports them."""
    edges = graph()
    inside = ("bot.playground",)
    users = sorted(
        m
        for m, targets in edges.items()
        if not m.startswith(inside) and any(t.startswith("bot.playground") for t in targets)
    )
    assert users == ["bot.app.cli"]
    runtime_side = reachable(edges, "bot.app.wiring") | reachable(edges, RUNTIME)
    assert sorted(m for m in runtime_side if m.startswith("bot.playground")) == []


# The tool API knows no backend: a whitelist of what tools/api.py and tools/registry.py may import, TYPE_CHECKING
# imports included (kubernetes-mcp-server's pkg/api/imports_test.go does the same).
TOOL_API_MAY_IMPORT = {
    "tools.api": {"bot.core.errors", "bot.core.redact", "tools.netguard"},
    "tools.registry": {"tools.api", "tools.process", "tools.schema", "tools.worker"},
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
    code = (
        "import sys, bot.run.loop; print(' '.join(sorted(m for m in sys.modules "
        "if m.startswith(('tools.k8s', 'tools.remote', 'tools.config', 'tools.builtin', 'asyncssh')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
