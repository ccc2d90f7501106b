"""tests/support/markers.py: which tests it marks `processes` by reading their code, and what its audit hook sees."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import markers, pgserver


def _direct() -> None:
    subprocess.run(["true"], check=True)


def _through_a_helper() -> None:
    _direct()


def _through_a_module_attribute() -> None:
    pgserver.PgServer()


class _Starter:
    def go(self) -> None:
        os.posix_spawn("/bin/true", ["true"], {})


def _through_a_class() -> None:
    _Starter().go()


def _pure(values: list[int]) -> Any:
    return sorted(values)  # "run" and "call" alone are no subprocess: sorted(...).run would not count either


def _names_run_without_subprocess(task: Any) -> None:
    task.run()


@pytest.mark.parametrize("function", [_direct, _through_a_helper, _through_a_module_attribute, _through_a_class])
def test_code_that_reaches_a_process_starter_is_seen(function: Any) -> None:
    assert markers.starts_processes(function) is True


@pytest.mark.parametrize("function", [_pure, _names_run_without_subprocess])
def test_code_that_starts_nothing_is_not_marked(function: Any) -> None:
    assert markers.starts_processes(function) is False


@pytest.mark.processes
def test_the_watch_reports_a_process_of_an_unmarked_test_only(request: pytest.FixtureRequest) -> None:
    watch = markers.SpawnWatch()
    watch.current = []
    subprocess.run(["true"], check=True)
    # This test is marked, so nothing is reported for it; the same spawn in an unmarked item is.
    assert watch.unmarked_spawns(request.node) == []
    watch.current = []
    subprocess.run(["true"], check=True)
    unmarked = SimpleNamespace(get_closest_marker=lambda name: None)
    assert [s.split()[0] for s in watch.unmarked_spawns(unmarked)] == ["subprocess.Popen"]  # type: ignore[arg-type]
    assert watch.current is None


def _item(fixtures: list[str], params: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(fixturenames=fixtures, callspec=SimpleNamespace(params=params or {}), function=_pure)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (_item(["tmp_path", "pg_url"]), {markers.SERVERS, markers.PROCESSES}),
        (_item(["sshd"]), {markers.SERVERS, markers.PROCESSES}),
        (_item(["db_url"], {"db_url": "postgres"}), {markers.SERVERS, markers.PROCESSES}),
        (_item(["db_url"], {"db_url": "sqlite"}), set()),
        (_item(["store", "fake_slack"]), set()),
    ],
)
def test_a_test_using_a_real_server_fixture_is_marked_servers(item: Any, expected: set[str]) -> None:
    assert markers.classify(item) == expected
