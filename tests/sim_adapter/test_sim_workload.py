"""Processors -> units, and trace headers -> systems."""

from __future__ import annotations

import pytest

from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.swf import SwfHeader, TraceJob, read_header
from hpcdispatch.sim_adapter.workload import (
    UnitRule,
    resolve_system,
    rule_for_system,
    system_from_header,
    units_fitting_empty,
)
from hpcdispatch.systems import PRESETS

TRACES = bundled_trace().parent  # the traces shipped in the package (sim_adapter/data)


@pytest.mark.parametrize(
    ("mode", "procs", "expected"),
    [
        ("node", 3, (1, 3)), ("node", 8, (1, 8)), ("node", 9, (2, 5)), ("node", 20, (3, 7)),
        ("node", 9216, (1152, 8)), ("exclusive", 3, (1, 8)), ("exclusive", 20, (3, 8)),
        ("core", 20, (20, 1)),
    ],
)
def test_unit_rules(mode: str, procs: int, expected: tuple[int, int]) -> None:
    rule = UnitRule(cores_per_node=8, mode=mode)  # type: ignore[arg-type]
    units, cores = rule.split(procs)
    assert (units, cores) == expected
    assert units * cores >= procs and cores <= 8
    if mode == "node":
        assert units * cores - procs < units  # the rounding wastes less than a core per unit


def test_memory_is_asked_only_when_the_system_has_it() -> None:
    job = TraceJob(id="1", submit=0, run_time=1, width=4, requested_time=10, user="", group="",
                   executable="", queue="", partition="", requested_memory_kb=2048, line=1)
    rule = UnitRule(cores_per_node=20)
    assert rule.request(job, frozenset({"core"})) == (1, {"core": 4})
    assert rule.request(job, frozenset({"core", "mem"})) == (1, {"core": 4, "mem": 8})


@pytest.mark.parametrize(
    ("trace", "nodes", "cores"),
    [("LLNL-Atlas-2006-2.1-cln.swf.xz", 1152, 8), ("KTH-SP2-1996-2.1-cln.swf.xz", 100, 1),
     ("lublin_256.swf.xz", 256, 1)],
)
def test_system_from_the_shared_trace_headers(trace: str, nodes: int, cores: int) -> None:
    system = system_from_header(read_header(TRACES / trace))
    assert system.node_count == nodes
    assert {n.capacity["core"] for n in system.nodes()} == {cores}


def test_system_specs_and_rules() -> None:
    header = SwfHeader({"MaxProcs": ["64"]})
    assert system_from_header(header, cores_per_node=16).node_count == 4
    assert resolve_system("12x4", header).node_count == 12
    assert resolve_system("eurora", header) is PRESETS["eurora"]
    with pytest.raises(ValueError, match="neither MaxNodes nor MaxProcs"):
        system_from_header(SwfHeader())
    kit = PRESETS["kit-forhlr2"]
    assert rule_for_system(kit).cores_per_node == 20  # every unit fits a thin node
    assert units_fitting_empty(kit, {"core": 48}) == 21  # only the fat nodes
    assert units_fitting_empty(kit, {"core": 10}) == 2 * 1152 + 4 * 21


def _job(job_id: str, width: int) -> TraceJob:
    return TraceJob(id=job_id, submit=0, run_time=1, width=width, requested_time=10, user="",
                    group="", executable="", queue="", partition="", requested_memory_kb=-1,
                    line=1)


def test_proc_scale_carries_a_trace_to_a_preset() -> None:
    kit = PRESETS["kit-forhlr2"]
    rule = rule_for_system(kit, proc_scale=2.5)  # LLNL-Atlas 1,152 x 8 -> 1,152 x 20
    types = frozenset({"core", "mem", "gpu"})
    assert rule.request(_job("1", 9216), types) == (1152, {"core": 20})  # the whole machine
    assert rule.request(_job("2", 8), types) == (1, {"core": 20})  # one Atlas node = one thin
    assert rule.request(_job("3", 1), types) == (1, {"core": 3})  # ceil(2.5)
    assert rule.accelerators == ()  # no share asked: nobody asks for the fat nodes' GPUs
    scaled = rule_for_system(kit, proc_scale=0.28)
    assert scaled.request(_job("4", 25), types) == (1, {"core": 7})  # 7.000000000000001: 7
    assert rule_for_system(kit, proc_scale=0.1).request(_job("5", 1), types) == (1, {"core": 1})


def test_accelerator_requests_are_a_stable_share_of_the_small_jobs() -> None:
    eurora = PRESETS["eurora"]
    rule = rule_for_system(eurora, proc_scale=4, accelerator_share=0.3)
    assert rule.accelerators == (("gpu", 2), ("mic", 2))
    types = frozenset({"core", "mem", "gpu", "mic"})
    asked: dict[str, int] = {}
    for i in range(4000):
        units, request = rule.request(_job(str(i), 1 + i % 4), types)
        assert rule.request(_job(str(i), 1 + i % 4), types) == (units, request)  # by job id
        assert units == 1 and request["core"] == 4 * (1 + i % 4)
        for kind in ("gpu", "mic"):
            if kind in request:
                assert request[kind] in (1, 2)
                asked[f"{kind}{request[kind]}"] = asked.get(f"{kind}{request[kind]}", 0) + 1
    assert set(asked) == {"gpu1", "gpu2", "mic1", "mic2"}
    assert 0.27 < sum(asked.values()) / 4000 < 0.33
    # Wide jobs (more than 8 units) never ask: they would not fit the half of the machine.
    wide = [rule.request(_job(str(i), 40), types) for i in range(500)]
    assert all(units == 10 and set(request) == {"core"} for units, request in wide)
    # On KIT the fat nodes' 4 GPUs: at most 2 per unit, as on Eurora.
    kit_rule = rule_for_system(PRESETS["kit-forhlr2"], accelerator_share=1.0)
    assert kit_rule.accelerators == (("gpu", 4),)
    amounts = {kit_rule.request(_job(str(i), 1), frozenset({"core", "gpu"}))[1]["gpu"]
               for i in range(100)}
    assert amounts == {1, 2}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"proc_scale": 0.0}, "proc_scale must be > 0"),
     ({"proc_scale": float("nan")}, "proc_scale must be > 0"),
     ({"accelerator_share": 1.5}, "accelerator_share must be in"),
     ({"accelerator_share": 0.2}, "needs a system with accelerators")],
)
def test_bad_workload_knobs_are_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rule_for_system(resolve_system("16x4", SwfHeader()), **kwargs)  # type: ignore[arg-type]
