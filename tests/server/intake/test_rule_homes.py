"""One home per intake rule (issue #44, item 3): each limit is said in the module of the part of a
request it bounds, where that part's validity is checked too, and snapshots, session deltas and
completion reports reach it alike; a new limit takes at most four places (CONTRIBUTING.md)."""

from __future__ import annotations

import ast
import re

from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.intake import decision_options, fields, jobs, nodes
from hpcdispatch.server.intake.violations import Violations
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.paths import ROOT

HOMES = {"fields.py", "nodes.py", "jobs.py", "decision_options.py", "completions.py"}
# A refusal naming a limit: "... exceed the limit of N", "... the limit (max_jobs)", ...
LIMIT_WORDS = re.compile(r"the limit|\(max_\w+\)")


def limit_messages(path: str) -> list[str]:
    """The string literals (f-string parts included) of `path` that word a limit's refusal."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and LIMIT_WORDS.search(node.value) and not node.value.startswith(("\n", "`"))
            and "\n" not in node.value]


def test_every_limit_is_worded_in_its_home_only() -> None:
    """Not in the order of the passes (validation, snapshot_intake), nor in the session delta:
    they call the homes, so a limit changes in one place for every kind of request."""
    outside = {f"{path.relative_to(ROOT)}: {text}"
               for folder in ("server/intake", "server/sessions")
               for path in (ROOT / folder).glob("*.py") if path.name not in HOMES
               for text in limit_messages(str(path.relative_to(ROOT)))}
    assert outside == set()
    inside = [text for home in HOMES for text in limit_messages(f"server/intake/{home}")]
    assert len(inside) >= 10  # the pattern finds them where they are


def test_a_snapshot_and_a_delta_are_refused_by_the_same_rule() -> None:
    """The names asked for, the node count and the job lists: one function per rule takes
    either message."""
    config = ServerConfig(max_nodes=1, max_jobs=1, max_id_chars=4)
    snapshot = pb.DispatchRequest(dispatcher_name="easy-k-long")
    snapshot.nodes.add(id="a").capacity["core"] = 1
    snapshot.nodes.add(id="b").capacity["core"] = 1
    snapshot.queued_jobs.add(id="q1")
    snapshot.running_jobs.add(id="r1")
    delta = pb.UpdateSessionRequest(dispatcher_name="easy-k-long")
    delta.node_changes.add(id="a")
    delta.node_changes.add(id="b")
    delta.submitted.add(id="q1")
    delta.submitted.add(id="q2")
    said: dict[str, list[tuple[str, str]]] = {}
    for name, request in (("snapshot", snapshot), ("delta", delta)):
        out = Violations()
        decision_options.check_option_limits(request, config, out)
        nodes.check_node_count(request, config, out)
        jobs.check_job_count(request, config, out)
        said[name] = [(v.field, v.description) for v in out.items]
    assert said["snapshot"] == [
        ("dispatcher_name", "11 characters exceed the limit of 4 (max_id_chars)"),
        ("nodes", "2 nodes exceed the limit of 1"),
        ("queued_jobs", "2 running + queued jobs exceed the limit of 1"),
    ]
    assert said["delta"] == [
        ("dispatcher_name", "11 characters exceed the limit of 4 (max_id_chars)"),
        ("node_changes", "2 node changes exceed the limit of 1 (max_nodes)"),
        ("submitted", "2 jobs exceed the limit of 1 (max_jobs)"),
    ]


def test_a_rule_and_its_fast_form_agree() -> None:
    """The fast paths' `*_within` sit beside the rule that says why, and agree with it."""
    config = ServerConfig(max_id_chars=3, max_name_chars=4, max_resource_types=2)
    cases = [("ab", "u", "n", "q"), ("abcd", "u", "n", "q"), ("a", "u", "names", "q"),
             ("a", "u", "n", "queue")]
    for job_id, user, name, queue in cases:
        job = pb.QueuedJob(id=job_id, user=user, name=name, queue=queue)
        out = Violations()
        assert jobs.check_job_texts(job, "j", config, out) == jobs.job_texts_within(job, config)
        assert bool(out.items) != jobs.job_texts_within(job, config)
    for amounts in ({"a": 1}, {"a": 1, "b": 1, "c": 1}, {"abcd": 1}):
        out = Violations()
        assert fields.check_types(amounts, "m", config, out) == fields.types_within(amounts, config)


def test_a_new_limit_takes_at_most_four_places() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## A limit (a server key that bounds a request)", 1)[1]
    section = section.split("\n## ", 1)[0]
    places = re.findall(r"^(\d+)\. ", section, re.M)
    assert section.lstrip().startswith(f"{len(places)} places:")
    assert 1 <= len(places) <= 4
