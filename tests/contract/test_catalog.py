"""One registry of names, from the contract's enums: every value has its implementation."""

from __future__ import annotations

import pytest

from hpcdispatch.catalog import (
    CP_DISPATCHER_NAMES,
    DISPATCHER_NAMES,
    PREDICTOR_NAMES,
    dispatcher_kind,
    dispatcher_names,
    enum_names,
    predictor_kind,
)
from hpcdispatch.cli import build_parser
from hpcdispatch.server.dispatchers import BY_NAME, DISPATCHERS
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.sim_adapter.adapter import DEFAULT
from hpcdispatch.sim_adapter.adapter import DISPATCHERS as SIM_DISPATCHERS
from hpcdispatch.v1 import dispatcher_pb2 as pb


def test_names_come_from_the_enums() -> None:
    assert {"fcfs": 1, "easy": 2, "hcp19": 3, "pcp19": 4, "pcp20": 5} | {
        k: v for k, v in DISPATCHER_NAMES.items() if v > 5  # values added later keep their name
    } == DISPATCHER_NAMES
    assert PREDICTOR_NAMES["last-two"] == pb.PREDICTOR_LAST_TWO
    assert PREDICTOR_NAMES["data-driven"] == pb.PREDICTOR_DATA_DRIVEN
    assert enum_names(pb.Allocator, "ALLOCATOR_") == {"best-fit": 1, "first-fit": 2}


def test_every_dispatcher_value_has_its_implementation() -> None:
    # The built-ins (installed plugins are registered beside them, under other kinds).
    assert set(DISPATCHER_NAMES.values()) <= set(DISPATCHERS)
    for name, kind in DISPATCHER_NAMES.items():
        dispatcher = DISPATCHERS[kind]
        assert dispatcher.name == name
        assert BY_NAME[name] is dispatcher
    cp = {name for name in DISPATCHER_NAMES if isinstance(BY_NAME[name], CpDispatcher)}
    assert cp == set(CP_DISPATCHER_NAMES)


def test_every_predictor_value_is_registered() -> None:
    with PredictorRegistry() as registry:
        assert set(PREDICTOR_NAMES.values()) <= set(registry.kinds())
        assert set(registry.kinds()) == {e.kind for e in registry.registrations.entries}


def test_command_lines_offer_exactly_the_contract_names() -> None:
    serve = build_parser().parse_args(["serve", "--default-dispatcher", "pcp19"])
    assert serve.default_dispatcher == "pcp19"
    assert set(SIM_DISPATCHERS) == {DEFAULT, *dispatcher_names()}  # built-ins, plugins
    assert set(DISPATCHER_NAMES) <= set(SIM_DISPATCHERS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--default-dispatcher", "pcp21"])


def test_unknown_names_are_errors_that_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown dispatcher 'sjf'.*'pcp20'"):
        dispatcher_kind("sjf")
    with pytest.raises(ValueError, match=r"unknown predictor 'lasttwo'.*'last-two'"):
        predictor_kind("lasttwo")
