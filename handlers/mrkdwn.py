"""Model Markdown to Slack mrkdwn, the splitter that cuts long mrkdwn into section-sized chunks, and mrkdwn back
to what a person reads where Slack doesn't render it (`plain`: a terminal, the demo's transcript).

Pure functions, no Slack imports. A cut never falls inside an `&amp;` entity, a `<…>`
link or mention, or leaves a code fence open: a cut inside a fence closes it and the
next chunk re-opens it.

Two rules keep what a reader sees honest. A link never shows words in place of its
target: a Markdown link becomes its URL alone, or "label (URL)", with the host in
ASCII (punycode) and the rest percent-encoded. And characters a reader cannot see, or
that reorder what they see (bidi controls, zero-width and other format characters),
are shown as `⟨U+202E⟩` (`reveal`, from bot.core.reveal).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from bot.core.reveal import count_hidden as count_hidden  # the text rules live in the core layer (bot.core.reveal)
from bot.core.reveal import is_hidden as is_hidden
from bot.core.reveal import reveal as reveal
from handlers import messages as m

SECTION_TEXT_MAX = 3000  # Slack's limit for a section's text

FENCE = "```"
_REOPEN = "```\n"
_RECLOSE = "\n```"

_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^(\s*)[*+-]\s+(?=\S)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_LINK = re.compile(r"\[([^\]\n|]+)\]\((https?://[^\s)|]+)\)")
_INLINE_CODE = re.compile(r"(`[^`\n]+`)")
_LANG = re.compile(r"^[\w+#.-]*$")
# A label that reads as an address: a scheme, "www.", or one word with a dot before letters ("status.example.com").
_ADDRESS_LIKE = re.compile(r"://|^www\.|^\S*[^\W_]\.[^\W\d_]{2,}\S*$", re.IGNORECASE)
# What stays as is in a URL we link: letters, digits and punctuation, but Slack's link syntax (`<`, `>`, `|`)
# and what RFC 3986 never allows unencoded.
_USER = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_GROUP = re.compile(r"<!subteam\^([A-Z0-9]+)(?:\|([^>]*))?>")
_DATE = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")
_SLACK_LINK = re.compile(r"<(https?://[^|>]+)\|([^>]+)>")
_BARE_LINK = re.compile(r"<(https?://[^|>]+)>")
_EMOJI = re.compile(r":([a-z0-9_+-]+):( ?)")
_STRONG = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_ITALIC = re.compile(r"(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])")
_STRIKE_MRKDWN = re.compile(r"(?<![\w~])~(?=\S)([^~\n]+?)(?<=\S)~(?![\w~])")
_BARE_ID = re.compile(r"\b([UW]0[A-Z0-9]{2,})\b")
_URL_SAFE = "".join(c for c in string.punctuation if c not in '<>|"`\\^{}') + string.ascii_letters + string.digits


def markdown_to_mrkdwn(markdown: str) -> str:
    """Escape, then translate the Markdown a model writes into Slack mrkdwn; code fences go on their own lines.

    Links show their real target (`_link`); hidden characters are revealed (`reveal`, prose rules).
    """
    out: list[str] = []
    in_fence = False
    for line in m.escape(markdown.replace("\r\n", "\n")).split("\n"):
        stripped = line.strip()
        if _is_fence(line, in_fence):
            rest = stripped[len(FENCE) :]
            out.append(FENCE)
            if not in_fence and not _LANG.match(rest):
                out.append(rest)  # Slack style "```code" on the opening line
            elif in_fence and rest.strip():
                out.append(_inline(rest))
            in_fence = not in_fence
        elif in_fence:
            out.append(line)
        else:
            out.append(_inline(line))
    if in_fence:
        out.append(FENCE)
    # After the links are built: their URLs are ASCII by then, so only text around them changes.
    return reveal("\n".join(out).strip(), prose=True)


def split_mrkdwn(text: str, limit: int = SECTION_TEXT_MAX) -> list[str]:
    """Non-empty chunks of at most `limit` characters, cut at a paragraph, line or word.

    A cut inside a code fence closes the fence and the next chunk re-opens it.
    """
    if limit < 40:
        raise ValueError("limit too small to split into readable chunks")
    chunks: list[str] = []
    rest = text.strip()
    in_fence = False  # fence state as Slack will see it: each chunk starts a new line
    while rest:
        prefix = _REOPEN if in_fence else ""
        last = prefix + rest + (_RECLOSE if _fence_state_after(rest, in_fence) else "")
        if len(last) <= limit:
            _append_chunk(chunks, last)
            break
        end, start = _cut_point(rest, limit - len(prefix) - len(_RECLOSE))
        fenced = _fence_state_after(rest[:end], in_fence)
        if fenced:
            end, start, fenced = _keep_fences_whole(rest, end, start, in_fence, limit - len(prefix))
        _append_chunk(chunks, prefix + rest[:end].rstrip() + (_RECLOSE if fenced else ""))
        rest = rest[start:] if fenced else rest[start:].lstrip("\n")
        in_fence = fenced
    return chunks


def _inline(line: str) -> str:
    heading = _HEADING.match(line)
    if heading and heading.group(1):
        return "*" + heading.group(1).replace("**", "") + "*"
    line = _BULLET.sub(r"\1• ", line)
    parts = _INLINE_CODE.split(line)
    for i in range(0, len(parts), 2):  # even parts are outside `inline code`
        part = _BOLD.sub(r"*\1*", parts[i])
        part = _STRIKE.sub(r"~\1~", part)
        parts[i] = _LINK.sub(_link, part)
    return "".join(parts)


def show_links(escaped: str) -> str:
    """Every `[label](url)` of already escaped Markdown written so it never hides where it goes (`_link`): the
    posted answer's rule, for text that stays Markdown (a streamed answer)."""
    return _LINK.sub(_link, escaped)


def _link(match: re.Match[str]) -> str:
    """`[label](url)` (both already escaped) as Slack mrkdwn that never hides where it goes.

    A link's visible text is its own URL: `<url>` alone when the label reads as an address
    (even the same host: comparing hosts is easy to fool with look-alike letters, user
    info or subdomains, and the URL costs a few characters), else `label (<url>)`. A URL
    that cannot be made plain ASCII, or that carries user info (`https://trusted@evil/`),
    is shown as text and not linked.
    """
    label, url = match.group(1), match.group(2)
    target = _ascii_url(unescape(url))
    shown = f"<{m.escape(target)}>" if target else url
    if _ADDRESS_LIKE.search(label.strip()):
        return shown
    return f"{label} ({shown})"


def _ascii_url(url: str) -> str | None:
    """The same URL in printable ASCII (an IDNA host, the rest percent-encoded), or None when that fails."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
        if not host or parts.username is not None or "@" in parts.netloc:
            return None
        host = host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        return None
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    rest = [quote(p, safe=_URL_SAFE) for p in (parts.path, parts.query, parts.fragment)]
    return urlunsplit((parts.scheme.lower(), netloc, *rest))


def unescape(text: str) -> str:
    """The inverse of `messages.escape`."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _is_fence(line: str, in_fence: bool) -> bool:
    stripped = line.strip()
    if not stripped.startswith(FENCE):
        return False
    # "```code```" on one line is a code span, not a fence.
    return in_fence or not (len(stripped) > 2 * len(FENCE) and stripped.endswith(FENCE))


def _fence_state_after(text: str, in_fence: bool) -> bool:
    for line in text.split("\n"):
        if _is_fence(line, in_fence):
            in_fence = not in_fence
    return in_fence


def _keep_fences_whole(rest: str, end: int, start: int, in_fence: bool, room: int) -> tuple[int, int, bool]:
    """Move a cut that would leave an empty code block: carry a closing fence back or an opening one forward.

    Returns (end, start, still inside a fence at the cut).
    """
    line_end = rest.find("\n", start)
    line_end = len(rest) if line_end == -1 else line_end
    at_line_break = "\n" in rest[end:start]
    if at_line_break and _is_fence(rest[start:line_end], True) and line_end <= room:
        return line_end, min(line_end + 1, len(rest)), False
    line_start = rest.rfind("\n", 0, end) + 1
    if (
        line_start > 0
        and _is_fence(rest[line_start:end], False)
        and not _fence_state_after(rest[: line_start - 1], in_fence)
    ):
        return line_start - 1, line_start, False
    return end, start, True


def _cut_point(text: str, budget: int) -> tuple[int, int]:
    """(end of this chunk, start of the next): the last paragraph, line or word break that fits."""
    window = text[: budget + 1]
    for sep, floor in (("\n\n", budget // 2), ("\n", budget // 4), (" ", budget // 4), ("\n", 1), (" ", 1)):
        pos = window.rfind(sep)
        if pos >= floor:
            end = outside_markup(text, pos)
            if end > 0:
                start = end + len(sep) if end == pos else end
                return end, start
    end = outside_markup(text, budget)
    if end <= 0:
        end = budget
    return end, end


def outside_markup(text: str, pos: int) -> int:
    """Move a cut back so it does not fall inside an `&amp;` entity or a `<…>` link/mention we built."""
    amp = text.rfind("&", max(0, pos - 4), pos)
    if amp != -1 and ";" not in text[amp:pos]:
        pos = amp
    lt = text.rfind("<", 0, pos)
    if lt != -1 and ">" not in text[lt:pos]:
        pos = lt
    return pos


def _append_chunk(chunks: list[str], chunk: str) -> None:
    if chunk.replace(FENCE, "").strip():
        chunks.append(chunk)


def plain_link(url: str) -> str:
    """A URL from outside (an alert's generatorURL, a runbook) as mrkdwn that shows where it goes: `<url>` in
    ASCII for http(s) URLs without user info, otherwise escaped text that is not a link."""
    target = _ascii_url(url) if url.lower().startswith(("http://", "https://")) else None
    return f"<{m.escape(target)}>" if target else m.escape(reveal(url, prose=True))


def plain(
    mrkdwn: str,
    names: Mapping[str, str],
    *,
    emoji: Mapping[str, str],
    bare_ids: bool = True,
    bold: Callable[[str], str] = str,
) -> str:
    """mrkdwn -> what a person reads: mentions as @name (else @id), dates by their fallback, `<url|text>` as
    "text (url)", each `:code:` in `emoji` as its value (an empty one takes the space after it along; codes not in
    `emoji` stay as written), no markup; `*bold*` as `bold(text)` (ANSI bold on a terminal). Code fences and
    backticks are kept: a caller that shows code apart splits it out first."""
    text = _USER.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), mrkdwn)
    text = _GROUP.sub(lambda m: "@" + (m.group(2) or m.group(1)), text)
    text = _DATE.sub(lambda m: m.group(1), text)
    text = _SLACK_LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", text)
    text = _BARE_LINK.sub(lambda m: m.group(1), text)

    def shown(m: re.Match[str]) -> str:
        code, space = m.group(1), m.group(2)
        if code not in emoji:
            return m.group(0)
        return emoji[code] + space if emoji[code] else ""

    text = _EMOJI.sub(shown, text)
    text = _STRONG.sub(lambda m: bold(m.group(1)), text)
    text = _ITALIC.sub(r"\1", text)
    text = _STRIKE_MRKDWN.sub(r"\1", text)  # the living summary's ~Refuted~
    text = unescape(text).replace("\u200b", "")
    if bare_ids:  # a model that only knows user ids writes them bare, or as an escaped <@U…>
        text = _USER.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), text)
        text = _BARE_ID.sub(lambda m: "@" + names[m.group(1)] if m.group(1) in names else m.group(1), text)
    return text
