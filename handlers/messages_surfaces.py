"""The texts of Slack's agent surfaces: the loading status, feedback, the task list, the message shortcut,
App Home. Part of `handlers.messages` (which re-exports every name here): one voice, split by concern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from handlers.messages_format import _GROUP_ID, _USER_ID, code, escape

# ---------------------------------------------------------------------------
# Slack's agent surfaces: the loading status, feedback, the message shortcut, App Home
# ---------------------------------------------------------------------------

FEEDBACK_POSITIVE = "Helpful"
FEEDBACK_NEGATIVE = "Not helpful"
FEEDBACK_PROMPT = "Did this help?"
FEEDBACK_THANKS = "Thanks: your feedback on this run is recorded."

LOADING_THINKING = "thinking…"
LOADING_STARTING = "starting…"
# The rotating lines Slack shows under the thread while a status is set (at most 10).
LOADING_MESSAGES = ("Reading the evidence…", "Checking what changed…", "Thinking it through…")


def loading_tool(tool: str, args: dict[str, object]) -> str:
    """What the status under the thread says while a tool runs: "reading /var/log/nginx on web-03…"."""
    verbs = {
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
    head, _, rest = tool.partition("_")
    verb = verbs.get(head, f"running {tool}")
    what = next(
        (
            str(args[k])
            for k in ("path", "unit", "service", "url", "pod", "deployment", "query", "name", "pattern")
            if isinstance(args.get(k), str | int) and str(args[k])
        ),
        "",
    )
    where = next(
        (str(args[k]) for k in ("host", "cluster", "namespace") if isinstance(args.get(k), str) and args[k]), ""
    )
    if verb == f"running {tool}":
        words = verb + (f" on {where}" if where else "")
    else:
        target = what or rest.replace("_", " ")
        words = f"{verb} {target}".strip() + (f" on {where}" if where else "")
    return _one_line_status(words) + "…"


def loading_approval(approvers: tuple[str, ...], names: Mapping[str, str]) -> str:
    """ "waiting for approval from @carol, @oncall": plain text (the loading status renders no mentions), so people
    by display name and user groups by handle, from `names` (id -> name; an id Slack couldn't name stays an id);
    nobody named: anyone in the channel."""
    if not approvers:
        return "waiting for approval from anyone in the channel"
    shown = [f"@{names.get(a) or a}" if _USER_ID.match(a) or _GROUP_ID.match(a) else a for a in approvers]
    return _one_line_status("waiting for approval from " + ", ".join(shown[:5]) + (" …" if len(shown) > 5 else ""))


def _one_line_status(text: str, limit: int = 120) -> str:
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
    what = next(
        (
            str(args[k])
            for k in ("path", "unit", "service", "deployment", "name", "pattern")
            if isinstance(args.get(k), str | int) and str(args[k])
        ),
        "",
    )
    url = args.get("url")
    if not what and isinstance(url, str) and url:
        what = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", url).split("/", 1)[0].rsplit("@", 1)[-1]
    pod, namespace = args.get("pod"), args.get("namespace")
    if not what and isinstance(pod, str) and pod:
        what = f"{pod}/{namespace}" if isinstance(namespace, str) and namespace else pod
        namespace = None
    where = next((str(v) for v in (args.get("host"), args.get("cluster"), namespace) if isinstance(v, str) and v), "")
    return " ".join(w for w in (tool, what, f"on {where}" if where else "") if w)


def task_approval_title(tool: str) -> str:
    return f"Approval for {tool}"


def task_waiting(approvers: tuple[str, ...], names: Mapping[str, str]) -> str:
    """An approval task's output while it waits: "waiting for approval from <@U0CAROL>, @oncall". The output is
    rich text: a person is a user element (a mention Slack renders, in an edit that notifies nobody); a user group
    has no such element that stays silent, so it is its handle as text (`names`: id -> handle)."""
    if not approvers:
        return "waiting for approval from anyone in the channel"
    shown = [
        f"<@{a}>" if _USER_ID.match(a) else f"@{names.get(a) or a}" if _GROUP_ID.match(a) else a for a in approvers
    ]
    return _one_line_status("waiting for approval from " + ", ".join(shown[:5]) + (" …" if len(shown) > 5 else ""))


def task_decided(*, approved: bool, outcome: str, by: str | None) -> str:
    """An approval task's output once decided: "approved by <@U0CAROL>", "denied by …", "expired"."""
    who = (f"<@{by}>" if _USER_ID.match(by) else by) if by else None
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
