"""How a job is keyed in the knowledge base: its name prefix and the shape of its request.

Both keys are computed when a completion is stored (and indexed), and again for the job whose
duration is predicted, so the two sides always agree.
"""

from __future__ import annotations

import functools
import re

from .base import JobFacts

_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_TRAILING_COUNTER = re.compile(r"[0-9._\-]+$")


@functools.lru_cache(maxsize=65_536)  # names repeat: a decision asks for thousands
def name_prefix(name: str) -> str:
    """The application a job name stands for: "~/bin/Run_042.sh" -> "run".

    Keeps the last path component, lower-cases it, drops one file extension, then strips a
    trailing counter (digits and the separators `._-` around them). A name that is only a counter
    (SWF's executable number, say) has the empty prefix, which matches nothing.
    """
    base = name.strip().rsplit("/", 1)[-1].lower()
    base = _EXTENSION.sub("", base)
    return _TRAILING_COUNTER.sub("", base)


def request_shape(job: JobFacts) -> str:
    """The job's request as one comparable string: queue, units and the per-unit amounts."""
    amounts = ",".join(f"{kind}={amount}" for kind, amount in sorted(job.unit_request.items()))
    return f"{job.queue}|{job.units}|{amounts}"
