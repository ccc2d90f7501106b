"""Hosts over SSH (REACH.md §1): the inventory ([ssh], [[hosts]]), the remote command, the connection pool.

`inventory` is pure config and names (no asyncssh import); `command` builds the bounded remote command line;
`pool` holds the connections and runs commands (it imports asyncssh, only when a host is configured).
"""

from tools.remote.inventory import (
    LOCALHOST,
    Host,
    HostsConfigError,
    Inventory,
    Login,
    SshCredentials,
    SshSettings,
    load_hosts,
)

__all__ = [
    "LOCALHOST", "Host", "HostsConfigError", "Inventory", "Login", "SshCredentials", "SshSettings", "load_hosts",
]
