"""benchmarks/qos/modes.py: `qos` against the book's default rung, read from the committed
campaigns; the figures docs/dispatchers.md's *Modes* table and README.md quote."""

from __future__ import annotations

import json

from benchmarks.qos.modes import BOOK_CAMPAIGN, LADDER, pairs, report
from tests.paths import ROOT


def test_the_committed_comparison_is_what_the_campaigns_say() -> None:
    book_campaign, ladder = json.loads(BOOK_CAMPAIGN.read_text()), json.loads(LADDER.read_text())
    assert len(pairs(book_campaign, ladder)) == 21
    text = report(book_campaign, ladder)
    for claim in ("`qos` lower than the book's on **20 of 21**",
                  "`qos` longer than the book's on **20 of 21** (by up to 250.1 h)",
                  "keeps EASY's promises (longest wait, utilisation within 0.005) on **0 of 21**",
                  "the book on **18 of 21**", "below the book's on **9 of 21**"):
        assert claim in text, claim
    assert (ROOT / "benchmarks/results/qos/modes.md").read_text(encoding="utf-8") == text
