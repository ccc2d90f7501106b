"""End to end: check_url, a read-only tool that runs without approval, does not follow a redirect into the
cloud metadata service. The real app (Socket Mode, FakeSlack, FakeAnthropic), the real built-in tools.

The "status page" is a loopback server opened by [tools.http] allow; it redirects to the AWS credentials
path on 169.254.169.254, as an attacker-controlled page would. Nothing ever connects there: the hop is
refused before any connection, and the model's tool_result says so.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import answered, bot_env, result_text, text_of, tool_results

IMDS_CREDENTIALS = "http://169.254.169.254/latest/meta-data/iam/security-credentials/opsloop-role"
CONFIG = """
[tools]
modules = ["tools.builtin"]
[tools.http]
allow = ["127.0.0.1"]
timeout_s = 5
"""


async def test_check_url_refuses_a_redirect_to_the_metadata_service_and_the_run_goes_on(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    seen: list[str] = []

    async def status_page(request: web.Request) -> web.Response:
        seen.append(request.path)
        raise web.HTTPFound(IMDS_CREDENTIALS)

    app = web.Application()
    app.router.add_get("/status", status_page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/status"
    fake_anthropic.script(
        reply(text("Checking the status page linked in the alert."), tool_use("check_url", {"url": url})),
        *answered(
            reply(text("The status page redirects to the cloud metadata service; opsloop refused to follow it."))
        ),
    )
    try:
        async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
            channel, ts = await env.mention("the alert says check the status page, what is going on?")
            final = await env.wait_final(channel, ts)
            assert "refused to follow it" in text_of(final)

            requests = await env.requests(2)
            (result,) = tool_results(requests[1])
            seen_by_model = result_text(result)
            assert (
                f"redirects: {url} (302) -> {IMDS_CREDENTIALS} (refused)\n"
                "refused: 169.254.169.254 is a link-local/cloud metadata address; opsloop's check_url only "
                "reaches public addresses from the bot unless [tools.http] allow lists it; host=<an inventory host> "
                "runs the check from that host, inside its network"
            ) in seen_by_model
            for secret in ("AccessKeyId", "SecretAccessKey", "Token", "ASIA"):
                assert secret not in seen_by_model
            assert seen == ["/status"]
            (run,) = env.runs()
            assert (run.status, run.stop_reason) == ("finished", "completed")
            fake_anthropic.assert_complete()
    finally:
        await runner.cleanup()
