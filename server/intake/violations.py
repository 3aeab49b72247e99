"""A request's problems, each named by its field path (answered INVALID_ARGUMENT with a
google.rpc.BadRequest)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_REPORTED = 100  # violations listed in one error


@dataclass(frozen=True, slots=True)
class Violation:
    field: str
    description: str


class Violations:
    """The violations found so far, in the order found; at most MAX_REPORTED are kept."""

    def __init__(self) -> None:
        self.items: list[Violation] = []

    def add(self, field: str, description: str) -> None:
        if len(self.items) < MAX_REPORTED:
            self.items.append(Violation(field, description))

    @property
    def full(self) -> bool:
        return len(self.items) >= MAX_REPORTED
