"""Shared fixtures: a real hpcdispatch server on loopback; the header line on the Debian
packages the integration tests use (tests/system_packages.py); the suite's own temp folder and
the check that the suite leaves nothing in it (tests/suite_temp.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import load_config
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests import suite_temp, system_packages
from tests.instances import Held

_suite_temp: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _suite_temp
    system_packages._pytest_config = config  # announce() writes past output capture
    if _suite_temp is None and not hasattr(config, "workerinput"):
        _suite_temp = suite_temp.start()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a run that leaves temporary files behind, naming them; remove the suite's temp
    folder (tmp_path folders of failed tests are kept)."""
    global _suite_temp
    if _suite_temp is None:
        return
    root, _suite_temp = _suite_temp, None
    failed = exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    left = suite_temp.leftovers(root)
    lines = suite_temp.finish(root, keep_pytest_folder=failed)
    if left and not failed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=bool(left))


def pytest_report_header(config: pytest.Config) -> list[str]:
    groups = ", ".join(f"{' '.join(packages)} ({name})"
                       for name, (packages, _, _) in system_packages.GROUPS.items())
    if all(system_packages.quick_run(name) for name in system_packages.GROUPS):
        return [f"quick run ({system_packages.QUICK_ENV}=1): the Slurm, Prometheus and "
                "PostgreSQL integration tests are skipped; nothing is installed"]
    return [f"integration tests use the Debian packages {groups}; missing ones are "
            "apt-get installed when run as root (scripts/test.sh --quick: skip those tests)"]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4)
    running = start_server(config)
    yield running
    running.stop(grace=1.0)


@pytest.fixture
def client(server: RunningServer) -> Iterator[DispatcherClient]:
    with DispatcherClient(server.target, timeout=60) as c:
        c.check_reachable()  # connected before the test: its calls' timings are theirs alone
        yield c


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """FCFS decisions held until the test releases them (tests.instances.Held)."""
    stand_in = Held()
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, stand_in)
    yield stand_in
    stand_in.release.set()  # never leave a server thread waiting


@pytest.fixture
def serve() -> Iterator[Callable[..., RunningServer]]:
    """Start a server on a free loopback port with some keys overridden; stopped after."""
    started: list[RunningServer] = []

    def start(**overrides: object) -> RunningServer:
        config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", **overrides)
        started.append(start_server(config))
        return started[-1]

    yield start
    for running in started:
        running.stop(grace=1.0)
