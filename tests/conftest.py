"""Shared fixtures: a real hpcdispatch server on loopback."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import RunningServer, start_server


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4)
    running = start_server(config)
    yield running
    running.stop(grace=1.0)


@pytest.fixture
def client(server: RunningServer) -> Iterator[DispatcherClient]:
    with DispatcherClient(server.target, timeout=60) as c:
        yield c
