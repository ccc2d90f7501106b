"""The living summary: opsloop's checks on each update_summary, the display order, and the blocks Slack gets."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from bot.core.redact import REDACTED
from bot.playground.standin.render import plain
from bot.playground.standin.slack import block_errors
from bot.run.summary import (
    INPUT_SCHEMA,
    SITUATION_MAX,
    STATEMENT_MAX,
    STEP_MAX,
    CallOutcome,
    CallStatus,
    Confidence,
    Hypothesis,
    HypothesisStatus,
    Summary,
    refusal,
    render_text,
    validate,
)
from handlers.blocks import BLOCK_IDS, MAX_BLOCKS, SECTION_TEXT_MAX, Task, status_message, summary_blocks, text_messages

OK = CallStatus.SUCCEEDED
CALLS = {
    "toolu_00": CallOutcome(tool="pg_query", status=OK),
    "toolu_01": CallOutcome(tool="recent_changes", status=OK),
    "toolu_02": CallOutcome(tool="prom_query", status=OK),
    "toolu_err": CallOutcome(tool="grep_log", status=CallStatus.FAILED),
    "toolu_denied": CallOutcome(tool="k8s_rollout_undo", status=CallStatus.NOT_RUN),
    "toolu_wait": CallOutcome(tool="check_disk", status=CallStatus.PENDING),
    "toolu_sum": CallOutcome(tool="update_summary", status=OK),
}

EXAMPLE: dict[str, Any] = {
    "situation": "checkout-api p99 at 4 s since 14:10; the database is healthy",
    "hypotheses": [
        {
            "id": "pool",
            "statement": "the 14:08 deploy lowered the pool size to 10",
            "status": "supported",
            "confidence": "high",
            "evidence": ["toolu_01", "toolu_02"],
        },
        {
            "id": "db",
            "statement": "pg-primary-07 is slow",
            "status": "refuted",
            "confidence": "high",
            "evidence": ["toolu_00"],
        },
    ],
    "next_steps": ["roll back checkout-api to revision 41"],
}
TOKEN = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp"


def changed(path: str, value: Any) -> dict[str, Any]:
    """EXAMPLE with one field set: `path` like "hypotheses.1.evidence"."""
    raw = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    node: Any = raw
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[int(last) if last.isdigit() else last] = value
    return raw


def test_the_contract_example_is_accepted() -> None:
    assert validate(EXAMPLE, calls=CALLS) == Summary(
        situation="checkout-api p99 at 4 s since 14:10; the database is healthy",
        hypotheses=(
            Hypothesis(
                id="pool",
                statement="the 14:08 deploy lowered the pool size to 10",
                status=HypothesisStatus.SUPPORTED,
                confidence=Confidence.HIGH,
                evidence=("toolu_01", "toolu_02"),
            ),
            Hypothesis(
                id="db",
                statement="pg-primary-07 is slow",
                status=HypothesisStatus.REFUTED,
                confidence=Confidence.HIGH,
                evidence=("toolu_00",),
            ),
        ),
        next_steps=("roll back checkout-api to revision 41",),
    )


def test_the_schema_is_valid_and_takes_the_example() -> None:
    jsonschema.Draft202012Validator.check_schema(INPUT_SCHEMA)
    jsonschema.validate(EXAMPLE, INPUT_SCHEMA)
    assert INPUT_SCHEMA["type"] == "object"


@pytest.mark.parametrize(
    "raw",
    [
        {"situation": "disk alerts on web-03; no cause yet", "hypotheses": [], "next_steps": []},
        {"situation": "still looking"},
        {
            "situation": "two ideas",
            "hypotheses": [
                {"id": "logs", "statement": "nginx logs filled /var", "status": "open", "confidence": "low"},
                {
                    "id": "db",
                    "statement": "a dump",
                    "status": "open",
                    "confidence": "medium",
                    "evidence": ["toolu_err"],
                },
            ],
        },
    ],
)
def test_we_dont_know_yet_is_a_valid_summary(raw: dict[str, Any]) -> None:
    assert isinstance(validate(raw, calls=CALLS), Summary)


def test_supported_with_medium_confidence_needs_no_successful_call() -> None:
    raw = changed(
        "hypotheses.0",
        {"id": "p", "statement": "s", "status": "supported", "confidence": "medium", "evidence": ["toolu_denied"]},
    )
    assert isinstance(validate(raw, calls=CALLS), Summary)


@pytest.mark.parametrize(
    ("raw", "problems"),
    [
        (
            changed("hypotheses.1.evidence", ["toolu_00", "toolu_x"]),
            ["hypotheses[1].evidence: toolu_x is not a call of this run"],
        ),
        (
            changed("hypotheses.0.evidence", ["toolu_denied"]),
            [
                "hypotheses[0]: confidence high needs at least one successful call of this run as evidence "
                "(toolu_denied (k8s_rollout_undo) did not run: denied, expired or refused)"
            ],
        ),
        (
            changed("hypotheses.1.evidence", ["toolu_err", "toolu_sum"]),
            [
                "hypotheses[1]: confidence high and status refuted needs at least one successful call of this run as "
                "evidence (toolu_err (grep_log) returned an error; toolu_sum is an update_summary call)"
            ],
        ),
        (
            changed(
                "hypotheses.0",
                {"id": "p", "statement": "s", "status": "confirmed", "confidence": "medium", "evidence": []},
            ),
            [
                "hypotheses[0]: status confirmed needs at least one successful call of this run as evidence "
                "(no evidence given)"
            ],
        ),
        (
            changed(
                "hypotheses.0",
                {"id": "p", "statement": "s", "status": "refuted", "confidence": "low", "evidence": ["toolu_wait"]},
            ),
            [
                "hypotheses[0]: status refuted needs at least one successful call of this run as evidence "
                "(toolu_wait (check_disk) has not finished)"
            ],
        ),
        (
            changed(
                "hypotheses",
                [{"id": f"h{i}", "statement": "s", "status": "open", "confidence": "low"} for i in range(6)],
            ),
            ["hypotheses: 6 given, at most 5"],
        ),
        (changed("next_steps", ["x"] * 6), ["next_steps: 6 given, at most 5"]),
        (changed("situation", "s" * (SITUATION_MAX + 1)), ["situation: 301 characters, at most 300"]),
        (
            changed("hypotheses.0.statement", "s" * (STATEMENT_MAX + 1)),
            ["hypotheses[0].statement: 201 characters, at most 200"],
        ),
        (changed("next_steps", ["ok", "s" * (STEP_MAX + 1)]), ["next_steps[1]: 151 characters, at most 150"]),
        (
            changed("hypotheses.1.status", "likely"),
            ["hypotheses[1].status: likely is not one of open, supported, refuted, confirmed"],
        ),
        (changed("hypotheses.1.confidence", 0.9), ["hypotheses[1].confidence: 0.9 is not one of low, medium, high"]),
        (changed("hypotheses.1.id", "pool"), ["hypotheses[1].id: 'pool' is used by an earlier hypothesis"]),
        (changed("hypotheses.0.evidence", "toolu_01"), ["hypotheses[0].evidence: must be a list"]),
        (changed("hypotheses.0.evidence", [1]), ["hypotheses[0].evidence[0]: must be a tool_use id (a string)"]),
        (
            changed("hypotheses.0.why", "x"),
            ["hypotheses[0].why: unknown field (allowed: id, statement, status, confidence, evidence)"],
        ),
        (changed("cause", "x"), ["cause: unknown field (allowed: situation, hypotheses, next_steps)"]),
        (
            changed("hypotheses.0", "pool"),
            ["hypotheses[0]: must be an object with id, statement, status, confidence, evidence"],
        ),
        (changed("situation", "  "), ["situation: empty"]),
        ({"hypotheses": []}, ["situation: required"]),
        ([], ["the input must be an object with situation, hypotheses and next_steps"]),
    ],
)
def test_each_refusal_names_the_problem(raw: object, problems: list[str]) -> None:
    assert validate(raw, calls=CALLS) == problems


def test_every_problem_is_named_at_once() -> None:
    raw = changed("situation", 7)
    raw["hypotheses"][0]["evidence"] = ["toolu_nope"]
    raw["next_steps"] = "roll back"
    assert validate(raw, calls=CALLS) == [
        "situation: must be a string",
        "hypotheses[0].evidence: toolu_nope is not a call of this run",
        "next_steps: must be a list",
    ]


def test_the_limits_themselves_are_accepted() -> None:
    raw = changed("situation", "s" * SITUATION_MAX)
    raw["hypotheses"][0]["statement"] = "t" * STATEMENT_MAX
    raw["next_steps"] = ["n" * STEP_MAX] * 5
    assert isinstance(validate(raw, calls=CALLS), Summary)


def test_the_refusal_says_the_summary_is_unchanged() -> None:
    assert refusal(["situation: required", "next_steps: must be a list"]) == (
        "update_summary refused, the summary is unchanged:\n- situation: required\n- next_steps: must be a list"
    )


def test_a_bad_id_shown_in_a_problem_is_redacted_and_bounded() -> None:
    [problem] = validate(changed("hypotheses.1.evidence", [TOKEN + "x" * 100]), calls=CALLS)
    assert TOKEN not in problem and REDACTED in problem and len(problem) < 140


# --- order, storage, text ----------------------------------------------------------------------------------------


def mixed() -> Summary:
    statuses = ["refuted", "open", "confirmed", "supported", "open"]
    raw = {
        "situation": "web-03 /var at 97%",
        "next_steps": ["clean rotated logs", "hand off if still full"],
        "hypotheses": [
            {
                "id": f"h{i}",
                "statement": f"{s} {i}",
                "status": s,
                "confidence": "high" if s in ("confirmed", "refuted") else "low",
                "evidence": ["toolu_00"] if s in ("confirmed", "refuted") else [],
            }
            for i, s in enumerate(statuses)
        ],
    }
    summary = validate(raw, calls=CALLS)
    assert isinstance(summary, Summary)
    return summary


def test_hypotheses_show_confirmed_supported_open_refuted() -> None:
    assert [h.id for h in mixed().ordered()] == ["h2", "h3", "h1", "h4", "h0"]


def test_the_stored_form_comes_back_whole() -> None:
    summary = mixed()
    assert Summary.from_json(json.loads(json.dumps(summary.to_json()))) == summary


def test_render_text_has_the_three_sections_in_order() -> None:
    assert render_text(mixed()) == (
        "What's going on: web-03 /var at 97%\n"
        "Likely cause:\n"
        "  - confirmed, high confidence: confirmed 2 [h2; evidence toolu_00]\n"
        "  - supported, low confidence: supported 3 [h3]\n"
        "  - open, low confidence: open 1 [h1]\n"
        "  - open, low confidence: open 4 [h4]\n"
        "  - refuted, high confidence: refuted 0 [h0; evidence toolu_00]\n"
        "Next:\n"
        "  - clean rotated logs\n"
        "  - hand off if still full"
    )


def test_render_text_of_an_empty_summary_says_not_known_yet() -> None:
    assert render_text(Summary(situation="looking")) == (
        "What's going on: looking\nLikely cause:\n  not known yet\nNext:\n  -"
    )


# --- Block Kit ---------------------------------------------------------------------------------------------------


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks]


def test_the_blocks_are_three_sections_in_order() -> None:
    blocks = summary_blocks(mixed())
    assert block_errors(blocks) == []
    assert [b["block_id"] for b in blocks] == list(BLOCK_IDS)
    assert all(b["text"]["verbatim"] is True for b in blocks)
    assert texts(blocks) == [
        "*What's going on*\nweb-03 /var at 97%",
        "*Likely cause*\n"
        "• *Confirmed*, high confidence: confirmed 2\n"
        "• *Supported*, low confidence: supported 3\n"
        "• Open, low confidence: open 1\n"
        "• Open, low confidence: open 4\n"
        "• ~Refuted~, high confidence: refuted 0",
        "*Next*\n• clean rotated logs\n• hand off if still full",
    ]


def test_an_empty_summary_still_shows_three_sections() -> None:
    assert texts(summary_blocks(Summary(situation="looking"))) == [
        "*What's going on*\nlooking",
        "*Likely cause*\nNot known yet.",
        "*Next*\nNothing yet.",
    ]


def test_mentions_links_and_secrets_in_model_text_do_not_get_through() -> None:
    nasty = f"<!channel> <@U024BE7LH> <http://evil.example|ok> @here {TOKEN} a&b"
    raw = {
        "situation": nasty[:SITUATION_MAX],
        "next_steps": [nasty[:STEP_MAX]],
        "hypotheses": [{"id": "x", "statement": nasty[:STATEMENT_MAX], "status": "open", "confidence": "low"}],
    }
    summary = validate(raw, calls=CALLS)
    assert isinstance(summary, Summary)
    assert TOKEN not in json.dumps(summary.to_json())
    blocks = summary_blocks(summary)
    assert block_errors(blocks) == []
    for text in texts(blocks):
        assert "<" not in text and ">" not in text  # no markup at all: every < and > was escaped
        assert "&lt;!channel&gt; &lt;@U024BE7LH&gt; &lt;http://evil.example|ok&gt; @here [REDACTED] a&amp;b" in text
    assert TOKEN not in render_text(summary)


def test_hidden_characters_are_written_out() -> None:
    summary = Summary(situation="rm \u202etxt.exe")
    assert texts(summary_blocks(summary))[0] == "*What's going on*\nrm ⟨U+202E⟩txt.exe"


def at_the_limits(fill: str) -> Summary:
    """5 hypotheses, 5 next steps, every text at its limit, made of `fill`."""

    def text(n: int) -> str:
        return (fill * n)[:n]

    raw = {
        "situation": text(SITUATION_MAX),
        "next_steps": [text(STEP_MAX)] * 5,
        "hypotheses": [
            {
                "id": f"h{i}",
                "statement": text(STATEMENT_MAX),
                "status": "confirmed",
                "confidence": "high",
                "evidence": list(CALLS)[:3],
            }
            for i in range(5)
        ],
    }
    summary = validate(raw, calls=CALLS)
    assert isinstance(summary, Summary)
    return summary


def with_status(summary: Summary, *, state: str = "running", tasks: int = 15) -> list[dict[str, Any]]:
    """The status message as the run sends it: its status line, the summary, the task cards (older ones counted),
    its run line and, while it runs, Stop."""
    cards = [
        Task(
            task_id=f"toolu_{i:02d}",
            title=f"check_disk host=web-{i:02d} " + "x" * 200,
            status="complete",
            output="y" * 500,
        )
        for i in range(tasks)
    ]
    msg = status_message(
        state=state,
        step=12,
        activity="waiting for approval " + "z" * 400,
        tokens=12345,
        cost_usd=0.12,
        run_id="run_0123456789",
        max_iterations=20,
        tasks=cards,
        summary=summary,
    )
    return msg.blocks


@pytest.mark.parametrize("fill", ["the pool size dropped to 10 after the 14:08 deploy ", "&", "<", "\u202e"])
def test_a_full_summary_and_15_tasks_stay_inside_slacks_limits(fill: str) -> None:
    blocks = with_status(at_the_limits(fill))
    assert block_errors(blocks) == []
    assert len(blocks) <= MAX_BLOCKS
    assert all(len(t) <= SECTION_TEXT_MAX for t in texts(summary_blocks(at_the_limits(fill))))
    size = len(json.dumps(blocks, ensure_ascii=False).encode())
    summary_size = len(json.dumps(summary_blocks(at_the_limits(fill)), ensure_ascii=False).encode())
    print(f"\nfill={fill!r}: {len(blocks)} blocks, status message {size} bytes, summary {summary_size} bytes")


@pytest.mark.parametrize("state", ["running", "finished"])
@pytest.mark.parametrize("tasks", [15, 40])
def test_the_status_message_at_the_limits_keeps_the_summary_above_the_tasks(state: str, tasks: int) -> None:
    blocks = with_status(at_the_limits("<!channel> "), state=state, tasks=tasks)
    assert block_errors(blocks) == [], block_errors(blocks)
    ids = [b.get("block_id") for b in blocks]
    assert ids[:4] == ["status", *BLOCK_IDS] and ids.index("status_tasks") == 4
    assert ("status_actions" in ids) == (state == "running")
    assert len(blocks) <= MAX_BLOCKS
    assert all(len(b["text"]["text"]) <= SECTION_TEXT_MAX for b in blocks if b["type"] == "section")
    assert "<!channel>" not in json.dumps(blocks)


def test_a_final_answer_with_a_full_summary_and_a_long_answer_stays_inside_slacks_limits() -> None:
    msgs = text_messages("\n\n".join("p" * 2900 for _ in range(60)), summary=at_the_limits("&"))
    assert [b.get("block_id") for b in msgs[0].blocks[:3]] == list(BLOCK_IDS)
    for msg in msgs:
        assert block_errors(msg.blocks) == [] and len(msg.blocks) <= MAX_BLOCKS


def test_a_cut_item_ends_with_an_ellipsis_and_breaks_no_entity() -> None:
    cause = texts(summary_blocks(at_the_limits("&")))[1]
    lines = cause.split("\n")[1:]
    assert len(lines) == 5 and all(line.endswith("&amp;…") for line in lines)


def test_the_sandbox_reads_the_summary_without_its_markup() -> None:
    cause = texts(summary_blocks(mixed()))[1]
    shown = plain(cause, {})
    assert "~" not in shown and "*" not in shown and "Refuted, high confidence" in shown
