"""The Kubernetes reads an SRE reaches for first, against the fake kube-apiserver through kubernetes_asyncio: events
over a window, a log pattern with the container's last restart, node conditions behind a pod's state, GitOps
ownership in reads and on a write's card, and what a call without a namespace does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fakes.kube import FakeKube
from tests.support.fakes.kube_scenes import NS, argo_managed, disk_pressure, events_over_time, oom_killed
from tests.tools.k8s.test_k8s_tools import k8s
from tools.api import BadCall
from tools.k8s import REACH
from tools.reaches import parse_reaches


async def test_events_since_keep_the_window_by_last_timestamp_or_event_time(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    events_over_time(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        events = reg.get("k8s_events")
        assert events is not None
        out = await events.run({"namespace": NS, "since": "30m"})
        head = out.splitlines()[0]
        assert head.startswith("events since ") and "(30m ago); 2 older events left out" in head
        assert "ScalingReplicaSet" in out and "FailedGetScale" in out  # the last one has only an eventTime
        assert "ProgressDeadlineExceeded" not in out and "old news" not in out
        wider = await events.run({"namespace": NS, "since": "1h", "warnings_only": True})
        assert "ProgressDeadlineExceeded" in wider and "old news" not in wider
        none = await events.run({"namespace": NS, "since": "1m"})
        assert none.startswith("no events in namespace web on cluster prod since ")
        assert "(4 older events left out)" in none
        with pytest.raises(BadCall, match="since: expected an ISO 8601 time"):
            await events.run({"namespace": NS, "since": "yesterday"})


async def test_logs_pattern_counts_every_match_and_names_the_last_restart(tmp_path: Path, fake_kube: FakeKube) -> None:
    oom_killed(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        logs = reg.get("k8s_logs")
        assert logs is not None
        out = await logs.run({"pod": "worker-5c7-abcde", "namespace": NS, "pattern": "^ERROR"})
        lines = out.splitlines()
        assert lines[0] == "logs of pod web/worker-5c7-abcde container worker: 2 of the last 300 lines match '^ERROR'"
        assert lines[1].startswith("container worker: 3 restarts; last terminated OOMKilled, exit code 137, at ")
        assert re.search(r"\(4m(\d+s)? ago\)$", lines[1])  # the fixture is 4 min old; a slow run adds seconds
        assert lines[2:] == ["ERROR batch 120: upstream timeout", "ERROR batch 280: cannot allocate 2GiB buffer"]
        sent = [r for r in fake_kube.requests if r.path.endswith("/log")]
        assert sent[0].query["tailLines"] == "2000"  # a pattern searches the last 2,000 lines by default
        nothing = await logs.run({"pod": "worker-5c7-abcde", "namespace": NS, "pattern": "panic"})
        assert "0 of the last 300 lines match 'panic'" in nothing and nothing.endswith("(no line matched)")
        with pytest.raises(Exception, match=r"k8s_logs: the pattern uses a backreference \(\\1\)"):
            await logs.run({"pod": "worker-5c7-abcde", "namespace": NS, "pattern": r"(a)\1"})


async def test_node_pressure_explains_an_evicted_pod_in_get_and_describe(tmp_path: Path, fake_kube: FakeKube) -> None:
    disk_pressure(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        get, describe = reg.get("k8s_get"), reg.get("k8s_describe")
        assert get is not None and describe is not None
        out = await get.run({"kind": "pods", "namespace": NS})
        rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.split()}
        assert "ContainerStatusUnknown (node DiskPressure)" in rows["cache-0"]
        assert "node-2: DiskPressure (KubeletHasDiskPressure: kubelet has disk pressure)" in out
        assert "(node" not in rows["api-ok"]
        node = await describe.run({"kind": "node", "name": "node-2"})
        assert "node problems: DiskPressure (KubeletHasDiskPressure: kubelet has disk pressure)" in node
        healthy = await describe.run({"kind": "node", "name": "node-1"})
        assert "node problems" not in healthy
        pod = await describe.run({"kind": "pod", "name": "cache-0", "namespace": NS})
        assert "node node-2: DiskPressure" in pod
    nodes_read = [r.path for r in fake_kube.requests if "/nodes" in r.path]
    assert nodes_read[0] == "/api/v1/nodes/node-2"  # k8s_get reads only the nodes of unhealthy pods


async def test_pod_rows_say_when_node_conditions_cannot_be_read(tmp_path: Path, fake_kube: FakeKube) -> None:
    disk_pressure(fake_kube)
    fake_kube.deny("get", "nodes")
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
    assert "ContainerStatusUnknown" in out and "(the conditions of node(s) node-2 could not be read: " in out


async def test_an_argo_managed_deployment_says_so_in_reads_and_on_its_cards(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    argo_managed(fake_kube)
    source = "Argo CD application shop-api (repo https://git.example.com/ops/deploy, path apps/api/deployment.yaml)"
    async with k8s(fake_kube, tmp_path) as reg:
        described = await reg.get("k8s_describe").run({"kind": "deploy", "name": "api", "namespace": NS})  # type: ignore[union-attr]
        assert f"managed by GitOps: {source}; a change made here by hand may be reverted" in described
        listed = await reg.get("k8s_get").run({"kind": "deployments", "namespace": NS})  # type: ignore[union-attr]
        assert f"managed by GitOps ({source}; a change made by hand may be reverted at its next sync): api" in listed
        warning = f"warning: GitOps manages this object: {source}. Its controller may revert this change"
        for name, args in (
            ("k8s_scale", {"name": "api", "replicas": 5, "namespace": NS}),
            ("k8s_rollout_restart", {"name": "api", "namespace": NS}),
        ):
            card = await reg.get(name).dry_run(args)  # type: ignore[union-attr]
            assert card is not None and warning in card, name
    assert fake_kube.writes() == []


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        ({"default_namespace": "payments"}, "prod (namespaces: web, payments; default payments)"),
        ({}, "prod (namespaces: web, payments; no default, give namespace)"),
    ],
)
async def test_a_call_without_a_namespace_does_what_the_description_and_context_say(
    tmp_path: Path, fake_kube: FakeKube, extra: dict[str, str], expect: str
) -> None:
    events_over_time(fake_kube)
    async with k8s(fake_kube, tmp_path, **extra) as reg:
        events = reg.get("k8s_events")
        assert events is not None
        if extra:
            assert (await events.run({})).startswith("no events in namespace payments on cluster prod")
        else:
            with pytest.raises(BadCall, match="sets no default_namespace; give one of: web, payments"):
                await events.run({})
        assert (
            "default: the cluster's default_namespace, else its only allowed namespace"
            in events.input_schema["properties"]["namespace"]["description"]
        )
    spec = parse_reaches({"kubernetes": {"clusters": [{"name": "prod", "namespaces": [NS, "payments"], **extra}]}})[
        "kubernetes"
    ]
    assert REACH.environment(spec) == [f"Kubernetes clusters (the tools' cluster argument): {expect}"]


async def test_a_default_namespace_outside_the_list_is_a_config_error(tmp_path: Path) -> None:
    from bot.config.settings import ConfigError

    with pytest.raises(ConfigError, match=r"default_namespace: 'ops' is not one of the cluster's namespaces"):
        parse_reaches({"kubernetes": {"clusters": [{"name": "p", "namespaces": ["web"], "default_namespace": "ops"}]}})
