"""The built-in ops tools: host health, disk usage and files, the inventory, logs, services, HTTP checks, Prometheus."""

from tools.builtin.disk_usage import disk_usage
from tools.builtin.files import read_file
from tools.builtin.host import check_cpu, check_disk, check_memory, list_top_processes
from tools.builtin.http import check_url
from tools.builtin.inventory import list_hosts
from tools.builtin.logs import clean_logs, grep_log, tail_log
from tools.builtin.prometheus import prometheus_query, prometheus_query_range
from tools.builtin.services import restart_service, service_status

# Registration order (and so the order the model sees): host (disk_usage, read_file and the inventory), logs,
# services, http, prometheus.
__all__ = [  # noqa: RUF022
    "check_disk",
    "check_memory",
    "check_cpu",
    "list_top_processes",
    "disk_usage",
    "read_file",
    "list_hosts",
    "tail_log",
    "grep_log",
    "clean_logs",
    "service_status",
    "restart_service",
    "check_url",
    "prometheus_query",
    "prometheus_query_range",
]
