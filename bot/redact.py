"""Secret patterns, scrubbed from everything logged, stored, sent to the model or posted."""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

REDACTED = "[REDACTED]"

_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"xox[abposr]-[A-Za-z0-9-]{6,}",  # Slack bot/user/legacy tokens
        r"xapp-[A-Za-z0-9-]{6,}",  # Slack app-level tokens
        r"xoxe(?:\.xox[bp])?-[A-Za-z0-9-]{6,}",  # Slack refresh tokens
        r"sk-ant-[A-Za-z0-9_-]{6,}",  # Anthropic API keys
        r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key ids
        r"(?i)(?<=aws_secret_access_key)(\s*[=:]\s*)[A-Za-z0-9/+=]{40}",  # AWS secret (after its name)
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",  # Authorization: Bearer …
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    )
)


def redact(text: str) -> str:
    """Replace every secret-looking substring with [REDACTED]."""
    if not text:
        return text
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def redact_value(value: Any) -> Any:
    """Redact strings inside nested dicts/lists/tuples (structlog events, tool args, blocks)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


def redaction_processor(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """structlog processor: the last line of defence before anything is written."""
    return {k: redact_value(v) for k, v in event_dict.items()}
