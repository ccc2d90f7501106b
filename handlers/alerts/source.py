"""What an alert source is (docs/alerts.md; adding one: CONTRIBUTING.md): its typed config under [alerts], and its
live part the desk drives. A source that opens a thread per alert (Alertmanager, a pager) is an `HttpSource`:
it verifies and parses a POST, and says what each notification is as an `Alert`; the shared desk does the rest
(storage before the 200, dedupe, storm control, opening the thread, updates to the run, re-opening, metrics)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.config.reader import Reader, host_and_port, listen_address
from bot.core.errors import OpsloopError
from handlers.alerts.desk import AlertDesk, Inbound


class BadPayload(OpsloopError):
    """An inbound body that is not the source's payload: 400, nothing stored."""


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One notification, as every thread-opening source says it."""

    key: str  # the alert's dedupe key across notifications ("am:<groupKey>"), the store's group key
    status: str  # "firing", "resolved", or "updated" (a change to tell the run that never opens a thread)
    firing: tuple[str, ...]  # what fires now: the same again is a repeat, another set an update for the run
    name: str  # as people say it: "DiskFull" ("" when it has none)
    title: str  # the run's title: "DiskFull web-03 (firing)"
    summary: str  # one line, for the storm thread
    task: str  # what the model gets (outside text: markers quoted, bounded)
    labels: Mapping[str, str] = field(default_factory=dict)  # what every alert of it shares
    link: str | None = None  # where it comes from (a graph, an incident page)
    started_at: float | None = None  # epoch seconds: when it began, the run's "before"
    delivery: str | None = None  # this notification's own id, claimed once (a pager's event id); None: none


class AlertSource(Protocol):
    """One way alerts come in; `config` is what `read` returned."""

    name: str  # its table under [alerts] (`[alerts.webhook]`, `[[alerts.slack]]`) and the metrics' source label

    def read(self, alerts: Reader, env: Mapping[str, str]) -> Any:
        """Its typed config, read from its key of the [alerts] table (every problem recorded); None when absent."""
        ...

    def routes(self, config: Any) -> list[tuple[str, str]]:
        """(config key, channel) of every channel it starts runs in: `alerts.slack[0].channel`."""
        ...

    def with_channels(self, config: Any, resolve: Callable[[str, str], str]) -> Any:
        """`config` with each channel as `resolve(key, channel)` gives it (start-up resolves `#name`s)."""
        ...

    def start(self, desk: AlertDesk, config: Any) -> Inbound:
        """Its live part, handing what comes in to `desk`."""
        ...

    # Optional: `missing(config) -> list[str]` (what `opsloop run` can't start without: a secret unset),
    # `check_lines(config) -> list[str]` (what `opsloop check` prints), `listens(config) -> (key, host, port)`.


class HttpSource(Protocol):
    """What a thread-opening source gives the desk's HTTP side (handlers.alerts.threads)."""

    name: str
    sender: str  # who sends it, as the model is told: "Alertmanager"
    path: str  # its HTTP path: "/alertmanager"

    def verify(self, config: Any, headers: Mapping[str, str], body: bytes) -> bool:
        """Is this request the sender's (a bearer token, a signature over the exact body)?"""
        ...

    def channel(self, config: Any, payload: dict[str, Any]) -> str | None:
        """Where this notification's thread opens; None: no channel takes it, or it is nothing the source reads
        (answered 200, nothing stored, `alert` not asked)."""
        ...

    def parse(self, body: bytes) -> dict[str, Any]:
        """The payload, checked field by field; raises BadPayload. It is stored (redacted) for recovery."""
        ...

    def alert(self, payload: dict[str, Any]) -> Alert: ...

    def root(self, payload: dict[str, Any], previous: str | None) -> str:
        """The root post of its thread; `previous`: the link to its previous occurrence's thread."""
        ...

    def note(self, alert: Alert, *, told_run: bool) -> str:
        """The thread's line for an update (resolved, the firing set changed)."""
        ...


RUNS_PER_10_MIN = 5  # storm control's default, per channel


def read_listen(r: Reader, host: str, port: int) -> tuple[str, int]:
    """A source's `listen = "host:port"` (absent: `host`, `port`; port 0: any free port)."""
    listen = r.str("listen", empty_ok=True)
    if listen is None or listen_address(listen, r, "listen") is None:
        return host, port
    return host_and_port(listen, host)


def read_route(r: Reader, keys: tuple[str, ...]) -> tuple[str, int]:
    """What every source's table has: its `channel` (required) and `max_runs_per_10_min` (at least 1); a key
    not in `keys` is a problem."""
    r.only(keys)
    channel = r.str("channel", "", empty_ok=True)
    if not channel:
        r.problem("required (the channel id, C…, or its #name)", "channel")
    return channel, r.int("max_runs_per_10_min", RUNS_PER_10_MIN, low=1)
