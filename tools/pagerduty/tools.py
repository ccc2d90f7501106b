"""`pagerduty_acknowledge` and `pagerduty_resolve`: the run's PagerDuty incident acknowledged or resolved, each
behind an approval card, written to PagerDuty as the person who approved it (`From`: their email from
`[pagerduty] from`). A person with no email there, or one PagerDuty does not know, is one refusal that says so."""

from __future__ import annotations

from tools.api import BadCall, current_run
from tools.pagerduty.client import PagerDuty, PagerDutyError
from tools.pagerduty.settings import INCIDENT_LABEL, PagerDutyConfig, incident_of
from tools.registry import Category, ToolContext, ToolError, tool

_MISSING = "PagerDuty is not configured: add a [pagerduty] section with token_env (see the README, PagerDuty)"


def _incident(incident_id: str | None) -> str:
    """The incident asked for, else the one the run's alert names."""
    if incident_id:
        if not incident_id.isalnum() or len(incident_id) > 40:
            raise BadCall(f"incident_id must be a PagerDuty incident id like PT4KHLK, got {incident_id!r}")
        return incident_id
    scope = current_run()
    found = incident_of(scope.labels) if scope is not None else None
    if found is None:
        raise BadCall(f"this run was not started by a PagerDuty incident (no {INCIDENT_LABEL} label): pass incident_id")
    return found[0]


async def _set_status(incident_id: str | None, status: str, confirmed_by: str, ctx: ToolContext) -> str:
    config = ctx.require(PagerDutyConfig, _MISSING)
    incident = _incident(incident_id)
    email = config.from_emails.get(confirmed_by)
    if not email:
        raise ToolError(
            f"not {status}: the approver {confirmed_by} has no email in [pagerduty] from, so PagerDuty can't be told "
            "who did it; add them there, or change the incident in PagerDuty"
        )
    try:
        answer = await PagerDuty(config).set_status(incident, status, email)
    except PagerDutyError as e:
        if e.status == 403 or (e.status in (400, 404) and any(w in str(e).lower() for w in ("requester", "from"))):
            raise ToolError(f"not {status}: PagerDuty does not accept {email} (approver {confirmed_by}): {e}") from None
        if e.status == 404:
            raise BadCall(f"not {status}: PagerDuty has no incident {incident}: {e}") from None
        raise
    number = answer.get("incident_number", "?")
    return (
        f"incident {incident} (#{number}) is {answer.get('status', status)} now in PagerDuty; "
        f"{status} as {email}, approved by {confirmed_by}"
    )


@tool(category=Category.MUTATING, timeout_s=60)
async def pagerduty_acknowledge(incident_id: str | None = None, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Acknowledge a PagerDuty incident (it stops escalating and paging); a person must approve it first.

    PagerDuty records the approver as the one who acknowledged it, by their email from [pagerduty] from; an
    approver with no email there, or one PagerDuty does not know, is refused and nothing changes. Returns the
    incident's id, number and status now, and who acknowledged it. Use it when the run was started by a page and
    the person on call wants opsloop to take it (stop the escalation) while the investigation goes on.

    Args:
        incident_id: the PagerDuty incident id (e.g. "PT4KHLK"); default: the incident that started this run.
    """
    return await _set_status(incident_id, "acknowledged", confirmed_by, ctx)


@tool(category=Category.MUTATING, timeout_s=60)
async def pagerduty_resolve(incident_id: str | None = None, *, confirmed_by: str, ctx: ToolContext) -> str:
    """Resolve a PagerDuty incident (the page is over); a person must approve it first.

    PagerDuty records the approver as the one who resolved it, by their email from [pagerduty] from; an approver
    with no email there, or one PagerDuty does not know, is refused and nothing changes. Returns the incident's
    id, number and status now, and who resolved it. Use it only once the evidence shows the problem is fixed
    (the mitigation worked, the alert's signal is back to normal), never to silence a page still in progress.

    Args:
        incident_id: the PagerDuty incident id (e.g. "PT4KHLK"); default: the incident that started this run.
    """
    return await _set_status(incident_id, "resolved", confirmed_by, ctx)
