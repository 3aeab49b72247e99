"""Dispatchers and predictors registered by name (issue #35): the entry point rules, the
built-ins registered as the plugins are, and the names every side of the contract offers."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from types import SimpleNamespace

from hpcdispatch.catalog import (
    DISPATCHER_NAMES,
    PREDICTOR_NAMES,
    dispatcher_names,
    predictor_names,
    registered_dispatchers,
    registered_predictors,
    select_dispatcher,
)
from hpcdispatch.client.session import OPTION_FIELDS, delta_between
from hpcdispatch.registrations import (
    DISPATCHER_GROUP,
    OUTSIDE_KIND_BASE,
    PREDICTOR_GROUP,
    read_group,
)
from hpcdispatch.sim_adapter.backend import StateChange
from hpcdispatch.sim_adapter.stream_backend import delta_of
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.paths import ROOT


@dataclass(frozen=True)
class Entry:
    """An entry point as importlib.metadata gives it: name, value, group and distribution."""

    name: str
    value: str
    group: str = DISPATCHER_GROUP
    dist: object = None


def entry(name: str, dist: str, group: str = DISPATCHER_GROUP) -> Entry:
    return Entry(name, f"{dist.replace('-', '_')}.module:Thing", group,
                 SimpleNamespace(name=dist))


def test_the_built_ins_are_registered_in_pyproject_under_the_enum_names() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    groups = config["project"]["entry-points"]
    assert list(groups[DISPATCHER_GROUP]) == list(DISPATCHER_NAMES)
    assert list(groups[PREDICTOR_GROUP]) == list(PREDICTOR_NAMES)
    # ... and installed so: every built-in comes from the hpcdispatch distribution, its kind the
    # enum value.
    for names, enum in ((registered_dispatchers(), DISPATCHER_NAMES),
                        (registered_predictors(), PREDICTOR_NAMES)):
        built_in = {e.name: e.kind for e in names.entries if e.built_in}
        assert built_in == enum


def test_the_rules_keep_one_meaning_per_name() -> None:
    found = [
        entry("sjf-backfill", "sjf-plugin"),
        entry("easy", "evil-plugin"),  # the contract's name: hpcdispatch's only
        entry("Bad_Name", "sjf-plugin"),  # not lower case and dashes
        entry("sjf-backfill", "other-plugin"),  # taken by the first on the path
        entry("easy", "hpcdispatch"),
        entry("fcfs", "hpcdispatch"),
        entry("aaa", "z-plugin"),
        entry("walltime", "hpcdispatch", PREDICTOR_GROUP),  # another group
    ]
    names = read_group(DISPATCHER_GROUP, DISPATCHER_NAMES, found)  # type: ignore[arg-type]
    # The enum's names in enum order, then the plugins' sorted, kinds from OUTSIDE_KIND_BASE.
    assert names.names == ("fcfs", "easy", "aaa", "sjf-backfill")
    assert [e.kind for e in names.entries] == [1, 2, OUTSIDE_KIND_BASE, OUTSIDE_KIND_BASE + 1]
    assert [e.built_in for e in names.entries] == [True, True, False, False]
    assert names.by_name("sjf-backfill").distribution == "sjf-plugin"  # type: ignore[union-attr]
    ignored = dict((f"{n}:{why.split(':')[0]}", why) for n, why in names.ignored)
    assert set(ignored) == {"easy:from evil-plugin", "Bad_Name:from sjf-plugin",
                            "sjf-backfill:from other-plugin"}
    assert "registered by hpcdispatch only" in ignored["easy:from evil-plugin"]
    assert "already registered by sjf-plugin" in ignored["sjf-backfill:from other-plugin"]


def test_hpcdispatch_keeps_a_name_a_plugin_took_first() -> None:
    found = [entry("someday", "early-plugin"), entry("someday", "hpcdispatch")]
    names = read_group(DISPATCHER_GROUP, DISPATCHER_NAMES, found)  # type: ignore[arg-type]
    assert [(e.name, e.distribution) for e in names.entries] == [("someday", "hpcdispatch")]
    assert names.ignored[0][0] == "someday" and "early-plugin" in names.ignored[0][1]


def test_every_command_line_offers_the_registered_names() -> None:
    from hpcdispatch.cli import build_parser
    from hpcdispatch.sim_adapter.adapter import DEFAULT, DISPATCHERS, PREDICTORS

    assert (DEFAULT, *dispatcher_names()) == DISPATCHERS
    assert (DEFAULT, *predictor_names()) == PREDICTORS
    serve = build_parser().parse_args(["serve", "--default-dispatcher", "easy-k"])
    assert serve.default_dispatcher == "easy-k"


def test_a_request_names_a_built_in_by_its_enum_and_a_plugin_by_name() -> None:
    request = pb.DispatchRequest()
    select_dispatcher(request, "easy-sjf")
    assert (request.dispatcher, request.dispatcher_name) == (pb.DISPATCHER_EASY_SJF, "")
    request = pb.DispatchRequest()
    select_dispatcher(request, "sjf-backfill")
    assert (request.dispatcher, request.dispatcher_name) == (0, "sjf-backfill")


def test_a_session_delta_repeats_every_decision_option_of_the_request() -> None:
    """The client's deltas carry what the request asks for, names included (a delta without
    `dispatcher_name` was decided by the server's default)."""
    shared = ({f.name for f in pb.DispatchRequest.DESCRIPTOR.fields}
              & {f.name for f in pb.UpdateSessionRequest.DESCRIPTOR.fields})
    # `windows` is the cluster's state, not an option (UnavailabilityWindows in a delta, sent
    # by delta_between when it changed: tests/server/sessions/test_sessions.py).
    assert shared - {"time", "search", "windows"} == set(OPTION_FIELDS)
    old = pb.DispatchRequest(time=10)
    new = pb.DispatchRequest(time=20, dispatcher_name="sjf-backfill", predictor_name="longest",
                             allocator=pb.ALLOCATOR_FIRST_FIT)
    delta = delta_between(old, new)
    assert delta is not None
    assert (delta.dispatcher_name, delta.predictor_name, delta.allocator) == (
        "sjf-backfill", "longest", pb.ALLOCATOR_FIRST_FIT)


def test_a_stream_replays_delta_repeats_every_decision_option_of_the_template() -> None:
    """The stream path's deltas (built from the simulator's changes, not by diffing requests)
    carry the same options: a plugin's dispatcher and predictor go by name."""
    template = pb.DispatchRequest(dispatcher_name="sjf-backfill", predictor_name="longest",
                                  allocator=pb.ALLOCATOR_FIRST_FIT)
    template.search.deterministic = True
    delta = delta_of(StateChange(time=5, ended=("a",), cancelled=(), submitted=(), started=()),
                     template)
    assert {name: getattr(delta, name) for name in OPTION_FIELDS} == {
        name: getattr(template, name) for name in OPTION_FIELDS}
    assert delta.search == template.search and list(delta.ended_job_ids) == ["a"]
