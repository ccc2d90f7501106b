"""Pure history functions: continuing a thread, condensation split, JSON-call recovery edge cases."""

from __future__ import annotations

from bot.run.history import continue_history, keep_complete_calls, split_for_condensing

USER = {"role": "user", "content": [{"type": "text", "text": "disk full"}]}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "check_disk", "input": {}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "97%"}]}
ANSWER = {"role": "assistant", "content": [{"type": "text", "text": "cleaned"}]}
TASK = {"type": "text", "text": "again?"}


def test_continue_after_an_answer_appends_a_user_turn():
    assert continue_history([USER, ANSWER], "again?") == [USER, ANSWER, {"role": "user", "content": [TASK]}]


def test_continue_after_tool_results_merges_into_that_turn():
    assert continue_history([USER, CALL, RESULT], "again?") == [
        USER,
        CALL,
        {"role": "user", "content": [*RESULT["content"], TASK]},
    ]


def test_continue_after_a_dangling_call_answers_it_first():
    [*_, last] = continue_history([USER, CALL], "again?")
    assert last == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "is_error": True,
                "content": "No result: that run ended before this call finished.",
            },
            TASK,
        ],
    }


def test_nothing_to_condense_with_a_single_exchange():
    assert split_for_condensing([USER, CALL, RESULT]) is None


def test_condensing_keeps_a_tail_that_starts_with_an_assistant_turn():
    history = [USER, CALL, RESULT, CALL, RESULT, CALL, RESULT]
    split = split_for_condensing(history)
    assert (split, history[split]["role"]) == (3, "assistant")


def test_a_whitespace_block_is_dropped_with_the_thinking_bound_to_it():
    """The API refuses whitespace-only text back, and thinking after it is bound to it: both go, the rest stays."""
    content = [
        {"type": "thinking", "thinking": "a", "signature": "s1"},
        {"type": "text", "text": "\n\n"},
        {"type": "thinking", "thinking": "b", "signature": "s2"},
        {"type": "tool_use", "id": "t1", "name": "check_disk", "input": {}},
    ]
    assert keep_complete_calls(content, "tool_use") == [content[0], content[3]]
