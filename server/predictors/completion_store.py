"""The interface of the knowledge base's storage: completed jobs per caller scope (the client
identity that reported them and the cluster it named), in recording order.

Two implementations: `store_sqlite.SqliteStore` (an embedded file, or memory) and
`store_postgres.PostgresStore` (a PostgreSQL server shared by replicas), both answering with
the same statements (`store_sql`); `store_location` picks one from the `predictor_store`
setting. A store only records and reads back rows; the
predictors read an in-memory index built from those rows (`history_index`), refreshed by
reading the rows recorded since the last read (`rows_since`). For that, every row gets a
sequence number that grows in commit order: a reader that has seen row n has seen every row
before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..domain.caller_scope import CallerScope
from ..domain.duration_predictor import Completion
from .job_keys import kept, name_prefix, request_shape


class StoreUnavailable(Exception):
    """The store could not be reached within its retries; nothing is known to be stored.

    A completion report that gets this must not be acknowledged: the caller retries it (the
    service answers UNAVAILABLE, which `hpcdispatch.client` retries). Storing is idempotent.
    """


@dataclass(frozen=True, slots=True)
class StoredCompletion:
    """One recorded completion as the predictors read it; `seq` grows in commit order."""

    seq: int
    user: str
    name: str
    name_prefix: str
    shape: str
    end_time: int
    run_time: int


@dataclass(frozen=True, slots=True)
class CompletionRow:
    """One completion as written: its key (identity, cluster, job id, start time) and what is
    read back."""

    identity: str  # who reported it ("" without client certificates)
    cluster: str
    job_id: str
    user: str
    name: str
    name_prefix: str
    shape: str
    requested_time: int
    start_time: int
    end_time: int
    run_time: int

    @classmethod
    def of(cls, cluster: str, completion: Completion, identity: str = "") -> CompletionRow:
        """The row of a completion `identity` reported, every text in the form the knowledge
        base keeps it
        (`job_keys.kept`; the name prefix is the full name's); ValueError if the completion
        ends before it starts."""
        if completion.end_time < completion.start_time:
            raise ValueError(
                f"completion of job {completion.job_id!r} ends ({completion.end_time}) "
                f"before it starts ({completion.start_time})"
            )
        facts = completion.facts
        return cls(
            identity=kept(identity),
            cluster=kept(cluster),
            job_id=kept(completion.job_id),
            user=kept(facts.user),
            name=kept(facts.name),
            name_prefix=kept(name_prefix(facts.name)),
            shape=kept(request_shape(facts)),
            requested_time=facts.requested_time,
            start_time=completion.start_time,
            end_time=completion.end_time,
            run_time=completion.run_time,
        )

    def values(self) -> tuple[str | int, ...]:
        return (
            self.identity, self.cluster, self.job_id, self.user, self.name, self.name_prefix,
            self.shape, self.requested_time, self.start_time, self.end_time, self.run_time,
        )


def completion_rows(cluster: str, completions: Iterable[Completion], identity: str = ""
                    ) -> list[CompletionRow]:
    """The rows of a batch `identity` reported; ValueError (naming the job) if any completion
    is invalid."""
    return [CompletionRow.of(cluster, completion, identity) for completion in completions]


class CompletionStore(Protocol):
    """Where the completed jobs live. Every method may raise StoreUnavailable."""

    location: str  # what to show in logs and errors (never a password)

    def record(self, rows: Sequence[CompletionRow]) -> int:
        """Store the rows durably in one transaction, each (identity, cluster, job id, start
        time) once; returns how many were new. Returns only once they are committed."""
        ...

    def rows_since(self, scope: CallerScope, after_seq: int) -> list[StoredCompletion]:
        """The scope's rows with seq > after_seq, in seq order (one round trip)."""
        ...

    def count(self, scope: CallerScope) -> int:
        """How many completions are stored for a scope."""
        ...

    def forget(self, scope: CallerScope, seqs: Sequence[int]) -> None:
        """Delete the scope's rows of these sequence numbers (the knowledge base's index no
        longer holds them), in one transaction."""
        ...

    def scopes(self) -> list[CallerScope]:
        """The scopes that have rows, the one whose latest row was recorded last at the end."""
        ...

    def forget_scope(self, scope: CallerScope) -> None:
        """Delete every row of a scope."""
        ...

    def close(self) -> None: ...
