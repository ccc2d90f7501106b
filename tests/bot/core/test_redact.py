"""Secrets never reach logs, the store, the model or Slack."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.log import configure_logging
from bot.core.redact import (
    _CLEAN,
    _FOLD,
    _PATTERNS,
    MARGIN,
    REDACTED,
    _gates,
    _pem_tail_spans,
    _redact_visible,
    _replace_spans,
    redact,
    redact_slice,
    redact_truncate,
    redact_value,
)
from tools.registry import MAX_OUTPUT_CHARS, truncate_output

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
    ("passphrase=hunter2xyz ok", f"passphrase={R} ok"),  # once missed: the one-literal look-first had no "passp"
    ('PASSPHRASE: "two words"', f'PASSPHRASE: "{R}"'),
    (
        "https://hooks.slack.com/services/T0001/B0001/XXXXXXXXXXXXXXXXXXXXXXXX ok",
        f"https://hooks.slack.com/services/{R} ok",
    ),
    ('{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}', f'{{"aws_secret_access_key": "{R}"}}'),
    ("AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEJr//////////wEaCXVz", f"AWS_SESSION_TOKEN={R}"),
    (
        '{"Code": "Success", "AccessKeyId": "ASIAIOSFODNN7EXAMPLE", '
        '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "Token": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVz", '  # noqa: E501
        '"Expiration": "2026-11-30T12:00:00Z"}',
        f'{{"Code": "Success", "AccessKeyId": "{R}", "SecretAccessKey": "{R}", "Token": "{R}", '
        '"Expiration": "2026-11-30T12:00:00Z"}',
    ),
    ('"SessionToken": "FwoGZXIvYXdzEBYaDHqa0AP1/"', f'"SessionToken": "{R}"'),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}-----END RSA PRIVATE KEY-----\nafter.", f"{R}\nafter."),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}", R),  # cut short: no END line
    (f"key tail:\n{KEY_BODY}-----END PRIVATE KEY-----\nafter", f"key tail:\n{R}\nafter"),  # no BEGIN line
    (
        '{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0\\n-----END PRIVATE KEY-----\\n"}',
        f'{{"key": "{R}\\n"}}',
    ),
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


ADVERSARIAL = [
    "a",
    " ",
    "-",
    "=",
    "\n",
    "xoxb-",
    "ghp_",
    "password=",
    "://u:p",
    "Authorization: ",
    "bearer ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "MIIB\n",
    "\\n",
    '"Token": "',
    "aws_secret_access_key=",
    "https://hooks.slack.com/services/",
    "a:b@",
    "--password ",
    '"',
    "AKIA",
    "\\",
    'password=\\"',
    "\\n" + "A" * 64,
    "Cookie: ",
    "cookie",
    "x-api-key=",
    '"X-Auth-Token": "',
    "set-cookie:\n",
]


@pytest.mark.parametrize("unit", ADVERSARIAL)
@pytest.mark.slow
def test_a_megabyte_of_near_misses_is_scanned_in_one_pass(unit):
    """No timing assert: the patterns are linear by construction (see bot/core/redact.py); a quadratic one hangs
    here."""
    text = unit * (1_000_000 // len(unit)) + "\n-----END RSA PRIVATE KEY-----"
    for pattern, _, _ in _PATTERNS:
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
        "a": [REDACTED],
        "b": (REDACTED,),
        "n": 3,
    }


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


# -- bounded redaction: a cut never leaves half a secret ------------------------------------------------

# Every secret's value is made of Qs and nothing around it has one: any Q left is a piece of a secret.
PEM_Q = "-----BEGIN RSA PRIVATE KEY-----\n" + ("Q" * 64 + "\n") * 2 + "Q" * 20 + "\n-----END RSA PRIVATE KEY-----"
Q_SECRETS = [
    "xoxb-1234-QQQQQQQQQQQQ",
    "sk-ant-api03-QQQQQQQQQQQQ",
    "AKIAQQQQQQQQQQQQQQQQ",
    "ghp_QQQQQQQQQQQQQQQQQQQQQQQQ",
    "Authorization: Basic QQQQQQQQQQQQ",
    "Bearer QQQQQQQQQQQQQQQQ",
    "postgres://app:QQQQQQQQ@db:5432/app",
    "mysql --password QQQQQQQQ -u root",
    "DB_PASSWORD=QQQQQQQQ",
    '"aws_secret_access_key": "QQQQQQQQQQQQQQQQQQQQ"',
    '{"token": "QQQQ QQQQ"}',
    "Cookie: sid=QQQQQQ; csrf=QQQQQQ",
    "X-Api-Key: QQQQQQQQQQ",
    '"X-Auth-Token": "QQQQQQ"',
    "https://hooks.slack.com/services/QQQQQQQQ",
    PEM_Q,
]
FILLER = "web-03 nginx: GET /healthz 200 ok\n"


@pytest.mark.parametrize("margin", [MARGIN, 40])
@pytest.mark.parametrize("secret", Q_SECRETS)
def test_a_cut_anywhere_through_a_secret_leaves_none_of_it_on_either_side(secret, margin):
    before, after = FILLER * 6, FILLER * 6
    text = before + secret + after
    for cut in range(len(before) - 2, len(before) + len(secret) + 2):
        head, tail = redact_slice(text, 0, cut, margin=margin), redact_slice(text, cut, len(text), margin=margin)
        assert "Q" not in head and "Q" not in tail, (cut, head[-60:], tail[:60])
        assert head.startswith(FILLER) and tail.endswith(FILLER)


def test_a_slice_without_secrets_is_the_text_itself():
    text = FILLER * 1000
    assert redact_slice(text, 5, 20_000, margin=100) == text[5:20_000]


def test_a_cut_through_a_secret_keeps_its_whole_placeholder_and_name():
    text = f"{FILLER}password=QQQQQQQQQQQQ {FILLER}"
    cut = text.index("QQQ") + 4
    assert redact_slice(text, 0, cut).endswith(f"password={REDACTED}")
    assert redact_slice(text, cut, len(text)) == f"password={REDACTED} {FILLER}"


def test_a_token_longer_than_the_margin_crossing_the_cut_is_dropped_to_its_end():
    text = FILLER + "Bearer " + "Q" * 500 + " after\n"
    cut = text.index("Q") + 250  # no pattern can see where this token began
    assert redact_slice(text, cut, len(text), margin=40) == " after\n"
    assert redact_slice(text, 0, cut, margin=40) == FILLER + REDACTED


def _cuts(total: int, limit: int) -> tuple[int, int]:
    """Where truncate_output cuts a text of `total` characters with no secret in it: (head end, tail start)."""
    out = truncate_output("\n" * total, limit)
    return out.index("\n… [truncated"), total - (len(out) - out.index("] …\n") - len("] …\n"))


@pytest.mark.parametrize("secret", Q_SECRETS)
@pytest.mark.slow
def test_truncated_output_has_no_piece_of_a_secret_crossing_either_cut(secret):
    total, limit = 5_000, 400
    for cut in _cuts(total, limit):
        for start in range(cut - len(secret) - 1, cut + 2):
            text = "\n" * start + secret + "\n" * (total - start - len(secret))
            assert "Q" not in redact(text)  # the whole text, redacted: the baseline a cut must match
            out = truncate_output(text, limit)
            assert len(out) <= limit and "[truncated" in out
            assert "Q" not in out, (cut, start, out.strip())


def test_a_50_mb_output_keeps_its_head_and_tail_and_counts_what_went():
    line = "2026-11-30T03:12:09Z web-03 nginx: GET /healthz 200\n"
    text = "first line\n" + line * (50_000_000 // len(line)) + "last line\n"
    out = truncate_output(text)
    assert len(out) <= MAX_OUTPUT_CHARS and out.startswith("first line\n") and out.endswith("last line\n")
    head, tail = out.split(" …\n")[0].rsplit("\n… ", 1)[0], out.split(" …\n")[1]
    assert f"[truncated {len(text) - len(head) - len(tail)} chars of {len(text)}]" in out


def test_redact_truncate_redacts_only_what_it_can_keep():
    text = "token xoxb-1234-QQQQQQQQ " + "x " * 5_000_000
    assert redact_truncate(text, 20) == f"token {REDACTED} x …"


# -- header-shaped secrets in JSON and dicts ------------------------------------------------------------

HEADER_SECRETS = [
    ("Authorization", "Basic dXNlcjpwYXNzUVFR"),
    ("authorization", "Bearer QQQQQQQQQQQQ.QQQQ"),
    ("Proxy-Authorization", "Basic cHJveHk6UVFRUVE="),
    ("X-Api-Key", "QQQQ-api-key-QQQQ"),
    ("x-api-key", "QQQQQQQQQQ"),
    ("X_API_KEY", "QQQQQQQQQQ"),
    ("Cookie", "sid=QQQQQQ; csrf=QQQQQQ"),
    ("COOKIE", "sid=QQQQQQ"),
    ("Set-Cookie", "sid=QQQQQQ; Path=/; HttpOnly"),
    ("X-Auth-Token", "QQQQQQQQ"),
    ("x-auth-token", "QQQQQQQQ"),
    ("X-Amz-Security-Token", "QQQQ/QQQQ+QQQQ=="),
    ("api_key", "QQQQQQQQ"),
]


def _value_core(value: str) -> str:
    """The part of a header value that must go (an auth scheme may stay)."""
    return value.split(" ", 1)[1] if value.split(" ", 1)[0] in ("Basic", "Bearer") else value


@pytest.mark.parametrize(("name", "value"), HEADER_SECRETS)
def test_a_header_in_a_dict_loses_its_value_and_keeps_its_name(name, value):
    args = {"url": "https://x/api", "headers": {name: value, "Accept": "text/plain"}, "list": [{name: value}]}
    assert redact_value(args) == {
        "url": "https://x/api",
        "headers": {name: REDACTED, "Accept": "text/plain"},
        "list": [{name: REDACTED}],
    }


@pytest.mark.parametrize(("name", "value"), HEADER_SECRETS)
@pytest.mark.parametrize("form", ["json", "indented json", "json in json", "header line", "curl"])
def test_a_header_in_text_loses_its_value_and_keeps_its_name(name, value, form):
    doc = {"headers": {name: value, "Accept": "text/plain"}}
    text = {
        "json": json.dumps(doc),
        "indented json": json.dumps(doc, indent=2),
        "json in json": json.dumps({"body": json.dumps(doc)}),
        "header line": f"HTTP/1.1 200 OK\n{name}: {value}\nAccept: text/plain\n",
        "curl": f"curl -H '{name}: {value}' -H 'Accept: text/plain' https://x/api",
    }[form]
    out = redact(text)
    assert _value_core(value) not in out and "Q" not in out
    assert name in out and REDACTED in out and "text/plain" in out
    assert redact(out) == out


def test_a_credential_key_hides_every_kind_of_value_but_keeps_the_shape():
    value = {
        "Set-Cookie": ["a=1", "b=2"],
        "token": 12345,
        "password": {"old": "x", "new": "y"},
        "secret": True,
        "api_key": None,
        "cookie": "",
        "tokens": 42,
        "token_type": "Bearer",
        "Content-Type": "application/json",
    }
    assert redact_value(value) == {
        "Set-Cookie": [R, R],
        "token": R,
        "password": {"old": R, "new": R},
        "secret": True,
        "api_key": None,
        "cookie": "",
        "tokens": 42,
        "token_type": "Bearer",
        "Content-Type": "application/json",
    }


def test_logged_headers_are_redacted_in_nested_and_top_level_fields():
    out = io.StringIO()
    configure_logging("info", stream=out)
    try:
        structlog.get_logger("t").info(
            "tool", args={"headers": {"X-Api-Key": "QQQQQQQQ"}}, authorization="Basic dXNlcjpwYXNz", cookie="sid=QQQQ"
        )
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()
    line = json.loads(out.getvalue())
    assert line["args"] == {"headers": {"X-Api-Key": REDACTED}}
    assert line["authorization"] == REDACTED and line["cookie"] == REDACTED


# A secret spelled with characters nobody sees is still a secret: the patterns read through them.
INVISIBLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\U000e0041"]


@pytest.mark.parametrize("ch", INVISIBLES)
@pytest.mark.parametrize(
    "spelled",
    [
        "DB_PASS{}WORD=hunter2-secret",
        "pass{}word: hunter2-secret",
        "sk-ant-{}api03-abcdefghijklmnopqrstuvwxyz",
        "Bear{}er eyJhbGciOiJIUzI1NiJ9.hunter2-secret",
        "AKIA{}IOSFODNN7EXAMPLE",
        "https://ops:hunter2-secret@{}db.internal/",
    ],
)
def test_invisible_characters_do_not_hide_a_secret_from_redaction(spelled, ch):
    text = "before " + spelled.format(ch) + " after"
    out = redact(text)
    assert "hunter2" not in out and "IOSFODNN7" not in out and "abcdefghijklmnop" not in out, ascii(out)
    assert REDACTED in out and out.startswith("before ") and out.endswith(" after")
    # the bounded form (tool output) reads through them too, at any cut
    padded = "x" * 5000 + text + "y" * 5000
    sliced = redact_slice(padded, 4990, 5000 + len(text) + 10)
    assert "hunter2" not in sliced and "IOSFODNN7" not in sliced and REDACTED in sliced, ascii(sliced)


def test_text_with_invisible_characters_and_no_secret_is_left_exactly_as_it_was():
    for text in ["zero\u200bwidth, no secret", "emoji \U0001f468\u200d\U0001f4bb", "\u202eevil\u202c.log"]:
        assert redact(text) == text
        assert redact_slice(text, 0, len(text)) == text


def test_invisible_characters_away_from_the_secret_stay_where_they_were():
    text = "log\u202e.txt has DB_PASS\u200bWORD=hunter2 in it\u200b"
    assert redact(text) == f"log\u202e.txt has DB_PASS\u200bWORD={REDACTED} in it\u200b"


def _every_pattern(text: str) -> str:
    """_redact_visible without its gates: every pattern run over the text, in order."""
    for pattern, replace, _ in _PATTERNS:
        text = pattern.sub(replace, text)
    return _replace_spans(text, _pem_tail_spans(text)) if "-----END " in text else text


# Pieces of secrets and of near misses, in any case, glued with separators and values: what the gates must not skip.
_PIECES = [
    *("xox", "xoxb-", "xoxe.xoxp-", "xapp-", "sk-ant-", "AKIA", "ASIA", "ghp_", "github_pat_", "hooks.slack.com/"),
    *("https://hooks.slack.com/services/", "Authorization", "Bearer", "bearer ", "://", "user:", "@host", "--password"),
    *("passwd", "PASSPHRASE", "password", "aws_secret_access_key", "session_token", "secret", '"token"', "api_key"),
    *("X-Api-Key", "x-auth-token", "x-amz-security-token", "Set-Cookie", "cookie", "-----BEGIN RSA PRIVATE KEY-----"),
    *("-----END RSA PRIVATE KEY-----", "-----", "=", ": ", '"', "'", " ", "\n", "\\", "\n", "/", "&", ";"),
    *("ABCDEFGHIJKLMNOP0123", "abcdefghijklmnopqrstuvwxyz0123456789", "hunter2", "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"),
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES).map(lambda p: p.swapcase() if len(p) % 3 == 0 else p), max_size=12))
def test_the_gates_skip_only_patterns_that_could_not_match(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _redact_visible(text) == _every_pattern(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=4))
def test_a_short_text_redacts_the_same_the_first_time_and_every_time_after(pieces: list[str]) -> None:
    """redact() keeps short texts that hold no gate (a log line's names) to skip the gates next time: it never keeps
    one a pattern could change, so a second call (from the set) says what the first did."""
    text = "".join(pieces)
    first, again = redact(text), redact(text)
    assert first == again == _every_pattern(text)
    assert not (text in _CLEAN and _every_pattern(text) != text)


@pytest.mark.parametrize(
    "text",
    [t for t, _ in REDACTIONS] + SECRETS + [f"{n}: {v}" for n, v in HEADER_SECRETS] + [PEM_Q, *Q_SECRETS],
)
def test_every_match_holds_one_of_its_patterns_gates(text: str) -> None:
    for pattern, _, gates in _PATTERNS:
        for m in pattern.finditer(text):
            near = text[max(0, m.start() - 8) : m.end() + 8]  # with what its lookbehind and lookahead saw
            assert _gates(near) & gates, (pattern.pattern, m.group(0))


@pytest.mark.slow
def test_the_fold_holds_every_non_ascii_character_case_insensitive_matching_takes_for_an_ascii_letter() -> None:
    """The gates are substrings of the lower case: a letter that (?i) matches to an ASCII one must fold to it."""
    letters = re.compile("(?i)[a-z]")
    found = {
        cp: next(a for a in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(f"(?i){a}", chr(cp)))
        for cp in range(128, sys.maxunicode + 1)
        if letters.fullmatch(chr(cp))
    }
    assert found == _FOLD


@pytest.mark.parametrize("spelled", ["paſsword=hunter2xyz", "PASSWORD=hunter2xyz", "AUTHORİZATİON: Basic abcdefgh"])
def test_a_name_spelled_with_a_letter_case_folding_matches_is_still_redacted(spelled: str) -> None:
    assert "hunter2" not in redact(spelled) and "abcdefgh" not in redact(spelled)
