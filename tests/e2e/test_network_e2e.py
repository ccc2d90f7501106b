"""End to end: tls_check, through the real app (Socket Mode, FakeSlack, FakeAnthropic), finds the certificate that
is about to expire on a loopback TLS server ([tools.http] allow opens 127.0.0.1), and the model reads it."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakes.anthropic import FakeAnthropic, reply, text, tool_use
from tests.support.fakes.slack import FakeSlack
from tests.support.harness import bot_env, result_text, text_of, tool_results
from tests.support.netservers import make_chain, tls_server

CONFIG = """
[tools]
modules = ["tools.builtin"]
[tools.http]
allow = ["127.0.0.1"]
"""


async def test_tls_check_finds_the_certificate_about_to_expire(
    tmp_path: Path, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    async with tls_server(make_chain(tmp_path, names=["api.shop.test"], days_left=2.5)) as port:
        fake_anthropic.script(
            reply(
                text("Checking the API's certificate."),
                tool_use("tls_check", {"target_host": "127.0.0.1", "port": port, "server_name": "api.shop.test"}),
            ),
            reply(text("The API certificate expires in 2 days: renew it now.")),
        )
        async with bot_env(tmp_path, fake_slack, fake_anthropic, CONFIG) as env:
            channel, ts = await env.mention("users report TLS warnings on the API, is the certificate ok?")
            final = await env.wait_final(channel, ts)
            assert "expires in 2 days" in text_of(final)
            requests = await env.requests(2)
            (result,) = tool_results(requests[1])
            seen = result_text(result)
    assert "name api.shop.test: matches the certificate" in seen
    assert "1. subject CN=api.shop.test; issuer CN=opsloop test CA" in seen
    assert "(2 days left; EXPIRES SOON, under 14 days)" in seen
