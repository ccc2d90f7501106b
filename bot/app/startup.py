"""The start-up checks `opsloop run` and `opsloop check` share: one list, so `check` passes exactly when `run`
would start. A problem stops both (exit 2, one line each); a warning is printed by `check` and logged by `run`
(`startup.warning`). Each check records its findings; none prints."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bot.config.settings import Settings, alert_channel_problems, is_channel_name, missing_for_run
from bot.core.errors import ConfigError
from bot.core.unreachable import is_unreachable, reason, unreachable
from bot.store.backends import describe, is_postgres

CONFIG_FILE = "opsloop.toml"  # looked for in the working directory after --config and $OPSLOOP_CONFIG


# --- the texts these checks say (one voice with bot.config.settings's and bot.app.check's) ----------------------------
def loaded_config(path: str, how: str) -> str:
    return f"config: {path} ({how})"


NO_CONFIG = (
    f"no config file (no --config, no $OPSLOOP_CONFIG, no ./{CONFIG_FILE}): running on the defaults, "
    "so anyone in the channel may approve and no hosts, clusters or alerts are configured"
)


def no_database(where: str) -> str:
    return f"no database at {where} (set --db or $OPSLOOP_DB; `opsloop run` creates it)"


def find_config(given: str | None, env: dict[str, str] | os._Environ[str], cwd: Path) -> tuple[str | None, str]:
    """The config file to load and how it was found: --config, then $OPSLOOP_CONFIG, then ./opsloop.toml."""
    if given:
        return given, "--config"
    if env.get("OPSLOOP_CONFIG"):
        return env["OPSLOOP_CONFIG"], "$OPSLOOP_CONFIG"
    if (cwd / CONFIG_FILE).is_file():
        return str(cwd / CONFIG_FILE), f"./{CONFIG_FILE}"
    return None, ""


@dataclass(frozen=True, kw_only=True)
class Listen:
    """What `opsloop run` will listen on (the HTTP --port only in HTTP mode)."""

    port: int = 3000
    host: str = "0.0.0.0"
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"


@dataclass
class Findings:
    """What the start-up checks found: problems stop `run` (exit 2), warnings don't. `lines`: what `check` prints
    for a reach or for Slack, by name. `settings`: the settings with every `#name` channel resolved to its id
    (None while Slack could not be asked)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lines: dict[str, list[str]] = field(default_factory=dict)
    settings: Settings | None = None


Check = Callable[[Settings, Listen, Findings], Awaitable[None]]


async def tokens(settings: Settings, listen: Listen, out: Findings) -> None:
    """The tokens `run` needs, and a live apps.connections.open for an xapp- token (Socket Mode's first call)."""
    missing = missing_for_run(settings)
    out.problems += missing
    token = settings.slack_app_token
    if missing or not token:
        return
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=token, base_url=settings.slack_api_url, timeout=10)
    try:
        async with asyncio.timeout(10):
            await client.apps_connections_open(app_token=token)
    except SlackApiError as e:
        out.problems.append(
            f"slack: apps.connections.open failed: {e.response.get('error')}: check SLACK_APP_TOKEN "
            "(an app-level token with connections:write)"
        )
    except Exception as e:
        # An unreachable Slack is said once: `run` keeps retrying it (one line per attempt), `check`'s auth.test
        # reports it. Anything else is this token's problem.
        if not is_unreachable(e):
            out.problems.append(f"slack: apps.connections.open failed: {type(e).__name__}: {reason(e)}")


def _addresses(settings: Settings, listen: Listen) -> list[tuple[str, str, int]]:
    """What `run` listens on: HTTP mode, each alert source's port, what each configured reach serves (a reach's
    optional `listens(config)`: the changes webhook) and the metrics."""
    from tools.reaches import REACHES

    found = [("HTTP mode (--port)", listen.host, listen.port)] if not settings.slack_app_token else []
    found += settings.alerts.listens()
    for reach in REACHES:
        config, listens = settings.reaches.get(reach.name), getattr(reach, "listens", None)
        if config is not None and listens is not None:
            found += listens(config)
    if listen.metrics_port is not None:
        found.append(("metrics (--metrics-port)", listen.metrics_host, listen.metrics_port))
    return found


async def addresses(settings: Settings, listen: Listen, out: Findings) -> None:
    """A test bind of every address `run` will listen on."""
    for what, host, port in _addresses(settings, listen):
        if not 0 <= port <= 65535:
            out.problems.append(f"{what}: port {port} is not between 0 and 65535")
            continue
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            for family, kind, proto, _, addr in infos[:1]:
                with socket.socket(family, kind, proto) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
                    s.bind(addr)
        except OSError as e:
            out.problems.append(f"{what}: cannot listen on {host}:{port}: {e.strerror or e}")


def _missing_directory(location: str) -> Path | None:
    if is_postgres(location) or location == ":memory:":
        return None
    parent = Path(location).expanduser().absolute().parent
    return None if parent.is_dir() else parent


async def store(settings: Settings, listen: Listen, out: Findings) -> None:
    """A SQLite file's directory must exist (`run` creates the file, not its directory)."""
    if (parent := _missing_directory(settings.db_path)) is not None:
        out.problems.append(f"store: {describe(settings.db_path)}: the directory {parent} does not exist")


async def prometheus(settings: Settings, listen: Listen, out: Findings) -> None:
    """[tools.prometheus] url answers /-/ready (a warning: the tools say so again when asked)."""
    prom = settings.tools.get("prometheus")
    url = prom.get("url") if isinstance(prom, dict) else None
    if not isinstance(url, str) or not url:
        return
    import aiohttp

    ready = f"{url.rstrip('/')}/-/ready"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), trust_env=True) as client,
            client.get(ready) as answer,
        ):
            status = answer.status
    except Exception as e:
        what = unreachable(e, url, proxy=settings.proxy, timeout_s=5) if is_unreachable(e) else reason(e)
        out.warnings.append(f"prometheus: {ready}: {what}")
        return
    if status != 200:
        out.warnings.append(f"prometheus: {ready} answered {status}")


async def reaches(settings: Settings, listen: Listen, out: Findings) -> None:
    """Each configured reach whose check reads only the configuration and local files (`check_stops_run`: the
    runbook directories and their front matter, the change sources' repositories, the webhook's token): what the
    user configured and is broken stops `run` as it fails `check`. A reach that connects to a backend (SSH hosts,
    clusters) is checked by `check` only: one that can't be reached now does not keep the bot down."""
    from tools.reaches import REACHES

    for reach in REACHES:
        config = settings.reaches.get(reach.name)
        if config is None or not reach.check_stops_run:
            continue
        lines, problems = await reach.check(config)
        out.lines[reach.name] = lines
        out.problems += problems


async def channels(settings: Settings, listen: Listen, out: Findings) -> None:
    """Every `#name` in the config ([slack] channels, the alert channels) resolved to its id, and every alert
    channel seen with the bot in it, through Slack: an unknown name, or an alert channel the bot can't read, is a
    problem. Slack out of reach: `run` resolves the names once it answers, `check` says it cannot reach Slack."""
    if not settings.slack_bot_token or not (has_channel_names(settings) or settings.alerts.channels()):
        out.settings = settings
        return
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url, timeout=10)
    try:
        async with asyncio.timeout(10):
            resolved, lines, warnings = await resolve_channels(settings, client)
    except ConfigError as e:
        out.problems += e.problems
    except SlackApiError as e:
        error = e.response.get("error")
        if error not in ("invalid_auth", "not_authed", "token_revoked", "account_inactive"):  # auth.test says it
            hint = " (add channels:read and groups:read to the app's scopes, see manifest.yml)"
            out.problems.append(f"slack: conversations.list failed: {error}{hint if error == 'missing_scope' else ''}")
    except Exception as e:
        if not is_unreachable(e) and not isinstance(e, TimeoutError):  # unreachable: auth.test and start-up say it
            out.problems.append(f"slack: conversations.list failed: {type(e).__name__}: {reason(e)}")
    else:
        out.settings = resolved
        out.lines["channels"] = lines
        out.warnings += warnings


CHECKS: tuple[Check, ...] = (tokens, addresses, store, reaches, channels, prometheus)


# --- channels named `#name` in the config, resolved at start-up --------------------------------------------
CHANNEL_PAGE = 200  # conversations.list's page (Slack suggests at most 200)


def has_channel_names(settings: Settings) -> bool:
    return any(is_channel_name(c) for c in (*settings.channels, *settings.alerts.channels()))


async def conversations(client: Any) -> list[dict[str, Any]]:
    """Every channel the bot's token can see (public ones, and private ones it is in), all pages."""
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = await client.conversations_list(
            types="public_channel,private_channel", exclude_archived=True, limit=CHANNEL_PAGE, cursor=cursor
        )
        found += [c for c in page.get("channels") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)]
        cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            return found


async def resolve_channels(settings: Settings, client: Any) -> tuple[Settings, list[str], list[str]]:
    """`settings` with every `#name` channel replaced by its id; the lines `check` prints (what each name
    resolved to, each alert channel) and the warnings (a [slack] channel the bot is not in yet). Raises
    ConfigError naming every unknown name and every alert channel the bot is not in; a Slack error is raised as
    it is. Settings without a name or an alert channel are returned unchanged, without asking Slack."""
    if not has_channel_names(settings) and not settings.alerts.channels():
        return settings, [], []
    seen = await conversations(client)
    by_name = {str(c.get("name")): c for c in seen}
    by_id = {str(c["id"]): c for c in seen}
    problems: list[str] = []
    lines: list[str] = []
    warnings: list[str] = []

    def resolved(where: str, channel: str) -> str:
        if not is_channel_name(channel):
            return channel
        found = by_name.get(channel[1:])
        if found is None:
            problems.append(
                f"{where}: no channel {channel} that the bot can see (misspelt, archived, or private without the bot)"
            )
            return channel
        lines.append(f"channels: {channel} is {found['id']} ({where})")
        if where == "slack.channels" and not found.get("is_member"):
            warnings.append(f"slack.channels: the bot is not in {channel} yet; invite it (/invite @opsloop)")
        return str(found["id"])

    settings = replace(
        settings,
        channels=tuple(resolved("slack.channels", c) for c in settings.channels),
        alerts=settings.alerts.with_channels(resolved),
    )
    for channel in dict.fromkeys(settings.alerts.channels()):
        if is_channel_name(channel):
            continue  # unknown: said above
        info = by_id.get(channel)
        if info is None:
            problems.append(f"alerts: channel {channel}: not found (or private, without the bot)")
        elif not info.get("is_member"):
            problems.append(
                f"alerts: channel {channel} (#{info.get('name', '?')}): the bot is not in it; invite it "
                "(/invite @opsloop)"
            )
        else:
            lines.append(f"alerts: ok, channel {channel} (#{info.get('name', '?')})")
    problems += alert_channel_problems(settings.alerts, settings.channels)
    if problems:
        raise ConfigError(problems)
    return settings, lines, warnings


async def preflight(settings: Settings, listen: Listen) -> Findings:
    """Every start-up check, in order."""
    out = Findings()
    for check in CHECKS:
        await check(settings, listen, out)
    return out
