"""A local Slack stand-in (Web API + Socket Mode) that opsloop ships for `demo`, `sandbox` and tests."""

from bot.playground.standin.slack import *  # noqa: F403  (the stand-in's own __all__ is the list)
from bot.playground.standin.slack import __all__ as __all__
