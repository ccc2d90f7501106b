"""recent_changes through the registry, as `opsloop run` builds it from [changes]: real git repositories, change
events stored in the real store (both backends), the fake kube-apiserver; the window counts from the run's
anchor; a failing source is one line; config problems name their place."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import ConfigError
from bot.store import Store
from tests.support.fakes.kube import FakeKube
from tests.tools.changes.test_changes_git import commit, git
from tests.tools.changes.test_changes_k8s import NS, world
from tools.api import RunScope, ToolError, run_scope
from tools.changes.reach import REACH, ChangesConfig
from tools.changes.store import StoredChange, record_changes
from tools.config import build_registry
from tools.reaches import TABLES, parse_reaches
from tools.registry import ToolRegistry

pytestmark = pytest.mark.processes  # the real git

NOW = datetime.now(UTC).replace(microsecond=0)


def scope(anchor: datetime, **extra: Any) -> RunScope:
    return RunScope(run_id="run_1", conversation="C1", started_at=NOW.timestamp(), anchor=anchor.timestamp(), **extra)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "deploy-config"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    commit(r, "initial layout", NOW - timedelta(days=3), {"README": "hi"})
    commit(r, "lower pool size to 10", NOW - timedelta(minutes=12), {"k8s/api.yaml": "pool: 10"})
    commit(r, "docs only", NOW - timedelta(minutes=30), {"docs/x.md": "x"})
    return r


async def registry(raw: dict[str, Any], store: Store | None = None) -> ToolRegistry:
    return await build_registry({}, reaches=parse_reaches(raw), shared={Store: store} if store else None)


async def call(reg: ToolRegistry, args: dict[str, Any], run: RunScope | None = None) -> str:
    with run_scope(run):
        return str(await reg.get("recent_changes").run(args))  # type: ignore[union-attr]


@pytest.fixture
async def stored(db_url: str) -> AsyncIterator[Store]:
    s = await Store(db_url, tables=TABLES).open()
    await record_changes(
        s,
        [
            StoredChange(
                id="gha-1",
                at=(NOW - timedelta(minutes=8)).timestamp(),
                source="github-actions",
                service="checkout-api",
                environment="prod",
                summary="deploy checkout-api 1.43",
                url="https://ci.example.com/runs/1",
            ),
            StoredChange(
                id="gha-0", at=(NOW - timedelta(days=2)).timestamp(), service="checkout-api", summary="too old to show"
            ),
            StoredChange(
                id="flag-1",
                at=(NOW - timedelta(minutes=3)).timestamp(),
                source="flags",
                service="search",
                summary="flag new-ranker on <!channel>",
            ),
        ],
    )
    yield s
    await s.close()


async def test_git_and_stored_events_merge_newest_first(repo: Path, stored: Store) -> None:
    raw = {"changes": {"git": [{"name": "deploy-config", "path": str(repo)}]}}
    async with await registry(raw, stored) as reg:
        t = reg.get("recent_changes")
        assert t is not None and t.category.value == "read_only" and t.parallel
        out = await call(reg, {}, scope(NOW))
    lines = out.splitlines()
    assert lines[0].startswith("4 changes, newest first")
    assert lines[1].endswith("sources read: git deploy-config (main), webhook stored events")
    lines = [lines[0], *lines[2:]]
    assert "flag new-ranker on &lt;!channel&gt;" in lines[1] and "3 min before" in lines[1]
    assert "webhook · checkout-api (prod) · deploy checkout-api 1.43 (from github-actions)" in lines[2]
    assert "8 min before" in lines[2] and lines[2].endswith("https://ci.example.com/runs/1")
    assert "git · deploy-config (main) · commit by alice: lower pool size to 10" in lines[3]
    assert "12 min before" in lines[3]
    assert "docs only" in lines[4] and "too old" not in out and "initial layout" not in out


async def test_service_keeps_its_events_and_the_window_counts_from_the_anchor(repo: Path, stored: Store) -> None:
    raw = {"changes": {"window_minutes": 10, "git": [{"name": "deploy-config", "path": str(repo)}]}}
    async with await registry(raw, stored) as reg:
        only = await call(reg, {"service": "checkout-api"}, scope(NOW))
        assert "deploy checkout-api 1.43" in only and "new-ranker" not in only and "pool size" not in only
        # an alert that started 20 min ago: 10 min before it reaches the 12 and 30 min old commits' side
        earlier = await call(reg, {"since_minutes": 15}, scope(NOW - timedelta(minutes=20)))
        assert "docs only" in earlier and "10 min before" in earlier  # 30 min ago is 10 min before the anchor
        assert "8 min after" in earlier  # the 12-minute-old commit came after the alert started
        with pytest.raises(ToolError, match="since_minutes must be from 1 to"):
            await reg.get("recent_changes").run({"since_minutes": 0})  # type: ignore[union-attr]


async def test_a_missing_repository_and_an_unknown_host_are_one_line_each(
    repo: Path, tmp_path: Path, stored: Store
) -> None:
    raw = {
        "changes": {
            "git": [{"name": "deploy-config", "path": str(repo)}, {"name": "gone", "path": str(tmp_path / "nowhere")}]
        }
    }
    async with await registry(raw, stored) as reg:
        out = await call(reg, {"host": "web-99"}, scope(NOW))
    assert "could not read git gone (main): no repository at" in out
    assert "could not read host web-99: not in the inventory" in out
    assert "lower pool size to 10" in out and "deploy checkout-api" in out  # the others still answer


async def test_kubernetes_revisions_name_the_revision(repo: Path, fake_kube: FakeKube, tmp_path: Path) -> None:
    world(fake_kube)
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    raw = {
        "changes": {"git": [{"name": "deploy-config", "path": str(repo)}]},
        "kubernetes": {"clusters": [{"name": "prod", "kubeconfig": str(kc), "namespaces": [NS]}]},
    }
    async with await registry(raw) as reg:
        out = await call(reg, {"service": "api"}, scope(datetime.now(UTC)))
        with pytest.raises(ToolError) as scoped:  # outside the configured namespaces: refused before a request
            await reg.get("recent_changes").run({"namespace": "kube-system"})  # type: ignore[union-attr]
    assert "kubernetes · prod/web deployment/api · image api:1.41 → api:1.42, revision 3" in out
    assert "statefulset/db" not in out and "lower pool size" in out
    assert "kube-system" in str(scoped.value)


def test_config_problems_name_their_place(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        parse_reaches(
            {
                "changes": {
                    "window_minutes": 0,
                    "colour": 1,
                    "git": [{"name": "a"}, {"path": "x"}],
                    "webhook": {"listen": "nope", "token_env": "1x"},
                }
            }
        )
    text = str(e.value)
    for expected in (
        "changes.window_minutes",
        "changes.colour: unknown key",
        "changes.git[0]: missing required key 'path'",
        "changes.git[1]: missing required key 'name'",
        'changes.webhook.listen: expected "host:port"',
        "changes.webhook.token_env",
    ):
        assert expected in text


async def test_the_check_reads_each_repository_and_names_an_unset_token(repo: Path, tmp_path: Path) -> None:
    parsed = parse_reaches(
        {
            "changes": {
                "git": [
                    {"name": "deploy-config", "path": str(repo)},
                    {"name": "gone", "path": str(tmp_path / "nowhere")},
                ],
                "webhook": {"listen": "127.0.0.1:0"},
            }
        },
        env={},
    )["changes"]
    assert isinstance(parsed, ChangesConfig)
    lines, problems = await REACH.check(parsed)
    assert f"changes.git deploy-config: {repo} (main): ok" in lines
    assert any(p.startswith("changes.git gone: no repository at") for p in problems)
    assert any("OPSLOOP_CHANGES_TOKEN is not set" in p for p in problems)
    token = parse_reaches({"changes": {"webhook": {}}}, env={"OPSLOOP_CHANGES_TOKEN": "s3cret"})["changes"]
    assert "s3cret" not in repr(token) and token.webhook.token == "s3cret"


async def test_an_inventory_host_the_task_names_is_read_over_ssh(repo: Path, tmp_path: Path) -> None:
    from tests.handlers.test_alerts_recovery import free_port

    closed = free_port()  # nothing listens there: the host is unreachable, so reading it is one failure line
    raw = {
        "changes": {"git": [{"name": "deploy-config", "path": str(repo)}]},
        "hosts": [
            {"name": "web-03", "address": "127.0.0.1", "port": closed},
            {"name": "db-01", "address": "127.0.0.1", "port": closed},
        ],
    }
    async with await registry(raw) as reg:
        named = await call(reg, {}, scope(NOW, task="/var on web-03 is 97% full", labels={"job": "node"}))
        by_label = await call(reg, {}, scope(NOW, task="disk full", labels={"instance": "db-01:9100"}))
        none = await call(reg, {}, scope(NOW, task="checkout is slow"))
    assert "could not read host web-03:" in named and "db-01" not in named
    assert "could not read host db-01:" in by_label and "web-03" not in by_label
    assert "could not read host" not in none and "lower pool size to 10" in none


async def test_more_stored_events_than_a_read_takes_says_the_timeline_was_cut(db_url: str) -> None:
    s = await Store(db_url, tables=TABLES).open()
    try:
        at = (NOW - timedelta(minutes=5)).timestamp()
        await record_changes(s, [StoredChange(id=f"e{i}", at=at - i, summary=f"deploy {i}") for i in range(2001)])
        async with await registry({"changes": {}}, s) as reg:
            out = await call(reg, {}, scope(NOW))
    finally:
        await s.close()
    assert out.splitlines()[0].startswith("2000 changes, newest first")
    assert out.splitlines()[-1] == (
        "webhook stored events was cut: more than 2000 events in the window, the newest 2000 are listed"
    )
