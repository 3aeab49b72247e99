"""The size of the model a CP dispatcher would search on a problem, built even where its
decision builds none (when the list schedule starts every job of the window now, that plan is
optimal and no model is made, so the decision reports no model size). The 2020 paper's Figure 6
compares model sizes on the same instances all the same; the pipeline's `model_variables` is
the door to this from outside the core (benchmarks/same_instances/model_size.py).
"""

from __future__ import annotations

from ...domain.search_settings import SearchSettings
from ..planning.job_selection import select_for_model
from ..planning.problem import Problem
from ..planning.stopping import never
from .cp_dispatch import CpDispatcher
from .cpsat_attempt import model_size


def model_variables(problem: Problem, dispatcher: object, name: str,
                    settings: SearchSettings) -> int:
    """Variables of `dispatcher`'s (registered as `name`) model on `problem` under `settings`:
    the jobs it would consider, with the same reductions and head reservation; 0 when no job
    would enter one. ValueError when `dispatcher` is no CP dispatcher."""
    if not isinstance(dispatcher, CpDispatcher):
        raise ValueError(f"{name} builds no model")
    selection = select_for_model(problem, settings.window, dispatcher.max_model_units)
    if not selection.considered:
        return 0
    reservation = dispatcher.head_reservation(problem, selection, settings)
    heuristic, _ = dispatcher.heuristic_plan(problem, selection.considered, reservation, False)
    formulation = dispatcher.formulate(
        problem, selection.considered, never, heuristic, reservation
    )
    return model_size(formulation.model)[0]
