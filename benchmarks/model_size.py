"""The size of a CP dispatcher's model on an instance, built in-process.

The service builds no model when the list schedule starts every job of the window now (that
plan is optimal), so its reports have no model size for such instances. The paper's Figure 6
compares model sizes on the same instances all the same: this builds the model the dispatcher
would search, for the jobs it would consider, with the same reductions and head reservation.
Variable counts do not depend on the durations, so requested times stand in for predictions.
"""

from __future__ import annotations

from hpcdispatch.proto_convert import snapshot_from_pb
from hpcdispatch.server.core_wire import search_request_from_pb
from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.dispatchers.cp.cpsat_attempt import model_size
from hpcdispatch.server.dispatchers.planning.job_selection import select_for_model
from hpcdispatch.server.dispatchers.planning.problem import build_problem
from hpcdispatch.server.dispatchers.planning.stopping import never
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, resolve_settings
from hpcdispatch.server.pipeline import predict_durations
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.v1 import dispatcher_pb2 as pb


def model_variables(request: pb.DispatchRequest, name: str) -> int:
    """Variables of CP dispatcher `name`'s model on `request` (0: no job would enter one)."""
    dispatcher = BY_NAME[name]
    if not isinstance(dispatcher, CpDispatcher):
        raise ValueError(f"{name} builds no model")
    snapshot = snapshot_from_pb(request)
    durations = predict_durations(snapshot, WalltimePredictor())  # the service's own stage
    problem = build_problem(snapshot, durations.queued, durations.running)
    settings = resolve_settings(search_request_from_pb(request.search), DEFAULT_PROFILE)
    selection = select_for_model(problem, settings.window, dispatcher.max_model_units)
    if not selection.considered:
        return 0
    reservation = dispatcher.head_reservation(problem, selection, settings)
    heuristic, _ = dispatcher.heuristic_plan(problem, selection.considered, reservation, False)
    formulation = dispatcher.formulate(
        problem, selection.considered, never, heuristic, reservation
    )
    return model_size(formulation.model)[0]
