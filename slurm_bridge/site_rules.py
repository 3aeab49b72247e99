"""A site's own rules, read from Slurm, in the snapshot's terms (docs/slurm-bridge.md,
*A site's own rules*).

* Eligibility: a job's partitions (`--partition`, a list) and the features its `--constraint`
  requires: features joined by AND ("a&b"; Slurm stores "a,b" as "a&b") and OR ("a|b"), read
  as Slurm evaluates them, left to right (hpcdispatch/constraints.py: one AND-term is the
  job's required features, more its feature_alternatives). Any other constraint (matching OR
  "[a|b]", counts "a*2", parentheses, negation "!a") is not expressible, and such a job is
  left to Slurm (`constraint_rules` answers None).
* Reservation: a job asking for one (`--reservation=R`) must run inside R: the window of R
  carries R's name, and the job asks for it (QueuedJob.reservation). It is left to Slurm when
  R holds no managed node (no window of that name) or is a maintenance: a MAINT window has no
  name, so that a drained node in it, sent up below, takes no job at all before it ends.
* Priority: Slurm computes none for a held job (holding is priority 0; `sprio` does not list
  it). What Slurm keeps of a held job's priority is its nice (`--nice`, `scontrol update
  job=J nice=N`), which Slurm subtracts from the priority it computes at release: priority =
  NICE_OFFSET − nice (NICE_OFFSET = 2^31, as Slurm's own), higher first, equal nices in
  submit order.
* Windows: each reservation on managed nodes that has not ended is a window [StartTime,
  EndTime) on those nodes (a reservation of some cores of a node takes the whole node). A
  MAINT reservation admits nobody. Any other admits nobody either, unless it is MAGNETIC: a
  job that does not ask for a reservation (`--reservation`) is started inside one by Slurm
  only when the reservation is MAGNETIC and lists its user or
  account, so only then does the window admit its Users / Accounts (not when they are
  negated, "-bob", or given by Groups, which the bridge cannot resolve, or more than 64:
  nobody then; admitting fewer never starts a job Slurm would refuse).
* A node back at a time (the contract's NodeState comment): a node that is drained (or in
  maintenance) and otherwise up, inside a MAINT window under way (it admits nobody: no users,
  accounts or name), comes back at the window's end: it is sent up, the window keeping all
  new work off it until then. Inside any other reservation it stays drained (a job of that
  reservation could be admitted to it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hpcdispatch.constraints import constraint_rules
from hpcdispatch.snapshot import UnavailabilityWindow

from .slurm_json import SlurmJob
from .slurm_reservations import SlurmReservation

MAX_LABELS = 64  # the service's default max_labels: a longer admitted list admits nobody
NICE_OFFSET = 2**31  # Slurm's NICE_OFFSET: a held job of nice 0 has priority 2^31
MAX_PRIORITY = 2**40  # the contract's bound (QueuedJob.priority)
def left_to_slurm_reason(job: SlurmJob, windows: Collection[UnavailabilityWindow]) -> str:
    """Why a held job of a managed partition cannot be expressed ("" when it can), given the
    windows of the reservations on managed nodes (`windows_from_reservations`)."""
    if constraint_rules(job.constraint) is None:
        return (f"--constraint {job.constraint!r} is not features joined by AND (&) and OR "
                f"(|)")
    if job.reservation and not any(w.name == job.reservation for w in windows):
        return (f"it asks for reservation {job.reservation!r}, a maintenance or one holding "
                f"no managed node")
    return ""


def job_priority(job: SlurmJob) -> int:
    """Higher first: NICE_OFFSET − nice, within the contract's [0, 2^40]."""
    return min(MAX_PRIORITY, max(0, NICE_OFFSET - job.nice))


def windows_from_reservations(
    reservations: Sequence[SlurmReservation], node_ids: Sequence[str], now: int,
) -> tuple[UnavailabilityWindow, ...]:
    """The windows of the reservations on `node_ids` (the managed nodes) not ended by now."""
    known = set(node_ids)
    out = []
    for r in reservations:
        if r.end <= now or r.end <= r.start:
            continue
        nodes = tuple(node_ids) if r.nodes == ("ALL",) else tuple(
            dict.fromkeys(n for n in r.nodes if n in known))
        if not nodes:
            continue
        users, accounts = _admitted(r)
        name = "" if r.maintenance else r.name  # no job may ask for a maintenance
        out.append(UnavailabilityWindow(nodes, r.start, r.end, users, accounts, name))
    return tuple(out)


def _admitted(r: SlurmReservation) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if r.maintenance or "MAGNETIC" not in r.flags or r.groups:
        return (), ()
    if any(u.startswith("-") for u in (*r.users, *r.accounts)):
        return (), ()
    if len(r.users) > MAX_LABELS or len(r.accounts) > MAX_LABELS:
        return (), ()  # never more than the service takes; admitting fewer is safe
    return r.users, r.accounts


def back_at_window_end(node: str, windows: Collection[UnavailabilityWindow], now: int) -> bool:
    """Whether `node` lies in a window under way at `now` that admits nobody."""
    return any(w.start <= now < w.end and not (w.users or w.accounts or w.name)
               and node in w.nodes for w in windows)
