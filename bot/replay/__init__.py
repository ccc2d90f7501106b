"""Replay: rerun a stored incident on another model, effort or prompt, against the recorded world.

record.py  the self-contained, redacted incident record (`opsloop export RUN_ID`)
world.py   the recorded world: tools, approvals and replies answered from the record
runner.py  the real run loop (bot.run.loop) with a real model client, against that world
compare.py the original and the replay side by side (text, HTML)
suite.py   every record of a folder, one row each; non-zero exit on a regression
cli.py     `opsloop replay` and `opsloop export`
"""
