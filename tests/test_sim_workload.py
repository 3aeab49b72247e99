"""Processors -> units, and trace headers -> systems."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcdispatch.sim_adapter.swf import SwfHeader, TraceJob, read_header
from hpcdispatch.sim_adapter.workload import (
    UnitRule,
    resolve_system,
    rule_for_system,
    system_from_header,
    units_fitting_empty,
)
from hpcdispatch.systems import PRESETS

TRACES = Path("/work/shared/traces")


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
    if not (TRACES / trace).exists():
        pytest.skip("shared traces not available")
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
