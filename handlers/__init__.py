"""The Slack side of opsloop: listeners (mentions, replies, Stop, approval clicks), the approval cards and their
policy, Block Kit rendering and every human-facing text, the outbox and the one redacting way out to Slack, and
what the run layer's Supervisor asks of Slack (handlers/supervisor/: each run's thread)."""
