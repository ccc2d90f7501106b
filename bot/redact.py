"""Secret patterns, scrubbed from everything logged, stored, sent to the model or posted.

Every pattern is precompiled and linear by construction, because it runs on every log
line: each one starts at a literal (a token prefix, a key name, `://`, a PEM marker),
its repeated parts are either bounded or the last thing it matches (so an attempt
never backtracks into a long run), and no repeat is nested inside another. PEM bodies
whose BEGIN line is missing are found from their END line and walked back line by
line, not with a regex that would rescan the text.

Where a secret sits behind a name (`password=`, `"SecretAccessKey": "`, a URL's user)
the name stays and only the value goes, so a reader still sees what was hidden.
"""

from __future__ import annotations

import re
from collections.abc import Callable, MutableMapping
from typing import Any

REDACTED = "[REDACTED]"
_ELLIPSIS = "…"


def _whole(_m: re.Match[str]) -> str:
    return REDACTED


def _keep_name(m: re.Match[str]) -> str:
    """Keep group 1 (the name, the separator and an opening quote); the closing quote stays where it was."""
    return m.group(1) + REDACTED


# `key=`, `key: `, `"key": ` (JSON) and `\"key\": \"` (JSON inside JSON strings, as in a log line, once or more)
_SEP = r"""(?:\\{0,8}["'])?[ \t]{0,5}[=:][ \t]{0,5}(?:\\{0,8}["'])?"""
# A value after an opening quote runs to the closing quote (spaces and all, never eating an escape's
# backslash); a bare value stops at whitespace, a quote, a separator or a backslash.
_VALUE = r"""(?<=["'])(?:[^"'\\\n]|\\[^"'\n])+|(?<!["'])[^\s"',;&\\]+"""

_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = tuple(
    (re.compile(p), fn)
    for p, fn in (
        (r"xox[abposr]-[A-Za-z0-9-]{6,}", _whole),  # Slack bot/user/legacy tokens
        (r"xapp-[A-Za-z0-9-]{6,}", _whole),  # Slack app-level tokens
        (r"xoxe(?:\.xox[bp])?-[A-Za-z0-9-]{6,}", _whole),  # Slack refresh tokens
        (r"sk-ant-[A-Za-z0-9_-]{6,}", _whole),  # Anthropic API keys
        (r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])", _whole),  # AWS access key ids
        (r"gh[pousr]_[A-Za-z0-9]{20,}", _whole),  # GitHub tokens: ghp_ gho_ ghs_ ghu_ ghr_
        (r"github_pat_[A-Za-z0-9_]{20,}", _whole),  # GitHub fine-grained tokens
        (r"(https://hooks\.slack\.com/(?:services|workflows|triggers)/)([A-Za-z0-9_/-]+)", _keep_name),
        # Authorization headers (any scheme), then a bare `Bearer …` anywhere
        (r"(?i)(authorization" + _SEP + r"(?:(?:basic|bearer|token|digest)[ \t]{1,5})?)([^\s\"',;\\]{4,})",
         _keep_name),
        (r"(?i)\bbearer[ \t]{1,5}[A-Za-z0-9._~+/=-]{8,}", _whole),
        # a password in a URL: scheme://user:PASSWORD@host keeps the user
        (r"(?<=://)([^\s:/@\\]{1,256}:)([^\s@/\\]{1,256})(?=@)", _keep_name),
        # --password=…, --password …, --passwd '…'
        (r"""(?i)((?<![\w-])--?passw(?:or)?d(?:=|[ \t]{1,5})(?:\\{0,8}["'])?)(""" + _VALUE + ")", _keep_name),
        # password=…, passwd: …, DB_PASSWORD=…, "password": "…"
        (r"(?i)((?:passw(?:or)?d|passphrase)" + _SEP + ")(" + _VALUE + ")", _keep_name),
        # AWS secret keys and session tokens after their names (env, ini, JSON)
        (r"(?i)((?:aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)" + _SEP
         + r")([A-Za-z0-9/+=]{16,})", _keep_name),
        # JSON fields that hold a credential, e.g. "Token" in the EC2 metadata credentials document
        (r"""(?i)("(?:token|access_?token|refresh_?token|client_?secret|api_?key|secret)\\{0,8}"[ \t]{0,5}:"""
         r"""[ \t]{0,5}\\{0,8}")((?:[^"\\\n]|\\[^"\n])+)""", _keep_name),
        # a whole private key (or one cut short after its BEGIN line)
        (r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s]|\\{1,8}[nr])*"
         r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?", _whole),
    )
)

_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_LINE_BREAK = re.compile(r"\r?\n|(?:\\{1,8}r)?\\{1,8}n")  # real newlines, or `\n` escaped (once or more) in JSON text
_BASE64_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]+[ \t]*")


# One search for a literal that every pattern above needs (a superset: case-insensitive, shorter): most
# text has none, and then the patterns need not run at all. Keep it in step with _PATTERNS.
_NEEDS_A_LOOK = re.compile(
    r"(?i)xox|xapp|sk-ant|akia|asia|gh[pousr]_|github_pat_|hooks\.slack\.com|authorization|bearer|://|passw"
    r"|secret|session|token|api_?key|-----"
)


def redact(text: str) -> str:
    """Replace every secret-looking substring with [REDACTED]."""
    if not text or not _NEEDS_A_LOOK.search(text):
        return text
    for pattern, replace in _PATTERNS:
        text = pattern.sub(replace, text)
    if "-----END " in text:
        text = _redact_pem_tails(text)
    return text


def redact_truncate(text: str, limit: int, ellipsis: str = _ELLIPSIS) -> str:
    """Redact, then cut to `limit` characters: a cut never leaves half a secret for the patterns to miss."""
    text = redact(text)
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: max(0, limit - len(ellipsis))] + ellipsis[:limit]


def _redact_pem_tails(text: str) -> str:
    """A PEM body whose BEGIN line was cut off: the base64 lines right before `-----END … PRIVATE KEY-----`."""
    out: list[str] = []
    done = 0
    for end in _PEM_END.finditer(text):
        start = _base64_lines_before(text, done, end.start())
        out.append(text[done:start])
        out.append(REDACTED)
        done = end.end()
    out.append(text[done:])
    return "".join(out)


def _base64_lines_before(text: str, floor: int, end: int) -> int:
    """Where the base64 lines ending at `end` start (never before `floor`); linear in end - floor.

    Walks back line by line; the first line that is not base64 stops the walk, but a long
    base64 run at its end (a key body glued to a label) is still taken.
    """
    segment = text[floor:end]
    bounds = [0, *(b for m in _LINE_BREAK.finditer(segment) for b in (m.start(), m.end())), len(segment)]
    lines = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]  # (start, end) of each line
    start = len(segment)
    for line_start, line_end in reversed(lines):
        line = segment[line_start:line_end]
        if line.strip() and not _BASE64_LINE.fullmatch(line):
            return floor + _base64_tail(segment, line_start, line_end, start)
        start = line_start
    return floor + start


def _base64_tail(segment: str, line_start: int, line_end: int, fallback: int) -> int:
    """Start of a run of at least 16 base64 characters ending the line, else `fallback`."""
    i = len(segment[line_start:line_end].rstrip(" \t")) + line_start
    stop = i
    while i > line_start and segment[i - 1] in _BASE64_CHARS:
        i -= 1
    return i if stop - i >= 16 else fallback


_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


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
