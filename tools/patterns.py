"""A log pattern compiled by RE2, as grep_log and k8s_logs take it: matching costs time linear in the text, never a
backtracking blow-up, and a pattern RE2 refuses gets a one-line error naming the construct to rewrite."""

from __future__ import annotations

import re
from typing import Any

import re2

from tools.api import ToolError

MAX_REGEX_MEM = 16 * 1024 * 1024  # what RE2 may use for one pattern (program plus DFA cache)

# What RE2 refuses that Python's re accepts, by the text of RE2's error ("<kind>: <fragment>").
_PERL_OPERATORS = {
    "(?=": "a lookahead (?=…)",
    "(?!": "a negative lookahead (?!…)",
    "(?<=": "a lookbehind (?<=…)",
    "(?<!": "a negative lookbehind (?<!…)",
    "(?>": "an atomic group (?>…)",
    "(?(": "a conditional group (?(…)…|…)",
    "(?#": "a comment group (?#…)",
}
_ESCAPES = {
    "\\Z": "\\Z (write \\z or $ for the end of the line)",
    "\\u": "a \\u escape (write \\x{…})",
    "\\U": "a \\U escape (write \\x{…})",
    "\\N": "a named character \\N{…} (write \\x{…})",
}
_BACKREF_RE = re.compile(r"\\[1-9]\d*")


def compile_pattern(pattern: str, tool: str = "grep_log") -> Any:
    """`pattern` compiled by RE2: matching costs time linear in the text, never a backtracking blow-up.
    Python's syntax minus what needs backtracking; a refusal is a ToolError naming the construct."""
    options = re2.Options()
    options.max_mem = MAX_REGEX_MEM  # a pattern needing more is refused at compile time
    options.log_errors = False  # the error goes to the model, not to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        arg = e.args[0] if e.args else ""
        error = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
        raise ToolError(_refusal(pattern, error, tool)) from None
    except UnicodeError:
        raise ToolError("pattern: invalid regular expression: not valid Unicode (a lone surrogate)") from None


def _refusal(pattern: str, error: str, tool: str) -> str:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        return f"pattern: invalid regular expression: {e}"  # Python's message: the syntax the model writes
    if error.startswith("pattern too large"):
        return (
            f"{tool}: the pattern needs more than the {MAX_REGEX_MEM / 2**20:.1f}M this linear-time matcher "
            "allows a pattern; simplify it (fewer or smaller counted repetitions)"
        )
    construct = _construct(pattern, error)
    if construct is None:
        return f"{tool}: the pattern is not supported by this linear-time matcher (RE2): {error}"
    return f"{tool}: the pattern uses {construct}, which this linear-time matcher does not support; rewrite it without"


def _construct(pattern: str, error: str) -> str | None:
    kind, _, fragment = error.partition(": ")
    if kind == "invalid escape sequence":
        if _BACKREF_RE.fullmatch(fragment):
            return f"a backreference ({fragment})"
        return _ESCAPES.get(fragment, f"the escape {fragment}")
    if kind == "invalid perl operator":
        if fragment in _PERL_OPERATORS:
            return _PERL_OPERATORS[fragment]
        if fragment == "(?P":
            return "a named backreference (?P=…)" if "(?P=" in pattern else None
        if fragment.startswith("(?"):
            return f"the inline flag group {fragment}…) (RE2 has only the flags i, m, s and U)"
    if kind == "bad repetition operator" and fragment.endswith("+"):
        return f"a possessive quantifier ({fragment})"
    if kind == "invalid repetition size":
        return f"a repetition count of more than 1000 in all ({fragment}; nested counts multiply)"
    return None
