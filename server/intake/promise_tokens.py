"""Promise tokens: a promised start the caller sends back is believed only when this service,
or a replica holding the same key, signed it.

The promise book (profile "book") tells each waiting job a start that only ever moves earlier
(`DecisionReport.expected_starts`); a caller may send it back (`QueuedJob.promised_start`) so
that a replica without the same memory keeps it. A promised start decides which jobs start
first, so the caller's word alone is not enough: with every promise the answer carries a
token, an HMAC-SHA256 (128 bits) over

    the job id and submit time, the cluster, the caller's identity (the mTLS client
    certificate's names, "" without one), the promised start and an expiry,

and a promise sent back counts only with a token that matches all of them under a key the
server holds, at a time t no later than the expiry (the promised start +
`promise_token_ttl_seconds`, on the caller's clock, so replays with their own clock work as live
callers do). The same promise (shape and older promises alike) gets the same token at every
decision. Anything else (no token, a token of another job,
cluster, caller or start, a changed expiry, another key, past its expiry) is a refusal: the job
holds no promise from the caller, and the edge counts and logs it (`verify_queue`).

Across replicas (issue #51) a token also carries two shorter MACs (64 bits each, after the
promise's): one over the promise and the job's shape (units, request per unit, requested time),
one over the promise and the older promises it was planned around: a hash chain (`chained`)
of the promises (id, q_i, s_i) of every job before it in submit order (q_i, then id) in the
same answer (`PromiseTokens.sign`). The queue sent back is checked in that order, each token
against the chain of the promises believed before it, so a newer job's promise is believed
only with every older promise its start was planned around (refused as OLDER otherwise), and
a real promise of a job whose shape changed is refused as RESHAPED, its start kept as
`QueuedJob.reshaped_promise` so that the job is promised anew and the move reported. The
token is "2.<expires>.<promise MAC><shape MAC><older MAC>", at most 61 characters.

Keys (`PromiseKeys`): the file of `promise_key_file`, its first key line the one this server
signs with, the further lines keys it still accepts (a rotation: add the new key as a second
line everywhere, then move it first, then drop the old one once its tokens have expired).
Without a file each process draws a random key: it accepts only the promises it made itself,
and replicas share promises only through a shared file.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
import string
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from hpcdispatch.snapshot import QueuedJob

from ..config import ServerConfig, read_promise_keys
from ..domain.caller_scope import CallerScope
from .interruption import NEVER, Interruption

TOKEN_VERSION = "2"
MAX_TOKEN_CHARS = 64
MAC_BYTES = 16  # the promise's MAC
PART_BYTES = 8  # the shape's and the older promises' MACs
MAC_CHARS_PROMISE = 22  # MAC_BYTES in unpadded base64url
PART_CHARS = 11  # PART_BYTES in unpadded base64url
MAC_CHARS = MAC_CHARS_PROMISE + 2 * PART_CHARS
BASE64URL = frozenset(string.ascii_letters + string.digits + "-_")

# Why a promise sent back was not believed (the metric's reason label: a fixed set).
MISSING = "missing"  # promised_start without a token
MALFORMED = "malformed"  # a token that is not one this service makes, or one without a start
EXPIRED = "expired"  # t is past the token's expiry
INVALID = "invalid"  # no key of this server signed this job, cluster, caller, start, expiry
OLDER = "older"  # a real promise, but the older promises it was planned around are not all sent
RESHAPED = "reshaped"  # a real promise, of a job whose units, request or requested time changed
REASONS = (MISSING, MALFORMED, EXPIRED, INVALID, OLDER, RESHAPED)


@dataclass(frozen=True, slots=True)
class PromiseKeys:
    """The key promises are signed with, and every key a token may be signed with."""

    signing: bytes
    accepted: tuple[bytes, ...]  # `signing` first
    shared: bool  # from promise_key_file (False: this process's random key)

    @staticmethod
    def random() -> PromiseKeys:
        key = secrets.token_bytes(32)
        return PromiseKeys(key, (key,), shared=False)

    @staticmethod
    def from_file(path: str) -> PromiseKeys:
        """The keys of `path` (`read_promise_keys`: the first signs); ValueError naming the
        configuration key and what is wrong."""
        try:
            keys = read_promise_keys(path)
        except ValueError as exc:
            raise ValueError(f"configuration key 'promise_key_file': {exc}") from exc
        return PromiseKeys(keys[0], keys, shared=True)

    @staticmethod
    def of(config: ServerConfig) -> PromiseKeys:
        return (PromiseKeys.from_file(config.promise_key_file) if config.promise_key_file
                else PromiseKeys.random())


def _message(scope: CallerScope, job_id: str, submit: int, start: int, expires: int) -> bytes:
    """What a token's first MAC signs, unambiguously: each text field with its length before
    it."""
    texts = (scope.identity, scope.cluster, job_id)
    return (f"hpcdispatch promise {TOKEN_VERSION}|" + "|".join(f"{len(x)}:{x}" for x in texts)
            + f"|{submit}|{start}|{expires}").encode("utf-8")


def shape_of(job: QueuedJob) -> bytes:
    """The shape a promise was planned for: rn_i, the request per unit, the requested time."""
    request = "|".join(f"{len(r)}:{r}={n}" for r, n in sorted(job.unit_request.items()))
    return f"shape|{job.units}|{job.requested_time}|{request}".encode()


# The older promises a promise was planned around, as one digest: a hash chain over the
# promises (job id, q_i, s_i) of every job before it in submit order (q_i, then id).
NO_OLDER = hashlib.sha256(b"hpcdispatch older promises").digest()


def chained(older: bytes, job_id: str, submit: int, start: int) -> bytes:
    """`older` with the promise (job_id, submit, start) after it."""
    return hashlib.sha256(older + f"|{len(job_id)}:{job_id}|{submit}|{start}".encode()).digest()


def submit_order(job: QueuedJob) -> tuple[int, str]:
    return job.submit_time, job.id


def _mac(key: bytes, message: bytes, size: int = MAC_BYTES) -> str:
    digest = hmac.digest(key, message, hashlib.sha256)[:size]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _shape_mac(key: bytes, message: bytes, shape: bytes) -> str:
    """The token's MAC over the promise and the job's shape."""
    return _mac(key, message + b"|" + shape, PART_BYTES)


def _older_mac(key: bytes, message: bytes, older: bytes) -> str:
    """The token's MAC over the promise and the older promises it was planned around."""
    return _mac(key, message + b"|older|" + older, PART_BYTES)


# Tokens made, kept so that an unchanged promise costs no HMAC at the next decision, and one
# sent back as made is recognised without computing it again (emptied when full).
MAX_KEPT_TOKENS = 200_000
# scope, job id, submit time, start, shape, older promises
TokenKey = tuple[CallerScope, str, int, int, bytes, bytes]


@dataclass(frozen=True, slots=True)
class PromiseTokens:
    """Signs the promises of an answer and checks those sent back (module doc)."""

    keys: PromiseKeys
    ttl_seconds: int  # a token is accepted until its start + this, seconds
    _made: dict[TokenKey, str] = dataclasses.field(default_factory=dict, compare=False,
                                                   repr=False)

    @staticmethod
    def of(config: ServerConfig) -> PromiseTokens:
        return PromiseTokens(PromiseKeys.of(config), config.promise_token_ttl_seconds)

    def token(self, scope: CallerScope, job: QueuedJob, start: int,
              older: bytes = NO_OLDER) -> str:
        """The token of the promise `start` (absolute, seconds) to `job` (its id, submit time
        and shape), planned around the `older` promises (`chained`)."""
        key = (scope, job.id, job.submit_time, start, shape_of(job), older)
        token = self._made.get(key)
        if token is None:
            expires = start + self.ttl_seconds
            signing = self.keys.signing
            message = _message(scope, job.id, job.submit_time, start, expires)
            token = (f"{TOKEN_VERSION}.{expires}.{_mac(signing, message)}"
                     f"{_shape_mac(signing, message, key[4])}"
                     f"{_older_mac(signing, message, older)}")
            if len(self._made) >= MAX_KEPT_TOKENS:
                self._made.clear()
            self._made[key] = token
        return token

    def sign(self, scope: CallerScope, promised: Iterable[tuple[QueuedJob, int]]
             ) -> dict[str, str]:
        """The tokens of one answer's promises ((job, absolute start) each), job id -> token:
        each signs the promises of the jobs before it in submit order."""
        tokens: dict[str, str] = {}
        older = NO_OLDER
        for job, start in sorted(promised, key=lambda p: submit_order(p[0])):
            tokens[job.id] = self.token(scope, job, start, older)
            older = chained(older, job.id, job.submit_time, start)
        return tokens

    def refusal(self, scope: CallerScope, job: QueuedJob, t: int,
                older: bytes = NO_OLDER) -> str | None:
        """Why `job`'s promise, sent back at t after the `older` promises (`chained`, those
        believed of the jobs before it in submit order), is not believed (a REASONS value), or
        None when it is (or when it sends none)."""
        token, start = job.promise_token, job.promised_start
        if start is None:
            return MALFORMED if token else None
        if not token:
            return MISSING
        parts = token.split(".") if len(token) <= MAX_TOKEN_CHARS else []
        if (len(parts) != 3 or parts[0] != TOKEN_VERSION or not _is_int(parts[1])
                or len(parts[2]) != MAC_CHARS or not set(parts[2]) <= BASE64URL):
            return MALFORMED
        expires = int(parts[1])
        shape = shape_of(job)
        made = self._made.get((scope, job.id, job.submit_time, start, shape, older))
        if made is not None and hmac.compare_digest(made, token):  # made here lately
            return EXPIRED if t > expires else None
        message = _message(scope, job.id, job.submit_time, start, expires)
        sent = (parts[2][:MAC_CHARS_PROMISE], parts[2][MAC_CHARS_PROMISE:-PART_CHARS],
                parts[2][-PART_CHARS:])
        key = next((k for k in self.keys.accepted
                    if hmac.compare_digest(_mac(k, message), sent[0])), None)
        if key is None:
            return INVALID
        if t > expires:
            return EXPIRED
        if not hmac.compare_digest(_older_mac(key, message, older), sent[2]):
            return OLDER
        return (None if hmac.compare_digest(_shape_mac(key, message, shape), sent[1])
                else RESHAPED)


def _is_int(text: str) -> bool:
    digits = text[1:] if text.startswith("-") else text
    return digits.isascii() and digits.isdigit() and len(digits) <= 19


@dataclass(frozen=True, slots=True)
class Verified:
    """A queue with only the promises believed: the jobs, and the refusals by reason with the
    first job refused (for the log line)."""

    jobs: tuple[QueuedJob, ...]
    refused: Counter[str]
    first_refused: str = ""


# Work of checking one promise, in the intake's items (`Interruption.tick`): a few HMACs.
PROMISE_WORK = 16


def verify_queue(tokens: PromiseTokens, jobs: Iterable[QueuedJob], scope: CallerScope,
                 t: int, interruption: Interruption = NEVER,
                 held: Iterable[QueuedJob] = ()) -> Verified:
    """`jobs` as sent at t by `scope`, each promise not believed taken away (with its token):
    such a job holds no promise from the caller; one refused as RESHAPED keeps its promised
    start as `QueuedJob.reshaped_promise` (it is promised anew, the move reported). The jobs
    are checked in submit order, each token against the promises believed before it
    (`chained`); `held` are jobs whose promises are believed already (a session's), in that
    chain too. Raises DecisionAbandoned when `interruption` says the deadline has passed or
    the caller has gone (a queue of forged promises costs an HMAC per key each)."""
    listed = list(jobs)
    if not any(job.promised_start is not None or job.promise_token for job in listed):
        return Verified(tuple(listed), Counter())
    checked: dict[int, QueuedJob] = {}
    refused: Counter[str] = Counter()
    first = ""
    older = NO_OLDER
    ordered = [(job, k) for k, job in enumerate(listed)] + [(job, -1) for job in held]
    for job, k in sorted(ordered, key=lambda entry: submit_order(entry[0])):
        if job.promised_start is None and not job.promise_token:
            continue
        if k < 0:  # believed already
            older = chained(older, job.id, job.submit_time, job.promised_start or 0)
            continue
        interruption.tick(PROMISE_WORK)
        reason = tokens.refusal(scope, job, t, older)
        if reason in (None, RESHAPED):  # a real promise: the ones after it were planned around it
            assert job.promised_start is not None
            older = chained(older, job.id, job.submit_time, job.promised_start)
        if reason is None:
            continue
        refused[reason] += 1
        first = first or job.id
        checked[k] = dataclasses.replace(
            job, promised_start=None, promise_token="",
            reshaped_promise=job.promised_start if reason == RESHAPED else None)
    return Verified(tuple(checked.get(k, job) for k, job in enumerate(listed)), refused, first)
