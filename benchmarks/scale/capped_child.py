"""One benchmark call in a child process under a memory cap (RLIMIT_AS), its row read back.

A decision that runs out of memory (the 50 GB node profile issue #49 measured at 100,000 nodes)
must end as a row that says so, not as the benchmark's own death: each case runs in a fresh
interpreter, capped, and prints its row as JSON on its last line.
"""

from __future__ import annotations

import json
import subprocess
import sys


def run_capped(module: str, function: str, args: tuple[object, ...], deadline: float,
               memory_gb: float) -> dict[str, object]:
    """`module.function(*args)` (a JSON-able dict) in a child capped at `memory_gb`; the
    child's last error line as {"error": …} if it fails."""
    code = ("import json, resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_AS, ({int(memory_gb * 2**30)},) * 2)\n"
            f"from {module} import {function}\n"
            f"print(json.dumps({function}(*{args!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=deadline * 3 + 120, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:120]}
    row: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return row
