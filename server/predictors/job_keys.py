"""How a job is keyed in the knowledge base: its name prefix, the shape of its request, and the
bounded form in which every text is kept.

The keys are computed when a completion is stored (and indexed), and again for the job whose
duration is predicted, so the two sides always agree. Every text the knowledge base keeps of a
completion (cluster, job id, user, name, name prefix, request shape) is `kept`: up to
KEPT_CHARS characters as it is, a longer one as its first characters and a digest of the whole,
so a completion costs the same whatever the length of its names, and two different texts stay
different (a prediction does not change).
"""

from __future__ import annotations

import functools
import hashlib
import re

from ..domain.duration_predictor import JobFacts

_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_TRAILING_COUNTER = re.compile(r"[0-9._\-]+$")

KEPT_CHARS = 64  # longest text the knowledge base keeps as it is
_DIGEST_BYTES = 16  # 128 bits: two different texts never meet in practice
# Names up to this long are cached, at most _CACHED_NAMES of them (a few MB at most).
_CACHED_NAME_CHARS = KEPT_CHARS
_CACHED_NAMES = 16_384


def kept(text: str) -> str:
    """`text` as the knowledge base keeps it: unchanged up to KEPT_CHARS characters; a longer
    one as its first characters, `~` and the hexadecimal BLAKE2b digest of the whole text,
    KEPT_CHARS characters in all."""
    if len(text) <= KEPT_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                             digest_size=_DIGEST_BYTES).hexdigest()
    return f"{text[:KEPT_CHARS - 1 - len(digest)]}~{digest}"


def name_prefix(name: str) -> str:
    """The application a job name stands for (see `_prefix`); names repeat, so short ones are
    answered from a cache."""
    if len(name) <= _CACHED_NAME_CHARS:
        return _cached_prefix(name)
    return _prefix(name)


@functools.lru_cache(maxsize=_CACHED_NAMES)  # names repeat: a decision asks for thousands
def _cached_prefix(name: str) -> str:
    return _prefix(name)


def _prefix(name: str) -> str:
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
