"""The size of a CP dispatcher's model on an instance, built in-process.

The service builds no model when the list schedule starts every job of the window now (that
plan is optimal), so its reports have no model size for such instances. The paper's Figure 6
compares model sizes on the same instances all the same: this builds the model the dispatcher
would search, for the jobs it would consider, with the same reductions and head reservation
(the pipeline's `model_variables`). Variable counts do not depend on the durations, so
requested times stand in for predictions.
"""

from __future__ import annotations

from hpcdispatch.proto_convert import snapshot_from_pb
from hpcdispatch.server.core_wire import search_request_from_pb
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, resolve_settings
from hpcdispatch.server.pipeline import model_variables as model_variables_of
from hpcdispatch.v1 import dispatcher_pb2 as pb


def model_variables(request: pb.DispatchRequest, name: str) -> int:
    """Variables of CP dispatcher `name`'s model on `request` (0: no job would enter one)."""
    settings = resolve_settings(search_request_from_pb(request.search), DEFAULT_PROFILE)
    return model_variables_of(snapshot_from_pb(request), name, settings)
