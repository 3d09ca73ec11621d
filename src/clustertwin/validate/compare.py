"""Compare predictions with measured rows: error = (predicted - measured) / measured."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..calibrate.runs import TIME_METRICS, FitRow, ParamResult, fit_runs, source_group
from ..errors import ClusterTwinError
from ..predict import Prediction, predict_job
from .report_rows import ErrorRows
from .runs import METRICS, MeasuredRow, job_from_row


def predicted_metric(pred: Prediction, metric: str) -> float:
    if metric == "iteration_time_s":
        return pred.step_time_s
    # published MFU and TFLOP/s figures count attention in full (PaLM/Megatron): compare like with like
    if metric == "tflops_per_gpu":
        return pred.tflops_per_gpu_full_attention
    if metric == "mfu":
        return pred.mfu_full_attention
    if metric == "tokens_per_s_per_gpu":
        return pred.tokens_per_s / pred.job.cluster.num_gpus
    if metric == "peak_memory_bytes":
        return pred.memory.total_bytes
    raise KeyError(metric)


@dataclass
class RowResult:
    run_id: str
    metric: str
    measured: float
    predicted: float | None
    error: float | None
    reason: str = ""
    assumptions: list[str] = field(default_factory=list)
    prediction: Prediction | None = None

    @property
    def fits(self) -> bool | None:
        """Whether the predicted memory fits the GPU (None when nothing was predicted)."""
        return None if self.prediction is None else self.prediction.fits

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"run_id": self.run_id, "metric": self.metric, "measured": self.measured,
                             "predicted": self.predicted, "error": self.error}
        if self.prediction is not None:
            d["fits"] = self.fits
            d["memory_bytes"] = self.prediction.memory.total_bytes
        if self.reason:
            d["reason"] = self.reason
        if self.assumptions:
            d["assumptions"] = self.assumptions
        return d


@dataclass
class ValidationReport(ErrorRows[RowResult]):
    rows: list[RowResult]

    @property
    def not_fitting(self) -> list[RowResult]:
        """Predicted rows whose predicted memory exceeds the GPU's."""
        return [r for r in self.ok_rows if r.fits is False]

    @property
    def mape(self) -> float:
        ok = self.ok_rows
        return sum(abs(r.error) for r in ok) / len(ok) if ok else float("nan")  # type: ignore[arg-type]

    @property
    def mape_by_metric(self) -> dict[str, float]:
        return self._mape_by(lambda r: r.metric)

    @property
    def max_abs_error(self) -> float:
        ok = self.ok_rows
        return max(abs(r.error) for r in ok) if ok else float("nan")  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "n": len(self.rows), "n_predicted": len(self.ok_rows), "n_failed": len(self.failed_rows),
                "n_not_fitting": len(self.not_fitting),
                "mape": self.mape, "mape_by_metric": self.mape_by_metric, "max_abs_error": self.max_abs_error,
                "rows": [r.to_json() for r in self.rows]}


ProfileFor = Callable[[Any], Any]     # GPUSpec -> HardwareProfile (None: the shipped profile)


def validate_rows(rows: list[MeasuredRow], profile_for: ProfileFor | None = None) -> ValidationReport:
    """Predict every row (with ``profile_for(gpu)``'s profile, default the shipped one) and compare."""
    results = []
    for row in rows:
        if row.metric not in METRICS:
            results.append(RowResult(row.run_id, row.metric, row.value, None, None,
                                     f"unknown metric {row.metric!r}; use one of {', '.join(METRICS)}"))
            continue
        if not math.isfinite(row.value) or row.value <= 0:
            results.append(RowResult(row.run_id, row.metric, row.value, None, None, "measured value is not a positive number"))
            continue
        try:
            job = job_from_row(row)
            pred = predict_job(job, profile_for(job.cluster.gpu) if profile_for is not None else None)
        except ClusterTwinError as e:
            results.append(RowResult(row.run_id, row.metric, row.value, None, None, e.one_line(), row.assumptions))
            continue
        except Exception as e:   # never lose the other rows to one that the model cannot take
            results.append(RowResult(row.run_id, row.metric, row.value, None, None,
                                     f"cannot predict this row ({type(e).__name__}: {e})", row.assumptions))
            continue
        p = predicted_metric(pred, row.metric)
        results.append(RowResult(row.run_id, row.metric, row.value, p, (p - row.value) / row.value, "",
                                 row.assumptions, pred))
    return ValidationReport(results)


# ---- calibration from measured runs and leave-one-source-out cross-validation -------------------------
def fit_rows(rows: list[MeasuredRow], files: list[str] | None = None) -> list[FitRow]:
    """The rows a calibration fits: one per run (source group and run id) with a positive step time or
    throughput that makes a job; throughputs become step times with the job's own token and FLOP counts.
    ``files[i]`` names the file of ``rows[i]`` (reports only)."""
    out: list[FitRow] = []
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows):
        if row.metric not in TIME_METRICS or not math.isfinite(row.value) or row.value <= 0:
            continue
        group = source_group(row.raw.get("source") or "")
        if (group, row.run_id) in seen:     # the same run as MFU and TFLOP/s: one residual
            continue
        try:
            job = job_from_row(replace(row, assumptions=[]))
        except ClusterTwinError:
            continue
        n = job.cluster.num_gpus
        model_flops = job.model.flops_per_token(job.seq_len) * job.tokens_per_step   # published: attention in full
        per_s = {"iteration_time_s": None, "tokens_per_s_per_gpu": job.tokens_per_step / n,
                 "tflops_per_gpu": model_flops / n / 1e12,
                 "mfu": model_flops / n / job.cluster.gpu.peak(job.plan.precision)}[row.metric]
        step = row.value if per_s is None else per_s / row.value
        seen.add((group, row.run_id))
        out.append(FitRow(row.run_id, group, job, step, per_s is not None, file=files[i] if files else ""))
    return out


@dataclass
class FoldSummary:
    """One held-out source group of a cross-validation."""
    group: str
    files: list[str]
    report: ValidationReport              # its rows, predicted with the profile fitted on the other groups
    default: ValidationReport             # its rows, predicted with the shipped profile
    n_train: int                          # rows the calibration fitted
    params: list[ParamResult]
    note: str = ""
    row_files: list[str] = field(default_factory=list)    # the file of each row
    n_screened: int = 0                   # rows of the other groups screened out of the fit (calibrate's screen_rows)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.group, "files": self.files, "n": len(self.report.rows),
                "n_predicted": len(self.report.ok_rows), "n_train": self.n_train,
                "n_screened": self.n_screened, "mape": self.report.mape,
                "mape_uncalibrated": self.default.mape, "max_abs_error": self.report.max_abs_error,
                "parameters": {p.param.name: p.value for p in self.params}, **({"note": self.note} if self.note else {})}


@dataclass
class CrossValidation:
    """``validate --cv source``: every row judged by a profile calibrated without its source group."""
    folds: list[FoldSummary]
    by: str = "source"

    @property
    def report(self) -> ValidationReport:
        return ValidationReport([r for f in self.folds for r in f.report.rows])

    @property
    def default(self) -> ValidationReport:
        return ValidationReport([r for f in self.folds for r in f.default.rows])

    def by_file(self) -> dict[str, dict[str, float]]:
        """Out-of-sample and uncalibrated MAPE per file (each row counted under its own file)."""
        files: dict[str, tuple[list[RowResult], list[RowResult]]] = {}
        for f in self.folds:
            for r, d, name in zip(f.report.rows, f.default.rows, f.row_files):
                a, b = files.setdefault(name, ([], []))
                a.append(r)
                b.append(d)
        return {k: {"mape": ValidationReport(a).mape, "mape_uncalibrated": ValidationReport(b).mape,
                    "max_abs_error": ValidationReport(a).max_abs_error, "n": len(a)} for k, (a, b) in files.items()}

    def to_json(self) -> dict[str, Any]:
        rep, dft = self.report, self.default
        return {"schema": 1, "cv": self.by, "n": len(rep.rows), "n_predicted": len(rep.ok_rows),
                "n_failed": len(rep.failed_rows), "mape": rep.mape, "mape_by_metric": rep.mape_by_metric,
                "max_abs_error": rep.max_abs_error, "mape_uncalibrated": dft.mape,
                "by_file": self.by_file(), "folds": [f.to_json() for f in self.folds],
                "rows": [r.to_json() for r in rep.rows]}


def cross_validate(rows: list[MeasuredRow], files: list[str] | None = None,
                   on_fold: Callable[[str, set[str]], None] | None = None, **fit_kw: Any) -> CrossValidation:
    """Leave-one-source-out: for each source group (``calibrate.runs.source_group`` of the ``source``
    column), calibrate on the other groups' rows and predict this group's rows. A group with no other
    group to learn from is judged with the shipped profile (and says so)."""
    files = files or [""] * len(rows)
    all_fit = fit_rows(rows, files)
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(source_group(row.raw.get("source") or ""), []).append(i)
    folds = []
    for g, idx in groups.items():
        train = [r for r in all_fit if r.group != g]
        assert all(r.group != g for r in train), "cross-validation trained on the held-out source"
        fit = fit_runs(train, **fit_kw) if train else None
        if on_fold is not None:
            on_fold(g, fit.groups if fit is not None else set())
        held = [replace(rows[i], assumptions=[]) for i in idx]
        held_default = [replace(rows[i], assumptions=[]) for i in idx]
        rep = validate_rows(held, fit.profile_for if fit is not None else None)
        dft = validate_rows(held_default)
        fold = FoldSummary(g, sorted({files[i] for i in idx}), rep, dft, len(fit.rows) if fit else 0,
                           fit.params if fit else [], "" if fit else "no other source to calibrate on: shipped profile",
                           [files[i] for i in idx], len(fit.excluded) if fit else 0)
        folds.append(fold)
    return CrossValidation(folds)
