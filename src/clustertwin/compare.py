"""compare: two to eight plans, or clusters, side by side on the same job, with each one's difference
from the first (the baseline).

One thing varies: the plan (on one cluster) or the cluster (under one plan); everything else is the
job every command describes (clustertwin.jobs), and every row is predict's prediction. The global
batch is the same in every row: the one given, else the one a plan names, else the default job's
(256 sequences), so that plans compare at equal work per step; plans naming different ones are refused.

>>> c = compare(JobOptions(model="gpt3-125m", gpu="a100-80gb", num_gpus=8, seq_len=1024),
...             plans=["tp=1,dp=8", "tp=2,dp=4"])
>>> [r.label for r in c.rows], c.rows[0].job.plan.global_batch == c.rows[1].job.plan.global_batch == 256
(['tp=1,dp=8', 'tp=2,dp=4'], True)
>>> c.rows[0].delta("step_time_s")
0.0
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from .errors import SpecError
from .jobs import DEFAULT_GLOBAL_BATCH, JobOptions, job_from_options
from .predict import Prediction, predict_job
from .specs import Plan, TrainingJob, parse_plan

MIN_ROWS, MAX_ROWS = 2, 8
# the metrics of a row, each compared with the baseline's as a relative difference
METRICS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_per_gpu_bytes")


@dataclass
class CompareRow:
    """One plan or cluster of a comparison, predicted; ``base``: the baseline row's prediction."""

    label: str
    prediction: Prediction
    base: Prediction

    @property
    def job(self) -> TrainingJob:
        return self.prediction.job

    def value(self, metric: str, p: Prediction | None = None) -> float:
        p = p or self.prediction
        return {"step_time_s": p.step_time_s, "tokens_per_s": p.tokens_per_s,
                "tokens_per_s_per_gpu": p.tokens_per_s / p.job.cluster.num_gpus, "mfu": p.mfu,
                "memory_per_gpu_bytes": float(p.memory.total_bytes)}[metric]

    def delta(self, metric: str) -> float:
        """(this - baseline) / baseline of ``metric`` (one of METRICS): 0.0 on the baseline row."""
        b = self.value(metric, self.base)
        return (self.value(metric) - b) / b if b else 0.0

    def to_json(self) -> dict[str, Any]:
        from .search.tuner import bottleneck, plan_text
        p, c = self.prediction, self.prediction.job.cluster
        return {"label": self.label, "plan": p.graph.plan.model_dump(), "plan_text": plan_text(p),
                "cluster": c.name, "gpu": c.gpu.name, "num_gpus": c.num_gpus,
                "global_batch": p.graph.plan.global_batch, "seq_len": p.job.seq_len,
                **{m: self.value(m) for m in METRICS}, "fits": p.fits, "hbm_bytes": float(p.memory.capacity_bytes),
                "breakdown_s": dict(p.breakdown_s), "bottleneck": bottleneck(p),
                "delta": {m: self.delta(m) for m in METRICS}}


@dataclass
class Comparison:
    """The rows of a comparison; ``varies``: "plan" or "cluster"; the first row is the baseline."""

    varies: str
    rows: list[CompareRow]

    baseline = 0

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "varies": self.varies, "baseline": self.baseline, "rows": [r.to_json() for r in self.rows]}

    def __str__(self) -> str:
        lines = [f"Comparison of {len(self.rows)} {self.varies}s (baseline: {self.rows[0].label})"]
        for r in self.rows:
            p = r.prediction
            lines.append(f"  {r.label}: step {p.step_time_s:.4g} s ({r.delta('step_time_s') * 100:+.1f}%), "
                         f"MFU {p.mfu * 100:.1f}%, {'fits' if p.fits else 'does NOT fit'}")
        return "\n".join(lines)


def compare(options: JobOptions, *, plans: Sequence[str | Plan] = (), clusters: Sequence[str] = (),
            gpus: Sequence[str] = ()) -> Comparison:
    """Predict ``options``' job under each of ``plans`` (on its cluster), or on each of ``clusters``
    then ``gpus`` (under its plan): MIN_ROWS to MAX_ROWS of them, the first the baseline."""
    plans, clusters, gpus = list(plans), list(clusters), list(gpus)
    machines = [("cluster", c) for c in clusters] + [("gpu", g) for g in gpus]
    if len(plans) > 1 and len(machines) > 1:
        raise SpecError("compare", "both the plan and the cluster vary",
                        "compare one at a time: several --plan on one cluster, or several --cluster/--gpu under one plan")
    if len(plans) > 1:
        varies = "plan"
        if machines:    # one cluster or GPU, given with the plans
            options = replace(options, **{machines[0][0]: machines[0][1]})
        variants = [(_plan_label(p), replace(options, plan=p)) for p in plans]
    else:
        varies = "cluster"
        if plans:
            options = replace(options, plan=plans[0])
        variants = [(str(v), replace(options, cluster=v if kind == "cluster" else None,
                                     gpu=v if kind == "gpu" else None)) for kind, v in machines]
    if not (MIN_ROWS <= len(variants) <= MAX_ROWS):
        n, what = (len(plans), "plan") if len(plans) >= len(machines) else (len(machines), "cluster or GPU")
        raise SpecError("compare", f"{n} {what}{'s' if n != 1 else ''} given; compare takes {MIN_ROWS} to {MAX_ROWS}",
                        'repeat --plan (e.g. --plan "tp=8" --plan "tp=4,pp=2") or --cluster/--gpu')
    gb = _global_batch(options, [o.plan for _, o in variants])
    preds = [predict_job(job_from_options(replace(o, global_batch=gb))) for _, o in variants]
    return Comparison(varies, [CompareRow(label, p, preds[0]) for (label, _), p in zip(variants, preds)])


def _plan_label(plan: str | Plan) -> str:
    return plan.short() if isinstance(plan, Plan) else " ".join(str(plan).split())


def _global_batch(options: JobOptions, plans: list) -> int:
    """The one global batch of every row: the one given, else the one the plans name (they must
    agree), else the default job's."""
    if options.global_batch is not None:
        return options.global_batch
    named = {}
    for p in plans:
        plan = p if isinstance(p, Plan) else parse_plan(p) if p is not None else None
        if plan is not None and "global_batch" in plan.model_fields_set:
            named.setdefault(plan.global_batch, _plan_label(p))
    if len(named) > 1:
        raise SpecError("global_batch", "the plans name different global batches ("
                        + ", ".join(f"{gb} in {label}" for gb, label in named.items()) + ")",
                        "give --global-batch: plans compare at the same batch")
    return next(iter(named), DEFAULT_GLOBAL_BATCH)


__all__ = ["compare", "Comparison", "CompareRow", "METRICS", "MIN_ROWS", "MAX_ROWS"]
