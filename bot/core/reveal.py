"""Characters a reader could miss, or that reorder what they see (bidi controls, zero-width and other format
characters), written out as `⟨U+202E⟩`: one rule for cards, the CLI, the thread and every tool that shows outside
text (core layer: the tools and the Slack side both use it; handlers.mrkdwn re-exports it)."""

from __future__ import annotations

import re
import unicodedata

# Invisible or text-reordering characters beyond Unicode's format/control categories: fillers that render
# as nothing (Hangul fillers, the braille blank, the combining grapheme joiner, Khmer inherent vowels),
# Mongolian variation selectors and the variation selectors (which can carry hidden data).
_FILLERS = (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0)
_INVISIBLE = frozenset([*_FILLERS, *range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
# Prose keeps what emoji are built from (a joiner, the text/emoji selectors) and any kind of space:
# neither can reorder text, and no approval is bound to prose.
_PROSE_KEEPS = frozenset([0x200D, 0xFE0E, 0xFE0F])
_PROSE_CATEGORIES = frozenset(["Cf", "Cc", "Cs", "Zl", "Zp"])
_CARD_CATEGORIES = _PROSE_CATEGORIES | {"Co", "Cn"}


def is_hidden(ch: str, *, prose: bool = False) -> bool:
    """Whether a reader could miss `ch` or have text reordered by it (newline and tab are plain text).

    On a card (`prose=False`) every such character counts, and so does any space but U+0020;
    in prose (answers, reports, the status line) emoji joiners, spaces, private-use and
    unassigned characters stay as they are.
    """
    if ch in "\n\t":
        return False
    cp = ord(ch)
    if prose and cp in _PROSE_KEEPS:
        return False
    if cp in _INVISIBLE:
        return True
    category = unicodedata.category(ch)
    if prose:
        return category in _PROSE_CATEGORIES
    return category in _CARD_CATEGORIES or (category == "Zs" and ch != " ")


# The hidden characters of ASCII text, under both rules: its control characters (category Cc) but newline and tab.
# A tool's output is ASCII with newlines, mostly: one regex scan instead of a category lookup a character.
_ASCII_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def _written_out(match: re.Match[str]) -> str:
    return f"\u27e8U+{ord(match.group()):04X}\u27e9"


def _char_class(code_points: frozenset[int]) -> str:
    """A regex character class of `code_points`, as ranges (faster to scan than single characters)."""
    runs: list[list[int]] = []
    for cp in sorted(code_points):
        if runs and cp == runs[-1][1] + 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return "[" + "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "") for a, b in runs) + "]"


# Characters str.isprintable() passes that are hidden all the same (the fillers and selectors of _INVISIBLE).
_PRINTABLE_BUT_HIDDEN = re.compile(_char_class(_INVISIBLE))


def _nothing_hidden(text: str) -> bool:
    """True when no character of `text` is hidden under either rule, found without a look at each character:
    str.isprintable() is false exactly for Unicode's Other and Separator categories but the ASCII space, which
    holds every category the card rule hides (prose hides fewer), so printable text with no _INVISIBLE filler
    (newlines and tabs aside) hides nothing."""
    if "\n" in text or "\t" in text:
        text = text.replace("\n", "").replace("\t", "")
    return text.isprintable() and not _PRINTABLE_BUT_HIDDEN.search(text)


def reveal(text: str, *, prose: bool = False) -> str:
    """`text` with each hidden character (see `is_hidden`) written out as `⟨U+202E⟩`."""
    if text.isascii():
        return text if text.isprintable() else _ASCII_HIDDEN.sub(_written_out, text)
    if _nothing_hidden(text):
        return text
    return "".join(f"\u27e8U+{ord(ch):04X}\u27e9" if is_hidden(ch, prose=prose) else ch for ch in text)


def count_hidden(text: str) -> int:
    """How many characters `reveal` (card rules) writes out."""
    if text.isascii():
        return 0 if text.isprintable() else len(_ASCII_HIDDEN.findall(text))
    return 0 if _nothing_hidden(text) else sum(is_hidden(ch) for ch in text)
