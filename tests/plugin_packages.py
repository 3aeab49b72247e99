"""Plugin packages for the tests: the example package installed into a temporary target, and a
package of broken plugins laid out as an installed distribution (a module and its dist-info),
which a process finds on its PYTHONPATH as it finds any installed plugin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sjf-backfill-plugin"

BROKEN_MODULE = "broken_hpcdispatch_plugins"
# Registered name -> the fallback reason label its decisions are answered under.
BROKEN_DISPATCHERS = {
    "missing-module": "load_failed",  # its module does not exist
    "not-a-dispatcher": "load_failed",  # what it makes has no decide()
    "raises": "dispatcher_error",
    "exits": "plugin_failed",  # raises SystemExit in decide()
    "over-allocates": "check_failed",
    "malformed": "malformed_outcome",
    "hangs": "deadline_passed",  # never answers until RELEASE is set
}
BROKEN_PREDICTORS = {
    "predictor-missing": "load_failed",
    "predictor-raises": "raised",
    "predictor-invalid": "invalid",
    "predictor-hangs": "deadline_passed",  # never answers until RELEASE is set
}
# Dispatchers that change the problem they are given, then fail (issues #43, #51): the fallback
# must decide as EASY on the untouched snapshot, and a session's next decisions must not see the
# change. Registered name -> fallback reason label.
MUTATING_DISPATCHERS = {
    "takes-the-pool": "dispatcher_error",  # places units on problem.free_now itself, raises
    "clears-the-queue": "dispatcher_error",  # empties problem.jobs, moves t, raises
    "rewrites-the-running-work": "check_failed",  # running work ends never, answers junk
    "sets-units": "dispatcher_error",  # rn_i of every (frozen) job set to 10**6, raises
    "zeroes-requests": "dispatcher_error",  # every job's request and demand set to 0, raises
    "clears-node-sets": "dispatcher_error",  # every free-pool group's node set emptied in place
    "empties-the-heaps": "dispatcher_error",  # every group's node heap emptied in place
    "poisons-the-scores": "dispatcher_error",  # best-fit scores reversed in the pool's cache
    "renumbers-the-queue": "dispatcher_error",  # queue reversed, halved, each job's i renumbered
}
# Plugins that end the process (os._exit(7)) in their first call; name -> (group, call).
PROCESS_ENDING = {
    "ends-process": ("dispatcher", "decide"),
    "predictor-ends-process": ("predictor", "predict_many"),
}

_BROKEN_SOURCE = '''"""Dispatchers and predictors that fail every way a plugin can."""

import os
import sys
import threading

from hpcdispatch.server.dispatchers.api import HEURISTIC, Outcome

RELEASE = threading.Event()  # `Hangs` answers once this is set (never, in a server)


class Raises:
    def decide(self, problem, control):
        raise RuntimeError("boom from a plugin")


class Exits:
    def decide(self, problem, control):
        sys.exit(3)


class OverAllocates:
    """Every queued job, every unit, on node 0."""

    def decide(self, problem, control):
        placements = {job.index: [0] * job.units for job in problem.jobs}
        return Outcome(placements=placements, status=HEURISTIC)


class Malformed:
    def decide(self, problem, control):
        return Outcome(placements={len(problem.jobs) + 7: [0]}, status=HEURISTIC)


class Hangs:
    def decide(self, problem, control):
        RELEASE.wait()
        return Outcome(placements={}, status=HEURISTIC)


class TakesThePool:
    """Every job it can, placed on the problem's own free pool (not a copy); then a bug."""

    def decide(self, problem, control):
        for job in problem.jobs:
            problem.free_now.place(job.req, job.units, True)
        raise RuntimeError("placed on the problem's own pool")


class ClearsTheQueue:
    def decide(self, problem, control):
        problem.jobs.clear()
        problem.t += 3600
        raise RuntimeError("cleared the queue")


class RewritesTheRunningWork:
    """The running work made to hold everything for ever; then every job on node 0."""

    def decide(self, problem, control):
        problem.running.ends[:] = 10**9
        problem.running.amounts[:] = 10**6
        placements = {job.index: [0] * job.units for job in problem.jobs}
        return Outcome(placements=placements, status=HEURISTIC)


class SetsUnits:
    def decide(self, problem, control):
        for job in problem.jobs:
            object.__setattr__(job, "units", 10**6)
        raise RuntimeError("set every job's units")


class ZeroesRequests:
    def decide(self, problem, control):
        for job in problem.jobs:
            object.__setattr__(job, "req", tuple(0 for _ in job.req))
            object.__setattr__(job, "pooled", tuple(0 for _ in job.req))
        raise RuntimeError("zeroed every request")


class ClearsNodeSets:
    def decide(self, problem, control):
        for nodes in problem.free_now.groups.values():
            nodes.clear()
        raise RuntimeError("cleared the pool's node sets")


class EmptiesTheHeaps:
    def decide(self, problem, control):
        for heap in problem.free_now._heaps.values():
            heap.clear()
        raise RuntimeError("emptied the pool's heaps")


class PoisonsTheScores:
    """Best fit made worst fit: the pool's remembered scores negated."""

    def decide(self, problem, control):
        pool = problem.free_now
        for vec in pool.groups:
            pool.score(vec)
        for vec, score in list(pool._scores.items()):
            pool._scores[vec] = -score
        raise RuntimeError("reversed the best-fit scores")


class RenumbersTheQueue:
    """The queue reversed and halved, each job's index renumbered to its new place."""

    def decide(self, problem, control):
        problem.jobs.reverse()
        del problem.jobs[len(problem.jobs) // 2:]
        for i, job in enumerate(problem.jobs):
            object.__setattr__(job, "index", i)
        raise RuntimeError("renumbered the queue")


class EndsProcess:
    def decide(self, problem, control):
        os._exit(7)


def not_a_dispatcher():
    return 42


class PredictorRaises:
    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        raise ValueError("no crystal ball")


class PredictorInvalid:
    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        return [-5.0 for _ in jobs]


class PredictorHangs:
    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        RELEASE.wait()
        return [1 for _ in jobs]


class PredictorEndsProcess:
    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        os._exit(7)
'''

_BROKEN_ENTRY_POINTS = f"""[hpcdispatch.dispatchers]
missing-module = {BROKEN_MODULE}_nowhere:Nothing
not-a-dispatcher = {BROKEN_MODULE}:not_a_dispatcher
raises = {BROKEN_MODULE}:Raises
exits = {BROKEN_MODULE}:Exits
over-allocates = {BROKEN_MODULE}:OverAllocates
malformed = {BROKEN_MODULE}:Malformed
hangs = {BROKEN_MODULE}:Hangs
takes-the-pool = {BROKEN_MODULE}:TakesThePool
clears-the-queue = {BROKEN_MODULE}:ClearsTheQueue
rewrites-the-running-work = {BROKEN_MODULE}:RewritesTheRunningWork
sets-units = {BROKEN_MODULE}:SetsUnits
zeroes-requests = {BROKEN_MODULE}:ZeroesRequests
clears-node-sets = {BROKEN_MODULE}:ClearsNodeSets
empties-the-heaps = {BROKEN_MODULE}:EmptiesTheHeaps
poisons-the-scores = {BROKEN_MODULE}:PoisonsTheScores
renumbers-the-queue = {BROKEN_MODULE}:RenumbersTheQueue
ends-process = {BROKEN_MODULE}:EndsProcess

[hpcdispatch.predictors]
predictor-missing = {BROKEN_MODULE}_nowhere:Nothing
predictor-raises = {BROKEN_MODULE}:PredictorRaises
predictor-invalid = {BROKEN_MODULE}:PredictorInvalid
predictor-hangs = {BROKEN_MODULE}:PredictorHangs
predictor-ends-process = {BROKEN_MODULE}:PredictorEndsProcess
"""


def write_broken_plugins(root: Path) -> Path:
    """The broken plugins as an installed distribution under `root` (put it on the path);
    returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{BROKEN_MODULE}.py").write_text(_BROKEN_SOURCE, encoding="utf-8")
    info = root / f"{BROKEN_MODULE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {BROKEN_MODULE}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(_BROKEN_ENTRY_POINTS, encoding="utf-8")
    return root


def install_example(into: Path) -> Path:
    """`pip install` the example plugin package into `into/site` (a copy of its source, so
    that the build leaves nothing in the repository; no index, no build isolation); returns
    the target directory, for PYTHONPATH."""
    source = into / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    target = into / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return target
