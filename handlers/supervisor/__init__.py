"""The Slack side of the runs the run layer's Supervisor (bot/run/scheduler.py) drives: `Slack` and one
`IncidentThread` per drive (thread.py), its status line (status.py) and loading status (loading.py)."""

from handlers.supervisor.thread import Slack

__all__ = ["Slack"]
