"""The incident thread printed as it unfolds, from the Slack stand-in's state.

Every change in the stand-in calls `Transcript.update`, which prints what is new:
messages, edits that matter (a card decided, the status line's step or activity —
not every token count), reactions and ephemeral notes. Plain text; ANSI colour when
asked (stdout is a terminal).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partialmethod
from typing import TextIO

from bot.playground.standin.render import Kind, MessageView, PartKind, view
from bot.playground.standin.slack import FakeSlack

_COUNTS = re.compile(r"\s*·\s*[\d,]+ tokens\s*·\s*\$[\d.,]+\s*$")


@dataclass(frozen=True)
class Style:
    """ANSI styling, or none."""

    color: bool = False

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    bold = partialmethod(_wrap, "1")
    dim = partialmethod(_wrap, "2")
    person = partialmethod(_wrap, "1;36")
    bot = partialmethod(_wrap, "1;35")

    def state(self, state: str, text: str) -> str:
        code = {"pending": "1;33", "approved": "1;32", "denied": "1;31", "superseded": "1;34", "expired": "1;31"}.get(
            state, "1"
        )
        return self._wrap(code, text)


class Transcript:
    """Prints one channel's thread(s) from the stand-in, deduplicating status updates."""

    def __init__(
        self, slack: FakeSlack, channel: str, names: Mapping[str, str], out: TextIO, style: Style | None = None
    ) -> None:
        self.slack, self.channel, self.names, self.out = slack, channel, names, out
        self.style = style or Style()
        self._shown: dict[str, MessageView] = {}
        self._status_key: dict[str, str] = {}
        self._reactions = 0
        self._ephemerals = 0

    # ---- printing ---------------------------------------------------------------------

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    def narrate(self, line: str) -> None:
        """A line that is not in Slack: what a person does (a click), or what the demo is doing."""
        self.say(self.style.dim(f"  ▸ {line}"))

    def update(self) -> None:
        """Print whatever changed since the last call (the stand-in calls this on every change)."""
        for msg in list(self.slack.messages.get(self.channel, [])):
            now = view(msg, names=self.names, bot_user_id=self.slack.bot_user_id)
            before = self._shown.get(msg.ts)
            self._shown[msg.ts] = now
            if before is None:
                self._print_new(now)
            elif before.parts != now.parts:
                self._print_edit(before, now)
        self._print_reactions()
        self._print_ephemerals()

    def _indent(self, view_: MessageView) -> str:
        return "  │ " if view_.thread_ts and view_.thread_ts != view_.ts else ""

    def _print_new(self, v: MessageView) -> None:
        pad, s = self._indent(v), self.style
        if v.kind == Kind.STATUS:
            self._status_key[v.ts] = _status_key(v)
            self.say(f"{pad}{s.bot('opsloop')} {s.dim('(status)')} {v.parts[0].text}")
        elif v.kind == Kind.CARD:
            self.say(f"{pad}{s.bot('opsloop')}:")
            self._print_card(v, pad)
        elif v.kind == Kind.PERSON:
            first, *rest = v.text().splitlines() or [""]
            self.say(f"{pad}{s.person(v.author)}: {first}")
            for line in rest:
                self.say(f"{pad}    {line}")
        else:
            self.say(f"{pad}{s.bot('opsloop')}:")
            self._print_parts(v, pad + "    ")

    def _print_edit(self, before: MessageView, now: MessageView) -> None:
        pad, s = self._indent(now), self.style
        if now.kind == Kind.STATUS:
            key = _status_key(now)
            if _is_filler(key) and now.state != "finished":
                return
            if key != self._status_key.get(now.ts) or now.state == "finished":
                self._status_key[now.ts] = key
                self.say(f"{pad}    {s.dim('status →')} {now.parts[0].text}")
        elif now.kind == Kind.CARD and now.state != before.state:
            decision = next((p.text for p in now.parts if p.kind == PartKind.CONTEXT), now.state)
            header = next((p.text for p in now.parts if p.kind == PartKind.HEADER), "")
            self.say(f"{pad}    {s.dim('card →')} {s.state(now.state, header)} · {decision}")
        elif now.kind not in (Kind.STATUS, Kind.CARD):
            self.say(f"{pad}    {s.dim('(edited)')} {now.text()[:200]}")

    def _print_card(self, v: MessageView, pad: str) -> None:
        s = self.style
        bar = pad + "    ┃ "
        for part in v.parts:
            if part.kind == PartKind.HEADER:
                self.say(bar + s.state(v.state, part.text))
            elif part.kind == PartKind.CODE:
                for line in part.text.splitlines():
                    self.say(bar + "    " + line)
            elif part.kind == PartKind.BUTTONS:
                self.say(bar + "  ".join(s.bold(f"[ {b.text} ]") for b in part.buttons))
            else:
                for line in part.text.splitlines():
                    self.say(bar + line)

    def _print_parts(self, v: MessageView, pad: str) -> None:
        for part in v.parts:
            if part.kind == PartKind.BUTTONS:
                continue
            for line in part.text.splitlines() or [""]:
                if part.kind == PartKind.CODE:
                    self.say(pad + "    " + line)
                else:
                    for wrapped in textwrap.wrap(line, 100, subsequent_indent="  ") or [""]:
                        self.say(pad + (self.style.bold(wrapped) if part.kind == PartKind.HEADER else wrapped))

    def _print_reactions(self) -> None:
        for channel, ts, name in self.slack.reactions[self._reactions :]:
            self._reactions += 1
            if channel != self.channel:
                continue
            msg = self._shown.get(ts)
            whose = f"{msg.author}'s message" if msg else "a message"
            pad = self._indent(msg) if msg else ""
            note = f":{name}: opsloop reacted to {whose} (stored; the agent will see it)"
            self.say(f"{pad}    {self.style.dim(note)}")

    def _print_ephemerals(self) -> None:
        for e in self.slack.ephemerals[self._ephemerals :]:
            self._ephemerals += 1
            who = self.names.get(e["user"], e["user"])
            self.say(f"  │     {self.style.dim(f'(only @{who} sees) ')}{e['text']}")


def _is_filler(key: str) -> bool:
    """'Step 2/20 · thinking' with nothing said yet (the next update says more), or what a card already says."""
    key = key.rstrip()
    return key.endswith(("· thinking", "· starting")) or "· waiting for approval of " in key  # the card says it


def _status_key(v: MessageView) -> str:
    """The status line without its running token and cost counts: a change worth printing."""
    return _COUNTS.sub("", v.parts[0].text if v.parts else "")
