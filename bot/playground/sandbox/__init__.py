"""`opsloop sandbox`: the Slack stand-in and the real app in your browser, with your config and tools."""
