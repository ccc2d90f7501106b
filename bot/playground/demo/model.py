"""A scripted model that plays the web-03 incident, so the demo needs no API key.

It implements the runtime's ModelClient Protocol and decides every step from the
request it receives, the way a real model would: it reads the tool results (and
their errors, denials and superseded approvals) and the thread replies in the
history. So it follows a redirect, copes with a denial, and verifies after a change.
It answers like a current Claude model: reasoning in a thinking block, the final
answer in a text block. Usage is estimated from the request size (about 4
characters a token) with the prompt cache working as it would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.core.types import AnswerSink, ModelRequest, ModelResponse, Usage
from bot.playground.demo.tools import ERROR_LOG, HOSTNAME, NGINX_LOGS

NGINX = "nginx.service"
_REPLY = re.compile(r"\[thread reply from ([^\]]+)\]\s*(.*)", re.S)
_SUPERSEDED = re.compile(r"while (\S+) was waiting for approval, (\S+) replied in the thread: \"(.*?)\"", re.S)
_PERCENT = re.compile(r"^/var\s.*?(\d+)%", re.M)
_APPROVED_BY = re.compile(r"approved by (\S+?)\)")
_THINKING_TOKENS = 120  # a short adaptive think per step
_RUNBOOK = re.compile(r"^\[team runbook ([\w.-]+): '(.*?)', (\d+ steps?)", re.M)
_REQUEST = re.compile(r"\[(incident request from|alert) ")  # how a run's task starts (a mention, an alert)


@dataclass(frozen=True, kw_only=True)
class Call:
    """One tool call the model made earlier in the run, with what came back."""

    id: str
    name: str
    args: dict[str, Any]
    result: str | None = None
    is_error: bool = False

    @property
    def ran(self) -> bool:
        return self.result is not None and not self.is_error


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What the history says so far: the task, the calls and their results, what people said."""

    task: str
    calls: tuple[Call, ...]
    replies: tuple[tuple[str, str], ...]  # (user, text), thread replies and the ones that superseded a card
    tools: frozenset[str]
    runbook: str = ""  # the team's runbook offered in the first turn ("disk-full, 5 steps"), if any

    @classmethod
    def read(cls, request: ModelRequest) -> Facts:
        results: dict[str, dict[str, Any]] = {}  # tool_use_id -> its Call fields result and is_error
        uses: list[dict[str, Any]] = []
        replies: list[tuple[str, str]] = []
        task = runbook = ""
        for message in request.messages[_this_run(request.messages) :]:
            for block in _blocks(message):
                kind = block.get("type")
                if kind == "tool_use":
                    uses.append(block)
                elif kind == "tool_result":
                    text = _result_text(block)
                    results[block["tool_use_id"]] = {"result": text, "is_error": bool(block.get("is_error"))}
                    if m := _SUPERSEDED.search(text):
                        replies.append((m.group(2), m.group(3)))
                elif kind == "text" and message["role"] == "user":
                    if m := _REPLY.match(block["text"]):
                        replies.append((m.group(1), m.group(2)))
                    elif (rb := _RUNBOOK.search(block["text"])) and not runbook:
                        runbook = f"{rb.group(1)}, {rb.group(3)}"
                    elif not task:
                        task = block["text"]
        calls = tuple(
            Call(id=u["id"], name=u["name"], args=u.get("input") or {}, **results.get(u["id"], {})) for u in uses
        )
        return cls(
            task=task,
            calls=calls,
            replies=tuple(replies),
            tools=frozenset(t["name"] for t in request.tools),
            runbook=runbook,
        )

    def tried(self, name: str) -> bool:
        return any(c.name == name for c in self.calls)

    def ran(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name and c.ran]

    def last(self, name: str) -> Call | None:
        return next((c for c in reversed(self.calls) if c.name == name), None)

    def summary_behind(self) -> bool:
        """A call succeeded after the last summary update (the answer would cite what the summary lacks)."""
        last = max((i for i, c in enumerate(self.calls) if c.name == SUMMARY and c.ran), default=-1)
        return any(c.ran and c.name != SUMMARY for c in self.calls[last + 1 :])

    def asked_for_logs(self) -> bool:
        return any("log" in text.lower() for _, text in self.replies)


@dataclass(frozen=True, kw_only=True)
class Step:
    """What the model says next: its thinking, then tool calls, or (no calls) the final answer."""

    thinking: str
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    answer: str = ""


INCIDENT_TOOLS = frozenset({"check_disk", "list_big_files", "service_status", "tail_log", "clean_logs"})


def next_step(f: Facts) -> Step:
    """The incident playbook: look, get told, look at what was asked, change with approval, verify, report."""
    host = {"host": HOSTNAME}
    if not f.tried("check_disk"):
        follow = (
            f" The team's runbook ({f.runbook}) fits; its step 1 is the same, I check each step as I go."
            if f.runbook
            else ""
        )
        return Step(thinking=f"The page says disk. Check web-03's mounts first.{follow}", calls=(("check_disk", host),))
    if not f.tried("list_big_files"):
        return Step(
            thinking="/var is nearly full. Find what fills it, and see how nginx is doing meanwhile.",
            calls=(
                ("list_big_files", {**host, "path": "/var"}),
                ("service_status", {**host, "unit": NGINX}),
                first_summary(f),
            ),
        )
    if f.asked_for_logs() and not f.tried("tail_log"):
        who = f.replies[-1][0]
        return Step(
            thinking=f"{who} asked to see the logs first. Doing that before any change.",
            calls=(("tail_log", {**host, "path": ERROR_LOG, "lines": 8}),),
        )
    if not f.tried("restart_service") and not f.tried("tail_log"):
        return Step(
            thinking="nginx is failing writes with 'No space left on device'. Restarting it makes it reopen "
            "its log files; asking for approval.",
            calls=(("restart_service", {**host, "unit": NGINX}),),
        )
    if not f.tried("clean_logs"):
        return Step(
            thinking="The errors are all ENOSPC: nginx itself is fine, the disk is not. 212 rotated nginx "
            "logs older than 7 days hold 28 GB. Deleting them frees /var; that is destructive, so it needs "
            "approval.",
            calls=(("clean_logs", {**host, "path": NGINX_LOGS, "older_than_days": 7}),),
        )
    if f.ran("clean_logs") and len(f.ran("check_disk")) < 2:
        return Step(thinking="Logs deleted. Verify the disk.", calls=(("check_disk", host), found_summary(f)))
    if f.summary_behind():
        return Step(thinking="Bring the summary up to date before answering.", calls=(found_summary(f),))
    return Step(thinking="Done: summarise for the on-call engineer.", answer=final_answer(f))


# The living summary (update_summary), kept current on turns that also call read-only tools. Evidence is each
# call's handle (its result's first line) with a line quoted from its result, as a real model would copy it.
SUMMARY = "update_summary"
_QUOTE_MAX = 120


def _cite(call: Call | None, *words: str) -> list[dict[str, str]]:
    """The call's handle and the first line of its result holding all `words` (any line when none do)."""
    if call is None or not call.ran or not call.result or not call.result.startswith("#"):
        return []
    handle, _, body = call.result.partition("\n")
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    line = next((x for x in lines if all(w in x for w in words)), lines[0] if lines else "")
    return [{"handle": handle.split()[0], "quote": line[:_QUOTE_MAX].strip()}] if len(line) >= 4 else []


def _hypothesis(id: str, statement: str, status: str, confidence: str, evidence: list[Any]) -> dict[str, Any]:
    return {"id": id, "statement": statement, "status": status, "confidence": confidence, "evidence": evidence}


NGINX_BROKEN = "nginx itself is broken, not just out of disk"


def first_summary(f: Facts) -> tuple[str, dict[str, Any]]:
    """After the first look: the disk is full, the cause not known yet."""
    disk = f.last("check_disk")
    full = m.group(1) if disk and disk.result and (m := _PERCENT.search(disk.result)) else "nearly 100"
    return SUMMARY, {
        "situation": f"{HOSTNAME} /var is at {full}%; nginx may be failing to write its logs.",
        "hypotheses": [
            _hypothesis("logs", "old nginx logs fill /var", "open", "medium", _cite(disk, "/var")),
            _hypothesis("nginx", NGINX_BROKEN, "open", "low", []),
        ],
        "next_steps": ["find what fills /var", "check nginx's state"],
    }


def found_summary(f: Facts) -> tuple[str, dict[str, Any]]:
    """What the run found: the cause confirmed by what ran, nginx ruled out when its state or log was read."""
    tail, status = f.last("tail_log"), f.last("service_status")
    looked = _cite(tail, "No space left") + _cite(status, "active")
    logs = "212 rotated nginx logs (28 GB) that logrotate never deletes fill /var"
    cleaned = bool(f.ran("clean_logs"))
    backing = _cite(f.last("list_big_files")) + _cite(f.last("clean_logs"))
    return SUMMARY, {
        "situation": f"{HOSTNAME} /var filled up with rotated nginx logs; "
        + ("the old ones are deleted." if cleaned else "nothing was deleted."),
        "hypotheses": [
            _hypothesis("logs", logs, *(("confirmed", "high") if backing else ("supported", "medium")), backing),
            _hypothesis("nginx", NGINX_BROKEN, *(("refuted", "high") if looked else ("open", "low")), looked),
        ],
        "next_steps": ["verify /var has room again", "add maxage 14 to /etc/logrotate.d/nginx"],
    }


def final_answer(f: Facts) -> str:
    """The summary a person reads at the end, built from what actually happened."""
    disks = [int(m.group(1)) for c in f.ran("check_disk") if c.result and (m := _PERCENT.search(c.result))]
    before, after = (disks[0], disks[-1]) if disks else (None, None)
    clean, restart = f.last("clean_logs"), f.last("restart_service")
    lines = []
    if clean is not None and clean.ran:
        who = m.group(1) if clean.result and (m := _APPROVED_BY.search(clean.result)) else "an approver"
        lines.append(f"**web-03: /var is back to {after}%** (was {before}%).")
        lines.append(
            f"- **Cause:** 212 rotated nginx logs (28 GB) in `{NGINX_LOGS}`: logrotate compresses them "
            "but never deletes them."
        )
        lines.append(f"- **Changed:** deleted the rotated logs older than 7 days with `clean_logs`, approved by {who}.")
    else:
        lines.append(f"**web-03: /var is still {before}% full.** I did not delete anything.")
        why = (clean.result or "").split(".")[0] if clean is not None else "no approval"
        lines.append(f"- **Not done:** `clean_logs` on `{NGINX_LOGS}`: {why}.")
        lines.append("- **Cause:** 212 rotated nginx logs (28 GB) that logrotate never deletes.")
    if restart is not None and restart.ran:
        lines.append("- **nginx:** restarted (approved); it is running.")
    elif any("restart" in text.lower() for _, text in f.replies):
        lines.append(
            "- **nginx:** not restarted, as asked in the thread; its error log shows only "
            "'No space left on device' write failures, which stop once /var has room."
        )
    others = [(u, t) for u, t in f.replies if "log" not in t.lower()]
    lines += [f"- **Noted from {u}:** {t}" for u, t in others]
    lines.append("- **Still open:** add `maxage 14` to `/etc/logrotate.d/nginx` so this does not come back.")
    return "\n".join(lines)


_KV = re.compile(r"""(\w+)=("[^"]*"|'[^']*'|\S+)""")


def parse_command(text: str, tools: frozenset[str]) -> tuple[str, dict[str, Any]] | None:
    """`tool key=value …` or `tool {json}` anywhere in a message: a call the person asked for by name."""
    for word in re.finditer(r"[A-Za-z0-9_-]+", text):
        if word.group(0) not in tools:
            continue
        rest = text[word.end() :].strip()
        if rest.startswith("{"):
            try:
                args = json.loads(rest[: rest.rindex("}") + 1])
            except ValueError:
                args = None
            if isinstance(args, dict):
                return word.group(0), args
        return word.group(0), {k: _value(v) for k, v in _KV.findall(rest)}
    return None


def _value(raw: str) -> Any:
    if raw[:1] in "\"'" and raw[-1:] == raw[:1]:
        return raw[1:-1]
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def direct_calls(f: Facts) -> Step:
    """Call exactly the tools people name (`check_queue name=orders`), then report what came back."""
    asked = [cmd for text in (f.task, *(t for _, t in f.replies)) if (cmd := parse_command(text, f.tools))]
    if len(f.calls) < len(asked):
        name, args = asked[len(f.calls)]
        return Step(thinking=f"Asked to call {name}.", calls=((name, args),))
    if not asked:
        return Step(thinking="No tool named.", answer=what_i_do(f.tools))
    lines = [f"Called {len(f.calls)} tool(s) as asked (scripted model, no Claude):"]
    for c in f.calls:
        outcome = "error" if c.is_error else "ok"
        lines.append(f"- `{c.name}` {json.dumps(c.args)}: {outcome}\n```\n{(c.result or '')[:1500]}\n```")
    return Step(thinking="Report the results.", answer="\n".join(lines))


def what_i_do(tools: frozenset[str]) -> str:
    """The scripted model's one-line note on what it can do, for a task it has no script for."""
    incident = (
        f"I play the demo's {HOSTNAME} disk incident when you ask about {HOSTNAME} "
        f"(`@opsloop {HOSTNAME} is out of disk`), and "
        if INCIDENT_TOOLS <= tools
        else "I "
    )
    names = ", ".join(f"`{t}`" for t in sorted(tools)) or "none"
    return (
        "I am the scripted model (no `ANTHROPIC_API_KEY`, so no Claude) and answer nothing else: "
        f"{incident}call a tool you name with its arguments through opsloop's approval flow "
        f"(`@opsloop check_disk host={HOSTNAME}`). Your tools: {names}."
    )


def _this_run(messages: list[dict[str, Any]]) -> int:
    """Where this run's turns start: at the last task (a thread's later run carries the earlier runs' turns,
    which this model must not take for its own)."""
    starts = [
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and any(_REQUEST.match(str(b.get("text", ""))) for b in _blocks(m))
    ]
    return starts[-1] if starts else 0


def play_for(f: Facts) -> Step:
    """Named tool calls when asked for them, else the web-03 incident when its tools are loaded and the task is
    about web-03; anything else gets the note on what this model can do."""
    if parse_command(f.task, f.tools) or not INCIDENT_TOOLS <= f.tools or HOSTNAME not in f.task.lower():
        return direct_calls(f)
    return next_step(f)


@dataclass
class IncidentModel:
    """ModelClient: plays the web-03 incident from whatever the request shows (see `next_step`)."""

    name: str = "claude-sonnet-5-5"
    requests: list[ModelRequest] = field(default_factory=list)
    playbook: Callable[[Facts], Step] = field(default=play_for)

    @property
    def model(self) -> str:
        return self.name

    async def complete(self, request: ModelRequest, *, sink: AnswerSink | None = None) -> ModelResponse:
        """`sink` is not fed: the demo's transcript prints each answer once, as posted."""
        facts = Facts.read(request)
        step = self.playbook(facts)
        content: list[dict[str, Any]] = [{"type": "thinking", "thinking": step.thinking, "signature": "scripted"}]
        turn = len(request.messages)  # from the request, not this client: a run is driven by a new client per drive
        content += [
            {"type": "tool_use", "id": f"toolu_demo_{turn:02d}_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(step.calls)
            if name in facts.tools
        ]
        if len(content) == 1:
            content.append({"type": "text", "text": step.answer or direct_calls(facts).answer})
        usage = estimate_usage(request, content, previous=self.requests[-1] if self.requests else None)
        self.requests.append(request)
        stop = "tool_use" if len(content) > 1 and content[-1]["type"] == "tool_use" else "end_turn"
        return ModelResponse(content=content, stop_reason=stop, usage=usage, model=self.name)


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def estimate_usage(request: ModelRequest, content: list[dict[str, Any]], *, previous: ModelRequest | None) -> Usage:
    """Tokens as the API would count them with cache breakpoints on the system prompt and the newest message."""
    prompt = _tokens(request.system) + _tokens(request.tools) + _tokens(request.messages)
    cached = 0
    if previous is not None:
        cached = _tokens(previous.system) + _tokens(previous.tools) + _tokens(previous.messages)
    written = prompt - cached
    return Usage(
        input_tokens=min(written, 40),
        cache_write_tokens=max(0, written - 40),
        cache_read_tokens=cached,
        output_tokens=_tokens(content) + _THINKING_TOKENS,
    )


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")
