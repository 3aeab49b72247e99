"""A campaign's matrix as figures: one panel per trace, bars per dispatcher for each predictor.

Reads `campaign.json` (written by `benchmarks.matrix.campaign` or merged by
`benchmarks.matrix.report`) and writes one PNG per metric (`METRICS`): mean slowdown, mean
bounded slowdown and mean wait, each with the standard deviation as error bars (the papers'
Figures 4–5), on a log scale; utilisation; mean decision time (log scale). A panel is one
trace on one system.

    python -m benchmarks.matrix.plot runs/matrix-slices [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.matrix.report import DISPATCHER_ORDER

METRICS = (  # key (its std: key + "_std"), axis label, log scale, file name
    ("sld", "mean slowdown, ± std", True, "campaign_slowdown.png"),
    ("bsld", "mean bounded slowdown (10 s), ± std", True, "campaign_bsld.png"),
    ("wait", "mean wait [s], ± std", True, "campaign_wait.png"),
    ("util", "utilisation", False, "campaign_utilisation.png"),
    ("decision_ms", "mean decision time [ms]", True, "campaign_decision.png"),
)


def matrix(document: dict[str, Any]) -> dict[str, dict[tuple[str, str], dict[str, float]]]:
    """panel (trace, and system unless from the header) -> (predictor, dispatcher) -> the
    METRICS' values and standard deviations (cells that ran)."""
    out: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for entry in document["cells"]:
        if entry["status"] != "ok":
            continue
        spec, summary = entry["spec"], entry["summary"]
        panel = spec["trace_file"].removesuffix(".xz").removesuffix(".gz").removesuffix(".swf")
        if spec.get("system"):
            panel += f" on {summary['system']['name']}"
        out.setdefault(panel, {})[spec["predictor"], spec["dispatcher"]] = {
            "sld": summary["slowdown"]["mean"], "sld_std": summary["slowdown"]["std"],
            "bsld": summary["bounded_slowdown"]["mean"],
            "bsld_std": summary["bounded_slowdown"]["std"],
            "wait": summary["wait_seconds"]["mean"], "wait_std": summary["wait_seconds"]["std"],
            "util": summary["utilisation"],
            "decision_ms": summary["decision_seconds"]["mean"] * 1000,
        }
    return out


def plot(document: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = matrix(document)
    written = []
    for metric, label, log, name in METRICS:
        fig, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 4), squeeze=False)
        for ax, (panel, cells) in zip(axes[0], data.items(), strict=True):
            predictors = list(dict.fromkeys(p for p, _ in cells))
            dispatchers = [d for d in DISPATCHER_ORDER if any(d == c for _, c in cells)]
            width = 0.8 / len(dispatchers)
            for k, dispatcher in enumerate(dispatchers):
                xs = [i + (k - (len(dispatchers) - 1) / 2) * width for i in range(len(predictors))]
                values = [cells.get((p, dispatcher), {}).get(metric, float("nan"))
                          for p in predictors]
                errors = ([cells.get((p, dispatcher), {}).get(f"{metric}_std", 0.0)
                           for p in predictors] if metric in ("sld", "bsld", "wait") else None)
                # Error bars upwards only: on a log scale mean − std is often below zero.
                yerr = [[0.0] * len(values), errors] if errors is not None else None
                ax.bar(xs, values, width, yerr=yerr, capsize=2, label=dispatcher)
            ax.set_xticks(range(len(predictors)), predictors)
            ax.set_title(panel)
            ax.set_ylabel(label)
            if log:
                ax.set_yscale("log")
            else:
                ax.set_ylim(0.0 if min(c["util"] for c in cells.values()) < 0.5 else 0.5, 1.0)
            ax.legend(fontsize="small")
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", type=Path, help="a campaign's --out directory")
    parser.add_argument("--out", type=Path, help="where to write the PNGs (default: campaign)")
    args = parser.parse_args()
    out = args.out or args.campaign
    out.mkdir(parents=True, exist_ok=True)
    document = json.loads((args.campaign / "campaign.json").read_text(encoding="utf-8"))
    for path in plot(document, out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
