"""The README says what the default dispatcher and profile guarantee and why they are the
default, and cites the papers; CITATION.cff cites them and the software; LICENSE is the licence
pyproject.toml names (issue #51: none of it was there)."""

from __future__ import annotations

import re
import tomllib

import yaml

from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.domain.profiles import PROFILES
from tests.paths import ROOT

PAPERS = (
    "Constraint Programming-Based Job Dispatching for Modern HPC Applications",  # CP 2019
    "A Constraint Programming-based Job Dispatcher for Modern HPC Systems and Applications",
)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_licence_file_is_the_licence_pyproject_names() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert re.match(r"\s*Apache License\s+Version 2\.0, January 2004\s", text)
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it


def test_citation_cff_cites_the_software_and_both_papers() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert (cff["version"], cff["license"]) == (PROJECT["version"], PROJECT["license"])
    assert cff["authors"] and cff["message"]
    cited = {ref["title"]: ref for ref in cff["references"]}
    assert set(cited) == set(PAPERS)
    for ref in cited.values():
        assert ref["year"] and [a["family-names"] for a in ref["authors"]][:2] == [
            "Galleguillos", "Kiziltan"]


def test_the_readme_cites_both_papers_and_links_the_citation_and_the_licence() -> None:
    flat = " ".join(README.split())
    assert all(title in flat for title in PAPERS)
    assert "](CITATION.cff)" in README and "](LICENSE)" in README


def test_the_readme_says_what_the_default_guarantees_and_why_it_is_the_default() -> None:
    """Of the defaults the server has: the section goes stale when they change."""
    defaults = ServerConfig()
    heading = "### What the default guarantees, and why it is the default"
    section = README[README.index(heading):]
    section = " ".join(section[:section.index("\n## ")].split())
    names = {"pcp20": "PCP'20"}
    assert (f"The default is {names[defaults.default_dispatcher]} with profile "
            f"`{defaults.default_profile}`") in section
    promise_hours = PROFILES[defaults.default_profile][0].promise_after_s // 3600
    for claim in ("within every node's capacity", "independent of the model",
                  f"has waited {promise_hours} h", "a guarantee computed from requested times",
                  "work conservation", "benchmarks/results/qos/modes.md", "(BENCHMARKS.md)"):
        assert claim in section, claim
