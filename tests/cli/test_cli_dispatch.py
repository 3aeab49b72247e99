"""`hpcdispatch dispatch` with bad input files and outputs: one line on stderr, exit code 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hpcdispatch import cli

VALID_SNAPSHOT = json.dumps({"time": "10", "nodes": [
    {"id": "a", "state": "NODE_STATE_UP", "capacity": {"core": "4"}}]})


def _missing(tmp: Path) -> list[str]:
    return [str(tmp / "nowhere.json")]


def _directory(tmp: Path) -> list[str]:
    return [str(tmp)]


def _not_utf8(tmp: Path) -> list[str]:
    path = tmp / "latin1.json"
    path.write_bytes('{"cluster": "Zürich"}'.encode("latin-1"))
    return [str(path)]


def _invalid_json(tmp: Path) -> list[str]:
    path = tmp / "broken.json"
    path.write_text('{"time": 10,')
    return [str(path)]


def _unknown_field(tmp: Path) -> list[str]:
    path = tmp / "other.json"
    path.write_text('{"jobs": []}')  # the parser's message spans several lines
    return [str(path)]


def _snapshot(tmp: Path) -> Path:
    path = tmp / "snapshot.json"
    path.write_text(VALID_SNAPSHOT)
    return path


def _output_is_a_directory(tmp: Path) -> list[str]:
    return [str(_snapshot(tmp)), "--output", str(tmp)]


def _output_in_a_missing_directory(tmp: Path) -> list[str]:
    return [str(_snapshot(tmp)), "--output", str(tmp / "no" / "such" / "dir" / "out.json")]


def _missing_tls_file(tmp: Path) -> list[str]:
    return [str(_snapshot(tmp)), "--target", "127.0.0.1:1", "--tls-ca", str(tmp / "ca.pem")]


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "missing file": (_missing, "No such file"),
    "directory": (_directory, "Is a directory"),
    "not UTF-8": (_not_utf8, "not UTF-8"),
    "invalid JSON": (_invalid_json, "not a DispatchRequest"),
    "not a DispatchRequest": (_unknown_field, "no field named"),
    "--output is a directory": (_output_is_a_directory, "is a directory"),
    "--output in a missing directory": (_output_in_a_missing_directory, "does not exist"),
    "missing TLS file": (_missing_tls_file, "cannot read TLS file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_or_output_is_one_line_and_exit_code_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_args, reason = CASES[case]
    code = cli.main(["dispatch", *make_args(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hpcdispatch dispatch: ") and reason in lines[0], err
    assert "Traceback" not in err
