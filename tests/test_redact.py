"""Secrets never reach logs, the store, the model or Slack."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from bot.log import configure_logging
from bot.redact import _PATTERNS, REDACTED, redact, redact_truncate, redact_value

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


R = REDACTED
KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dV\n"

# (text, what must be left of it): the name of a secret stays, its value goes.
REDACTIONS = [
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789 here", f"token {R} here"),
    ("gho_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", R),
    ("GITHUB_TOKEN=ghs_16C7e42F292c6912E7710c838347Ae178B4a", f"GITHUB_TOKEN={R}"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF", R),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' https://x", f"curl -H 'Authorization: Basic {R}' https://x"),
    ("Authorization: Bearer abc.def.ghi", f"Authorization: Bearer {R}"),
    ("authorization: token gho_abcdefghijklmnopqrstuvwxyz0123", f"authorization: token {R}"),
    ('{"Authorization": "Bearer eyJhbGciOi.J9.x"}', f'{{"Authorization": "Bearer {R}"}}'),
    ("postgres://app:s3cr3t-P4ss@db.internal:5432/app", f"postgres://app:{R}@db.internal:5432/app"),
    ("https://deploy:hunter2@ci.example.com/hook", f"https://deploy:{R}@ci.example.com/hook"),
    ("mysql --password=hunter2 -u root", f"mysql --password={R} -u root"),
    ("mysql --password hunter2 -u root", f"mysql --password {R} -u root"),
    ("pg_dump --passwd='two words' db", f"pg_dump --passwd='{R}' db"),
    ("password=hunter2&user=bob", f"password={R}&user=bob"),
    ("DB_PASSWORD=hunter2 DB_USER=app", f"DB_PASSWORD={R} DB_USER=app"),
    ('passwd: "correct horse battery"', f'passwd: "{R}"'),
    ('{"password": "pa ss"}', f'{{"password": "{R}"}}'),
    ("https://hooks.slack.com/services/T0001/B0001/XXXXXXXXXXXXXXXXXXXXXXXX ok",
     f"https://hooks.slack.com/services/{R} ok"),
    ('{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}', f'{{"aws_secret_access_key": "{R}"}}'),
    ("AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEJr//////////wEaCXVz", f"AWS_SESSION_TOKEN={R}"),
    ('{"Code": "Success", "AccessKeyId": "ASIAIOSFODNN7EXAMPLE", '
     '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "Token": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVz", '
     '"Expiration": "2026-11-30T12:00:00Z"}',
     f'{{"Code": "Success", "AccessKeyId": "{R}", "SecretAccessKey": "{R}", "Token": "{R}", '
     '"Expiration": "2026-11-30T12:00:00Z"}'),
    ('"SessionToken": "FwoGZXIvYXdzEBYaDHqa0AP1/"', f'"SessionToken": "{R}"'),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}-----END RSA PRIVATE KEY-----\nafter.", f"{R}\nafter."),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}", R),  # cut short: no END line
    (f"key tail:\n{KEY_BODY}-----END PRIVATE KEY-----\nafter", f"key tail:\n{R}\nafter"),  # no BEGIN line
    ('{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0\\n-----END PRIVATE KEY-----\\n"}',
     f'{{"key": "{R}\\n"}}'),
]

# Ordinary ops text that looks a little like a secret and must survive untouched.
SURVIVORS = [
    "web-03 /var 100% used; java pid 4242; see https://grafana/d/abc?x=1",
    "https://example.com:443/path and http://host:8080/x?y=1",
    "the password field is required; reset your passwd via the portal",
    "mysql --password-file=/run/secrets/db -u root",
    "Bearer of bad news: ghp_short is not a token",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----",
    '{"token_type": "Bearer", "expires_in": 3600, "secret": true}',
    "AKIA is how AWS key ids start; git sha 4f2a9c1e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "ssh://git@github.com/org/repo.git",
]


@pytest.mark.parametrize(("text", "expected"), REDACTIONS)
def test_secret_values_are_redacted_and_their_names_kept(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", SURVIVORS)
def test_ordinary_text_is_untouched(text):
    assert redact(text) == text


@pytest.mark.parametrize("text", [t for t, _ in REDACTIONS] + SECRETS)
def test_redaction_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


ADVERSARIAL = ["a", " ", "-", "=", "\n", "xoxb-", "ghp_", "password=", "://u:p", "Authorization: ", "bearer ",
               "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "MIIB\n", "\\n", '"Token": "',
               "aws_secret_access_key=", "https://hooks.slack.com/services/", "a:b@", "--password ", '"', "AKIA", "\\",
               'password=\\"', "\\n" + "A" * 64]


@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_a_megabyte_of_near_misses_is_scanned_in_one_pass(unit):
    """No timing assert: the patterns are linear by construction (see bot/redact.py); a quadratic one hangs here."""
    text = unit * (1_000_000 // len(unit)) + "\n-----END RSA PRIVATE KEY-----"
    for pattern, _ in _PATTERNS:
        pattern.sub("", text)
    assert len(redact(text)) > 0


def test_redact_truncate_never_leaves_half_a_secret():
    secret = "sk-ant-api03-" + "Z" * 40
    for limit in range(20, 80):
        cut = redact_truncate(f"key: {secret} end", limit)
        assert len(cut) <= limit and "sk-ant" not in cut and "ZZZZ" not in cut, limit
    assert redact_truncate("short", 10) == "short"


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
