"""Leave-one-source-out figures of the project's data sets, and the error-band table predictions quote.

Run: python benchmarks/cv_table.py            # print the Markdown section
     python benchmarks/cv_table.py --write    # also rewrite docs/validation.md's "Out of sample" section
                                              # and src/clustertwin/calibrate/error_bands.yaml

It runs `clustertwin validate --cv source` on every run file of data/validation/ together (so each source
is judged by a profile calibrated on all the other files' sources). shared/validation/public_runs.csv
is the same file as data/validation/public_runs.csv (checked) and is not counted twice. Takes minutes:
one calibration per source group.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import yaml

from clustertwin.calibrate.bands import BANDS_PATH, build_table, run_class
from clustertwin.validate import read_runs
from clustertwin.validate.compare import CrossValidation, cross_validate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "validation"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from validation_table import TRAINING_FILES  # noqa: E402  (one list of the training-run files)

FILES = tuple(Path(f).name for f in TRAINING_FILES)
SHARED = ROOT.parent / "shared" / "validation" / "public_runs.csv"
BEGIN, END = "<!-- cv-table:begin (python benchmarks/cv_table.py --write) -->", "<!-- cv-table:end -->"
TIME = ("iteration_time_s", "tflops_per_gpu", "mfu", "tokens_per_s_per_gpu")


def step_time_error(metric: str, error: float) -> float:
    """A row's error as an error of step time (throughputs are inverse step times)."""
    return error if metric == "iteration_time_s" else 1.0 / (1.0 + error) - 1.0


def run() -> tuple[CrossValidation, list[str]]:
    rows, names = [], []
    for f in FILES:
        r = read_runs(DATA / f)
        rows += r
        names += [f] * len(r)
    if SHARED.is_file() and SHARED.read_bytes() != (DATA / "public_runs.csv").read_bytes():
        print("note: shared/validation/public_runs.csv differs from data/validation/public_runs.csv", file=sys.stderr)
    return cross_validate(rows, names), names


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def markdown(cv: CrossValidation) -> str:
    out = ["| data set | rows | MAPE uncalibrated | MAPE out of sample | max \\|error\\| | rows beyond 25% |",
           "|---|---:|---:|---:|---:|---:|"]
    per_file: dict[str, list] = {}
    for f in cv.folds:
        for r, name in zip(f.report.rows, f.row_files):
            per_file.setdefault(name, []).append(r)
    by = cv.by_file()
    for name in FILES:
        if name not in by:
            continue
        d = by[name]
        beyond = sum(1 for r in per_file[name] if r.error is not None and abs(r.error) > 0.25)
        out.append(f"| {name} | {d['n']} | {_pct(d['mape_uncalibrated'])} | {_pct(d['mape'])} | "
                   f"{_pct(d['max_abs_error'])} | {beyond} |")
    rep = cv.report
    out.append(f"| **all** | {len(rep.rows)} | {_pct(cv.default.mape)} | {_pct(rep.mape)} | "
               f"{_pct(rep.max_abs_error)} | {sum(1 for r in rep.ok_rows if abs(r.error) > 0.25)} |")
    mem = [r for rows in per_file.values() for r in rows if r.metric == "peak_memory_bytes" and r.error is not None]
    if mem:
        errs = [abs(r.error) for r in mem]
        over = sum(1 for r in mem if r.error > 0)
        out += ["", f"Peak memory ({len(mem)} rows with `peak_memory_bytes`, torchtitan's): MAPE "
                    f"{_pct(sum(errs) / len(errs))} out of sample, max |error| {_pct(max(errs))}, "
                    f"{sum(e <= 0.08 for e in errs)} of {len(mem)} within 8%, {over} predicted above the "
                    "measurement. No memory figure is fitted (`calibrate --from-runs` fits step-time "
                    "parameters only and the memory constants are assumed), so in and out of sample are the "
                    "same; these rows count in the MAPEs above too."]
    out += ["", "Per held-out source (the text of `source` before its first comma, parenthesis or colon):", "",
            "| held-out source | data set | rows | fitted on | MAPE uncalibrated | MAPE out of sample |",
            "|---|---|---:|---:|---:|---:|"]
    for f in cv.folds:
        out.append(f"| {f.group} | {', '.join(f.files)} | {len(f.report.rows)} | {f.n_train or f.note} | "
                   f"{_pct(f.default.mape)} | {_pct(f.report.mape)} |")
    return "\n".join(out)


def band_samples(cv: CrossValidation):
    for r in cv.report.ok_rows:
        if r.metric in TIME and r.prediction is not None:
            j = r.prediction.job
            yield run_class(j.framework, j.cluster.gpu, j.cluster.num_gpus), step_time_error(r.metric, r.error)


def bands_markdown(table: dict) -> str:
    out = ["| framework | GPU generation | GPUs | runs | band (10th-90th pct, or min-max under 10 runs) | median |",
           "|---|---|---|---:|---|---:|"]
    for c in table["classes"]:
        band = "no band (fewer than 3 runs)" if c["band"] is None else \
            f"{c['band'][0] * 100:+.1f}% to {c['band'][1] * 100:+.1f}%"
        out.append(f"| {c['framework']} | {c['gpu_generation']} | {c['scale']} | {c['n_runs']} | {band} | "
                   f"{c['median'] * 100:+.1f}% |")
    return "\n".join(out)


def fold_parameters(cv: CrossValidation) -> str:
    """Every fold's fitted parameter values beside the shipped ones (what moved, fold by fold)."""
    names = sorted({p.param.name for f in cv.folds for p in f.params})
    if not names:
        return ""
    shipped = {p.param.name: p.param.default for f in cv.folds for p in f.params}
    out = ["| parameter | shipped | " + " | ".join(f"{i + 1}" for i in range(len(cv.folds))) + " |",
           "|---|---:|" + "---:|" * len(cv.folds)]
    for n in names:
        cells = []
        for f in cv.folds:
            p = next((q for q in f.params if q.param.name == n), None)
            cells.append("" if p is None else f"{p.value:.3g}{'*' if p.at_bound else ''}")
        out.append(f"| {n} | {shipped[n]:.3g} | " + " | ".join(cells) + " |")
    out += ["", "folds: " + "; ".join(f"{i + 1} = {f.group[:50]}" for i, f in enumerate(cv.folds)),
            "(* at a bound; empty: not fitted in that fold)"]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    t0 = time.time()
    cv, _ = run()
    print("Fitted parameters per held-out source:\n\n" + fold_parameters(cv) + "\n", file=sys.stderr)
    table = build_table(band_samples(cv), "data/validation/" + ", ".join(FILES))
    section = (f"{BEGIN}\n{markdown(cv)}\n\nExpected-error classes (`predict` quotes the band of its class; "
               f"`src/clustertwin/calibrate/error_bands.yaml`):\n\n{bands_markdown(table)}\n{END}")
    print(section)
    print(f"\n({time.time() - t0:.0f} s)", file=sys.stderr)
    if "--write" in argv:
        BANDS_PATH.write_text("# generated by benchmarks/cv_table.py --write; do not edit\n"
                              + yaml.safe_dump(table, sort_keys=False, width=120), encoding="utf-8")
        from clustertwin.catalog import write_parsed
        write_parsed()   # the shipped parsed copy of the package's YAML files (start-up reads it)
        doc = ROOT / "docs" / "validation.md"
        text = doc.read_text(encoding="utf-8")
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        if pattern.search(text):
            text = pattern.sub(lambda _: section, text)
        else:
            text = text.rstrip("\n") + "\n\n## Out of sample: leave-one-source-out\n\n" + section + "\n"
        doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
