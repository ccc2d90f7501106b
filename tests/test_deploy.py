"""The deployment files are a tested contract: the Dockerfile, deploy/compose.yml and deploy/kubernetes.yml agree
with the code (CLI flags, environment names, the supervisor's grace, /healthz) and with each other.

No Docker engine or cluster is needed: the files are parsed and checked against what opsloop actually does.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from bot.app.cli import parser
from bot.app.settings import load_settings
from bot.config.settings import missing_for_run
from bot.run.scheduler import Supervisor
from handlers.after_ack import AfterAck
from handlers.outbox import Outbox

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SLACK_SOCKET_MODE_CONNECTIONS = 10  # per app: every replica, and every surge pod of a rollout, opens one
# Shaped like the real thing, never real: what the placeholders stand for when the environment is loaded.
FAKE_VALUES = {
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_APP_TOKEN": "xapp-test",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "POSTGRES_PASSWORD": "pw",
}


# --- reading the files ------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yml").read_text())


def k8s_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yml").read_text()) if d]


def k8s(kind: str) -> dict[str, Any]:
    [doc] = [d for d in k8s_docs() if d["kind"] == kind]
    return doc


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = k8s("Deployment")["spec"]["template"]["spec"]
    return spec


def opsloop_container() -> dict[str, Any]:
    [container] = pod_spec()["containers"]
    return container


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def final_stage() -> list[tuple[str, str]]:
    """The instructions of the Dockerfile's last stage (the image that runs)."""
    steps = dockerfile()
    start = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[start:]


def instruction(op: str) -> str:
    [args] = [a for o, a in final_stage() if o == op]
    return args


def image_command() -> list[str]:
    """ENTRYPOINT + CMD of the image, both in exec (JSON) form."""
    return [*json.loads(instruction("ENTRYPOINT")), *json.loads(instruction("CMD"))]


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose()["services"]
    return services


def opsloop_services() -> dict[str, dict[str, Any]]:
    """Services running the opsloop image: built from the repository's Dockerfile."""
    return {name: s for name, s in compose_services().items() if "build" in s}


def postgres_service() -> tuple[str, dict[str, Any]]:
    [(name, service)] = [
        (n, s) for n, s in compose_services().items() if str(s.get("image", "")).startswith("postgres:")
    ]
    return name, service


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ${NAME}, ${NAME:-default}, ${NAME:?error}: a missing required variable fails like compose does."""

    def value(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if name in env and (env[name] or ":" not in op):
            return env[name]
        if op.endswith("?"):
            raise AssertionError(f"compose needs {name}: {arg}")
        return arg if op.endswith("-") else ""

    return _INTERPOLATION.sub(value, text)


def interpolated_names() -> set[str]:
    return {m.group(1) for m in _INTERPOLATION.finditer((DEPLOY / "compose.yml").read_text())}


def env_example() -> dict[str, str]:
    """deploy/env.example's variables, commented-out optional ones included."""
    pairs = re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", (DEPLOY / "env.example").read_text(), re.M)
    return dict(pairs)


def compose_environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def names_opsloop_reads() -> set[str]:
    """Environment names the config module reads (the only module that reads the environment)."""
    source = (ROOT / "bot" / "config" / "settings.py").read_text()
    return set(re.findall(r"""(?:env\.get|secret)\(\s*["']([A-Z][A-Z0-9_]*)["']""", source))


def parse_run(argv: list[str]) -> Any:
    """`argv` as `opsloop` parses it; a flag the CLI doesn't accept fails the test instead of exiting."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"opsloop does not accept {argv}") from e
    assert args.command == "run", argv
    return args


def seconds(duration: str | int | float) -> float:
    """A compose duration ("30s", "1m30s", "500ms") or a plain number of seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def supervisor_grace() -> float:
    """How long running runs get to reach a step boundary after SIGTERM (the Supervisor's default)."""
    [grace] = [f.default for f in dataclasses.fields(Supervisor) if f.name == "grace_seconds"]
    assert isinstance(grace, int | float)
    return float(grace)


def shutdown_budget() -> float:
    """The longest opsloop's SIGTERM shutdown waits: runs' grace, then the listeners' and the outbox's."""
    listeners = inspect.signature(AfterAck.close).parameters["grace"].default
    outbox = inspect.signature(Outbox.__init__).parameters["close_grace"].default
    return supervisor_grace() + float(listeners) + float(outbox)


# --- replicas ---------------------------------------------------------------------------------------------


def test_compose_runs_two_opsloop_replicas():
    services = opsloop_services()
    assert services, "no service builds the opsloop image"
    assert sum(s.get("deploy", {}).get("replicas", 1) for s in services.values()) == 2


def test_kubernetes_runs_two_replicas_and_a_rollout_stays_within_slacks_connections():
    spec = k8s("Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["replicas"] + spec["strategy"]["rollingUpdate"]["maxSurge"] <= SLACK_SOCKET_MODE_CONNECTIONS


# --- the database -----------------------------------------------------------------------------------------


def test_compose_opsloop_db_is_the_postgres_service():
    pg_name, pg = postgres_service()
    pg_env = compose_environment(pg)
    for name, service in opsloop_services().items():
        url = urlsplit(interpolate(compose_environment(service)["OPSLOOP_DB"], FAKE_VALUES))
        assert url.scheme in ("postgresql", "postgres"), name
        assert (url.hostname, url.port, url.path) == (pg_name, 5432, f"/{pg_env['POSTGRES_DB']}"), name
        assert url.username == pg_env["POSTGRES_USER"], name
        assert url.password == interpolate(pg_env["POSTGRES_PASSWORD"], FAKE_VALUES), name


def test_compose_postgres_is_15_on_a_named_volume_and_opsloop_waits_for_it_healthy():
    pg_name, pg = postgres_service()
    assert int(pg["image"].split(":")[1].split("-")[0].split(".")[0]) >= 15
    volumes = compose().get("volumes", {})
    assert any(v.split(":")[0] in volumes and v.endswith("/var/lib/postgresql/data") for v in pg["volumes"])
    assert "pg_isready" in pg["healthcheck"]["test"]
    for service in opsloop_services().values():
        assert service["depends_on"][pg_name]["condition"] == "service_healthy"


def test_kubernetes_opsloop_db_comes_from_the_secret():
    secret = k8s("Secret")
    [db] = [e for e in opsloop_container()["env"] if e["name"] == "OPSLOOP_DB"]
    ref = db["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and not ref.get("optional", False)
    assert urlsplit(secret["stringData"][ref["key"]]).scheme in ("postgresql", "postgres")


def test_every_required_secret_key_the_deployment_reads_is_in_the_secret():
    secret = k8s("Secret")
    refs = [e["valueFrom"]["secretKeyRef"] for e in opsloop_container()["env"] if "valueFrom" in e]
    assert all(r["name"] == secret["metadata"]["name"] for r in refs)
    missing = [r["key"] for r in refs if not r.get("optional", False) and r["key"] not in secret["stringData"]]
    assert missing == []


# --- the command, the probes and the metrics port ---------------------------------------------------------


def test_the_image_runs_opsloop_run_with_a_metrics_port():
    assert json.loads(instruction("ENTRYPOINT")) == ["opsloop"]
    args = parse_run(json.loads(instruction("CMD")))
    assert args.metrics_port is not None
    exposed = {int(p.split("/")[0]) for p in instruction("EXPOSE").split()}
    assert args.metrics_port in exposed


def test_every_container_command_is_one_opsloop_accepts():
    for service in opsloop_services().values():
        parse_run(service.get("command") or json.loads(instruction("CMD")))
    container = opsloop_container()
    assert "command" not in container, "the image's ENTRYPOINT is opsloop: give flags as args"
    parse_run(container.get("args") or json.loads(instruction("CMD")))


def test_compose_healthcheck_asks_healthz_on_the_metrics_port():
    for name, service in opsloop_services().items():
        port = parse_run(service.get("command") or json.loads(instruction("CMD"))).metrics_port
        test = " ".join(service["healthcheck"]["test"])
        assert f":{port}/healthz" in test, name


def test_kubernetes_probes_ask_healthz_on_the_metrics_port():
    container = opsloop_container()
    port = parse_run(container.get("args") or json.loads(instruction("CMD"))).metrics_port
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert named.get(get["port"], get["port"]) == port, probe
    service = k8s("Service")
    assert [named.get(p["targetPort"], p["targetPort"]) for p in service["spec"]["ports"]] == [port]


def test_liveness_is_gentler_than_readiness():
    """Unready quickly (a rollout waits for it); restarted only after a much longer run of failures."""
    container = opsloop_container()

    def patience(probe: str) -> int:
        p = container[probe]
        return int(p.get("periodSeconds", 10) * p.get("failureThreshold", 3))

    assert patience("livenessProbe") > 2 * patience("readinessProbe")


# --- shutdown and rollouts --------------------------------------------------------------------------------


def test_shutdown_budget_covers_the_supervisor_grace():
    assert shutdown_budget() > supervisor_grace() > 0


def test_compose_stop_grace_outlasts_opsloops_shutdown():
    for name, service in opsloop_services().items():
        assert seconds(service["stop_grace_period"]) > shutdown_budget(), name
        assert service.get("stop_signal", "SIGTERM") == "SIGTERM", name


def test_kubernetes_termination_grace_outlasts_opsloops_shutdown():
    assert pod_spec()["terminationGracePeriodSeconds"] > shutdown_budget()


def test_the_image_stops_with_sigterm():
    assert instruction("STOPSIGNAL") == "SIGTERM"


def test_a_rollout_starts_the_new_pod_before_it_stops_an_old_one():
    spec = k8s("Deployment")["spec"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec.get("minReadySeconds", 0) > 0


def test_the_disruption_budget_and_anti_affinity_select_the_opsloop_pods():
    deployment = k8s("Deployment")["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    pdb = k8s("PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    [term] = pod_spec()["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()


def test_every_document_is_in_one_namespace():
    namespaces = {d["metadata"].get("namespace") for d in k8s_docs() if d["kind"] != "Namespace"}
    assert namespaces == {k8s("Namespace")["metadata"]["name"]}


# --- the pod and the image run as non-root, read-only -----------------------------------------------------


def test_the_image_runs_as_a_non_root_user_and_installs_the_project():
    user = instruction("USER").split(":")[0]
    assert user not in ("root", "0")
    assert any(op == "RUN" and "pip install" in args for op, args in final_stage())
    assert any(op == "FROM" and args.split()[0] == "python:3.11-slim" for op, args in final_stage())


def test_the_pod_runs_as_the_images_user_with_a_read_only_root():
    pod, container = pod_spec(), opsloop_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert str(pod["securityContext"]["runAsUser"]) == instruction("USER").split(":")[0]
    sc = container["securityContext"]
    assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"], sc["capabilities"]["drop"]) == (
        True,
        False,
        ["ALL"],
    )
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    assert {m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs} == {"/tmp"}
    assert container["resources"]["requests"] and container["resources"]["limits"]


# --- config and environment -------------------------------------------------------------------------------


def test_the_config_map_carries_the_deploy_config_where_opsloop_config_points():
    container = opsloop_container()
    [(key, text)] = k8s("ConfigMap")["data"].items()
    assert text == (DEPLOY / "opsloop.toml").read_text()
    [mount] = [
        m
        for m in container["volumeMounts"]
        if any(v["name"] == m["name"] and "configMap" in v for v in pod_spec()["volumes"])
    ]
    [config] = [e["value"] for e in container["env"] if e["name"] == "OPSLOOP_CONFIG"]
    assert config == f"{mount['mountPath']}/{key}"


def test_compose_mounts_the_deploy_config_where_opsloop_config_points():
    configs = compose()["configs"]
    for name, service in opsloop_services().items():
        [mount] = service["configs"]
        assert (DEPLOY / configs[mount["source"]]["file"]).resolve() == DEPLOY / "opsloop.toml", name
        assert compose_environment(service)["OPSLOOP_CONFIG"] == mount["target"], name


async def test_the_deploy_config_loads_with_its_tools():
    from tools.config import build_registry

    tomllib.loads((DEPLOY / "opsloop.toml").read_text())
    settings = load_settings(DEPLOY / "opsloop.toml", env={})
    registry = await build_registry(settings.tools)
    await registry.aclose()


def test_every_environment_name_is_one_opsloop_reads():
    reads = names_opsloop_reads()
    assert {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "ANTHROPIC_API_KEY", "OPSLOOP_DB", "OPSLOOP_CONFIG"} <= reads
    k8s_names = {e["name"] for e in opsloop_container()["env"]}
    compose_names = {n for s in opsloop_services().values() for n in compose_environment(s)}
    example_names = set(env_example()) - interpolated_names()  # the rest only fill in compose.yml itself
    assert (k8s_names | compose_names | example_names) - reads == set()


def test_compose_environment_is_enough_for_opsloop_run():
    [service] = opsloop_services().values()
    example = {k: FAKE_VALUES.get(k, v) for k, v in env_example().items()}
    env = {**example, **{k: interpolate(v, example) for k, v in compose_environment(service).items()}}
    env["OPSLOOP_CONFIG"] = str(DEPLOY / "opsloop.toml")  # the file compose mounts there
    settings = load_settings(env=env)
    assert missing_for_run(settings) == []
    assert settings.db_path.startswith("postgresql://")


def test_kubernetes_environment_is_enough_for_opsloop_run(tmp_path):
    secret = k8s("Secret")["stringData"]
    [(key, text)] = k8s("ConfigMap")["data"].items()
    (tmp_path / key).write_text(text)
    env = {}
    for e in opsloop_container()["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e["valueFrom"]["secretKeyRef"]["key"] in secret:
            env[e["name"]] = FAKE_VALUES.get(e["name"], secret[e["valueFrom"]["secretKeyRef"]["key"]])
    env["OPSLOOP_CONFIG"] = str(tmp_path / key)  # where the ConfigMap is mounted in the pod
    settings = load_settings(env=env)
    assert missing_for_run(settings) == []
    assert settings.db_path == secret["OPSLOOP_DB"]


def test_the_image_carries_no_secret_or_database_setting():
    sensitive = {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY", "OPSLOOP_DB"}
    baked = " ".join(args for op, args in dockerfile() if op in ("ENV", "ARG", "LABEL"))
    assert [n for n in sensitive if n in baked] == []


# --- no secrets in the repository, and none in the build context ------------------------------------------

_TOKEN = re.compile(r"(?:xox[abpr]-|xapp-|sk-ant-)[A-Za-z0-9_-]{6,}")
_URL_PASSWORD = re.compile(r"postgres(?:ql)?://[^:/@\s]+:([^@\s]+)@")


def placeholder(value: str) -> bool:
    """REPLACE-ME, an ellipsis, or compose's ${VARIABLE}: a value that stands for a secret, not one."""
    return "REPLACE-ME" in value or value.startswith("${") or set(value) <= {"…", "."}


def deploy_files() -> Iterator[Path]:
    yield ROOT / "Dockerfile"
    yield ROOT / ".dockerignore"
    yield from sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.name != ".env")


@pytest.mark.parametrize("path", list(deploy_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_real_looking_secret_in_the_deploy_files(path):
    text = path.read_text()
    tokens = [t for t in _TOKEN.findall(text) if not placeholder(t)]
    passwords = [p for p in _URL_PASSWORD.findall(text) if not placeholder(p)]
    assert (tokens, passwords) == ([], [])


def test_the_env_file_with_the_tokens_is_git_ignored():
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()
    for name, service in opsloop_services().items():
        assert service["env_file"] == [".env"], name


def test_the_build_context_is_only_what_pip_install_needs():
    """.dockerignore is an allowlist: the sources pyproject packages and the lock the image installs from
    (locks/run.txt), and nothing like .env, .venv or *.db."""
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    included = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert included == {"pyproject.toml", project["project"]["readme"], "locks/run.txt", *packages}
    copied = {
        src.rstrip("/")
        for op, args in dockerfile()
        if op == "COPY" and "--from" not in args
        for src in args.split()[:-1]
    }
    assert copied == included
