"""`opsloop check`: the tool table, the Slack token, the model — and one line per problem."""

from __future__ import annotations

from bot.app.check import check
from bot.app.settings import load_settings
from tests.conftest import API_KEY
from tests.support.fakes.anthropic import error, reply, text


def env_for(fake_slack, fake_anthropic, **over):
    env = {
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_APP_TOKEN": fake_slack.app_token,
        "SLACK_API_URL": fake_slack.api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
    }
    env.update(over)
    return env


async def test_check_prints_the_tool_table_and_passes(fake_slack, fake_anthropic, capsys):
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    settings = load_settings(None, env=env_for(fake_slack, fake_anthropic))
    assert await check(settings) == 0
    out = capsys.readouterr().out
    assert "clean_logs" in out and "destructive" in out and "restart_service" in out and "builtin" in out
    assert "slack: ok, bot user UBOT" in out
    assert "model: ok, claude-sonnet-5-5" in out and "model: ok, claude-haiku-5-5" in out
    assert [r.body["model"] for r in fake_anthropic.requests] == ["claude-sonnet-5-5", "claude-haiku-5-5"]
    assert fake_anthropic.requests[0].body["max_tokens"] == 1


async def test_check_warns_about_a_deprecated_model_and_names_its_replacement(
    fake_slack, fake_anthropic, tmp_path, capsys
):
    config = tmp_path / "opsloop.toml"
    config.write_text(
        '[model]\nprimary = "claude-opus-4-5"\nfallbacks = ["claude-haiku-5-5"]\n[approvals]\napprovers = ["U1"]\n'
    )
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "opsloop: warning: model claude-opus-4-5 is deprecated and retires on 2027-01-22; "
        "replace it with claude-opus-5-5 in [model]"
    ]


async def test_check_fails_on_a_retired_model_without_asking_the_api(fake_slack, fake_anthropic, tmp_path, capsys):
    config = tmp_path / "opsloop.toml"
    config.write_text(
        '[model]\nprimary = "claude-sonnet-4-5"\nfallbacks = ["claude-haiku-5-5"]\n[approvals]\napprovers = ["U1"]\n'
    )
    fake_anthropic.script(reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "opsloop: error: model claude-sonnet-4-5 is retired (since 2026-11-30); replace it with claude-sonnet-5-5 "
        "in [model]"
    ]
    assert [r.body["model"] for r in fake_anthropic.requests] == ["claude-haiku-5-5"]


async def test_check_reports_an_unknown_model_from_the_api_404(fake_slack, fake_anthropic, tmp_path, capsys):
    config = tmp_path / "opsloop.toml"
    config.write_text('[model]\nprimary = "claude-sonnet-9-9"\nfallbacks = []\n[approvals]\napprovers = ["U1"]\n')
    fake_anthropic.script(error(404, "not_found_error", "model: claude-sonnet-9-9"))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 1  # run would start
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "opsloop: error: model: claude-sonnet-9-9: not found: retired, misspelt or not available to this API key"
    ]


async def test_check_warns_when_anyone_may_approve(fake_slack, fake_anthropic, capsys):
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(None, env=env_for(fake_slack, fake_anthropic))) == 0
    err = capsys.readouterr().err
    assert "anyone in the channel may approve mutating calls" in err
    assert "anyone in the channel may approve them" in err


async def test_check_reports_each_problem_on_its_own_line(fake_slack, fake_anthropic, tmp_path, capsys):
    config = tmp_path / "opsloop.toml"
    config.write_text('[tools]\nmodules = ["tools.builtin", "no_such_module"]\n')
    settings = load_settings(
        config, env=env_for(fake_slack, fake_anthropic, SLACK_BOT_TOKEN="xoxb-wrong", ANTHROPIC_API_KEY="sk-ant-wrong")
    )
    assert await check(settings) == 2
    err = capsys.readouterr().err.splitlines()
    err = [line for line in err if not line.startswith("opsloop: warning:")]
    assert len(err) == 3
    assert "tools.modules" in err[0] and "no_such_module" in err[0]
    assert err[1] == "opsloop: error: slack: auth.test failed: invalid_auth"
    assert err[2].startswith("opsloop: error: model: claude-sonnet-5-5: AuthenticationError")


async def test_check_prints_the_effective_approval_policy(fake_slack, fake_anthropic, tmp_path, capsys):
    config = tmp_path / "opsloop.toml"
    config.write_text(
        '[approvals]\napprovers = ["U1", "S0ONCALL"]\ndestructive_approvers = ["U9"]\n'
        "four_eyes_on_mutating = true\ndestructive_required_approvals = 2\n"
    )
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 0
    policy = [line for line in capsys.readouterr().out.splitlines() if line.startswith("approvals:")]
    assert policy == [
        "approvals: mutating calls: 1 approval from U1, S0ONCALL (user group), not by whoever asked for the call "
        "(the run's requester, or anyone who asked in the thread); anyone allowed may deny",
        "approvals: destructive calls: 2 approvals from U9, not by whoever asked for the call (the run's "
        "requester, or anyone who asked in the thread); anyone allowed may deny",
        "approvals: read-only calls run without asking; a card nobody decides expires after 30 minutes (no consent)",
    ]


async def test_check_prints_todays_default_policy(fake_slack, fake_anthropic, capsys):
    fake_anthropic.script(reply(text("pong")), reply(text("pong")))
    await check(load_settings(None, env=env_for(fake_slack, fake_anthropic)))
    policy = [line for line in capsys.readouterr().out.splitlines() if line.startswith("approvals:")]
    assert policy[:2] == [
        "approvals: mutating calls: 1 approval from anyone in the channel, including whoever asked for the call; "
        "anyone allowed may deny",
        "approvals: destructive calls: 1 approval from anyone in the channel, not by whoever asked for the call "
        "(the run's requester, or anyone who asked in the thread); anyone allowed may deny",
    ]


async def test_check_shows_what_each_kubernetes_cluster_allows_and_fails_when_one_is_down(
    fake_slack, fake_anthropic, fake_kube, tmp_path, capsys
):
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    config = tmp_path / "opsloop.toml"
    config.write_text(
        '[approvals]\napprovers = ["U1"]\n[tools]\nmodules = ["tools.builtin", "tools.k8s"]\n'
        f'[[kubernetes.clusters]]\nname = "prod"\nkubeconfig = "{kubeconfig}"\nnamespaces = ["web"]\n'
    )
    fake_kube.deny("delete", "pods", "web")
    fake_anthropic.script(reply(text("pong")), reply(text("pong")), reply(text("pong")), reply(text("pong")))
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"kubernetes cluster prod: {fake_kube.url}") for line in out)
    assert "  k8s_delete_pod        no: cannot delete pods" in out

    await fake_kube.down()  # run would start (the cluster's tools say it is down): exit 1, not 2
    assert await check(load_settings(config, env=env_for(fake_slack, fake_anthropic))) == 1
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert any(line.startswith("opsloop: error: kubernetes cluster prod: cannot reach cluster prod") for line in err)
    assert captured.out.splitlines()[-1] == "1 problem: run would start, but can't reach or use what it names now"
