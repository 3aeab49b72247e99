"""Who asks for a decision: the authenticated caller and the cluster it names.

The edge that authenticated the call sets it on the decision's SearchControl; a dispatcher that
keeps something between decisions files it under the scope (dispatchers/planning/caller_scope.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallerScope:
    """Who asks: the authenticated caller ("" without client certificates: every caller is
    then the same) and the cluster it names ("default" when it names none)."""

    identity: str = ""
    cluster: str = "default"
