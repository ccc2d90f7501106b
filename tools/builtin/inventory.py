"""list_hosts: the hosts the other host tools can reach ([[hosts]] and localhost), so the model names real ones."""

from __future__ import annotations

from tools.builtin.host import table
from tools.registry import Category, ToolContext, tool
from tools.remote.inventory import LOCALHOST, Inventory


@tool(category=Category.READ_ONLY, parallel=True, timeout_s=10, idempotent=True)
async def list_hosts(group: str = "", *, ctx: ToolContext) -> str:
    """The hosts the host tools can reach: the inventory's names with their address, jump host and groups.

    Returns how many hosts are listed, then a table of name, address (with the port when not 22), via (the jump
    hosts) and groups; with no [[hosts]] configured it says that only "self" can be reached. Every host tool's
    `host` argument must be one of these names, or "self" (the machine opsloop runs on); no other host or
    address can be reached. Use it first when a task names a machine you cannot find, or to pick the hosts of a
    group such as "web".

    Args:
        group: only the hosts in this group (empty: all of them).
    """
    inventory = ctx.resource(Inventory) or Inventory()
    hosts = [h for h in inventory if not group or group in h.groups]
    local = f"{LOCALHOST} is the machine opsloop runs on (no SSH)"
    if not inventory.hosts:
        return f"no [[hosts]] are configured: {local} and the only host the host tools can reach"
    if not hosts:
        groups = sorted({g for h in inventory for g in h.groups})
        return f"no host is in group {group!r} (groups: {', '.join(groups) or 'none'}); {local}"
    rows = [["name", "address", "via", "groups"]]
    for h in hosts:
        address = h.address if h.port == 22 else f"{h.address}:{h.port}"
        rows.append([h.name, address, inventory.via(h) or "-", ", ".join(h.groups) or "-"])
    scope = f" in group {group!r}" if group else ""
    return f"{len(hosts)} of {len(inventory)} inventory hosts{scope}; {local}\n" + table(rows)
