"""structlog JSON logging: one stream for our events and bolt/slack_sdk's, redacted last.

Our own events (structlog) are rendered by structlog and written straight to the stream, one line each, never
through the stdlib path (a LogRecord, its formatter, the processors again). Libraries' records (bolt, slack_sdk,
aiohttp, asyncssh) still go through stdlib logging, formatted by the same processors; both write under the stdlib
handler's lock, so their lines never interleave."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from bot.core.redact import redaction_processor

# Never show_locals: local variables hold tokens.
_exceptions = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class _Line:
    """The logger our structlog events end in: the line structlog rendered, written to the stdlib handler's stream
    under its lock. `name` is the logger's (structlog's add_logger_name reads it)."""

    def __init__(self, handler: logging.StreamHandler[TextIO], name: str) -> None:
        self.handler, self.name = handler, name

    def msg(self, line: str) -> None:
        handler = self.handler
        try:
            handler.acquire()
            try:
                handler.stream.write(line + "\n")
                handler.flush()
            finally:
                handler.release()
        except Exception as e:  # as stdlib's handlers do: a line that can't be written never breaks its caller
            with contextlib.suppress(Exception):
                if (stderr := sys.__stderr__) is not None:
                    stderr.write(f"opsloop: a log line could not be written ({type(e).__name__})\n")

    debug = info = warning = error = critical = exception = msg


def _below(level: int) -> Any:
    """A processor dropping events under `level`. It runs after the metrics processor (bot/app/metrics.py puts itself
    first), so the counters see every event whatever the log level."""

    def drop(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if _LEVELS.get(event_dict.get("level", ""), 50) < level:
            raise structlog.DropEvent
        return event_dict

    return drop


def configure_logging(level: str = "info", stream: TextIO | None = None) -> None:
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    last: list[Any] = [_exceptions, redaction_processor, structlog.processors.JSONRenderer(default=str)]
    handler: logging.StreamHandler[TextIO] = logging.StreamHandler(stream or sys.stderr)
    structlog.configure(
        processors=[*shared[:3], _below(numeric), *shared[3:], *last],
        logger_factory=lambda *args: _Line(handler, str(args[0]) if args else ""),
        wrapper_class=structlog.make_filtering_bound_logger(logging.NOTSET),  # filtered by `_below`, see there
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *last],
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # slack_sdk logs each of its own retries (raw aiohttp text) next to our `slack.unreachable` line: one per attempt
    handler.addFilter(
        lambda record: (
            not (record.name.startswith("slack_sdk") and record.getMessage().startswith("A retry handler found"))
        )
    )
