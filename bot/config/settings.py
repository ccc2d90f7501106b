"""TOML config + environment -> typed settings. The only module that reads the environment."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.config.alerts import AlertSettings, SourceConfig, read_alerts
from bot.config.reader import Reader
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


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    primary: str = "claude-sonnet-5-5"
    fallbacks: tuple[str, ...] = ("claude-haiku-5-5",)
    # Thinking counts toward max_tokens: 16K fits a normal step's thinking plus a tool call or an answer;
    # a step that thinks past it is retried once with twice the room, within the run's token budget.
    max_tokens: int = 16_000
    # An incident wants a fast first answer: medium thinks enough for triage without high's latency.
    effort: str = "medium"
    thinking_display: str = "summarized"  # the status line and the handoff report show the agent's reasoning
    context_budget_tokens: int | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    # Where Claude is called (bot.core.providers): a chain entry "vertex:claude-x" names its own provider.
    # Credentials come from each provider's own environment and files, never from this file.
    provider: str = "anthropic"
    bedrock_region: str | None = None  # [model.bedrock] region; else AWS_REGION / the AWS profile's
    vertex_project: str | None = None  # [model.vertex] project; else ANTHROPIC_VERTEX_PROJECT_ID
    vertex_region: str | None = None  # [model.vertex] region; else CLOUD_ML_REGION
    ids: Mapping[str, str] = field(default_factory=dict)  # [model.ids] label -> the provider's model id

    @property
    def chain(self) -> list[str]:
        """The labels of the primary model and its fallbacks, in order, each once."""
        entries = [label(e, self.provider) for e in (self.primary, *self.fallbacks)]
        return list(dict.fromkeys(entries))


@dataclass(frozen=True, kw_only=True)
class ApprovalSettings:
    approvers: tuple[str, ...] = ()  # user ids (U…/W…) or user groups (S…); empty = anyone in the channel
    destructive_approvers: tuple[str, ...] | None = None  # empty or None: same as approvers (never "anyone")
    allow_self_approval: bool = False  # may whoever asked for a destructive call approve it?
    four_eyes_on_mutating: bool = False  # may whoever asked for a mutating call NOT approve it either?
    expire_minutes: float = 30.0
    required_approvals: int = 1
    destructive_required_approvals: int | None = None  # None: same as required_approvals
    terminal_user: str | None = None  # who answers `opsloop ask`'s approvals, as a Slack user id (U…/W…)

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


# key -> (type(s), default) per section; bool is checked before int (bool is an int in Python).
_SCHEMA: dict[str, dict[str, tuple[Any, ...]]] = {
    "model": {
        "primary": (str,),
        "fallbacks": (list,),
        "max_tokens": (int,),
        "context_budget_tokens": (int,),
        "prices": (dict,),
        "effort": (str,),
        "thinking_display": (str,),
        "provider": (str,),
        "bedrock": (dict,),
        "vertex": (dict,),
        "ids": (dict,),
    },
    "limits": {
        "max_iterations": (int,),
        "deadline_seconds": (int, float),
        "token_budget": (int,),
        "cost_budget_usd": (int, float),
        "max_consecutive_errors": (int,),
        "parallelism": (int,),
    },
    "slack": {"channels": (list,), "status_update_seconds": (int, float), "stream_answers": (bool,)},
    "approvals": {
        "approvers": (list,),
        "destructive_approvers": (list,),
        "allow_self_approval": (bool,),
        "four_eyes_on_mutating": (bool,),
        "expire_minutes": (int, float),
        "required_approvals": (int,),
        "destructive_required_approvals": (int,),
        "terminal_user": (str,),
    },
    "tools": {},  # validated by tools.config.build_registry, which knows its own keys
    "log": {"level": (str,)},
    "store": {"url": (str,)},
    "alerts": {},  # validated by _alerts
}  # plus every reach's sections ([ssh], [[hosts]], [[kubernetes.clusters]]): each reach reads its own


def _value(r: Reader, key: str, types: tuple[Any, ...]) -> Any:
    """One key of a _SCHEMA-style table through the reader's accessor for its type (numbers never negative)."""
    if types == (str,):
        return r.str(key, empty_ok=True)
    if types == (list,):
        return r.str_list(key)
    if types == (bool,):
        return r.bool(key)
    if types == (int,):
        return r.int(key, low=0)
    if types == (int, float):
        return r.number(key, low=0)
    table = r.at(key)  # a problem when not a table
    return table.value if isinstance(table.value, Mapping) else None


def _checked(r: Reader, schema: Mapping[str, tuple[Any, ...]]) -> dict[str, Any]:
    """The keys of `r` that `schema` knows and that have the right type; the others are problems on `r`."""
    out: dict[str, Any] = {}
    for key in r.keys():  # noqa: SIM118 (a Reader, not a dict: keys() lists its table's keys)
        if key not in schema:
            r.problem(f"unknown key (known: {', '.join(sorted(schema))})", key)
        elif (value := _value(r, key, schema[key])) is not None:
            out[key] = value
    return out


def _alerts(
    config: Reader, env: Mapping[str, str], channels: tuple[str, ...], sources: Sequence[SourceConfig]
) -> AlertSettings:
    """[alerts], read by each alert source, and its channels checked."""
    found = read_alerts(config, env, sources)
    for where, channel in found.routes():
        if channel and (problem := _channel_problem(where, channel)):
            config.problems.append(problem)
    config.problems.extend(alert_channel_problems(found, channels))
    return found


EFFORTS = ("low", "medium", "high", "xhigh", "max")
# [model] keys taken as read (the others are converted or read into their own fields).
_PLAIN_MODEL_KEYS = ("primary", "max_tokens", "effort", "thinking_display", "context_budget_tokens", "provider")
THINKING_DISPLAYS = ("summarized", "omitted")
_PRICE_KEYS = ("input", "output", "cache_write", "cache_read")
# Every limit must be positive: zero or less would hang (parallelism) or stop every run at once.
_POSITIVE_LIMITS = tuple(_SCHEMA["limits"])


def _prices(table: Mapping[str, Any], problems: list[str]) -> dict[str, Price]:
    prices = {}
    for model, spec in table.items():
        where = f"model.prices.{model}"
        if not isinstance(spec, dict) or not {"input", "output"} <= spec.keys() or not spec.keys() <= set(_PRICE_KEYS):
            problems.append(
                f"{where}: expected {{ input = USD/MTok, output = USD/MTok }} and optionally cache_write, cache_read"
            )
            continue
        try:
            values = {k: float(v) for k, v in spec.items()}
        except (TypeError, ValueError) as e:
            problems.append(f"{where}: {e}")
            continue
        prices[model] = Price(
            input=values["input"],
            output=values["output"],
            cache_write=values.get("cache_write"),
            cache_read=values.get("cache_read"),
        )
    return prices


def _provider_keys(m: Mapping[str, Any], provider: str, keys: tuple[str, ...], problems: list[str]) -> dict[str, str]:
    table = m.get(provider, {})
    for key, value in table.items():
        if key not in keys:
            problems.append(f"model.{provider}.{key}: unknown key (known: {', '.join(keys)})")  # no credentials
        elif not isinstance(value, str) or not value:
            problems.append(f"model.{provider}.{key}: expected a non-empty string")
    return {k: v for k, v in table.items() if k in keys and isinstance(v, str)}


def _ids(table: Mapping[str, Any], problems: list[str]) -> dict[str, str]:
    ids = {}
    for key, value in table.items():
        provider, _ = split(key)
        if provider == "anthropic" or not isinstance(value, str) or not value:
            problems.append(
                f'model.ids."{key}": expected "bedrock:<claude model>" or "vertex:<claude model>" = "<its id there>"'
            )
            continue
        ids[key] = value
    return ids


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
    default = Settings()  # every default is the dataclass field's, written once
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
    sections: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        if name not in _SCHEMA and name not in owned:
            problems.append(f"{name}: unknown section (known: {', '.join(sorted([*_SCHEMA, *owned]))})")
        elif name in owned or name == "alerts":
            continue
        elif not isinstance(table, dict):
            problems.append(f"{name}: expected a table")
        else:
            sections[name] = table if name == "tools" else _checked(config.child(table, name), _SCHEMA[name])
    m, lim, sl, ap = (sections.get(k, {}) for k in ("model", "limits", "slack", "approvals"))
    model = ModelSettings(
        **{k: v for k, v in m.items() if k in _PLAIN_MODEL_KEYS},
        fallbacks=tuple(m.get("fallbacks", default.model.fallbacks)),
        prices=_prices(m.get("prices", {}), problems),
        bedrock_region=_provider_keys(m, "bedrock", ("region",), problems).get("region"),
        vertex_project=_provider_keys(m, "vertex", ("project", "region"), problems).get("project"),
        vertex_region=m.get("vertex", {}).get("region"),
        ids=_ids(m.get("ids", {}), problems),
    )
    if model.provider not in PROVIDERS:
        problems.append(f"model.provider: {model.provider!r} is not one of {', '.join(PROVIDERS)}")
    for entry in (model.primary, *model.fallbacks):
        if ":" in entry and entry.partition(":")[0] not in PROVIDERS:
            problems.append(f"model: {entry!r}: the part before ':' must be a provider, one of {', '.join(PROVIDERS)}")
    if model.max_tokens < 1:
        problems.append("model.max_tokens: must be at least 1")
    if model.effort not in EFFORTS:
        problems.append(f"model.effort: {model.effort!r} is not one of {', '.join(EFFORTS)}")
    if model.thinking_display not in THINKING_DISPLAYS:
        problems.append(
            f"model.thinking_display: {model.thinking_display!r} is not one of {', '.join(THINKING_DISPLAYS)}"
        )
    limits = Limits(**lim)
    for key in _POSITIVE_LIMITS:
        if key in lim and not getattr(limits, key) > 0:
            problems.append(f"limits.{key}: must be greater than 0, got {getattr(limits, key)!r}")
    for key in ("approvers", "destructive_approvers"):
        for who in ap.get(key, []):
            if who[:1] not in ("U", "W", "S"):
                problems.append(f"approvals.{key}: {who!r} is neither a user id (U…/W…) nor a user group (S…)")
    if (who := ap.get("terminal_user")) is not None and not is_user_id(who):
        problems.append(f"approvals.terminal_user: {who!r} is not a Slack user id (U…/W…)")
    if ap.get("four_eyes_on_mutating") and ap.get("allow_self_approval"):
        problems.append(
            "approvals: four_eyes_on_mutating and allow_self_approval contradict each other (a second "
            "person for mutating calls, but not for destructive ones): set one"
        )
    lists = {k: tuple(v) for k, v in ap.items() if k in ("approvers", "destructive_approvers")}  # the rest as read
    approvals = ApprovalSettings(**{**ap, **lists, "required_approvals": max(1, ap.get("required_approvals", 1))})
    parsed = {reach.name: found for reach in reaches if (found := reach.parse(config, env)) is not None}
    tools = sections.get("tools", default.tools)
    for reach in reaches:
        for section in reach.sections:
            if section in tools:
                problems.append(f"tools.{section}: configure {reach.hint} at the top level, not under [tools]")
    for channel in sl.get("channels", default.channels):
        if problem := _channel_problem("slack.channels", channel):
            problems.append(problem)
    alerts = _alerts(config, env, tuple(sl.get("channels", default.channels)), alert_sources)
    if problems:
        raise ConfigError(problems)

    def secret(name: str) -> Secret | None:
        value = env.get(name, "").strip()
        return Secret(value) if value else None

    return Settings(
        model=model,
        limits=limits,
        channels=tuple(sl.get("channels", default.channels)),
        status_update_seconds=float(sl.get("status_update_seconds", default.status_update_seconds)),
        stream_answers=bool(sl.get("stream_answers", default.stream_answers)),
        approvals=approvals,
        tools=tools,
        reaches=parsed,
        alerts=alerts,
        slack_bot_token=secret("SLACK_BOT_TOKEN"),
        slack_app_token=secret("SLACK_APP_TOKEN"),
        slack_signing_secret=secret("SLACK_SIGNING_SECRET"),
        slack_api_url=env.get("SLACK_API_URL") or default.slack_api_url,
        anthropic_api_key=secret("ANTHROPIC_API_KEY"),
        anthropic_base_url=env.get("ANTHROPIC_BASE_URL") or None,
        bedrock_base_url=env.get("ANTHROPIC_BEDROCK_BASE_URL") or None,
        vertex_base_url=env.get("ANTHROPIC_VERTEX_BASE_URL") or None,
        proxy=next((Secret(env[k]) for k in _PROXY_VARS if env.get(k)), None),
        db_path=env.get("OPSLOOP_DB") or sections.get("store", {}).get("url") or default.db_path,
        config_path=str(path) if path else None,
        log_level=str(sections.get("log", {}).get("level", default.log_level)),
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
