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
    EVIDENCE_MAX,
    HANDLE_MAIN_MAX,
    INPUT_SCHEMA,
    QUOTE_MAX,
    SITUATION_MAX,
    STATEMENT_MAX,
    STEP_MAX,
    CallOutcome,
    CallStatus,
    Confidence,
    Evidence,
    Hypothesis,
    HypothesisStatus,
    Summary,
    handle,
    refusal,
    render_text,
    validate,
)
from handlers.blocks import (
    BLOCK_IDS,
    BLOCKS_TEXT_MAX,
    MAX_BLOCKS,
    SECTION_TEXT_MAX,
    Task,
    blocks_text,
    status_message,
    summary_blocks,
    text_messages,
)

OK = CallStatus.SUCCEEDED
# Each call's result as the model read it: its handle line, then what the tool returned. update_summary's has none.
CALLS = {
    "toolu_00": CallOutcome("pg_query", OK, "#1 pg_query pg-primary-07\nmean_exec_ms 3.1, 0 slow queries"),
    "toolu_01": CallOutcome(
        "recent_changes", OK, "#2 recent_changes checkout-api\n14:08 deploy rev 42: pool_size 50 -> 10"
    ),
    "toolu_02": CallOutcome("prom_query", OK, "#3 prom_query checkout-api\ncheckout-api p99 4.1 s since 14:10"),
    "toolu_err": CallOutcome("grep_log", CallStatus.FAILED, "#4 grep_log web-03\nerror: permission denied"),
    "toolu_denied": CallOutcome(
        "k8s_rollout_undo", CallStatus.NOT_RUN, "#5 k8s_rollout_undo checkout-api\ndenied by @dana"
    ),
    "toolu_wait": CallOutcome("check_disk", CallStatus.PENDING, "#6 check_disk web-03\nawaiting approval"),
    "toolu_sum": CallOutcome("update_summary", OK, "Summary updated; it is shown in the thread's status message."),
}
POOL = {"handle": "#2", "quote": "pool_size 50 -> 10"}
P99 = {"handle": "#3", "quote": "p99 4.1 s"}
DB_FINE = {"handle": "#1", "quote": "0 slow queries"}
ERR = {"handle": "#4", "quote": "permission denied"}
DENIED = {"handle": "#5", "quote": "denied by @dana"}
WAIT = {"handle": "#6", "quote": "awaiting approval"}

EXAMPLE: dict[str, Any] = {
    "situation": "checkout-api p99 at 4 s since 14:10; the database is healthy",
    "hypotheses": [
        {
            "id": "pool",
            "statement": "the 14:08 deploy lowered the pool size to 10",
            "status": "supported",
            "confidence": "high",
            "evidence": [POOL, P99],
        },
        {
            "id": "db",
            "statement": "pg-primary-07 is slow",
            "status": "refuted",
            "confidence": "high",
            "evidence": [DB_FINE],
        },
    ],
    "next_steps": ["roll back checkout-api to revision 41"],
}
NOT_A_CALL = ' is not a call of this run (cite the handle on the first line of a tool result, e.g. "#7")'
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
                evidence=(
                    Evidence("#2 recent_changes checkout-api", "pool_size 50 -> 10"),
                    Evidence("#3 prom_query checkout-api", "p99 4.1 s"),
                ),
            ),
            Hypothesis(
                id="db",
                statement="pg-primary-07 is slow",
                status=HypothesisStatus.REFUTED,
                confidence=Confidence.HIGH,
                evidence=(Evidence("#1 pg_query pg-primary-07", "0 slow queries"),),
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
                    "evidence": [ERR],
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
        {"id": "p", "statement": "s", "status": "supported", "confidence": "medium", "evidence": [DENIED]},
    )
    assert isinstance(validate(raw, calls=CALLS), Summary)


@pytest.mark.parametrize(
    ("raw", "problems"),
    [
        (
            changed("hypotheses.1.evidence", [DB_FINE, {"handle": "#9", "quote": "0 slow queries"}]),
            ["hypotheses[1].evidence[1].handle: #9" + NOT_A_CALL],
        ),
        (
            changed("hypotheses.1.evidence", [{"handle": "#1", "quote": "p99 4.1 s"}]),
            [
                "hypotheses[1].evidence[0].quote: p99 4.1 s is not in the result of #1 pg_query pg-primary-07; copy "
                "the words from that result exactly (whitespace and case may differ)"
            ],
        ),
        (
            # the handle line is not evidence: a quote must come from what the tool returned
            changed("hypotheses.1.evidence", [{"handle": "#1", "quote": "pg_query pg-primary-07"}]),
            [
                "hypotheses[1].evidence[0].quote: pg_query pg-primary-07 is not in the result of #1 pg_query "
                "pg-primary-07; copy the words from that result exactly (whitespace and case may differ)"
            ],
        ),
        (
            changed("hypotheses.1.evidence", [{"handle": "#1", "quote": "0 s"}]),
            ["hypotheses[1].evidence[0].quote: too short, at least 4 characters"],
        ),
        (
            changed("hypotheses.1.evidence", [{"handle": "#1"}]),
            ["hypotheses[1].evidence[0].quote: required"],
        ),
        (
            changed("hypotheses.0.evidence", [DENIED]),
            [
                "hypotheses[0]: confidence high needs at least one quoted piece of evidence from a successful call "
                "of this run (#5 k8s_rollout_undo checkout-api did not run: denied, expired or refused)"
            ],
        ),
        (
            changed("hypotheses.1.evidence", [ERR]),
            [
                "hypotheses[1]: confidence high and status refuted needs at least one quoted piece of evidence from "
                "a successful call of this run (#4 grep_log web-03 returned an error)"
            ],
        ),
        (
            changed(
                "hypotheses.0",
                {"id": "p", "statement": "s", "status": "confirmed", "confidence": "medium", "evidence": []},
            ),
            [
                "hypotheses[0]: status confirmed needs at least one quoted piece of evidence from a successful call "
                "of this run (no evidence given)"
            ],
        ),
        (
            changed(
                "hypotheses.0",
                {"id": "p", "statement": "s", "status": "refuted", "confidence": "low", "evidence": [WAIT]},
            ),
            [
                "hypotheses[0]: status refuted needs at least one quoted piece of evidence from a successful call "
                "of this run (#6 check_disk web-03 has not finished)"
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
        (changed("hypotheses.0.evidence", POOL), ["hypotheses[0].evidence: must be a list"]),
        (
            # a bare tool_use id, the form before handles
            changed("hypotheses.0.evidence", ["toolu_01"]),
            ['hypotheses[0].evidence[0]: must be an object {"handle": "#7", "quote": "..."}: a handle and a quote'],
        ),
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
    raw["hypotheses"][0]["evidence"] = [{"handle": "#99", "quote": "pool_size 50 -> 10"}]
    raw["next_steps"] = "roll back"
    assert validate(raw, calls=CALLS) == [
        "situation: must be a string",
        "hypotheses[0].evidence[0].handle: #99" + NOT_A_CALL,
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


@pytest.mark.parametrize(
    "piece", [{"handle": TOKEN + "x" * 100, "quote": "0 slow queries"}, {"handle": "#1", "quote": TOKEN + "x" * 100}]
)
def test_a_bad_handle_or_quote_shown_in_a_problem_is_redacted_and_bounded(piece: dict[str, str]) -> None:
    [problem] = validate(changed("hypotheses.1.evidence", [piece]), calls=CALLS)
    assert TOKEN not in problem and REDACTED in problem and "x" * 80 not in problem and len(problem) < 250


def test_a_quote_matches_across_whitespace_and_case_and_is_stored_as_given() -> None:
    raw = changed("hypotheses.0.evidence", [{"handle": "#2 anything", "quote": "POOL_SIZE   50\n-> 10"}])
    summary = validate(raw, calls=CALLS)
    assert isinstance(summary, Summary)
    assert summary.hypotheses[0].evidence == (Evidence("#2 recent_changes checkout-api", "POOL_SIZE 50 -> 10"),)


def test_a_quote_of_a_marker_matches_as_the_model_was_shown_it() -> None:
    """A result's "[thread reply from" reaches the model quoted: the quote it copies from what it saw stands, and
    so does the same words unquoted; words that aren't in the result still don't."""
    calls = {**CALLS, "toolu_log": CallOutcome("grep_log", OK, "#8 grep_log app.log\n12:00 [thread reply from U1] ok")}
    for quote in ("[quoted thread reply from U1] ok", "[thread reply from U1] ok"):
        summary = validate(changed("hypotheses.0.evidence", [{"handle": "#8", "quote": quote}]), calls=calls)
        assert isinstance(summary, Summary), (quote, summary)
    [problem] = validate(
        changed("hypotheses.0.evidence", [{"handle": "#8", "quote": "[thread reply from U2]"}]), calls=calls
    )
    assert "is not in the result of #8 grep_log app.log" in problem


def test_update_summary_itself_has_no_handle_to_cite() -> None:
    assert CALLS["toolu_sum"].handle == ""
    [problem] = validate(changed("hypotheses.0.evidence", [{"handle": "#7", "quote": "Summary updated"}]), calls=CALLS)
    assert problem.startswith("hypotheses[0].evidence[0].handle: #7 is not a call of this run")


def test_a_summary_stored_before_quotes_comes_back_with_its_ids() -> None:
    stored = {"situation": "s", "hypotheses": [dict(EXAMPLE["hypotheses"][1], evidence=["toolu_00"])]}
    [h] = Summary.from_json(stored).hypotheses
    assert h.evidence == (Evidence("toolu_00"),) and h.evidence[0].text() == "toolu_00"


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
                "evidence": [DB_FINE] if s in ("confirmed", "refuted") else [],
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
        "  - confirmed, high confidence: confirmed 2 [h2]\n"
        '      evidence #1 pg_query pg-primary-07: "0 slow queries"\n'
        "  - supported, low confidence: supported 3 [h3]\n"
        "  - open, low confidence: open 1 [h1]\n"
        "  - open, low confidence: open 4 [h4]\n"
        "  - refuted, high confidence: refuted 0 [h0]\n"
        '      evidence #1 pg_query pg-primary-07: "0 slow queries"\n'
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
    """Each section's text; each context's elements, one per line."""
    return [b["text"]["text"] if "text" in b else "\n".join(e["text"] for e in b["elements"]) for b in blocks]


def sections(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks if b["type"] == "section"]


def test_the_blocks_are_three_sections_in_order_each_hypothesis_with_its_evidence_under_it() -> None:
    blocks = summary_blocks(mixed())
    assert block_errors(blocks) == []
    assert [b["block_id"] for b in blocks] == [
        BLOCK_IDS[0],
        BLOCK_IDS[1],
        "summary_evidence_0",
        *(f"{BLOCK_IDS[1]}_{i}" for i in range(1, 5)),
        "summary_evidence_4",
        BLOCK_IDS[2],
    ]
    assert all(e["verbatim"] is True for b in blocks for e in ([b["text"]] if "text" in b else b["elements"]))
    assert texts(blocks) == [
        "*What's going on*\nweb-03 /var at 97%",
        "*Likely cause*\n• *Confirmed*, high confidence: confirmed 2",
        '#1 pg_query pg-primary-07: "0 slow queries"',
        "• *Supported*, low confidence: supported 3",
        "• Open, low confidence: open 1",
        "• Open, low confidence: open 4",
        "• ~Refuted~, high confidence: refuted 0",
        '#1 pg_query pg-primary-07: "0 slow queries"',
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
    """5 hypotheses, 5 next steps, every text at its limit, made of `fill`; each hypothesis with the most evidence,
    each quote at its limit, from calls whose handles are at theirs."""

    def text(n: int) -> str:
        return (fill * n)[:n]

    calls = {
        f"toolu_{n}": CallOutcome(
            "check_disk", OK, handle(n, "check_disk", text(HANDLE_MAIN_MAX + 5)) + "\n" + text(QUOTE_MAX)
        )
        for n in range(1, EVIDENCE_MAX + 1)
    }
    raw = {
        "situation": text(SITUATION_MAX),
        "next_steps": [text(STEP_MAX)] * 5,
        "hypotheses": [
            {
                "id": f"h{i}",
                "statement": text(STATEMENT_MAX),
                "status": "confirmed",
                "confidence": "high",
                "evidence": [{"handle": f"#{n}", "quote": text(QUOTE_MAX)} for n in range(1, EVIDENCE_MAX + 1)],
            }
            for i in range(5)
        ],
    }
    summary = validate(raw, calls=calls)
    assert isinstance(summary, Summary) and all(len(h.evidence) == EVIDENCE_MAX for h in summary.hypotheses), summary
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
    summary = summary_blocks(at_the_limits(fill))
    assert all(len(t) <= SECTION_TEXT_MAX for t in sections(summary))
    assert blocks_text(summary[1:-1]) <= SECTION_TEXT_MAX  # the hypotheses and their evidence, in all
    assert blocks_text(blocks) <= BLOCKS_TEXT_MAX
    size = len(json.dumps(blocks, ensure_ascii=False).encode())
    summary_size = len(json.dumps(summary_blocks(at_the_limits(fill)), ensure_ascii=False).encode())
    print(f"\nfill={fill!r}: {len(blocks)} blocks, status message {size} bytes, summary {summary_size} bytes")


@pytest.mark.parametrize("state", ["running", "finished"])
@pytest.mark.parametrize("tasks", [15, 40])
def test_the_status_message_at_the_limits_keeps_the_summary_above_the_tasks(state: str, tasks: int) -> None:
    blocks = with_status(at_the_limits("<!channel> "), state=state, tasks=tasks)
    assert block_errors(blocks) == [], block_errors(blocks)
    ids = [b.get("block_id") for b in blocks]
    shown = ["status", BLOCK_IDS[0]]
    for i in range(5):
        shown += [BLOCK_IDS[1] if i == 0 else f"{BLOCK_IDS[1]}_{i}", f"summary_evidence_{i}"]
    assert ids[: len(shown) + 2] == [*shown, BLOCK_IDS[2], "status_tasks"]
    assert ("status_actions" in ids) == (state == "running")
    assert len(blocks) <= MAX_BLOCKS
    assert all(len(b["text"]["text"]) <= SECTION_TEXT_MAX for b in blocks if b["type"] == "section")
    assert "<!channel>" not in json.dumps(blocks)


def test_a_final_answer_with_a_full_summary_and_a_long_answer_stays_inside_slacks_limits() -> None:
    msgs = text_messages("\n\n".join("p" * 2900 for _ in range(60)), summary=at_the_limits("&"))
    ids = [b.get("block_id") for b in msgs[0].blocks]
    assert ids[:3] == [BLOCK_IDS[0], BLOCK_IDS[1], "summary_evidence_0"] and ids[11] == BLOCK_IDS[2]  # one message
    for msg in msgs:
        assert block_errors(msg.blocks) == [] and len(msg.blocks) <= MAX_BLOCKS


def test_a_cut_item_ends_with_an_ellipsis_and_breaks_no_entity() -> None:
    blocks = summary_blocks(at_the_limits("&"))
    steps = texts(blocks)[-1].split("\n")[1:]
    assert len(steps) == 5 and all(line.endswith("&amp;…") for line in steps)
    causes = [b["text"]["text"] for b in blocks[1:-1] if b["type"] == "section"]
    assert len(causes) == 5 and all(c.endswith("&amp;…") for c in causes)
    evidence = blocks[2]["elements"]
    assert [e["text"] for e in evidence][-1] == f"and {EVIDENCE_MAX - 3} more"
    assert len(evidence) == 4 and all(e["text"].endswith("&amp;…") for e in evidence[:3])


def test_the_sandbox_reads_the_summary_without_its_markup() -> None:
    cause = "\n".join(texts(summary_blocks(mixed()))[1:-1])
    shown = plain(cause, {})
    assert "~" not in shown and "*" not in shown and "Refuted, high confidence" in shown
