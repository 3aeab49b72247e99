"""`hpcdispatch simulate --system` with a site's rules (issue #50, item 4): the partitioned
preset is offered and replays, printing its partitions' table; a wrong rule is one line naming
the file, the line and the key; the docs' example is a system file that loads."""

from __future__ import annotations

from pathlib import Path

from hpcdispatch.systems import load_system
from tests.cli.test_newcomer_hour import refused, run, simulate
from tests.paths import ROOT


def test_the_partitioned_preset_is_offered_and_prints_its_partitions(tmp_path: Path) -> None:
    assert "atlas-partitions" in run("simulate", "--help").stdout
    done = simulate("--trace", "llnl-atlas", "--system", "atlas-partitions", "--records",
                    "0:300", "--dispatcher", "fcfs", "--out", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    assert "system atlas-partitions (1152 nodes, 9216 cores)" in done.stdout
    site = done.stdout[done.stdout.index("the site's rules"):]
    assert "pbatch" in site and "maintenance [node h]" in site
    report = run("report", "--no-plots", str(tmp_path / "runs" / "01-fcfs"))
    assert report.returncode == 0, report.stderr
    assert "jobs per partition" in report.stdout


def test_a_wrong_window_is_refused_naming_the_file_the_line_and_the_key(
        tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nwindows:\n"
                    "  - every: month\n    at: tue 06:00\n    for: 4h\n", encoding="utf-8")
    error = refused(simulate("--system", str(path), "--limit-jobs", "5", "--dispatcher",
                             "fcfs", "--out", str(tmp_path / "runs")))
    assert error == f"system {path}, line 3: window 1: 'every' is day or week, not 'month'"


def test_the_site_example_of_the_docs_is_a_system_file(tmp_path: Path) -> None:
    """docs/replays.md, *A site's rules*: the example as printed loads, with its rules."""
    page = (ROOT / "docs" / "replays.md").read_text(encoding="utf-8")
    section = page[page.index("### A site's rules"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    (tmp_path / "site.yaml").write_text(section[start:section.index("```", start)],
                                        encoding="utf-8")
    system = load_system(str(tmp_path / "site.yaml"))
    assert {p: len(n) for p, n in system.partitions.items()} == {"pbatch": 1088, "pdebug": 64}
    assert [(w.period, w.length, len(w.nodes), w.users) for w in system.windows] == [
        (7 * 86400, 4 * 3600, 1088, ()), (0, 12 * 3600, 12, ("u12",))]
    assert system.swf_partitions == {1: "pbatch", 2: "pdebug"}
    assert system.default_partition == "pbatch"
