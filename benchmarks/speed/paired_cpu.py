"""One replay at two commits in alternating pairs: each process's CPU, and the median of the
pairs' ratios.

On a loaded machine a replay's CPU moves by 10–35 % from run to run, so three runs of each side
(`replay_throughput`) may not tell a 15 % change from noise. Here both sides run in turn, the
order swapped each round, and what is reported besides each side's median and minimum is the
median over rounds of now ÷ before: the load of a moment weighs on both runs of its pair.

    python -m benchmarks.speed.paired_cpu --old c427d0e --rounds 7 -- \\
        --trace kth-sp2 --limit-jobs 5000 --dispatcher easy --predictor walltime --in-process

The old commit is exported with `git archive` and laid out as the installed package
(`benchmarks.scale.baseline_server`), and runs from there with this interpreter; "now" is this
checkout. The arguments after `--` go to `hpcdispatch simulate` (with `--no-progress` and
`--out`); every round's two jobs.csv are compared byte for byte. Each side runs once untimed
first, writing its bytecode caches (as an installed package has them).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.scale.baseline_server import REPO, export, package_tree


def cpu_of(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """User + system seconds of `command` run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("simulate", nargs=argparse.REMAINDER,
                        help="-- then the arguments of `hpcdispatch simulate`")
    args = parser.parse_args(argv)
    simulate = [a for a in args.simulate if a != "--"]
    with tempfile.TemporaryDirectory(prefix="paired-cpu-") as scratch:
        root = Path(scratch)
        (root / "src").mkdir()
        full = export(args.old, root / "src")
        tree = package_tree(root / "src", root / "tree")
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # cwd: `python -m` puts it first on sys.path (the export's, or this checkout's code).
        sides = {"before": (tree, base | {"PYTHONPATH": str(tree)}), "now": (REPO, base)}
        # One untimed run of each side first, allowed to write its bytecode caches: the export
        # is fresh, and a side compiling its modules from source would pay ≈ 0.15 s more.
        for cwd, env in sides.values():
            warm = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            cpu_of([sys.executable, "-m", "hpcdispatch", "simulate", *simulate, "--no-progress",
                    "--overwrite", "--out", str(root / "warm")], cwd, warm)
        cpu: dict[str, list[float]] = {side: [] for side in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                cwd, env = sides[side]
                out = root / f"out-{side}"
                cpu[side].append(cpu_of([sys.executable, "-m", "hpcdispatch", "simulate",
                                         *simulate, "--no-progress", "--overwrite",
                                         "--out", str(out)], cwd, env))
            same = all(filecmp.cmp(a, b, shallow=False) for a, b in zip(
                sorted((root / "out-before").glob("*/jobs.csv")),
                sorted((root / "out-now").glob("*/jobs.csv")), strict=True))
            print(f"round {r + 1}: before {cpu['before'][-1]:.2f} s, now {cpu['now'][-1]:.2f} s,"
                  f" jobs.csv {'identical' if same else 'DIFFERENT'}", flush=True)
    print(f"before ({full[:7]}): median {statistics.median(cpu['before']):.2f} s, "
          f"min {min(cpu['before']):.2f} s")
    print(f"now: median {statistics.median(cpu['now']):.2f} s, min {min(cpu['now']):.2f} s")
    ratios = [n / b for n, b in zip(cpu["now"], cpu["before"], strict=True)]
    print(f"now ÷ before: median of the pairs {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}–{max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
