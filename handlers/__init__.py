"""Slack listeners and Block Kit rendering."""
