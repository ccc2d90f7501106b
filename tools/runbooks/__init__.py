"""Runbooks: the team's own steps for an alert, loaded from `[runbooks] dirs`, matched to a run, offered as data."""
