"""End to end through Slack (the real app, the fake Slack, Messages API and kube-apiserver): a crash loop after a
deploy is investigated and rolled back on a card showing the cluster's dry run; the object changing between
card and click; a 403 in the middle of a run; four reads in one turn at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.kube_scenes import argo_managed
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import BOB, answered, bot_env, card_state, result_text, text_of, tool_results
from tests.tools.k8s.test_k8s_tools import NS, crashloop

POD = "api-7d9f-x2k4q"
IMAGE_DIFF = "spec.template.spec.containers[api].image: api:1.42 → api:1.41"


def config(kube: FakeKube, tmp_path: Path) -> str:
    kc = kube.write_kubeconfig(tmp_path / "kubeconfig")
    return (
        f'[tools]\nmodules = ["tools.k8s"]\n\n[[kubernetes.clusters]]\nname = "prod"\n'
        f'kubeconfig = {json.dumps(str(kc))}\nnamespaces = ["web"]\n'
    )


async def test_a_crash_loop_after_a_deploy_is_investigated_and_rolled_back_on_an_approved_dry_run(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    d = crashloop(fake_kube)
    rv = d["metadata"]["resourceVersion"]
    fake_anthropic.script(
        reply(text("Checking the api pods."), tool_use("k8s_get", {"kind": "pods", "namespace": NS})),
        reply(tool_use("k8s_describe", {"kind": "pod", "name": POD, "namespace": NS})),
        reply(tool_use("k8s_logs", {"pod": POD, "previous": True, "tail_lines": 50, "namespace": NS})),
        reply(tool_use("k8s_rollout_history", {"name": "api", "namespace": NS})),
        reply(
            text("api:1.42 panics on a missing config key; rolling back to revision 1."),
            tool_use("k8s_rollout_undo", {"name": "api", "namespace": NS}),
        ),
        *answered(reply(text("Rolled api back to api:1.41."))),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        channel, ts = await env.mention("api is crash looping since the deploy, investigate")
        card = await env.card(channel, ts, timeout=30)
        shown = text_of(card)
        assert IMAGE_DIFF in shown and f"resourceVersion: {rv}" in shown
        assert "rollout undo deployment web/api to revision 1 (from 2) on cluster prod" in shown
        assert fake_kube.writes() == []  # only the dry run so far
        await env.approve(card, BOB)
        await env.wait_final(channel, ts, timeout=30)

        # each call's result; the last request is the answer's second telling, asked once for the summary
        results = [result_text(tool_results(r)[0]) for r in fake_anthropic.requests[1:-1]]
        assert "CrashLoopBackOff" in results[0]
        assert "owner chain: Pod api-7d9f-x2k4q ← ReplicaSet" in results[1] and "BackOff" in results[1]
        assert "panic: missing config key FEATURE_X" in results[2] and "s3cr3tpw" not in results[2]
        assert "api:1.41" in results[3] and "deploy api 1.41" in results[3]
        assert results[4].startswith(
            "#5 k8s_rollout_undo api\n"  # its handle, then what the tool did
            "done: rollout undo deployment web/api to revision 1 (from 2) on cluster prod; "
            f"approved by {BOB}; resourceVersion {rv} → "
        )
        fake_anthropic.assert_complete()
    (write,) = fake_kube.writes()  # exactly one change, with the precondition the card showed
    assert write.method == "PATCH" and write.path == "/apis/apps/v1/namespaces/web/deployments/api"
    assert write.body["metadata"]["resourceVersion"] == rv
    after = fake_kube.get("Deployment", NS, "api")
    assert after is not None and after["spec"]["template"]["spec"]["containers"][0]["image"] == "api:1.41"
    logs = [r for r in fake_kube.requests if r.path.endswith("/log")]
    assert [r.query.get("previous") for r in logs] == ["true"]


async def test_an_object_changed_between_card_and_click_is_not_written_and_a_new_card_asks(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    d = crashloop(fake_kube)
    args = {"name": "api", "replicas": 6, "namespace": NS}
    fake_anthropic.script(
        reply(tool_use("k8s_scale", args)),
        reply(text("It changed; asking again."), tool_use("k8s_scale", args)),
        reply(text("Scaled to 6.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        channel, ts = await env.mention("scale api to 6")
        first = await env.card(channel, ts, timeout=30)
        assert "spec.replicas: 3 → 6" in text_of(first)
        assert f"resourceVersion: {d['metadata']['resourceVersion']}" in text_of(first)
        moved = fake_kube.touch("Deployment", NS, "api", {"spec": {"replicas": 4}})  # an HPA, a colleague…
        await env.approve(first, BOB)
        second = await env.card(channel, ts, where=lambda m: m.ts != first.ts, timeout=30)
        assert "spec.replicas: 4 → 6" in text_of(second)
        assert f"resourceVersion: {moved['metadata']['resourceVersion']}" in text_of(second)
        assert fake_kube.writes() == []  # the approved card's change was not made
        refused = result_text(tool_results(fake_anthropic.requests[1])[0])
        assert "deployment web/api changed since the card was shown" in refused
        assert "nothing was changed" in refused
        await env.approve(second, BOB)
        await env.wait_final(channel, ts, timeout=30)
        assert card_state(await env.card(channel, ts, state=None)) == "approved"
        fake_anthropic.assert_complete()
    (write,) = fake_kube.writes()
    assert write.body == {
        "metadata": {"resourceVersion": moved["metadata"]["resourceVersion"]},
        "spec": {"replicas": 6},
    }


async def test_a_403_in_the_middle_of_a_run_stops_it_with_permission_denied(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    crashloop(fake_kube)
    fake_kube.deny("get", "pods/log", NS)
    fake_anthropic.script(
        reply(tool_use("k8s_get", {"kind": "pods", "namespace": NS})),
        reply(tool_use("k8s_logs", {"pod": POD, "previous": True, "namespace": NS})),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        channel, ts = await env.mention("why is api crashing?")
        report = text_of(await env.wait_final(channel, ts, timeout=30))
        assert "permission_denied" in report
        assert "forbids get pods/log in namespace web" in report
        assert len(fake_anthropic.requests) == 2  # never handed to the model to work around
        assert env.runs()[0].stop_reason == "permission_denied"


async def test_four_reads_in_one_turn_run_concurrently(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    crashloop(fake_kube)
    fake_anthropic.script(
        reply(
            tool_use("k8s_get", {"kind": "pods", "namespace": NS}),
            tool_use("k8s_get", {"kind": "deployments", "namespace": NS}),
            tool_use("k8s_events", {"namespace": NS}),
            tool_use("k8s_logs", {"pod": POD, "previous": True, "namespace": NS}),
        ),
        reply(text("Looked at all four.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        fake_kube.delay_s = 0.3
        channel, ts = await env.mention("api: what is going on?")
        await env.wait_final(channel, ts, timeout=30)
        results = tool_results(fake_anthropic.requests[1])
        assert len(results) == 4 and not any(r.get("is_error") for r in results)
    # Each read's first request was in flight at the same time as the other three (the fake counts them).
    assert fake_kube.max_in_flight >= 4


def _revision(kube: FakeKube, n: int) -> dict:
    return next(
        rs
        for rs in kube.objects("ReplicaSet", NS)
        if rs["metadata"]["annotations"].get("deployment.kubernetes.io/revision") == str(n)
    )


@pytest.mark.parametrize("between", ["template_changed", "revision_replaced"])
async def test_an_undo_whose_target_revision_changed_after_the_card_writes_nothing_and_asks_a_new_card(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube, between: str
) -> None:
    from tests.support.fakes.kube import replicaset

    d = crashloop(fake_kube)
    undo = {"name": "api", "namespace": NS}
    fake_anthropic.script(
        reply(tool_use("k8s_rollout_undo", undo)),
        reply(text("The revision changed; asking again."), tool_use("k8s_rollout_undo", undo)),
        reply(text("Rolled back.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        channel, ts = await env.mention("roll api back")
        first = await env.card(channel, ts, timeout=30)
        assert IMAGE_DIFF in text_of(first)
        target = _revision(fake_kube, 1)
        if between == "template_changed":  # the ReplicaSet's template edited: the Deployment's rv stays
            fake_kube.touch(
                "ReplicaSet",
                NS,
                target["metadata"]["name"],
                {"spec": {"template": {"spec": {"containers": [{"name": "api", "image": "api:1.40"}]}}}},
            )
            image = "api:1.40"
        else:  # the revision the card named deleted, another made with its number
            fake_kube.remove("ReplicaSet", NS, target["metadata"]["name"])
            fake_kube.add(replicaset(d, revision=1, containers=[{"name": "api", "image": "api:2.0-debug"}]))
            image = "api:2.0-debug"
        assert fake_kube.get("Deployment", NS, "api")["metadata"]["resourceVersion"] == d["metadata"]["resourceVersion"]
        await env.approve(first, BOB)
        second = await env.card(channel, ts, where=lambda m: m.ts != first.ts, timeout=30)
        assert fake_kube.writes() == []  # the approved card's change was not made
        refused = result_text(tool_results(fake_anthropic.requests[1])[0])
        assert "deployment web/api changed since the card was shown" in refused and "nothing was changed" in refused
        assert f"api:1.42 → {image}" in text_of(second)
        await env.approve(second, BOB)
        await env.wait_final(channel, ts, timeout=30)
        fake_anthropic.assert_complete()
    assert len(fake_kube.writes()) == 1  # what the second card showed, and only that
    after = fake_kube.get("Deployment", NS, "api")
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == image


async def test_a_write_on_an_argo_managed_deployment_warns_on_its_card_that_argo_may_revert_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, fake_kube: FakeKube
) -> None:
    argo_managed(fake_kube)
    fake_anthropic.script(
        reply(text("Restarting api."), tool_use("k8s_rollout_restart", {"name": "api", "namespace": NS})),
        reply(text("Denied; leaving it.")),
    )
    async with bot_env(tmp_path, fake_slack, fake_anthropic, config(fake_kube, tmp_path)) as env:
        channel, ts = await env.mention("restart api")
        card = await env.card(channel, ts, timeout=30)
        shown = text_of(card)
        assert "GitOps manages this object: Argo CD application shop-api" in shown
        assert "repo https://git.example.com/ops/deploy, path apps/api/deployment.yaml" in shown
        assert "Its controller may revert this change at its next sync" in shown
        await env.deny(card, BOB)
        await env.wait_final(channel, ts, timeout=30)
    assert fake_kube.writes() == []
