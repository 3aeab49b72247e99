"""Pooled-view tests of many held reservations at once, on one profile.

Conservative asks, of each reservation it holds, whether the pooled view with that job's own
reservation given back would let it start earlier (`NodeProfile.could_start_before`, in the
compression) or now (`NodeProfile.starts_now_without`, in the repacking). Asked one job at a
time, each test copies the pooled view and scans it; but between two reservations that really
move, the pooled view does not change, so every job's answer can be read off one profile, as
(jobs × steps) arrays.

Job j holds demand D_j over [s_j, s_j + d_j), both step boundaries. Given back, the pooled
view is P + D_j over those steps. A window [x, x + d_j) with x < s_j ends before s_j + d_j, so
it fits exactly when P >= D_j on its steps before s_j and P >= 0 on its steps from s_j on. The
earliest fitting start is 0 or a step boundary, and a window fitting from inside a step fits
from that step's start too: the candidates are the boundaries before s_j (`first_room`'s).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .node_profile import NodeProfile
from .problem import Job

Ints = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]


def earlier_in_pooled(times: Ints, pooled: Ints, starts: Ints, durations: Ints,
                      demands: Ints, now_only: bool = False) -> Flags | None:
    """Per job j, whether the pooled view (times, pooled) with j's block given back fits j
    over a window starting before s_j (`now_only`: starting at 0). None where some s_j or
    s_j + d_j is not a step boundary (the caller then asks job by job)."""
    steps, jobs = len(times), len(starts)
    if not jobs:
        return np.zeros(0, dtype=bool)
    ends = starts + durations
    at_start = times.searchsorted(starts)
    at_end = times.searchsorted(ends)
    if not (np.all(at_start < steps) and np.all(at_end < steps)
            and np.array_equal(times[at_start], starts)
            and np.array_equal(times[at_end], ends)):
        return None
    # Steps lacking room for each job's demand, and steps overfull, counted up to each step.
    short = ~np.all(pooled[None, :, :] >= demands[:, None, :], axis=2)  # (jobs, steps)
    short_before = np.zeros((jobs, steps + 1), dtype=np.int64)
    np.cumsum(short, axis=1, out=short_before[:, 1:])
    negative_before = np.zeros(steps + 1, dtype=np.int64)
    np.cumsum(~np.all(pooled >= 0, axis=1), out=negative_before[1:])
    width = 1 if now_only else steps
    first = np.broadcast_to(np.arange(width), (jobs, width))  # candidate start steps
    # One past the last step each window [times[first], + d_j) overlaps.
    last = times.searchsorted(times[first] + durations[:, None])
    split = np.minimum(last, at_start[:, None])  # its steps before s_j end there
    rows = np.arange(jobs)[:, None]
    fits = short_before[rows, split] == short_before[rows, first]
    after = np.maximum(last, at_start[:, None])
    fits &= negative_before[after] == negative_before[at_start][:, None]
    fits &= first < at_start[:, None]  # only starts before s_j (s_j <= 0: none)
    result: Flags = fits.any(axis=1)
    return result


def earlier_all(profile: NodeProfile, held: Sequence[tuple[int, Job]],
                now_only: bool = False) -> list[bool]:
    """For each (s_j, job j) of `held`, reservations in `profile`: `profile.could_start_before
    (job, s_j)` (`now_only`: `profile.starts_now_without(job, s_j)`, s_j > 0), all read off the
    profile as it is now."""
    starts = np.fromiter((s for s, _ in held), dtype=np.int64, count=len(held))
    durations = np.fromiter((job.duration for _, job in held), dtype=np.int64,
                            count=len(held))
    demands = np.asarray([job.demand() for _, job in held], dtype=np.int64).reshape(
        len(held), profile.pooled.shape[1])
    flags = earlier_in_pooled(profile.times, profile.pooled, starts, durations, demands,
                              now_only)
    if flags is None:  # a block off the step boundaries: job by job, as before
        ask = profile.starts_now_without if now_only else profile.could_start_before
        return [ask(job, s) for s, job in held]
    answer: list[bool] = flags.tolist()
    return answer
