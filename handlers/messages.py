"""Every text a person reads from opsloop, kept together so it reads as one voice.

Values that come from users, tools or the model are escaped here (`escape`); mentions
and dates opsloop builds itself (`mention`, `approver`, `slack_date`) are not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from bot.core.types import DecisionCause
from bot.run.report import CONCLUSION

USER_ID = re.compile(r"^[UW][A-Z0-9]{2,40}$")
GROUP_ID = re.compile(r"^S[A-Z0-9]{2,40}$")


def escape(text: str) -> str:
    """Escape the three characters Slack mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mention(user_id: str | None) -> str:
    """A `<@U…>` mention for a Slack user id; anything else is shown as escaped text."""
    if not user_id:
        return "someone"
    if USER_ID.match(user_id):
        return f"<@{user_id}>"
    return escape(user_id)


def approver(entity: str) -> str:
    """A user (`U…`) or user group (`S…`) from the approvers config, as a mention."""
    if GROUP_ID.match(entity):
        return f"<!subteam^{entity}>"
    return mention(entity)


def code(text: str) -> str:
    """Inline code for a short identifier such as a tool name (backticks cannot be escaped)."""
    return "`" + escape(text.replace("`", "'")) + "`"


def slack_date(epoch: float) -> str:
    """A date Slack shows in the reader's own time zone, with a UTC fallback."""
    seconds = int(epoch)
    fallback = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{seconds}^{{date_short_pretty}} at {{time}}|{fallback}>"


def join_or(items: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def human_duration(seconds: float) -> str:
    """'42s', '4m 12s', '1h 3m' — wall time an SRE reads at a glance."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def usd(amount: float) -> str:
    """'$0.04'; sub-cent amounts keep enough digits not to read as free."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    return f"${amount:.4f}"


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


def approval_summary(*, tool: str, category: str, requester: str | None) -> str:
    line = f"*Tool:* {code(tool)}   *Category:* {_CATEGORY_LABELS.get(category, escape(category))}"
    if requester:
        line += f"\n*Run started by:* {mention(requester)}"
    return line


PREVIEW_HEADING = "*Dry run* (what it would do)"
EMPTY_PREVIEW = "(the dry run printed nothing)"


def arguments_heading(part: int = 1, total: int = 1, same_line: bool = False) -> str:
    """Heading of the arguments, or of one part of arguments too long for one section."""
    if total == 1:
        return "*Arguments*"
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


def approval_alert_note(note: str) -> str:
    """On a card whose run's alert changed while it waited: approving still runs the call, so check it is needed."""
    return f":warning: {escape(note)} while this waited: approving still runs the call, so check it is still needed."


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
CONCLUSION_HEADING = f"*{CONCLUSION}*"
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
    if state in ("approved", "denied"):
        return f"This was already {state} by {mention(by)}. Your click changed nothing."
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


ALREADY_APPROVED_BY_YOU = "You have already approved this. It is waiting for another approver."
NOT_ALLOWED_TO_STOP = "You can't stop this run. Ask the person who started it or an approver. Nothing was changed."
UNKNOWN_APPROVAL = "opsloop has no record of this approval, so your click changed nothing."
CLICK_NOT_ON_ITS_CARD = (
    "This button is not on the approval card it names, so your click changed nothing."
    " Use the buttons on the card in the incident thread."
)
CARD_NOT_CHECKED = (
    "opsloop could not check with Slack that this is the approval card, so your click changed nothing."
    " Try again in a moment."
)
STOP_NOT_ON_ITS_STATUS = (
    "This Stop button is not on the status message of the run it names, so nothing was stopped."
    " Use the Stop button in that run's thread."
)
STATUS_NOT_CHECKED = (
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


RUN_ALREADY_FINISHED = "This run has already finished; there is nothing to stop."


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


def alert_repeat(sender: str) -> str:
    """In an alert's thread: `sender` ("Alertmanager", "PagerDuty") sent the alert again with nothing new."""
    return f"{sender} sent this alert again with nothing new: nothing new was started (further repeats are not posted)."


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


# ---------------------------------------------------------------------------
# Slack's agent surfaces: feedback, the loading status, the task list, the message shortcut, App Home
# ---------------------------------------------------------------------------

FEEDBACK_POSITIVE = "Helpful"
FEEDBACK_NEGATIVE = "Not helpful"
FEEDBACK_PROMPT = "Did this help?"

LOADING_THINKING = "thinking…"
# The rotating lines Slack shows under the thread while a status is set (at most 10).
LOADING_MESSAGES = ("Reading the evidence…", "Checking what changed…", "Thinking it through…")
_VERBS = {
    "read": "reading",
    "list": "listing",
    "check": "checking",
    "get": "getting",
    "grep": "searching",
    "tail": "reading",
    "describe": "describing",
    "query": "querying",
    "fetch": "fetching",
    "http": "requesting",
    "clean": "cleaning",
    "restart": "restarting",
    "delete": "deleting",
    "scale": "scaling",
    "rollout": "rolling out",
    "kubectl": "running kubectl on",
}


def _arg(args: dict[str, object], keys: Sequence[str], types: type | tuple[type, ...] = (str, int)) -> str:
    """The first non-empty argument among `keys` of one of `types`, as text; "" when none."""
    return next((str(args[k]) for k in keys if isinstance(args.get(k), types) and str(args[k])), "")


def loading_tool(tool: str, args: dict[str, object]) -> str:
    """What the status under the thread says while a tool runs: "reading /var/log/nginx on web-03…"."""
    head, _, rest = tool.partition("_")
    what = _arg(args, ("path", "unit", "service", "url", "pod", "deployment", "query", "name", "pattern"))
    where = _arg(args, ("host", "cluster", "namespace"), str)
    words = f"{_VERBS[head]} {what or rest.replace('_', ' ')}".strip() if head in _VERBS else f"running {tool}"
    return one_line(words + (f" on {where}" if where else "")) + "…"


def _waiting(approvers: tuple[str, ...], shown: Sequence[str]) -> str:
    if not approvers:
        return "waiting for approval from anyone in the channel"
    return one_line("waiting for approval from " + ", ".join(shown[:5]) + (" …" if len(shown) > 5 else ""))


def loading_approval(approvers: tuple[str, ...], names: Mapping[str, str]) -> str:
    """ "waiting for approval from @carol, @oncall": plain text (the loading status renders no mentions), so people
    by display name and user groups by handle, from `names` (id -> name; an id Slack couldn't name stays an id);
    nobody named: anyone in the channel."""
    named = (USER_ID.match, GROUP_ID.match)
    return _waiting(approvers, [f"@{names.get(a) or a}" if any(f(a) for f in named) else a for a in approvers])


def task_waiting(approvers: tuple[str, ...], names: Mapping[str, str]) -> str:
    """An approval task's output while it waits: "waiting for approval from <@U0CAROL>, @oncall". The output is
    rich text: a person is a user element (a mention Slack renders, in an edit that notifies nobody); a user group
    has no such element that stays silent, so it is its handle as text (`names`: id -> handle)."""
    return _waiting(
        approvers,
        [f"<@{a}>" if USER_ID.match(a) else f"@{names.get(a) or a}" if GROUP_ID.match(a) else a for a in approvers],
    )


def one_line(text: str, limit: int = 120) -> str:
    """Whitespace collapsed and cut to `limit` characters with an ellipsis: for excerpts inside a line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the live task list in the status message (a plan block of task cards) ---------------------------------
TASKS_TITLE = "What opsloop is doing"
TASK_NO_OUTPUT = "(no output)"
TASK_NOT_RUN = "not run"
TASK_UNKNOWN = "outcome unknown: opsloop restarted while it ran"


def task_title(tool: str, args: dict[str, object]) -> str:
    """A task's title: the tool and its target ("list_large_files /var/log/nginx on web-03", "http_get
    status.example.com", "get_pod api-7f/prod"). Plain text: the card shows it as written."""
    what = _arg(args, ("path", "unit", "service", "deployment", "name", "pattern"))
    url, pod, namespace = _arg(args, ("url",), str), _arg(args, ("pod",), str), _arg(args, ("namespace",), str)
    if not what and url:
        what = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", url).split("/", 1)[0].rsplit("@", 1)[-1]
    if not what and pod:
        what, namespace = (f"{pod}/{namespace}" if namespace else pod), ""
    where = _arg({**args, "namespace": namespace}, ("host", "cluster", "namespace"), str)
    return " ".join(w for w in (tool, what, f"on {where}" if where else "") if w)


def task_approval_title(tool: str) -> str:
    return f"Approval for {tool}"


def task_decided(*, approved: bool, outcome: str, by: str | None) -> str:
    """An approval task's output once decided: "approved by <@U0CAROL>", "denied by …", "expired"."""
    who = (f"<@{by}>" if USER_ID.match(by) else by) if by else None
    if approved:
        return f"approved by {who}" if who else "approved"
    word = outcome if outcome in ("denied", "expired", "superseded", "unavailable") else "denied"
    return f"{word} by {who}" if who and word in ("denied", "superseded") else word


def tasks_earlier(n: int) -> str:
    return f"{n} earlier step{'s' if n != 1 else ''} not shown"


SHORTCUT_EMPTY = "That message has no text to investigate."
SHORTCUT_NOT_HERE = "opsloop doesn't act in this channel (see `[slack] channels` in its config)."
SHORTCUT_NOT_CHECKED = (
    "opsloop couldn't check with Slack whether it is in this conversation, so it started "
    "nothing. Try again in a minute."
)


def shortcut_not_a_member(channel: str) -> str:
    """The bot isn't in the conversation: nothing it did there could be posted back."""
    return (
        f"opsloop isn't in <#{channel}>, so it can't work there: invite @opsloop to <#{channel}> first "
        "(`/invite @opsloop`). It can't join a direct message between other people."
    )


def shortcut_prompt(user: str, channel: str, author: str, text: str) -> str:
    """The task a message shortcut starts a run with: the message, who ran the shortcut, where."""
    return f"[incident request from <@{user}> in <#{channel}>: investigate this message by {author}]\n{text}"


HOME_TITLE = "opsloop"
HOME_ACTIVE = "*Active runs*"
HOME_NO_ACTIVE = "_No run is going right now._"
HOME_APPROVALS = "*Waiting for your decision*"
HOME_NO_APPROVALS = "_Nothing is waiting for a decision you may make._"
HOME_RECENT = "*Last 10 runs*"
HOME_NO_RECENT = "_No run has finished yet._"
HOME_NOT_CHECKED = (
    "_opsloop couldn't check with Slack which conversations you are in, so it shows no runs and "
    "no approvals. Open the tab again in a minute._"
)


# A link's visible text is a fixed word ("thread", "card"), never the task or a tool name: a task can read like
# a host name, and opsloop never posts a link whose text names another place than its target.
def home_active_run(link: str, task: str, *, status: str, step: int, max_steps: int, cost_usd: float) -> str:
    return f"{escape(task)} (<{link}|thread>) — {status}, step {step}/{max_steps}, ${cost_usd:.2f}"


def home_approval(link: str, tool: str, category: str, task: str) -> str:
    return f"{code(tool)} ({category}, <{link}|card>) for _{escape(task)}_"


def home_recent_run(link: str, task: str, *, stop_reason: str, cost_usd: float, failed_tools: int = 0) -> str:
    """A finished run: how it ended, and whether its answer came after tool calls that failed."""
    after = f" after {failed_tools} failed tool call{'s' if failed_tools != 1 else ''}" if failed_tools else ""
    return f"{escape(task)} (<{link}|thread>) — {code(stop_reason)}{after}, ${cost_usd:.2f}"
