"""One run, start to end: the loop, the approval gate, the model client, history and condensation,
the meters, the prompts, the living summary and the hand-off report. No Slack, no reach."""
