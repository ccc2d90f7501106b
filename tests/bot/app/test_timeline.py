"""`opsloop show RUN_ID --html FILE`: the postmortem timeline of a real run, from the real CLI.

The store comes from a whole incident played through the real app against the fakes:
a mention, a thread reply mid-run, a tool whose output holds secrets, an approval.
"""

from __future__ import annotations

from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bot.app.cli import main
from bot.store import Ledger
from tests.support import incident_tools
from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import ALICE, BOB, answered, bot_env
from tools import Category, tool

SLACK_SECRET = "xoxb-2222222222-PLANTEDSLACKTOKEN"
ANTHROPIC_SECRET = "sk-ant-api03-PLANTEDANTHROPICKEY0123"
AWS_SECRET = "AKIAPLANTEDKEY000042"
BEARER_SECRET = "eyJplantedbearertoken0123456789"
SECRETS = (SLACK_SECRET, ANTHROPIC_SECRET, AWS_SECRET, BEARER_SECRET)
CLEAN = {"host": "web-03", "path": "/var/log/nginx", "older_than_days": 7}
FINAL = "Freed 19.8 GB on web-03. The app's environment holds an Anthropic key"


@tool(category=Category.READ_ONLY)
async def dump_env(host: str, grep: str = "") -> str:
    """The environment of the app on a host (this test's tool: its output holds secrets).

    Args:
        host: the host name
        grep: only lines containing this
    """
    lines = [f"SETTING_{i:02d}=an ordinary value of some length" for i in range(40)]
    return "\n".join([*lines, f"ANTHROPIC_API_KEY={ANTHROPIC_SECRET}", f"AWS_ACCESS_KEY_ID={AWS_SECRET}", "END_OF_ENV"])


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictPage(HTMLParser):
    """Fails on any end tag that does not close the innermost open element; collects what a reader sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.tags: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.text: list[str] = []
        self.collapsed: list[str] = []  # text inside <details>
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag == "tr":
            for cls in (dict(attrs).get("class") or "").split():
                self.rows[cls.removeprefix("row-")] += 1
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if "details" in self.open:
            self.collapsed.append(data)

    @classmethod
    def of(cls, page: str) -> StrictPage:
        parser = cls()
        parser.feed(page)
        parser.close()
        assert parser.open == [], f"never closed: {parser.open}"
        return parser

    @property
    def seen(self) -> str:
        return "".join(self.text)


@pytest.fixture
async def incident(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A whole incident in a store: returns the run row and its `db`; OPSLOOP_DB points the CLI at it."""
    fake_anthropic.script(
        reply(text("Checking disk usage on web-03."), tool_use("check_disk", {"host": "web-03"})),
        reply(tool_use("dump_env", {"host": "web-03", "grep": AWS_SECRET})),
        reply(text("212 rotated nginx logs fill /var."), tool_use("clean_logs", CLEAN)),
        *answered(reply(text(f"{FINAL} ({ANTHROPIC_SECRET}): rotate it."))),
    )
    config = '[tools]\nmodules = ["tests.support.incident_tools", "tests.bot.app.test_timeline"]'
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config) as env:
        gate = incident_tools.hold("check_disk")
        channel, ts = await env.mention(f"web-03 disk full, and {SLACK_SECRET} is in a log line")
        await gate.wait_entered()
        said = await env.reply(
            channel, ts, f"careful: the proxy wants Authorization: Bearer {BEARER_SECRET}", user=ALICE
        )
        await env.wait_reaction(channel, said)
        gate.release()
        await env.approve(await env.card(channel, ts), BOB)
        await env.wait_final(channel, ts)
        (run,) = env.runs()
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "OPSLOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPSLOOP_DB", env.settings.db_path)
    return {"id": run.id, "cost_usd": run.cost_usd, "model": run.model, "db": env.settings.db_path}


def show_html(run_id: str, path: Path) -> str:
    assert main(["show", run_id, "--html", str(path)]) == 0
    return path.read_text(encoding="utf-8")


def test_the_page_is_valid_self_contained_html(incident, tmp_path):
    page = StrictPage.of(show_html(incident["id"], tmp_path / "timeline.html"))
    assert page.doctype.lower() == "doctype html"
    assert page.tags["html"] == page.tags["head"] == page.tags["body"] == page.tags["style"] == 1
    assert page.tags["script"] == page.tags["link"] == page.tags["img"] == page.tags["iframe"] == 0


def test_every_step_of_the_trace_has_a_row(incident, tmp_path):
    page = StrictPage.of(show_html(incident["id"], tmp_path / "timeline.html"))
    ledger = Ledger(incident["db"])
    try:
        steps = Counter(s.kind for s in ledger.steps(incident["id"]))
    finally:
        ledger.close()
    assert {"request", "response", "tool", "decision", "inject", "stop"} <= steps.keys()
    assert {kind: page.rows[kind] for kind in steps} == dict(steps)
    assert (page.rows["mention"], page.rows["reply"], page.rows["approval"]) == (1, 1, 1)


def test_no_secret_reaches_the_page(incident, tmp_path):
    page = show_html(incident["id"], tmp_path / "timeline.html")
    assert [s for s in SECRETS if s in page] == []
    seen = StrictPage.of(page).seen
    assert "ANTHROPIC_API_KEY=[REDACTED]" in seen and FINAL in seen  # redacted, not dropped


def test_the_page_tells_who_did_what_and_when(incident, tmp_path):
    page = show_html(incident["id"], tmp_path / "timeline.html")
    parsed = StrictPage.of(page)
    seen = parsed.seen
    assert "web-03 disk full, and [REDACTED] is in a log line" in seen  # the mention, by alice
    assert "careful: the proxy wants Authorization:" in seen and "seen by the model" in seen  # alice's reply
    assert f"approved by bob ({BOB}) at" in seen  # who approved, by display name, and when
    assert '"path": "/var/log/nginx"' in seen  # the call's arguments
    assert "END_OF_ENV" in "".join(parsed.collapsed)  # a long output whole, not the trace's 500 chars, collapsed
    assert "#2 dump_env web-03\nSETTING_00=" in "".join(parsed.collapsed)  # with its handle, as the model read it
    assert "completed — finished the task and gave an answer" in seen
    assert f"${incident['cost_usd']:.4f}" in seen
    assert incident["model"] in seen
    assert '<time datetime="' in page and "Z</time>" in page  # UTC ISO timestamps


def test_show_html_dash_writes_the_page_to_stdout(incident, capsys):
    assert main(["show", incident["id"], "--html", "-"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")


def test_show_html_of_an_unknown_run_is_one_clear_line(incident, tmp_path, capsys):
    assert main(["show", "run_nope", "--html", str(tmp_path / "x.html")]) == 2
    assert capsys.readouterr().err.strip().startswith("opsloop: no run 'run_nope'")
    assert not (tmp_path / "x.html").exists()
