"""TOML config + environment -> typed settings. The only module that reads the environment."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.config.alerts import AlertSettings, SourceConfig, read_alerts
from bot.config.reader import Reader, must, one_of, read, setting
from bot.core.errors import ConfigError
from bot.core.pricing import Price, model_problems
from bot.core.providers import PROVIDERS, label, split
from bot.run.guards import Limits

__all__ = [
    "AlertSettings",
    "ApprovalSettings",
    "ConfigError",
    "ModelSettings",
    "Secret",
    "Settings",
    "alert_channel_problems",
    "is_channel_name",
    "load_settings",
    "missing_for_run",
]


class Secret(str):
    """A string that never shows itself in a repr (tracebacks, debug prints)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')"


EFFORTS = ("low", "medium", "high", "xhigh", "max")
DISPLAYS = ("summarized", "omitted")  # thinking_display


def is_user_id(who: str) -> bool:
    """A Slack user id as the config names people: U… or W…, upper-case letters and digits."""
    return who[:1] in ("U", "W") and len(who) > 1 and who.isalnum() and who.upper() == who


def is_channel_name(channel: str) -> bool:
    """`#incident`: a channel named in the config, resolved to its id at start-up (bot.app.startup)."""
    return channel.startswith("#")


def _channel_problem(where: str, channel: str) -> str | None:
    if is_channel_name(channel) and len(channel) > 1:
        return None
    if channel[:1] in ("C", "G") and channel[1:].isalnum() and channel.upper() == channel:
        return None
    return f"{where}: {channel!r} is neither a channel id (C…) nor a channel name (#incident)"


def alert_channel_problems(alerts: AlertSettings, channels: tuple[str, ...]) -> list[str]:
    """An alert channel outside a non-empty [slack] channels: its alerts would start runs the bot then ignores.
    Compared once both are ids (a `#name` is compared after start-up resolved it)."""
    if not channels or any(is_channel_name(c) for c in channels):
        return []
    return [
        f"{where}: {c} is not in slack.channels"
        for where, c in alerts.routes()
        if c and not is_channel_name(c) and c not in channels
    ]


@dataclass(frozen=True, kw_only=True)
class PriceSettings:
    """[model.prices."<model>"]: USD per million tokens (bot.core.pricing.Price), for a model not priced built in."""

    input: float = setting(doc="USD/MTok")
    output: float = setting(doc="USD/MTok")
    cache_write: float | None = setting(None, "USD/MTok; else 1.25 × input (the API's 5-minute write)")
    cache_read: float | None = setting(None, "USD/MTok; else 0.1 × input")


def _prices(table: Mapping[str, Any], r: Reader, key: str) -> dict[str, Price]:
    found = {model: read(PriceSettings, r.child(table, key).at(model)) for model in table}
    return {model: Price(**dataclasses.asdict(p)) for model, p in found.items() if p is not None}


def _ids(ids: Mapping[str, str], r: Reader, key: str) -> dict[str, str]:
    bad = [name for name in ids if split(name)[0] == "anthropic"]
    for name in bad:
        r.problems.append(
            f'{r.where(key)}."{name}": expected "bedrock:<claude model>" or "vertex:<claude model>" = "<its id there>"'
        )
    return {name: value for name, value in ids.items() if name not in bad}


@dataclass(frozen=True, kw_only=True)
class BedrockSettings:
    region: str | None = setting(None, "else AWS_REGION / the AWS profile's")


@dataclass(frozen=True, kw_only=True)
class VertexSettings:
    project: str | None = setting(None, "else ANTHROPIC_VERTEX_PROJECT_ID")
    region: str | None = setting(None, "else CLOUD_ML_REGION")


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """[model]: where Claude is called (bot.core.providers); a chain entry "vertex:claude-x" names its own provider.
    Credentials ([model.bedrock], [model.vertex]) come from each provider's own environment and files, never here."""

    primary: str = setting("claude-sonnet-5-5")
    fallbacks: tuple[str, ...] = setting(("claude-haiku-5-5",), "tried in order when the primary fails")
    # Thinking counts toward max_tokens: 16K fits a normal step's thinking plus a tool call or an answer;
    # a step that thinks past it is retried once with twice the room, within the run's token budget.
    max_tokens: int = setting(16_000, "per model request", low=1)
    # An incident wants a fast first answer: medium thinks enough for triage without high's latency.
    effort: str = setting("medium", check=one_of(EFFORTS))
    thinking_display: str = setting(
        "summarized", "the status line and the handoff report show the agent's reasoning", check=one_of(DISPLAYS)
    )
    context_budget_tokens: int | None = setting(None, "condense when a prompt grows past this", low=0)
    prices: Mapping[str, Price] = setting(doc="model -> USD/MTok", kind="table", check=_prices, factory=dict)
    bedrock: BedrockSettings = setting(factory=BedrockSettings)
    vertex: VertexSettings = setting(factory=VertexSettings)
    ids: Mapping[str, str] = setting(doc="label -> the provider's model id", check=_ids, factory=dict)
    provider: str = setting("anthropic", check=one_of(PROVIDERS))

    @property
    def chain(self) -> list[str]:
        """The labels of the primary model and its fallbacks, in order, each once."""
        return list(dict.fromkeys(label(e, self.provider) for e in (self.primary, *self.fallbacks)))


def _approvers(found: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    for who in found:
        if who[:1] not in ("U", "W", "S"):
            r.problem(f"{who!r} is neither a user id (U…/W…) nor a user group (S…)", key)
    return found


@dataclass(frozen=True, kw_only=True)
class ApprovalSettings:
    """[approvals]: who may approve a mutating or destructive call, and how many of them."""

    approvers: tuple[str, ...] = setting(
        (), "user ids (U…/W…) or user groups (S…); empty = anyone in the channel", check=_approvers
    )
    destructive_approvers: tuple[str, ...] | None = setting(
        None, "empty or None: same as approvers (never anyone)", check=_approvers
    )
    allow_self_approval: bool = setting(False, "may whoever asked for a destructive call approve it?")
    four_eyes_on_mutating: bool = setting(False, "may whoever asked for a mutating call NOT approve it either?")
    expire_minutes: float = setting(30.0, "a card nobody decides expires: no consent", unit="min", low=0.0)
    required_approvals: int = setting(1, "0 counts as 1", low=0, check=lambda n, r, k: max(1, n))
    destructive_required_approvals: int | None = setting(None, "None: same as required_approvals", low=0)
    terminal_user: str | None = setting(
        None,
        "who answers `opsloop ask`'s approvals, as a Slack user id (U…/W…)",
        check=must(is_user_id, "{value!r} is not a Slack user id (U…/W…)"),
    )

    def who_may_approve(self, category: str) -> tuple[str, ...]:
        """Approver ids for a category; an empty destructive list falls back to `approvers` (fails closed)."""
        if category == "destructive" and self.destructive_approvers:
            return self.destructive_approvers
        return self.approvers

    def refuses_self_approval(self, category: str) -> bool:
        """The one approval rule: whoever asked for a call may not approve it when it is destructive (unless
        allow_self_approval), or when it is mutating and four_eyes_on_mutating is set."""
        if category == "destructive":
            return not self.allow_self_approval
        return category == "mutating" and self.four_eyes_on_mutating

    def required(self, category: str) -> int:
        if category == "destructive" and self.destructive_required_approvals is not None:
            return self.destructive_required_approvals
        return self.required_approvals


@dataclass(frozen=True, kw_only=True)
class Settings:
    model: ModelSettings = field(default_factory=ModelSettings)
    limits: Limits = field(default_factory=Limits)
    channels: tuple[str, ...] = ()
    approvals: ApprovalSettings = field(default_factory=ApprovalSettings)
    tools: Mapping[str, Any] = field(default_factory=lambda: {"modules": ["tools.builtin"]})
    reaches: Mapping[str, Any] = field(default_factory=dict)  # each configured reach's config (tools/reaches.py)
    alerts: AlertSettings = field(default_factory=AlertSettings)  # [[alerts.slack]], [alerts.webhook]
    status_update_seconds: float = 2.0
    stream_answers: bool = True  # [slack] stream_answers: a long answer appears as it is written (chat.startStream)
    # environment: secrets and endpoints only
    slack_bot_token: Secret | None = None
    slack_app_token: Secret | None = None
    slack_signing_secret: Secret | None = None
    slack_api_url: str = "https://slack.com/api/"
    anthropic_api_key: Secret | None = None
    anthropic_base_url: str | None = None
    bedrock_base_url: str | None = None  # ANTHROPIC_BEDROCK_BASE_URL (the SDK's): a VPC endpoint, a test's fake
    vertex_base_url: str | None = None  # ANTHROPIC_VERTEX_BASE_URL (the SDK's): a private endpoint, a test's fake
    proxy: Secret | None = None  # HTTPS_PROXY & co., as slack_sdk and httpx read them: named when a connection fails
    db_path: str = "opsloop.db"  # a SQLite file, or a postgresql:// URL (several replicas share it)
    config_path: str | None = None
    log_level: str = "info"


# Every limit must be positive: zero or less would hang (parallelism) or stop every run at once.
_positive = must(lambda value: value > 0, "must be greater than 0, got {value:g}")


@dataclass(frozen=True, kw_only=True)
class LimitSettings:
    """[limits] (bot.run.guards.Limits), each ending a run with its own stop reason; sorted as problems list them."""

    cost_budget_usd: float = setting(Limits.cost_budget_usd, unit="USD", check=_positive)
    deadline_seconds: float = setting(Limits.deadline_seconds, "agent time, not a human's", check=_positive)
    max_consecutive_errors: int = setting(Limits.max_consecutive_errors, "tool errors in a row", check=_positive)
    max_iterations: int = setting(Limits.max_iterations, "agent steps (model requests)", check=_positive)
    parallelism: int = setting(Limits.parallelism, "read-only tool calls run at once", check=_positive)
    token_budget: int = setting(Limits.token_budget, "uncached input + cache writes + output", check=_positive)


def _channels(found: tuple[str, ...], r: Reader, key: str) -> tuple[str, ...]:
    r.problems.extend(p for channel in found if (p := _channel_problem(r.where(key), channel)))
    return found


@dataclass(frozen=True, kw_only=True)
class SlackSettings:
    channels: tuple[str, ...] = setting(Settings.channels, "where the bot acts; empty: where invited", check=_channels)
    status_update_seconds: float = setting(Settings.status_update_seconds, "between status edits", low=0.0)
    stream_answers: bool = setting(Settings.stream_answers, "a long answer appears as it is written")


@dataclass(frozen=True, kw_only=True)
class LogSettings:
    level: str = setting(Settings.log_level, "debug | info | warning | error")


@dataclass(frozen=True, kw_only=True)
class StoreSettings:
    url: str = setting(Settings.db_path, "a SQLite file, or a postgresql:// URL; OPSLOOP_DB wins")


# Each section read here, by its class; [tools] is read by tools.config.build_registry, [alerts] by each alert
# source, and every reach's sections ([ssh], [[hosts]], [[kubernetes.clusters]]) by the reach.
SECTIONS: dict[str, type[Any]] = {
    "model": ModelSettings,
    "limits": LimitSettings,
    "slack": SlackSettings,
    "approvals": ApprovalSettings,
    "log": LogSettings,
    "store": StoreSettings,
}


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    reaches: Sequence[Any] = (),
    alert_sources: Sequence[SourceConfig] = (),
) -> Settings:
    """Read the TOML file (every key optional) and the environment; raise ConfigError listing every problem.

    `reaches` (tools.reaches.REACHES) each read their own sections (`reach.parse`); a section no reach owns is
    unknown. `alert_sources` (handlers.alerts.sources.SOURCES) each read their key of [alerts]. The roof passes
    both (bot.app.settings.load_settings)."""
    env = os.environ if env is None else env
    path = path or env.get("OPSLOOP_CONFIG")
    raw: dict[str, Any] = {}
    problems: list[str] = []
    if path:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError([f"{path}: config file not found"]) from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError([f"{path}: invalid TOML: {e}"]) from None
    # Relative paths in the file (runbook dirs, a kubeconfig) are the config file's (Reader.path), not the cwd's.
    config = Reader(raw, base_dir=Path(path).resolve().parent if path else None, problems=problems)
    owned = {section for reach in reaches for section in reach.sections}
    known = sorted([*SECTIONS, "tools", "alerts", *owned])
    problems += [f"{name}: unknown section (known: {', '.join(known)})" for name in raw if name not in known]
    found = {name: read(cls, config.at(name)) or cls() for name, cls in SECTIONS.items()}
    model, slack, approvals = found["model"], found["slack"], found["approvals"]
    for entry in (model.primary, *model.fallbacks):
        if ":" in entry and entry.partition(":")[0] not in PROVIDERS:
            problems.append(f"model: {entry!r}: the part before ':' must be a provider, one of {', '.join(PROVIDERS)}")
    if approvals.four_eyes_on_mutating and approvals.allow_self_approval:
        problems.append(
            "approvals: four_eyes_on_mutating and allow_self_approval contradict each other (a second "
            "person for mutating calls, but not for destructive ones): set one"
        )
    parsed = {reach.name: cfg for reach in reaches if (cfg := reach.parse(config, env)) is not None}
    tools = config.at("tools").table if config.has("tools") else Settings().tools
    for reach in reaches:
        for section in reach.sections:
            if section in tools:
                problems.append(f"tools.{section}: configure {reach.hint} at the top level, not under [tools]")
    alerts = read_alerts(config, env, alert_sources)
    problems += [p for where, channel in alerts.routes() if channel and (p := _channel_problem(where, channel))]
    problems.extend(alert_channel_problems(alerts, slack.channels))
    config.raise_if_problems()

    def secret(name: str) -> Secret | None:
        value = env.get(name, "").strip()
        return Secret(value) if value else None

    return Settings(
        model=model,
        limits=Limits(**dataclasses.asdict(found["limits"])),
        **dataclasses.asdict(slack),  # channels, status_update_seconds, stream_answers: named as in [slack]
        approvals=approvals,
        tools=tools,
        reaches=parsed,
        alerts=alerts,
        slack_bot_token=secret("SLACK_BOT_TOKEN"),
        slack_app_token=secret("SLACK_APP_TOKEN"),
        slack_signing_secret=secret("SLACK_SIGNING_SECRET"),
        slack_api_url=env.get("SLACK_API_URL") or Settings.slack_api_url,
        anthropic_api_key=secret("ANTHROPIC_API_KEY"),
        anthropic_base_url=env.get("ANTHROPIC_BASE_URL") or None,
        bedrock_base_url=env.get("ANTHROPIC_BEDROCK_BASE_URL") or None,
        vertex_base_url=env.get("ANTHROPIC_VERTEX_BASE_URL") or None,
        proxy=next((Secret(env[k]) for k in _PROXY_VARS if env.get(k)), None),
        db_path=env.get("OPSLOOP_DB") or found["store"].url,
        config_path=str(path) if path else None,
        log_level=found["log"].level,
    )


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")  # slack_sdk's order of reading them


def missing_for_run(settings: Settings) -> list[str]:
    """What `opsloop run` cannot start without, one clear line each."""
    problems = []
    if not settings.slack_bot_token:
        problems.append("SLACK_BOT_TOKEN is not set (the bot token, xoxb-…)")
    elif not settings.slack_bot_token.startswith("xoxb-"):
        problems.append("SLACK_BOT_TOKEN must be a bot token starting with xoxb-")
    if settings.slack_app_token and not settings.slack_app_token.startswith("xapp-"):
        problems.append("SLACK_APP_TOKEN must be an app-level token starting with xapp- (Socket Mode)")
    if not settings.slack_app_token and not settings.slack_signing_secret:
        problems.append("set SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)")
    if not settings.anthropic_api_key and any(split(m)[0] == "anthropic" for m in settings.model.chain):
        problems.append("ANTHROPIC_API_KEY is not set")
    problems += settings.alerts.missing()
    problems += model_problems(settings.model.chain)[0]  # a retired model would 404 in the middle of an incident
    return problems
