"""The demo's tools: real @tool functions acting on a SIMULATED host, never on this machine.

`web-03`'s /var is 97% full because logrotate keeps every rotated nginx log. The
read-only tools look at the simulated state; `clean_logs` (destructive, with a dry
run) and `restart_service` (mutating) change it once someone approves them. They stand in for the built-in
tools of the same name, except `list_big_files`, which only the demo has. Loaded like any tool module:
`[tools] modules = ["bot.playground.demo.tools"]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools import Category, ToolError, tool

__all__ = ["check_disk", "clean_logs", "list_big_files", "restart_service", "service_status", "tail_log"]

HOSTNAME = "web-03"
NGINX_LOGS = "/var/log/nginx"
ERROR_LOG = "/var/log/nginx/error.log"


@dataclass
class SimulatedHost:
    """web-03 as the demo imagines it: disk, nginx, its logs, and what was done to them."""

    var_size_gb: float = 50.0
    var_used_gb: float = 48.5  # 97%
    rotated_files: int = 212
    rotated_gb: float = 28.0
    nginx_restarts: int = 0
    actions: list[str] = field(default_factory=list)  # what really "ran", with who approved it

    @property
    def var_percent(self) -> int:
        return round(100 * self.var_used_gb / self.var_size_gb)

    @property
    def full(self) -> bool:
        return self.var_percent >= 90


HOST = SimulatedHost()


def reset() -> None:
    """A fresh, full web-03 (each demo run starts from the incident)."""
    global HOST  # noqa: PLW0603 (its users read it as demo_tools.HOST, so a fresh one is seen)
    HOST = SimulatedHost()


def _host(host: str) -> SimulatedHost:
    if host.strip().lower() != HOSTNAME:
        raise ToolError(f"unknown host {host!r}: the demo simulates only {HOSTNAME}")
    return HOST


@tool(category=Category.READ_ONLY, parallel=True)
async def check_disk(host: str) -> str:
    """Disk usage per mount on a host (size, used, available, use%).

    Args:
        host: the host name, e.g. web-03
    """
    h = _host(host)
    var_avail = h.var_size_gb - h.var_used_gb
    return (
        f"{HOSTNAME} (simulated)\n"
        "mount  size   used    avail   use%\n"
        "/      20G    7.1G    12.9G   36%\n"
        f"/var   {h.var_size_gb:.0f}G    {h.var_used_gb:.1f}G   {var_avail:.1f}G    {h.var_percent}%\n"
        "/tmp   5G     0.3G    4.7G    6%"
    )


@tool(category=Category.READ_ONLY, parallel=True)
async def list_big_files(host: str, path: str = "/var") -> str:
    """The demo's own tool, not one of opsloop's built-in tools: the largest files and directories under a path
    on the demo's simulated host, biggest first.

    Args:
        host: the host name
        path: the directory to look in, e.g. /var
    """
    h = _host(host)
    if not path.startswith("/"):
        raise ToolError(f"path must be absolute, got {path!r}")
    lines = []
    if h.rotated_files:
        lines.append(
            f"{h.rotated_gb:.1f}G  {NGINX_LOGS}/access.log.*.gz  ({h.rotated_files} rotated logs, "
            "oldest 219 days; /etc/logrotate.d/nginx has no maxage)"
        )
    lines += [
        f"3.1G   {NGINX_LOGS}/access.log  (today's log, growing ~40 MB/min)",
        "1.2G   /var/lib/postgresql/15/main/pg_wal",
        "0.6G   /var/cache/apt/archives",
    ]
    return "\n".join(line for line in lines if line.split()[1].startswith(path.rstrip("/") or "/"))


@tool(category=Category.READ_ONLY, parallel=True)
async def service_status(host: str, unit: str) -> str:
    """Status of a systemd unit on a host, with its recent errors.

    Args:
        host: the host name
        unit: the systemd unit, e.g. nginx.service
    """
    h = _host(host)
    if unit.removesuffix(".service") != "nginx":
        return f"{unit}: active (running), no errors in the last hour"
    since = "12s" if h.nginx_restarts else "38 days"
    errors = (
        "1,204 write errors in error.log in the last 10 min (see tail_log)"
        if h.full
        else "no errors since /var was cleaned"
    )
    return f"nginx.service: active (running) since {since}; 4 workers\n{errors}"


@tool(category=Category.READ_ONLY)
async def tail_log(host: str, path: str, lines: int = 10) -> str:
    """The last lines of a log file on a host.

    Args:
        host: the host name
        path: the log file, e.g. /var/log/nginx/error.log
        lines: how many lines (at most 50)
    """
    h = _host(host)
    if path != ERROR_LOG:
        raise ToolError(f"the demo only has {ERROR_LOG}, not {path!r}")
    entry = (
        '2026/11/24 03:1{m}:{s:02d} [crit] 2817#2817: *{n} write() to "/var/log/nginx/access.log" '
        "failed (28: No space left on device) while logging request"
    )
    out = [entry.format(m=i // 6, s=(i * 7) % 60, n=88_410 + i) for i in range(max(1, min(lines, 50)))]
    if not h.full:
        out.append("2026/11/24 03:21:40 [notice] 2817#2817: signal process started (no errors since)")
    return "\n".join(out)


@tool(category=Category.DESTRUCTIVE)
async def clean_logs(host: str, path: str, older_than_days: int = 7, *, confirmed_by: str) -> str:
    """Delete rotated (.gz) logs older than N days under a log directory on a host.

    Args:
        host: the host name
        path: the log directory, e.g. /var/log/nginx
        older_than_days: only rotated logs older than this many days are deleted
    """
    h = _host(host)
    files, gb = _cleanable(h, path, older_than_days)
    h.rotated_files, h.rotated_gb, h.var_used_gb = h.rotated_files - files, h.rotated_gb - gb, h.var_used_gb - gb
    h.actions.append(f"clean_logs {path} approved by {confirmed_by}")
    return (
        f"deleted {files} rotated logs under {path} on {HOSTNAME}, freed {gb:.1f} GB "
        f"(approved by {confirmed_by}); /var now {h.var_percent}% used"
    )


@clean_logs.dry_run
async def _clean_logs_preview(host: str, path: str, older_than_days: int = 7) -> str:
    files, gb = _cleanable(_host(host), path, older_than_days)
    if not files:
        return f"would delete nothing: no rotated logs older than {older_than_days} days under {path}"
    return (
        f"would delete {files} files under {path} (access.log.8.gz … access.log.219.gz), {gb:.1f} GB, "
        f"all older than {older_than_days} days; keeps access.log, error.log and the last {older_than_days} days"
    )


def _cleanable(h: SimulatedHost, path: str, older_than_days: int) -> tuple[int, float]:
    if path.rstrip("/") != NGINX_LOGS:
        raise ToolError(f"no rotated logs under {path!r} on {HOSTNAME}; they are in {NGINX_LOGS}")
    if older_than_days < 1:
        raise ToolError("older_than_days must be at least 1: today's logs are never deleted")
    return (h.rotated_files, h.rotated_gb) if older_than_days <= 7 else (h.rotated_files // 2, h.rotated_gb / 2)


@tool(category=Category.MUTATING)
async def restart_service(host: str, unit: str, *, confirmed_by: str) -> str:
    """Restart a systemd unit on a host.

    Args:
        host: the host name
        unit: the systemd unit, e.g. nginx.service
    """
    h = _host(host)
    h.nginx_restarts += unit.removesuffix(".service") == "nginx"
    h.actions.append(f"restart_service {unit} approved by {confirmed_by}")
    return f"{unit} restarted on {HOSTNAME} (approved by {confirmed_by}); active (running)"
