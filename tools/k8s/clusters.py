"""One open API client per configured cluster, the scope checks every tool runs first, and the API's answers
turned into opsloop's errors (403 → PermissionDenied, 401 → credentials re-read and one retry, a cluster
that does not answer → ToolError and, for a short while, an immediate one).

Requests go through kubernetes_asyncio's ApiClient (its kubeconfig and in-cluster loading, exec plugins,
TLS, bearer tokens) with `_preload_content=False`: the tools read the wire format (camelCase JSON) and
bound what they read, rather than deserialising whole lists into model objects.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from bot.core.unreachable import is_unreachable, reason
from tools.api import BadCall
from tools.k8s.config import NAMESPACE_RE, ClusterSpec
from tools.registry import PermissionDenied, ToolContext, ToolError

DOWN_S = 15.0  # after a cluster failed to answer, calls fail at once for this long (then one tries again)
MAX_RESPONSE_BYTES = 16 * 2**20
CONNECT_TIMEOUT_S = 5.0
# A list answered as PartialObjectMetadataList: names, times, labels, managedFields, never the objects' data.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
NAME_RE = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS subdomain: every object name
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
DEFAULT_KUBECONFIG = Path("~/.kube/config").expanduser()  # kubectl's default (KUBECONFIG is not read)


class NotFound(ToolError):
    """404: the object (or the API) does not exist."""


class Conflict(ToolError):
    """409: the object changed since its resourceVersion was read."""


class Unknown(ToolError):
    """A write whose answer was lost: it may or may not have happened."""


@dataclass(frozen=True)
class Kind:
    """A resource kind the tools know: where it lives in the API."""

    kind: str  # "Deployment"
    plural: str  # "deployments"
    group_version: str  # "v1", "apps/v1"
    namespaced: bool = True
    short: str = ""  # kubectl's short name: "deploy"

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0] if "/" in self.group_version else ""

    @property
    def resource(self) -> str:
        """As kubectl and RBAC name it: `deployments.apps`, `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced:
            if namespace is None:
                raise ToolError(f"{self.kind} is namespaced: give a namespace")
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub is not None:
            base += f"/{sub}"
        return base


_KINDS = (
    Kind("Pod", "pods", "v1", short="po"),
    Kind("Deployment", "deployments", "apps/v1", short="deploy"),
    Kind("ReplicaSet", "replicasets", "apps/v1", short="rs"),
    Kind("StatefulSet", "statefulsets", "apps/v1", short="sts"),
    Kind("DaemonSet", "daemonsets", "apps/v1", short="ds"),
    Kind("Service", "services", "v1", short="svc"),
    Kind("Endpoints", "endpoints", "v1", short="ep"),
    Kind("ConfigMap", "configmaps", "v1", short="cm"),
    Kind("PersistentVolumeClaim", "persistentvolumeclaims", "v1", short="pvc"),
    Kind("Job", "jobs", "batch/v1"),
    Kind("CronJob", "cronjobs", "batch/v1", short="cj"),
    Kind("Ingress", "ingresses", "networking.k8s.io/v1", short="ing"),
    Kind("HorizontalPodAutoscaler", "horizontalpodautoscalers", "autoscaling/v2", short="hpa"),
    Kind("Event", "events", "v1", short="ev"),
    Kind("Node", "nodes", "v1", namespaced=False, short="no"),
    Kind("Namespace", "namespaces", "v1", namespaced=False, short="ns"),
)
KINDS = {k.kind: k for k in _KINDS}
_LOOKUP = {
    **{k.kind.lower(): k.kind for k in _KINDS},
    **{k.plural: k.kind for k in _KINDS},
    **{k.kind.lower() + "s": k.kind for k in _KINDS},
    **{k.short: k.kind for k in _KINDS if k.short},
}
_SECRET_NAMES = {"secret", "secrets", "v1/secret"}
SECRET_REFUSAL = (
    "kind Secret is never read by opsloop: Secrets stay out of the model's context. Workloads show "
    "where their secrets come from (secretKeyRef, envFrom) as references; ask a person for a value"
)


def kind_of(text: str, *, allowed: tuple[str, ...] | None = None) -> Kind:
    """'deploy', 'deployments', 'Deployment.apps' → the Deployment kind; Secret refused; unknown kinds listed."""
    key = text.strip().lower()
    base = key.split(".", 1)[0]
    if key in _SECRET_NAMES or base in ("secret", "secrets"):
        raise ToolError(SECRET_REFUSAL)
    name = _LOOKUP.get(key) or _LOOKUP.get(base)
    choices = allowed or tuple(KINDS)
    if name is None or name not in choices:
        raise ToolError(f"kind {text!r} is not one these tools handle; use one of: {', '.join(choices)}")
    return KINDS[name]


def check_name(name: str, what: str = "name") -> str:
    if not NAME_RE.fullmatch(name):
        raise ToolError(f"{what} {name!r} is not a Kubernetes object name (lowercase letters, digits, '-', '.')")
    return name


class KubeClient:
    """One cluster: its ApiClient (made on first use, then kept open), scope and failure memory."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._api: Any = None  # kubernetes_asyncio.client.ApiClient
        self._lock = asyncio.Lock()
        self._down_until = 0.0
        self._down_why = ""
        self.server = ""  # the API server's URL, once loaded

    @property
    def name(self) -> str:
        return self.spec.name

    # -- scope, before any request --------------------------------------------------------------
    def namespace(self, namespace: str | None) -> str:
        """The namespace a call may touch. Without one: the cluster's default_namespace, else its only allowed
        namespace, else "default" when it allows any; with several allowed and no default, a BadCall listing them.
        One outside the list → ToolError."""
        allowed = self.spec.namespaces
        if namespace is None or namespace == "":
            if (implied := self.spec.implied_namespace) is not None:
                return implied
            raise BadCall(
                f"namespace is required: cluster {self.name} allows several namespaces and sets no "
                f"default_namespace; give one of: {', '.join(allowed)}"
            )
        if not NAMESPACE_RE.fullmatch(namespace):
            raise ToolError(f"{namespace!r} is not a namespace name")
        if allowed and namespace not in allowed:
            raise ToolError(
                f"namespace {namespace!r} is outside the namespaces opsloop may touch on cluster "
                f"{self.name} ({', '.join(allowed)}); nothing was requested"
            )
        return namespace

    # -- connection ---------------------------------------------------------------------------------
    def _in_cluster(self) -> bool:
        return (
            self.spec.kubeconfig is None
            and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            and IN_CLUSTER_TOKEN.is_file()
        )

    async def _load(self, configuration: Any) -> None:
        """Read the credentials into `configuration` (again after a 401: a rotated token, an exec plugin)."""
        from kubernetes_asyncio import config

        if self._in_cluster():
            load_incluster: Any = config.load_incluster_config  # untyped; it re-reads the token file
            load_incluster(client_configuration=configuration)
            return
        path = self.spec.kubeconfig or DEFAULT_KUBECONFIG
        if not path.is_file():
            raise ToolError(f"cluster {self.name}: no kubeconfig at {path} and not running in a cluster")
        await config.load_kube_config(
            config_file=str(path), context=self.spec.context, client_configuration=configuration, persist_config=False
        )

    async def api(self) -> Any:
        if self._api is not None:
            return self._api
        async with self._lock:
            if self._api is None:
                from kubernetes_asyncio import client

                configuration = client.Configuration()
                try:
                    await self._load(configuration)
                except ToolError:
                    raise
                except Exception as e:
                    raise ToolError(
                        f"cluster {self.name}: cannot load credentials ({self.spec.source}): "
                        f"{type(e).__name__}: {str(e)[:200]}"
                    ) from None
                self.server = str(configuration.host)
                self._api = client.ApiClient(configuration)
                read_the_environment_once(self._api, self.server)
        return self._api

    async def aclose(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    # -- requests -----------------------------------------------------------------------------------
    async def request(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        kind: Kind | str,
        namespace: str | None = None,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        text: bool = False,
        write: bool = False,
        accept: str | None = None,
    ) -> Any:
        """One API call: the parsed JSON (or text), else the error opsloop gives for its status.

        `verb` and `kind` name the request in a PermissionDenied; `write` marks a real (not dry-run) change,
        whose lost answer is "outcome unknown". `accept` replaces the Accept header (METADATA_ONLY: a list's
        metadata without the objects' data)."""
        now = time.monotonic()
        if now < self._down_until:
            raise ToolError(
                f"cluster {self.name} is unreachable ({self._down_why}); not tried again for another "
                f"{self._down_until - now:.0f}s"
            )
        api = await self.api()
        call = {
            "query_params": [(k, v) for k, v in (query or {}).items() if v is not None],
            "header_params": {
                "Accept": accept or ("text/plain, */*" if text else "application/json"),
                "Content-Type": content_type or "application/json",
            },
            "body": body,
        }
        for attempt in (1, 2):
            status, raw = await self._send(api, method, path, call, write)
            if status == 401 and attempt == 1:  # an expired or rotated token: read the credentials again, once
                try:
                    await self._load(api.configuration)
                except Exception as e:
                    raise ToolError(
                        f"cluster {self.name}: 401 Unauthorized, and reloading the credentials "
                        f"failed: {type(e).__name__}"
                    ) from None
                continue
            break
        if 200 <= status < 300:
            if text:
                return raw.decode("utf-8", "replace")
            try:
                return json.loads(raw) if raw else {}
            except ValueError:
                raise ToolError(f"cluster {self.name}: the API answered {status} with a non-JSON body") from None
        raise self._error(status, raw, verb=verb, kind=kind, namespace=namespace)

    async def _send(self, api: Any, method: str, path: str, call: Mapping[str, Any], write: bool) -> tuple[int, bytes]:
        """One call_api with `call`'s query_params, header_params and body; the status and the bounded body."""
        timeout = aiohttp.ClientTimeout(total=self.spec.timeout_s, sock_connect=CONNECT_TIMEOUT_S)
        try:
            resp = await api.call_api(
                path,
                method,
                **call,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
            try:
                raw = bytearray()
                async for chunk in resp.content.iter_chunked(1 << 16):
                    raw += chunk
                    if len(raw) > MAX_RESPONSE_BYTES:
                        raise ToolError(
                            f"cluster {self.name} answered more than {MAX_RESPONSE_BYTES >> 20} MiB; "
                            "narrow the request (a selector, a name, fewer lines)"
                        )
                return resp.status, bytes(raw)
            finally:
                resp.release()
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            # the wording Slack and SSH get (connection refused, DNS lookup failed, …), not aiohttp's own text
            why = (
                f"no answer within {self.spec.timeout_s:g}s"
                if isinstance(e, TimeoutError)
                else reason(e)
                if is_unreachable(e)
                else f"{type(e).__name__}: {str(e)[:160]}"
            )
            self._down_until = time.monotonic() + DOWN_S
            self._down_why = why
            if write:
                raise Unknown(
                    f"outcome unknown: the change was sent to cluster {self.name} but its answer was lost "
                    f"({why}); verify the object (k8s_get / k8s_describe) before retrying"
                ) from None
            raise ToolError(f"cannot reach cluster {self.name} at {self.server or self.spec.source}: {why}") from None

    def _error(self, status: int, raw: bytes, *, verb: str, kind: Kind | str, namespace: str | None) -> Exception:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        message = doc.get("message") if isinstance(doc, dict) else None
        message = str(message or raw[:300].decode("utf-8", "replace") or f"HTTP {status}")
        resource = kind.resource if isinstance(kind, Kind) else kind
        where = f" in namespace {namespace}" if namespace else ""
        if status == 403:
            return PermissionDenied(f"cluster {self.name} forbids {verb} {resource}{where}: {message}")
        if status == 401:
            return PermissionDenied(
                f"cluster {self.name} refused opsloop's credentials ({self.spec.source}) "
                f"even after reloading them: {message}"
            )
        if status == 404:
            return NotFound(message)
        if status == 409:
            return Conflict(message)
        return ToolError(f"cluster {self.name}: {verb} {resource}{where} failed with {status}: {message}")


class KubeClusters:
    """The configured clusters, each with its client (kept open; closed when the registry closes)."""

    def __init__(self, specs: tuple[ClusterSpec, ...]) -> None:
        self._clients = {s.name: KubeClient(s) for s in specs}

    def names(self) -> list[str]:
        return list(self._clients)

    def get(self, cluster: str | None) -> KubeClient:
        """The client for `cluster` (optional with one cluster); unknown names get the list."""
        if cluster is None or cluster == "":
            if len(self._clients) == 1:
                return next(iter(self._clients.values()))
            raise ToolError(f"give a cluster: one of {', '.join(self._clients) or '(none configured)'}")
        found = self._clients.get(cluster)
        if found is None:
            raise ToolError(f"no cluster {cluster!r} is configured; clusters: {', '.join(self._clients)}")
        return found

    async def aclose(self) -> None:
        for c in self._clients.values():
            await c.aclose()


def clusters_of(ctx: ToolContext) -> KubeClusters:
    clusters = ctx.resource(KubeClusters)
    if clusters is None:
        raise ToolError("no Kubernetes cluster is configured (add [[kubernetes.clusters]] to the config)")
    return clusters


def read_the_environment_once(api: Any, server: str) -> None:
    """kubernetes_asyncio's aiohttp session has trust_env on, so every request looks up ~/.netrc and the proxy
    variables, each in a thread: ~0.45 ms of CPU a request, half of a namespace's reads. Looked up once here
    instead: when no proxy variable applies to `server`, the session stops reading the environment (so it also
    never sends ~/.netrc credentials to a cluster, which authenticates with its kubeconfig's); when one does, the
    session keeps reading it, as before."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        get_env_proxy_for_url(URL(server))
    except LookupError:
        api.rest_client.pool_manager._trust_env = False
