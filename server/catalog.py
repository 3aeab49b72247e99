"""Names of dispatchers and predictors as used in configuration, CLI flags and logs."""

from __future__ import annotations

from hpcdispatch.v1 import dispatcher_pb2 as pb

DISPATCHER_NAMES: dict[str, int] = {
    "fcfs": pb.DISPATCHER_FCFS,
    "easy": pb.DISPATCHER_EASY,
    "hcp19": pb.DISPATCHER_HCP19,
    "pcp19": pb.DISPATCHER_PCP19,
    "pcp20": pb.DISPATCHER_PCP20,
}
PREDICTOR_NAMES: dict[str, int] = {
    "walltime": pb.PREDICTOR_WALLTIME,
    "last-two": pb.PREDICTOR_LAST_TWO,
    "data-driven": pb.PREDICTOR_DATA_DRIVEN,
    "oracle": pb.PREDICTOR_ORACLE,
}
DISPATCHER_BY_KIND = {v: k for k, v in DISPATCHER_NAMES.items()}
PREDICTOR_BY_KIND = {v: k for k, v in PREDICTOR_NAMES.items()}


def dispatcher_kind(name: str) -> int:
    try:
        return DISPATCHER_NAMES[name]
    except KeyError:
        known = sorted(DISPATCHER_NAMES)
        raise ValueError(f"unknown dispatcher {name!r}; one of {known}") from None


def predictor_kind(name: str) -> int:
    try:
        return PREDICTOR_NAMES[name]
    except KeyError:
        raise ValueError(f"unknown predictor {name!r}; one of {sorted(PREDICTOR_NAMES)}") from None
