"""The Block Kit builders: what the cards say, and that nothing they build breaks Slack's limits."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from bot.core.redact import REDACTED
from bot.core.types import Approval, ApprovalState, DecisionCause, RunResult, StopReason, Usage
from bot.run.report import STOP_WORDS, HandoffReport, ToolSummary
from handlers import messages
from handlers.blocks import (
    APPROVE,
    BLOCKS_TEXT_MAX,
    BUTTON_TEXT_MAX,
    BUTTON_VALUE_MAX,
    DENY,
    HEADER_MAX,
    MAX_BLOCKS,
    MESSAGE_TEXT_MAX,
    SECTION_TEXT_MAX,
    STOP,
    SlackMessage,
    approval_card,
    blocks_text,
    handoff_report,
    offers_approve,
    status_message,
    text_messages,
)
from handlers.mrkdwn import markdown_to_mrkdwn, split_mrkdwn

EPOCH = 1714572000  # 2024-05-01 14:00 UTC
DATE = "<!date^1714572000^{date_short_pretty} at {time}|2024-05-01 14:00 UTC>"
NASTY = "<!channel> & <@U999> <https://evil.example|click> a > b && c < d "

# Markup opsloop builds itself; any other `<`, `>` or `&` must have been escaped. A link is its URL alone:
# opsloop never posts `<url|words>`.
_OUR_MARKUP = re.compile(r"<(?:@[UW][A-Z0-9]+|!subteam\^S[A-Z0-9]+|!date\^\d+\^[^|<>]*\|[^<>]*|https?://[!-;=?-{}~]+)>")
_ENTITY = re.compile(r"&(?:amp|lt|gt);")


def _assert_escaped(text: str) -> None:
    bare = _ENTITY.sub("", _OUR_MARKUP.sub("", text))
    assert "<" not in bare and ">" not in bare and "&" not in bare, text[:200]


def _assert_plain(obj: dict[str, Any], limit: int) -> None:
    assert obj["type"] == "plain_text"
    assert obj["text"].strip() and len(obj["text"]) <= limit


def _assert_mrkdwn(obj: dict[str, Any], limit: int) -> None:
    assert obj["type"] == "mrkdwn"
    assert obj["text"].strip() and len(obj["text"]) <= limit, len(obj["text"])
    _assert_escaped(obj["text"])


def assert_valid_blocks(msg: SlackMessage) -> None:
    """What Slack checks before answering `invalid_blocks`, `no_text`, `msg_too_long` or `msg_blocks_too_long`."""
    assert msg.text.strip() and len(msg.text) <= MESSAGE_TEXT_MAX
    _assert_escaped(msg.text)
    assert 1 <= len(msg.blocks) <= MAX_BLOCKS
    assert blocks_text(msg.blocks) <= BLOCKS_TEXT_MAX
    block_ids = [b["block_id"] for b in msg.blocks if "block_id" in b]
    assert len(block_ids) == len(set(block_ids)) and all(len(i) <= 255 for i in block_ids)
    action_ids: list[str] = []
    for block in msg.blocks:
        kind = block["type"]
        if kind == "header":
            _assert_plain(block["text"], HEADER_MAX)
        elif kind == "section":
            assert "text" in block or "fields" in block
            if "text" in block:
                _assert_mrkdwn(block["text"], SECTION_TEXT_MAX)
            for field in block.get("fields", []):
                _assert_mrkdwn(field, 2000)
            assert len(block.get("fields", [])) <= 10
        elif kind == "context":
            assert 1 <= len(block["elements"]) <= 10
            for element in block["elements"]:
                _assert_mrkdwn(element, 3000)
        elif kind == "actions":
            assert 1 <= len(block["elements"]) <= 25
            for button in block["elements"]:
                assert button["type"] == "button"
                _assert_plain(button["text"], BUTTON_TEXT_MAX)
                assert 1 <= len(button["value"]) <= BUTTON_VALUE_MAX
                assert button.get("style", "primary") in ("primary", "danger")
                action_ids.append(button["action_id"])
                if "confirm" in button:
                    confirm = button["confirm"]
                    _assert_plain(confirm["title"], 100)
                    _assert_plain(confirm["text"], 300)
                    _assert_plain(confirm["confirm"], 30)
                    _assert_plain(confirm["deny"], 30)
        else:
            raise AssertionError(f"unexpected block type {kind}")
        Block.parse(block).validate_json()  # slack_sdk's own checks, as a second opinion
    assert len(action_ids) == len(set(action_ids)) and all(len(i) <= 255 for i in action_ids)


def _card(**overrides: Any) -> SlackMessage:
    values: dict[str, Any] = {
        "id": "ap_1",
        "run_id": "run_1",
        "tool_use_id": "toolu_1",
        "tool": "restart_service",
        "category": "mutating",
        "args": {"service": "nginx", "host": "web-1"},
        "preview": None,
        "requester": "U0REQUEST",
        "state": ApprovalState.PENDING,
        "created_at": EPOCH - 60,
    }
    if "approvals" in overrides:
        overrides["approvals"] = tuple(overrides["approvals"])
    if "state" in overrides:
        overrides["state"] = ApprovalState(overrides["state"])
    return approval_card(Approval(**(values | overrides)))


def _block(msg: SlackMessage, block_id: str) -> dict[str, Any]:
    return next(b for b in msg.blocks if b.get("block_id") == block_id)


def _sections_text(msgs: list[SlackMessage]) -> list[str]:
    return [b["text"]["text"] for msg in msgs for b in msg.blocks if b["type"] == "section" and "text" in b]


def _non_whitespace(*texts: str) -> str:
    """What a reader sees of `texts`, ignoring whitespace and the fences a split closes and re-opens."""
    return "".join("".join(text.replace("```", "").split()) for text in texts)


def _fences_balanced(text: str) -> bool:
    return sum(1 for line in text.split("\n") if line.strip().startswith("```")) % 2 == 0


def _report(
    *,
    tools: list[tuple[str, int, str]] | None = None,
    stopped_by: str | None = None,
    max_iterations: int | None = 20,
    **overrides: Any,
) -> list[SlackMessage]:
    result = RunResult(
        run_id="run_1",
        output=None,
        stop_reason=StopReason.ITERATION_LIMIT,
        iterations=20,
        usage=Usage(input_tokens=12345, output_tokens=2345, cache_read_tokens=100000, cache_write_tokens=5000),
        cost_usd=0.42,
        wall_seconds=252.4,
        stopped_by=stopped_by,
    )
    values: dict[str, Any] = {
        "stop_words": STOP_WORDS["iteration_limit"],
        "tools": tuple(
            ToolSummary(name=name, calls=calls, last_result=last, last_is_error=False)
            for name, calls, last in tools or [("check_disk", 3, "/var 91% used")]
        ),
        "last_reasoning": "Disk on web-1 is **full** because of rotated logs.",
        "pending": (),
        "conclusion": None,
    }
    return handoff_report(HandoffReport(result=result, **(values | overrides)), max_iterations=max_iterations)


# --- approval card ----------------------------------------------------------


def test_pending_card_has_approve_and_deny_buttons_carrying_the_approval_id() -> None:
    card = _card()
    assert _block(card, "approval_actions")["elements"] == [
        {
            "type": "button",
            "action_id": APPROVE,
            "text": {"type": "plain_text", "text": "Approve", "emoji": True},
            "value": "ap_1",
            "style": "primary",
        },
        {
            "type": "button",
            "action_id": DENY,
            "text": {"type": "plain_text", "text": "Deny", "emoji": True},
            "value": "ap_1",
            "style": "danger",
        },
    ]


def test_pending_card_names_tool_category_and_requester() -> None:
    card = _card()
    assert card.blocks[:2] == [
        {
            "type": "header",
            "block_id": "approval_header",
            "text": {"type": "plain_text", "text": "Approval needed: restart_service", "emoji": True},
        },
        {
            "type": "section",
            "block_id": "approval_summary",
            "text": {
                "type": "mrkdwn",
                "text": "*Tool:* `restart_service`   *Category:* :warning: mutating\n*Run started by:* <@U0REQUEST>",
                "verbatim": True,
            },
        },
    ]


def test_card_shows_arguments_as_json_code_block() -> None:
    card = _card()
    assert _block(card, "approval_args")["text"]["text"] == (
        '*Arguments*\n```\n{\n  "service": "nginx",\n  "host": "web-1"\n}\n```'
    )


def test_destructive_card_shows_preview_and_confirms_before_approving() -> None:
    card = _card(category="destructive", tool="clean_logs", preview="would delete 212 files, 19.8 GB")
    assert _block(card, "approval_preview")["text"]["text"] == (
        "*Dry run* (what it would do)\n```\nwould delete 212 files, 19.8 GB\n```"
    )
    approve = _block(card, "approval_actions")["elements"][0]
    assert approve["confirm"]["title"]["text"] == "Run clean_logs?"
    assert ":rotating_light: destructive" in _block(card, "approval_summary")["text"]["text"]


def test_pending_card_shows_progress_when_several_approvals_are_required() -> None:
    card = _card(required=3, approvals=["U0AAA", "U0BBB"], expires_at=EPOCH)
    assert _block(card, "approval_status")["elements"] == [
        {"type": "mrkdwn", "text": "2 of 3 approvals: <@U0AAA>, <@U0BBB>", "verbatim": True},
        {"type": "mrkdwn", "text": f"Expires {DATE} — if no one approves by then, it is not run.", "verbatim": True},
    ]
    assert_valid_blocks(card)


@pytest.mark.parametrize(
    ("state", "extra", "line"),
    [
        ("approved", {}, f":white_check_mark: Approved by <@U0DECIDE> at {DATE}"),
        (
            "denied",
            {"reason": "not during <peak>"},
            f":no_entry_sign: Denied by <@U0DECIDE> at {DATE}: not during &lt;peak&gt;",
        ),
        ("expired", {}, f":hourglass: Expired at {DATE}: no one approved within the window — not run"),
        (
            "superseded",
            {},
            f":leftwards_arrow_with_hook: Superseded by a thread reply from <@U0DECIDE> at {DATE} — not run",
        ),
    ],
)
def test_decided_card_has_no_buttons_and_says_who_and_when(state: str, extra: dict[str, Any], line: str) -> None:
    card = _card(state=state, decided_by="U0DECIDE", decided_at=EPOCH, **extra)
    assert [b["type"] for b in card.blocks] == ["header", "section", "section", "context"]
    assert _block(card, "approval_decision")["elements"] == [{"type": "mrkdwn", "text": line, "verbatim": True}]
    assert_valid_blocks(card)


def test_a_card_superseded_because_the_run_stopped_says_so() -> None:
    card = _card(
        state="superseded",
        cause=DecisionCause.STOP,
        reason="run stopped (cancelled)",
        decided_by="U0STOP",
        decided_at=EPOCH,
    )
    assert _block(card, "approval_decision")["elements"] == [
        {
            "type": "mrkdwn",
            "text": f":octagonal_sign: Not run: the run stopped (cancelled) by <@U0STOP> at {DATE}",
            "verbatim": True,
        }
    ]


def test_a_card_voided_by_a_changed_call_gives_the_reason() -> None:
    card = _card(state="superseded", cause=DecisionCause.CHANGED_CALL, reason="the call changed", decided_at=EPOCH)
    assert _block(card, "approval_decision")["elements"] == [
        {
            "type": "mrkdwn",
            "text": f":leftwards_arrow_with_hook: Superseded: the call changed at {DATE} — not run",
            "verbatim": True,
        }
    ]


def test_approval_by_several_people_names_them_all() -> None:
    card = _card(state="approved", required=2, approvals=["U0AAA", "U0BBB"], decided_by="U0BBB")
    assert _block(card, "approval_decision")["elements"] == [
        {"type": "mrkdwn", "text": ":white_check_mark: Approved by <@U0AAA>, <@U0BBB>", "verbatim": True}
    ]


def shown_args(card: SlackMessage | Any) -> str:
    """The arguments as a reader reassembles them from the card's argument sections."""
    out = ""
    for block in card.blocks or []:
        if not block.get("block_id", "").startswith("approval_args") or block["block_id"] == "approval_args_missing":
            continue
        heading, body = block["text"]["text"].split("\n```\n", 1)
        code = body.removesuffix("\n```").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        code = code.replace("``\u200b`", "```")
        out += code if "continuing the line above" in heading or not out else "\n" + code
    return out


def test_long_arguments_are_shown_in_full_over_several_sections() -> None:
    args = {"paths": "x" * 5_000, "hosts": [f"web-{i:02}" for i in range(150)], "note": "a <b> & c"}
    card = _card(args=args, category="destructive")
    assert_valid_blocks(card)
    assert blocks_text(card.blocks) <= BLOCKS_TEXT_MAX
    assert shown_args(card) == json.dumps(args, indent=2)
    assert offers_approve(card)
    assert _block(card, "approval_args")["text"]["text"].startswith("*Arguments* (part 1 of ")


def test_arguments_too_long_for_one_card_offer_only_deny_and_say_why() -> None:
    card = _card(args={"script": "rm -rf /srv/cache/old\n" * 10_000}, category="destructive", expires_at=EPOCH)
    assert_valid_blocks(card)
    assert not offers_approve(card)
    assert [b["action_id"] for b in _block(card, "approval_actions")["elements"]] == [DENY]
    assert "Approve is not offered" in _block(card, "approval_args_missing")["text"]["text"]


def test_decided_card_with_arguments_too_long_stays_within_limits() -> None:
    card = _card(args={"script": "x" * 300_000}, state="denied", decided_by="U0AAA")
    assert_valid_blocks(card)
    assert _block(card, "approval_decision")


def test_huge_preview_is_cut_to_fit_with_a_note() -> None:
    preview = "".join(f"deleting /var/log/app-{i}.log.gz\n" for i in range(400))
    card = _card(preview=preview, category="destructive")
    assert_valid_blocks(card)
    preview_text = _block(card, "approval_preview")["text"]["text"]
    cut = re.search(r"_Preview cut to fit: ([\d,]+) of ([\d,]+) characters not shown\._$", preview_text)
    assert cut is not None and cut.group(2) == f"{len(preview):,}"
    shown = len(preview) - int(cut.group(1).replace(",", ""))
    assert preview_text.startswith("*Dry run* (what it would do)\n```\n" + preview[:shown] + "…\n```\n")


def test_a_redacted_argument_is_marked_as_redacted_on_the_card() -> None:
    card = _card(args={"url": "https://deploy:hunter2hunter2@ci.internal/hook", "token": "xoxb-1234567890-abcdef"})
    shown = shown_args(card)
    assert "hunter2hunter2" not in shown and "xoxb-1234567890" not in shown
    assert json.loads(shown) == {"url": f"https://deploy:{REDACTED}@ci.internal/hook", "token": REDACTED}
    assert _block(card, "approval_redacted")["elements"][0]["text"] == messages.REDACTED_ON_CARD
    assert "approval_redacted" not in [b.get("block_id") for b in _card().blocks]  # only when something was hidden


def test_a_cut_preview_never_shows_half_a_secret() -> None:
    secret = "sk-ant-api03-" + "Q" * 60
    for pad in range(2880, 3000, 7):  # the cut falls before, inside and after the secret
        card = _card(preview="p" * pad + secret + "\n" + "q" * 4000, category="destructive")
        text = _block(card, "approval_preview")["text"]["text"]
        assert "sk-ant" not in text and "QQQQQQ" not in text, pad


def test_texts_are_redacted_before_they_are_split_or_cut() -> None:
    secret = "ghp_" + "A" * 36
    answer = text_messages("x" * 2990 + " " + secret)
    status = status_message(
        state="running", step=1, activity="y" * 290 + secret, tokens=1, cost_usd=0.0, run_id="run_1"
    )
    report = _report(tools=[("http_get", 1, "z" * 295 + secret)], pending=[secret], last_reasoning=secret)
    for msg in [*answer, status, *report]:
        flat = json.dumps(msg.blocks) + msg.text
        assert "ghp_" not in flat and "AAAAAAAAAA" not in flat


def test_card_escapes_user_and_model_text() -> None:
    card = _card(
        tool="t<x>",
        args={"q": NASTY * 300},
        preview=NASTY * 300,
        requester="<!here>",
        category="destructive",
        required=3,
        approvals=["U0AAA", "U0BBB"],
        expires_at=EPOCH,
    )
    assert_valid_blocks(card)
    assert "&lt;!channel&gt; &amp; &lt;@U999&gt;" in _block(card, "approval_preview")["text"]["text"]
    assert "*Run started by:* &lt;!here&gt;" in _block(card, "approval_summary")["text"]["text"]


def test_code_fence_inside_preview_cannot_close_the_code_block() -> None:
    card = _card(preview="before\n```\n*not bold*")
    assert _block(card, "approval_preview")["text"]["text"].count("```") == 2


def test_long_tool_name_is_cut_to_fit_the_header() -> None:
    card = _card(tool="t" * 500, state="denied", decided_by="U0AAA", reason="r" * 10_000)
    assert_valid_blocks(card)


def test_approval_id_longer_than_a_button_value_is_refused() -> None:
    with pytest.raises(ValueError, match=r"approval_id must be 1\.\.2000 characters"):
        _card(id="a" * (BUTTON_VALUE_MAX + 1))


# --- status message ---------------------------------------------------------


def test_running_status_shows_step_usage_and_a_stop_button() -> None:
    line = ":hourglass_flowing_sand: *Step 3/20* · running check_disk · 12,345 tokens · $0.04"
    msg = status_message(
        state="running",
        step=3,
        activity="running check_disk",
        tokens=12345,
        cost_usd=0.04,
        run_id="run_1",
        max_iterations=20,
    )
    assert msg == SlackMessage(
        text=line,
        blocks=[
            {"type": "section", "block_id": "status", "text": {"type": "mrkdwn", "text": line, "verbatim": True}},
            {
                "type": "context",
                "block_id": "status_run",
                "elements": [{"type": "mrkdwn", "text": "Run `run_1`", "verbatim": True}],
            },
            {
                "type": "actions",
                "block_id": "status_actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": STOP,
                        "value": "run_1",
                        "style": "danger",
                        "text": {"type": "plain_text", "text": "Stop", "emoji": True},
                        "confirm": {
                            "title": {"type": "plain_text", "text": "Stop this run?", "emoji": True},
                            "text": {"type": "plain_text", "text": messages.STOP_CONFIRM[1], "emoji": True},
                            "confirm": {"type": "plain_text", "text": "Stop run", "emoji": True},
                            "deny": {"type": "plain_text", "text": "Keep running", "emoji": True},
                            "style": "danger",
                        },
                    }
                ],
            },
        ],
    )


def test_finished_status_has_no_stop_button() -> None:
    msg = status_message(state="finished", step=7, activity="finished", tokens=1, cost_usd=0, run_id="run_1")
    assert [b["type"] for b in msg.blocks] == ["section", "context"]


def test_waiting_status_keeps_the_stop_button_and_escapes_activity() -> None:
    msg = status_message(
        state="waiting_approval", step=2, activity=NASTY * 100, tokens=10**9, cost_usd=1234.5, run_id="r" * 300
    )
    assert_valid_blocks(msg)
    assert _block(msg, "status_actions")["elements"][0]["action_id"] == STOP


# --- text_messages and the splitter -----------------------------------------


def test_short_answer_is_one_section() -> None:
    assert text_messages("Disk is full.") == [
        SlackMessage(
            text="Disk is full.",
            blocks=[
                {
                    "type": "section",
                    "block_id": "section_0",
                    "text": {"type": "mrkdwn", "text": "Disk is full.", "verbatim": True},
                }
            ],
        )
    ]


def test_markdown_becomes_mrkdwn() -> None:
    md = (
        "# Findings\n\nDisk is **full** on `**web-1**`.\n"
        "* see [graph](https://g.example/d?a=1&b=2)\n\n```bash\ndf -h\n```"
    )
    assert markdown_to_mrkdwn(md) == (
        "*Findings*\n\nDisk is *full* on `**web-1**`.\n"
        "• see graph (<https://g.example/d?a=1&amp;b=2>)\n\n```\ndf -h\n```"
    )


def test_answer_text_is_escaped() -> None:
    assert markdown_to_mrkdwn("<!channel> a & b > c") == "&lt;!channel&gt; a &amp; b &gt; c"


def test_empty_answer_still_says_something() -> None:
    [msg] = text_messages("  \n ")
    assert _sections_text([msg]) == [messages.EMPTY_ANSWER]


def test_split_prefers_paragraph_then_line_then_word_boundaries() -> None:
    a, b = "a" * 2000, "b" * 2000
    assert split_mrkdwn(f"{a}\n\n{b}") == [a, b]
    assert split_mrkdwn(f"{a}\n{b}") == [a, b]
    assert split_mrkdwn(f"{a} {b}") == [a, b]
    assert split_mrkdwn(f"{a}\n{'c ' * 400}\n\n{b}") == [f"{a}\n{('c ' * 400).strip()}", b]


def test_split_inside_a_code_fence_closes_and_reopens_it() -> None:
    code = "\n".join(f"line {i:05d} " + "x" * 40 for i in range(200))
    chunks = split_mrkdwn(f"Output:\n```\n{code}\n```\nDone.")
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) <= SECTION_TEXT_MAX
        assert _fences_balanced(chunk), chunk[-50:]
    assert chunks[1].startswith("```\nline ")
    assert _non_whitespace(*chunks) == _non_whitespace(f"Output:\n```\n{code}\n```\nDone.")


def test_split_never_breaks_an_escaped_character_or_a_link() -> None:
    chunks = split_mrkdwn("&amp;" * 1000 + "<https://a.example/" + "p" * 100 + ">" + "z" * 3000)
    assert all(len(c) <= SECTION_TEXT_MAX for c in chunks)
    for chunk in chunks:
        _assert_escaped(chunk)


@pytest.mark.parametrize("seed", range(200))
def test_split_of_random_markdown_keeps_limits_fences_and_every_character(seed: int) -> None:
    pieces = [
        "word ",
        "longword" * 30,
        "\n",
        "\n\n",
        "```\n",
        "```python\n",
        "<",
        "&",
        "**b** ",
        "# h\n",
        "- item\n",
        "[l](https://x.io/a&b)",
        "`c`",
        "x" * 500,
        "\t",
        "é😀",
    ]
    rng = random.Random(seed)
    body = markdown_to_mrkdwn("".join(rng.choice(pieces) for _ in range(rng.randint(1, 400))))
    limit = rng.choice([SECTION_TEXT_MAX, 200, 57])
    chunks = split_mrkdwn(body, limit)
    assert all(len(chunk) <= limit and chunk.strip() and _fences_balanced(chunk) for chunk in chunks)
    assert "".join("".join(c.replace("`", "").split()) for c in chunks) == "".join(body.replace("`", "").split())
    for chunk in chunks:
        _assert_escaped(chunk)


def test_huge_answer_is_split_within_limits_and_loses_nothing() -> None:
    paragraph = "The **disk** on web-1 & web-2 is <full>.\n" * 3 + "```\n" + "log line\n" * 40 + "```\n\n"
    answer = "# Report\n\n" + paragraph * (100_000 // len(paragraph)) + "x" * 7000 + " tail"
    msgs = text_messages(answer)
    assert len(_sections_text(msgs)) > 100_000 // SECTION_TEXT_MAX
    for msg in msgs:
        assert_valid_blocks(msg)
    assert _non_whitespace(*_sections_text(msgs)) == _non_whitespace(markdown_to_mrkdwn(answer))


def test_answer_of_unbroken_text_is_split_within_limits() -> None:
    msgs = text_messages("<&>" * 40_000)
    for msg in msgs:
        assert_valid_blocks(msg)
    assert _non_whitespace(*_sections_text(msgs)).replace("…", "") == "&lt;&amp;&gt;" * 40_000


def test_an_answer_longer_than_slacks_total_text_continues_in_another_message() -> None:
    msgs = text_messages("\n\n".join("p" * 2900 for _ in range(120)))
    for msg in msgs:
        assert_valid_blocks(msg)  # each under the total Slack refuses with msg_blocks_too_long
    assert [len(m.blocks) for m in msgs] == [3] * 40
    assert msgs[1].text == "Answer (continued, part 2 of 40)"


# --- handoff report ---------------------------------------------------------


def test_report_gives_the_stop_reason_by_name_and_in_words() -> None:
    [msg] = _report()
    assert msg.blocks[0]["text"]["text"] == ":octagonal_sign: Run stopped: iteration_limit"
    assert msg.blocks[1]["text"]["text"] == ("*Reason:* `iteration_limit` — reached the maximum number of agent steps.")
    assert msg.text == "Run stopped: iteration_limit — reached the maximum number of agent steps."


def test_report_fields_show_iterations_tokens_cost_and_wall_time() -> None:
    [msg] = _report()
    assert [f["text"] for f in msg.blocks[2]["fields"]] == [
        "*Iterations*\n20/20",
        "*Tokens*\nin 12,345 · out 2,345\ncache read 100,000 · write 5,000",
        "*Cost*\n$0.42",
        "*Wall time*\n4m 12s",
    ]


def test_report_lists_tools_findings_and_pending() -> None:
    [msg] = _report(pending=["approval for clean_logs on web-1"], stopped_by="U0STOP")
    assert [b["text"]["text"] for b in msg.blocks[3:6]] == [
        "*Tools called*\n• `check_disk` ×3: /var 91% used",
        "*Last findings*\nDisk on web-1 is *full* because of rotated logs.",
        "*Pending*\n• approval for clean_logs on web-1",
    ]
    assert msg.blocks[6]["elements"] == [{"type": "mrkdwn", "text": "Stopped by <@U0STOP>", "verbatim": True}]


def test_report_says_nothing_pending_when_nothing_is() -> None:
    [msg] = _report()
    assert msg.blocks[5]["text"]["text"] == "*Pending*\nnothing pending"


def test_tool_excerpts_are_cut_to_300_characters() -> None:
    [msg] = _report(tools=[("tail_logs", 1, "e" * 5000)])
    excerpt = msg.blocks[3]["text"]["text"].split(": ", 1)[1]
    assert len(excerpt) == 300 and excerpt.endswith("…")


@pytest.mark.slow
def test_huge_report_stays_within_limits() -> None:
    msgs = _report(
        tools=[(f"tool_{i}<x>", i, NASTY * 200) for i in range(200)],
        last_reasoning="```\n" + NASTY * 3000 + "\n```\n" + "# Next\n" + NASTY * 1000,
        pending=[NASTY * 50] * 40,
        stopped_by="U0STOP",
        max_iterations=None,
    )
    assert len(msgs) >= 1
    for msg in msgs:
        assert_valid_blocks(msg)


# --- messages ---------------------------------------------------------------


def test_every_stop_reason_has_words() -> None:
    reasons = {
        "completed",
        "iteration_limit",
        "deadline",
        "token_budget",
        "cost_budget",
        "loop_detected",
        "consecutive_errors",
        "permission_denied",
        "cancelled",
        "model_error",
    }
    assert set(STOP_WORDS) == reasons


def test_refusal_names_who_may_approve() -> None:
    assert messages.not_allowed_to_approve("clean_logs", "destructive", ["U0AAA", "S0OPS"]) == (
        "You can't approve destructive calls like `clean_logs` in this channel."
        " Ask <@U0AAA> or <!subteam^S0OPS>. Nothing was changed."
    )


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0s"), (42, "42s"), (252.4, "4m 12s"), (3 * 3600 + 125, "3h 2m")])
def test_wall_time_reads_like_a_person_would_say_it(seconds: float, text: str) -> None:
    assert messages.human_duration(seconds) == text


def test_refusal_accepts_approvers_already_written_out() -> None:
    assert messages.not_allowed_to_approve("restart_service", "mutating", "<@U0AAA> or <!subteam^S0OPS>") == (
        "You can't approve mutating calls like `restart_service` in this channel."
        " Ask <@U0AAA> or <!subteam^S0OPS>. Nothing was changed."
    )
