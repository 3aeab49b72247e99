"""Node-feature constraints written as Slurm writes them (`--constraint`), in the contract's
terms: the features a job requires (an AND) and its feature alternatives (an OR of AND-terms;
QueuedJob.required_features and QueuedJob.feature_alternatives).

Features are joined by AND ("a&b", or "a,b") and OR ("a|b"). Slurm evaluates them left to
right, without precedence ("a|b&c" is (a|b)&c: its `valid_feature_counts` folds each feature
into the nodes so far with the operator before it), which `constraint_rules` folds into an OR
of AND-terms: "&f" adds f to every term so far, "|f" opens the term [f]. One term is the
required features; several are the alternatives. Anything else (Slurm's matching OR "[a|b]",
counts "a*2", parentheses, negation "!a") is not expressible: None. Read by the Slurm bridge
(a job's --constraint) and by a system file's `partition_features` / `swf_queue_features`
(docs/replays.md).
"""

from __future__ import annotations

import re

Features = tuple[str, ...]
FeatureRules = tuple[Features, tuple[Features, ...]]  # (required, alternatives)
NO_FEATURES: FeatureRules = ((), ())

FEATURE = r"[A-Za-z0-9_.:+@-]+"  # one feature's name, as Slurm's node features are written
_ANDS_AND_ORS = re.compile(rf"^{FEATURE}(?:[&,|]{FEATURE})*$")


def constraint_rules(constraint: str) -> FeatureRules | None:
    """A constraint of ANDs and ORs as (required features, alternatives): one AND-term is
    required, several are alternatives, each term's features once; ((), ()) for none; None
    when not expressible."""
    text = constraint.strip()
    if not text or text == "(null)":
        return NO_FEATURES
    if not _ANDS_AND_ORS.match(text):
        return None
    terms: list[list[str]] = [[]]
    for op, feature in re.findall(rf"(^|[&,|])({FEATURE})", text):
        if op == "|":
            terms.append([feature])
        else:  # "&", "," or the first feature: into every term so far (left to right)
            for term in terms:
                term.append(feature)
    unique = tuple(dict.fromkeys(tuple(dict.fromkeys(term)) for term in terms))
    return (unique[0], ()) if len(unique) == 1 else ((), unique)


def both(first: FeatureRules, second: FeatureRules) -> FeatureRules:
    """The rules of a job held to `first` and to `second`: every required feature of both, and
    one term of each OR (the terms' pairwise unions, when both have one)."""
    required = tuple(dict.fromkeys((*first[0], *second[0])))
    if first[1] and second[1]:
        alternatives = tuple(dict.fromkeys(tuple(dict.fromkeys((*a, *b)))
                                           for a in first[1] for b in second[1]))
    else:
        alternatives = first[1] or second[1]
    return required, alternatives
