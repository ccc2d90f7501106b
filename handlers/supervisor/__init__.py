"""One run per Slack thread: the Supervisor starts, resumes, wakes and stops runs under leases (scheduler.py);
`IncidentThread` gives one run its Slack-side callbacks (thread.py), its status line (status.py) and posts its
answer or report (answer.py)."""

from handlers.supervisor.scheduler import Supervisor
from handlers.supervisor.status import StatusMessage
from handlers.supervisor.thread import IncidentThread

__all__ = ["IncidentThread", "StatusMessage", "Supervisor"]
