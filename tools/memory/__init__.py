"""Incident memory ([memory]): every ended run is an incident record (its tables: tools/memory/store.py), searched
by the `search_incidents` tool and offered at the start of a similar run, never across a private conversation."""

from tools.memory.reach import REACH
from tools.memory.search import search_incidents

__all__ = ["search_incidents", "REACH"]  # noqa: RUF022
