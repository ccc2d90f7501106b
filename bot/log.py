"""structlog JSON logging: one stream for our events and bolt/slack_sdk's, redacted last."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from bot.redact import redaction_processor

# Never show_locals: local variables hold tokens.
_exceptions = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))


def configure_logging(level: str = "info", stream: TextIO | None = None) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _exceptions,
            redaction_processor,
            structlog.processors.JSONRenderer(default=str),
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
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
