"""Print the per-row validation table as Markdown (for docs/validation.md).

Run: python benchmarks/validation_table.py                     # every training-run file of TRAINING_FILES
     python benchmarks/validation_table.py data/validation/public_runs.csv [more.csv ...]
     python benchmarks/validation_table.py --write docs/validation.md   # rewrite its tables in place
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from clustertwin.errors import ClusterTwinError, DataError
from clustertwin.validate import ValidationReport, read_runs, validate_rows


ROOT = Path(__file__).resolve().parents[1]
# data files whose section --write appends to the validation document (the one holding cv_table.py's table)
# when it has none yet: heading, then the table and its summary line, which later runs rewrite in place
APPENDED = (("data/validation/llm_foundry_runs.csv",
             "MosaicML llm-foundry's MPT benchmark tables, out of sample"),
            ("data/validation/nemo_perf_summary_runs.csv",
             "NeMo 24.07's performance summary (FP8 pre-training on DGX H100), out of sample"))
# the measured training-run files of data/validation/ the tables cover (docs/validation.md has a section per file)
TRAINING_FILES = tuple(f"data/validation/{name}" for name in (
    "public_runs.csv", "dense_public_runs.csv", "torchtitan_runs.csv", "moe_public_runs.csv",
    "vtrain_single_node.csv", "llm_foundry_runs.csv", "nemo_perf_summary_runs.csv"))


def summary(rep: ValidationReport) -> str:
    """The line under each table of docs/validation.md (tests/test_accuracy_figures.py checks them)."""
    by = ", ".join(f"{k} {v * 100:.1f}%" for k, v in rep.mape_by_metric.items())
    return (f"rows {len(rep.rows)}, predicted {len(rep.ok_rows)}, failed {len(rep.failed_rows)}; "
            f"MAPE {rep.mape * 100:.1f}% ({by}); max |error| {rep.max_abs_error * 100:.1f}%; "
            f"rows within 10%: {sum(abs(r.error) <= 0.10 for r in rep.ok_rows)}, "
            f"within 20%: {sum(abs(r.error) <= 0.20 for r in rep.ok_rows)}")


def table(rep: ValidationReport) -> list[str]:
    """The Markdown rows of one file's table (header included)."""
    out = ["| run | plan | measured | predicted | error | largest parts of the predicted step |",
           "|---|---|---:|---:|---:|---|"]
    for r in rep.rows:
        if r.error is None:
            out.append(f"| {r.run_id} | | {r.measured:.4g} | failed | | {r.reason} |")
            continue
        p = r.prediction
        parts = sorted(p.breakdown_s.items(), key=lambda kv: -kv[1])[:3]
        top = ", ".join(f"{k} {v / p.step_time_s * 100:.0f}%" for k, v in parts if v > 0)
        fit = "" if r.fits is not False else " (does not fit)"
        out.append(f"| {r.run_id} | {p.graph.plan.short()} | {r.measured:.4g} | {r.predicted:.4g}{fit} | "
                   f"{r.error * 100:+.1f}% | {top} |")
    return out


def main(paths: list[str]) -> None:
    for path in paths:
        rep = validate_rows(read_runs(path))
        print(f"### {path.split('/')[-1]}\n")
        print("\n".join(table(rep)))
        print(f"\n{summary(rep)}\n")


def write(doc: Path) -> None:
    """Rewrite, in ``doc``, each section's table and summary line of a data file the section's heading
    names ("## ... (data/validation/<file>.csv)"): the table starting "| run | plan |" and the
    "rows N, ..." line after it."""
    if not doc.is_file():
        raise DataError("--write", f"{str(doc)!r} not found", "give the document to rewrite, e.g. docs/validation.md")
    lines = doc.read_text(encoding="utf-8").split("\n")
    out: list[str] = []
    i = 0
    current: Path | None = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^## .*\((data/validation/[\w.-]+\.csv)\)", line)
        if m:
            current = ROOT / m.group(1)
        if current is not None and line.startswith("| run | plan |"):
            rep = validate_rows(read_runs(current))
            out += table(rep)
            i += 1
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            while i < len(lines) and not lines[i].startswith("rows "):
                out.append(lines[i])
                i += 1
            out.append(summary(rep))
            i += 1
            current = None
            continue
        out.append(line)
        i += 1
    text = "\n".join(out)
    for path, title in APPENDED:
        if "<!-- cv-table:begin" in text and f"({path})" not in text:
            rep = validate_rows(read_runs(ROOT / path))
            text = text.rstrip("\n") + "\n\n" + "\n".join([f"## {title} ({path})", "", *table(rep), "",
                                                        summary(rep)]) + "\n"
    doc.write_text(text, encoding="utf-8")


def run(argv: list[str]) -> int:
    """main (or ``--write DOC``), with a user's mistake (a missing or malformed file) as one line and exit 2."""
    try:
        if argv[:1] == ["--write"]:
            if len(argv) != 2:
                raise DataError("--write", "needs the document to rewrite", "e.g. --write docs/validation.md")
            write(Path(argv[1]))
        else:
            main(argv or [str(ROOT / f) for f in TRAINING_FILES])
    except ClusterTwinError as e:
        sys.stderr.write(f"error: {e.one_line()}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
