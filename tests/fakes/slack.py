"""The Slack stand-in moved into the product (``bot/standin/slack.py``); re-exported so tests import it here."""

from bot.standin.slack import *  # noqa: F403  (the stand-in's own __all__ is the list)
from bot.standin.slack import __all__ as __all__
