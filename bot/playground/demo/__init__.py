"""`opsloop demo`: a whole incident end to end, no credentials (stand-in Slack, simulated host, scripted model)."""
