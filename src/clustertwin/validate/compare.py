"""Compare predictions with measured rows: error = (predicted - measured) / measured."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterTwinError
from ..predict import Prediction, predict_job
from .runs import METRICS, MeasuredRow, job_from_row


def predicted_metric(pred: Prediction, metric: str) -> float:
    if metric == "iteration_time_s":
        return pred.step_time_s
    if metric == "tflops_per_gpu":
        return pred.tflops_per_gpu
    if metric == "mfu":
        return pred.mfu
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
class ValidationReport:
    rows: list[RowResult]

    @property
    def ok_rows(self) -> list[RowResult]:
        return [r for r in self.rows if r.error is not None]

    @property
    def failed_rows(self) -> list[RowResult]:
        return [r for r in self.rows if r.error is None]

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
        out: dict[str, list[float]] = {}
        for r in self.ok_rows:
            out.setdefault(r.metric, []).append(abs(r.error))  # type: ignore[arg-type]
        return {k: sum(v) / len(v) for k, v in out.items()}

    @property
    def max_abs_error(self) -> float:
        ok = self.ok_rows
        return max(abs(r.error) for r in ok) if ok else float("nan")  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "n": len(self.rows), "n_predicted": len(self.ok_rows), "n_failed": len(self.failed_rows),
                "n_not_fitting": len(self.not_fitting),
                "mape": self.mape, "mape_by_metric": self.mape_by_metric, "max_abs_error": self.max_abs_error,
                "rows": [r.to_json() for r in self.rows]}


def validate_rows(rows: list[MeasuredRow]) -> ValidationReport:
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
            pred = predict_job(job_from_row(row))
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
