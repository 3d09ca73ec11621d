"""Search: enumerate the plans of a job, price them all, rank them, say what limits the best, and
show the trade-off between step time and the GPUs (or money) spent.

>>> from clustertwin.search import search
>>> r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=64, seq_len=2048, top=3, pareto_points=1)
>>> len(r.plans), r.plans[0].prediction.fits, r.evaluated == r.feasible + sum(r.pruned.values())
(3, True, True)

Objectives: ``time`` ranks by step time; ``cost`` by the expected cost of the run (time to train
x GPUs x price per GPU-hour; per step without ``tokens``) over every GPU count of the Pareto view,
so the cheapest plan may use fewer GPUs than offered; ``goodput`` by the expected time to train
from ``clustertwin.reliability`` (failures, checkpoints, restarts), for which ``tokens`` is needed.
Cost and goodput re-rank a shortlist of the fastest plans (``shortlist`` per GPU count): a plan
outside it would have to lose more to failures than its step time gains.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..catalog import load_model
from ..calibrate.profile import profile_for
from ..errors import PlanError, SpecError
from ..predict import Prediction, predict_job, resolve_cluster
from ..specs import ClusterSpec, ModelSpec, Plan, make_job
from ..units import format_duration
from ..schedule.batch import BatchPricer, Candidate
from .space import PRUNE_REASONS, SearchSpace, make_space

OBJECTIVES = ("time", "cost", "goodput")
SECONDS_PER_HOUR = 3600.0


@dataclass
class RankedPlan:
    rank: int
    prediction: Prediction
    bottleneck: str
    cost_usd: float | None = None
    time_to_train_s: float | None = None      # expected (goodput) or steps x step time
    goodput: float | None = None
    ideal_time_to_train_s: float | None = None     # steps x the step at the mean GPU speed (with --tokens)
    expected_time_to_train_s: float | None = None  # with failures, checkpoints, restarts (cost, goodput)
    policy: str | None = None                      # the resilience policy priced (goodput_options["policy"])

    @property
    def num_gpus(self) -> int:
        return self.prediction.job.cluster.num_gpus

    @property
    def plan(self) -> Plan:
        """The plan (a specs.Plan: pass it to predict or make_training_job as ``plan=``)."""
        return self.prediction.graph.plan

    @property
    def bottleneck_tag(self) -> str:
        """What limits the plan in a few words (bottleneck_tag), for a table's cell."""
        return bottleneck_tag(self.prediction)

    def line(self) -> str:
        """The plan in one line: rank, plan, GPUs, step, MFU, memory, the objective's figures, what limits it."""
        p = self.prediction
        extra = "".join(f", {name} {fmt(v)}" for name, v, fmt in (
            ("time to train", self.time_to_train_s, format_duration), ("goodput", self.goodput, _pct),
            ("cost", self.cost_usd, lambda c: f"${c:,.0f}")) if v is not None)
        return (f"#{self.rank} {plan_text(p)} on {self.num_gpus:,} GPUs: step {format_duration(p.step_time_s)}, "
                f"MFU {p.mfu * 100:.1f}%, memory {p.memory.total_bytes / 2**30:,.1f} GiB{extra} "
                f"[{self.bottleneck_tag}]")

    def __str__(self) -> str:
        return f"{self.line()}\n  bottleneck: {self.bottleneck}"

    def __repr__(self) -> str:
        return (f"RankedPlan(rank={self.rank}, plan={plan_text(self.prediction)!r}, num_gpus={self.num_gpus}, "
                f"step_time_s={self.prediction.step_time_s:.4g}, bottleneck_tag={self.bottleneck_tag!r})")

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        mem = {k: float(v) for k, v in p.memory.breakdown_bytes.items()}
        mem["total"] = float(p.memory.total_bytes)
        d: dict[str, Any] = {
            "rank": self.rank, "plan": p.graph.plan.model_dump(), "plan_text": plan_text(p), "num_gpus": self.num_gpus,
            "step_time_s": p.step_time_s, "mfu": p.mfu, "tflops_per_gpu": p.tflops_per_gpu,
            "tokens_per_s": p.tokens_per_s, "memory_per_gpu_bytes": mem, "hbm_bytes": float(p.memory.capacity_bytes),
            "breakdown_s": dict(p.breakdown_s), "bottleneck": self.bottleneck,
        }
        for k in ("cost_usd", "time_to_train_s", "goodput", "ideal_time_to_train_s", "expected_time_to_train_s",
                  "policy"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d


@dataclass
class ParetoPoint:
    num_gpus: int
    plan: RankedPlan | None        # the fastest plan at this size (None: nothing fits)
    evaluated: int
    feasible: int
    elapsed_s: float
    on_front: bool = False

    @property
    def gpu_hours_per_step(self) -> float | None:
        return None if self.plan is None else self.plan.prediction.step_time_s * self.num_gpus / SECONDS_PER_HOUR

    def cost_per_step_usd(self, gpu_hour_price: float) -> float | None:
        """USD per step at ``gpu_hour_price`` per GPU-hour (None: nothing fits at this size)."""
        h = self.gpu_hours_per_step
        return None if h is None else h * gpu_hour_price

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"num_gpus": self.num_gpus, "evaluated": self.evaluated, "feasible": self.feasible,
                             "elapsed_s": self.elapsed_s, "on_front": self.on_front}
        if self.plan is not None:
            p = self.plan.prediction
            d.update(plan_text=plan_text(p), step_time_s=p.step_time_s, mfu=p.mfu,
                     gpu_hours_per_step=self.gpu_hours_per_step)
            for k in ("cost_usd", "time_to_train_s"):
                if getattr(self.plan, k) is not None:
                    d[k] = getattr(self.plan, k)
        return d


@dataclass
class SearchResult:
    space: SearchSpace
    objective: str
    evaluated: int
    feasible: int
    pruned: dict[str, int]
    elapsed_s: float
    plans: list[RankedPlan]
    pareto: list[ParetoPoint] = field(default_factory=list)
    shape_classes: int = 0
    tokens: float | None = None
    gpu_hour_price: float | None = None
    cost_basis: str | None = None

    @property
    def ranked_by(self) -> str:
        """What the plans are ranked by, in words (the goodput objective ranks by the expected time to
        train, which the goodput fraction alone cannot: a slow plan that loses little to failures
        has a high goodput)."""
        if self.objective == "goodput":
            return "expected time to train (with failures, checkpoints, restarts)"
        if self.objective == "cost":
            return {"expected_time_to_train": "expected cost of the run (with failures)",
                    "steps_x_step_time": "cost of the run (steps x step time)"}.get(self.cost_basis or "",
                                                                                     "cost per step")
        return "step time"

    @property
    def plans_per_s(self) -> float:
        return self.evaluated / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    @property
    def best(self) -> RankedPlan:
        """The first of ``plans``."""
        return self.plans[0]

    def __str__(self) -> str:
        s = self.space
        lines = [f"SearchResult: {s.model.name} on {s.num_gpus:,} x {s.cluster.gpu.name}, global batch "
                 f"{s.global_batch}, seq {s.seq_len}, objective {self.objective}: {self.evaluated:,} plans "
                 f"evaluated, {self.feasible:,} fit, in {self.elapsed_s:.2f} s"]
        lines += ["  " + p.line() for p in self.plans[:3]]
        if len(self.plans) > 3:
            lines.append(f"  ... {len(self.plans) - 3} more in .plans; .to_json() for everything")
        return "\n".join(lines)

    def __repr__(self) -> str:
        s = self.space
        return (f"SearchResult(model={s.model.name!r}, num_gpus={s.num_gpus}, objective={self.objective!r}, "
                f"evaluated={self.evaluated}, feasible={self.feasible}, plans=[{len(self.plans)} RankedPlan], "
                f"best={plan_text(self.plans[0].prediction) if self.plans else None!r})")

    def to_json(self) -> dict[str, Any]:
        s = self.space
        return {
            "schema": 1, "objective": self.objective, "ranked_by": self.ranked_by, "evaluated": self.evaluated, "feasible": self.feasible,
            "pruned": dict(self.pruned), "elapsed_s": self.elapsed_s, "shape_classes": self.shape_classes,
            "plans": [p.to_json() for p in self.plans],
            "pareto": [p.to_json() for p in self.pareto],
            "inputs": {"model": s.model.name, "cluster": s.cluster.name, "gpu": s.cluster.gpu.name,
                       "num_gpus": s.num_gpus, "global_batch": s.global_batch, "seq_len": s.seq_len,
                       "precision": s.precision, "framework": s.framework, "fixed": dict(s.fixed),
                       "max_memory_fraction": s.max_memory_fraction, "tokens": self.tokens,
                       "gpu_hour_price": self.gpu_hour_price, "cost_basis": self.cost_basis},
        }


def plan_text(p: Prediction) -> str:
    """The plan in --plan syntax, overlaps included (they are searched too)."""
    plan = p.graph.plan
    flags = [name for name, on in (("dp", plan.overlap_dp_comm), ("pg", plan.overlap_param_gather),
                                   ("tp", plan.overlap_tp_comm), ("pp", plan.overlap_pp_comm)) if on]
    return plan.short() + (",ovl=" + "+".join(flags) if flags else "")


# ---- what limits a plan -------------------------------------------------------------------------
# an overhead under this share of the step leaves the plan compute-bound
_COMPUTE_BOUND_BELOW = 0.05
# memory this full rules out relief that needs more of it
_MEMORY_FULL_ABOVE = 0.9
_TAGS = {"bubble": "bubble", "tp_comm": "TP comm", "recompute": "recompute", "dp_comm": "DP comm",
         "pp_comm": "PP comm", "cp_comm": "CP comm", "ep_comm": "MoE a2a", "moe_imbalance": "MoE imbalance",
         "optimizer": "optimizer", "stragglers": "slowest GPU"}


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _worst_overhead(p: Prediction) -> tuple[str, dict[str, float]]:
    """The part of the step beyond compute that takes the most time, and every part's share."""
    total = p.step_time_s
    share = {k: v / total for k, v in p.breakdown_s.items()}
    overheads = {k: v for k, v in share.items() if k != "compute"}
    return max(overheads, key=lambda k: overheads[k]), share


def bottleneck_tag(p: Prediction) -> str:
    """What limits a plan in a few words (the first words of ``bottleneck``): "compute 97%",
    "bubble 23%", "TP comm 15%", with ", memory 95%" when memory is nearly full."""
    worst, share = _worst_overhead(p)
    if share[worst] < _COMPUTE_BOUND_BELOW:
        tag = f"compute {share['compute'] * 100:.0f}%"
    else:
        tag = f"{_TAGS.get(worst, worst)} {share[worst] * 100:.0f}%"
    mem_share = p.memory.total_bytes / p.memory.capacity_bytes
    return tag + (f", memory {mem_share * 100:.0f}%" if mem_share > _MEMORY_FULL_ABOVE else "")


def bottleneck(p: Prediction) -> str:
    """What dominates a plan's step beyond its compute, and what would relieve it, in words."""
    plan = p.graph.plan
    worst, share = _worst_overhead(p)
    mem_share = p.memory.total_bytes / p.memory.capacity_bytes
    g = p.job.cluster.gpus_per_node
    overheads = {k: v for k, v in share.items() if k != "compute"}
    x = f"{overheads[worst] * 100:.0f}%"
    m = p.graph.num_microbatches
    if overheads[worst] < _COMPUTE_BOUND_BELOW:
        text = (f"compute-bound: {share['compute'] * 100:.0f}% of the step computing, at {p.mfu * 100:.0f}% MFU; "
                + ("relieve with FP8, " if plan.precision in ("bf16", "fp16") else "relieve with ")
                + "larger GEMMs (a larger micro-batch or smaller tp) or more GPUs")
    elif worst == "bubble":
        text = (f"pipeline bubble {x} (pp={plan.pp}, vpp={plan.vpp}, {m} micro-batches); relieve with more "
                "micro-batches (smaller micro-batch or larger global batch), more interleaving or fewer stages")
    elif worst == "tp_comm":
        where = "across nodes" if plan.tp > g else "in a node"
        text = (f"TP communication {x} (tp={plan.tp} {where}); relieve with a smaller tp, "
                + ("TP within a node, " if plan.tp > g else "")
                + ("TP overlap" if not plan.overlap_tp_comm else "sequence parallelism or larger GEMMs"))
    elif worst == "recompute":
        text = (f"recomputation {x} ({plan.recompute}); relieve with "
                + ("selective instead of full recomputation, " if plan.recompute == "full" else "no recomputation, ")
                + "paid for in memory: a higher ZeRO stage or more pipeline stages free it")
    elif worst == "dp_comm":
        text = (f"data-parallel communication {x} (dp={plan.dp}, ZeRO-{plan.zero_stage}); relieve with "
                + ("overlap of the gradient reduction, " if not plan.overlap_dp_comm and plan.zero_stage < 3 else "")
                + ("ZeRO-1/2 instead of ZeRO-3, " if plan.zero_stage == 3 else "")
                + "fewer DP ranks (more tp or pp) or more micro-batches to hide it behind")
    elif worst == "pp_comm":
        text = (f"pipeline transfers {x} (pp={plan.pp}); relieve with "
                + ("overlapped send/recv, " if not plan.overlap_pp_comm else "") + "fewer stages or less interleaving")
    elif worst == "cp_comm":
        text = f"context-parallel K/V exchange {x} not hidden by attention (cp={plan.cp}); relieve with a smaller cp"
    elif worst == "ep_comm":
        text = (f"MoE all-to-all {x} (ep={plan.ep}); relieve with a smaller ep, experts within a node, "
                "or more tokens per expert")
    elif worst == "optimizer":
        text = f"optimizer step {x}; relieve by sharding it (ZeRO-1 or higher, more DP ranks)"
    elif worst == "stragglers":
        text = (f"waiting for the slowest of {p.job.cluster.num_gpus:,} GPUs {x} (per-GPU speed variation); "
                "relieve with fewer GPUs, or by finding and draining slow GPUs and balancing node cooling")
    else:
        text = f"{worst} {x}"
    if mem_share > _MEMORY_FULL_ABOVE:
        text += f"; memory {mem_share * 100:.0f}% full, so relief that needs more memory is out"
    return text


# ---- the search ---------------------------------------------------------------------------------
def search(model: str | Path | ModelSpec, *, gpu: str | None = None, num_gpus: int | None = None,
           cluster: str | ClusterSpec | None = None, gpus_per_node: int | None = None, global_batch: int,
           seq_len: int | None = None, precision: str = "bf16", framework: str = "megatron",
           fix: str | dict | None = None, max_memory_fraction: float = 1.0, top: int = 10, objective: str = "time",
           tokens: float | None = None, gpu_hour_price: float | None = None, pareto_points: int = 3,
           shortlist: int = 200, goodput_options: dict | None = None,
           progress: Callable[[int, int], None] | None = None, stragglers: Any = None) -> SearchResult:
    """The best plans for a model on a cluster at a global batch and sequence length. ``progress``:
    called as ``progress(plans priced, plans to price)`` while the plans are priced (every GPU count
    of the Pareto view counted in), e.g. clustertwin.progress.progress_bar's update."""
    t0 = time.perf_counter()
    space, estimate_goodput = prepare_search(
        model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node, global_batch=global_batch,
        seq_len=seq_len, precision=precision, framework=framework, fix=fix, max_memory_fraction=max_memory_fraction,
        top=top, objective=objective, tokens=tokens, gpu_hour_price=gpu_hour_price, pareto_points=pareto_points,
        stragglers=stragglers)
    m, c = space.model, space.cluster
    evaluator = BatchPricer(space, profile_for(space.cluster.gpu))
    keep = max(top, shortlist) if objective != "time" else top

    structures, pruned, evaluated = space.structures()
    # the smaller GPU counts of the Pareto view, enumerated first so that the total to price is known
    sizes = []
    for n in _smaller_sizes(space, pareto_points):
        t1 = time.perf_counter()
        sub = _resized(space, n)
        try:
            s_structs, s_pruned, s_eval = sub.structures()
        except PlanError:
            continue
        sizes.append((n, sub, s_structs, s_eval, s_eval - sum(s_pruned.values()), time.perf_counter() - t1))
    count = _Counter(progress, evaluated - sum(pruned.values()) + sum(x[4] for x in sizes))
    ev = evaluator.run(structures, keep, progress=count)
    pruned = {**pruned, "memory": ev.memory_pruned} if ev.memory_pruned else pruned
    main = _rank(space, ev.candidates, estimate_goodput, tokens, gpu_hour_price, goodput_options)
    t_main = time.perf_counter() - t0 - sum(x[5] for x in sizes)

    pareto = [ParetoPoint(space.num_gpus, main[0] if main else None, evaluated, ev.feasible, t_main)]
    pool = list(main)
    for n, sub, s_structs, s_eval, _, t_enum in sizes:
        t1 = time.perf_counter()
        s_ev = evaluator.run(s_structs, keep if objective == "cost" else 1, sub, progress=count)
        ranked = _rank(sub, s_ev.candidates, estimate_goodput, tokens, gpu_hour_price, goodput_options)
        pareto.append(ParetoPoint(n, ranked[0] if ranked else None, s_eval, s_ev.feasible,
                                  time.perf_counter() - t1 + t_enum))
        if objective == "cost":
            pool += ranked
    _mark_front(pareto)

    if not main and objective != "cost":
        if not ev.memory_pruned:
            why = ", ".join(PRUNE_REASONS[k] for k, _ in sorted(pruned.items(), key=lambda kv: -kv[1])[:3])
            raise PlanError("plan", f"no plan of {m.name} divides {c.num_gpus} x {c.gpu.name} at global batch "
                            f"{global_batch} (of {evaluated:,} candidates; most: {why})",
                            "give a GPU count and global batch with more divisors (powers of two split best)")
        raise PlanError("plan", f"no plan of {m.name} fits on {c.num_gpus} x {c.gpu.name} at global batch "
                        f"{global_batch} (of {evaluated:,} candidates, {ev.memory_pruned:,} did not fit in memory)",
                        "give more GPUs, a larger --max-memory-fraction, or another global batch")
    plans = _order(pool if objective == "cost" else main, objective)[:top]
    if not plans:
        raise PlanError("plan", f"no plan of {m.name} fits on up to {c.num_gpus} x {c.gpu.name}",
                        "give more GPUs or another global batch")
    for i, p in enumerate(plans, 1):
        p.rank = i
    basis = None
    if gpu_hour_price is not None or tokens is not None:
        basis = ("expected_time_to_train" if estimate_goodput and tokens else
                 "steps_x_step_time" if tokens else "per_step")
    return SearchResult(space, objective, evaluated, ev.feasible, pruned, time.perf_counter() - t0, plans, pareto,
                        ev.shape_classes, tokens, gpu_hour_price, basis)


class _Counter:
    """Adds up the plans priced and reports the running count against the total."""

    def __init__(self, report: Callable[[int, int], None] | None, total: int):
        self.report, self.total, self.done = report, total, 0
        if report is not None:
            report(0, total)

    def __call__(self, n: int) -> None:
        self.done += n
        if self.report is not None:
            self.report(self.done, self.total)


def prepare_search(model: str | Path | ModelSpec, *, gpu: str | None = None, num_gpus: int | None = None,
                   cluster: str | ClusterSpec | None = None, gpus_per_node: int | None = None, global_batch: int,
                   seq_len: int | None = None, precision: str = "bf16", framework: str = "megatron",
                   fix: str | dict | None = None, max_memory_fraction: float = 1.0, top: int = 10,
                   objective: str = "time", tokens: float | None = None, gpu_hour_price: float | None = None,
                   pareto_points: int = 3, stragglers: Any = None) -> tuple[SearchSpace, Any]:
    """Every check of ``search``'s inputs, before it enumerates a plan: the space to search and the
    goodput function (None unless needed). Cheap; a sweep runs it on every cell before the first."""
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}")
    if not isinstance(top, int) or top < 1:
        raise SpecError("top", f"{top!r} must be a positive number of plans", "e.g. --top 10")
    if not isinstance(pareto_points, int) or pareto_points < 1:
        raise SpecError("pareto_points", f"{pareto_points!r} must be at least 1", "1 searches only the GPU count given")
    if tokens is not None and not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        raise SpecError("tokens", f"{tokens!r} must be a positive number of tokens", 'e.g. --tokens 15T')
    if gpu_hour_price is not None and not (math.isfinite(gpu_hour_price) and gpu_hour_price > 0):
        raise SpecError("gpu_hour_price", f"{gpu_hour_price!r} must be a positive price", "e.g. --gpu-hour-price 2.5")
    if objective == "cost" and gpu_hour_price is None:
        raise SpecError("gpu_hour_price", "the cost objective needs a price per GPU-hour",
                        "give --gpu-hour-price in USD (your contract's or a cloud list price)")
    estimate_goodput = None
    if objective == "goodput" or (objective == "cost" and tokens is not None):
        if objective == "goodput" and tokens is None:
            raise SpecError("tokens", "the goodput objective needs the tokens to train", "give --tokens, e.g. 15T")
        estimate_goodput = _goodput_function(required=objective == "goodput")
    m = load_model(model)
    c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node, stragglers)
    space = make_space(m, c, global_batch, seq_len or min(m.max_seq_len, 8192), precision=precision,
                       framework=framework, fix=fix, max_memory_fraction=max_memory_fraction)
    return space, estimate_goodput


def _goodput_function(required: bool):
    try:
        from ..reliability import estimate_goodput  # written alongside; imported only when asked for
    except ImportError:
        if required:
            raise SpecError("objective", "goodput needs clustertwin.reliability, which this installation lacks",
                            "use --objective time or cost") from None
        return None
    return estimate_goodput


def _rank(space: SearchSpace, candidates: list[Candidate], estimate_goodput, tokens, price,
          options: dict | None) -> list[RankedPlan]:
    """The candidates as predictions (breakdown, memory per stage), with cost and goodput."""
    out = []
    for cand in candidates:
        job = make_job(space.model, space.cluster, cand.plan(space), space.seq_len, space.framework, tokens)
        pred = predict_job(job)
        rp = RankedPlan(0, pred, bottleneck(pred))
        if tokens is not None:
            steps = math.ceil(tokens / job.tokens_per_step)
            # ideal as goodput counts it: every GPU at the mean speed (the step less its wait for the slowest)
            rp.ideal_time_to_train_s = steps * pred.mean_gpu_step_time_s
            if estimate_goodput is not None:
                est = estimate_goodput(pred, tokens, **(options or {}))
                rp.time_to_train_s, rp.goodput = est.expected_time_to_train_s, est.goodput
                rp.expected_time_to_train_s = est.expected_time_to_train_s
                rp.policy = getattr(getattr(est, "policy", None), "name", None)
            else:
                rp.time_to_train_s = steps * pred.step_time_s
        if price is not None:
            seconds = rp.time_to_train_s if rp.time_to_train_s is not None else pred.step_time_s
            rp.cost_usd = seconds / SECONDS_PER_HOUR * space.num_gpus * price
        out.append(rp)
    return out


def _order(plans: list[RankedPlan], objective: str) -> list[RankedPlan]:
    def key(p: RankedPlan):
        if objective == "cost":
            first = p.cost_usd
        elif objective == "goodput":   # the expected time to train: what goodput costs, in time (ranked_by)
            first = p.time_to_train_s
        else:
            first = p.prediction.step_time_s
        return (first, p.prediction.step_time_s, p.prediction.memory.total_bytes)
    return sorted(plans, key=key)


def _smaller_sizes(space: SearchSpace, points: int) -> list[int]:
    """The GPU counts of the Pareto view below the one searched: halvings, down to one node."""
    out, n, g = [], space.num_gpus, space.cluster.gpus_per_node
    while len(out) < points - 1 and n % 2 == 0 and n // 2 >= g and (n // 2) % g == 0:
        n //= 2
        out.append(n)
    return out


def _resized(space: SearchSpace, num_gpus: int) -> SearchSpace:
    return SearchSpace(space.model, space.cluster.with_gpus(num_gpus), space.global_batch, space.seq_len,
                       space.precision, space.framework, space.fixed, space.max_memory_fraction)


def _mark_front(points: list[ParetoPoint]) -> None:
    """A size is on the front unless another is at least as fast for at most as many GPU-hours."""
    have = [p for p in points if p.plan is not None]
    for p in have:
        t, h = p.plan.prediction.step_time_s, p.gpu_hours_per_step  # type: ignore[union-attr]
        p.on_front = not any(q is not p and q.plan.prediction.step_time_s <= t and q.gpu_hours_per_step <= h  # type: ignore[union-attr,operator]
                             and (q.plan.prediction.step_time_s < t or q.gpu_hours_per_step < h)  # type: ignore[union-attr,operator]
                             for q in have)


__all__ = ["search", "prepare_search", "SearchResult", "RankedPlan", "ParetoPoint", "bottleneck", "bottleneck_tag",
           "plan_text", "OBJECTIVES",
           "PRUNE_REASONS"]
