"""Build the ToolRegistry from the [tools] table of the config file; every error names where it is."""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tools.api import ToolConfigError
from tools.commands import ENV_NAME_RE, CommandParam, RunbookCommand, command_tool, placeholders
from tools.netguard import AllowlistError, parse_allowlist
from tools.process import BOT_SECRETS
from tools.registry import DEFAULT_TIMEOUT_S, TOOL_NAME_RE, Category, Tool, ToolContext, ToolRegistry

if TYPE_CHECKING:
    from tools.remote.inventory import Inventory, SshCredentials

DEFAULT_MODULES = ("tools.builtin",)
SERVER_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_TOP_KEYS = ("modules", "categories", "timeouts", "logs", "services", "prometheus", "http", "commands", "mcp",
             "kubernetes")  # kubernetes: the top-level [kubernetes] table, which bot.config hands over with [tools]
K8S_MODULE = "tools.k8s"
_COMMAND_KEYS = ("name", "description", "command", "params", "category", "timeout_s", "env")
_PARAM_KEYS = ("pattern", "description")
_MCP_KEYS = ("name", "command", "url", "env", "timeout_s", "connect_timeout_s", "include", "trust_annotations")
_CATEGORIES = ", ".join(c.value for c in Category)


# -- small typed readers -------------------------------------------------------------------------


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ToolConfigError(f"{where}: expected a table, got {_kind(value)}")
    return value


def _only(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = [k for k in table if k not in allowed]
    if unknown:
        raise ToolConfigError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(allowed)})")


def _str(value: Any, where: str, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise ToolConfigError(f"{where}: expected a string, got {_kind(value)}")
    if not empty_ok and not value.strip():
        raise ToolConfigError(f"{where}: must not be empty")
    return value


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ToolConfigError(f"{where}: expected a list of strings, got {_kind(value)}")
    return [_str(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolConfigError(f"{where}: expected a number of seconds, got {_kind(value)}")
    if not value > 0:
        raise ToolConfigError(f"{where}: must be positive, got {value}")
    if not math.isfinite(value):
        raise ToolConfigError(f"{where}: must be a finite number of seconds, got {value}")
    return float(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ToolConfigError(f"{where}: expected true or false, got {_kind(value)}")
    return value


def _env_names(value: Any, where: str) -> tuple[str, ...]:
    names = _str_list(value, where)
    for i, name in enumerate(names):
        if not ENV_NAME_RE.fullmatch(name):
            raise ToolConfigError(f"{where}[{i}]: {name!r} is not an environment variable name")
        if name in BOT_SECRETS:
            raise ToolConfigError(f"{where}[{i}]: {name} is the bot's own secret; runbook commands never get it")
    return tuple(names)


def _category(value: Any, where: str) -> Category:
    text = _str(value, where)
    try:
        return Category(text)
    except ValueError:
        raise ToolConfigError(f"{where}: {text!r} is not a category ({_CATEGORIES})") from None


def _url(value: Any, where: str) -> str:
    url = _str(value, where)
    if not re.match(r"https?://[^/\s]+", url):
        raise ToolConfigError(f"{where}: expected an http:// or https:// URL, got {url!r}")
    return url


def _kind(value: Any) -> str:
    names = {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a float"}
    return names.get(type(value), type(value).__name__)


# -- the context for built-in tools --------------------------------------------------------------


def tool_context(table: Mapping[str, Any] | None = None, *, base_dir: Path | None = None) -> ToolContext:
    """The ToolContext the built-in tools get, from [tools.logs], [tools.services], [tools.prometheus], [tools.http]."""
    table = _table(table or {}, "tools")
    base = base_dir or Path.cwd()
    kwargs: dict[str, Any] = {}
    if "logs" in table:
        logs = _table(table["logs"], "tools.logs")
        _only(logs, ("dirs",), "tools.logs")
        if "dirs" in logs:
            dirs = []
            for i, d in enumerate(_str_list(logs["dirs"], "tools.logs.dirs")):
                path = (base / d).resolve()
                if not path.is_dir():
                    raise ToolConfigError(f"tools.logs.dirs[{i}]: {d!r} is not a directory")
                dirs.append(path)
            if not dirs:
                raise ToolConfigError("tools.logs.dirs: must name at least one directory")
            kwargs["log_dirs"] = tuple(dirs)
    if "services" in table:
        services = _table(table["services"], "tools.services")
        _only(services, ("restart_allowlist",), "tools.services")
        if "restart_allowlist" in services:
            from tools.systemd_units import UNIT_RE

            units = _str_list(services["restart_allowlist"], "tools.services.restart_allowlist")
            for i, unit in enumerate(units):
                if not UNIT_RE.fullmatch(unit):
                    raise ToolConfigError(f"tools.services.restart_allowlist[{i}]: {unit!r} is not a unit name")
            kwargs["restart_allowlist"] = tuple(units)
    if "prometheus" in table:
        prometheus = _table(table["prometheus"], "tools.prometheus")
        _only(prometheus, ("url",), "tools.prometheus")
        if "url" in prometheus:
            kwargs["prometheus_url"] = _url(prometheus["url"], "tools.prometheus.url").rstrip("/")
    if "http" in table:
        http = _table(table["http"], "tools.http")
        _only(http, ("timeout_s", "ca_file", "allow"), "tools.http")
        if "timeout_s" in http:
            kwargs["http_timeout_s"] = _seconds(http["timeout_s"], "tools.http.timeout_s")
        if "ca_file" in http:
            ca = base / _str(http["ca_file"], "tools.http.ca_file")
            if not ca.is_file():
                raise ToolConfigError(f"tools.http.ca_file: {str(ca)!r} is not a file")
            kwargs["http_ca_file"] = ca
        if "allow" in http:
            try:
                kwargs["http_allow"] = parse_allowlist(_str_list(http["allow"], "tools.http.allow"))
            except AllowlistError as e:
                raise ToolConfigError(f"tools.http.allow[{e.index}]: {e}") from None
    if "kubernetes" in table:
        from tools.k8s.clusters import parse_kubernetes  # the Kubernetes client is imported only when configured

        kwargs["kubernetes"] = parse_kubernetes(table["kubernetes"], base_dir=base)
    return ToolContext(**kwargs)


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


def _load_modules(table: Mapping[str, Any]) -> list[tuple[Tool, str]]:
    names = _str_list(table["modules"], "tools.modules") if "modules" in table else list(DEFAULT_MODULES)
    loaded: list[tuple[Tool, str]] = []
    for i, name in enumerate(names):
        where = f"tools.modules[{i}]"
        try:
            module = importlib.import_module(name)
        except Exception as e:
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            raise ToolConfigError(f"{where}: cannot import {name!r}: {last}") from e
        tools = module_tools(module)
        if not tools:
            raise ToolConfigError(f"{where}: module {name!r} defines no @tool functions")
        loaded.extend((t, where) for t in tools)
    return loaded


def parse_command(entry: Any, where: str, *, base_dir: Path) -> RunbookCommand:
    """One [[tools.commands]] entry, checked: placeholders match params, patterns compile, no shell tricks."""
    entry = _table(entry, where)
    _only(entry, _COMMAND_KEYS, where)
    for key in ("name", "description", "command"):
        if key not in entry:
            raise ToolConfigError(f"{where}: missing required key {key!r}")
    name = _str(entry["name"], f"{where}.name")
    if not TOOL_NAME_RE.fullmatch(name):
        raise ToolConfigError(f"{where}.name: {name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
    argv = _str_list(entry["command"], f"{where}.command")
    if not argv:
        raise ToolConfigError(f"{where}.command: must not be empty")
    if placeholders(argv[0]):
        raise ToolConfigError(f"{where}.command[0]: the program itself cannot be a parameter")
    params: dict[str, CommandParam] = {}
    raw_params = _table(entry.get("params", {}), f"{where}.params")
    for pname, spec in raw_params.items():
        pwhere = f"{where}.params.{pname}"
        if not PARAM_NAME_RE.fullmatch(pname) or pname == "confirmed_by":
            raise ToolConfigError(f"{pwhere}: {pname!r} cannot be a parameter name")
        spec = _table(spec, pwhere)
        _only(spec, _PARAM_KEYS, pwhere)
        if "pattern" not in spec:
            raise ToolConfigError(f"{pwhere}: missing required key 'pattern' (every value is checked against one)")
        pattern = _str(spec["pattern"], f"{pwhere}.pattern")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ToolConfigError(f"{pwhere}.pattern: invalid regex {pattern!r}: {e}") from None
        description = _str(spec.get("description", ""), f"{pwhere}.description", empty_ok=True)
        params[pname] = CommandParam(pattern=pattern, description=description)
    used: set[str] = set()
    for i, element in enumerate(argv):
        for pname in placeholders(element):
            if pname not in params:
                raise ToolConfigError(f"{where}.command[{i}]: {{{pname}}} is not declared in params")
            used.add(pname)
    unused = [p for p in params if p not in used]
    if unused:
        raise ToolConfigError(f"{where}.params.{unused[0]}: declared but not used in command")
    return RunbookCommand(
        name=name,
        description=_str(entry["description"], f"{where}.description"),
        argv=tuple(argv),
        params=params,
        category=_category(entry["category"], f"{where}.category") if "category" in entry else Category.MUTATING,
        timeout_s=_seconds(entry["timeout_s"], f"{where}.timeout_s") if "timeout_s" in entry else DEFAULT_TIMEOUT_S,
        cwd=base_dir,
        env=_env_names(entry["env"], f"{where}.env") if "env" in entry else (),
    )


def parse_mcp_server(entry: Any, where: str, *, base_dir: Path) -> Any:
    """One [[tools.mcp]] entry as an MCPServerSpec."""
    from tools.mcp import MCPServerSpec  # the MCP SDK is imported only when a server is configured

    entry = _table(entry, where)
    _only(entry, _MCP_KEYS, where)
    if "name" not in entry:
        raise ToolConfigError(f"{where}: missing required key 'name'")
    name = _str(entry["name"], f"{where}.name")
    if not SERVER_NAME_RE.fullmatch(name):
        raise ToolConfigError(f"{where}.name: {name!r} must match ^[A-Za-z0-9_-]{{1,32}}$")
    if ("command" in entry) == ("url" in entry):
        raise ToolConfigError(f"{where}: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
    command: tuple[str, ...] | None = None
    url: str | None = None
    if "command" in entry:
        command = tuple(_str_list(entry["command"], f"{where}.command"))
        if not command:
            raise ToolConfigError(f"{where}.command: must not be empty")
    else:
        url = _url(entry["url"], f"{where}.url")
    env_table = _table(entry.get("env", {}), f"{where}.env")
    env = {k: _str(v, f"{where}.env.{k}", empty_ok=True) for k, v in env_table.items()}
    include = tuple(_str_list(entry["include"], f"{where}.include")) if "include" in entry else None
    return MCPServerSpec(
        name=name,
        command=command,
        url=url,
        env=env,
        cwd=base_dir,
        timeout_s=_seconds(entry["timeout_s"], f"{where}.timeout_s") if "timeout_s" in entry else DEFAULT_TIMEOUT_S,
        connect_timeout_s=(
            _seconds(entry["connect_timeout_s"], f"{where}.connect_timeout_s")
            if "connect_timeout_s" in entry
            else 30.0
        ),
        include=include,
        trust_annotations=(
            _bool(entry["trust_annotations"], f"{where}.trust_annotations") if "trust_annotations" in entry else False
        ),
    )


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


def _per_tool(table: Mapping[str, Any], key: str, tools: list[tuple[Tool, str]],
              change: Callable[[Tool, Any, str], Tool]) -> list[tuple[Tool, str]]:
    """Apply a `[tools.<key>]` table of `tool name = value` entries, each through `change(tool, value, where)`."""
    if key not in table:
        return tools
    by_name = {t.name: i for i, (t, _) in enumerate(tools)}
    out = list(tools)
    for name, value in _table(table[key], f"tools.{key}").items():
        where = f"tools.{key}.{name}"
        if name not in by_name:
            raise ToolConfigError(f"{where}: no such tool")
        i = by_name[name]
        out[i] = (change(out[i][0], value, where), out[i][1])
    return out


def _set_category(current: Tool, value: Any, where: str) -> Tool:
    """[tools.categories]: raise a tool's category; an MCP tool's is set exactly (its hints are only a guess)."""
    category = _category(value, where)
    if current.source.startswith("mcp:"):
        from tools.mcp import with_operator_category

        return with_operator_category(current, category)
    if category.rank < current.category.rank:
        raise ToolConfigError(
            f"{where}: cannot lower {current.category.value} to {category.value} (categories may only be raised)"
        )
    return current.with_category(category)


def _set_timeout(current: Tool, value: Any, where: str) -> Tool:
    """[tools.timeouts]: a tool's timeout in seconds, by name (any source)."""
    return dataclasses.replace(current, timeout_s=_seconds(value, where))


async def build_registry(table: Mapping[str, Any] | None = None, *, base_dir: Path | None = None,
                         inventory: Inventory | None = None,
                         ssh_credentials: SshCredentials | None = None) -> ToolRegistry:
    """The registry for a [tools] table: module tools bound to their context, runbook commands, MCP servers.

    `inventory` ([ssh] and [[hosts]]) reaches the tools in their context, with an SSH pool for its hosts.
    The registry owns the MCP connections and the SSH pool: `await registry.aclose()` when done. On a
    ToolConfigError every connection already made is closed before it is raised.
    """
    table = _table(table if table is not None else {}, "tools")
    _only(table, _TOP_KEYS, "tools")
    base = base_dir or Path.cwd()
    ctx = tool_context(table, base_dir=base)
    registry = ToolRegistry()
    if inventory is not None and len(inventory):
        from tools.remote.pool import SshPool  # asyncssh is imported only when a host is configured

        pool = SshPool(inventory, ssh_credentials)
        registry.push_async_callback(pool.close)
        ctx = dataclasses.replace(ctx, inventory=inventory, ssh=pool)
    elif inventory is not None:
        ctx = dataclasses.replace(ctx, inventory=inventory)
    if ctx.kubernetes is not None:
        registry.push_async_callback(ctx.kubernetes.aclose)  # one open client per cluster, closed with the registry
    try:
        table = _with_k8s_module(table, ctx)
        from tools.builtin.reach import with_hosts  # `host` descriptions name a small inventory, once per build

        collected = [(with_hosts(t.bind(ctx), ctx.inventory), where) for t, where in _load_modules(table)]
        for i, entry in enumerate(_list(table.get("commands", []), "tools.commands")):
            where = f"tools.commands[{i}]"
            collected.append((command_tool(parse_command(entry, where, base_dir=base)), where))
        specs = [
            (parse_mcp_server(entry, f"tools.mcp[{i}]", base_dir=base), f"tools.mcp[{i}]")
            for i, entry in enumerate(_list(table.get("mcp", []), "tools.mcp"))
        ]
        for spec, where in specs:
            collected.extend((t, where) for t in await _connect_mcp(spec, where, registry))
        first_source: dict[str, str] = {}
        for t, where in collected:
            if t.name in first_source:
                raise ToolConfigError(
                    f"{where}: duplicate tool name {t.name!r} (already defined by {first_source[t.name]})"
                )
            first_source[t.name] = where
        collected = _per_tool(table, "categories", collected, _set_category)
        for t, where in _per_tool(table, "timeouts", collected, _set_timeout):
            try:
                registry.register(t)
            except ValueError as e:
                raise ToolConfigError(f"{where}: {e}") from None
    except BaseException:
        await registry.aclose()
        raise
    return registry


def _with_k8s_module(table: Mapping[str, Any], ctx: ToolContext) -> Mapping[str, Any]:
    """A reach's tools are offered whenever its config section is present: [[kubernetes.clusters]] adds
    tools.k8s to the modules. The module listed without clusters is a config mistake (its tools could do nothing)."""
    names = _str_list(table["modules"], "tools.modules") if "modules" in table else list(DEFAULT_MODULES)
    clusters = ctx.kubernetes is not None and bool(ctx.kubernetes.specs)
    if K8S_MODULE in names and not clusters:
        raise ToolConfigError(f"tools.modules: {K8S_MODULE!r} is listed but no [[kubernetes.clusters]] is configured")
    if clusters and K8S_MODULE not in names:
        return {**table, "modules": [*names, K8S_MODULE]}
    return table


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ToolConfigError(f"{where}: expected a list of tables ([[{where}]]), got {_kind(value)}")
    return value


def tool_table(registry: ToolRegistry) -> list[dict[str, Any]]:
    """One row per tool for `opsloop check`: name, category, parallel, source."""
    return [
        {"name": t.name, "category": t.category.value, "parallel": t.parallel, "source": t.source} for t in registry
    ]
