"""A run's last words in its thread: its answer, or its handoff report, as outbox posts keyed by run and part."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.core.types import OutboxPost, Run, RunResult, StopReason
from bot.run.report import handoff_report
from bot.run.summary import Summary
from handlers import blocks
from handlers.outbox import answer_key, report_key

if TYPE_CHECKING:
    from bot.store import Store


async def final_posts(
    row: Run, result: RunResult, *, store: Store, max_iterations: int, summary: Summary | None
) -> list[OutboxPost]:
    """The run's answer, or its handoff report, as outbox posts keyed by run and part (sent exactly once);
    `summary`: the run's last accepted living summary, shown with either."""
    if result.stop_reason == StopReason.COMPLETED and result.output:
        msgs, key = blocks.text_messages(result.output, summary=summary), answer_key
    else:
        report = handoff_report(result, await store.history(row.id))
        r, u = report.result, report.result.usage
        msgs, key = (
            blocks.handoff_report(
                stop_reason=r.stop_reason.value,
                stop_words=f"{report.stop_words}. {r.stop_detail}".strip(),
                iterations=r.iterations,
                max_iterations=max_iterations,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens,
                cost_usd=r.cost_usd,
                wall_seconds=r.wall_seconds,
                tools=[(t.name, t.calls, t.last_result) for t in report.tools],
                last_reasoning=report.last_reasoning,
                pending=report.pending,
                stopped_by=r.stopped_by,
                summary=summary,
            ),
            report_key,
        )
    msgs = blocks.with_feedback(msgs, row.id)  # the feedback buttons under the last part
    return [
        OutboxPost(
            key=key(row.id, i),
            channel=row.channel,
            thread_ts=row.thread_ts,
            text=m.text,
            blocks=m.blocks,
            run_id=row.id,
        )
        for i, m in enumerate(msgs)
    ]
