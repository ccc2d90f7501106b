"""The roof: the app's wiring (Slack listeners, runs, reaches), the CLI, `opsloop check`, start-up,
metrics and the exported timelines."""
