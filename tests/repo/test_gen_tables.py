"""The docs' lists of built-in dispatchers, predictors and profiles are generated from the code
(scripts/gen_tables.py): a stale page fails here, and a dispatcher class shows up in them with
what it states, nothing written by hand."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType
from typing import ClassVar

import pytest

from hpcdispatch.catalog import CP_DISPATCHER_NAMES
from hpcdispatch.server.dispatchers.easy import EasyDispatcher
from hpcdispatch.server.dispatchers.fcfs import FcfsDispatcher
from hpcdispatch.server.dispatchers.table_row import TableRow
from tests.paths import ROOT

SCRIPT = ROOT / "scripts" / "gen_tables.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_tables", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_tables_are_current() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_built_in_is_in_the_pages() -> None:
    from hpcdispatch.catalog import DISPATCHER_NAMES, PREDICTOR_NAMES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in DISPATCHER_NAMES:
        assert f"| `{name}`" in readme, name
    for name in PREDICTOR_NAMES:
        assert f"`{name}` (" in readme, name


class _FreshDispatcher(EasyDispatcher):
    name: ClassVar[str] = "easy-fresh"
    table: ClassVar[TableRow] = TableRow(
        summary="EASY with a fresh idea", head="the freshest job", backfill="fresh first",
        parameter="`freshness` (1)")


def test_a_fresh_dispatcher_class_shows_up_in_every_table() -> None:
    gen = _script()
    built = [("fcfs", FcfsDispatcher), ("easy", EasyDispatcher),
             ("easy-fresh", _FreshDispatcher)]
    table = gen.dispatcher_table(built, "easy", CP_DISPATCHER_NAMES)
    assert "| `easy-fresh` | EASY with a fresh idea | – |" in table.splitlines()
    assert "| `easy` (default) |" in table
    baselines = gen.baseline_table(built).splitlines()
    assert ("| `easy-fresh` | `test_gen_tables.py` | the freshest job | fresh first "
            "| `freshness` (1) |") in baselines
    assert not any("`fcfs`" in row for row in baselines)  # no backfill of its own: not one
    assert "`easy-fresh`" in gen.default_dispatcher_names(built, CP_DISPATCHER_NAMES)


def test_rows_that_differ_only_in_the_name_are_one() -> None:
    gen = _script()

    class Twin(_FreshDispatcher):
        table: ClassVar[TableRow] = TableRow(
            summary="twin", head="the freshest job", backfill="fresh first",
            parameter="`freshness` (1)")

    rows = gen.baseline_table([("easy-fresh", _FreshDispatcher), ("easy-twin", Twin)])
    assert "| `easy-fresh`, `easy-twin` | `test_gen_tables.py` |" in rows


def test_a_class_without_its_own_table_row_fails_by_name() -> None:
    gen = _script()

    class Inherits(EasyDispatcher):  # EASY's row is EASY's, not this class's
        name: ClassVar[str] = "easy-inherits"

    with pytest.raises(SystemExit, match="Inherits: no `table` of its own"):
        gen.dispatcher_table([("easy-inherits", Inherits)], "pcp20", CP_DISPATCHER_NAMES)


def test_a_baseline_row_without_its_head_fails_by_name() -> None:
    gen = _script()

    class Headless(EasyDispatcher):
        name: ClassVar[str] = "easy-headless"
        table: ClassVar[TableRow] = TableRow(summary="no head", backfill="any order")

    with pytest.raises(SystemExit, match="Headless: its `table` has no `head`"):
        gen.baseline_table([("easy-headless", Headless)])


def test_a_stale_page_is_found_and_rewritten() -> None:
    gen = _script()
    start = gen.START.format(part="names")
    page = f"Names: {start}`old`{gen.END}."
    assert gen.fill(page, {"names": "`new`"}, "page.md") == f"Names: {start}`new`{gen.END}."
    with pytest.raises(SystemExit, match="found 0"):
        gen.fill("no markers", {"names": "`new`"}, "page.md")
