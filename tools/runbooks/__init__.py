"""Runbooks: the team's own steps for an alert, loaded from `[runbooks] dirs`, matched to a run, offered as data."""

from tools.runbooks.reach import REACH

__all__ = ["REACH"]
