"""Secret patterns, scrubbed from everything logged, stored, sent to the model or posted.

Every pattern is precompiled and linear by construction, because it runs on every log
line: each one starts at a literal (a token prefix, a key name, `://`, a PEM marker),
its repeated parts are either bounded or the last thing it matches (so an attempt
never backtracks into a long run), and no repeat is nested inside another. PEM bodies
whose BEGIN line is missing are found from their END line and walked back line by
line, not with a regex that would rescan the text.

Where a secret sits behind a name (`password=`, `"SecretAccessKey": "`, a URL's user)
the name stays and only the value goes, so a reader still sees what was hidden. In nested
values (tool arguments, log events) a key that names a credential (`Authorization`,
`X-Api-Key`, `Cookie`, `password`, ...) hides its whole value, whatever the value looks like.

Text of any size is redacted in bounded time: `redact_slice` redacts only a window around the
part that is kept, so a tool's 50 MB output costs what its 12 KB excerpt does.
"""

from __future__ import annotations

import functools
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

# A header's value: inside quotes up to the closing quote, bare up to the end of the line (or a quote, a backslash).
_HEADER_VALUE = r"""(?<=["'])(?:[^"'\\\n]|\\[^"'\n])+|(?<!["'])[^\s"'\\][^\r\n"'\\]*"""

# Each pattern with its gates: literals (lower case; a superset of what it starts from or holds: shorter, any case)
# of which every match it makes holds at least one (test_redact checks it).
_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str], frozenset[str]], ...] = tuple(
    (re.compile(p), fn, frozenset(gates.split()))
    for p, fn, gates in (
        (r"xox[abposr]-[A-Za-z0-9-]{6,}", _whole, "xox"),  # Slack bot/user/legacy tokens
        (r"xapp-[A-Za-z0-9-]{6,}", _whole, "xapp"),  # Slack app-level tokens
        (r"xoxe(?:\.xox[bp])?-[A-Za-z0-9-]{6,}", _whole, "xox"),  # Slack refresh tokens
        (r"sk-ant-[A-Za-z0-9_-]{6,}", _whole, "sk-ant"),  # Anthropic API keys
        (r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])", _whole, "akia asia"),  # AWS access key ids
        (r"gh[pousr]_[A-Za-z0-9]{20,}", _whole, "ghp_ gho_ ghu_ ghs_ ghr_"),  # GitHub tokens: ghp_ gho_ ghs_ ghu_ ghr_
        (r"github_pat_[A-Za-z0-9_]{20,}", _whole, "github_pat_"),  # GitHub fine-grained tokens
        (
            r"(https://hooks\.slack\.com/(?:services|workflows|triggers)/)([A-Za-z0-9_/-]+)",
            _keep_name,
            "hooks.slack.com",
        ),
        # Authorization headers (any scheme), then a bare `Bearer …` anywhere
        (
            r"(?i)(authorization" + _SEP + r"(?:(?:basic|bearer|token|digest)[ \t]{1,5})?)([^\s\"',;\\]{4,})",
            _keep_name,
            "authorization",
        ),
        (r"(?i)\bbearer[ \t]{1,5}[A-Za-z0-9._~+/=-]{8,}", _whole, "bearer"),
        # other credential headers, as header lines, `key=value` or JSON: the value runs to the end of the
        # line or to its closing quote (a cookie's `a=1; b=2` is one value)
        (
            r"(?i)((?<![A-Za-z0-9])(?:(?:x[-_]?)?api[-_]?key|(?:x[-_]?)?auth[-_]?token|x[-_]?amz[-_]?security[-_]?token"
            r"|(?:set[-_]?)?cookies?)" + _SEP + ")(" + _HEADER_VALUE + ")",
            _keep_name,
            "apikey api-key api_key token cookie",
        ),
        # a password in a URL: scheme://user:PASSWORD@host keeps the user
        (r"(?<=://)([^\s:/@\\]{1,256}:)([^\s@/\\]{1,256})(?=@)", _keep_name, "://"),
        # --password=…, --password …, --passwd '…'
        (
            r"""(?i)((?<![\w-])--?passw(?:or)?d(?:=|[ \t]{1,5})(?:\\{0,8}["'])?)(""" + _VALUE + ")",
            _keep_name,
            "passw passp",
        ),
        # password=…, passwd: …, DB_PASSWORD=…, "password": "…"
        (r"(?i)((?:passw(?:or)?d|passphrase)" + _SEP + ")(" + _VALUE + ")", _keep_name, "passw passp"),
        # AWS secret keys and session tokens after their names (env, ini, JSON)
        (
            r"(?i)((?:aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
            + _SEP
            + r")([A-Za-z0-9/+=]{16,})",
            _keep_name,
            "secret session",
        ),
        # JSON fields that hold a credential, e.g. "Token" in the EC2 metadata credentials document
        (
            r"""(?i)("(?:token|access_?token|refresh_?token|client_?secret|api_?key|secret)\\{0,8}"[ \t]{0,5}:"""
            r"""[ \t]{0,5}\\{0,8}")((?:[^"\\\n]|\\[^"\n])+)""",
            _keep_name,
            "token secret apikey api-key api_key",
        ),
        # a whole private key (or one cut short after its BEGIN line)
        (
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s]|\\{1,8}[nr])*"
            r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
            _whole,
            "-----",
        ),
    )
)

_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_LINE_BREAK = re.compile(r"\r?\n|(?:\\{1,8}r)?\\{1,8}n")  # real newlines, or `\n` escaped (once or more) in JSON text
_BASE64_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]+[ \t]*")


# A pattern runs only when the text holds one of its gates, and most text holds none, so then no pattern runs. The
# gates are substrings of the text's lower case, after the four non-ASCII letters that (?i) also matches to an ASCII
# one are folded to it (_FOLD; test_redact checks there are no others). Substring tests, not a regex alternation of
# these literals: cheaper on a short line (bench/RESULTS.md, "Redaction").
_LITERALS = tuple(sorted(frozenset().union(*(gates for _, _, gates in _PATTERNS))))
_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}  # İ ı ſ K: what (?i) matches to i, s and k


def _gates(text: str) -> frozenset[str]:
    """The gates `text` holds."""
    if not text.isascii():
        for ch, ascii_letter in _FOLD.items():  # four substring scans, cheaper than str.translate
            if chr(ch) in text:
                text = text.replace(chr(ch), ascii_letter)
    low = text.lower()
    return frozenset([lit for lit in _LITERALS if lit in low])


# Characters a reader can't see (zero-width, bidi controls, soft hyphen, word joiner, BOM, tag characters):
# `DB_PASS\u200bWORD=hunter2` is a password to whoever reads it, so the patterns look through them.
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]"
)


class Redacted(str):
    """Text `redact` already returned: redacting it again returns it as it is. A run's step is redacted once and
    then written to both its log line and its steps row (each redacts what it writes: this makes that free).
    Anything made from it (concatenation, slicing, formatting) is a plain str again, and is redacted again."""

    __slots__ = ()


def redact(text: str) -> str:
    """Replace every secret-looking substring with [REDACTED].

    Text with invisible characters in it is read without them (`_through_invisible`): the secret goes, and the
    invisible characters outside it stay where they were, so a card still shows them.
    """
    if not text or type(text) is Redacted or text in _CLEAN:
        return text
    if not text.isascii() and _INVISIBLE.search(text):
        return Redacted(_through_invisible(text))
    if len(text) <= _SHORT and not _gates(text):
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN.add(text)
        return text
    return Redacted(_redact_visible(text))


# Short texts seen to hold no gate, so no pattern: the names a log line repeats (its event, level and logger, a
# model, a tool, a stop reason) cost a set lookup instead of the gates' substring tests. Only text no pattern
# could touch is kept, so the set never holds anything redaction would have removed.
_SHORT = 64
_CLEAN_MAX = 4096
_CLEAN: set[str] = set()


def _through_invisible(text: str) -> str:
    """redact() of `text` read without its invisible characters, put back around what was redacted.

    Each character of the working text remembers where it came from in `text` (None: written by a replacement);
    a pattern's replacement keeps the origin of the prefix it leaves as it was (the name `_keep_name` keeps).
    Invisible characters between two kept neighbours go back between them; those in or next to a secret go with it.
    """
    origin: list[int | None] = [i for i, ch in enumerate(text) if not _INVISIBLE.match(ch)]
    seen = "".join(text[i] for i in origin if i is not None)
    passes: list[list[Span]] = []
    current = _redact_visible(seen, passes)
    if current == seen:
        return text  # no secret, even read without them: the text is left exactly as it was
    for spans in passes:
        origin = _carry(origin, spans)
    out: list[str] = []
    previous = -1
    for ch, at in zip(current, origin, strict=True):
        if at is not None:
            between = text[previous + 1 : at]
            if between and not _INVISIBLE.sub("", between):  # only invisible characters: nothing redacted there
                out.append(between)
            previous = at
        out.append(ch)
    tail = text[previous + 1 :]
    if origin and origin[-1] is not None and tail and not _INVISIBLE.sub("", tail):
        out.append(tail)
    return "".join(out)


def _carry(origin: list[int | None], spans: list[Span]) -> list[int | None]:
    """`origin` once each span was replaced: the characters a replacement kept keep their origin, its others None."""
    carried: list[int | None] = []
    done = 0
    for s, e, length, kept in spans:
        carried += origin[done : s + kept] + [None] * (length - kept)
        done = e
    return carried + origin[done:]


# A replaced part of a text: (start, end, the replacement's length, how many of its first characters it kept).
Span = tuple[int, int, int, int]


def _redact_visible(text: str, passes: list[list[Span]] | None = None) -> str:
    """Every pattern whose gates `text` holds, in order, then the PEM bodies found from their END line.
    `passes`, when given, gets the spans each pass replaced, in the text as that pass found it."""
    present = _gates(text)
    if not present:
        return text
    for pattern, replace, gates in _PATTERNS:
        if not gates & present:
            continue
        spans: list[Span] = []

        def record(
            m: re.Match[str], replace: Callable[[re.Match[str]], str] = replace, spans: list[Span] = spans
        ) -> str:
            out = replace(m)
            same = (i for i, (a, b) in enumerate(zip(out, m.group(), strict=False)) if a != b)
            spans.append((m.start(), m.end(), len(out), next(same, min(len(out), m.end() - m.start()))))
            return out

        text = pattern.sub(record, text)
        if spans and passes is not None:
            passes.append(spans)
    if "-----END " in text:
        spans = _pem_tail_spans(text)
        text = _replace_spans(text, spans)
        if spans and passes is not None:
            passes.append(spans)
    return text


# How far past a cut the patterns look. Every pattern that needs the end of a secret to know it (an AWS key id,
# a URL's password before its `@`) matches within a few hundred characters; the rest is room for a secret of
# several parts (a cookie header, a PEM body) that starts before a cut.
MARGIN = 16_384
# A run of characters a token is made of (what a bare value runs over, see _VALUE).
_TOKEN_RUN = re.compile(r"""[^\s"',;&\\]+""")


def redact_slice(text: str, start: int, end: int, *, margin: int = MARGIN) -> str:
    """The redacted form of `text[start:end]`, in time bounded by the slice, not by `text`.

    Only the window `margin` characters wider on each side is scanned. A secret that crosses a cut is
    recognised in the window and dropped whole: its placeholder is kept (or not) entirely, never half of
    its value. A token that crosses `start` and began before the window (longer than `margin`, so no
    pattern could see where it began) is dropped up to its end: it may be the tail of a secret.
    """
    n = len(text)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if start >= end:
        return ""
    lo, hi = max(0, start - margin), min(n, end + margin)
    if lo > 0 and _TOKEN_RUN.fullmatch(text, lo - 1, start + 1):
        token = _TOKEN_RUN.match(text, start, hi)
        start = min(end, token.end()) if token else start
        if start >= end:
            return ""
    window, first, last = _redact_tracking(text[lo:hi], start - lo, end - lo)
    return window[first:last]


def redact_truncate(text: str, limit: int, ellipsis: str = _ELLIPSIS) -> str:
    """Redact, then cut to `limit` characters: a cut never leaves half a secret for the patterns to miss.

    Bounded: only the head that can be kept is redacted (twice `limit`, room for redaction to shrink it)."""
    if limit <= 0:
        return ""
    whole = len(text) <= 2 * limit
    text = redact(text) if whole else redact_slice(text, 0, 2 * limit)
    if whole and len(text) <= limit:
        return text
    return text[: max(0, limit - len(ellipsis))] + ellipsis[:limit]


def _redact_tracking(text: str, start: int, end: int) -> tuple[str, int, int]:
    """redact(text), and where positions `start` and `end` of `text` are in it. A position inside a secret
    moves out of it: `start` to where its placeholder begins, `end` to where it ends. Invisible characters
    are looked through as `redact` does."""
    if text and not text.isascii() and _INVISIBLE.search(text):
        seen = _INVISIBLE.sub("", text)
        shifted = (start - len(_INVISIBLE.findall(text, 0, start)), end - len(_INVISIBLE.findall(text, 0, end)))
        scrubbed, first, last = _redact_tracking(seen, *shifted)
        if scrubbed != seen:
            return scrubbed, first, last
    passes: list[list[Span]] = []
    text = _redact_visible(text, passes)
    for spans in passes:
        start, end = _moved(start, spans, to_end=False), _moved(end, spans, to_end=True)
    return text, start, end


def _moved(position: int, spans: list[Span], *, to_end: bool) -> int:
    """Where `position` is once each span, in order, was replaced."""
    shift = 0
    for s, e, length, _ in spans:
        if e <= position:
            shift += length - (e - s)
        elif s < position:  # inside this secret: to one side of its placeholder
            return s + shift + (length if to_end else 0)
        else:
            break
    return position + shift


def _replace_spans(text: str, spans: list[Span]) -> str:
    out: list[str] = []
    done = 0
    for s, e, _, _ in spans:
        out += (text[done:s], REDACTED)
        done = e
    out.append(text[done:])
    return "".join(out)


def _pem_tail_spans(text: str) -> list[Span]:
    """Each PEM body found from its END line, END line included: a body whose BEGIN line was cut off is the base64
    lines right before `-----END … PRIVATE KEY-----`."""
    spans: list[Span] = []
    done = 0
    for end in _PEM_END.finditer(text):
        spans.append((_base64_lines_before(text, done, end.start()), end.end(), len(REDACTED), 0))
        done = end.end()
    return spans


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


# Text still being written: its last word may be the start of a secret, and these tails may still become part
# of one after a space: a placeholder (its secret may go on: an Authorization scheme before its credentials),
# `Bearer ` before its token, a PEM BEGIN or END line not yet whole.
_OPEN_TAIL = re.compile(r"(?i)\bbearer[ \t]+\Z|\[REDACTED\][ \t]+\Z|-----(?:BEGIN|END)[A-Z0-9 ]*\Z")


def settled(redacted: str) -> int:
    """How much of `redacted` (the redacted form of text still being written) no continuation can change:
    whole words, less a tail a later part could still make a secret of (`_OPEN_TAIL`) and the base64 lines an
    END line could still follow (the walk back `redact` makes from one)."""
    cut = len(redacted)
    while cut and not redacted[cut - 1].isspace():
        cut -= 1
    while True:
        before = cut
        cut = _base64_lines_before(redacted, 0, cut)
        tail = _OPEN_TAIL.search(redacted, 0, cut)
        if tail:
            cut = tail.start()
        if cut == before:
            return cut


# Keys whose value is a credential, whatever it looks like: headers (`Authorization`, `X-Api-Key`, `Cookie`, ...)
# and the names the text patterns know. Compared lower-cased without `-` and `_`, so `x_api_key` is `X-Api-Key`.
SECRET_KEYS = frozenset(
    {
        *("authorization", "proxyauthorization", "xapikey", "apikey", "xauthtoken", "authtoken", "cookie"),
        *("cookies", "setcookie", "xamzsecuritytoken", "password", "passwd", "passphrase", "token", "accesstoken"),
        *("refreshtoken", "clientsecret", "secret", "secretaccesskey", "awssecretaccesskey", "sessiontoken"),
        *("awssessiontoken", "privatekey"),
    }
)


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and _names_a_secret(key)


@functools.lru_cache(maxsize=4096)  # the keys of events and tool args: a small set, asked on every log line
def _names_a_secret(key: str) -> bool:
    return key.lower().replace("-", "").replace("_", "") in SECRET_KEYS


def redact_value(value: Any) -> Any:
    """Redact strings inside nested dicts/lists/tuples (structlog events, tool args, blocks); under a key that
    names a credential (see SECRET_KEYS) every string and number becomes [REDACTED], the key stays."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _hidden(v) if is_secret_key(k) else redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


def _hidden(value: Any) -> Any:
    """A credential's value: strings and numbers go, the shape of containers stays (a list of cookies)."""
    if isinstance(value, bool) or value is None or value == "":
        return value
    if isinstance(value, str | bytes | int | float):
        return REDACTED
    if isinstance(value, dict):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_hidden(v) for v in value)
    return REDACTED


def redaction_processor(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """structlog processor: the last line of defence before anything is written."""
    redacted: dict[str, Any] = redact_value(dict(event_dict))
    return redacted
