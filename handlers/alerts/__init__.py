"""Alerts start runs (docs/alerts.md): alert messages posted in Slack (slack.py), and Alertmanager's webhook
(webhook.py), each handing its alerts to the shared desk (desk.py: the counts, storm control, starting runs).

Slack: a message from a configured sender (bot_id or app_id) at the top of a configured channel, matching
`match` and not `ignore` (RE2, linear time), is claimed by its event id and its ts and starts one run in its
own thread, with no human requester, before Slack gets its ack.

Webhook: its own aiohttp server on its own port, `POST /alertmanager` with a bearer token (constant-time
compare) and a bounded body. A notification is validated (payload version "4"), then stored, then answered
200 (a store failure answers 503 and Alertmanager retries). A new group is stored `opening` with its payload
(redacted) and its root post enqueued in the outbox, in that one transaction, claimed by this process; after the
ack the outbox posts the root exactly once (an attempt that may have reached Slack is looked for first) and the
run starts in its thread (compare-and-set on `opening`). A group whose opener died, or whose root Slack refused
for good, is claimed (compare-and-set) and opened by a recovery pass: at start-up, every half claim window, and
on a repeat of it. A repeat with the same firing fingerprints starts nothing (the thread hears it once); a
changed firing set or `resolved` is posted in the thread and queued for the run like a reply. A group firing
again once its occurrence is over (its run ended, and it was resolved or Alertmanager had not sent it for
reopen_after_minutes) is opened again like a new group: a new thread linking the previous one, which gets a
pointer to the new one.

Storm control: at most max_runs_per_10_min alert runs start per channel; the rest are listed in one
"alert storm" thread, claimed in the store per channel and ten-minute window (replicas share it), its root and
its listings posted once each through the outbox. Everything that talks to Slack happens after the ack, and
the webhook's store calls queue behind mentions and clicks, so a storm never delays a mention's ack.
"""
