"""Shared fixtures: a real hpcdispatch server on loopback; the header line on the Debian
packages the integration tests use (tests/system_packages.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import RunningServer, start_server
from tests import system_packages


def pytest_configure(config: pytest.Config) -> None:
    system_packages._pytest_config = config  # announce() writes past output capture


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
