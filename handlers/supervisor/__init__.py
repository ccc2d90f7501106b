"""One run per Slack thread: the Supervisor starts, resumes, wakes and stops runs under leases (scheduler.py);
`IncidentThread` gives one run its Slack-side callbacks and posts its answer or report (thread.py)."""

from handlers.supervisor.scheduler import Supervisor
from handlers.supervisor.thread import IncidentThread, StatusMessage

__all__ = ["IncidentThread", "StatusMessage", "Supervisor"]
