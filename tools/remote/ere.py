"""An RE2 pattern (grep_log's syntax) rewritten as a POSIX ERE for GNU `grep -E` on a host: exactly, or refused.

"Exactly" means: on every line of valid UTF-8 text, the ERE matches where RE2 matches. So nothing is left to
the remote locale: RE2's classes are ASCII (`\\w`, `[[:alpha:]]`), and become explicit ASCII bracket expressions;
case-insensitive matching is spelled out (RE2 folds k to the Kelvin sign and s to the long s, as grep -i in C does
not); `x{,3}` is literal in RE2 and becomes literal here. The ERE runs in the C locale (bytes) unless it needs
characters: `.` and negated classes match one character, so those EREs run in C.UTF-8 (`Ere.utf8`). `\\b` is an
ASCII word boundary only in the C locale, so `\\b` together with a construct that needs characters is refused.
What has no exact ERE (Unicode classes, `\\C`, a newline, a NUL, inline flags after the start) is refused with a
ToolError naming it. The pattern was accepted by RE2 first, so what is parsed here is well formed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.api import ToolError

MAX = 0x10FFFF
KELVIN, LONG_S = 0x212A, 0x17F
_FOLDS = ({ord("k"), ord("K"), KELVIN}, {ord("s"), ord("S"), LONG_S})  # RE2's only orbits leaving ASCII
_SMALL = 64  # up to this many non-ASCII characters in a class are listed one by one

Ranges = list[tuple[int, int]]  # sorted, disjoint, inclusive code point intervals


@dataclass(frozen=True)
class Ere:
    """The ERE for `grep -E -e`, and the construct that makes it match characters in a UTF-8 locale ("" when it
    matches bytes in the C locale)."""

    expression: str
    characters: str = ""

    @property
    def locale(self) -> str:
        return "C.UTF-8" if self.characters else "C"


def refuse(what: str) -> ToolError:
    return ToolError(f"grep_log: {what} is not supported (it runs as grep -E on the host); rewrite the pattern")


def _norm(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in _norm(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX:
        out.append((nxt, MAX))
    return out


def _chars(text: str) -> Ranges:
    return [(ord(c), ord(c)) for c in text]


_D: Ranges = [(0x30, 0x39)]
_W: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_S: Ranges = _chars("\t\n\f\r ")  # RE2's \s: no \v
_PERL = {"d": _D, "w": _W, "s": _S}
_POSIX: dict[str, Ranges] = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0, 0x7F)],
    "blank": _chars("\t "),
    "cntrl": [(0, 0x1F), (0x7F, 0x7F)],
    "digit": _D,
    "graph": [(0x21, 0x7E)],
    "lower": [(0x61, 0x7A)],
    "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(0x09, 0x0D), (0x20, 0x20)],
    "upper": [(0x41, 0x5A)],
    "word": _W,
    "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}


def _has(ranges: Ranges, c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in ranges)


def _fold(ranges: Ranges) -> Ranges:
    """`ranges` closed under RE2's case folding; ToolError for non-ASCII letters (their orbits are not modelled)."""
    out = list(ranges)
    for lo, hi in ranges:
        for a, b in ((0x41, 0x5A), (0x61, 0x7A)):  # A-Z <-> a-z
            s, e = max(lo, a), min(hi, b)
            if s <= e:
                out.append((s ^ 0x20, e ^ 0x20))
        if lo > 0x7F and (lo, hi) != (0x80, MAX):
            if hi - lo > 256:
                raise refuse("case-insensitive matching of a range of non-ASCII characters")
            for c in range(lo, hi + 1):
                ch = chr(c)
                if c not in (KELVIN, LONG_S) and len({ch, ch.lower(), ch.upper(), ch.title()}) > 1:
                    raise refuse(f"case-insensitive matching of the non-ASCII letter {ch!r}")
    for orbit in _FOLDS:
        if any(_has(ranges, c) for c in orbit):
            out += [(c, c) for c in orbit]
    return _norm(out)


_BRACKET_SPECIAL = frozenset("]^[-")


def _bracket_body(ranges: Ranges) -> str:
    """ASCII `ranges` (no \\n, no NUL) as the inside of a POSIX bracket, where a backslash is an ordinary char:
    "]" first, "^" not first, "[" where no "." ":" "=" can follow it, "-" last."""
    points = {c for lo, hi in ranges for c in range(lo, hi + 1)}
    special = {ch for ch in _BRACKET_SPECIAL if ord(ch) in points}
    plain = sorted(c for c in points if chr(c) not in _BRACKET_SPECIAL)
    items: list[str] = []
    k = 0
    while k < len(plain):
        j = k
        while j + 1 < len(plain) and plain[j + 1] == plain[j] + 1:
            j += 1
        items.append(f"{chr(plain[k])}-{chr(plain[j])}" if j - k >= 2 else "".join(map(chr, plain[k : j + 1])))
        k = j + 1
    body = ("]" if "]" in special else "") + "".join(items)
    tail = ("[" if "[" in special else "") + ("-" if "-" in special else "")
    if "^" in special and not body:  # "^" must not come first
        return "[^" + ("-" if "-" in special else "") if "[" in special else "-^" if "-" in special else "^"
    return body + ("^" if "^" in special else "") + tail


_FLAGS_RE = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?\)")
_GROUP_RE = re.compile(r"\(\?(?:P?<[A-Za-z_]\w*>|:|([imsU]*)(?:-([imsU]*))?:)")


def _apply(m: re.Match[str], icase: bool) -> bool:
    """icase after the flags of `m` ((?i), (?-i), (?i-s:…)): group 1 sets them, group 2 clears them."""
    on, off = m.group(1) or "", m.group(2) or ""
    return (icase or "i" in on) and "i" not in off


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.out: list[str] = []
        self.utf8: list[str] = []  # the constructs that need a UTF-8 locale
        self.bytewise: list[str] = []  # ... and those that need the C locale
        self.last = "start"  # what the previous item was: start, atom, anchor

    def run(self) -> Ere:
        icase = False
        stack: list[bool] = []
        p = self.p
        while self.i < len(p):
            ch = p[self.i]
            repeat = re.match(r"\{\d+(?:,\d*)?\}", p[self.i :]) if ch == "{" else None
            if ch == "\\":
                self._escape(icase)
            elif ch == "[":
                self.i += 1
                self._set(self._class(icase), "a negated character class")
            elif p.startswith("(?", self.i) and (m := _FLAGS_RE.match(p, self.i)):
                icase = _apply(m, icase)  # RE2: from here to the end of the group
                self.i = m.end()
            elif ch == "(":
                stack.append(icase)
                if m := _GROUP_RE.match(p, self.i):
                    icase = _apply(m, icase) if m.group(1) is not None else icase
                    self.i = m.end()
                elif p.startswith("(?", self.i):
                    raise refuse(f"the group {p[self.i : self.i + 3]}…")
                else:
                    self.i += 1
                self.out.append("(")
                self.last = "start"
            elif ch == ")":
                icase = stack.pop()
                self.i += 1
                self.out.append(")")
                self.last = "atom"
            elif ch == "|":
                self.i += 1
                self.out.append("|")
                self.last = "start"
            elif ch in "*+?" or repeat:
                text = repeat.group(0) if repeat else ch
                if self.last == "anchor":
                    raise refuse(f"a repeated anchor ({self.out[-1]}{text})")
                self.i += len(text)
                if p.startswith("?", self.i):  # lazy: the same lines match
                    self.i += 1
                self.out.append(text)
            elif ch in "^$":
                self.i += 1
                self.out.append(ch)
                self.last = "anchor"
            elif ch == ".":
                self.i += 1
                self.utf8.append(".")
                self.out.append(".")
                self.last = "atom"
            else:
                self.i += 1
                self._char(ord(ch), icase)
        if self.utf8 and self.bytewise:
            raise refuse(
                f"{self.bytewise[0]} (an ASCII word boundary) together with {self.utf8[0]} "
                "(one character, not one byte)"
            )
        return Ere("".join(self.out), self.utf8[0] if self.utf8 else "")

    def _escape(self, icase: bool) -> None:
        p, i = self.p, self.i
        nxt = p[i + 1]
        if nxt in "dwsDWS":
            self.i += 2
            base = _PERL[nxt.lower()]
            self._set(_complement(base) if nxt.isupper() else _fold(base) if icase else base, f"\\{nxt}")
        elif nxt in "bB":
            self.i += 2
            self.bytewise.append(f"\\{nxt}")
            self.out.append(f"\\{nxt}")
            self.last = "anchor"
        elif nxt in "Az":
            self.i += 2
            self.out.append("^" if nxt == "A" else "$")
            self.last = "anchor"
        elif nxt == "Q":
            end = p.find("\\E", i + 2)
            text = p[i + 2 :] if end < 0 else p[i + 2 : end]
            self.i = len(p) if end < 0 else end + 2
            for c in text:
                self._char(ord(c), icase)
        elif nxt == "E":
            self.i += 2
        else:
            code, self.i = self._escaped_char(i)
            self._char(code, icase)

    def _escaped_char(self, i: int) -> tuple[int, int]:
        """The character the escape at p[i] stands for, and the index after it; ToolError for a class or \\C."""
        p = self.p
        nxt = p[i + 1]
        simple = {"a": 7, "f": 12, "t": 9, "n": 10, "r": 13, "v": 11}
        if nxt in simple:
            return simple[nxt], i + 2
        if nxt == "x":
            if p.startswith("{", i + 2):
                end = p.index("}", i + 3)
                return int(p[i + 3 : end], 16), end + 1
            return int(p[i + 2 : i + 4], 16), i + 4
        if nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", p[i + 1 :])
            assert m is not None
            return int(m.group(0), 8), i + 1 + m.end()
        if nxt in "pP":
            name = p[i + 2] if p[i + 2] != "{" else p[i + 2 : p.index("}", i) + 1]
            raise refuse(f"the Unicode class \\{nxt}{name}")
        if nxt == "C":
            raise refuse("\\C (any byte)")
        return ord(nxt), i + 2

    def _char(self, c: int, icase: bool) -> None:
        if icase:
            folded = _fold([(c, c)])
            if folded != [(c, c)]:
                self._set(folded, "a case-insensitive letter")
                return
        self.out.append(_literal(c))
        self.last = "atom"

    def _class(self, icase: bool) -> Ranges:
        """The set the bracket expression after p[i] ("[") stands for, as RE2 reads it (its items folded when
        icase, except negated Perl and POSIX classes, as RE2 does)."""
        p = self.p
        negated = p.startswith("^", self.i)
        self.i += negated
        plain: Ranges = []
        kept: Ranges = []  # never folded
        first = True
        while first or p[self.i] != "]":
            first = False
            if m := re.match(r"\[:(\^?)([a-z]+):\]", p[self.i :]):
                self.i += m.end()
                (kept if m.group(1) else plain).extend(
                    _complement(_POSIX[m.group(2)]) if m.group(1) else _POSIX[m.group(2)]
                )
                continue
            if p.startswith("\\", self.i) and p[self.i + 1] in "dwsDWS":
                nxt = p[self.i + 1]
                self.i += 2
                base = _PERL[nxt.lower()]
                (kept if nxt.isupper() else plain).extend(_complement(base) if nxt.isupper() else base)
                continue
            lo = self._class_char()
            hi = lo
            if p.startswith("-", self.i) and p[self.i + 1] != "]":
                self.i += 1
                hi = self._class_char()
            plain.append((lo, hi))
        self.i += 1
        items = _norm((_fold(_norm(plain)) if icase else plain) + kept)
        return _complement(items) if negated else items

    def _class_char(self) -> int:
        p = self.p
        if p[self.i] == "\\":
            c, self.i = self._escaped_char(self.i)
            return c
        self.i += 1
        return ord(p[self.i - 1])

    def _set(self, ranges: Ranges, construct: str) -> None:
        """Emit the ERE for one character out of `ranges`: a bracket, or a group of alternatives."""
        ranges = _norm([r for lo, hi in ranges for r in _without_nl_nul(lo, hi)])
        if not ranges:
            raise refuse("a character class that matches nothing in a line")
        ascii_part = [(lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F]
        high = [(max(lo, 0x80), hi) for lo, hi in ranges if hi > 0x7F]
        missing = _without_surrogates(_complement(ranges))
        missing_high = [(max(lo, 0x80), hi) for lo, hi in missing if hi > 0x7F]
        if not high:
            self.out.append(_one(ascii_part))
        elif _count(missing_high) <= _SMALL:
            body = _bracket_body([r for lo, hi in missing if lo <= 0x7F for r in _without_nl_nul(lo, min(hi, 0x7F))])
            body += "".join(chr(c) for lo, hi in missing_high for c in range(lo, hi + 1))
            self.out.append(f"[^{body}]" if body else ".")
            self.utf8.append(construct)
        elif _count(high) <= _SMALL and not _has(high, 0xFFFD):
            alts = ([_one(ascii_part)] if ascii_part else []) + [
                f"({chr(c)})" for lo, hi in high for c in range(lo, hi + 1)
            ]
            self.out.append("(" + "|".join(alts) + ")")
        else:
            raise refuse("a character class with a range of non-ASCII characters")
        self.last = "atom"


def _without_nl_nul(lo: int, hi: int) -> Ranges:
    """A line never holds a newline, and a file with a NUL is skipped (grep -I): neither is written in an ERE."""
    parts = ((max(lo, 1), min(hi, 9)), (max(lo, 11), hi))
    return [(a, b) for a, b in parts if a <= b]


def _without_surrogates(ranges: Ranges) -> Ranges:
    return [r for lo, hi in ranges for r in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)) if r[0] <= r[1]]


def _count(ranges: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in ranges)


def _one(ascii_ranges: Ranges) -> str:
    """One ASCII character out of `ascii_ranges`: a bracket, or the literal when there is just one."""
    if _count(ascii_ranges) == 1:
        return _literal(ascii_ranges[0][0])
    return f"[{_bracket_body(ascii_ranges)}]"


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def _literal(c: int) -> str:
    """The character `c` matching itself; a non-ASCII one as a group, so a repetition applies to all its bytes."""
    if c == 10:
        raise refuse("a newline, which never occurs inside a line,")
    if c == 0:
        raise refuse("a NUL character")
    if c == 0xFFFD:
        raise refuse("the replacement character U+FFFD (what an undecodable byte reads as here)")
    ch = chr(c)
    if c > 0x7F:
        return f"({ch})"
    return "\\" + ch if ch in _ERE_SPECIAL else ch


def translate(pattern: str) -> Ere:
    """The ERE that matches the same lines as the RE2 `pattern`; ToolError naming what has no exact ERE."""
    return _Translator(pattern).run()
