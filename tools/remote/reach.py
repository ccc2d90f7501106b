"""The SSH reach: [ssh] and [[hosts]] read into the inventory, one connection pool for the host tools, and the
`opsloop check` probe of every host (host | address | via | result)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.config.reader import Reader
from tools.api import some_names
from tools.reach import Hidden, Reach
from tools.remote.inventory import Inventory, SshCredentials, read_hosts

HOST_PROBES_AT_ONCE = 8  # `opsloop check` connects to this many inventory hosts at a time


@dataclass(frozen=True)
class SshHosts:
    """What the SSH reach read: the inventory, and the secrets its pool logs in with (from the environment)."""

    inventory: Inventory = field(default_factory=Inventory)
    credentials: SshCredentials = field(default_factory=SshCredentials)


class SshReach(Reach):
    name: str = "ssh"
    sections: tuple[str, ...] = ("ssh", "hosts")
    hint: str = "[ssh] and [[hosts]]"
    modules: tuple[str, ...] = ()  # the host tools are built-ins: on this machine they need no inventory

    def parse(self, config: Reader, env: Mapping[str, str]) -> SshHosts | None:
        if not any(config.has(s) for s in self.sections):
            return None
        problems = len(config.problems)
        ssh, hosts = read_hosts(config)
        if len(config.problems) > problems:
            return None
        inventory = Inventory(ssh, hosts)
        # Taken as they are (a passphrase may start or end with a space); never logged: Hidden hides its repr.
        passphrases = {name: Hidden(env[name]) for name in inventory.passphrase_envs() if env.get(name)}
        return SshHosts(inventory, SshCredentials(passphrases=passphrases, agent_path=env.get("SSH_AUTH_SOCK") or None))

    def open(self, config: SshHosts) -> Mapping[type, object]:
        if not len(config.inventory):
            return {Inventory: config.inventory}
        from tools.remote.pool import SshPool  # asyncssh is imported only when a host is configured

        return {Inventory: config.inventory, SshPool: SshPool(config.inventory, config.credentials)}

    async def aclose(self, resources: Mapping[type, object]) -> None:
        from tools.remote.pool import SshPool

        pool = resources.get(SshPool)
        if isinstance(pool, SshPool):
            await pool.close()

    def environment(self, config: SshHosts) -> list[str]:
        """The inventory's host names (and groups), and the hosts with log, read_file or disk_usage directories of
        their own."""
        inventory = config.inventory
        if not len(inventory):
            return []
        lines = [f"Hosts (the inventory, {len(inventory)}; list_hosts has details): {some_names(inventory.names)}"]
        if groups := sorted({g for h in inventory for g in h.groups}):
            lines.append(f"Host groups: {some_names(groups)}")
        for key, what in (("log_dirs", "log"), ("read_dirs", "read_file"), ("usage_dirs", "disk_usage")):
            own = [f"{h.name} {', '.join(dirs)}" for h in inventory if (dirs := getattr(h, key)) is not None]
            if own:
                lines.append(f"Hosts with {what} directories of their own: {some_names(own, 10)}")
        return lines

    async def check(self, config: SshHosts) -> tuple[list[str], list[str]]:
        """Connect to every inventory host (bounded, concurrently): one row per host, and the failures (an unknown
        key with the ssh-keyscan line to verify it)."""
        if not len(config.inventory):
            return [], []
        from tools.builtin.host import table
        from tools.remote.pool import SshPool

        pool = SshPool(config.inventory, config.credentials)
        try:
            results = await pool.probe_all(concurrency=HOST_PROBES_AT_ONCE)
        finally:
            await pool.close()
        rows = [["host", "address", "via", "result"]]
        problems: list[str] = []
        for r in results:
            result = f"ok ({r.ms:.0f} ms)" if r.ok and r.ms is not None else r.failure.value
            if r.fingerprint:
                result += f" {r.fingerprint}"
            rows.append([r.host, r.address, r.via or "-", result])
            if not r.ok:
                problems.append(f"host {r.host}: {r.failure.value}: {r.detail}")
                if r.keyscan:
                    problems.append(f"host {r.host}: to verify its key, run: {r.keyscan}")
        return table(rows).split("\n"), problems

    def bind_tools(self, config: SshHosts, tools: Sequence[Any]) -> list[Any]:
        """The built-in host tools' `host` description lists a small inventory, once per registry build."""
        from tools.builtin.reach import with_hosts

        return [with_hosts(t, config.inventory) for t in tools]


REACH = SshReach()
