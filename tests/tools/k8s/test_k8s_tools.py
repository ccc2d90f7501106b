"""The Kubernetes tools against the fake kube-apiserver (tests/support/fakes/kube.py), through kubernetes_asyncio:
config, every read, the dry-run diffs, the resourceVersion binding, scope, 403, a cluster that is down,
credentials re-read on 401, and `opsloop check`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.app.settings import load_settings
from bot.config.settings import ConfigError
from tests.support.fakes.kube import FakeKube, pod
from tests.support.fakes.kube_scenes import NS, crashloop
from tests.support.proxy import connect_proxy
from tools import PermissionDenied, ToolError, ToolRegistry
from tools.api import BadCall
from tools.config import build_registry
from tools.k8s import REACH, columns, describe, diff, render
from tools.k8s.clusters import KubeClusters
from tools.reaches import parse_reaches


def clusters_table(kubeconfig: Path, **extra: Any) -> dict[str, Any]:
    return {"clusters": [{"name": "prod", "kubeconfig": str(kubeconfig), "namespaces": [NS, "payments"], **extra}]}


async def with_clusters(tools: dict[str, Any], kubernetes: Any, base_dir: Path | None = None) -> ToolRegistry:
    """The registry for a [tools] table and a [kubernetes] table, as `opsloop run` builds it."""
    return await build_registry(
        tools, base_dir=base_dir, reaches=parse_reaches({"kubernetes": kubernetes}, base_dir=base_dir)
    )


async def check_clusters(kubernetes: Any) -> tuple[list[str], list[str]]:
    return await REACH.check(parse_reaches({"kubernetes": kubernetes})["kubernetes"])


@asynccontextmanager
async def k8s(kube: FakeKube, tmp_path: Path, **extra: Any) -> AsyncIterator[ToolRegistry]:
    kc = kube.write_kubeconfig(tmp_path / "kubeconfig")
    async with await with_clusters({"modules": ["tools.k8s"]}, clusters_table(kc, **extra)) as reg:
        yield reg


def pool(reg: ToolRegistry) -> KubeClusters:
    ctx = reg.get("k8s_get").ctx  # type: ignore[union-attr]
    clusters = ctx.resource(KubeClusters) if ctx is not None else None
    assert clusters is not None
    return clusters


# -- config ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({}, "kubernetes.clusters[0]: missing required key 'name'"),
        ({"name": "prod", "nmespaces": []}, "kubernetes.clusters[0].nmespaces: unknown key"),
        (
            {"name": "prod", "namespaces": ["Web"]},
            "kubernetes.clusters[0].namespaces[0]: 'Web' is not a namespace name",
        ),
        ({"name": "prod", "kubeconfig": "nope.yaml"}, "kubernetes.clusters[0].kubeconfig: "),
        (
            {"name": "prod", "kubeconfig": "kc", "context": "staging"},
            "kubernetes.clusters[0].context: 'staging' is not a context in",
        ),
        ({"name": "prod", "timeout_s": 0}, "kubernetes.clusters[0].timeout_s: must be positive, got 0"),
    ],
)
async def test_cluster_config_errors_name_their_place(tmp_path: Path, entry: dict[str, Any], error: str) -> None:
    (tmp_path / "kc").write_text(json.dumps({"contexts": [{"name": "fake"}], "current-context": "fake"}))
    with pytest.raises(ConfigError) as e:
        await with_clusters({"modules": ["tools.k8s"]}, {"clusters": [entry]}, base_dir=tmp_path)
    assert str(e.value).startswith(error)


async def test_duplicate_clusters_and_module_without_clusters_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"clusters\[1\].name: duplicate cluster name 'a'"):
        await with_clusters({"modules": ["tools.k8s"]}, {"clusters": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ConfigError, match=r"'tools\.k8s' is listed but no \[\[kubernetes\.clusters\]\]"):
        await build_registry({"modules": ["tools.k8s"]})


async def test_clusters_without_the_module_listed_offer_the_kubernetes_tools(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    registry = await with_clusters(
        {"modules": ["tools.builtin"]}, {"clusters": [{"name": "prod", "kubeconfig": str(kc)}]}, base_dir=tmp_path
    )
    try:
        assert {"k8s_get", "k8s_delete_pod"} <= {t.name for t in registry}
    finally:
        await registry.aclose()


async def test_top_level_kubernetes_clusters_reach_the_registry(tmp_path: Path, fake_kube: FakeKube) -> None:
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    config = tmp_path / "opsloop.toml"
    config.write_text(
        f'[tools]\nmodules = ["tools.builtin", "tools.k8s"]\n\n[[kubernetes.clusters]]\nname = "prod"\n'
        f'kubeconfig = {json.dumps(str(kc))}\nnamespaces = ["web"]\n'
    )
    settings = load_settings(config, env={})
    async with await build_registry(settings.tools, reaches=settings.reaches) as reg:
        assert [t.name for t in reg if t.name.startswith("k8s_")] == [
            "k8s_get",
            "k8s_describe",
            "k8s_events",
            "k8s_logs",
            "k8s_rollout_history",
            "k8s_top",
            "k8s_rollout_restart",
            "k8s_scale",
            "k8s_rollout_undo",
            "k8s_delete_pod",
        ]
        categories = {t.name: (t.category.value, t.parallel, t.has_dry_run) for t in reg if t.name.startswith("k8s_")}
        assert {n for n, c in categories.items() if c == ("read_only", True, False)} == {
            "k8s_get",
            "k8s_describe",
            "k8s_events",
            "k8s_logs",
            "k8s_rollout_history",
            "k8s_top",
        }
        assert {n for n, c in categories.items() if c == ("mutating", False, True)} == {
            "k8s_rollout_restart",
            "k8s_scale",
            "k8s_rollout_undo",
        }
        assert categories["k8s_delete_pod"] == ("destructive", False, True)
    config.write_text(config.read_text() + "[tools.kubernetes]\nclusters = []\n")
    with pytest.raises(ConfigError, match=r"tools.kubernetes: configure \[\[kubernetes.clusters\]\] at the top level"):
        load_settings(config, env={})


# -- pure parts --------------------------------------------------------------------------------------
def test_field_diff_names_the_fields_that_change() -> None:
    before = {
        "metadata": {"resourceVersion": "5", "annotations": {}},
        "spec": {
            "replicas": 3,
            "template": {
                "metadata": {},
                "spec": {"containers": [{"name": "api", "image": "api:1.42"}, {"name": "proxy", "image": "envoy:1"}]},
            },
        },
        "status": {"replicas": 3},
    }
    after = {
        "metadata": {"resourceVersion": "6", "annotations": {}},
        "spec": {
            "replicas": 6,
            "template": {
                "metadata": {"annotations": {columns.RESTARTED_AT: "T"}},
                "spec": {"containers": [{"name": "api", "image": "api:1.41"}, {"name": "proxy", "image": "envoy:1"}]},
            },
        },
        "status": {"replicas": 6},
    }
    assert diff.field_diff(before, after) == [
        "spec.replicas: 3 → 6",
        "spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]: (none) → T",
        "spec.template.spec.containers[api].image: api:1.42 → api:1.41",
    ]
    assert diff.merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 2}, "e": 4}) == {
        "a": None,
        "b": {"d": None},
        "e": 4,
    }


def test_env_from_secrets_shows_as_references() -> None:
    lines = describe.env_lines(
        {
            "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
            "envFrom": [{"secretRef": {"name": "api-env"}}],
        }
    )
    assert lines == ["DB_PASSWORD (from secret db, key password)", "(all keys of secret api-env)"]


def test_tables_are_bounded_with_a_note() -> None:
    out = render.get_table("Namespace", [{"metadata": {"name": f"ns-{i}"}} for i in range(250)])
    assert len(out.splitlines()) == 1 + columns.MAX_ROWS + 1
    assert out.endswith("… 50 more Namespace objects not shown; narrow with a selector or a name")


# -- reads -------------------------------------------------------------------------------------------
async def test_get_pods_is_a_wide_table(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
        header, row = out.splitlines()
        assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "IMAGES"]
        assert row.split()[:4] == ["api-7d9f-x2k4q", "0/1", "CrashLoopBackOff", "7"]
        assert row.split()[-2:] == ["node-1", "api:1.42"]
        deploy = await reg.get("k8s_get").run({"kind": "deploy", "name": "api", "namespace": NS})  # type: ignore[union-attr]
        assert "api:1.42" in deploy and "app=api" in deploy
        listed = [r for r in fake_kube.requests if r.path.endswith("/pods")]
        assert listed and listed[0].query.get("limit") == "500"


async def test_describe_pod_has_owner_chain_conditions_events_and_secret_references(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_describe").run(  # type: ignore[union-attr]
            {"kind": "pod", "name": "api-7d9f-x2k4q", "namespace": NS}
        )
    assert "owner chain: Pod api-7d9f-x2k4q ← ReplicaSet api-" in out and "← Deployment api" in out
    assert "state: waiting, CrashLoopBackOff" in out and "last state: terminated, Error, exit code 1" in out
    assert "Ready             False    ContainersNotReady" in out
    events = out[out.index("events (recent") :]
    assert events.index("BackOff") < events.index("Pulled")  # warnings first
    assert not any("secrets" in r.path for r in fake_kube.requests)


async def test_describe_deployment_shows_env_as_references(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_describe").run(  # type: ignore[union-attr]
            {"kind": "deployment", "name": "api", "namespace": NS}
        )
    assert "env: DB_PASSWORD (from secret db, key password); LOG_LEVEL=info; (all keys of secret api-env)" in out
    assert "replicas: 3 desired" in out and "kubernetes.io/change-cause=deploy api 1.42" in out


async def test_events_warnings_first(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_events").run({"namespace": NS})  # type: ignore[union-attr]
        only = await reg.get("k8s_events").run({"namespace": NS, "warnings_only": True})  # type: ignore[union-attr]
    lines = out.splitlines()
    assert lines[0] == "2 events (1 warnings), warnings first:"
    assert "Warning   BackOff" in lines[2] and "12x" in lines[2] and "Normal" in lines[3]
    assert "Pulled" not in only and "BackOff" in only


async def test_logs_previous_tail_and_redaction(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        logs = reg.get("k8s_logs")
        assert logs is not None
        out = await logs.run({"pod": "api-7d9f-x2k4q", "namespace": NS, "previous": True, "tail_lines": 2})
        assert out.splitlines()[0] == "logs of previous instance of pod web/api-7d9f-x2k4q container api: last 2 lines"
        assert "panic: missing config key FEATURE_X" in out and "s3cr3tpw" not in out
        current = await logs.run({"pod": "api-7d9f-x2k4q", "namespace": NS})
        assert current.splitlines()[2:] == ["booting"]
        sent = [r for r in fake_kube.requests if r.path.endswith("/log")]
        assert sent[0].query["previous"] == "true" and sent[0].query["tailLines"] == "2"
        assert "previous" not in sent[1].query and sent[1].query["limitBytes"] == str(512 * 1024)


async def test_logs_of_a_multi_container_pod_need_a_container(tmp_path: Path, fake_kube: FakeKube) -> None:
    fake_kube.add(pod("two", NS, containers=[{"name": "app", "image": "a:1"}, {"name": "sidecar", "image": "s:1"}]))
    async with k8s(fake_kube, tmp_path) as reg:
        with pytest.raises(ToolError, match="pod two has 2 containers; give container, one of: app, sidecar"):
            await reg.get("k8s_logs").run({"pod": "two", "namespace": NS})  # type: ignore[union-attr]
    assert not any(r.path.endswith("/log") for r in fake_kube.requests)


async def test_rollout_history_lists_revisions_images_and_causes(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_rollout_history").run({"name": "api", "namespace": NS})  # type: ignore[union-attr]
    lines = out.splitlines()
    assert lines[0] == "deployment web/api: 2 revisions, current 2"
    assert lines[2].split()[:4] == ["1", "api:1.41", "deploy", "api"] and "deploy api 1.41" in lines[2]
    assert lines[3].split()[:3] == ["2", "(current)", "api:1.42"] and "deploy api 1.42" in lines[3]


async def test_top_from_metrics_or_a_clear_not_available(tmp_path: Path, fake_kube: FakeKube) -> None:
    async with k8s(fake_kube, tmp_path) as reg:
        top = reg.get("k8s_top")
        assert top is not None
        with pytest.raises(ToolError, match="metrics API not available on cluster prod"):
            await top.run({"namespace": NS})
        fake_kube.set_metrics(
            pods=[
                FakeKube.pod_metrics("a", NS, {"app": {"cpu": "250m", "memory": "128Mi"}}),
                FakeKube.pod_metrics(
                    "b", NS, {"app": {"cpu": "1", "memory": "64Mi"}, "side": {"cpu": "5000000n", "memory": "1Mi"}}
                ),
            ]
        )
        out = await top.run({"namespace": NS})
    assert out.splitlines()[1:] == [
        "NAME   CPU(cores)   MEMORY(bytes)",
        "b      1005m        65Mi",
        "a      250m         128Mi",
    ]


# -- scope and errors --------------------------------------------------------------------------------
async def test_a_namespace_outside_scope_and_secrets_are_refused_before_any_request(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    async with k8s(fake_kube, tmp_path) as reg:
        get = reg.get("k8s_get")
        assert get is not None
        with pytest.raises(
            ToolError,
            match="namespace 'kube-system' is outside the namespaces opsloop may touch "
            r"on cluster prod \(web, payments\); nothing was requested",
        ):
            await get.run({"kind": "pods", "namespace": "kube-system"})
        for kind in ("secret", "Secrets", "secret.v1"):
            with pytest.raises(ToolError, match="kind Secret is never read by opsloop"):
                await get.run({"kind": kind, "namespace": NS})
        with pytest.raises(ToolError, match="kind Secret is never read"):
            await reg.get("k8s_describe").run({"kind": "secret", "name": "db", "namespace": NS})  # type: ignore[union-attr]
        with pytest.raises(
            BadCall,
            match="namespace is required: cluster prod allows several namespaces and sets no default_namespace; "
            "give one of: web, payments",
        ):
            await get.run({"kind": "pods"})
        with pytest.raises(ToolError, match="no cluster 'staging' is configured; clusters: prod"):
            await get.run({"kind": "pods", "namespace": NS, "cluster": "staging"})
    assert fake_kube.requests == []


async def test_403_is_permission_denied_naming_verb_resource_namespace(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    fake_kube.deny("get", "pods/log", NS)
    async with k8s(fake_kube, tmp_path) as reg:
        with pytest.raises(PermissionDenied) as e:
            await reg.get("k8s_logs").run({"pod": "api-7d9f-x2k4q", "namespace": NS})  # type: ignore[union-attr]
    assert str(e.value).startswith("cluster prod forbids get pods/log in namespace web: ")
    assert 'cannot get resource "pods/log"' in str(e.value)


async def test_a_cluster_that_is_down_fails_clearly_then_fast(tmp_path: Path, fake_kube: FakeKube) -> None:
    async with k8s(fake_kube, tmp_path) as reg:
        get = reg.get("k8s_get")
        assert get is not None
        await get.run({"kind": "pods", "namespace": NS})
        await fake_kube.down()
        with pytest.raises(ToolError, match=f"cannot reach cluster prod at {fake_kube.url}: connection refused"):
            await get.run({"kind": "pods", "namespace": NS})
        await fake_kube.up()
        seen = len(fake_kube.requests)
        with pytest.raises(ToolError, match=r"cluster prod is unreachable \(.*\); not tried again for another 1\ds"):
            await get.run({"kind": "pods", "namespace": NS})
        assert len(fake_kube.requests) == seen  # the next failure is immediate: nothing was sent
        pool(reg).get("prod")._down_until = 0  # the short breaker ran out
        assert await get.run({"kind": "pods", "namespace": NS}) == f"no Pod objects in namespace {NS} on cluster prod"


async def test_a_rotated_token_is_read_again_on_401(tmp_path: Path, fake_kube: FakeKube) -> None:
    token = tmp_path / "token"
    token.write_text(fake_kube.token)
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", token_file=token)
    async with await with_clusters({"modules": ["tools.k8s"]}, clusters_table(kc)) as reg:
        get = reg.get("k8s_get")
        assert get is not None
        await get.run({"kind": "pods", "namespace": NS})
        fake_kube.token = "rotated-token"
        token.write_text("rotated-token")
        assert await get.run({"kind": "pods", "namespace": NS}) == f"no Pod objects in namespace {NS} on cluster prod"
    assert [r.status for r in fake_kube.requests] == [200, 401, 200]
    assert fake_kube.requests[-1].headers["Authorization"] == "Bearer rotated-token"


# -- writes ------------------------------------------------------------------------------------------
async def test_scale_preview_is_the_dry_run_diff_and_the_write_carries_its_resource_version(
    tmp_path: Path, fake_kube: FakeKube
) -> None:
    d = crashloop(fake_kube)
    args = {"name": "api", "replicas": 6, "namespace": NS}
    async with k8s(fake_kube, tmp_path) as reg:
        scale = reg.get("k8s_scale")
        assert scale is not None
        shown = await scale.dry_run(args)
        assert shown is not None
        rv = d["metadata"]["resourceVersion"]
        assert shown.splitlines() == [
            "scale deployment web/api to 6 replicas on cluster prod: server-side dry run (dryRun=All) accepted",
            f"resourceVersion: {rv}",
            "changes:",
            "  spec.replicas: 3 → 6",
        ]
        assert [r.query.get("dryRun") for r in fake_kube.requests if r.method == "PATCH"] == ["All"]
        assert fake_kube.writes() == []
        done = await scale.run(args, confirmed_by="U0BOB", approved_preview=shown)
    assert done.startswith(
        f"done: scale deployment web/api to 6 replicas on cluster prod; approved by U0BOB; resourceVersion {rv} → "
    )
    (write,) = fake_kube.writes()
    assert write.path == "/apis/apps/v1/namespaces/web/deployments/api/scale"
    assert write.body == {"metadata": {"resourceVersion": rv}, "spec": {"replicas": 6}}
    assert fake_kube.get("Deployment", NS, "api")["spec"]["replicas"] == 6  # type: ignore[index]


async def test_undo_preview_shows_the_image_going_back(tmp_path: Path, fake_kube: FakeKube) -> None:
    d = crashloop(fake_kube)
    async with k8s(fake_kube, tmp_path) as reg:
        undo = reg.get("k8s_rollout_undo")
        assert undo is not None
        shown = await undo.dry_run({"name": "api", "namespace": NS})
        assert shown is not None
        assert shown.splitlines()[0] == (
            "rollout undo deployment web/api to revision 1 (from 2) on cluster prod: "
            "server-side dry run (dryRun=All) accepted"
        )
        assert "  spec.template.spec.containers[api].image: api:1.42 → api:1.41" in shown.splitlines()
        assert "  metadata.annotations[kubernetes.io/change-cause]: deploy api 1.42 → deploy api 1.41" in shown
        await undo.run({"name": "api", "namespace": NS}, confirmed_by="U0BOB", approved_preview=shown)
    (write,) = fake_kube.writes()
    assert write.body["metadata"]["resourceVersion"] == d["metadata"]["resourceVersion"]
    after = fake_kube.get("Deployment", NS, "api")
    assert after is not None and after["spec"]["template"]["spec"]["containers"][0]["image"] == "api:1.41"
    assert "env" not in after["spec"]["template"]["spec"]["containers"][0]  # revision 1's template, exactly


async def test_restart_preview_names_the_annotation_and_is_stable(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    args = {"name": "api", "namespace": NS}
    async with k8s(fake_kube, tmp_path) as reg:
        restart = reg.get("k8s_rollout_restart")
        assert restart is not None
        first = await restart.dry_run(args)
        assert (
            first is not None
            and (
                "  spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]: "
                "(none) → (the time of the approved write)"
            )
            in first.splitlines()
        )
        assert await restart.dry_run(args) == first  # the same card on a repeated dry run
        await restart.run(args, confirmed_by="U0BOB", approved_preview=first)
    (write,) = fake_kube.writes()
    assert write.content_type == "application/strategic-merge-patch+json"
    stamp = write.body["spec"]["template"]["metadata"]["annotations"][columns.RESTARTED_AT]
    assert stamp.endswith("Z")


async def test_an_object_changed_since_the_card_is_not_written(tmp_path: Path, fake_kube: FakeKube) -> None:
    d = crashloop(fake_kube)
    args = {"name": "api", "replicas": 6, "namespace": NS}
    async with k8s(fake_kube, tmp_path) as reg:
        scale = reg.get("k8s_scale")
        assert scale is not None
        shown = await scale.dry_run(args)
        assert shown is not None
        fake_kube.touch("Deployment", NS, "api", {"spec": {"replicas": 4}})  # someone else, meanwhile
        with pytest.raises(ToolError) as e:
            await scale.run(args, confirmed_by="U0BOB", approved_preview=shown)
        assert str(e.value).startswith(
            f"deployment web/api changed since the card was shown (resourceVersion {d['metadata']['resourceVersion']}"
            " on the card, "
        )
        assert "nothing was changed. Call the tool again: a fresh dry run makes a new card" in str(e.value)
        assert fake_kube.writes() == []
        fresh = await scale.dry_run(args)
        assert fresh is not None and fresh != shown and "  spec.replicas: 4 → 6" in fresh.splitlines()


async def test_a_409_on_the_write_is_the_same_refusal(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    args = {"name": "api", "namespace": NS}
    async with k8s(fake_kube, tmp_path) as reg:
        restart = reg.get("k8s_rollout_restart")
        assert restart is not None
        shown = await restart.dry_run(args)
        assert shown is not None
        from tools.k8s import writes

        change = await writes.plan_restart(name="api", namespace=NS, ctx=restart.ctx)  # type: ignore[arg-type]
        fake_kube.touch("Deployment", NS, "api")  # after the check, before the write lands
        with pytest.raises(ToolError, match="changed since the card was shown \\(the API server answered 409"):
            await change.send(dry_run=False)
    assert [w.status for w in fake_kube.writes()] == [409]


async def test_delete_pod_previews_and_deletes_with_preconditions(tmp_path: Path, fake_kube: FakeKube) -> None:
    crashloop(fake_kube)
    args = {"pod": "api-7d9f-x2k4q", "namespace": NS}
    async with k8s(fake_kube, tmp_path) as reg:
        delete = reg.get("k8s_delete_pod")
        assert delete is not None
        shown = await delete.dry_run(args)
        assert shown is not None
        p = fake_kube.get("Pod", NS, "api-7d9f-x2k4q")
        assert p is not None
        assert "  pod web/api-7d9f-x2k4q: exists → deleted" in shown.splitlines()
        assert "owner: ReplicaSet api-" in shown and "it creates a replacement pod" in shown
        with pytest.raises(PermissionDenied):  # destructive: never without an approver
            await delete.run(args, approved_preview=shown)
        await delete.run(args, confirmed_by="U0BOB", approved_preview=shown)
    (write,) = fake_kube.writes()
    assert write.method == "DELETE"
    assert write.body["preconditions"] == {
        "resourceVersion": p["metadata"]["resourceVersion"],
        "uid": p["metadata"]["uid"],
    }
    assert fake_kube.get("Pod", NS, "api-7d9f-x2k4q") is None


# -- check ---------------------------------------------------------------------------------------------
async def test_check_reports_which_tools_work_per_namespace(tmp_path: Path, fake_kube: FakeKube) -> None:
    kc = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    fake_kube.deny("delete", "pods", "payments")
    fake_kube.deny("patch", "deployments/scale", None)
    lines, problems = await check_clusters(clusters_table(kc))
    assert problems == []
    assert lines[0].startswith(f"kubernetes cluster prod: {fake_kube.url} (v1.32.4)")
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["tool"].split() == ["tool", "web", "payments"]
    assert rows["k8s_get"].split()[1:] == ["ok", "ok"]
    assert "ok" in rows["k8s_delete_pod"] and "no: cannot delete pods" in rows["k8s_delete_pod"]
    assert rows["k8s_scale"].count("no: cannot patch deployments/scale.apps") == 2

    await fake_kube.down()
    lines, problems = await check_clusters(clusters_table(kc))
    assert lines == [f"kubernetes cluster prod: UNREACHABLE ({kc.resolve()})"]
    assert len(problems) == 1 and problems[0].startswith("kubernetes cluster prod: cannot reach cluster prod")


async def test_the_registry_closes_each_cluster_client(tmp_path: Path, fake_kube: FakeKube) -> None:
    async with k8s(fake_kube, tmp_path) as reg:
        await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
        client = pool(reg).get("prod")
        api = client._api
        assert api is not None
        await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
        assert client._api is api  # one client, kept open
    assert client._api is None and api.rest_client.pool_manager.closed


def test_every_cluster_problem_is_named_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        parse_reaches(
            {
                "kubernetes": {
                    "clusters": [
                        {"name": "a", "namespaces": ["web", 3]},
                        {"name": "b", "timeout_s": 500, "colour": "red"},
                    ]
                }
            },
            base_dir=tmp_path,
        )
    assert e.value.problems == [
        "kubernetes.clusters[0].namespaces[1]: expected a string, got an integer",
        "kubernetes.clusters[1].colour: unknown key "
        "(known: name, kubeconfig, context, namespaces, default_namespace, timeout_s)",
        "kubernetes.clusters[1].timeout_s: must be at most 300 seconds, got 500",
    ]


# -- the environment: read once, not on every request ---------------------------------------------
async def test_a_netrc_entry_for_the_api_server_changes_nothing(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster authenticates with its kubeconfig: a ~/.netrc entry for its host is never read (aiohttp's
    trust_env read it on every request, and its Basic auth clashed with the bearer token: every call failed)."""
    crashloop(fake_kube)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with k8s(fake_kube, tmp_path) as reg:
        out = await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
    assert "api-7d9f-x2k4q" in out
    assert all("Basic" not in r.headers.get("Authorization", "") for r in fake_kube.requests)


async def test_an_https_proxy_in_the_environment_is_still_used(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashloop(fake_kube)
    async with connect_proxy() as (url, tunnels):
        monkeypatch.setenv("HTTPS_PROXY", url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        async with k8s(fake_kube, tmp_path) as reg:
            out = await reg.get("k8s_get").run({"kind": "pods", "namespace": NS})  # type: ignore[union-attr]
    assert "api-7d9f-x2k4q" in out
    assert tunnels and set(tunnels) == {fake_kube.url.split("://", 1)[1].rstrip("/")}
