"""Promise tokens (server/intake/promise_tokens.py): what a token binds, the keys it may be
signed with, and the key file's errors. Over gRPC: tests/server/rpc/test_promise_tokens.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpcdispatch.server.config import load_config
from hpcdispatch.server.domain.caller_scope import CallerScope
from hpcdispatch.server.intake.interruption import Interruption
from hpcdispatch.server.intake.promise_tokens import (
    MAX_TOKEN_CHARS,
    NO_OLDER,
    PromiseKeys,
    PromiseTokens,
    chained,
    verify_queue,
)
from hpcdispatch.server.pipeline import DecisionAbandoned
from hpcdispatch.server.rpc.app import start_server
from hpcdispatch.snapshot import QueuedJob

KEY, OLD_KEY = "k" * 40, "o" * 40
SCOPE = CallerScope("slurm-plugin", "hpc1")


def tokens(*keys: str, ttl: int = 100) -> PromiseTokens:
    encoded = tuple(k.encode() for k in keys)
    return PromiseTokens(PromiseKeys(encoded[0], encoded, shared=True), ttl)


def job(job_id: str = "42", submit: int = 900, start: int | None = None,
        token: str = "") -> QueuedJob:
    return QueuedJob(id=job_id, user="u", name="n", queue="q", submit_time=submit, units=1,
                     unit_request={"core": 1}, requested_time=60, promised_start=start,
                     promise_token=token)


def test_a_token_binds_job_submit_cluster_caller_start_expiry_and_shape() -> None:
    signer = tokens(KEY)
    token = signer.token(SCOPE, job(), 2000)
    assert len(token) <= MAX_TOKEN_CHARS and token == signer.token(SCOPE, job(), 2000)
    assert signer.refusal(SCOPE, job(start=2000, token=token), t=1000) is None
    assert signer.refusal(SCOPE, job(start=2000, token=token), t=2100) is None  # the expiry
    refused = {
        "other job": signer.refusal(SCOPE, job("43", start=2000, token=token), 1000),
        "resubmitted": signer.refusal(SCOPE, job(submit=950, start=2000, token=token), 1000),
        "other cluster": signer.refusal(CallerScope("slurm-plugin", "hpc2"),
                                        job(start=2000, token=token), 1000),
        "other caller": signer.refusal(CallerScope("other", "hpc1"),
                                       job(start=2000, token=token), 1000),
        "other start": signer.refusal(SCOPE, job(start=1999, token=token), 1000),
        "other key": tokens("x" * 40).refusal(SCOPE, job(start=2000, token=token), 1000),
        "expired": signer.refusal(SCOPE, job(start=2000, token=token), 2101),
        "no token": signer.refusal(SCOPE, job(start=2000), 1000),
        "no start": signer.refusal(SCOPE, job(token=token), 1000),
        "other units": signer.refusal(SCOPE, dataclasses.replace(
            job(start=2000, token=token), units=2), 1000),
        "other request": signer.refusal(SCOPE, dataclasses.replace(
            job(start=2000, token=token), unit_request={"core": 2}), 1000),
        "other requested time": signer.refusal(SCOPE, dataclasses.replace(
            job(start=2000, token=token), requested_time=61), 1000),
        "planned around another": signer.refusal(SCOPE, job(start=2000, token=token), 1000,
                                                 chained(NO_OLDER, "41", 800, 1500)),
    }
    assert refused == {
        "other job": "invalid", "resubmitted": "invalid", "other cluster": "invalid",
        "other caller": "invalid", "other start": "invalid", "other key": "invalid",
        "expired": "expired", "no token": "missing", "no start": "malformed",
        "other units": "reshaped", "other request": "reshaped",
        "other requested time": "reshaped", "planned around another": "older",
    }


@pytest.mark.parametrize("token", [
    "", "1", "1.2", "2.2100.AAAAAAAAAAAAAAAAAAAAAA", "1.x.AAAAAAAAAAAAAAAAAAAAAA",
    "1.2100.AAAAAAAAAAAAAAAAAAAAAA",  # the format before the shape and older promises
    "2.2100." + "A" * 43, "2.x." + "A" * 44,
    "1.2100.AAAA", "1.2100.AAAAAAAAAAAAAAAAAAAA!!", "1.2100." + "A" * 22 + "." + "A" * 50,
    "1.١٢.AAAAAAAAAAAAAAAAAAAAAA",  # digits, but not ASCII ones
])
def test_what_is_not_a_token_is_malformed(token: str) -> None:
    reason = tokens(KEY).refusal(SCOPE, job(start=2000, token=token), 1000)
    assert reason == ("missing" if not token else "malformed")


def test_a_rotation_accepts_the_old_key_and_signs_with_the_new() -> None:
    old = tokens(OLD_KEY).token(SCOPE, job(), 2000)
    rotating = tokens(KEY, OLD_KEY)
    assert rotating.refusal(SCOPE, job(start=2000, token=old), 1000) is None
    new = rotating.token(SCOPE, job(), 2000)
    assert new != old and tokens(OLD_KEY).refusal(SCOPE, job(start=2000, token=new), 1000) == (
        "invalid")


def test_verify_queue_takes_away_only_what_it_cannot_verify() -> None:
    signer = tokens(KEY)
    good = job("a", start=2000, token=signer.token(SCOPE, job("a"), 2000))
    forged = job("b", start=1000, token="")
    plain = job("c")
    checked = verify_queue(signer, [good, forged, plain], SCOPE, 1000)
    assert checked.jobs == (good, dataclasses.replace(forged, promised_start=None), plain)
    assert checked.refused == {"missing": 1} and checked.first_refused == "b"


def test_each_token_signs_the_older_promises_and_the_queue_is_checked_in_submit_order() -> None:
    """An answer's tokens (`sign`): each signs the promises of the jobs before it in submit
    order. Sent back whole (in any order) every one is believed; without the oldest, the newer
    ones are `older` (they were planned around it); a reshaped one still counts as older
    promise for the newer ones (it was real), and keeps its start as `reshaped_promise`."""
    signer = tokens(KEY)
    a, b, c = job("a", 100), job("b", 200), job("c", 300)
    made = signer.sign(SCOPE, [(c, 3000), (a, 1000), (b, 2000)])
    sent = [dataclasses.replace(j, promised_start=s, promise_token=made[j.id])
            for j, s in ((c, 3000), (a, 1000), (b, 2000))]
    assert verify_queue(signer, sent, SCOPE, 500).jobs == tuple(sent)
    without_a = verify_queue(signer, sent[::2], SCOPE, 500)
    assert without_a.refused == {"older": 2} and without_a.first_refused == "b"
    assert all(j.promised_start is None for j in without_a.jobs)
    a_grown = dataclasses.replace(sent[1], units=3)
    checked = verify_queue(signer, [sent[0], a_grown, sent[2]], SCOPE, 500)
    assert checked.refused == {"reshaped": 1}
    assert checked.jobs[1] == dataclasses.replace(a_grown, promised_start=None, promise_token="",
                                                  reshaped_promise=1000)
    assert checked.jobs[0] == sent[0] and checked.jobs[2] == sent[2]
    # A session's delta: the promises the session holds are in the chain, unchecked.
    assert verify_queue(signer, [sent[0]], SCOPE, 500, held=sent[1:]).refused == {}
    assert verify_queue(signer, [sent[0]], SCOPE, 500, held=sent[2:]).refused == {"older": 1}


def test_without_a_key_file_each_process_signs_with_a_random_key() -> None:
    first, second = PromiseKeys.random(), PromiseKeys.random()
    assert first.signing != second.signing and not first.shared


@pytest.mark.parametrize(("text", "message"), [
    (None, "cannot read it"),
    ("# only a comment\n\n", "holds no key"),
    (f"{KEY}\nshort\n", "key 2 has fewer than 32 characters"),
])
def test_a_bad_key_file_stops_the_server_naming_the_key_and_its_source(
    tmp_path: Path, text: str | None, message: str,
) -> None:
    path = tmp_path / "promise.keys"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=f"environment HPCDISPATCH_PROMISE_KEY_FILE: "
                       f"configuration key 'promise_key_file': .*{message}"):
        load_config(env={"HPCDISPATCH_PROMISE_KEY_FILE": str(path)})
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0",
                                 promise_key_file=str(path))
    with pytest.raises(ValueError, match=f"promise_key_file.*{message}"):
        start_server(config)


def test_the_key_file_and_ttl_come_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "promise.keys"
    path.write_text(f"# rotation under way\n{KEY}\n{OLD_KEY}\n")
    config = load_config(env={"HPCDISPATCH_PROMISE_KEY_FILE": str(path),
                              "HPCDISPATCH_PROMISE_TOKEN_TTL_SECONDS": "600"})
    keys = PromiseKeys.of(config)
    assert keys.accepted == (KEY.encode(), OLD_KEY.encode()) and keys.signing == KEY.encode()
    assert config.promise_token_ttl_seconds == 600
    with pytest.raises(ValueError, match="promise_token_ttl_seconds"):
        load_config(env={"HPCDISPATCH_PROMISE_TOKEN_TTL_SECONDS": "-1"})


def test_a_queue_of_forged_promises_stops_at_the_deadline_within_a_chunk() -> None:
    """Each forged promise costs an HMAC per key: the check looks at the deadline and the
    caller every few hundred promises, as the intake's loops do."""
    signer = tokens(KEY, OLD_KEY)
    looked = []

    def gone() -> bool:
        looked.append(1)
        return len(looked) > 1  # the caller leaves after the first look

    forged = [job(str(i), start=2000, token="2.2100." + "A" * 44) for i in range(5000)]
    with pytest.raises(DecisionAbandoned) as abandoned:
        verify_queue(signer, forged, SCOPE, 1000, Interruption(None, gone))
    assert abandoned.value.cancelled and abandoned.value.stage == "convert"
    assert len(looked) == 2  # two looks: 2 x CHUNK / PROMISE_WORK promises, not 5,000
