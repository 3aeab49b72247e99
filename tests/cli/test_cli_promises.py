"""`hpcdispatch dispatch --profile P` and the environment's default profile (issue #42, item 1):
after the decision, each waiting job's promised or planned start, as `squeue --start` shows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpcdispatch import cli
from hpcdispatch.start_table import HEADER, date, span


def dispatch(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, list[str]]:
    code = cli.main(["dispatch", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 and out else {}, err.splitlines()


def table(err: list[str]) -> list[list[str]]:
    """The start table's rows (header excluded), each split into its columns."""
    at = next(i for i, line in enumerate(err) if line.split() == list(HEADER))
    rows = []
    for line in err[at + 1:]:
        if not re.match(r"^\S+\s+\S+\s+\S+\s+(promised|estimate)\s", line):
            break
        rows.append(line.split())
    return rows


def test_dispatch_with_the_book_profile_prints_every_waiting_jobs_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each waiting job's promise (the oldest's, and those that waited the profile's 24 h) or
    planned start, marked as such, soonest first."""
    code, answer, err = dispatch(["--profile", "book"], capsys)
    assert code == 0 and answer["report"]["profile"] == "book"
    expected = {e["job_id"]: e for e in answer["report"]["expected_starts"]}
    started = {s["job_id"] for s in answer["starts"]}
    rows = table(err)
    assert len(rows) == len(expected) > 0 and not started & {r[0] for r in rows}
    t = int(answer["time"])
    for job_id, _partition, _user, kind, starts_by, likely, wait, moved, why in rows:
        e = expected[job_id]
        start = int(e["start_time"])
        assert kind == ("promised" if e.get("promised") else "estimate")
        # A promise: starts by its start_time, the likely start beside it where one was given;
        # an estimate: no "starts by", its start_time is the likely start.
        assert starts_by == (date(start) if kind == "promised" else "-")
        beside = int(e["likely_start"]) if "likely_start" in e else None
        assert likely == (date(start) if kind == "estimate" else
                          date(beside) if beside is not None else "-")
        shown = start if kind == "estimate" or beside is None else beside
        assert wait == span(shown - t)
        assert (moved, why) == ("-", "-")
        assert bool(e.get("promise_token")) == (kind == "promised")  # sent back to keep it
    starts = [int(expected[r[0]]["start_time"]) for r in rows]
    assert starts == sorted(starts)  # soonest first
    promised = sum(1 for r in rows if r[3] == "promised")
    assert promised > 0 and err[-1].startswith(f"{promised} promised (starts by STARTS_BY")
    assert "kept" not in err[-1] and "earlier" not in err[-1]  # no more than the guarantee


def test_the_embedded_service_takes_the_default_profile_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HPCDISPATCH_DEFAULT_PROFILE", "book")
    code, answer, err = dispatch([], capsys)
    assert code == 0 and answer["report"]["profile"] == "book"
    assert len(table(err)) == len(answer["report"]["expected_starts"]) > 0


def test_without_a_plan_it_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = dispatch(["--profile", "qos", "--output", str(tmp_path / "d.json")],
                                 capsys)
    assert code == 0 and err[-1].startswith("no expected starts")


def test_a_bad_environment_value_is_one_line_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HPCDISPATCH_DEFAULT_PROFILE", "fastest")
    code, _, err = dispatch([], capsys)
    assert code == 2 and len(err) == 1
    assert "HPCDISPATCH_DEFAULT_PROFILE" in err[0] and "default_profile" in err[0]


def test_a_retired_profile_is_invalid_argument_saying_what_replaces_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = dispatch(["--profile", "packing"], capsys)
    assert code == 1 and "INVALID_ARGUMENT" in err[0]
    assert any(line.strip().startswith("search.profile: profile 'packing' was retired")
               and "use `book`" in line for line in err), err


def test_the_embedded_service_refuses_a_retired_default_profile_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HPCDISPATCH_DEFAULT_PROFILE", "fast")
    code, _, err = dispatch([], capsys)
    assert code == 2 and len(err) == 1
    assert "HPCDISPATCH_DEFAULT_PROFILE" in err[0] and "profile 'fast' was retired" in err[0]


def test_an_unknown_profile_is_invalid_argument_naming_the_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = dispatch(["--profile", "fastest"], capsys)
    assert code == 1 and "INVALID_ARGUMENT" in err[0]
    assert any(line.strip().startswith("search.profile:") for line in err)


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (45, "45s"), (60, "1m"), (61, "1m01s"), (7980, "2h13m"), (3600, "1h00m"),
    (273600, "3d04h"),
])
def test_waits_read_as_a_person_says_them(seconds: int, shown: str) -> None:
    assert span(seconds) == shown
