"""The SSH reach ([ssh], [[hosts]]): the inventory, the remote command, the connection pool, and `REACH`.

`inventory` is pure config and names (no asyncssh import); `command` builds the bounded remote command line;
`pool` holds the connections and runs commands (it imports asyncssh, only when a host is configured); `reach`
is the plug-in tools/reaches.py lists.
"""

from tools.remote.reach import REACH, SshHosts

__all__ = ["REACH", "SshHosts"]
