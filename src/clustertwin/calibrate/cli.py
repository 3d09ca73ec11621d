"""``clustertwin calibrate`` and ``clustertwin measure``: GPU commands (extra ``[gpu]``).

Without PyTorch or a CUDA GPU both say so in one line and exit 2.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def _catalog_gpu(gpu: Optional[str], device_name: str) -> str:
    from ..catalog import load_gpu
    from ..errors import SpecError
    from .measure import guess_gpu
    name = gpu or guess_gpu(device_name)
    if name is None:
        raise SpecError("gpu", f"cannot tell which catalog GPU {device_name!r} is", "give --gpu NAME")
    return load_gpu(name).name


def calibrate(files: Optional[list[Path]] = typer.Argument(None, help="with --from-runs: CSVs of measured runs "
                                                                        "(validation schema)", show_default=False),
              out: Optional[Path] = typer.Option(None, "--out", "-o",
                                                 help="profile file to write [default: profile-<gpu>.yaml]"),
              quick: bool = typer.Option(False, "--quick", help="a coarse grid that finishes in a few minutes"),
              gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU name [default: from the device name; "
                                                "with --from-runs the most common GPU of the runs]"),
              raw: Optional[Path] = typer.Option(None, "--raw", help="also save the raw timings (JSON)"),
              quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
              from_runs: bool = typer.Option(False, "--from-runs", help="fit the profile's physical parameters to the "
                                             "measured step times in FILES instead of measuring this GPU"),
              cv: bool = typer.Option(True, "--cv/--no-cv", help="with --from-runs: also report the "
                                      "cross-validated error (leave-one-source-out)"),
              from_trace: bool = typer.Option(False, "--from-trace", help="fit the profile's tables to the kernels of "
                                              "PyTorch profiler traces FILES (.json/.json.gz) instead of measuring "
                                              "this GPU"),
              as_json: bool = typer.Option(False, "--json", help="with --from-runs/--from-trace: print the fit as JSON")) -> None:
    """Measure this GPU (GEMM, attention, memory-bound kernels, AdamW, launch, NCCL under torchrun) and write
    a versioned hardware profile for `predict --profile`; or, with --from-runs FILE.csv..., fit a few named
    parameters of the profile to measured runs (no GPU needed)."""
    if from_trace:
        from ..errors import DataError
        if not files:
            raise DataError("from-trace", "no trace given", "use `clustertwin calibrate --from-trace TRACE.json.gz ...`")
        if from_runs or quick or raw is not None:
            flag = "--from-runs" if from_runs else "--quick" if quick else "--raw"
            raise DataError("from-trace", f"given with {flag}, which only measuring a GPU (or fitting runs) uses",
                            f"drop {flag} (or --from-trace)")
        if out is not None and (out.is_dir() or not out.resolve().parent.is_dir()):
            raise DataError("out", f"cannot write {str(out)!r} (a directory, or in a directory that does not exist)",
                            "give a file in a directory that exists, e.g. --out profile.yaml")
        from .from_trace import calibrate_from_trace
        calibrate_from_trace(files, out, gpu, as_json)
        return
    if from_runs or files:
        from ..errors import DataError
        if not from_runs:
            raise DataError("calibrate", "CSV files given without --from-runs",
                            "use `clustertwin calibrate --from-runs FILE.csv ...`")
        if not files:
            raise DataError("from-runs", "no CSV of measured runs given", "use `clustertwin calibrate --from-runs FILE.csv ...`")
        _calibrate_from_runs(files, out, gpu, cv, as_json)
        return
    from .microbench import require_cuda, run_all
    torch = require_cuda("calibrate")  # before anything else: the one-line error on a machine without a GPU
    name = _catalog_gpu(gpu, torch.cuda.get_device_name())
    data = run_all(quick=quick, quiet=quiet)
    import os
    if int(os.environ.get("RANK", "0")) != 0:
        return
    from ..catalog import load_gpu
    from .fit import fit_profile
    from .profile import save_profile
    spec = load_gpu(name)
    prof = fit_profile(data, spec, source=f"clustertwin calibrate{' --quick' if quick else ''} on "
                                          f"{data['meta'].get('device_name', name)}")
    path = save_profile(prof, out or Path(f"profile-{spec.name}.yaml"))
    if raw is not None:
        raw.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    typer.echo(f"wrote {path} ({', '.join(prof.measured)} measured)")


def _calibrate_from_runs(files: list[Path], out: Optional[Path], gpu: Optional[str], cv: bool, as_json: bool) -> None:
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from ..catalog import load_gpu
    from ..errors import DataError
    from ..validate import read_runs
    from ..validate.compare import fit_rows
    from .profile import save_profile
    from .runs import cross_validate_fit, cv_label, fit_runs, fit_to_profile
    rows, names = [], []
    for f in files:
        r = read_runs(f)
        rows += r
        names += [f.name] * len(r)
    fr = fit_rows(rows, names)
    if not fr:
        raise DataError("from-runs", "no row with a step time or throughput that makes a job",
                        "give rows with metric iteration_time_s, tokens_per_s_per_gpu, tflops_per_gpu or mfu")
    fit = fit_runs(fr)
    folds = cross_validate_fit(fr) if cv else []
    spec = load_gpu(gpu) if gpu else Counter(r.job.cluster.gpu.name for r in fr).most_common(1)[0][0]
    spec = load_gpu(spec) if isinstance(spec, str) else spec
    prof = fit_to_profile(fit, spec, [f.name for f in files], folds)
    path = save_profile(prof, out or Path(f"profile-{spec.name}-fitted.yaml"))
    cv_errors = [e for f in folds for e in f.errors]
    cv_mape = sum(abs(e) for e in cv_errors) / len(cv_errors) if cv_errors else None
    if as_json:
        _json({"schema": 1, "profile": str(path), "gpu": spec.name, "n_rows": len(fit.rows), "n_runs": len(fr),
               "parameters": [p.to_json() for p in fit.params], "unconstrained": fit.unconstrained,
               "dropped": fit.dropped, "excluded": [{"run_id": r.run_id, "source": r.group, "reason": why}
                                                    for r, why in fit.excluded],
               "noise_scale": fit.noise_scale, "in_sample_mape": fit.mape, "cv": cv_label(folds) or None, "cv_mape": cv_mape,
               "folds": [{"held_out": f.group, "n": f.n_rows, "n_train": f.n_train, "mape": f.mape} for f in folds]})
        return
    con = Console()
    t = Table(title=f"fitted to {len(fit.rows)} runs of {len(fr)} ({', '.join(f.name for f in files)})",
              title_justify="left")
    t.add_column("parameter", no_wrap=True)
    for col in ("fitted", "± 1 sd", "shipped"):
        t.add_column(col, justify="right")
    t.add_column("bounds", no_wrap=True)
    t.add_column("")
    for p in fit.params:
        q = p.param
        note = "at bound" if p.at_bound else ""
        if q.tied:
            note = (note + "; " if note else "") + f"+{len(q.tied)} tied"
        t.add_row(q.name, f"{p.value:.4g}", "" if p.sd != p.sd else f"{p.sd:.2g}", f"{q.default:.4g}",
                  f"[{q.lo:g}, {q.hi:g}]", note)
    con.print(t)
    if fit.unconstrained:
        con.print("not constrained by these runs (kept at the shipped value): " + ", ".join(fit.unconstrained))
    if fit.dropped:
        con.print("sensitive but beyond the 12-parameter cap (kept): " + ", ".join(fit.dropped))
    for r, why in fit.excluded:
        con.print(f"not fitted: {r.run_id} ({r.group[:40]}): {why}")
    tied = [f"{p.param.name}: {', '.join(p.param.tied)}" for p in fit.params if p.param.tied]
    if tied:
        con.print("tied fields keep their ratio to the fitted one: " + "; ".join(tied))
    other = sorted({p.param.scope for p in fit.params if p.param.kind == "hardware"} - {prof.fitted["architecture"]})
    if other:
        con.print(f"the profile is for {spec.name}: the {', '.join(other)} parameters above are not written "
                  f"(give --gpu NAME for a profile of another GPU)")
    con.print(f"in-sample MAPE: {fit.mape * 100:.1f}% over {len(fit.rows)} runs")
    if folds:
        per = "; ".join(f"{f.group[:40]} {f.mape * 100:.1f}% (n={f.n_rows})" for f in folds)
        con.print(f"cross-validated MAPE ({cv_label(folds)}): {cv_mape * 100:.1f}% over {len(cv_errors)} runs: {per}")
    con.print(f"wrote {path} (for {spec.name} and any {prof.fitted['architecture']} GPU; "
              f"use it with `clustertwin predict --profile {path}`)")


def _json(data) -> None:
    import sys
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


def measure(model: str = typer.Option(..., "--model", "-m", help="catalog name or a YAML/JSON/HF config.json file"),
            micro_batch: int = typer.Option(..., "--micro-batch", help="sequences per step"),
            seq_len: int = typer.Option(..., "--seq-len", help="tokens per sequence"),
            framework: str = typer.Option("pytorch-eager", "--framework", help="pytorch-eager | pytorch-compile"),
            recompute: str = typer.Option("none", "--recompute", help="none | full"),
            layers: Optional[int] = typer.Option(None, "--layers", help="keep only the first N layers (to fit one GPU)"),
            steps: int = typer.Option(10, "--steps", help="timed steps (after 3 warm-up steps)"),
            gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU name [default: from the device name]"),
            append: Optional[Path] = typer.Option(None, "--append", help="append the rows to this validation CSV"),
            quiet: bool = typer.Option(False, "--quiet", help="no per-step output")) -> None:
    """Train a model built from its spec on this GPU; record median step time and peak memory as
    validation-schema rows."""
    from .microbench import require_cuda
    torch = require_cuda("measure")
    from ..catalog import load_model
    from .measure import SCHEMA_COLUMNS, append_rows, rows_for, run_measure, truncate
    spec = truncate(load_model(model), layers)
    name = _catalog_gpu(gpu, torch.cuda.get_device_name())
    m = run_measure(spec, name, micro_batch, seq_len, framework, recompute, steps=steps, quiet=quiet)
    rows = rows_for(m)
    if append is not None:
        append_rows(append, rows)
    typer.echo(f"{spec.name} on {name}: step {m.step_time_s * 1e3:.1f} ms (median of {steps}), "
               f"peak memory {m.peak_memory_bytes / 2**30:.2f} GiB" + (f"; appended to {append}" if append else ""))
    if append is None:
        import csv
        import sys
        w = csv.DictWriter(sys.stdout, fieldnames=list(SCHEMA_COLUMNS))
        w.writeheader()
        w.writerows(rows)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("measure")(measure)
