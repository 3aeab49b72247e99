"""A site's own rules in the dispatchers' terms: which nodes each queued job may use.

For queued job i, E_i is the set of nodes its partitions and features allow
(`QueuedJob.may_use`: any of its partitions, all of its required features, all of one term of
its OR of feature terms) and, for a job that must run in reservation R, that lie in a window
named R; a job with none of these, or whose rules allow every node, may use every node (E_i
is not stored). The unavailability windows are kept as data, relative to t: node indices,
[from, to) and who is admitted, so a planner can hold them. At t, job i may start on node n
only if n is in E_i and no window on n that does not admit i overlaps [t, t + requested_i)
(`start_now`): the mask the start-now placements of FCFS and EASY honour. Later than t, the
planner (`NodeProfile`) reads E_i and the windows that do not admit job i (`holding`) for
every start it tries. A job of reservation R is admitted to the windows named R, and is held
out of R's nodes outside R's spans by holds of its own (`inside`, the complement in time of
the R windows on each group of nodes), so the same two readings keep its run inside R.

Built once per problem, and only when the snapshot has such rules (`build_eligibility` answers
None otherwise: no cost, every dispatcher as before). A job whose E_i can never hold its units
(on the up nodes, with nothing running) never fits (`fits_ever`): it is skipped, never
blocking the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcdispatch.snapshot import QueuedJob, Snapshot

from ...domain.free_pool import NodeMask, units_per_node
from ...domain.node_index import NodeIndex


@dataclass(frozen=True, slots=True)
class Window:
    """Nodes unavailable over [start, end), seconds relative to t (start may be < 0: the window
    began before t), but to the jobs of `users` or `accounts`."""

    nodes: frozenset[int]  # node indices
    start: int
    end: int
    users: frozenset[str]
    accounts: frozenset[str]
    name: str = ""  # a reservation's name: the jobs asking for it are admitted

    def admits(self, user: str, account: str, reservation: str = "") -> bool:
        return (user in self.users or (bool(account) and account in self.accounts)
                or (bool(reservation) and reservation == self.name))


@dataclass(frozen=True, slots=True)
class Eligibility:
    """The per-job node masks of one problem, by job index (jobs without a restriction are not
    listed), and the windows still to come or under way at t."""

    nodes: dict[int, frozenset[int]]  # E_i: the nodes job i's partitions and features allow
    start_now: dict[int, NodeMask]  # where job i may start at t: E_i less its blocking windows
    windows: tuple[Window, ...]
    # The windows (positions in `windows`) that admit job i, for the jobs some window admits:
    # every other window is a hold on its nodes over [start, end) for job i.
    admitted: dict[int, frozenset[int]] = field(default_factory=dict)
    # The holds of job i's own, for a job of reservation R: R's nodes outside R's spans.
    inside: dict[int, tuple[Window, ...]] = field(default_factory=dict)

    def allowed(self, job: int) -> frozenset[int] | None:
        """E_i of job index `job` (None: every node)."""
        return self.nodes.get(job)

    def now(self, job: int) -> NodeMask | None:
        """Where job index `job` may start at t (None: anywhere up)."""
        return self.start_now.get(job)

    def holding(self, job: int) -> tuple[Window, ...]:
        """The windows that do not admit job index `job`: it may run on none of their nodes
        over their [start, end)."""
        admitted, own = self.admitted.get(job), self.inside.get(job, ())
        if not admitted:
            return self.windows + own if own else self.windows
        return tuple(w for k, w in enumerate(self.windows) if k not in admitted) + own

    def restricts(self, job: int) -> bool:
        """Whether job index `job` has an E_i or some window holds nodes from it."""
        return (job in self.nodes or job in self.inside
                or len(self.admitted.get(job, ())) < len(self.windows))


def build_eligibility(snapshot: Snapshot, index: NodeIndex) -> Eligibility | None:
    """The masks of `snapshot`'s queued jobs on `index`'s nodes; None when no queued job is
    restricted and no window is under way or to come."""
    t = snapshot.time
    position = index.position
    windows = tuple(
        Window(frozenset(position[n] for n in w.nodes if n in position), w.start - t,
               w.end - t, frozenset(w.users), frozenset(w.accounts), w.name)
        for w in snapshot.windows if w.end > t)
    restricted = [(i, q) for i, q in enumerate(snapshot.queued)
                  if q.has_node_rules or q.reservation]
    if not restricted and not windows:
        return None
    by_rules: dict[_RuleKey, frozenset[int]] = {}
    nodes: dict[int, frozenset[int]] = {}
    inside: dict[int, tuple[Window, ...]] = {}
    labels = _Labels(snapshot) if restricted else None
    reservations = _Reservations(windows, snapshot, index)
    for i, job in restricted:
        assert labels is not None
        key = (job.partitions, job.required_features, job.feature_alternatives)
        allowed = by_rules.get(key)
        if allowed is None:
            allowed = by_rules[key] = labels.allowing(job)
        if job.reservation:
            allowed = reservations.nodes_for(job, allowed)
            inside[i] = reservations.holds(job.reservation)
        if len(allowed) < len(snapshot.nodes):  # E_i = every node is no restriction: not stored
            nodes[i] = allowed
    if not nodes and not windows:  # e.g. one partition holding every node (a Slurm bridge's)
        return None
    start_now: dict[int, NodeMask] = {i: NodeMask(allowed) for i, allowed in nodes.items()}
    admitted: dict[int, frozenset[int]] = {}
    for i, job in enumerate(snapshot.queued):
        blocked = _blocked((*windows, *inside.get(i, ())), job)
        if blocked:
            start_now[i] = NodeMask(nodes.get(i), blocked)
        if windows:
            mine = frozenset(k for k, w in enumerate(windows)
                             if w.admits(job.user, job.account, job.reservation))
            if mine:
                admitted[i] = mine
    return Eligibility(nodes, start_now, windows, admitted, inside)


_RuleKey = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, ...], ...]]
FOREVER = 2**40  # the far edge of a job's own holds, seconds relative to t (MAX_TIME)


class _Reservations:
    """The windows of each reservation name: the nodes a job of R may use and the holds
    that keep it inside R's spans [from, to) on each of them."""

    def __init__(self, windows: Sequence[Window], snapshot: Snapshot, index: NodeIndex) -> None:
        self.named: dict[str, list[Window]] = {}
        for w in windows:
            if w.name:
                self.named.setdefault(w.name, []).append(w)
        self._holds: dict[str, tuple[Window, ...]] = {}
        self._nodes: dict[tuple[object, ...], frozenset[int]] = {}  # by the job's shape
        self.snapshot, self.index = snapshot, index
        self._running: list[tuple[int, int, tuple[int, ...]]] | None = None

    def nodes_for(self, job: QueuedJob, allowed: frozenset[int]) -> frozenset[int]:
        """The nodes of `allowed` in the windows named after `job`'s reservation that can
        still hold its run inside the window: none (it never fits) when no such window has
        room for its rn_i units at the latest start inside it, e := to - requested_i >=
        max(from, 0), with the running work at its requested times. The room there is the
        most the window offers: the running work only ends."""
        index, t = self.index, self.snapshot.time
        req = tuple(job.unit_request.get(r, 0) for r in index.resources)
        key = (job.reservation, job.requested_time, job.units, req, allowed)
        known = self._nodes.get(key)
        if known is not None:
            return known
        out: set[int] = set()
        for w in self.named.get(job.reservation, ()):
            latest = w.end - job.requested_time
            if latest < max(w.start, 0):
                continue  # too short, from now on
            nodes = [n for n in w.nodes & allowed if index.eligible[n]]
            used = self._used_after(latest + t, nodes)
            room = sum(units_per_node(tuple(c - u for c, u in zip(index.capacity[n], used[n],
                                                                   strict=True)), req)
                       for n in nodes)
            if room >= job.units:
                out.update(nodes)
        self._nodes[key] = fits = frozenset(out)
        return fits

    def _used_after(self, at: int, nodes: Sequence[int]) -> dict[int, tuple[int, ...]]:
        """What the running work still holds at `at` (absolute seconds) on `nodes`: the
        units of the jobs whose requested time ends after it."""
        if self._running is None:
            position, resources = self.index.position, self.index.resources
            self._running = [
                (r.start_time + r.requested_time, position[u.node_id],
                 tuple(u.amounts.get(k, 0) for k in resources))
                for r in self.snapshot.running for u in r.units if u.node_id in position]
        zero = (0,) * len(self.index.resources)
        used = dict.fromkeys(nodes, zero)
        for end, n, amounts in self._running:
            if end > at and n in used:
                used[n] = tuple(a + b for a, b in zip(used[n], amounts, strict=True))
        return used

    def holds(self, name: str) -> tuple[Window, ...]:
        """Per group of nodes that the same windows named `name` cover: a hold admitting
        nobody over each stretch of time outside their spans (from -FOREVER to FOREVER)."""
        known = self._holds.get(name)
        if known is not None:
            return known
        spans: dict[int, list[tuple[int, int]]] = {}
        for w in self.named.get(name, ()):
            for n in w.nodes:
                spans.setdefault(n, []).append((w.start, w.end))
        groups: dict[tuple[tuple[int, int], ...], set[int]] = {}
        for n, mine in spans.items():
            groups.setdefault(tuple(sorted(mine)), set()).add(n)
        out: list[Window] = []
        for group_spans, group in groups.items():
            covered = frozenset(group)
            edge = -FOREVER
            for start, end in group_spans:
                if start > edge and start > 0:  # a gap before this span, still to come
                    out.append(Window(covered, edge, start, frozenset(), frozenset()))
                edge = max(edge, end)
            out.append(Window(covered, edge, FOREVER, frozenset(), frozenset()))
        self._holds[name] = held = tuple(out)
        return held


class _Labels:
    """The nodes of each partition and of each feature: E_i as set operations on them, the
    same nodes as `QueuedJob.may_use` node by node (any of its partitions, all its features),
    at the cost of one pass over the nodes' labels, not nodes × distinct rules."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.every = frozenset(range(len(snapshot.nodes)))
        self.partition: dict[str, set[int]] = {}
        self.feature: dict[str, set[int]] = {}
        for n, node in enumerate(snapshot.nodes):
            for p in node.partitions:
                self.partition.setdefault(p, set()).add(n)
            for f in node.features:
                self.feature.setdefault(f, set()).add(n)

    def allowing(self, job: QueuedJob) -> frozenset[int]:
        allowed: set[int] | frozenset[int] = self.every
        if job.partitions:
            allowed = set().union(*(self.partition.get(p, ()) for p in job.partitions))
        for f in job.required_features:
            allowed = allowed & self.feature.get(f, set())
        if job.feature_alternatives:
            allowed = allowed & set().union(*map(self._having_all, job.feature_alternatives))
        return frozenset(allowed)

    def _having_all(self, term: Sequence[str]) -> set[int]:
        """The nodes having every feature of `term` (one AND-term of an OR)."""
        having = set(self.feature.get(term[0], ()))
        for f in term[1:]:
            having &= self.feature.get(f, set())
        return having


def _blocked(windows: Sequence[Window], job: QueuedJob) -> frozenset[int]:
    """The nodes of the windows that `job`, started at t and run to its requested time, would
    run into without being admitted: those overlapping [0, requested) relative to t."""
    hit = [w.nodes for w in windows if w.start < job.requested_time and w.end > 0
           and not w.admits(job.user, job.account, job.reservation)]
    if len(hit) < 2:
        return hit[0] if hit else frozenset()  # one window's own set: shared, not copied
    return frozenset().union(*hit)


def fits_ever(allowed: frozenset[int], capacity: Sequence[tuple[int, ...]],
              up: Sequence[bool], req: tuple[int, ...], units: int) -> bool:
    """Whether `units` units of `req` fit on the up nodes of `allowed` with nothing running."""
    total = 0
    for n in allowed:
        if up[n]:
            total += units_per_node(capacity[n], req)
            if total >= units:
                return True
    return False
