"""Moved to bot/playground/sandbox/; kept only so the Makefile's `python -m bot.sandbox.screenshot` still runs."""
