"""The tool API: Tool, @tool and ToolRegistry (Category, the two errors and ToolContext come from tools.api and
are re-exported here).

The rule for every tool's timeout (see `tool()`): CPU-heavy or blocking work never runs where it
can stall the event loop, and a call that overruns its timeout is killed, not abandoned.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import hashlib
import inspect
import json
import logging
import pickle
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import jsonschema

from tools.api import (
    DEFAULT_TIMEOUT_S,
    MAX_OUTPUT_CHARS,
    RUNTIME_TOOLS,
    AtEnd,
    Category,
    Offer,
    PermissionDenied,
    RunScope,
    Service,
    ToolContext,
    ToolError,
    WorkerTarget,
    bounded_text,
    exception_text,
    render_result,
    truncate_output,
)
from tools.process import processes_killed
from tools.schema import Parameter, call_arguments, function_schema
from tools.worker import run_in_worker

_log = logging.getLogger(__name__)

__all__ = [  # the names tools.api defines are re-exported: tools.registry stays the one import for a tool
    "DEFAULT_TIMEOUT_S",
    "MAX_OUTPUT_CHARS",
    "Category",
    "Implementation",
    "PermissionDenied",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "WorkerTarget",
    "argument_echo",
    "bounded_text",
    "exception_text",
    "render_result",
    "tool",
    "truncate_output",
]

HIDDEN_PARAMS = ("confirmed_by", "approved_preview")  # injected by the runtime, never shown to the model
TOOL_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Implementation:
    """How to call one function behind a tool (or behind its dry run)."""

    fn: Callable[..., Any]
    parameters: tuple[Parameter, ...] | None  # None: validated arguments are passed through as they are
    ctx_param: str | None = None
    takes_confirmed_by: bool = False
    takes_preview: bool = False  # receives `approved_preview`: the dry-run text the human approved
    worker: WorkerTarget | None = None  # set: runs in a child process that is killed on timeout

    async def call(
        self, args: Mapping[str, Any], ctx: ToolContext, confirmed_by: str | None, approved_preview: str | None = None
    ) -> Any:
        kwargs = dict(args) if self.parameters is None else call_arguments(self.parameters, args)
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = _portable(ctx) if self.worker else ctx
        if self.takes_confirmed_by:
            kwargs["confirmed_by"] = confirmed_by
        if self.takes_preview:
            kwargs["approved_preview"] = approved_preview
        if self.worker is not None:
            return await run_in_worker(self.worker, kwargs)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        # A sync tool that is not isolated runs in a thread: on timeout the thread cannot be killed and
        # finishes on its own. Built-ins never do this (see tool()); isolated=True runs it in a process.
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def _portable(ctx: ToolContext) -> ToolContext:
    """`ctx` for a worker process: a field that cannot be pickled (a test's stub resolver, say) gets its default,
    and of the resources only the picklable ones go (the inventory, never a pool of live connections)."""
    defaults = ToolContext()
    fields = (f.name for f in dataclasses.fields(ctx) if f.name != "resources")
    changes = {name: getattr(defaults, name) for name in fields if not _picklable(getattr(ctx, name))}
    resources = {k: v for k, v in ctx.resources.items() if _picklable(v)}
    return dataclasses.replace(ctx, resources=resources, **changes)


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


# The last dry-run preview produced in this task (tool name, arguments digest, text). The runtime previews a
# destructive call, asks for approval and runs it in one task, so a tool taking `approved_preview` gets the
# very text the approval was bound to, even when no caller passes it explicitly.
_SHOWN_PREVIEW: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "opsloop_shown_preview", default=None
)


def _args_digest(args: Mapping[str, Any]) -> str:
    canonical = json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class Tool:
    """One registered tool, whatever its source: a @tool function, a runbook command or an MCP server's tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    category: Category  # no default: what a tool may change is always declared
    parallel: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    idempotent: bool = False
    source: str = "builtin"  # "builtin", "module:<mod>", "command", "mcp:<server>"
    has_dry_run: bool = False
    _: dataclasses.KW_ONLY
    impl: Implementation | None = field(default=None, repr=False, compare=False)
    preview: Implementation | None = field(default=None, repr=False, compare=False)
    guard: Implementation | None = field(default=None, repr=False, compare=False)
    ctx: ToolContext | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.category = Category(self.category)
        self.has_dry_run = self.has_dry_run or self.preview is not None

    @property
    def fn(self) -> Callable[..., Any] | None:
        """The function behind the tool (None for a tool built without one)."""
        return self.impl.fn if self.impl else None

    def api_schema(self) -> dict[str, Any]:
        """The tool as the Messages API wants it; a fresh copy, so a caller may add cache_control to it."""
        return {"name": self.name, "description": self.description, "input_schema": copy.deepcopy(self.input_schema)}

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Check `args` against the input schema; ToolError naming every offending field."""
        if not isinstance(args, Mapping):
            raise ToolError(f"invalid arguments for {self.name}: expected a JSON object, got {type(args).__name__}")
        instance = dict(args)
        validator_cls = jsonschema.validators.validator_for(self.input_schema, default=jsonschema.Draft202012Validator)
        try:
            found = list(validator_cls(self.input_schema).iter_errors(instance))
        except jsonschema.SchemaError as e:
            raise ToolError(f"{self.name} has an invalid input schema: {e.message}") from None
        errors = sorted(found, key=lambda e: list(map(str, e.path)))
        if errors:
            raise ToolError(f"invalid arguments for {self.name}: " + "; ".join(_describe(e) for e in errors))
        return instance

    async def run(
        self, args: Mapping[str, Any], *, confirmed_by: str | None = None, approved_preview: str | None = None
    ) -> str:
        """Validate and call the tool with its timeout; the output is text, truncated to MAX_OUTPUT_CHARS.

        A tool that takes `approved_preview` gets `approved_preview`, else the preview its dry run last
        produced in this task for these same arguments; with neither it refuses (PermissionDenied).
        """
        valid = self.validate(args)
        if self.impl is None:
            raise ToolError(f"{self.name} has no implementation")
        if self.impl.takes_confirmed_by and not confirmed_by:
            raise PermissionDenied(f"{self.name} requires an approver: it was called without confirmed_by")
        if self.impl.takes_preview and approved_preview is None:
            shown = _SHOWN_PREVIEW.get()
            if shown is None or shown[:2] != (self.name, _args_digest(valid)):
                raise PermissionDenied(
                    f"{self.name} runs only what an approved dry-run preview listed, and no preview was shown "
                    "for this call"
                )
            approved_preview = shown[2]
        return await self._execute(self.impl, valid, confirmed_by, approved_preview)

    @overload
    def dry_run(self, fn_or_args: F) -> F: ...
    @overload
    def dry_run(self, fn_or_args: Mapping[str, Any]) -> Coroutine[Any, Any, str | None]: ...
    def dry_run(self, fn_or_args: Any) -> Any:
        """Two uses: `@my_tool.dry_run` attaches a preview function (mutating and destructive tools);
        `await my_tool.dry_run(args)` returns the preview text, or None when the tool has none."""
        if callable(fn_or_args) and not isinstance(fn_or_args, Mapping):
            self._attach_preview(fn_or_args)
            return fn_or_args
        return self._run_preview(fn_or_args)

    def precheck(self, fn: F) -> F:
        """`@my_tool.precheck` attaches a policy check that runs before anyone is asked to approve:
        it raises PermissionDenied (or ToolError) for calls no approval could make acceptable."""
        self.guard = self._before_approval(fn, "precheck", "a precheck", "guard")
        return fn

    async def check(self, args: Mapping[str, Any]) -> None:
        """Run the precheck, if any, on validated arguments (before the confirm gate)."""
        if self.guard is None:
            return
        await self._execute(self.guard, _taken(self.guard, self.validate(args)), None)

    def bind(self, ctx: ToolContext) -> Tool:
        """A copy of this tool that receives `ctx` (tools with no ToolContext parameter ignore it)."""
        return dataclasses.replace(self, ctx=ctx)

    def with_category(self, category: Category) -> Tool:
        """A copy at a higher category (never lower). Raised to destructive without a dry run, the
        preview is an echo of the arguments; raised above read-only, it no longer runs in parallel."""
        category = Category(category)
        if category.rank < self.category.rank:
            raise ValueError(f"{self.name}: cannot lower category {self.category.value!r} to {category.value!r}")
        preview = self.preview
        if category is Category.DESTRUCTIVE and preview is None:
            preview = Implementation(fn=argument_echo(self.name), parameters=None)
        return dataclasses.replace(
            self,
            category=category,
            parallel=self.parallel and category is Category.READ_ONLY,
            preview=preview,
            has_dry_run=preview is not None,
        )

    # -- internals ---------------------------------------------------------------------------

    def _attach_preview(self, fn: Callable[..., Any]) -> None:
        if self.category is Category.READ_ONLY:
            raise ValueError(f"{self.name}: dry_run is for mutating and destructive tools (this one is read-only)")
        self.preview = self._before_approval(fn, "dry_run", "a dry run", "preview")
        if self.impl is not None and self.impl.parameters is not None and self.preview.parameters is not None:
            known = {p.name for p in self.impl.parameters}
            unknown = [p.name for p in self.preview.parameters if p.name not in known]
            if unknown:
                raise TypeError(f"{self.name}.dry_run: parameters {unknown} are not parameters of {self.name}")
        self.has_dry_run = True

    def _before_approval(self, fn: Callable[..., Any], label: str, what: str, role: str) -> Implementation:
        """A dry run's or precheck's Implementation: it runs before approval, so it takes no HIDDEN_PARAMS; an
        isolated tool's sync one runs in a worker process too."""
        schema = function_schema(fn, hide=_is_hidden, tool_name=f"{self.name}.{label}")
        for name in HIDDEN_PARAMS:
            if name in schema.hidden:
                raise TypeError(f"{self.name}.{label}: {what} happens before approval, it cannot take {name}")
        worker = self.impl.worker if self.impl is not None and not inspect.iscoroutinefunction(fn) else None
        return Implementation(
            fn=fn,
            parameters=schema.parameters,
            ctx_param=_ctx_param(fn, schema.hidden),
            worker=dataclasses.replace(worker, role=role) if worker is not None else None,
        )

    async def _run_preview(self, args: Mapping[str, Any]) -> str | None:
        if self.preview is None:
            return None
        full = self.validate(args)
        text = await self._execute(self.preview, _taken(self.preview, full), None)
        _SHOWN_PREVIEW.set((self.name, _args_digest(full), text))
        return text

    async def _execute(
        self, impl: Implementation, args: dict[str, Any], confirmed_by: str | None, approved_preview: str | None = None
    ) -> str:
        deadline = asyncio.timeout(self.timeout_s)
        killed_before = processes_killed()
        try:
            async with deadline:
                result = await impl.call(args, self.ctx or ToolContext(), confirmed_by, approved_preview)
        except (ToolError, PermissionDenied) as e:
            if len(message := str(e)) <= MAX_OUTPUT_CHARS:
                raise
            kind = ToolError if isinstance(e, ToolError) else PermissionDenied
            raise kind(bounded_text(message)) from e  # a message as long as an output is bounded like one
        except TimeoutError as e:
            if deadline.expired():
                killed = impl.worker is not None or processes_killed() > killed_before
                stopped = " (its process was killed)" if killed else ""
                raise ToolError(f"{self.name} timed out after {self.timeout_s:g}s{stopped}") from None
            raise ToolError(bounded_text(exception_text(e))) from e
        except Exception as e:
            raise ToolError(bounded_text(exception_text(e))) from e
        return truncate_output(render_result(result))


def _taken(impl: Implementation, valid: dict[str, Any]) -> dict[str, Any]:
    """The validated arguments `impl` takes (all of them when it declares none)."""
    if impl.parameters is None:
        return valid
    wanted = {p.name for p in impl.parameters}
    return {k: v for k, v in valid.items() if k in wanted}


def _describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    prefix = f"{where}: " if where else ""
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        expected = ", ".join(sorted(known)) or "none"
        return f"{prefix}unexpected argument {', '.join(map(repr, extra))} (expected: {expected})"
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [r for r in error.validator_value if r not in error.instance]
        return f"{prefix}missing required argument {', '.join(map(repr, missing))}"
    return f"{where or '(arguments)'}: {error.message}"


def argument_echo(tool_name: str) -> Callable[..., Awaitable[str]]:
    """A stand-in preview for a destructive tool with no dry run of its own: what the call would send."""

    async def echo(**args: Any) -> str:
        rendered = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=str)
        return f"no dry-run available; the call would send: {tool_name} {rendered}"

    return echo


def _is_hidden(name: str, annotation: Any) -> bool:
    return name in HIDDEN_PARAMS or annotation is ToolContext


def _ctx_param(fn: Callable[..., Any], hidden: tuple[str, ...]) -> str | None:
    names = [n for n in hidden if n not in HIDDEN_PARAMS]
    if len(names) > 1:
        raise TypeError(f"{fn.__name__}: more than one ToolContext parameter: {names}")
    return names[0] if names else None


def _make_tool(
    fn: Callable[..., Any],
    *,
    category: Category | None,
    parallel: bool,
    timeout_s: float,
    idempotent: bool,
    name: str | None,
    isolated: bool,
) -> Tool:
    tool_name = name or fn.__name__
    if not TOOL_NAME_RE.fullmatch(tool_name):
        raise ValueError(f"tool name {tool_name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
    if category is None:
        raise TypeError(
            f"{tool_name}: @tool needs an explicit category (category=Category.READ_ONLY, MUTATING or "
            "DESTRUCTIVE); there is no default, so a tool never skips approval by omission"
        )
    category = Category(category)
    if parallel and category is not Category.READ_ONLY:
        raise ValueError(f"{tool_name}: only read-only tools may run in parallel")
    if not timeout_s > 0:
        raise ValueError(f"{tool_name}: timeout_s must be positive")
    schema = function_schema(fn, hide=_is_hidden, tool_name=tool_name)
    signature = inspect.signature(fn)
    for p in signature.parameters.values():
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"{tool_name}: parameter {p.name!r} is positional-only; tools are called by keyword")
    read_only_refusals = {
        "confirmed_by": "read-only tools are never approved, so they cannot take confirmed_by",
        "approved_preview": "only mutating and destructive tools have an approved dry-run preview to receive",
    }
    for hidden, refusal in read_only_refusals.items():
        if hidden in schema.hidden and signature.parameters[hidden].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{tool_name}: {hidden} must be keyword-only (put it after `*`)")
        if hidden in schema.hidden and category is Category.READ_ONLY:
            raise TypeError(f"{tool_name}: {refusal}")
    if not schema.description:
        raise TypeError(f"{tool_name}: a tool needs a docstring; its first paragraph is what the model reads")
    module = getattr(fn, "__module__", "") or ""
    builtin = module.startswith("tools.builtin")
    is_async = inspect.iscoroutinefunction(fn)
    if isolated and (is_async or fn.__qualname__ != fn.__name__):
        raise TypeError(
            f"{tool_name}: isolated=True is for sync functions defined at module level "
            "(a worker process imports them by name)"
        )
    if builtin and not is_async and not isolated:
        raise TypeError(
            f"{tool_name}: a sync built-in must be isolated=True, so a call that overruns its "
            "timeout is killed rather than left running in a thread"
        )
    return Tool(
        name=tool_name,
        description=schema.description,
        input_schema=schema.input_schema,
        category=category,
        parallel=parallel,
        timeout_s=float(timeout_s),
        idempotent=idempotent,
        source="builtin" if builtin else f"module:{module}",
        impl=Implementation(
            fn=fn,
            parameters=schema.parameters,
            ctx_param=_ctx_param(fn, schema.hidden),
            takes_confirmed_by="confirmed_by" in schema.hidden,
            takes_preview="approved_preview" in schema.hidden,
            worker=WorkerTarget(module, fn.__name__, "impl") if isolated else None,
        ),
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    category: Category = ...,
    parallel: bool = ...,
    timeout_s: float = ...,
    idempotent: bool = ...,
    name: str | None = ...,
    isolated: bool = ...,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    category: Category | None = None,
    parallel: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    idempotent: bool = False,
    name: str | None = None,
    isolated: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a Tool; schema from its signature, description from its docstring.

    `category` is required: a tool declared without one is refused (TypeError naming it) at import.

    Timeouts: every call (and its dry run and precheck) gets `timeout_s` seconds, then the model gets
    "<name> timed out". The rule for every built-in: CPU-heavy or blocking work never runs where it can
    stall the event loop, and a call that overruns its timeout is killed, not abandoned. So an async tool
    only awaits (a subprocess it starts is killed on cancel, see tools.commands.run_argv), and a sync tool
    is `isolated=True`: it runs in a child process (tools.worker) that is SIGKILLed on timeout or Stop.
    A sync tool without isolated=True runs in a thread, which a timeout can only abandon; built-ins are
    refused that way.
    """

    def decorate(f: Callable[..., Any]) -> Tool:
        return _make_tool(
            f,
            category=category,
            parallel=parallel,
            timeout_s=timeout_s,
            idempotent=idempotent,
            name=name,
            isolated=isolated,
        )

    return decorate if fn is None else decorate(fn)


class ToolRegistry:
    """The tools a run may call, in registration order, and the resources (MCP sessions) they hold."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._resources = AsyncExitStack()
        # What the configured reaches offer a run at its start (tools/reach.py: `offer`), in the reaches' order.
        self.offerers: list[Callable[[RunScope], Awaitable[Offer | None]]] = []
        # What the configured reaches run beside the runs (tools/reach.py: `services`); the app starts and closes them.
        self.services: list[Service] = []
        # What the configured reaches write when a run ends (tools/api.py AtEnd), in its ending transaction.
        # What the configured tools and reaches can reach (tools/reach.py: `environment`), lines for the first turn.
        self.environment: list[str] = []
        self.at_end: list[AtEnd] = []
        for t in tools:
            self.register(t)

    def register(self, t: Tool) -> None:
        """Add a tool; ValueError for a bad, duplicate or runtime's own name (RUNTIME_TOOLS: the API would
        refuse every request of every run), or a destructive tool without a dry run."""
        if not isinstance(t, Tool):
            raise TypeError(f"expected a Tool, got {type(t).__name__}")
        if not TOOL_NAME_RE.fullmatch(t.name):
            raise ValueError(f"tool name {t.name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
        if t.name in RUNTIME_TOOLS:
            raise ValueError(f"tool name {t.name!r} is taken by opsloop's own tool, which every run has: rename it")
        if t.name in self._tools:
            raise ValueError(f"duplicate tool name {t.name!r} (from {self._tools[t.name].source} and {t.source})")
        if t.category is Category.DESTRUCTIVE and not t.has_dry_run:
            raise ValueError(f"{t.name} is destructive but has no dry run: add a @{t.name}.dry_run preview")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, item: object) -> bool:
        name = item.name if isinstance(item, Tool) else item
        return isinstance(name, str) and name in self._tools

    def api_schemas(self) -> list[dict[str, Any]]:
        """Every tool's API schema in registration order; equal across calls, so the prompt cache holds."""
        return [t.api_schema() for t in self._tools.values()]

    async def offers(self, scope: RunScope) -> list[Offer]:
        """What each reach offers the run `scope` at its start, asked concurrently (the run's first request waits
        on the slowest); a reach that fails offers nothing, and the run goes on without it."""
        found = await asyncio.gather(*(offer(scope) for offer in self.offerers), return_exceptions=True)
        for failure in (f for f in found if isinstance(f, BaseException)):
            if not isinstance(failure, Exception):
                raise failure
            _log.warning("reach.offer_failed: %s", exception_text(failure))
        return [o for o in found if isinstance(o, Offer) and (o.prompt or o.thread_line)]

    def push_async_callback(self, callback: Callable[[], Awaitable[Any]]) -> None:
        """Run `callback` on aclose() (last pushed, first run)."""
        self._resources.push_async_callback(callback)

    async def aclose(self) -> None:
        """Close MCP sessions and stop their server processes."""
        await self._resources.aclose()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
