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
callers do). The same promise gets the same token at every decision, so a session's caller sends
a changed job only when its promise changed. Anything else (no token, a token of another job,
cluster, caller or start, a changed expiry, another key, past its expiry) is a refusal: the job
holds no promise from the caller, and the edge counts and logs it (`verify_queue`).

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

TOKEN_VERSION = "1"
MAX_TOKEN_CHARS = 64
MAC_BYTES = 16
MAC_CHARS = 22  # MAC_BYTES in unpadded base64url
BASE64URL = frozenset(string.ascii_letters + string.digits + "-_")

# Why a promise sent back was not believed (the metric's reason label: a fixed set).
MISSING = "missing"  # promised_start without a token
MALFORMED = "malformed"  # a token that is not one this service makes, or one without a start
EXPIRED = "expired"  # t is past the token's expiry
INVALID = "invalid"  # no key of this server signed this job, cluster, caller, start, expiry
REASONS = (MISSING, MALFORMED, EXPIRED, INVALID)


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
    """What a token signs, unambiguously: each text field with its length before it."""
    texts = (scope.identity, scope.cluster, job_id)
    return (f"hpcdispatch promise {TOKEN_VERSION}|" + "|".join(f"{len(x)}:{x}" for x in texts)
            + f"|{submit}|{start}|{expires}").encode("utf-8")


def _mac(key: bytes, message: bytes) -> str:
    digest = hmac.digest(key, message, hashlib.sha256)[:MAC_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# Tokens made, kept so that an unchanged promise costs no HMAC at the next decision, and one
# sent back as made is recognised without computing it again (emptied when full).
MAX_KEPT_TOKENS = 200_000
TokenKey = tuple[CallerScope, str, int, int]  # scope, job id, submit time, start


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

    def token(self, scope: CallerScope, job_id: str, submit: int, start: int) -> str:
        """The token of the promise `start` (absolute, seconds) to job (`job_id`, `submit`)."""
        key = (scope, job_id, submit, start)
        token = self._made.get(key)
        if token is None:
            expires = start + self.ttl_seconds
            mac = _mac(self.keys.signing, _message(scope, job_id, submit, start, expires))
            token = f"{TOKEN_VERSION}.{expires}.{mac}"
            if len(self._made) >= MAX_KEPT_TOKENS:
                self._made.clear()
            self._made[key] = token
        return token

    def refusal(self, scope: CallerScope, job: QueuedJob, t: int) -> str | None:
        """Why `job`'s promise, sent back at t, is not believed (a REASONS value), or None
        when it is (or when it sends none)."""
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
        made = self._made.get((scope, job.id, job.submit_time, start))
        if made is None or not hmac.compare_digest(made, token):  # not one made here lately
            message = _message(scope, job.id, job.submit_time, start, expires)
            if not any(hmac.compare_digest(_mac(key, message), parts[2])
                       for key in self.keys.accepted):
                return INVALID
        return EXPIRED if t > expires else None


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


# Work of checking one promise, in the intake's items (`Interruption.tick`): up to two HMACs.
PROMISE_WORK = 16


def verify_queue(tokens: PromiseTokens, jobs: Iterable[QueuedJob], scope: CallerScope,
                 t: int, interruption: Interruption = NEVER) -> Verified:
    """`jobs` as sent at t by `scope`, each promise not believed taken away (with its token):
    such a job holds no promise from the caller. Raises DecisionAbandoned when `interruption`
    says the deadline has passed or the caller has gone (a queue of forged promises costs
    an HMAC per key each)."""
    out: list[QueuedJob] = []
    refused: Counter[str] = Counter()
    first = ""
    for job in jobs:
        if job.promised_start is None and not job.promise_token:
            out.append(job)
            continue
        interruption.tick(PROMISE_WORK)
        reason = tokens.refusal(scope, job, t)
        if reason is None:
            out.append(job)
            continue
        refused[reason] += 1
        first = first or job.id
        out.append(dataclasses.replace(job, promised_start=None, promise_token=""))
    return Verified(tuple(out), refused, first)
