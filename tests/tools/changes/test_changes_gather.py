"""tools/changes/gather.py: every source at once, a failing or slow source one line, the others still answering;
then all four real sources together (git, the real sshd, the fake kube API, change events) into one timeline."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from tests.support.fakes.kube import FakeKube, deployment
from tests.support.sshserver import SshServer, free_port
from tests.tools.changes.test_changes_git import commit, git
from tests.tools.changes.test_changes_packages import local_offset
from tests.tools.remote.test_host_tools_ssh import host_for
from tools.api import PermissionDenied, ToolError
from tools.changes.events import event_change, parse_events
from tools.changes.gather import Source, gather
from tools.changes.git import GitRepo, git_changes
from tools.changes.k8s import namespace_changes
from tools.changes.model import Change, Cut, SourceFailure, timeline
from tools.changes.packages import host_changes
from tools.k8s.clusters import KubeClusters
from tools.k8s.config import ClusterSpec
from tools.remote.inventory import Inventory, SshSettings
from tools.remote.pool import SshPool

START = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
SINCE, UNTIL = START - timedelta(hours=2), START + timedelta(minutes=10)


def change(minutes: float, what: str, source: str = "git") -> Change:
    return Change(at=START + timedelta(minutes=minutes), source=source, target="t", what=what)


def answering(*changes: Change) -> Source:
    async def read(since: datetime, until: datetime) -> Sequence[Change]:
        return changes

    return Source("git", "repo", read)


def failing(error: Exception, source: str = "host", target: str = "web-03") -> Source:
    async def read(since: datetime, until: datetime) -> Sequence[Change]:
        raise error

    return Source(source, target, read)


async def test_sources_run_concurrently() -> None:
    first_started, second_started = asyncio.Event(), asyncio.Event()

    async def first(since: datetime, until: datetime) -> Sequence[Change]:
        first_started.set()
        await second_started.wait()  # read one after the other, this would never return
        return [change(-1, "first")]

    async def second(since: datetime, until: datetime) -> Sequence[Change]:
        second_started.set()
        await first_started.wait()
        return [change(-2, "second")]

    changes, failures = await gather(
        [Source("git", "a", first, timeout_s=10), Source("git", "b", second, timeout_s=10)], SINCE, UNTIL
    )
    assert ([c.what for c in changes], failures) == (["first", "second"], [])


async def test_a_failing_source_is_one_failure_and_the_others_still_answer() -> None:
    changes, failures = await gather(
        [
            answering(change(-12, "lower pool size")),
            failing(ToolError("web-03: connection refused: nothing listens on 22")),
            failing(PermissionDenied("cluster prod forbids list events in namespace web"), "kubernetes", "prod/web"),
            failing(KeyError("revision"), "kubernetes", "prod/payments"),
        ],
        SINCE,
        UNTIL,
    )
    assert [c.what for c in changes] == ["lower pool size"]
    assert failures == [
        SourceFailure("host", "web-03", "web-03: connection refused: nothing listens on 22"),
        SourceFailure("kubernetes", "prod/web", "cluster prod forbids list events in namespace web"),
        SourceFailure("kubernetes", "prod/payments", "KeyError: 'revision'"),
    ]


async def test_a_source_past_its_timeout_is_one_failure() -> None:
    never = asyncio.Event()

    async def stuck(since: datetime, until: datetime) -> Sequence[Change]:
        await never.wait()
        return []

    changes, failures = await gather(
        [Source("host", "db-01", stuck, timeout_s=0.2), answering(change(-1, "still here"))], SINCE, UNTIL
    )
    assert ([c.what for c in changes], failures) == (
        ["still here"],
        [SourceFailure("host", "db-01", "no answer within 0.2s")],
    )


async def test_changes_outside_the_window_are_dropped() -> None:
    changes, _ = await gather(
        [
            answering(
                change(-121, "too old"), change(-120, "first minute"), change(10, "last minute"), change(11, "too new")
            )
        ],
        SINCE,
        UNTIL,
    )
    assert [c.what for c in changes] == ["first minute", "last minute"]


async def test_a_naive_window_is_refused() -> None:
    with pytest.raises(ValueError, match="the window's ends must carry a time zone"):
        await gather([], SINCE.replace(tzinfo=None), UNTIL)


async def test_no_sources_is_no_changes() -> None:
    assert await gather([], SINCE, UNTIL) == ([], [])


# -- the four real sources together -----------------------------------------------------------------------------


def seed_repo(path: Path, now: datetime) -> None:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "old", now - timedelta(days=2), {"k8s/a.yaml": "a"})
    commit(path, "lower pool size to 10", now - timedelta(minutes=12), {"k8s/a.yaml": "b"})


async def test_every_source_in_one_timeline_with_the_failures_last(
    sshd: SshServer, fake_kube: FakeKube, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    anchor = now - timedelta(minutes=5)
    since = now - timedelta(hours=2)
    await asyncio.to_thread(seed_repo, tmp_path / "deploy-config", now)
    local = now.astimezone(local_offset())
    dpkg = tmp_path / "dpkg.log"
    dpkg.write_text(f"{(local - timedelta(minutes=30)):%Y-%m-%d %H:%M:%S} upgrade nginx:amd64 1.24.0-1 1.24.0-2\n")
    fake_kube.add(deployment("api", "web", image="api:1.42"))
    rs = fake_kube.objects("ReplicaSet", "web")[0]["metadata"]["name"]
    created = f"{anchor - timedelta(minutes=7):%Y-%m-%dT%H:%M:%SZ}"
    fake_kube.touch("ReplicaSet", "web", rs, {"metadata": {"creationTimestamp": created}})
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    clusters = KubeClusters(
        (
            ClusterSpec(name="prod", kubeconfig=kc, namespaces=("web",)),
            ClusterSpec(name="down", kubeconfig=kc, namespaces=("web",), timeout_s=2),
        )
    )
    pool = SshPool(Inventory(SshSettings(), (host_for(sshd), host_for(sshd, "db-01", port=free_port()))))
    events, problems = parse_events(
        [
            {
                "at": f"{now - timedelta(minutes=8):%Y-%m-%dT%H:%M:%SZ}",
                "id": "gha-1",
                "summary": "deploy checkout-api 1.43",
                "service": "checkout-api",
            }
        ]
    )
    assert problems == []
    web, db = pool.inventory.resolve("web-03"), pool.inventory.resolve("db-01")
    assert web is not None and db is not None

    async def stored(since: datetime, until: datetime) -> Sequence[Change]:
        return [event_change(e) for e in events]

    async def down(since: datetime, until: datetime) -> Sequence[Change] | Cut:
        await fake_kube.down()  # this cluster is "down": the same server, gone for this read
        try:
            return await namespace_changes(clusters.get("down"), "web", since, until)
        finally:
            await fake_kube.up()

    try:
        changes, failures = await gather(
            [
                Source(
                    "git",
                    "deploy-config (main)",
                    partial(
                        git_changes, GitRepo(name="deploy-config", path=tmp_path / "deploy-config", paths=("k8s/",))
                    ),
                ),
                Source("git", "gone (main)", partial(git_changes, GitRepo(name="gone", path=tmp_path / "gone"))),
                Source("host", "web-03", partial(host_changes, pool, web, dpkg_log=str(dpkg))),
                Source("host", "db-01", partial(host_changes, pool, db, dpkg_log=str(dpkg)), timeout_s=15),
                Source("kubernetes", "down/web", down),
                Source("webhook", "stored events", stored),
            ],
            since,
            now + timedelta(minutes=1),
        )
        prod = await namespace_changes(clusters.get("prod"), "web", since, now + timedelta(minutes=1))
        assert not isinstance(prod, Cut)
    finally:
        await pool.close()
        await clusters.aclose()
    text = timeline([*changes, *prod], failures, anchor=anchor, now=now)
    lines = [line.split(" · ", 1)[1] for line in text.splitlines()[1:] if " · " in line and "booted" not in line]
    sha = await asyncio.to_thread(git, tmp_path / "deploy-config", "rev-parse", "--short", "HEAD")
    assert lines == [
        "3 min before · webhook · checkout-api · deploy checkout-api 1.43 · gha-1",
        f"7 min before · kubernetes · prod/web deployment/api · image api:1.42, revision 1 (first) · replicaset/{rs}",
        f"7 min before · git · deploy-config (main) · commit by alice: lower pool size to 10 (files: k8s/a.yaml) · "
        f"{sha}",
        "25 min before · host · web-03 · nginx 1.24.0-1 → 1.24.0-2 · dpkg.log",
    ]
    tail = text.splitlines()[-3:]
    assert tail[0] == f"could not read git gone (main): no repository at {tmp_path / 'gone'}"
    assert tail[1].startswith("could not read host db-01: db-01: connection refused")
    assert tail[2].startswith("could not read kubernetes down/web: cannot reach cluster down")
