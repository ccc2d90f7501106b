"""The vocabulary every tool module shares: categories, the two errors, the context built-in tools get, and
how a result becomes the text the model reads. Below the registry, the worker and the command runner alike."""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from bot.core.errors import ConfigError, OpsloopError
from bot.core.redact import redact, redact_slice
from tools.netguard import HostAllowlist, Resolver, system_resolver

if TYPE_CHECKING:
    import aiohttp

MAX_OUTPUT_CHARS = 12_000
SUMMARY_TOOL = "update_summary"  # the living summary's tool (bot/run/summary.py)
# The tools the runtime adds to every run's tools block itself, beside the registry's. The Messages API refuses a
# request with two tools of one name, so a registry refuses these names (ToolRegistry.register).
RUNTIME_TOOLS = frozenset({SUMMARY_TOOL})
DEFAULT_TIMEOUT_S = 60.0  # every call has one; see tool() for what happens when it runs out
R = TypeVar("R")


class Category(enum.StrEnum):
    """How much a tool can change; the values are what config files and Slack cards show."""

    READ_ONLY = "read_only"
    MUTATING = "mutating"
    DESTRUCTIVE = "destructive"

    @property
    def rank(self) -> int:
        """read_only < mutating < destructive: config may raise a category, never lower it."""
        return list(Category).index(self)


class ToolError(OpsloopError):
    """A recoverable failure: it goes back to the model as an is_error tool_result."""


class BadCall(ToolError):
    """The call itself is wrong: what it names does not exist (a file, a unit, a host, an object) or an argument is
    invalid. The model can fix the call from the message, so it does not count toward the consecutive-error stop."""


class PermissionDenied(OpsloopError):
    """A policy refusal: fatal, the runtime stops the run rather than let the model work around it."""


@dataclass(frozen=True)
class ToolContext:
    """What the built-in tools depend on, from the [tools] config; injected into a `ctx: ToolContext` parameter."""

    log_dirs: tuple[Path, ...] = (Path("/var/log"),)
    restart_allowlist: tuple[str, ...] = ()
    journal_dir: Path | None = None  # [tools.journal] dir: journal files journalctl reads here; None: the system's
    read_dirs: tuple[str, ...] = ("/etc",)  # [tools.files]: where read_file reads (a host's read_dirs overrides it)
    usage_dirs: tuple[str, ...] | None = None  # where disk_usage lists; None: every mount point of the host
    denied_paths: tuple[str, ...] = ()  # refused by read_file and disk_usage beyond their built-in deny-lists
    prometheus_url: str | None = None
    http_timeout_s: float = 10.0
    http_ca_file: Path | None = None  # extra CA bundle for check_url (an internal CA)
    http_allow: HostAllowlist = field(default_factory=HostAllowlist)  # [tools.http] allow: opened beyond public
    http_resolver: Resolver = field(default=system_resolver, compare=False)  # check_url's DNS; tests pass a stub
    http_trace_configs: tuple[aiohttp.TraceConfig, ...] = field(default=(), compare=False)  # watch check_url requests
    dns_servers: tuple[tuple[str, int], ...] = ()  # [tools.http] dns_servers: (address, port); () = the system's
    # What the configured reaches opened (tools/reaches.py), keyed by type: an Inventory, an SshPool, KubeClusters.
    # A worker process gets the picklable ones only (the inventory, never a pool of live connections).
    resources: Mapping[type, object] = field(default_factory=dict, hash=False)

    def resource(self, kind: type[R]) -> R | None:
        """The resource of type `kind` a reach opened, or None when that reach is not configured."""
        found = self.resources.get(kind)
        return found if isinstance(found, kind) else None

    def require(self, kind: type[R], missing: str) -> R:
        """The resource of type `kind`; ToolError saying `missing` when its reach is not configured."""
        found = self.resource(kind)
        if found is None:
            raise ToolError(missing)
        return found


@dataclass(frozen=True, kw_only=True)
class RunScope:
    """What a tool may know of the run calling it: set by the runtime for the whole drive (a context variable,
    so it follows every call, parallel ones included), read with `current_run()`. In-process tools only: a
    worker process does not see it.

    `conversation` is where the run's thread is (a Slack channel id): what a private conversation's data may be
    shown in; `thread_ts` the thread itself (None: unknown). `anchor` is what "before" means: the alert's start
    for an alert run, else the run's start."""

    run_id: str
    conversation: str
    started_at: float  # epoch seconds
    anchor: float  # epoch seconds
    task: str = ""
    alertname: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    thread_ts: str | None = None


ENVIRONMENT_NAMES_MAX = 20  # an environment line names at most this many, then says how many more


def some_names(names: Sequence[str], limit: int = ENVIRONMENT_NAMES_MAX) -> str:
    """`names` joined for an environment line, the first `limit` of them and "and N more"."""
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown


@dataclass(frozen=True)
class Link:
    """A link in an offer's thread line: `label` is shown (escaped like every post), `url` is where it goes."""

    url: str
    label: str


@dataclass(frozen=True, kw_only=True)
class Offer:
    """What a reach offers a run at its start (past incidents, the team's runbook): `prompt` goes to the model
    in the run's first user turn (marked as data, never instructions), `thread_line` in the thread: plain text
    and Links, which the Slack side redacts and escapes like every post. Either may be empty."""

    source: str  # the reach's name: one thread line per source and run
    prompt: str = ""
    thread_line: tuple[str | Link, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the Slack side knows of a run's conversation, for what a reach writes in the transaction that ends
    the run (incident memory's record): the conversation's kind as conversations.info said it
    (public/private/im/mpim; None: unknown, kept as private), the thread's link, an alert run's labels."""

    kind: str | None
    permalink: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


# What a reach writes in the transaction that ends a run (incident memory's record): called on the store's
# thread with (the ledger, the run id, what Slack knows of its conversation); SQL only, no waiting.
AtEnd = Callable[[Any, str, RunFacts], None]


class Service(Protocol):
    """Something a reach runs for the life of the app (its webhook, its retention sweep), next to the runs: the
    app starts every configured reach's services once runs can start, and closes them first on the way down."""

    name: str  # as a bind failure names it: "changes.webhook on 127.0.0.1:9095"

    async def start(self) -> None:
        """Begin (bind, start its task); an OSError from binding stops start-up with `name` in the message."""
        ...

    async def close(self) -> None: ...


_RUN: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar("opsloop_run", default=None)


def current_run() -> RunScope | None:
    """The run calling this tool (None outside a run: `opsloop check`, a test calling a tool directly)."""
    return _RUN.get()


@contextlib.contextmanager
def run_scope(scope: RunScope | None) -> Iterator[None]:
    """Tools called inside see `scope` as current_run()."""
    token = _RUN.set(scope)
    try:
        yield
    finally:
        _RUN.reset(token)


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and the tail of `text` within `limit` chars; the middle becomes a note saying how much went.

    Bounded first, then redacted: only the two kept windows are scanned (bot.core.redact.redact_slice), so the cost
    does not grow with the output, and a secret crossing either cut goes whole, never half of it."""
    total = len(text)
    if total <= limit:
        text = redact(text)
        total = len(text)  # a placeholder can be longer than the secret it hides
        if total <= limit:
            return text

    def note(cut: int) -> str:
        return f"\n… [truncated {cut} chars of {total}] …\n"

    keep = limit - len(note(total))  # the longest the note can be, so the result never exceeds limit
    if keep <= 0:
        return redact_slice(text, 0, limit)[:limit]
    head = (keep + 1) // 2
    tail = keep - head
    kept_head = redact_slice(text, 0, head)[:head]  # redacted text can be cut anywhere: nothing secret is left
    kept_tail = redact_slice(text, total - tail, total)[-tail:] if tail else ""
    return kept_head + note(total - len(kept_head) - len(kept_tail)) + kept_tail


def bounded_text(text: str) -> str:
    """`text` as it is when it fits in an output, else truncated (and redacted) like one."""
    return text if len(text) <= MAX_OUTPUT_CHARS else truncate_output(text)


def render_result(result: Any) -> str:
    """A tool's return value as the text the model reads: str as is, bytes decoded, anything else as JSON."""
    if isinstance(result, str):
        return result
    if result is None:
        return "(no output)"
    if isinstance(result, bytes):
        return result.decode("utf-8", errors="replace")
    return json.dumps(result, ensure_ascii=False, default=str)


def exception_text(e: BaseException) -> str:
    """`Type: message` (or just `Type`), the text an unexpected exception becomes for the model."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@dataclass(frozen=True)
class WorkerTarget:
    """Where a worker process finds a function: `module.tool_attr` is the Tool, `role` its impl, preview or guard."""

    module: str
    tool_attr: str
    role: str  # "impl" | "preview" | "guard"


class ToolConfigError(ConfigError):
    """The [tools] config is wrong; the message starts with the location, e.g. `tools.commands[0].name:`.

    A ConfigError: whoever catches config errors catches the tools' too."""

    def __init__(self, problems: str | list[str]) -> None:
        super().__init__([problems] if isinstance(problems, str) else problems)
