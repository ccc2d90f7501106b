"""Freeze start-up's heap out of the garbage collector's full collections, before Slack delivers anything."""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger("opsloop.app")


def freeze_startup_heap() -> None:
    """Collect once, then move every object start-up made (modules, the SDKs' models, the tools) to the
    collector's permanent generation, before Slack can deliver anything. A full collection walks every tracked
    object, start-up's hundreds of thousands included, and a burst of mentions triggers one every second or two:
    every ack waits behind it. Frozen, a full collection walks only what the process made since (the figures:
    bench/RESULTS.md, section 16's history)."""
    gc.collect()
    gc.freeze()
    log.info("gc.frozen", objects=gc.get_freeze_count())
