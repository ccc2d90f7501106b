"""A local Slack stand-in (Web API + Socket Mode) that opsloop ships for `demo`, `sandbox` and tests."""
