"""What a request asks of its decision, once checked: the options a Dispatch, an OpenSession's
snapshot and an UpdateSession carry alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..pipeline import CallerScope, SearchControl, SearchSettings


@dataclass(frozen=True, slots=True)
class DecisionOptions:
    dispatcher: int  # pb.Dispatcher; 0 (unspecified): the server's default
    predictor: int  # pb.Predictor; 0 (unspecified): the server's default
    first_fit: bool  # pb.ALLOCATOR_FIRST_FIT asked for
    settings: SearchSettings  # the search options over their profile's defaults
    cluster: str  # "default" when the request names none

    @staticmethod
    def of(
        request: pb.DispatchRequest | pb.UpdateSessionRequest, settings: SearchSettings,
        cluster: str,
    ) -> DecisionOptions:
        """`request`'s options (checked), with the settings its search options resolve to."""
        return DecisionOptions(
            dispatcher=request.dispatcher, predictor=request.predictor,
            first_fit=request.allocator == pb.ALLOCATOR_FIRST_FIT, settings=settings,
            cluster=cluster or "default",
        )

    def control(
        self, deadline: float, workers: int, cancelled: Callable[[], bool], identity: str = "",
    ) -> SearchControl:
        """The search these options ask for, with `workers` solver threads, until `deadline`
        (time.monotonic()) or until `cancelled()`, for the caller `identity` (authenticated by
        the edge; "" without one) on this request's cluster."""
        return SearchControl(settings=self.settings, deadline=deadline, first_fit=self.first_fit,
                             workers=workers, cancelled=cancelled,
                             scope=CallerScope(identity, self.cluster))
