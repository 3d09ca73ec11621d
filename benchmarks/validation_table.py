"""Print the per-row validation table as Markdown (for docs/validation.md).

Run: python benchmarks/validation_table.py data/validation/public_runs.csv [more.csv ...]
"""
from __future__ import annotations

import sys

from clustertwin.errors import ClusterTwinError
from clustertwin.validate import ValidationReport, read_runs, validate_rows


def summary(rep: ValidationReport) -> str:
    """The line under each table of docs/validation.md (tests/test_accuracy_figures.py checks them)."""
    by = ", ".join(f"{k} {v * 100:.1f}%" for k, v in rep.mape_by_metric.items())
    return (f"rows {len(rep.rows)}, predicted {len(rep.ok_rows)}, failed {len(rep.failed_rows)}; "
            f"MAPE {rep.mape * 100:.1f}% ({by}); max |error| {rep.max_abs_error * 100:.1f}%; "
            f"rows within 10%: {sum(abs(r.error) <= 0.10 for r in rep.ok_rows)}, "
            f"within 20%: {sum(abs(r.error) <= 0.20 for r in rep.ok_rows)}")


def main(paths: list[str]) -> None:
    for path in paths:
        rep = validate_rows(read_runs(path))
        print(f"### {path.split('/')[-1]}\n")
        print("| run | plan | measured | predicted | error | largest parts of the predicted step |")
        print("|---|---|---:|---:|---:|---|")
        for r in rep.rows:
            if r.error is None:
                print(f"| {r.run_id} | | {r.measured:.4g} | failed | | {r.reason} |")
                continue
            p = r.prediction
            parts = sorted(p.breakdown_s.items(), key=lambda kv: -kv[1])[:3]
            top = ", ".join(f"{k} {v / p.step_time_s * 100:.0f}%" for k, v in parts if v > 0)
            print(f"| {r.run_id} | {p.graph.plan.short()} | {r.measured:.4g} | {r.predicted:.4g} | "
                  f"{r.error * 100:+.1f}% | {top} |")
        print(f"\n{summary(rep)}\n")


def run(argv: list[str]) -> int:
    """main, with a user's mistake (a missing or malformed file) as one line and exit code 2."""
    try:
        main(argv or ["data/validation/public_runs.csv"])
    except ClusterTwinError as e:
        sys.stderr.write(f"error: {e.one_line()}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
