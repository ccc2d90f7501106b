"""The Slack side of opsloop: listeners (mentions, replies, Stop, approval clicks), the approval lifecycle and its
policy, Block Kit rendering and every human-facing text, the outbox and the one redacting way out to Slack, and
the supervisor (handlers/supervisor/) that drives runs under leases and speaks for each in its thread."""
