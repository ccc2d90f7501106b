"""Secrets never reach logs, the store, the model or Slack."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from bot.log import configure_logging
from bot.redact import REDACTED, redact, redact_value

SECRETS = [
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "xapp-1-A0123456789-1234567890123-abcdef0123456789",
    "xoxp-1234-5678-abcdefabcdef",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123456789",
    "AKIAIOSFODNN7EXAMPLE",
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_each_secret_pattern_is_redacted(secret):
    assert redact(f"found {secret} in env") == f"found {REDACTED} in env"


def test_aws_secret_keeps_its_name():
    line = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert redact(line) == f"aws_secret_access_key = {REDACTED}"


def test_ordinary_text_is_untouched():
    text = "web-03 /var 100% used; java pid 4242; see https://grafana/d/abc?x=1"
    assert redact(text) == text


def test_nested_values_are_redacted():
    assert redact_value({"a": ["xoxb-1234567-abc"], "b": ("sk-ant-123456789",), "n": 3}) == {
        "a": [REDACTED], "b": (REDACTED,), "n": 3}


def test_logs_are_json_with_bound_context_and_no_secrets():
    out = io.StringIO()
    configure_logging("info", stream=out)
    try:
        with structlog.contextvars.bound_contextvars(run_id="run_1"):
            structlog.get_logger("t").info("tool", result="token xoxb-123456789-abcdef")
            logging.getLogger("slack_sdk").warning("auth header Bearer abcdefghijklmnop")
            try:
                raise RuntimeError("boom sk-ant-api03-zzzzzzzzzzzz")
            except RuntimeError:
                structlog.get_logger("t").exception("failed")
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["run_id"] == "run_1" and lines[0]["event"] == "tool"
    assert "xoxb" not in out.getvalue() and "sk-ant" not in out.getvalue() and "abcdefghijklmnop" not in out.getvalue()
    assert "exception" in lines[2]
