"""A replay's CPU by thread: which of the process's threads (the simulator's, the client's gRPC
threads, the embedded server's event loop and decision threads, gRPC core's own) spends it.

    python -m benchmarks.speed.thread_cpu -- --trace kth-sp2 --limit-jobs 5000 \\
        --dispatcher easy --predictor walltime

runs `hpcdispatch simulate` with the arguments after `--` in this process, and reads every
thread's CPU (user + system, /proc/self/task/TID/stat) every `--every` seconds and once at the
end, so a thread that ended is counted up to its last reading (at most `--every` seconds
short). A thread is named by its Python name where Python started it, else by the kernel's
(gRPC core names its own: grpc_global_tim, ...); threads of one name are summed. Linux only.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time

TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[int, tuple[str, float]]:
    """{tid: (kernel name, CPU seconds)} of this process's threads now."""
    found: dict[int, tuple[str, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICKS)
    return found


class Sampler:
    """Every thread's latest CPU reading and its Python name, read by a thread of its own."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.latest: dict[int, tuple[str, float]] = {}
        self.python_names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread_cpu sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.read()

    def read(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self.python_names[t.native_id] = t.name
        self.latest.update(thread_cpu())

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.read()

    def by_name(self) -> dict[str, float]:
        sums: dict[str, float] = {}
        for tid, (kernel, cpu) in self.latest.items():
            name = self.python_names.get(tid, kernel)
            # One name per kind of thread: hpcdispatch-call-3 -> hpcdispatch-call-*.
            stem = name.rstrip("0123456789")
            kind = stem + "*" if stem != name and stem.endswith("-") else name
            sums[kind] = sums.get(kind, 0.0) + cpu
        return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.25, help="seconds between readings")
    parser.add_argument("simulate", nargs=argparse.REMAINDER,
                        help="-- then hpcdispatch simulate's arguments")
    args = parser.parse_args(argv)
    simulate = args.simulate[1:] if args.simulate[:1] == ["--"] else args.simulate
    from hpcdispatch.cli import main as cli_main

    began = time.perf_counter()
    with Sampler(args.every) as sampler:
        code = cli_main(["simulate", "--no-progress", *simulate])
    wall = time.perf_counter() - began
    usage = resource.getrusage(resource.RUSAGE_SELF)
    process = usage.ru_utime + usage.ru_stime
    sums = sampler.by_name()
    total = sum(sums.values())
    print(f"process CPU {process:.2f} s (threads read: {total:.2f} s), wall {wall:.2f} s")
    print("| thread | CPU [s] | share |\n|---|---|---|")
    for name, cpu in sorted(sums.items(), key=lambda item: -item[1]):
        if cpu >= 0.005 * total:
            print(f"| {name} | {cpu:.2f} | {100 * cpu / total:.1f} % |")
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
