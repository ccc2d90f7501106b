"""The start-up checks `opsloop run` and `opsloop check` share: one list, so `check` passes exactly when `run`
would start. Each check returns its problems (one line each) and warnings; neither prints."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bot.backends import describe, is_postgres
from bot.config import Settings, missing_for_run
from bot.unreachable import is_unreachable, reason, unreachable

CONFIG_FILE = "opsloop.toml"  # looked for in the working directory after --config and $OPSLOOP_CONFIG


# --- the texts these checks say (one voice with bot.config's and bot.check's) -------------------------------
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
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


Check = Callable[[Settings, Listen, Findings, bool], Awaitable[None]]


async def tokens(settings: Settings, listen: Listen, out: Findings, strict: bool) -> None:
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


def reach_addresses(settings: Settings) -> list[tuple[str, str, int]]:
    """What each configured reach serves (a reach's optional `listens(config)`: the changes webhook)."""
    from tools.reaches import REACHES

    found: list[tuple[str, str, int]] = []
    for reach in REACHES:
        config, listens = settings.reaches.get(reach.name), getattr(reach, "listens", None)
        if config is not None and listens is not None:
            found += listens(config)
    return found


def _addresses(settings: Settings, listen: Listen) -> list[tuple[str, str, int]]:
    found = []
    if not settings.slack_app_token:
        found.append(("HTTP mode (--port)", listen.host, listen.port))
    if settings.alerts.webhook is not None:
        found.append(("alerts.webhook", settings.alerts.webhook.host, settings.alerts.webhook.port))
    found += reach_addresses(settings)
    if listen.metrics_port is not None:
        found.append(("metrics (--metrics-port)", listen.metrics_host, listen.metrics_port))
    return found


async def addresses(settings: Settings, listen: Listen, out: Findings, strict: bool) -> None:
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


async def store(settings: Settings, listen: Listen, out: Findings, strict: bool) -> None:
    """A SQLite file's directory must exist (`run` creates the file, not its directory)."""
    if (parent := _missing_directory(settings.db_path)) is not None:
        out.problems.append(f"store: {describe(settings.db_path)}: the directory {parent} does not exist")


async def prometheus(settings: Settings, listen: Listen, out: Findings, strict: bool) -> None:
    """[tools.prometheus] url answers /-/ready (a warning: the tools say so again when asked)."""
    prom = settings.tools.get("prometheus")
    url = prom.get("url") if isinstance(prom, dict) else None
    if not isinstance(url, str) or not url:
        return
    import aiohttp

    ready = f"{url.rstrip('/')}/-/ready"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), trust_env=True) as client:
            async with client.get(ready) as answer:
                status = answer.status
    except Exception as e:
        what = unreachable(e, url, proxy=settings.proxy, timeout_s=5) if is_unreachable(e) else reason(e)
        out.warnings.append(f"prometheus: {ready}: {what}")
        return
    if status != 200:
        out.warnings.append(f"prometheus: {ready} answered {status}")


CHECKS: tuple[Check, ...] = (tokens, addresses, store, prometheus)


async def preflight(settings: Settings, listen: Listen, *, strict: bool) -> Findings:
    """Every start-up check; `strict` (opsloop check) also fails on a Slack it cannot reach."""
    out = Findings()
    for check in CHECKS:
        await check(settings, listen, out, strict)
    return out
