"""Which tests start processes or talk to real servers: marked at collection, checked while they run.

Two markers (registered in pyproject.toml), which `make test-fast` leaves out:

- `servers`: the test talks to a real server (Postgres, sshd, Prometheus, Alertmanager).
- `processes`: the test starts an OS process (`opsloop run`, sshd, initdb/pg_ctl, Prometheus, Chromium,
  kubectl, an MCP server, a local command a tool runs).

Nobody has to remember them. At collection a test gets `servers` (and `processes`) when it uses one of
SERVER_FIXTURES, or `db_url` with its `postgres` parameter; it gets `processes` when its own code, or the
code of any tests.* function, class or fixture it reaches by name, calls a process-starting function
(PROCESS_STARTERS). What that reading cannot see (product code that runs a command) an audit hook sees while
the test runs: a test that starts a process without the `processes` marker fails and says which marker to add.
Mark such a test `@pytest.mark.processes` (a `pytest.param(..., marks=...)` for one parameter), and a fixture
that starts one through product code `@markers.spawns`, so all its users are marked, not just the first.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

PROCESSES = "processes"
SERVERS = "servers"
SERVER_FIXTURES = frozenset({"pg_server", "pg_url", "ssh_servers", "sshd"})
# Attribute or global names whose call starts a process; `run`/`call` only count next to `subprocess`.
PROCESS_STARTERS = frozenset(
    {
        "Popen",
        "check_output",
        "check_call",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "posix_spawn",
        "posix_spawnp",
        "fork",
        "system",
    }
)
SUBPROCESS_CALLS = frozenset({"run", "call"})
# The audit events (PEP 578) of starting a process.
SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.system", "os.exec", "os.spawn", "os.forkpty"}
)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and every one nested in it (closures, comprehensions, inner functions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _ours(obj: Any) -> bool:
    """A function or class defined in the test suite, whose body the reading follows."""
    return (inspect.isfunction(obj) or inspect.isclass(obj)) and (getattr(obj, "__module__", "") or "").partition(".")[
        0
    ] == "tests"


def _functions(obj: Any) -> Iterator[types.FunctionType]:
    """The functions to read for `obj`: itself, or a class's methods (and properties)."""
    if inspect.isfunction(obj):
        yield obj
        return
    for klass in obj.__mro__:
        if _ours(klass):
            for attribute in vars(klass).values():
                value = attribute
                if isinstance(value, staticmethod | classmethod):
                    value = value.__func__
                if isinstance(value, property):
                    value = value.fget
                if inspect.isfunction(value):
                    yield value


def starts_processes(obj: Any, seen: set[int] | None = None) -> bool:
    """Whether `obj` (a function or class of the suite) calls a process starter, directly or through the suite."""
    seen = set() if seen is None else seen
    obj = inspect.unwrap(obj) if inspect.isfunction(obj) else obj
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    for function in _functions(obj):
        names: set[str] = set()
        for code in _codes(function.__code__):
            names.update(code.co_names)
        if names & PROCESS_STARTERS or ("subprocess" in names and names & SUBPROCESS_CALLS):
            return True
        scope = {**vars(sys.modules[function.__module__]), **function.__globals__}
        reached = [scope.get(name) for name in names]
        # `pgserver.PgServer()`: a name looked up on one of the suite's modules.
        reached += [getattr(module, name, None) for module in list(reached) if _our_module(module) for name in names]
        if any(_ours(obj) and starts_processes(obj, seen) for obj in reached):
            return True
    return False


def _our_module(obj: Any) -> bool:
    return inspect.ismodule(obj) and obj.__name__.partition(".")[0] == "tests"


def spawns(fixture: Any) -> Any:
    """Mark a fixture whose setup starts a process through product code (which the reading does not follow):
    every test that uses it is then `processes`, not only the first one, which the audit hook would catch."""
    fixture.opsloop_spawns = True
    return fixture


def _fixture_functions(item: pytest.Item) -> Iterator[Any]:
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        for fixturedef in defs:
            yield fixturedef.func


def classify(item: pytest.Item) -> set[str]:
    """The markers `item` earns by the fixtures it uses and the code it reaches."""
    fixtures = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    found: set[str] = set()
    if fixtures & SERVER_FIXTURES or params.get("db_url") == "postgres":
        found |= {SERVERS, PROCESSES}
    function = getattr(item, "function", None)
    if function is not None and (
        _read(function)
        or any(getattr(f, "opsloop_spawns", False) or (_ours(f) and _read(f)) for f in _fixture_functions(item))
    ):
        found.add(PROCESSES)
    return found


_READ: dict[int, bool] = {}  # starts_processes per test or fixture function: parameters and users share them


def _read(function: Any) -> bool:
    if (known := _READ.get(id(function))) is None:
        known = _READ[id(function)] = starts_processes(function)
    return known


def mark(items: list[pytest.Item]) -> None:
    """Add the earned markers to every collected item (explicit marks stay)."""
    for item in items:
        for name in sorted(classify(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(name)


def _finding_a_library() -> bool:
    """ctypes.util.find_library runs ldconfig/gcc to find a shared library the first time a module loads one:
    an import detail of whichever test happens to import that module first, not a process the test starts."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("ctypes/util.py", "ctypes\\util.py")):
            return True
        frame = frame.f_back
    return False


class SpawnWatch:
    """The processes started while each test sets up and runs, seen by an audit hook (teardowns only stop them)."""

    def __init__(self) -> None:
        self.current: list[str] | None = None
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.current is not None and event in SPAWN_EVENTS and len(self.current) < 5:
            if _finding_a_library():
                return
            first = args[0] if args else ""
            self.current.append(f"{event} {first!r}"[:160])

    def unmarked_spawns(self, item: pytest.Item) -> list[str]:
        """What `item` started although it is not marked `processes` (empty when all is in order)."""
        spawned, self.current = self.current or [], None
        return [] if item.get_closest_marker(PROCESSES) else spawned
