"""PagerDuty (README, PagerDuty): the pager learns what opsloop found. Notes on the incident (the living summary at
its first likely cause, the answer or handoff report at the end), the acknowledge and resolve tools, a Change
Event for every approved change, and PagerDuty's change events as a `recent_changes` source.

`settings` holds the config, `client` the REST and Events v2 calls, `store` the reach's outbox, `sender` the
service that delivers it exactly once, `tools` the two mutating tools, `reach` reads `[pagerduty]`.
"""

from tools.pagerduty.reach import REACH

__all__ = ["REACH"]
