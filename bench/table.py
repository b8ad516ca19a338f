"""The README's results table from the figures ``make bench`` appended to a JSON-lines file.

    python bench/table.py volume/bench-results.jsonl [--since 2026-12-01T10:50]

Prints a Markdown table, one row per figure name (its latest measurement, or with ``--since`` the runs since
then: the median ratio and how many runs): figure, ratio, goal, verdict, the two numbers, cores, date.
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
    print("| figure | ratio | goal | verdict | numbers | cores | measured (UTC) | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ds in rows.items():
        last = ds[-1]
        ratio = statistics.median(d["ratio"] for d in ds)
        verdicts = sorted({d["verdict"] for d in ds})
        print(f"| {name} | {ratio:.3g} | {last['goal'] or '-'} | {'/'.join(verdicts)} | {last['a_label']} "
              f"{last['a']:.4g} / {last['b_label']} {last['b']:.4g} {last['unit']} | {last['cores']} | "
              f"{last['time'][:16]} | {len(ds)} |")


if __name__ == "__main__":
    main()
