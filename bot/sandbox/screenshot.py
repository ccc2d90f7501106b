"""`python -m bot.sandbox.screenshot` (the Makefile's `make screenshot`) runs bot/playground/sandbox/screenshot.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("bot.playground.sandbox.screenshot", run_name="__main__", alter_sys=True)
