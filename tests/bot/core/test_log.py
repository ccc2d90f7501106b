"""bot/core/log.py: our events written straight to the stream, libraries' through stdlib logging, one JSON line each;
the level filters what is written, not what the metrics processor sees; a stream that fails never breaks the caller."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from bot.core.log import configure_logging


@pytest.fixture
def restore() -> Iterator[None]:
    yield
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


def test_our_lines_and_a_librarys_share_one_stream_in_order(restore: None) -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    structlog.get_logger("opsloop.run").info("first", n=1)
    logging.getLogger("slack_bolt").warning("second %s", "line")
    structlog.get_logger("opsloop.store").warning("third")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["event"], x["logger"], x["level"]) for x in lines] == [
        ("first", "opsloop.run", "info"),
        ("second line", "slack_bolt", "warning"),
        ("third", "opsloop.store", "warning"),
    ]
    assert all(x["timestamp"].endswith("Z") for x in lines)


def test_the_level_filters_what_is_written_but_a_processor_put_first_still_sees_every_event(restore: None) -> None:
    out = io.StringIO()
    configure_logging("warning", stream=out)
    seen: list[str] = []

    def probe(_logger: Any, _method: str, event_dict: Any) -> Any:  # as bot/app/metrics.py installs itself
        seen.append(event_dict["event"])
        return event_dict

    structlog.configure(processors=[probe, *structlog.get_config()["processors"]])
    log = structlog.get_logger("opsloop.run")
    log.info("counted, not written")
    log.warning("counted and written")
    assert seen == ["counted, not written", "counted and written"]
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["counted and written"]


def test_a_stream_that_fails_never_breaks_the_caller(restore: None, capfd: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    out.close()
    structlog.get_logger("opsloop.run").info("lost", token="xoxb-123456789-abcdef")
    assert "could not be written (ValueError)" in capfd.readouterr().err


def test_lines_from_many_threads_never_interleave(restore: None) -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)

    def ours() -> None:
        for i in range(300):
            structlog.get_logger("opsloop.run").info("ours", i=i, pad="x" * 200)

    def theirs() -> None:
        for i in range(300):
            logging.getLogger("slack_sdk").warning("theirs %d %s", i, "y" * 200)

    threads = [threading.Thread(target=f) for f in (ours, theirs, ours, theirs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]  # each parses: no line was cut by another
    assert len(lines) == 1200
