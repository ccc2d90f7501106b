"""Docs are a tested contract: the manifest matches the listeners; every link in README.md and docs/*.md resolves;
every tool, config key and command is documented on exactly one page.

"Documented" means, concretely:
- a tool: a row of a Markdown table whose first column is headed `tool`, its first cell the name in backticks;
- a config key: a row of a table whose first column is headed `key`, under the nearest heading that names the
  key's table in backticks (`[alerts.webhook]`, `[[hosts]]`, `[tools.commands.params.<name>]`);
- a command: a heading `opsloop NAME` (in backticks), with a row per flag in a table headed `flag` in its section.
Mentions anywhere else (prose, examples, links) are free."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import yaml

from bot.app.cli import parser
from handlers import blocks
from handlers.listeners import ACTIONS, EVENTS, SHORTCUTS

ROOT = Path(__file__).resolve().parents[1]


def manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def test_every_manifest_event_has_a_listener_and_back():
    subscribed = {e.split(".")[0] for e in manifest()["settings"]["event_subscriptions"]["bot_events"]}
    assert subscribed == set(EVENTS)


def test_manifest_is_socket_mode_with_interactivity():
    settings = manifest()["settings"]
    assert (settings["socket_mode_enabled"], settings["interactivity"]["is_enabled"]) == (True, True)


def test_every_action_id_the_blocks_use_has_a_listener():
    assert set(ACTIONS) == {blocks.APPROVE, blocks.DENY, blocks.STOP, blocks.FEEDBACK}


def test_every_manifest_shortcut_has_a_listener_and_back():
    shortcuts = manifest()["features"]["shortcuts"]
    assert {s["callback_id"] for s in shortcuts} == set(SHORTCUTS)
    assert {s["type"] for s in shortcuts} == {"message"}


def test_manifest_has_the_home_tab():
    assert manifest()["features"]["app_home"]["home_tab_enabled"] is True


def test_scopes_cover_the_methods_we_call():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    assert scopes == {
        "app_mentions:read",
        "channels:history",
        "groups:history",
        "chat:write",
        "reactions:write",
        "users:read",
        "usergroups:read",
        "commands",
        # conversations.info (`opsloop check`, the shortcut), users.conversations (App Home)
        "channels:read",
        "groups:read",
        "im:read",
        "mpim:read",
    }


# --- the pages, read as GitHub renders them -------------------------------------------------------------------------

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI_PAGE = "docs/cli.md"
# Each reach's tools are documented on its page; a new reach adds its line here (and its page).
REACH_PAGES = {
    "kubernetes": "docs/kubernetes.md",
    "changes": "docs/context.md",
    "memory": "docs/context.md",
    "runbooks": "docs/context.md",
    "pagerduty": "docs/pagerduty.md",
}
FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")  # a code span: a run of backticks, closed by a run as long
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
CONFIG_TABLE = re.compile(r"\[\[?[A-Za-z0-9_.<>-]+\]\]?")  # `[alerts.webhook]`, `[[hosts]]`


def name_of(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def spans(text: str) -> list[str]:
    return [m.group(2).strip() for m in SPAN.finditer(text)]


def rendered(text: str) -> str:
    """A heading's text as GitHub shows it: code spans without backticks, links as their text, no emphasis."""
    text = SPAN.sub(lambda m: m.group(2).strip(), text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("**", "").strip()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `-`, `_` stay), spaces to
    hyphens one for one."""
    return "".join("-" if c == " " else c for c in rendered(heading).lower() if c.isalnum() or c in "-_ ")


def headings(page: Path) -> list[tuple[int, str]]:
    return [(len(m.group(1)), m.group(2)) for line in prose(page) if (m := HEADING.match(line))]


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for _, text in headings(page):
        base = slug(text)
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def tables(page: Path) -> list[tuple[str, str, list[list[str]]]]:
    """Each Markdown table as (the nearest heading above it, its first column's header, its rows' cells)."""
    found: list[tuple[str, str, list[list[str]]]] = []
    heading, rows = "", None
    for line in [*prose(page), ""]:
        if line.lstrip().startswith("|"):
            if rows is None:
                rows = []
                found.append((heading, cells(line)[0], rows))
            elif not re.fullmatch(r"[\s|:-]+", line):
                rows.append(cells(line))
            continue
        rows = None
        if m := HEADING.match(line):
            heading = m.group(2)
    return found


def first_span(cell: str) -> str | None:
    """The cell's code span when the cell starts with one (`--db DB`, `check_disk`)."""
    m = SPAN.match(cell)
    return m.group(2).strip() if m else None


def rows_under(column: str) -> list[tuple[str, str, list[str]]]:
    """(page, heading, cells) of every row of every table whose first column is headed `column`."""
    return [
        (name_of(page), heading, row)
        for page in PAGES
        for heading, header, rows in tables(page)
        if header == column
        for row in rows
    ]


# --- links ------------------------------------------------------------------------------------------------------


def test_slugs_follow_githubs_rules():
    assert slug("Slack's agent surfaces, and what each needs in the workspace") == (
        "slacks-agent-surfaces-and-what-each-needs-in-the-workspace"
    )
    assert slug("`check_url` reaches public addresses only") == "check_url-reaches-public-addresses-only"
    assert slug("`[tools.commands.params.<name>]`") == "toolscommandsparamsname"
    assert slug("Durability: nothing lost, nothing done twice") == "durability-nothing-lost-nothing-done-twice"


def test_every_relative_link_and_anchor_resolves():
    broken, checked = [], 0
    for page in PAGES:
        for line in prose(page):
            for target in LINK.findall(SPAN.sub("", line)):
                if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
                    continue  # https:, mailto:
                checked += 1
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists():
                    broken.append(f"{name_of(page)}: {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{name_of(page)}: {target}: no heading with that anchor")
    assert broken == []
    assert checked > 50  # the links were found at all


def test_the_index_links_every_page():
    index = (ROOT / "docs" / "index.md").read_text()
    assert [p.name for p in PAGES[1:] if p.name != "index.md" and f"]({p.name})" not in index] == []


def test_the_readme_starts_a_newcomer_on_the_demo_in_twenty_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    assert any(line.startswith("make demo") for line in lines[:20])


# --- tools ------------------------------------------------------------------------------------------------------


def registered_tools() -> dict[str, str]:
    """Every tool opsloop registers, to the page that documents it: the built-ins, each reach's, the living
    summary's (the runtime's own) and the demo's own (its tools not named like a built-in)."""
    import tools.builtin
    from bot.playground.demo import tools as demo
    from bot.run.summary import TOOL_NAME
    from tools.config import module_tools
    from tools.reaches import REACHES

    where = {t.name: "docs/tools.md" for t in module_tools(tools.builtin)}
    for reach in REACHES:
        for module in reach.modules:
            assert reach.name in REACH_PAGES, f"reach {reach.name!r}: add its page to REACH_PAGES"
            where.update({t.name: REACH_PAGES[reach.name] for t in module_tools(importlib.import_module(module))})
    where[TOOL_NAME] = "docs/context.md"
    where.update({t.name: "docs/tools.md" for t in module_tools(demo) if t.name not in where})
    return where


def test_every_tool_is_documented_once_on_its_page():
    documented: dict[str, list[str]] = {}
    for page, _, row in rows_under("tool"):
        documented.setdefault(first_span(row[0]) or row[0], []).append(page)
    expected = registered_tools()
    assert {name: documented.get(name) for name in expected} == {name: [page] for name, page in expected.items()}
    assert sorted(set(documented) - set(expected)) == []  # no row for a tool that is gone


def test_the_hosts_page_says_list_top_processes_groups_by_unit_the_same_everywhere():
    text = (ROOT / "docs" / "hosts.md").read_text()
    same = " ".join(text.split("**The same everywhere.**", 1)[1].split("\n\n", 1)[0].split())
    assert 'with `group_by="unit"` gives one row per systemd unit' in same


def test_the_demos_own_tool_says_so():
    rows = [row for _, _, row in rows_under("tool") if first_span(row[0]) == "list_big_files"]
    assert [("the demo's own" in row[-1]) for row in rows] == [True]


async def test_the_tool_example_runs():
    text = (ROOT / "docs" / "tools.md").read_text()
    code = re.search(r"### Writing your own\n\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(code, namespace)
    purge = namespace["purge_queue"]
    assert (purge.category.value, purge.has_dry_run) == ("destructive", True)
    assert "confirmed_by" not in str(purge.api_schema())
    assert await purge.dry_run({"name": "jobs"}) == "would drop 18,204 messages"
    from tools import PermissionDenied

    with pytest.raises(PermissionDenied, match="never purged"):
        await purge.check({"name": "payments-eu"})


# --- config keys ------------------------------------------------------------------------------------------------
#
# The readers say which keys they know: an unknown key in any table is a problem listing the known ones
# ("hosts[0].zz_probe: unknown key (known: name, address, ...)"). So the example config with every commented
# table switched on, and an unknown key added to every table, makes the readers list every key they read, table
# by table; nothing here names a key. A table whose readers list none takes free-form names (a model's price, a
# tool's timeout): its entries are written `<name>`.

PROBE = "zz_probe"
KNOWN = re.compile(rf"^(?:(.*)\.)?{PROBE}: unknown (?:key|section) \(known: (.*)\)$")


def probed_example(tmp: Path) -> str:
    from tests.test_example_config import EXAMPLE, uncommented

    kubeconfig = tmp / "kubeconfig"  # the reaches read their sections at load time: the kubeconfig must be one
    kubeconfig.write_text('{"contexts": [{"name": "prod-eu"}], "current-context": "prod-eu"}')
    text = uncommented(EXAMPLE.read_text()).replace("/etc/opsloop/kubeconfig", str(kubeconfig))
    lines = [f"{PROBE} = 1"]
    named = set()
    for line in text.splitlines():
        lines.append(line)
        if m := re.match(r"^\[\[?([^\]]+)\]", line):
            named.add(m.group(1))
            lines.append(f"{PROBE} = 1")
    implicit = {t.rsplit(".", i)[0] for t in named for i in range(1, t.count(".") + 1)} - named  # [alerts]
    for table in sorted(implicit):
        lines += [f"[{table}]", f"{PROBE} = 1"]
    return "\n".join(lines) + "\n"


def readers_problems(tmp: Path) -> list[str]:
    from bot.app.settings import load_settings
    from bot.core.errors import ConfigError
    from tools.config import build_registry

    path = tmp / "probed.toml"
    path.write_text(probed_example(tmp))
    problems: list[str] = []
    try:
        load_settings(path, env={})
    except ConfigError as e:
        problems += e.problems
    try:  # [tools] is read where the registry is built
        asyncio.run(build_registry(tomllib.loads(path.read_text())["tools"], base_dir=tmp))
    except ConfigError as e:
        problems += e.problems
    return problems


def known_keys(tmp: Path) -> dict[str, tuple[str, list[str]]]:
    """Each table the readers know keys of, by its path without indexes: (its heading form, its keys)."""
    found = [(m.group(1) or "", m.group(2).split(", ")) for p in readers_problems(tmp) if (m := KNOWN.match(p))]
    known: dict[str, tuple[str, list[str]]] = {}
    for raw, keys in sorted(found, key=lambda f: f[0].count(".")):  # parents first: they say what is free-form
        path: list[str] = []
        for part in raw.split(".") if raw else []:
            parent = ".".join(path)
            path.append(part.split("[")[0] if not path or parent in known else "<name>")
        table = ".".join(path)
        known[table] = (f"[[{table}]]" if raw.endswith("]") else f"[{table}]", keys)
    return known


@pytest.fixture(scope="module")
def known(tmp_path_factory) -> dict[str, tuple[str, list[str]]]:
    return known_keys(tmp_path_factory.mktemp("probe"))


@pytest.fixture(scope="module")
def config_keys(known) -> set[tuple[str, str]]:
    """Every (table heading, key) the readers read; a key that is itself a table of known keys has its own."""
    from bot.config.settings import PriceSettings

    known = dict(known)
    sections = known.pop("")[1]
    assert [s for s in sections if s not in known] == [], "a section opsloop.example.toml lacks"
    keys = {(heading, key) for table, (heading, ks) in known.items() for key in ks if f"{table}.{key}" not in known}
    prices = {("[model.prices.<name>]", f.name) for f in dataclasses.fields(PriceSettings)}  # an inline table per model
    return keys | prices


def test_the_readers_keys_are_found(config_keys):
    tables = {heading for heading, _ in config_keys}
    assert {"[model]", "[[hosts]]", "[alerts.webhook]", "[tools]", "[tools.commands.params.<name>]"} <= tables
    assert {("[[tools.commands]]", "params"), ("[tools]", "timeouts"), ("[[kubernetes.clusters]]", "namespaces")} <= (
        config_keys
    )


def test_every_key_the_readers_read_is_in_the_example(known):
    """So the probe reaches every table: a new table's keys are listed only once the example has it."""
    from tests.test_example_config import TEXT, keys_named

    assert sorted({key for _, keys in known.values() for key in keys} - keys_named(TEXT)) == []


def test_every_config_key_is_documented_once(config_keys):
    documented: dict[tuple[str, str], list[str]] = {}
    for page, heading, row in rows_under("key"):
        table = next((s for s in spans(heading) if CONFIG_TABLE.fullmatch(s)), None)
        if table is not None:
            documented.setdefault((table, first_span(row[0]) or row[0]), []).append(page)
    assert {k: pages for k, pages in documented.items() if len(pages) > 1} == {}
    assert sorted(f"{table} {key}" for table, key in config_keys - set(documented)) == []
    assert sorted(f"{table} {key}" for table, key in set(documented) - config_keys) == []  # none that is gone


def test_the_readmes_minimal_config_loads(tmp_path):
    from bot.app.settings import load_settings

    readme = (ROOT / "README.md").read_text()
    path = tmp_path / "opsloop.toml"
    path.write_text(re.search(r"## A minimal config\n.*?```toml\n(.*?)```", readme, re.S).group(1))
    settings = load_settings(path, env={})
    assert settings.approvals.approvers == ("S0ONCALL",)


# --- commands ---------------------------------------------------------------------------------------------------


def test_every_command_and_flag_is_documented_once():
    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    places: dict[str, list[str]] = {}
    for page in PAGES:
        for _, text in headings(page):
            if (m := re.fullmatch(r"opsloop (\S+)", rendered(text))) and spans(text):
                places.setdefault(m.group(1), []).append(name_of(page))
    assert places == {name: [CLI_PAGE] for name in commands}
    flags_documented: dict[str, set[str]] = {}
    for page, heading, row in rows_under("flag"):
        if page == CLI_PAGE and (m := re.fullmatch(r"opsloop (\S+)", rendered(heading))):
            flags_documented.setdefault(m.group(1), set()).add((first_span(row[0]) or "").split(" ")[0])
    flags = {
        name: {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        for name, sub in commands.items()
    }
    assert flags_documented == flags


# --- citations --------------------------------------------------------------------------------------------------

# The notes the project was built from live outside the repository: a reader can't open them, so nothing here
# names them. A promise to users is stated on a docs/ page; a library's behaviour is stated where it matters.
OUTSIDE = re.compile(r"\b(?:DESIGN|INVESTIGATION|REACH|LIBRARIES|STYLE)\.md\b|/work[/]shared|\.\./shared/|\(§\d")
CITING = ("bot", "handlers", "tools", "tests", "bench", "docs", ".ci", "deploy")
TOP = ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml", "opsloop.example.toml", "Dockerfile")


def test_nothing_cites_a_file_outside_the_repository():
    files = [ROOT / name for name in TOP]
    files += [p for d in CITING for p in sorted((ROOT / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    cited, read = [], 0
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # an image
        read += 1
        cited += [
            f"{path.relative_to(ROOT)}:{n}: {m.group()}"
            for n, line in enumerate(text.splitlines(), 1)
            if (m := OUTSIDE.search(line))
        ]
    assert cited == []
    assert read > 300  # the tree was read at all
