"""Build the ToolRegistry from the [tools] table and the configured reaches; every problem names where it is
(bot.config.reader collects them all, then one ToolConfigError lists them)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import posixpath
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from bot.config.reader import Reader, read, setting
from tools.api import ToolConfigError, some_names
from tools.commands import RunbookCommand, command_tool, placeholders
from tools.netguard import AllowlistError, parse_allowlist, server_address
from tools.registry import Category, Tool, ToolContext, ToolRegistry
from tools.systemd_units import unit_names

DEFAULT_MODULES = ("tools.builtin",)
# The built-in modules whose tools read configured directories (named in a run's first turn when registered).
LOG_TOOLS_MODULE = "tools.builtin.logs"  # [tools.logs] dirs
READ_FILE_MODULE = "tools.builtin.files"  # [tools.files] read_dirs
DISK_USAGE_MODULE = "tools.builtin.disk_usage"  # [tools.files] usage_dirs

_TOP_KEYS = (
    "modules",
    "categories",
    "timeouts",
    "logs",
    "journal",
    "services",
    "files",
    "prometheus",
    "http",
    "commands",
    "mcp",
)
_CATEGORIES = tuple(c.value for c in Category)
S = TypeVar("S")


# -- the context for built-in tools --------------------------------------------------------------


def _dirs(dirs: tuple[Path, ...], r: Reader, key: str) -> tuple[Path, ...]:
    if not dirs:
        r.problem("must name at least one directory", key)
    return tuple(_dir(d, r, f"{key}[{i}]") for i, d in enumerate(dirs))


def _file(path: Path, r: Reader, key: str) -> Path:
    if not path.is_file():
        r.problem(f"{str(path)!r} is not a file", key)
    return path


def _allowlist(patterns: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...] | None:
    try:
        parse_allowlist(list(patterns))
    except AllowlistError as e:
        r.problem(str(e), f"{key}[{e.index}]")
        return None
    return patterns


def _dns_servers(servers: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...] | None:
    for i, server in enumerate(servers):
        try:
            server_address(server)
        except ValueError as e:
            r.problem(str(e), f"{key}[{i}]")
            return None
    return servers


@dataclass(frozen=True, kw_only=True)
class LogsSection:
    dirs: tuple[Path, ...] | None = setting(None, "the directories the log tools read (default /var/log)", check=_dirs)


def _dir(path: Path, r: Reader, key: str) -> Path:
    if not path.is_dir():
        r.problem(f"{str(path)!r} is not a directory", key)
    return path.resolve()


@dataclass(frozen=True, kw_only=True)
class JournalSection:
    dir: Path | None = setting(
        None, "journal files journal and kernel_events read (default: the system journal)", check=_dir
    )


@dataclass(frozen=True, kw_only=True)
class ServicesSection:
    restart_allowlist: tuple[str, ...] | None = setting(None, "the units restart_service may restart", check=unit_names)


def _host_paths(paths: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    """Absolute paths on a host (this machine or an inventory host), normalised; none need exist here."""
    for i, p in enumerate(paths):
        if not p.startswith("/"):
            r.problem(f"{p!r} must be an absolute path", f"{key}[{i}]")
    return tuple(posixpath.normpath(p) for p in paths if p.startswith("/"))


@dataclass(frozen=True, kw_only=True)
class FilesSection:
    read_dirs: tuple[str, ...] | None = setting(
        None, "the directories read_file reads (default /etc)", check=_host_paths
    )
    usage_dirs: tuple[str, ...] | None = setting(
        None, "the directories disk_usage lists (default: the host's mount points)", check=_host_paths
    )
    deny: tuple[str, ...] | None = setting(
        None, "paths both refuse, beyond their built-in deny-list", check=_host_paths
    )


@dataclass(frozen=True, kw_only=True)
class PrometheusSection:
    url: str | None = setting(None, "the Prometheus the query tools ask", kind="url")


@dataclass(frozen=True, kw_only=True)
class HttpSection:
    timeout_s: float | None = setting(None, "check_url's timeout", unit="s")
    ca_file: Path | None = setting(None, "an extra CA bundle for check_url (an internal CA)", check=_file)
    allow: tuple[str, ...] | None = setting(None, "hosts and networks opened beyond the public ones", check=_allowlist)
    dns_servers: tuple[str, ...] | None = setting(
        None, "the DNS servers dns_lookup asks from the bot (default: the system's)", check=_dns_servers
    )


def _section(config: Reader, cls: type[S], key: str) -> S:
    return (read(cls, config.at(key)) if config.has(key) else None) or cls()


def read_context(config: Reader) -> ToolContext:
    """The ToolContext the built-in tools get, from [tools.logs], [tools.journal], [tools.services], [tools.files],
    [tools.prometheus], [tools.http] of a reader of [tools]: every problem recorded on it."""
    if not config.is_table():
        return ToolContext()
    logs = _section(config, LogsSection, "logs")
    journal = _section(config, JournalSection, "journal")
    services = _section(config, ServicesSection, "services")
    files = _section(config, FilesSection, "files")
    prometheus = _section(config, PrometheusSection, "prometheus")
    http = _section(config, HttpSection, "http")
    values: dict[str, Any] = {
        "log_dirs": logs.dirs,
        "journal_dir": journal.dir,
        "restart_allowlist": services.restart_allowlist,
        "read_dirs": files.read_dirs,
        "usage_dirs": files.usage_dirs,
        "denied_paths": files.deny,
        "prometheus_url": prometheus.url.rstrip("/") if prometheus.url else None,
        "http_timeout_s": http.timeout_s,
        "http_ca_file": http.ca_file,
        "http_allow": parse_allowlist(list(http.allow)) if http.allow is not None else None,
        "dns_servers": tuple(server_address(s) for s in http.dns_servers) if http.dns_servers else None,
    }
    return ToolContext(**{k: v for k, v in values.items() if v is not None})


# -- sources of tools ----------------------------------------------------------------------------


def module_tools(module: ModuleType) -> list[Tool]:
    """The Tool objects a module exposes (its __all__, else its public attributes), in order."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found: list[Tool] = []
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, Tool) and all(value is not t for t in found):
            found.append(value)
    return found


def _load_modules(names: list[str], config: Reader) -> list[tuple[Tool, str]]:
    loaded: list[tuple[Tool, str]] = []
    for i, name in enumerate(names):
        where = f"tools.modules[{i}]"
        try:
            module = importlib.import_module(name)
        except Exception as e:
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            config.problems.append(f"{where}: cannot import {name!r}: {last}")
            continue
        tools = module_tools(module)
        if not tools:
            config.problems.append(f"{where}: module {name!r} defines no @tool functions")
        loaded.extend((t, where) for t in tools)
    return loaded


def parse_command(entry: Any, where: str, *, base_dir: Path) -> RunbookCommand:
    """One [[tools.commands]] entry, checked: placeholders match params, patterns compile, no shell tricks."""
    r = Reader(entry, where, base_dir=base_dir)
    found = read_command(r) if r.is_table() else None
    r.raise_if_problems(ToolConfigError)
    assert found is not None
    return found


def read_command(r: Reader) -> RunbookCommand | None:
    """One [[tools.commands]] entry; its {placeholders} checked against its params."""
    command = read(RunbookCommand, r, cwd=r.base_dir)
    if command is None:
        return None
    raw = r.table.get("params")  # a param with a problem is still declared: no second problem where it is used
    declared = set(raw) if isinstance(raw, Mapping) else set()
    used: set[str] = set()
    for i, element in enumerate(command.argv):
        for pname in placeholders(element):
            if pname not in declared:
                r.problem(f"{{{pname}}} is not declared in params", f"command[{i}]")
            used.add(pname)
    for pname in sorted(declared - used) if command.argv else ():
        r.problem("declared but not used in command", f"params.{pname}")
    return command


def read_mcp_server(r: Reader) -> Any:
    from tools.mcp import MCPServerSpec  # the MCP SDK is imported only when a server is configured

    spec = read(MCPServerSpec, r, cwd=r.base_dir)
    if spec is not None and r.has("command") == r.has("url"):
        r.problem("give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        return None
    return spec


async def _connect_mcp(spec: Any, where: str, registry: ToolRegistry) -> list[Tool]:
    from tools.mcp import MCPConnection, describe_error, mcp_tools

    conn = MCPConnection(spec)
    try:
        listing = await conn.start()
    except TimeoutError:
        raise ToolConfigError(
            f"{where} ({spec.name}): no answer from the server within {spec.connect_timeout_s:g}s"
        ) from None
    except Exception as e:
        raise ToolConfigError(f"{where} ({spec.name}): cannot connect: {describe_error(e)}") from e
    registry.push_async_callback(conn.close)
    tools = mcp_tools(conn, listing)
    if spec.include is not None:
        offered = {t.name for t in listing}
        missing = [n for n in spec.include if n not in offered]
        if missing:
            raise ToolConfigError(f"{where}.include: the server has no tool {missing[0]!r}")
    return tools


def _per_tool(
    config: Reader, key: str, tools: list[tuple[Tool, str]], change: Callable[[Tool, Reader], Tool | None]
) -> list[tuple[Tool, str]]:
    """Apply a `[tools.<key>]` table of `tool name = value` entries, each through `change(tool, reader)`."""
    if not config.has(key):
        return tools
    by_name = {t.name: i for i, (t, _) in enumerate(tools)}
    out = list(tools)
    for name, value in config.at(key).entries():
        if name not in by_name:
            value.problem("no such tool")
            continue
        i = by_name[name]
        changed = change(out[i][0], value)
        if changed is not None:
            out[i] = (changed, out[i][1])
    return out


def _set_category(current: Tool, value: Reader) -> Tool | None:
    """[tools.categories]: raise a tool's category; an MCP tool's is set exactly (its hints are only a guess)."""
    text = value.str()
    if text is None:
        return None
    if text not in _CATEGORIES:
        value.problem(f"{text!r} is not a category ({', '.join(_CATEGORIES)})")
        return None
    category = Category(text)
    if current.source.startswith("mcp:"):
        from tools.mcp import with_operator_category

        return with_operator_category(current, category)
    if category.rank < current.category.rank:
        value.problem(f"cannot lower {current.category.value} to {category.value} (categories may only be raised)")
        return None
    return current.with_category(category)


def _set_timeout(current: Tool, value: Reader) -> Tool | None:
    """[tools.timeouts]: a tool's timeout in seconds, by name (any source)."""
    timeout_s = value.seconds()
    return None if timeout_s is None else dataclasses.replace(current, timeout_s=timeout_s)


async def build_registry(
    table: Mapping[str, Any] | None = None,
    *,
    base_dir: Path | None = None,
    reaches: Mapping[str, Any] | None = None,
    shared: Mapping[type, object] | None = None,
) -> ToolRegistry:
    """The registry for a [tools] table and the configured reaches (tools.reaches.read_reaches: name -> parsed
    config): module tools bound to their context, each configured reach's tools and resources, runbook commands,
    MCP servers. `shared` are resources the app hands every tool and reach (its Store, which incident memory
    reads); a reach with an `offer` has it collected in `registry.offerers`, its `services` in `registry.services`,
    its `at_end` write in `registry.at_end`.

    The registry owns the MCP connections and what the reaches opened: `await registry.aclose()` when done. On a
    ToolConfigError (every problem found, one per line) whatever was already opened is closed before it is raised.
    """
    from tools.reaches import REACHES

    config = Reader(table if table is not None else {}, "tools", base_dir=base_dir)
    if config.is_table():
        config.only(_TOP_KEYS)
    ctx = read_context(config)
    configured = {r.name: (r, reaches[r.name]) for r in REACHES if reaches and reaches.get(r.name) is not None}
    names = config.str_list("modules", list(DEFAULT_MODULES))
    for reach in REACHES:
        for module in reach.modules:
            if reach.name in configured and module not in names:
                names.append(module)  # a reach's tools are offered whenever its section is present
            elif reach.name not in configured and module in names:
                config.problem(f"{module!r} is listed but no {reach.hint} is configured", "modules")
    registry = ToolRegistry()
    try:
        resources: dict[type, object] = dict(shared or {})  # what the app shares with every reach (its Store)
        for reach, parsed in configured.values():
            opened = reach.open(parsed)
            registry.push_async_callback(functools.partial(reach.aclose, opened))
            resources.update(opened)
            if (offer := getattr(reach, "offer", None)) is not None:
                registry.offerers.append(functools.partial(offer, parsed, resources))
            if (services := getattr(reach, "services", None)) is not None:
                registry.services.extend(services(parsed, resources))
            if (at_end := getattr(reach, "at_end", None)) is not None:
                registry.at_end.append(at_end(parsed))
            if (environment := getattr(reach, "environment", None)) is not None:
                registry.environment.extend(environment(parsed))
        ctx = dataclasses.replace(ctx, resources=resources)
        loaded = _load_modules(names, config)
        bound = [t.bind(ctx) for t, _ in loaded]
        for reach, parsed in configured.values():
            bound = reach.bind_tools(parsed, bound)
        collected = [(t, where) for t, (_, where) in zip(bound, loaded, strict=True)]
        for entry in config.items("commands", header="tools.commands"):
            if (command := read_command(entry)) is not None:
                collected.append((command_tool(command), entry.location))
        specs = [
            (spec, entry.location)
            for entry in config.items("mcp", header="tools.mcp")
            if (spec := read_mcp_server(entry)) is not None
        ]
        config.raise_if_problems(ToolConfigError)  # nothing is connected to a config with problems
        for spec, where in specs:
            collected.extend((t, where) for t in await _connect_mcp(spec, where, registry))
        first_source: dict[str, str] = {}
        clashes: set[tuple[str, str]] = set()  # one problem per pair of sources, naming the first name they share
        for t, where in collected:
            if t.name in first_source and (where, first_source[t.name]) not in clashes:
                clashes.add((where, first_source[t.name]))
                config.problems.append(
                    f"{where}: duplicate tool name {t.name!r} (already defined by {first_source[t.name]})"
                )
            first_source.setdefault(t.name, where)
        collected = _per_tool(config, "categories", collected, _set_category)
        collected = _per_tool(config, "timeouts", collected, _set_timeout)
        config.raise_if_problems(ToolConfigError)
        for t, where in collected:
            try:
                registry.register(t)
            except ValueError as e:
                raise ToolConfigError(f"{where}: {e}") from None
        registry.environment.extend(_builtin_environment(ctx, registry))
    except BaseException:
        await registry.aclose()
        raise
    return registry


def _builtin_environment(ctx: ToolContext, registry: ToolRegistry) -> list[str]:
    """The environment lines of the directories the built-in tools read: [tools.logs] dirs and [tools.files]
    read_dirs and usage_dirs, each when a tool reading it is registered, each list bounded (some_names)."""
    modules = {t.fn.__module__ for t in registry if t.fn is not None}

    def where(key: str) -> str:
        return f"this machine, and inventory hosts that set no {key} of their own"

    lines = []
    if LOG_TOOLS_MODULE in modules:
        lines.append(f"Log directories ({where('log_dirs')}): {some_names([str(d) for d in ctx.log_dirs])}")
    if READ_FILE_MODULE in modules:
        lines.append(f"read_file reads under ({where('read_dirs')}): {some_names(list(ctx.read_dirs))}")
    if DISK_USAGE_MODULE in modules:
        usage = some_names(list(ctx.usage_dirs)) if ctx.usage_dirs is not None else "every mount point"
        lines.append(f"disk_usage lists under ({where('usage_dirs')}): {usage}")
    return lines


def tool_table(registry: ToolRegistry) -> list[dict[str, Any]]:
    """One row per tool for `opsloop check`: name, category, parallel, source."""
    return [
        {"name": t.name, "category": t.category.value, "parallel": t.parallel, "source": t.source} for t in registry
    ]
