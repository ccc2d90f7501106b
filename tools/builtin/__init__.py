"""The built-in ops tools: host health, disk usage and files, the inventory, logs, the journal and the kernel log,
systemd services, HTTP and network checks, Prometheus queries."""

from tools.builtin.disk_usage import disk_usage
from tools.builtin.files import read_file
from tools.builtin.host import check_cpu, check_disk, check_memory, list_top_processes
from tools.builtin.http import check_url
from tools.builtin.inventory import list_hosts
from tools.builtin.journal import journal, kernel_events
from tools.builtin.logs import clean_logs, grep_log, list_logs, log_histogram, tail_log
from tools.builtin.network import dns_lookup, tcp_check, tls_check
from tools.builtin.prometheus import prometheus_alerts, prometheus_metrics, prometheus_query, prometheus_query_range
from tools.builtin.services import restart_service, service_status

# Registration order (and so the order the model sees): host (disk_usage, read_file and the inventory), logs,
# journal, services, http and the network, prometheus.
__all__ = [  # noqa: RUF022
    "check_disk",
    "check_memory",
    "check_cpu",
    "list_top_processes",
    "disk_usage",
    "read_file",
    "list_hosts",
    "list_logs",
    "tail_log",
    "grep_log",
    "log_histogram",
    "clean_logs",
    "journal",
    "kernel_events",
    "service_status",
    "restart_service",
    "check_url",
    "dns_lookup",
    "tcp_check",
    "tls_check",
    "prometheus_query",
    "prometheus_query_range",
    "prometheus_metrics",
    "prometheus_alerts",
]
