"""Every text a person reads from opsloop, kept together so it reads as one voice.

Values that come from users, tools or the model are escaped here (`escape`); mentions
and dates opsloop builds itself (`mention`, `approver`, `slack_date`) are not.

Split by concern, one voice: the formatting helpers live in `messages_format`, the agent surfaces'
texts (loading status, task list, shortcut, App Home) in `messages_surfaces`; every name is
re-exported here, so `messages.X` reaches every text.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.types import DecisionCause
from bot.run.report import STOP_WORDS
from handlers.messages_format import approver as approver
from handlers.messages_format import code as code
from handlers.messages_format import escape as escape
from handlers.messages_format import human_duration as human_duration
from handlers.messages_format import join_or as join_or
from handlers.messages_format import mention as mention
from handlers.messages_format import slack_date as slack_date
from handlers.messages_format import usd as usd
from handlers.messages_format import with_attachments as with_attachments
from handlers.messages_surfaces import FEEDBACK_NEGATIVE as FEEDBACK_NEGATIVE
from handlers.messages_surfaces import FEEDBACK_POSITIVE as FEEDBACK_POSITIVE
from handlers.messages_surfaces import FEEDBACK_PROMPT as FEEDBACK_PROMPT
from handlers.messages_surfaces import FEEDBACK_THANKS as FEEDBACK_THANKS
from handlers.messages_surfaces import HOME_ACTIVE as HOME_ACTIVE
from handlers.messages_surfaces import HOME_APPROVALS as HOME_APPROVALS
from handlers.messages_surfaces import HOME_NO_ACTIVE as HOME_NO_ACTIVE
from handlers.messages_surfaces import HOME_NO_APPROVALS as HOME_NO_APPROVALS
from handlers.messages_surfaces import HOME_NO_RECENT as HOME_NO_RECENT
from handlers.messages_surfaces import HOME_NOT_CHECKED as HOME_NOT_CHECKED
from handlers.messages_surfaces import HOME_RECENT as HOME_RECENT
from handlers.messages_surfaces import HOME_TITLE as HOME_TITLE
from handlers.messages_surfaces import LOADING_MESSAGES as LOADING_MESSAGES
from handlers.messages_surfaces import LOADING_STARTING as LOADING_STARTING
from handlers.messages_surfaces import LOADING_THINKING as LOADING_THINKING
from handlers.messages_surfaces import SHORTCUT_EMPTY as SHORTCUT_EMPTY
from handlers.messages_surfaces import SHORTCUT_NOT_CHECKED as SHORTCUT_NOT_CHECKED
from handlers.messages_surfaces import SHORTCUT_NOT_HERE as SHORTCUT_NOT_HERE
from handlers.messages_surfaces import TASK_NO_OUTPUT as TASK_NO_OUTPUT
from handlers.messages_surfaces import TASK_NOT_RUN as TASK_NOT_RUN
from handlers.messages_surfaces import TASK_UNKNOWN as TASK_UNKNOWN
from handlers.messages_surfaces import TASKS_TITLE as TASKS_TITLE
from handlers.messages_surfaces import home_active_run as home_active_run
from handlers.messages_surfaces import home_approval as home_approval
from handlers.messages_surfaces import home_recent_run as home_recent_run
from handlers.messages_surfaces import loading_approval as loading_approval
from handlers.messages_surfaces import loading_tool as loading_tool
from handlers.messages_surfaces import shortcut_not_a_member as shortcut_not_a_member
from handlers.messages_surfaces import shortcut_prompt as shortcut_prompt
from handlers.messages_surfaces import task_approval_title as task_approval_title
from handlers.messages_surfaces import task_decided as task_decided
from handlers.messages_surfaces import task_title as task_title
from handlers.messages_surfaces import task_waiting as task_waiting
from handlers.messages_surfaces import tasks_earlier as tasks_earlier

# ---------------------------------------------------------------------------
# Stop reasons
# ---------------------------------------------------------------------------

# One source for the words: the handoff report is built in bot/ (no Slack there).
STOP_REASON_WORDS: dict[str, str] = STOP_WORDS


# ---------------------------------------------------------------------------
# Approval card
# ---------------------------------------------------------------------------

APPROVE_BUTTON = "Approve"
DENY_BUTTON = "Deny"

_CATEGORY_LABELS = {
    "mutating": ":warning: mutating",
    "destructive": ":rotating_light: destructive",
}

_CARD_HEADINGS = {
    "pending": "Approval needed: {tool}",
    "approved": "Approved: {tool}",
    "denied": "Denied: {tool}",
    "expired": "Expired, not run: {tool}",
    "superseded": "Superseded, not run: {tool}",
}


def approval_heading(state: str, tool: str) -> str:
    """Plain-text card header; it changes with the state so the thread reads at a glance."""
    return _CARD_HEADINGS.get(state, "Approval: {tool}").format(tool=tool)


def category_label(category: str) -> str:
    return _CATEGORY_LABELS.get(category, escape(category))


def approval_summary(*, tool: str, category: str, requester: str | None) -> str:
    line = f"*Tool:* {code(tool)}   *Category:* {category_label(category)}"
    if requester:
        line += f"\n*Run started by:* {mention(requester)}"
    return line


ARGUMENTS_HEADING = "*Arguments*"
PREVIEW_HEADING = "*Dry run* (what it would do)"
EMPTY_PREVIEW = "(the dry run printed nothing)"


def arguments_part(part: int, total: int, same_line: bool) -> str:
    """Heading of one part of arguments too long for one section."""
    cont = ", continuing the line above" if same_line else ""
    return f"*Arguments* (part {part} of {total}{cont})"


def arguments_too_long(shown: int, total: int) -> str:
    return (
        f":no_entry: *Approve is not offered:* the arguments are {total:,} characters and this card can show"
        f" only {shown:,} of them. Nobody can approve what they cannot read: deny it, or ask opsloop in the"
        " thread for a smaller change."
    )


REDACTED_ON_CARD = ":lock: [REDACTED] — a secret was hidden from this card; the tool receives the real value."


def hidden_on_card(count: int) -> str:
    """The warning on a card whose tool name, arguments or dry run hold invisible or text-reordering characters."""
    what = (
        "1 invisible or direction-changing character"
        if count == 1
        else (f"{count:,} invisible or direction-changing characters")
    )
    return (
        f":warning: *Hidden characters:* this call holds {what}, shown here as ⟨U+…⟩ (for example ⟨U+202E⟩"
        " reverses the text after it). The tool receives them exactly as they are. If you did not expect"
        " them, deny it."
    )


def preview_cut(cut: int, total: int) -> str:
    return f"_Preview cut to fit: {cut:,} of {total:,} characters not shown._"


def approval_progress(approvals: Sequence[str], required: int) -> str:
    if not approvals:
        return f"0 of {required} approvals yet"
    who = ", ".join(mention(u) for u in approvals)
    return f"{len(approvals)} of {required} approvals: {who}"


def approval_expires(expires_at: float) -> str:
    return f"Expires {slack_date(expires_at)} — if no one approves by then, it is not run."


def _at(decided_at: float | None) -> str:
    return f" at {slack_date(decided_at)}" if decided_at is not None else ""


def approval_decided(
    *,
    state: str,
    cause: DecisionCause | None = None,
    decided_by: str | None,
    approvals: Sequence[str],
    reason: str | None,
    decided_at: float | None,
) -> str:
    """The context line of a decided card: who decided, when, and what it means."""
    if state == "approved":
        who = ", ".join(mention(u) for u in approvals) if approvals else mention(decided_by)
        return f":white_check_mark: Approved by {who}{_at(decided_at)}"
    if state == "denied":
        line = f":no_entry_sign: Denied by {mention(decided_by)}{_at(decided_at)}"
        return line + (f": {escape(reason)}" if reason else " — not run")
    if state == "expired":
        return f":hourglass: Expired{_at(decided_at)}: no one approved within the window — not run"
    if state == "superseded" and cause == DecisionCause.STOP:
        by = f" by {mention(decided_by)}" if decided_by else ""
        return f":octagonal_sign: Not run: the {escape(reason or 'run stopped')}{by}{_at(decided_at)}"
    if state == "superseded" and cause == DecisionCause.CHANGED_CALL and reason:
        return f":leftwards_arrow_with_hook: Superseded: {escape(reason)}{_at(decided_at)} — not run"
    if state == "superseded":
        src = f" from {mention(decided_by)}" if decided_by else ""
        return f":leftwards_arrow_with_hook: Superseded by a thread reply{src}{_at(decided_at)} — not run"
    return f"Decided: {escape(state)}{_at(decided_at)}"


def approval_fallback(*, state: str, tool: str, category: str) -> str:
    """Notification text of the card (no mentions: it must not ping anyone)."""
    if state == "pending":
        return f"Approval needed: {escape(tool)} ({escape(category)})"
    return f"{escape(state.capitalize())}: {escape(tool)} ({escape(category)})"


def destructive_confirm(tool: str) -> tuple[str, str, str, str]:
    """(title, text, confirm, deny) of the dialog before approving a destructive call."""
    return (
        f"Run {tool}?",
        f"{tool} is destructive and may not be undoable. Approve it with the arguments shown?",
        "Approve",
        "Cancel",
    )


# ---------------------------------------------------------------------------
# Status message
# ---------------------------------------------------------------------------

STOP_BUTTON = "Stop"
STOP_CONFIRM = (
    "Stop this run?",
    "The agent stops and posts a handoff report in this thread.",
    "Stop run",
    "Keep running",
)

_STATE_MARKERS = {
    "running": ":hourglass_flowing_sand:",
    "waiting_approval": ":raised_hand:",
    "finished": ":white_check_mark:",
}


def status_line(
    *, state: str, step: int, max_iterations: int | None, activity: str, tokens: int, cost_usd: float
) -> str:
    steps = f"{step}/{max_iterations}" if max_iterations else f"{step}"
    marker = _STATE_MARKERS.get(state, "")
    text = f"*Step {steps}* · {escape(activity)} · {tokens:,} tokens · {usd(cost_usd)}"
    return f"{marker} {text}" if marker else text


def status_context(run_id: str) -> str:
    return f"Run {code(run_id)}"


# ---------------------------------------------------------------------------
# Final answer and handoff report
# ---------------------------------------------------------------------------

EMPTY_ANSWER = "_The run finished without a written answer._"


def continued(part: int, total: int, what: str) -> str:
    return f"{what} (continued, part {part} of {total})"


def report_header(stop_reason: str) -> str:
    if stop_reason == "completed":
        return ":white_check_mark: Run finished"
    return f":octagonal_sign: Run stopped: {stop_reason}"


def report_reason(stop_reason: str, words: str) -> str:
    return f"*Reason:* {code(stop_reason)} — {escape(words)}"


def report_fallback(stop_reason: str, words: str) -> str:
    if stop_reason == "completed":
        return "Run finished"
    return f"Run stopped: {escape(stop_reason)} — {escape(words)}"


REPORT_ITERATIONS = "*Iterations*"
REPORT_TOKENS = "*Tokens*"
REPORT_COST = "*Cost*"
REPORT_WALL = "*Wall time*"
TOOLS_HEADING = "*Tools called*"
NO_TOOLS = "_No tools were called._"
FINDINGS_HEADING = "*Last findings*"
NO_FINDINGS = "_No findings recorded._"
PENDING_HEADING = "*Pending*"
NOTHING_PENDING = "nothing pending"


def report_tokens(*, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> str:
    return f"in {input_tokens:,} · out {output_tokens:,}\ncache read {cache_read:,} · write {cache_write:,}"


def report_tool_line(name: str, times: int, excerpt: str) -> str:
    line = f"• {code(name)} ×{times}"
    return f"{line}: {escape(excerpt)}" if excerpt else line


def stopped_by(user_id: str) -> str:
    return f"Stopped by {mention(user_id)}"


# ---------------------------------------------------------------------------
# Ephemeral replies to a click (only the clicker sees them; nothing changes)
# ---------------------------------------------------------------------------


def not_allowed_to_approve(tool: str, category: str, who_may: str | Sequence[str]) -> str:
    """`who_may`: approver ids ("U…", "S…"), or that list already written as mrkdwn."""
    who = who_may if isinstance(who_may, str) else join_or([approver(e) for e in who_may])
    ask = f" Ask {who}." if who else ""
    return f"You can't approve {escape(category)} calls like {code(tool)} in this channel.{ask} Nothing was changed."


def self_approval_refused(tool: str, category: str = "destructive") -> str:
    return (
        f"You started this run, so you can't approve the {category} call {code(tool)} yourself."
        " Ask someone else on call. Nothing was changed."
    )


def asked_in_thread_refused(tool: str, category: str = "destructive") -> str:
    return (
        f"You asked for this in the thread before opsloop proposed it, so you can't approve the {category} call"
        f" {code(tool)} yourself. Ask someone else on call. Nothing was changed."
    )


def args_not_shown_refused(tool: str) -> str:
    return (
        f"The arguments of {code(tool)} are too long to show on the card, so nobody can approve it from Slack."
        " Deny it, or ask opsloop in the thread for a smaller change. Nothing was changed."
    )


def already_decided(state: str, by: str | None) -> str:
    if state == "approved":
        return f"This was already approved by {mention(by)}. Your click changed nothing."
    if state == "denied":
        return f"This was already denied by {mention(by)}. Your click changed nothing."
    if state == "expired":
        return "This approval expired and the call was not run. Your click changed nothing."
    if state == "superseded":
        src = f" from {mention(by)}" if by else ""
        return f"This approval was superseded by a thread reply{src}; the call was not run."
    return f"This approval is already {escape(state)}. Your click changed nothing."


def approval_expired(tool: str) -> str:
    return (
        f"This approval for {code(tool)} expired before anyone approved it, so it was not run."
        " Ask opsloop again in the thread if it is still needed."
    )


def already_approved_by_you() -> str:
    return "You have already approved this. It is waiting for another approver."


def not_allowed_to_stop() -> str:
    return "You can't stop this run. Ask the person who started it or an approver. Nothing was changed."


UNKNOWN_APPROVAL = "opsloop has no record of this approval, so your click changed nothing."


def click_not_on_its_card() -> str:
    return (
        "This button is not on the approval card it names, so your click changed nothing."
        " Use the buttons on the card in the incident thread."
    )


def card_not_checked() -> str:
    return (
        "opsloop could not check with Slack that this is the approval card, so your click changed nothing."
        " Try again in a moment."
    )


def stop_not_on_its_status() -> str:
    return (
        "This Stop button is not on the status message of the run it names, so nothing was stopped."
        " Use the Stop button in that run's thread."
    )


def status_not_checked() -> str:
    return (
        "opsloop could not check with Slack that this is the run's status message, so nothing was stopped."
        " Try again in a moment."
    )


EMPTY_MENTION = (
    "What should I look into? Mention me with the task, for example `@opsloop web-1 is returning 502s since 14:00`."
)


# ---------------------------------------------------------------------------
# `opsloop check` warnings about the approval policy
# ---------------------------------------------------------------------------

ANYONE_MAY_APPROVE_MUTATING = "approvals.approvers is empty: anyone in the channel may approve mutating calls"
ANYONE_MAY_APPROVE_DESTRUCTIVE = (
    "nobody is named for destructive calls (approvals.destructive_approvers, approvals.approvers):"
    " anyone in the channel may approve them"
)
SELF_APPROVAL_ALLOWED = (
    "approvals.allow_self_approval is true: whoever asked for a destructive call may approve it themselves"
)


def run_already_finished() -> str:
    return "This run has already finished; there is nothing to stop."


def store_unavailable(*, disk_full: bool) -> str:
    why = "its disk is full" if disk_full else "it keeps failing"
    return (
        f":warning: opsloop can't write to its database ({why}). This run is paused, not lost: it "
        "continues by itself as soon as the database works again."
    )


# ---------------------------------------------------------------------------
# Alerts (docs/alerts.md). Every value from an alert is escaped here; links arrive already made safe (plain URLs
# by handlers.mrkdwn.plain_link: a link always shows where it goes).
# ---------------------------------------------------------------------------


def alert_root(
    *,
    name: str,
    severity: str,
    status: str,
    firing: int,
    labels: Sequence[tuple[str, str]],
    summary: str,
    links: Sequence[tuple[str, str]],
    previous: str | None = None,
) -> str:
    """The root of a new alert group's thread, where its run starts; `previous`: the link to the thread of the
    group's previous occurrence (it fired again)."""
    head = f":rotating_light: *{escape(name)}*" + (f" ({escape(severity)})" if severity else "")
    lines = [f"{head}: {escape(status)}, {firing} alert{'s' if firing != 1 else ''} firing"]
    if summary:
        lines.append(escape(summary))
    if labels:
        lines.append("*Labels:* " + ", ".join(f"`{escape(k)}={escape(v)}`" for k, v in labels))
    lines += [f"*{escape(what)}:* {link}" for what, link in links]
    if previous:
        lines.append(f"This group fired before: <{previous}|the previous thread>.")
    lines.append("_opsloop is investigating in this thread._")
    return "\n".join(lines)


def alert_repeat() -> str:
    return (
        "Alertmanager sent this group again with the same alerts firing: nothing new was started "
        "(further repeats are not posted)."
    )


def alert_changed(firing: Sequence[str]) -> str:
    return (
        f":bell: The firing alerts changed: {len(firing)} firing now"
        + (": " + ", ".join(escape(f) for f in firing[:10]) if firing else "")
        + (f" and {len(firing) - 10} more" if len(firing) > 10 else "")
        + ". The investigation is told."
    )


def alert_fired_again(link: str) -> str:
    """In the thread of an alert group's ended occurrence: it fired again, and is investigated anew at `link`."""
    return f":repeat: This alert group fired again: a new investigation is in <{link}|a new thread>."


def alert_resolved(name: str, *, told_run: bool) -> str:
    return f":white_check_mark: *{escape(name)}* is resolved (Alertmanager)." + (
        " The investigation is told." if told_run else ""
    )


def alert_storm_root(limit: int) -> str:
    return (
        f":warning: *Alert storm*: more than {limit} alerts in this channel within 10 minutes. opsloop "
        "investigates the first ones only; the alerts listed in this thread were *not investigated*. "
        "Mention opsloop in an alert's thread to investigate it."
    )


def alert_not_investigated(summary: str) -> str:
    return f"Not investigated: {escape(summary)}"
