"""Pure tests of the two honesty rules in handlers/mrkdwn.py: links show their target, hidden characters show.

The end-to-end versions (through the real app and the fakes) are in tests/e2e/test_security_cards_e2e.py.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from bot.core.types import Approval, ApprovalState, RunResult, StopReason
from bot.run.report import HandoffReport, ToolSummary
from handlers import messages
from handlers.blocks import SlackMessage, approval_card, handoff_report, offers_approve, status_message, text_messages
from handlers.mrkdwn import count_hidden, is_hidden, markdown_to_mrkdwn, reveal

LABELLED_LINK = re.compile(r"<https?://[^|>]*\|")
# Every character the security brief names, plus what an attacker reaches for next.
HIDDEN = [
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    *map(chr, range(0x200B, 0x2010)),
    *map(chr, range(0x2060, 0x2065)),
    "\ufeff",
    "\u00ad",
    "\u061c",
    "\u180e",
    "\u2028",
    "\u2029",
    "\U000e0001",
    "\U000e0041",
    "\U000e007f",
    "\ufe00",
    "\ufe0f",
    "\U000e0100",
    "\u034f",
    "\u3164",
    "\u115f",
    "\u2800",
    "\x1b",
    "\r",
    "\x7f",
    "\x85",
    "\u00a0",
    "\u202f",
    "\u3000",
    "\ue000",
]


def marker(ch: str) -> str:
    return f"\u27e8U+{ord(ch):04X}\u27e9"


# --------------------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        # a label that reads as an address is dropped: the URL is the visible text
        ("[https://status.example.com/incident](https://evil.example/phish)", "<https://evil.example/phish>"),
        ("[status.example.com](https://evil.example/)", "<https://evil.example/>"),
        ("[www.status.example.com](https://evil.example/)", "<https://evil.example/>"),
        ("[Status.Example.COM/incident](https://evil.example/)", "<https://evil.example/>"),
        # the same host too: the URL alone is the simplest honest rendering
        ("[status.example.com](https://status.example.com/i)", "<https://status.example.com/i>"),
        ("[https://a.example](https://a.example)", "<https://a.example>"),
        # words stay, followed by the real target
        (
            "see [the runbook](https://wiki.example/rb?a=1&b=2)",
            "see the runbook (<https://wiki.example/rb?a=1&amp;b=2>)",
        ),
        ("[**graph**](https://g.example/d)", "*graph* (<https://g.example/d>)"),
        (
            "[status page on status.example.com](https://evil.example/)",
            "status page on status.example.com (<https://evil.example/>)",
        ),
        ("[v1.2](https://x.example/)", "v1.2 (<https://x.example/>)"),
        # a host in look-alike letters shows as punycode; the path in ASCII
        ("[status page](https://st\u0430tus.example.com/)", "status page (<https://xn--sttus-5ve.example.com/>)"),
        ("[x](https://a.example/caf\u00e9)", "x (<https://a.example/caf%C3%A9>)"),
        ("[x](https://a.example/%7Eme)", "x (<https://a.example/%7Eme>)"),  # an escape stays one escape
        ("[x](https://[::1]:8443/p)", "x (<https://[::1]:8443/p>)"),
        # a bidi override inside the URL cannot reorder what the reader sees
        (
            "[x](https://evil.example/\u202emoc.elpmaxe.sutats//:sptth)",
            "x (<https://evil.example/%E2%80%AEmoc.elpmaxe.sutats//:sptth>)",
        ),
        # user info ("trusted@evil") or a host that is no host: shown as text, never linked
        ("[status](https://status.example.com@evil.example/)", "status (https://status.example.com@evil.example/)"),
        ("[status](https://a..b/)", "status (https://a..b/)"),
        ("[x](https://a.example:99999/)", "x (https://a.example:99999/)"),
    ],
)
def test_a_link_shows_its_real_target(markdown: str, mrkdwn: str) -> None:
    assert markdown_to_mrkdwn(markdown) == mrkdwn


def test_a_bidi_override_in_a_label_is_shown_not_obeyed() -> None:
    # Under U+202E the URL after it would read backwards: "https://status.example.com/…" on screen.
    out = markdown_to_mrkdwn("[\u202elink](https://evil.example/moc.elpmaxe.sutats//:sptth)")
    assert out == f"{marker(chr(0x202E))}link (<https://evil.example/moc.elpmaxe.sutats//:sptth>)"


@pytest.mark.parametrize(
    "raw",
    [
        "<https://evil.example|https://status.example.com>",
        "<!channel>",
        "<!here>",
        "<!everyone>",
        "<@U0BOB>",
        "<#C0GENERAL>",
        "<!subteam^S0ONCALL>",
        "<!date^1714572000^{date}|https://status.example.com>",
        "<mailto:a@evil.example|ops@status.example.com>",
        "<tel:123|call the on-call>",
    ],
)
@pytest.mark.parametrize("where", ["{}", "`{}`", "```\n{}\n```", "# {}", "- {}", "[{}](https://a.example/)", "**{}**"])
def test_raw_slack_markup_from_the_model_is_escaped_everywhere(raw: str, where: str) -> None:
    out = markdown_to_mrkdwn(where.format(raw))
    assert raw not in out and raw.replace("<", "&lt;").replace(">", "&gt;")[:12] in out.replace("&amp;", "&")
    assert "<!" not in out and "<@" not in out and "<#" not in out and not LABELLED_LINK.search(out)


@pytest.mark.parametrize("seed", range(100))
def test_no_markdown_ever_becomes_a_labelled_link(seed: int) -> None:
    pieces = [
        "[",
        "]",
        "(",
        ")",
        "https://",
        "http://",
        "a.example",
        "/",
        "|",
        "<",
        ">",
        "&",
        "`",
        "*",
        "\n",
        " ",
        "evil",
        "\u202e",
        "@",
        ":",
        "%",
        "\u0430",
        "[a](https://b.example)",
        "](https://c.example/)",
    ]
    rng = random.Random(seed)
    markdown = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 80)))
    out = markdown_to_mrkdwn(markdown)
    assert not LABELLED_LINK.search(out), (markdown, out)
    assert "\u202e" not in out
    for link in re.findall(r"<(https?://[^>]*)>", out):
        assert link.isascii() and link.isprintable() and " " not in link, (markdown, out)


def _report_of(text: str) -> list[SlackMessage]:
    """A handoff report whose every text from outside (stop words, a tool's excerpt, findings, pending) is `text`."""
    result = RunResult(run_id="run_1", output=None, stop_reason=StopReason.ITERATION_LIMIT, iterations=1)
    tools = (ToolSummary(name="check_disk", calls=1, last_result=text, last_is_error=False),)
    report = HandoffReport(
        result=result, stop_words=text, tools=tools, last_reasoning=text, pending=(text,), conclusion=None
    )
    return handoff_report(report, max_iterations=1)


def test_every_posting_path_renders_links_by_their_target() -> None:
    md = "[https://status.example.com/incident](https://evil.example/phish)"
    posts = [
        *text_messages(md),
        status_message(state="running", step=1, activity="thinking: " + md, tokens=1, cost_usd=0.0, run_id="run_1"),
    ]
    posts += _report_of(md)
    texts = _all_texts([{"text": p.text, "blocks": p.blocks} for p in posts])
    assert not any(LABELLED_LINK.search(t) for t in texts)
    assert any("<https://evil.example/phish>" in t for t in texts)  # the answer and the report's findings


# --------------------------------------------------------------------------------------
# hidden characters
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ch", HIDDEN, ids=lambda c: f"U+{ord(c):04X}")
def test_reveal_writes_out_every_hidden_character(ch: str) -> None:
    assert is_hidden(ch)
    assert reveal(f"a{ch}b") == f"a{marker(ch)}b"
    assert count_hidden(f"a{ch}b{ch}") == 2


@pytest.mark.parametrize("text", ["plain ascii", "line\nbreak\tand tab", "é😀 ünïcødé 日本語 עברית", ""])
def test_reveal_leaves_visible_text_alone(text: str) -> None:
    assert reveal(text) == text and count_hidden(text) == 0


@pytest.mark.parametrize("prose", [False, True])
def test_every_ascii_character_is_revealed_as_the_per_character_rule_says(prose: bool) -> None:
    """ASCII text takes a regex instead of the per-character rule (is_hidden): the two agree on every character."""
    for cp in range(128):
        ch = chr(cp)
        want = marker(ch) if is_hidden(ch, prose=prose) else ch
        assert reveal(f"a{ch}\nb", prose=prose) == f"a{want}\nb", hex(cp)
        assert count_hidden(f"{ch}\t{ch}") == 2 * is_hidden(ch), hex(cp)


@pytest.mark.slow
@pytest.mark.parametrize("prose", [False, True])
def test_text_with_nothing_hidden_is_found_so_without_a_look_at_each_character(prose: bool) -> None:
    """reveal() skips the per-character rule when str.isprintable() and the fillers say nothing is hidden: over every
    code point, a text around it comes out as the per-character rule says."""
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue  # surrogates: not text
        ch = chr(cp)
        want = marker(ch) if is_hidden(ch, prose=prose) else ch
        assert reveal(f"é{ch}\n", prose=prose) == f"é{want}\n", hex(cp)


def test_prose_keeps_emoji_joiners_and_spaces_but_never_bidi_or_zero_width() -> None:
    family, nbsp = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "19.8\u00a0GB"
    assert reveal(family, prose=True) == family and reveal(nbsp, prose=True) == nbsp
    assert reveal("\u2764\ufe0f", prose=True) == "\u2764\ufe0f"
    for ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200e\u200f\ufeff\u00ad\u2060":
        assert reveal(f"a{ch}b", prose=True) == f"a{marker(ch)}b"
    assert marker("\u200d") in reveal(family)  # on a card, the joiner is shown too


def test_answers_reports_and_status_reveal_bidi_controls() -> None:
    evil = "disk \u202eok\u2066 \u200bfine"
    texts = _all_texts(
        [
            {"text": p.text, "blocks": p.blocks}
            for p in [
                *text_messages(evil),
                status_message(state="running", step=1, activity=evil, tokens=1, cost_usd=0.0, run_id="run_1"),
                *_report_of(evil),
            ]
        ]
    )
    assert not any(ch in t for t in texts for ch in "\u202e\u2066\u200b")
    assert sum(marker("\u202e") in t for t in texts) >= 5


def _card(**kw: Any) -> Approval:
    base: dict[str, Any] = dict(
        id="appr_1",
        run_id="run_1",
        tool_use_id="toolu_1",
        tool="clean_logs",
        category="destructive",
        args={"host": "web-03", "path": "/var/log/nginx"},
        state=ApprovalState.PENDING,
        preview="would delete 212 files",
        created_at=0.0,
    )
    return Approval(**{**base, **kw})


def _card_texts(approval: Approval) -> list[str]:
    msg = approval_card(approval)
    return _all_texts({"text": msg.text, "blocks": msg.blocks})


def test_a_card_reveals_hidden_characters_in_arguments_dry_run_and_tool_name_and_says_so() -> None:
    hidden = "".join(HIDDEN)
    approval = _card(
        tool="clean_logs\u200b",
        args={"host": "web-03", "path": "/var/\u202exnign/" + hidden},
        preview="would delete /var/\u202exnign\u202c",
    )
    joined = "\n".join(_card_texts(approval))
    shown = [ch for ch in HIDDEN if ch not in "\r\x1b"]  # JSON writes these two as \r and \u001b
    assert not any(ch in joined for ch in HIDDEN)
    assert all(marker(ch) in joined for ch in shown)
    assert f"clean_logs{marker(chr(0x200B))}" in joined  # header, summary, fallback and confirm dialog
    assert messages.hidden_on_card(1 + 1 + len(shown) + 2) in joined  # tool name, arguments, dry run
    assert offers_approve(approval_card(approval))  # everything is shown, so it may be approved
    assert approval.args["path"] == "/var/\u202exnign/" + hidden  # the card never changes what runs


def test_a_card_without_hidden_characters_has_no_warning() -> None:
    blocks = approval_card(_card()).blocks
    assert not [b for b in blocks if b.get("block_id") == "approval_hidden"]


def test_the_warning_counts_one_character() -> None:
    assert "1 invisible or direction-changing character," in messages.hidden_on_card(1)
    assert "2 invisible or direction-changing characters," in messages.hidden_on_card(2)


def _all_texts(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _all_texts(v)]
    if isinstance(obj, list):
        return [t for v in obj for t in _all_texts(v)]
    return []
