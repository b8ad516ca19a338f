"""The README's results table from the figures ``make bench`` appended to a JSON-lines file.

    python bench/table.py volume/bench-results.jsonl [--since 2026-12-01T10:50]

Prints a Markdown table, one row per figure name over its runs (all, or those since ``--since``): goal, the
median ratio and its range, the verdict of the median, the last run's two numbers, how many runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="JSON lines written by the benchmarks' --out")
    p.add_argument("--since", default="", help="only figures measured at or after this UTC time (ISO prefix)")
    a = p.parse_args(argv)
    rows: dict[str, list[dict]] = {}
    for line in Path(a.results).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            if d["time"] >= a.since:
                rows.setdefault(d["name"], []).append(d)
    print("| figure | goal | ratio (median of runs) | range | verdict | last run: a / b | runs |")
    print("|---|---|---|---|---|---|---|")
    for name, ds in rows.items():
        last = ds[-1]
        ratios = [d["ratio"] for d in ds]
        ratio = statistics.median(ratios)
        print(f"| {name} | {last['goal'] or '-'} | {ratio:.3g} | {min(ratios):.3g}-{max(ratios):.3g} | "
              f"{_verdict(ratio, last['goal'])} | {last['a_label']} {last['a']:.4g} / {last['b_label']} "
              f"{last['b']:.4g} {last['unit']} | {len(ds)} |")


def _verdict(ratio: float, goal: str) -> str:
    """The verdict of the median ratio against ``goal`` (``">= 0.95"``, ``"<= 1.3"``, ``""``)."""
    if not goal:
        return "info"
    op, value = goal.split()
    return "met" if (ratio >= float(value) if op == ">=" else ratio <= float(value)) else "missed"


if __name__ == "__main__":
    main()
