"""`benchmarks.speed.identical_outputs`: two jobs.csv compared column by column.

The comparison is checked on files written here (no replay): equal bytes, a column the newer
file adds, a start that moved, a job missing, the same rows in another order."""

from __future__ import annotations

from pathlib import Path

from benchmarks.speed.identical_outputs import compare, dispatcher_flags

HEADER = "job_id,submit,start,end,nodes"
ROWS = ["1,0,0,10,n0", "2,5,10,20,n0 n1", "3,6,6,16,n2"]


def _write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_equal_files_are_byte_identical(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.csv", HEADER, ROWS)
    new = _write(tmp_path / "new.csv", HEADER, ROWS)
    assert compare(old, new).verdict == "byte-identical"


def test_a_column_added_later_is_reported_added_not_as_a_difference(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.csv", HEADER, ROWS)
    new = _write(tmp_path / "new.csv", HEADER + ",moves", [r + ",0" for r in ROWS])
    result = compare(old, new)
    assert result.verdict == "same on the old columns"
    assert result.added == ["moves"] and result.removed == [] and result.differing == {}
    assert result.same_starts.startswith("3/3")


def test_a_moved_start_names_the_columns_the_jobs_and_an_example(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.csv", HEADER, ROWS)
    new = _write(tmp_path / "new.csv", HEADER + ",moves",
                 ["1,0,0,10,n0,0", "2,5,12,22,n0 n1,0", "3,6,6,16,n3,0"])
    result = compare(old, new)
    assert result.verdict.startswith("**differs**")
    assert result.differing["start"] == (1, "job 2: 10 → 12")
    assert result.differing["end"] == (1, "job 2: 20 → 22")
    assert result.differing["nodes"] == (1, "job 3: n2 → n3")
    assert "submit" not in result.differing and "moves" not in result.differing
    assert result.same_starts.startswith("2/3")


def test_jobs_missing_on_either_side_are_counted(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.csv", HEADER, ROWS)
    new = _write(tmp_path / "new.csv", HEADER, [*ROWS[:2], "4,7,7,9,n2"])
    result = compare(old, new)
    assert result.differing["(jobs)"] == (2, "1 only before, 1 only after")


def test_the_same_rows_in_another_order_differ_by_order_only(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.csv", HEADER, ROWS)
    new = _write(tmp_path / "new.csv", HEADER, list(reversed(ROWS)))
    result = compare(old, new)
    assert list(result.differing) == ["(row order)"]


def test_a_profile_after_the_dispatcher_s_name_becomes_simulate_s_profile() -> None:
    assert dispatcher_flags("easy") == ["--dispatcher", "easy"]
    assert dispatcher_flags("pcp20@book") == ["--dispatcher", "pcp20", "--profile", "book"]
