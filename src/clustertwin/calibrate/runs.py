"""Calibrate a few named physical parameters of a hardware/framework profile to measured step times
(``clustertwin calibrate --from-runs``), and cross-validate the fit.

What is fitted: at most ``MAX_PARAMS`` (12) parameters, each a field of ``HardwareProfile`` (per GPU
architecture present in the rows) or of ``FrameworkProfile`` (per framework present), taken from the
fields the profiles have today:

- ``<arch>.gemm_efficiency.bf16`` (fp16 moves with it: the same tensor cores), ``<arch>.gemm_efficiency.fp8``
- ``<arch>.attention_fwd_efficiency`` (backward and the FlashAttention-2 figures keep their ratio to it)
- ``<arch>.memory_efficiency``, ``<arch>.nvlink_efficiency``, ``<arch>.nic_efficiency``
- any float field of HardwareProfile named ``*_latency_s`` or ``*_overhead_s`` (none today)
- ``<framework>.cpu_dispatch_s`` (the launch floor) and any float field of FrameworkProfile named
  ``*_overhead_s`` (e.g. a per-micro-batch overhead, where a framework profile has one)

A parameter enters the fit only if the rows are sensitive to it (``|d log t / d log p| >= MIN_SENSITIVITY``
on at least ``MIN_ROWS`` rows); if more than 12 qualify, the 12 with the largest total sensitivity.
Every parameter is applied through the profile (``dataclasses.replace`` of the HardwareProfile; framework
figures through ``HardwareProfile.framework_params``, which the pricing applies to the job's
FrameworkProfile), never to a row.

How: Levenberg-Marquardt on ``r = log(predicted step time / measured step time)`` with a numerical
Jacobian (forward differences, only over the rows a parameter can move), a soft-L1 loss (iteratively
reweighted: weight ``1/sqrt(1 + (r/s)^2)``, ``s`` the data's noise: ``noise_scale``), box bounds (a step
is clipped into them), and a weak Gaussian prior that holds each parameter at its shipped value where
the rows say nothing (``PRIOR_SIGMA`` in log space; it weighs like one row off by ``s``).

Two stages (docs/calibrate.md says why): the hardware parameters first, with every framework parameter
at its shipped value (a framework the rows do not contain is priced with its shipped description, so
the hardware figures must hold under it); then the framework parameters, each moving only its
framework's rows, with the hardware fixed. Before both, ``screen_rows`` sets aside the rows the model
cannot price (beyond ``SCREEN_Z`` robust sd of their architecture's median at the shipped profile),
each with its reason in ``RunFit.excluded``. Log-scaled parameters
(positive bounds) are fitted in log space, the others linearly. Uncertainty: the standard deviation
from ``s^2 (J'WJ + prior)^-1`` with ``s^2`` the weighted residual variance.

Weights: every source group weighs the same in total (rows of one source share its systematic error),
scaled so the mean row weight is 1 (with one source, every row weighs 1).

Speed: pricing a row costs ~2 ms, the graph is built once per row; a fit re-prices only the rows a
parameter can move for its Jacobian column. A source group with more than ``MAX_ROWS_PER_GROUP`` rows
(vTrain's 1,440) is subsampled to that many, evenly spaced in file order, for the fit; judging always
uses every row.

Throughput metrics (tokens/s, TFLOP/s, MFU) are turned into step times with the model's own FLOP and
token counts (the same factor in the measured and the predicted value), so every row gives one log
error of step time. Peak memory rows are not fitted (nothing here changes memory).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable

import numpy as np

from ..constants import constant, value
from ..cost.profile import HardwareProfile, architecture_of
from ..errors import DataError
from ..schedule.batch import price_plan
from ..specs import TrainingJob
from ..specs.framework import get_framework
from ..workload.graph import build_graph
from .bands import scale_bucket  # noqa: F401 (defined beside the bands it buckets; a prediction needs only that)

MAX_PARAMS = 12
MIN_ROWS = 2                  # a parameter needs this many sensitive rows to be fitted
MIN_SENSITIVITY = 0.01        # |d log t / d log p| (or per unit of the bounded range) that counts as sensitive
F_SCALE = 0.05                # floor of the soft-L1 scale (the data's noise, ``noise_scale``): reporting
                              # precision and run-to-run variation of published step times are a few %
SCREEN_Z = 3.5                # modified z-score beyond which a row is screened out (Iglewicz & Hoaglin 1993)
MAD_TO_SD = 1.4826            # sd of a normal distribution per median absolute deviation
PRIOR_SIGMA = 0.5             # log-space width of the prior around the shipped value (a factor 1.65)
MAX_ROWS_PER_GROUP = 40       # rows of one source group used in a fit (evenly spaced)
MAX_ITER = 12
_STEP = 0.02                  # forward-difference step in the fitted coordinate

TIME_METRICS = ("iteration_time_s", "tflops_per_gpu", "mfu", "tokens_per_s_per_gpu")

# Bounds of the fitted parameters: (low, high, why), from clustertwin.constants ("calibrate.bounds.*",
# each with why it is where it is). A key starting "_" bounds every profile field ending so.
_BOUND_KEYS = ("gemm_efficiency", "attention_fwd_efficiency", "memory_efficiency", "nvlink_efficiency",
               "nic_efficiency", "cpu_dispatch_s", "_overhead_s", "_latency_s")
BOUNDS: dict[str, tuple[float, float, str]] = {
    key: (value(f"calibrate.bounds.{key.lstrip('_')}.low"), value(f"calibrate.bounds.{key.lstrip('_')}.high"),
          constant(f"calibrate.bounds.{key.lstrip('_')}.low").source.removeprefix("assumed: "))
    for key in _BOUND_KEYS
}


def source_group(source: str) -> str:
    """The group a CSV ``source`` belongs to for cross-validation: the text before the first comma,
    parenthesis, colon or semicolon (one publication, benchmark repository or table family), trimmed.
    E.g. "Narayanan et al. SC21 (Megatron-LM), Table 1" -> "Narayanan et al. SC21"."""
    head = re.split(r"[,(:;]", source or "", maxsplit=1)[0].strip()
    return head or "(no source)"


@dataclass
class FitRow:
    """One measured run as the fit sees it: its job, the step time it measured (throughputs turned
    into step times) and its source group."""
    run_id: str
    group: str
    job: TrainingJob
    measured_step_s: float
    throughput: bool = False      # the row measured a throughput (errors are reported on it, inverted)
    weight: float = 1.0
    file: str = ""

    @property
    def architecture(self) -> str:
        return architecture_of(self.job.cluster.gpu)

    @property
    def framework(self) -> str:
        return get_framework(self.job.framework).name

    def metric_error(self, predicted_step_s: float) -> float:
        """(predicted − measured) / measured of the metric the row measured."""
        ratio = predicted_step_s / self.measured_step_s
        return 1.0 / ratio - 1.0 if self.throughput else ratio - 1.0


@dataclass(frozen=True)
class FitParam:
    name: str                 # "<scope>.<field>", e.g. "hopper.gemm_efficiency.bf16", "megatron.cpu_dispatch_s"
    kind: str                 # "hardware" | "framework"
    scope: str                # the architecture or the framework name
    field: str                # the profile field ("gemm_efficiency.bf16": a key of the dtype dict)
    default: float
    lo: float
    hi: float
    tied: tuple[str, ...] = ()   # fields that keep their ratio to this one

    @property
    def log(self) -> bool:
        return self.lo > 0

    def to_x(self, v: float) -> float:
        return math.log(v) if self.log else v / self.hi

    def from_x(self, x: float) -> float:
        return math.exp(x) if self.log else x * self.hi

    @property
    def x_bounds(self) -> tuple[float, float]:
        return self.to_x(self.lo), self.to_x(self.hi)


def _bounds(name: str) -> tuple[float, float]:
    for key, (lo, hi, _) in BOUNDS.items():
        if name == key or (key.startswith("_") and name.endswith(key)):
            return lo, hi
    raise KeyError(name)


def _float_fields(obj: Any, suffixes: tuple[str, ...]) -> list[str]:
    return [f.name for f in fields(obj) if f.name.endswith(suffixes) and isinstance(getattr(obj, f.name), float)]


def _hw_get(p: HardwareProfile, fld: str) -> float | None:
    if fld.startswith("gemm_efficiency."):
        return p.gemm_efficiency.get(fld.split(".", 1)[1])
    v = getattr(p, fld, None)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def candidate_params(rows: list[FitRow], base: Callable[[Any], HardwareProfile]) -> list[FitParam]:
    """Every parameter these rows could constrain, in a fixed order (sensitivity decides later)."""
    out: list[FitParam] = []
    archs = Counter(r.architecture for r in rows)
    for arch, _ in sorted(archs.items(), key=lambda kv: (-kv[1], kv[0])):
        arch_rows = [r for r in rows if r.architecture == arch]
        gpu = Counter(r.job.cluster.gpu.name for r in arch_rows).most_common(1)[0][0]
        b = base(next(r.job.cluster.gpu for r in arch_rows if r.job.cluster.gpu.name == gpu))
        precisions = {r.job.plan.precision for r in arch_rows}
        specs: list[tuple[str, tuple[str, ...]]] = []
        if precisions & {"bf16", "fp16", "fp8"}:  # fp8 runs do their attention and some GEMMs in bf16
            specs.append(("gemm_efficiency.bf16", ("gemm_efficiency.fp16",) if "fp16" in b.gemm_efficiency else ()))
        if "fp8" in precisions:
            specs.append(("gemm_efficiency.fp8", ()))
        specs.append(("attention_fwd_efficiency", tuple(f for f in ("attention_bwd_efficiency",
                                                                    "attention_fa2_fwd_efficiency",
                                                                    "attention_fa2_bwd_efficiency")
                                                        if _hw_get(b, f) is not None)))
        specs += [(f, ()) for f in ("memory_efficiency", "nvlink_efficiency", "nic_efficiency")]
        specs += [(f, ()) for f in _float_fields(b, ("_latency_s", "_overhead_s"))]
        for fld, tied in specs:
            v = _hw_get(b, fld)
            if v is None:
                continue
            lo, hi = _bounds(fld.split(".")[0])
            out.append(FitParam(f"{arch}.{fld}", "hardware", arch, fld, v, lo, hi, tied))
    for fw_name in sorted({r.framework for r in rows}):
        fw = get_framework(fw_name)
        for fld in ["cpu_dispatch_s"] + _float_fields(fw, ("_overhead_s",)):
            v = getattr(fw, fld, None)
            if not isinstance(v, float):
                continue
            lo, hi = _bounds(fld)
            out.append(FitParam(f"{fw_name}.{fld}", "framework", fw_name, fld, v, lo, hi))
    return out


def apply_params(base: HardwareProfile, params: Iterable[FitParam], values: Iterable[float],
                 arch: str | None = None) -> HardwareProfile:
    """``base`` with the fitted values: hardware parameters of ``arch`` (default: every one given) by
    ``replace``, framework parameters into ``framework_params``."""
    hw: dict[str, Any] = {}
    gemm = dict(base.gemm_efficiency)
    fw: dict[str, dict[str, float]] = {k: dict(v) for k, v in base.framework_params.items()}
    for p, v in zip(params, values):
        if p.kind == "framework":
            fw.setdefault(p.scope, {})[p.field] = float(v)
            continue
        if arch is not None and p.scope != arch:
            continue
        ratio = v / p.default if p.default else 1.0
        for fld, new in [(p.field, float(v))] + [(t, None) for t in p.tied]:
            cur = _hw_get(base, fld)
            if cur is None:
                continue
            if new is None:                  # a tied field keeps its ratio to the fitted one
                new = cur * ratio
            if fld.startswith("gemm_efficiency."):
                gemm[fld.split(".", 1)[1]] = min(1.0, new)
            else:
                hw[fld] = min(1.0, new) if fld.endswith("efficiency") else new
    return replace(base, gemm_efficiency=gemm, framework_params=fw, **hw)


def _soft_l1(z: np.ndarray) -> np.ndarray:
    return 2.0 * (np.sqrt(1.0 + z * z) - 1.0)


@dataclass
class ParamResult:
    param: FitParam
    value: float
    sd: float                 # one standard deviation, in the parameter's unit
    at_bound: bool

    def to_json(self) -> dict[str, Any]:
        p = self.param
        return {"name": p.name, "kind": p.kind, "scope": p.scope, "field": p.field, "value": self.value,
                "default": p.default, "bounds": [p.lo, p.hi], "sd": self.sd, "at_bound": self.at_bound,
                "tied": list(p.tied)}


@dataclass
class RunFit:
    """A calibration: the fitted parameters, the rows it used, and how it predicts them."""
    params: list[ParamResult]
    rows: list[FitRow]                         # the rows fitted (after subsampling)
    base: Callable[[Any], HardwareProfile]
    errors: list[float] = field(default_factory=list)          # in-sample metric errors, per fitted row
    unconstrained: list[str] = field(default_factory=list)     # candidates the rows say nothing about
    dropped: list[str] = field(default_factory=list)           # sensitive, but beyond MAX_PARAMS
    iterations: int = 0
    evaluations: int = 0
    excluded: list[tuple[FitRow, str]] = field(default_factory=list)   # screened out (``screen_rows``), why
    noise_scale: float = F_SCALE                                       # the soft-L1 scale the fit used

    @property
    def groups(self) -> set[str]:
        return {r.group for r in self.rows}

    def profile_for(self, gpu) -> HardwareProfile:
        """The profile pricing uses for ``gpu`` under this calibration."""
        return apply_params(self.base(gpu), [p.param for p in self.params], [p.value for p in self.params],
                            architecture_of(gpu))

    @property
    def mape(self) -> float:
        return float(np.mean(np.abs(self.errors))) if self.errors else float("nan")

    def hardware_values(self, arch: str) -> dict[str, float]:
        """Hardware fields of ``arch`` after the fit (fitted ones and their tied fields)."""
        gpu_rows = [r for r in self.rows if r.architecture == arch]
        if not gpu_rows:
            return {}
        gpu = gpu_rows[0].job.cluster.gpu
        prof = self.profile_for(gpu)
        out: dict[str, float] = {}
        for pr in self.params:
            if pr.param.kind == "hardware" and pr.param.scope == arch:
                for fld in (pr.param.field, *pr.param.tied):
                    v = _hw_get(prof, fld)
                    if v is not None:
                        out[fld] = v
        return out

    def framework_values(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for pr in self.params:
            if pr.param.kind == "framework":
                out.setdefault(pr.param.scope, {})[pr.param.field] = pr.value
        return out


class _Pricer:
    """Prices FitRows under parameter values; the graph (and the resolved plan) is built once per row."""

    def __init__(self, rows: list[FitRow], base: Callable[[Any], HardwareProfile]):
        self.rows = rows
        self.base = base
        self.plans = [build_graph(r.job).plan for r in rows]
        self.log_meas = np.log([r.measured_step_s for r in rows])
        self.evaluations = 0

    def log_times(self, params: list[FitParam], values: list[float], idx: Iterable[int] | None = None) -> np.ndarray:
        idx = range(len(self.rows)) if idx is None else idx
        profiles: dict[str, HardwareProfile] = {}
        out = []
        for i in idx:
            job = self.rows[i].job
            gpu = job.cluster.gpu
            if gpu.name not in profiles:
                profiles[gpu.name] = apply_params(self.base(gpu), params, values, architecture_of(gpu))
            step, _ = price_plan(self.plans[i], job.model, job.cluster, job.seq_len, job.framework, profiles[gpu.name])
            out.append(math.log(step.step_time_s))
            self.evaluations += 1
        return np.asarray(out, dtype=float)

    def affected(self, p: FitParam) -> list[int]:
        if p.kind == "hardware":
            return [i for i, r in enumerate(self.rows) if r.architecture == p.scope]
        return [i for i, r in enumerate(self.rows) if r.framework == p.scope]


def subsample(rows: list[FitRow], per_group: int = MAX_ROWS_PER_GROUP) -> list[FitRow]:
    """At most ``per_group`` rows of each source group, evenly spaced in their order, weighted so that
    each group weighs the same in total (``group_weights``)."""
    by: dict[str, list[FitRow]] = {}
    for r in rows:
        by.setdefault(r.group, []).append(r)
    kept = [rs if len(rs) <= per_group else [rs[int(k * len(rs) / per_group)] for k in range(per_group)]
            for rs in by.values()]
    return group_weights([r for rs in kept for r in rs])


def group_weights(rows: list[FitRow], base: list[float] | None = None) -> list[FitRow]:
    """``rows`` weighted so that every source group weighs the same in total (its rows share one
    systematic error: a new source is what cross-validation asks about), scaled so that the mean row
    weight is 1 against the prior. ``base``: the rows' weights before (default their ``weight``)."""
    base = [r.weight for r in rows] if base is None else base
    n_of = Counter(r.group for r in rows)
    n, g = len(rows), len(n_of)
    return [replace(r, weight=b * n / (g * n_of[r.group])) for r, b in zip(rows, base)]


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(v)
    cw = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cw, 0.5 * cw[-1])])


def noise_scale(rows: list[FitRow], r: np.ndarray) -> tuple[float, np.ndarray]:
    """The data's noise in log step time: the robust sd (``MAD_TO_SD`` × weighted median absolute
    deviation) of the rows' log errors ``r`` about the weighted median of their GPU architecture's rows,
    floored at ``F_SCALE``; and each row's deviation from its architecture's median."""
    w = np.array([x.weight for x in rows], dtype=float)
    dev = np.zeros(len(rows))
    for arch in {x.architecture for x in rows}:
        idx = np.array([i for i, x in enumerate(rows) if x.architecture == arch])
        dev[idx] = r[idx] - _weighted_median(r[idx], w[idx])
    return max(F_SCALE, MAD_TO_SD * _weighted_median(np.abs(dev), w)), dev


def screen_rows(rows: list[FitRow], r: np.ndarray) -> tuple[list[int], list[tuple[FitRow, str]], float]:
    """Rows the model cannot price: log error at the shipped profile ``r`` more than ``SCREEN_Z`` robust
    sd (``noise_scale``) from the median of the rows of the same GPU architecture (the modified z-score
    rule, Iglewicz & Hoaglin 1993). Returns (indices kept, [(row, reason)] screened out, the noise scale)."""
    s, dev = noise_scale(rows, r)
    keep, out = [], []
    for i, row in enumerate(rows):
        if abs(dev[i]) > SCREEN_Z * s:
            out.append((row, f"log step-time error {r[i]:+.2f} at the shipped profile, {abs(dev[i]) / s:.1f} robust sd "
                             f"(sd {s:.3f}) from the median of the {row.architecture} rows (beyond {SCREEN_Z:g}): an "
                             f"effect no profile parameter describes; not fitted"))
        else:
            keep.append(i)
    return keep, out, s


def _jacobian(pricer: _Pricer, params: list[FitParam], x: np.ndarray, lt: np.ndarray,
              cols: Iterable[int] | None = None) -> np.ndarray:
    n, k = len(pricer.rows), len(params)
    J = np.zeros((n, k))
    for j in (range(k) if cols is None else cols):
        p = params[j]
        idx = pricer.affected(p)
        if not idx:
            continue
        lo, hi = p.x_bounds
        h = _STEP if x[j] + _STEP <= hi else -_STEP
        xs = x.copy()
        xs[j] = min(hi, max(lo, x[j] + h))
        vals = [q.from_x(v) for q, v in zip(params, xs)]
        J[idx, j] = (pricer.log_times(params, vals, idx) - lt[idx]) / h
    return J


@dataclass
class _Stage:
    x: np.ndarray
    lt: np.ndarray
    sd_x: np.ndarray
    at_bound: np.ndarray
    iterations: int


def _levenberg_marquardt(pricer: _Pricer, cands: list[FitParam], x: np.ndarray, lt: np.ndarray, free: list[int],
                         x0: np.ndarray, prior_w: np.ndarray, w_row: np.ndarray, scale: float, max_iter: int) -> _Stage:
    """Minimise the soft-L1 cost (scale ``scale``) plus the prior over the parameters ``free`` (the others
    stay at ``x``); the standard deviations of the free ones from ``s^2 (J'WJ + prior)^-1``."""
    lo = np.array([p.x_bounds[0] for p in cands])
    hi = np.array([p.x_bounds[1] for p in cands])
    f = np.array(free, dtype=int)
    pw = prior_w[f]

    def vals(xx: np.ndarray) -> list[float]:
        return [p.from_x(v) for p, v in zip(cands, xx)]

    def cost(rr: np.ndarray, xx: np.ndarray) -> float:
        rp = pw * (xx[f] - x0[f])
        return float(np.sum(w_row * scale ** 2 * _soft_l1(rr / scale)) + np.sum(rp * rp))

    x = x.copy()
    r = lt - pricer.log_meas
    c = cost(r, x)
    lam = 1e-3
    it = 0
    A = np.eye(len(f))
    for it in range(1, max_iter + 1):
        J = _jacobian(pricer, cands, x, lt, free)[:, f]
        w = w_row / np.sqrt(1.0 + (r / scale) ** 2)          # IRLS weights of the soft-L1 loss
        A = J.T @ (w[:, None] * J) + np.diag(pw ** 2)
        g = J.T @ (w * r) + pw ** 2 * (x[f] - x0[f])
        improved = done = False
        for _ in range(8):
            x_new = x.copy()
            x_new[f] = np.clip(x[f] - np.linalg.solve(A + lam * np.diag(np.diag(A)), g), lo[f], hi[f])
            lt_new = pricer.log_times(cands, vals(x_new))
            r_new = lt_new - pricer.log_meas
            c_new = cost(r_new, x_new)
            if c_new < c:
                improved = True
                done = np.max(np.abs(x_new - x)) < 1e-3 or (c - c_new) < 1e-6 * max(c, 1e-12)
                x, lt, r, c = x_new, lt_new, r_new, c_new
                lam = max(lam / 3.0, 1e-7)
                break
            lam *= 4.0
        if not improved or done:
            break
    # uncertainty: s^2 (J'WJ + prior)^-1 on the free parameters not at a bound
    w = w_row / np.sqrt(1.0 + (r / scale) ** 2)
    dof = max(1, len(r) - len(f))
    s2 = float(np.sum(w * r * r) / dof)
    at_bound = np.isclose(x, lo, atol=1e-6) | np.isclose(x, hi, atol=1e-6)
    sd_x = np.full(len(cands), float("nan"))
    ok = ~at_bound[f]
    if ok.any():
        try:
            cov = s2 * np.linalg.inv(A[np.ix_(ok, ok)])
            sd_x[f[ok]] = np.sqrt(np.maximum(np.diag(cov), 0.0))
        except np.linalg.LinAlgError:
            pass
    return _Stage(x, lt, sd_x, at_bound, it)


def fit_runs(rows: list[FitRow], base: Callable[[Any], HardwareProfile] | None = None, *,
             params: list[FitParam] | None = None, max_params: int = MAX_PARAMS,
             per_group: int = MAX_ROWS_PER_GROUP, max_iter: int = MAX_ITER,
             prior_sigma: float | None = PRIOR_SIGMA, screen: bool = True) -> RunFit:
    """Fit the profile's parameters to ``rows`` (robust least squares on log step time): rows the model
    cannot price screened out (``screen_rows``; ``screen=False``: none), hardware parameters first with
    every framework as shipped, then each framework's parameters on its rows with the hardware fixed.
    ``params``: fit exactly these (default: ``candidate_params`` the rows are sensitive to);
    ``prior_sigma=None``: no prior."""
    if base is None:
        from .profile import profile_for
        base = profile_for
    if not rows:
        raise DataError("runs", "no measured step time or throughput to calibrate on",
                        "give rows in the validation schema with a time or throughput metric")
    rows = subsample(rows, per_group)
    cands = params if params is not None else candidate_params(rows, base)
    vals0 = [p.default for p in cands]
    excluded: list[tuple[FitRow, str]] = []
    scale = F_SCALE
    if screen and len(rows) > 2:
        lt_ship = _Pricer(rows, base).log_times(cands, vals0)
        keep, excluded, _ = screen_rows(rows, lt_ship - np.log([r.measured_step_s for r in rows]))
        if excluded:   # the remaining rows of a source still weigh as much as another source's
            rows = group_weights([rows[i] for i in keep], [1.0] * len(keep))
    pricer = _Pricer(rows, base)
    x0 = np.array([p.to_x(p.default) for p in cands], dtype=float)
    lt0 = pricer.log_times(cands, vals0)
    if len(rows) > 2:
        scale = noise_scale(rows, lt0 - pricer.log_meas)[0]
    unconstrained: list[str] = []
    dropped: list[str] = []
    if params is None:   # keep the parameters the rows are sensitive to, the most sensitive first
        J0 = _jacobian(pricer, cands, x0, lt0)
        sens = np.abs(J0)
        ok = (sens >= MIN_SENSITIVITY).sum(axis=0) >= min(MIN_ROWS, len(rows))
        order = sorted((j for j in range(len(cands)) if ok[j]), key=lambda j: -sens[:, j].sum())
        keep_p = sorted(order[:max_params])
        unconstrained = [cands[j].name for j in range(len(cands)) if not ok[j]]
        dropped = [cands[j].name for j in order[max_params:]]
        cands = [cands[j] for j in keep_p]
        x0 = x0[keep_p]
    k = len(cands)
    w_row = np.array([r.weight for r in rows], dtype=float)
    if k == 0:
        errs = [r.metric_error(math.exp(v)) for r, v in zip(rows, lt0)]
        return RunFit([], rows, base, errs, unconstrained, dropped, 0, pricer.evaluations, excluded, scale)
    lo = np.array([p.x_bounds[0] for p in cands])
    hi = np.array([p.x_bounds[1] for p in cands])
    x0 = np.clip(x0, lo, hi)
    if prior_sigma is None:
        prior_w = np.zeros(k)
    else:   # a prior residual of one sigma weighs like a row off by the noise scale
        prior_w = scale / np.array([prior_sigma if p.log else 0.5 for p in cands])
    x, lt = x0.copy(), pricer.log_times(cands, [p.from_x(v) for p, v in zip(cands, x0)])
    sd_x = np.full(k, float("nan"))
    at_bound = np.zeros(k, dtype=bool)
    iterations = 0
    # stage 1: the hardware parameters, every framework as shipped; stage 2: the framework parameters
    for kind in ("hardware", "framework"):
        free = [j for j, p in enumerate(cands) if p.kind == kind]
        if not free:
            continue
        st = _levenberg_marquardt(pricer, cands, x, lt, free, x0, prior_w, w_row, scale, max_iter)
        x, lt = st.x, st.lt
        sd_x[free], at_bound[free] = st.sd_x[free], st.at_bound[free]
        iterations += st.iterations
    results = []
    for p, xv, sd, ab in zip(cands, x, sd_x, at_bound):
        v = p.from_x(float(xv))
        results.append(ParamResult(p, v, float(v * sd if p.log else sd * p.hi), bool(ab)))
    errs = [row.metric_error(math.exp(v)) for row, v in zip(rows, lt)]
    return RunFit(results, rows, base, errs, unconstrained, dropped, iterations, pricer.evaluations, excluded, scale)


def predict_rows(fit: RunFit | None, rows: list[FitRow], base: Callable[[Any], HardwareProfile] | None = None
                 ) -> list[float]:
    """Predicted step times of ``rows`` under ``fit`` (the shipped profile without one)."""
    if base is None:
        from .profile import profile_for
        base = profile_for
    out = []
    cache: dict[str, HardwareProfile] = {}
    for r in rows:
        gpu = r.job.cluster.gpu
        if gpu.name not in cache:
            cache[gpu.name] = fit.profile_for(gpu) if fit is not None else base(gpu)
        j = r.job
        step, _ = price_plan(build_graph(j).plan, j.model, j.cluster, j.seq_len, j.framework, cache[gpu.name])
        out.append(step.step_time_s)
    return out


@dataclass
class FoldResult:
    group: str
    n_rows: int
    n_train: int
    errors: list[float]           # out-of-sample metric errors of the held-out rows
    params: list[ParamResult]

    @property
    def mape(self) -> float:
        return float(np.mean(np.abs(self.errors))) if self.errors else float("nan")


def folds_of(rows: list[FitRow], min_groups: int = 3, k: int = 5) -> list[tuple[str, list[int]]]:
    """The held-out sets: one per source group; with fewer than ``min_groups`` groups, ``k`` folds of
    rows (every k-th row), named "fold i/k"."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.group, []).append(i)
    if len(groups) >= min_groups:
        return list(groups.items())
    k = max(2, min(k, len(rows)))
    return [(f"fold {j + 1}/{k}", list(range(j, len(rows), k))) for j in range(k)]


def cross_validate_fit(rows: list[FitRow], base: Callable[[Any], HardwareProfile] | None = None,
                       on_fold: Callable[[str, set[str]], None] | None = None, **kw: Any) -> list[FoldResult]:
    """Leave-one-source-out (or k-fold, see ``folds_of``): fit on the other rows, judge the held-out ones.
    ``on_fold(held_out_group, groups_trained_on)`` is called for every fold (tests check the two never meet)."""
    out = []
    for name, held in folds_of(rows):
        held_set = set(held)
        train = [r for i, r in enumerate(rows) if i not in held_set]
        test = [rows[i] for i in held]
        if name in {r.group for r in test}:   # leave-one-source-out: no row of the held-out source in the fit
            train = [r for r in train if r.group != name]
            assert all(r.group != name for r in train), "cross-validation trained on the held-out source"
        fit = fit_runs(train, base, **kw) if train else None
        if on_fold is not None:
            on_fold(name, fit.groups if fit is not None else set())
        pred = predict_rows(fit, test, base)
        out.append(FoldResult(name, len(test), len(fit.rows) if fit else 0,
                              [r.metric_error(t) for r, t in zip(test, pred)], fit.params if fit else []))
    return out


FIT_METHOD = (f"robust least squares on log step time (soft-L1, scale the data's robust sd, at least {F_SCALE}), "
              f"Levenberg-Marquardt, prior sigma {PRIOR_SIGMA} (log) around the shipped values; rows beyond "
              f"{SCREEN_Z} robust sd of their GPU architecture's median not fitted; hardware parameters first "
              f"with every framework as shipped, then each framework's parameters on its rows")


def fit_to_profile(fit: RunFit, gpu, files: list[str], cv: list[FoldResult] | None = None) -> Any:
    """The profile file (a version-2 MeasuredProfile holding only ``fitted``) of ``fit`` for catalog GPU
    ``gpu``: the hardware parameters of its architecture, every framework parameter."""
    from .profile import MeasuredProfile, today
    arch = architecture_of(gpu)
    hw = {k: _sig(v) for k, v in fit.hardware_values(arch).items()}
    cv_errors = [e for f in cv for e in f.errors] if cv else []
    fitted: dict[str, Any] = {
        "method": FIT_METHOD, "runs": list(files), "n_rows": len(fit.rows), "architecture": arch,
        "hardware": hw, "framework": {f: {k: _sig(v) for k, v in d.items()} for f, d in fit.framework_values().items()},
        "parameters": [p.to_json() for p in fit.params],
        "error": {"in_sample_mape": fit.mape,
                  **({"cv_mape": float(np.mean(np.abs(cv_errors))), "cv": cv_label(cv)} if cv_errors else {})},
    }
    measured = sorted({f"fitted.{k}" for k in hw} | {f"fitted.{fw}.{k}" for fw, d in fitted["framework"].items()
                                                      for k in d})
    return MeasuredProfile(gpu=gpu.name, date=today(), measured=measured, fitted=fitted,
                           source=f"clustertwin calibrate --from-runs {' '.join(files)} ({len(fit.rows)} runs)")


def _sig(v: float, digits: int = 4) -> float:
    return float(f"{v:.{digits}g}")


def cv_label(folds: list[FoldResult] | None) -> str:
    if not folds:
        return ""
    return "k-fold over rows" if folds[0].group.startswith("fold ") else "leave-one-source-out"
