"""One self-contained HTML page of a plan: ``clustertwin report``.

``build_report`` gathers the data (a plain dict, the document ``--json`` writes): the prediction of
the chosen plan, the search around it, its goodput against the checkpoint interval and the
discrete-event replay of one iteration. ``render_html`` turns that dict, and nothing else, into one
HTML page with plotly's JavaScript embedded (it opens offline) and the dict itself embedded as
``<script type="application/json" id="clustertwin-data">``. Five views:

1. the step-time breakdown (the parts sum to the step time);
2. memory per GPU of every pipeline stage against the GPU's HBM;
3. the search landscape: step time against memory per GPU for a uniform sample of every feasible
   plan (at most ``sample``, default 20,000), the exact front of step time against memory over all
   of them, the best plans, and step time against GPUs (the search's Pareto view);
4. goodput against the checkpoint interval (the chosen checkpoint mode, the others dashed);
5. the pipeline timeline of one iteration from ``clustertwin.sim`` (the graph the trace exports):
   one row per stage, a bar per micro-batch forward and backward, DP communication and optimizer.

Plotly is imported only to render (the ``[report]`` extra); without it, ``render_html`` raises a
ClusterTwinError naming the fix.

>>> d = build_report("gpt3-125m", gpu="h100", num_gpus=8, plan="tp=2,pp=2,dp=2", micro_batch=1,
...                  global_batch=8, seq_len=1024, tokens=1e9, search=False)
>>> sorted(d["views"]) == sorted(VIEWS) and d["timeline"]["pp"] == 2
True
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import ClusterTwinError, DataError, SpecError
from ..schedule.batch import BatchPricer
from ..units import format_duration, parse_quantity

SCHEMA = 1
DEFAULT_SAMPLE = 20_000
MAX_SAMPLE = 200_000
TOKENS_PER_PARAM = 20          # Chinchilla (Hoffmann et al. 2022): the default tokens to train
VIEWS = {
    "breakdown": "Step-time breakdown",
    "memory": "Memory per GPU against HBM",
    "landscape": "Search landscape",
    "goodput": "Goodput against checkpoint interval",
    "timeline": "Pipeline timeline of one iteration",
}
STEPS = ("predict", "search", "goodput", "timeline")
_GIB = 2.0 ** 30
_MODES = ("sync", "async", "in-memory")

# colours (colour-blind safe, Okabe-Ito / Tableau)
_PART_COLORS = {"compute": "#4C78A8", "recompute": "#9ECAE9", "tp_comm": "#F58518", "cp_comm": "#FFBF79",
                "ep_comm": "#E45756", "pp_comm": "#B279A2", "dp_comm": "#54A24B", "bubble": "#BAB0AC",
                "optimizer": "#D62728", "other": "#79706E"}
_MEM_COLORS = {"weights": "#4C78A8", "gradients": "#F58518", "optimizer": "#54A24B", "activations": "#E45756",
               "other": "#BAB0AC"}
_TL_COLORS = {"forward": "#4C78A8", "backward": "#F58518", "optimizer": "#D62728", "grad_sync": "#54A24B",
              "param_gather": "#B279A2"}
_TL_LABELS = {"forward": "forward (micro-batch)", "backward": "backward (micro-batch)", "optimizer": "optimizer",
              "grad_sync": "DP gradient sync", "param_gather": "DP parameter all-gather"}


def _gib(x: float) -> str:
    return f"{x / _GIB:,.1f} GiB"


def _dur(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "never"
    return format_duration(seconds)


def _tokens_text(t: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if t >= scale:
            return f"{t / scale:,.4g}{unit}"
    return f"{t:,.0f}"


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


# ================================================================================================
# the data
# ================================================================================================
def build_report(model: Any = None, *, gpu: str | None = None, num_gpus: int | None = None, cluster: Any = None,
                 gpus_per_node: int | None = None, plan: Any = None, micro_batch: int | None = None,
                 global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
                 framework: str = "megatron", tokens: float | str | None = None,
                 goodput_options: dict | None = None, search: bool = True, top: int = 10, objective: str = "time",
                 fix: str | dict | None = None, max_memory_fraction: float = 1.0, pareto_points: int = 3,
                 gpu_hour_price: float | None = None, sample: int = DEFAULT_SAMPLE, seed: int = 0,
                 on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The report's data. Arguments are predict's, the search's and goodput's; without ``plan`` (and
    with a model, cluster or GPU count given) the search's best plan is the chosen one."""
    from ..predict import (DEFAULT_GLOBAL_BATCH, DEFAULT_MICRO_BATCH, DEFAULT_MODEL, DEFAULT_PLAN, DEFAULT_SEQ_LEN,
                           predict as run_predict)
    step = on_step or (lambda name: None)
    if not isinstance(sample, int) or isinstance(sample, bool) or not (0 <= sample <= MAX_SAMPLE):
        raise SpecError("sample", f"{sample!r} is out of range", f"give 0 to {MAX_SAMPLE:,} plans (0: no scatter)")
    if not isinstance(seed, int) or seed < 0:
        raise SpecError("seed", f"{seed!r} must be a non-negative integer", "e.g. --seed 0")
    if model is None and plan is None and cluster is None and gpu is None and num_gpus is None:
        plan = DEFAULT_PLAN
        micro_batch = DEFAULT_MICRO_BATCH if micro_batch is None else micro_batch
        global_batch = DEFAULT_GLOBAL_BATCH if global_batch is None else global_batch
        seq_len = DEFAULT_SEQ_LEN if seq_len is None else seq_len
    model = model or DEFAULT_MODEL
    search_args = dict(top=top, objective=objective, fix=fix, max_memory_fraction=max_memory_fraction,
                       pareto_points=pareto_points, gpu_hour_price=gpu_hour_price)

    # ---- the chosen plan: given, or the search's best
    result = None
    search_error = None
    if plan is not None:
        step("predict")
        pred = run_predict(model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                           plan=plan, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                           precision=precision, framework=framework)
        plan_source = "given"
    else:
        if not search:
            raise SpecError("plan", "no plan given and the search is off",
                            'give --plan, e.g. "tp=8,pp=4", or drop --no-search to let the search choose')
        from ..catalog import load_model
        from ..search import search as run_search
        m = load_model(model)
        tok, tok_source = _tokens(tokens, m)
        fixed = fix
        if micro_batch is not None:
            fixed = _with_fixed(fix, "micro_batch", micro_batch)
        step("search")
        result = run_search(m, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                            global_batch=global_batch or DEFAULT_GLOBAL_BATCH,
                            seq_len=seq_len or min(m.max_seq_len, DEFAULT_SEQ_LEN), precision=precision or "bf16",
                            framework=framework, tokens=tok if objective != "time" else None,
                            goodput_options=_goodput_opts(goodput_options), **{**search_args, "fix": fixed})
        pred = result.plans[0].prediction
        plan_source = f"search (best by {objective})"
    job = pred.job
    if result is None:
        tok, tok_source = _tokens(tokens, job.model)

    # ---- the search around it
    if search and result is None:
        from ..search import search as run_search
        step("search")
        try:
            result = run_search(job.model, cluster=job.cluster, global_batch=job.plan.global_batch,
                                seq_len=job.seq_len, precision=job.plan.precision, framework=job.framework,
                                tokens=tok if objective != "time" else None,
                                goodput_options=_goodput_opts(goodput_options), **search_args)
        except ClusterTwinError as e:
            if e.field in ("objective", "top", "pareto_points", "tokens", "gpu_hour_price", "sample") \
                    or e.field.startswith("fix") or e.field.startswith("max_memory"):
                raise
            search_error = e.one_line()
    landscape = _landscape(result, pred, sample, seed, search, search_error)

    # ---- goodput
    step("goodput")
    goodput = _goodput(pred, tok, tok_source, goodput_options)

    # ---- the replay
    step("timeline")
    timeline = _timeline(pred)

    return _clean(_assemble(pred, plan_source, tok, tok_source, landscape, goodput, timeline))


def _clean(x: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _with_fixed(fix: str | dict | None, key: str, value: Any) -> dict:
    from ..search.space import parse_fixed
    out = dict(parse_fixed(fix))
    out.setdefault(key, value)
    return out


def _tokens_or_none(tokens: float | str | None) -> float | None:
    if tokens is None:
        return None
    t = parse_quantity(tokens, "count", "tokens")
    if not (math.isfinite(t) and t > 0):
        raise SpecError("tokens", f"{tokens!r} must be a positive number of tokens", "e.g. --tokens 15T")
    return t


def _tokens(tokens: float | str | None, model) -> tuple[float, str]:
    t = _tokens_or_none(tokens)
    if t is not None:
        return t, "given"
    default = _sig(TOKENS_PER_PARAM * model.params_total, 3)
    return default, f"default: {TOKENS_PER_PARAM} tokens per parameter (Chinchilla); give --tokens"


def _goodput_opts(options: dict | None) -> dict:
    return dict(options or {})


def _plan_dict(pred) -> dict[str, Any]:
    return pred.graph.plan.model_dump()


def _assemble(pred, plan_source, tok, tok_source, landscape, goodput, timeline) -> dict[str, Any]:
    from .. import __version__
    from ..search.tuner import bottleneck, plan_text
    job, plan = pred.job, pred.graph.plan
    c = job.cluster
    mem = {k: float(v) for k, v in pred.memory.breakdown_bytes.items()}
    g = goodput if goodput and "error" not in goodput else None
    summary = {
        "step_time_s": pred.step_time_s, "tokens_per_s": pred.tokens_per_s, "tflops_per_gpu": pred.tflops_per_gpu,
        "mfu": pred.mfu, "hfu": pred.hfu, "memory_per_gpu_bytes": float(pred.memory.total_bytes),
        "hbm_bytes": float(pred.memory.capacity_bytes), "fits": bool(pred.fits),
        "num_microbatches": pred.graph.num_microbatches,
        "bubble_fraction": pred.breakdown_s["bubble"] / pred.step_time_s,
        "goodput": g["goodput"] if g else None,
        "expected_time_to_train_s": g["expected_time_to_train_s"] if g else None,
        "ideal_time_to_train_s": g["ideal_time_to_train_s"] if g else None,
        "bottleneck": bottleneck(pred),
    }
    return {
        "schema": SCHEMA,
        "kind": "report",
        "clustertwin": __version__,
        "views": dict(VIEWS),
        "job": {"model": job.model.name, "cluster": c.name, "gpu": c.gpu.name, "num_gpus": c.num_gpus,
                "gpus_per_node": c.gpus_per_node, "plan": _plan_dict(pred), "plan_text": plan_text(pred),
                "plan_source": plan_source, "seq_len": job.seq_len, "global_batch": plan.global_batch,
                "micro_batch": plan.micro_batch, "precision": plan.precision, "framework": job.framework,
                "tokens": tok, "tokens_source": tok_source},
        "summary": summary,
        "breakdown_s": dict(pred.breakdown_s),
        "memory": _memory(pred, mem),
        "search": landscape,
        "goodput": goodput,
        "timeline": timeline,
    }


# ---- memory -------------------------------------------------------------------------------------
def _memory(pred, critical: dict[str, float]) -> dict[str, Any]:
    stages = [{"stage": i, "breakdown_bytes": {k: float(v) for k, v in b.items()}, "total_bytes": float(sum(b.values()))}
              for i, b in enumerate(pred.memory.stages_bytes())]
    return {"hbm_bytes": float(pred.memory.capacity_bytes), "critical_stage": pred.memory.critical_stage,
            "breakdown_bytes": critical, "total_bytes": float(pred.memory.total_bytes), "stages": stages}


# ---- the search landscape -------------------------------------------------------------------------
def _front(t: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points no other point beats on both step time and memory, by memory (and their indices)."""
    order = np.lexsort((t, m))
    ts = t[order]
    best = np.minimum.accumulate(ts)
    keep = np.ones(order.size, dtype=bool)
    keep[1:] = ts[1:] < best[:-1]
    sel = order[keep]
    return t[sel], m[sel], sel


class _Collector:
    """Offered every timed batch of the evaluator (as its ``_Keep`` is): a uniform sample without
    replacement (bottom-k of random keys) and the exact front of step time against memory."""

    def __init__(self, k: int, seed: int):
        self.k = k
        self.rng = np.random.default_rng(seed)
        self.n = 0
        self.keys = np.empty(0)
        self.t = np.empty(0)
        self.m = np.empty(0)
        self.ref: list[tuple] = []
        self.ft = np.empty(0)
        self.fm = np.empty(0)
        self.fref: list[tuple] = []

    def offer(self, rows) -> None:
        times, mems, info = rows.step_time_s, rows.memory_bytes, rows.ref
        idx = np.flatnonzero(rows.valid)
        self.n += int(idx.size)
        if not idx.size:
            return
        t, m = np.asarray(times, dtype=float)[idx], np.asarray(mems, dtype=float)[idx]
        # the front (no other plan both faster and smaller): the batch's own, merged with the one so far
        bt, bm, bidx = _front(t, m)
        at = np.concatenate([self.ft, bt])
        am = np.concatenate([self.fm, bm])
        refs = self.fref + [(info, int(idx[i])) for i in bidx]
        ft, fm, sel = _front(at, am)
        self.ft, self.fm, self.fref = ft, fm, [refs[i] for i in sel]
        if self.k <= 0:
            return
        # the sample
        keys = self.rng.random(idx.size)
        if idx.size > self.k:
            part = np.argpartition(keys, self.k - 1)[: self.k]
            keys, t, m, idx = keys[part], t[part], m[part], idx[part]
        self.keys = np.concatenate([self.keys, keys])
        self.t = np.concatenate([self.t, t])
        self.m = np.concatenate([self.m, m])
        self.ref += [(info, int(i)) for i in idx]
        if self.keys.size > 2 * self.k:
            self._trim()

    def _trim(self) -> None:
        if self.keys.size > self.k:
            part = np.argpartition(self.keys, self.k - 1)[: self.k]
            part.sort()
            self.keys, self.t, self.m = self.keys[part], self.t[part], self.m[part]
            self.ref = [self.ref[i] for i in part]

    def finish(self) -> None:
        self._trim()
        order = np.argsort(self.t, kind="stable")
        self.keys, self.t, self.m = self.keys[order], self.t[order], self.m[order]
        self.ref = [self.ref[i] for i in order]


def _sample_space(space, k: int, seed: int) -> tuple[tuple[BatchPricer, _Collector] | None, str]:
    """Every feasible plan of ``space`` priced as the search prices them, sampled."""
    try:
        pricer = BatchPricer(space)
        structures, _, _ = space.structures()
        col = _Collector(k, seed)
        pricer.price(structures, col)
        col.finish()
        return (pricer, col), ""
    except ClusterTwinError as e:
        return None, e.one_line()


def _decode(pricer: BatchPricer, ref: tuple) -> str:
    info, i = ref
    p = pricer.candidate(info, i).plan(pricer.plans)
    flags = [name for name, on in (("dp", p.overlap_dp_comm), ("pg", p.overlap_param_gather),
                                   ("tp", p.overlap_tp_comm), ("pp", p.overlap_pp_comm)) if on]
    return p.short() + (",ovl=" + "+".join(flags) if flags else "")


def _landscape(result, pred, sample: int, seed: int, enabled: bool, error: str | None) -> dict[str, Any]:
    from ..search.tuner import plan_text
    chosen = {"plan_text": plan_text(pred), "num_gpus": pred.job.cluster.num_gpus, "step_time_s": pred.step_time_s,
              "memory_bytes": float(pred.memory.total_bytes)}
    if not enabled:
        return {"status": "off", "note": "the search was not run (--no-search)", "chosen": chosen}
    if result is None:
        return {"status": "error", "note": f"the search found nothing to plot: {error}", "chosen": chosen}
    s = result.space
    sampled, why = _sample_space(s, sample, seed)
    d: dict[str, Any] = {
        "status": "ok", "objective": result.objective, "evaluated": result.evaluated, "feasible": result.feasible,
        "pruned": dict(result.pruned), "elapsed_s": result.elapsed_s, "num_gpus": s.num_gpus,
        "memory_limit_bytes": float(s.memory_limit_bytes), "hbm_bytes": float(s.cluster.gpu.hbm_bytes),
        "fixed": {k: v for k, v in s.fixed.items()},
        "plans": [p.to_json() for p in result.plans],
        "pareto": [p.to_json() for p in result.pareto],
        "chosen": chosen,
    }
    texts = [p["plan_text"] for p in d["plans"]]
    chosen["rank"] = texts.index(chosen["plan_text"]) + 1 if chosen["plan_text"] in texts else None
    if sampled is None:
        d["sample"] = None
        d["memory_front"] = None
        d["note"] = f"showing the {len(result.plans)} plans the search returned: {why}"
        return d
    pricer, col = sampled
    n_show = int(col.t.size)
    d["sample"] = {"method": "uniform" if n_show < col.n else "all", "size": n_show, "of": col.n, "seed": seed,
                   "step_time_s": [_sig(x) for x in col.t.tolist()],
                   "memory_bytes": [float(round(x)) for x in col.m.tolist()],
                   "plan_text": [_decode(pricer, r) for r in col.ref]}
    d["memory_front"] = {"step_time_s": [_sig(x) for x in col.ft.tolist()],
                         "memory_bytes": [float(round(x)) for x in col.fm.tolist()],
                         "plan_text": [_decode(pricer, r) for r in col.fref]}
    if n_show < col.n:
        d["note"] = (f"a uniform sample of {n_show:,} of the {col.n:,} feasible plans (seed {seed}); the front "
                     "is exact over all of them")
    else:
        d["note"] = f"all {col.n:,} feasible plans"
    return d


# ---- goodput --------------------------------------------------------------------------------------
def _goodput(pred, tokens: float, tokens_source: str, options: dict | None) -> dict[str, Any]:
    from ..reliability import estimate_goodput
    from ..reliability.goodput import expected_time, min_interval_steps
    opts = _goodput_opts(options)
    opts.pop("monte_carlo_runs", None)
    est = estimate_goodput(pred, tokens, **opts)   # bad options are the user's: one line, exit 2
    out = est.to_json()
    out.pop("schema", None)
    out["tokens_source"] = tokens_source
    if not est.feasible:
        out["error"] = (f"the run never finishes: failures every {_dur(est.mtbf_s)} against a "
                        f"{_dur(est.restart.mean_s)} restart")
        return out
    out["sweep"] = _interval_sweep(est, expected_time, min_interval_steps)
    mode = est.checkpoint.mode
    others = {}
    for other in _MODES:
        if other == mode:
            continue
        try:
            o = estimate_goodput(pred, tokens, **{**opts, "checkpoint_mode": other, "checkpoint_interval_s": "auto"})
        except ClusterTwinError:
            continue
        if o.feasible:
            others[other] = {"goodput": o.goodput, "checkpoint_interval_s": o.checkpoint_interval_s,
                             "sweep": _interval_sweep(o, expected_time, min_interval_steps)}
    out["other_modes"] = others
    return out


def _interval_sweep(est, expected_time, min_interval_steps, points: int = 160) -> dict[str, list[float]]:
    """Goodput for checkpoint intervals around the optimum: from the shortest allowed (or 1/30 of the
    chosen, Young's and Daly's intervals) to 10 times the longest, or the whole run."""
    p = est.params
    k0 = est.checkpoint_interval_steps
    refs = [k0, est.young_interval_s / p.step_s, est.daly_interval_s / p.step_s]
    refs = [r for r in refs if math.isfinite(r) and r > 0]
    lo = max(min_interval_steps(p), int(min(refs) / 10) or 1)
    hi = max(lo + 1, min(est.steps, int(max(refs) * 10) + 1))
    ks = np.unique(np.round(np.geomspace(lo, hi, points)))
    total = np.asarray(expected_time(p, ks), dtype=float)
    good = np.where(np.isfinite(total) & (total > 0), est.ideal_time_to_train_s / total, 0.0)
    return {"interval_steps": [int(k) for k in ks], "interval_s": [float(k * p.step_s) for k in ks],
            "goodput": [float(g) for g in good]}


# ---- the timeline -------------------------------------------------------------------------------
def _timeline(pred) -> dict[str, Any]:
    from ..sim import simulate
    r = simulate(pred.graph)
    plan = pred.graph.plan
    step = r.step_time_s
    merge_gap = 1e-3 * step
    stages = []
    shown = sorted((x for x in r.ranks if x.replica in ("all", "slow")), key=lambda x: x.stage)
    for rank in shown:
        bars: list[dict[str, Any]] = []
        comp = sorted((t for t in rank.tasks if t.stream == "compute"), key=lambda t: t.start_s)
        for t in comp:
            if t.phase == "step":
                bars.append({"kind": "optimizer", "name": "optimizer", "start_s": t.start_s, "end_s": t.end_s,
                             "microbatch": -1, "chunk": -1})
                continue
            kind = "forward" if t.phase == "F" else "backward"
            last = bars[-1] if bars else None
            if (last is not None and last["kind"] == kind and last["microbatch"] == t.microbatch
                    and last["chunk"] == t.chunk and t.start_s - last["end_s"] <= merge_gap):
                last["end_s"] = max(last["end_s"], t.end_s)
                continue
            bars.append({"kind": kind, "name": f"{kind} mb {t.microbatch}" + (f" chunk {t.chunk}" if plan.vpp > 1 else ""),
                         "start_s": t.start_s, "end_s": t.end_s, "microbatch": t.microbatch, "chunk": t.chunk})
        comm = sorted((t for t in rank.tasks if t.stream in ("dp_comm", "dp_rs")), key=lambda t: t.start_s)
        groups: dict[str, list[dict[str, Any]]] = {}
        for t in comm:
            kind = "param_gather" if t.op is not None and t.op.collective == "all_gather" else "grad_sync"
            lst = groups.setdefault(kind, [])
            if lst and t.start_s - lst[-1]["end_s"] <= merge_gap:
                lst[-1]["end_s"] = max(lst[-1]["end_s"], t.end_s)
                lst[-1]["count"] += 1
                continue
            lst.append({"kind": kind, "name": "DP parameter all-gather" if kind == "param_gather" else "DP gradient sync",
                        "start_s": t.start_s, "end_s": t.end_s, "microbatch": t.microbatch, "chunk": t.chunk,
                        "count": 1})
        for lst in groups.values():
            bars += lst
        sends = sum(1 for t in rank.tasks if t.stream == "pp_comm")
        stages.append({"stage": rank.stage, "rank": rank.rank, "represents": rank.represents,
                       "end_s": rank.end_s, "pipeline_sends": sends, "bars": bars})
    return {"step_time_s": step, "analytic_step_time_s": pred.step_time_s, "pp": plan.pp, "vpp": plan.vpp,
            "num_microbatches": r.num_microbatches, "tasks_simulated": r.tasks_simulated, "stages": stages}


# ================================================================================================
# the page
# ================================================================================================
def require_plotly():
    """plotly, or a one-line error naming the fix."""
    try:
        import plotly  # noqa: F401
        import plotly.graph_objects as go
        from plotly.offline import get_plotlyjs  # noqa: F401
    except ImportError:
        raise ClusterTwinError("report", "the HTML report needs plotly, which is not installed",
                               "pip install 'clustertwin[report]'") from None
    return go


_CSS = """
*{box-sizing:border-box}
body{margin:0;font-family:-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif;
color:#1f2328;background:#f6f7f9;font-size:15px;line-height:1.45}
main{max-width:1360px;margin:0 auto;padding:18px 22px 28px}
header{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:16px 20px 14px;margin-bottom:14px}
h1{font-size:24px;margin:0 0 2px}
h1 .sub{font-weight:400;color:#57606a}
.plan{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:13.5px;color:#24292f;
margin:4px 0 10px;word-break:break-all}
.plan .src{font-family:inherit;color:#57606a}
.cards{display:grid;grid-template-columns:repeat(7,1fr);gap:10px}
.card{background:#f6f8fa;border:1px solid #e3e6ea;border-radius:8px;padding:8px 10px}
.card .k{font-size:12px;color:#57606a;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:600;white-space:nowrap}
.card .d{font-size:12px;color:#57606a}
.card.bad .v{color:#c62828}.card.good .v{color:#2e7d32}
.limit{margin:10px 0 0;font-size:13.5px;color:#3b434b}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:14px}
section{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:12px 16px 6px;margin-bottom:14px;min-width:0}
h2{font-size:18px;margin:0 0 2px}
.caption{font-size:13px;color:#57606a;margin:0 0 4px}
.note{font-size:13px;color:#8a5300;background:#fff8e6;border:1px solid #f3d58a;border-radius:6px;padding:8px 10px;margin:8px 0}
footer{font-size:12px;color:#6e7781;text-align:center;margin-top:6px}
"""

_CONFIG = {"displaylogo": False, "responsive": True,
           "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"]}


def _layout(fig, height: int, **kw) -> None:
    fig.update_layout(template="plotly_white", height=height, margin=dict(l=70, r=24, t=36, b=50),
                      font=dict(size=13, family='-apple-system, "Segoe UI", Roboto, Arial, "Liberation Sans", sans-serif'),
                      hoverlabel=dict(font_size=12), legend=dict(orientation="h", yanchor="bottom", y=1.02,
                                                                 xanchor="left", x=0), **kw)


def _div(fig, key: str, height: int) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config=_CONFIG, div_id=f"view-{key}",
                       default_height=f"{height}px", default_width="100%")


def _section(key: str, caption: str, body: str, note: str | None = None) -> str:
    n = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return (f'<section id="{key}"><h2>{html.escape(VIEWS[key])}</h2><p class="caption">{html.escape(caption)}</p>'
            f"{n}{body}</section>")


def _fmt_s(seconds: float) -> str:
    return format_duration(seconds)


# ---- the views ----------------------------------------------------------------------------------
def _view_breakdown(go, d: dict) -> str:
    b = d["breakdown_s"]
    total = d["summary"]["step_time_s"]
    parts = [(k, v) for k, v in b.items() if v > 0]
    names = [k.replace("_", " ") for k, _ in parts][::-1]
    vals = [v for _, v in parts][::-1]
    fig = go.Figure(go.Bar(
        x=vals, y=names, orientation="h", marker_color=[_PART_COLORS.get(k, "#888") for k, _ in parts][::-1],
        text=[f"{_fmt_s(v)} · {v / total * 100:.1f}%" for v in vals], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:.4g} s<extra></extra>"))
    h = 120 + 38 * len(parts)
    _layout(fig, max(h, 300), showlegend=False)
    fig.update_layout(margin=dict(l=90, r=110, t=36, b=50))
    fig.update_xaxes(title_text="seconds per step", rangemode="tozero")
    zero = [k.replace("_", " ") for k, v in b.items() if v <= 0]
    cap = (f"Where the {_fmt_s(total)} step goes; the parts sum to it (exposed communication only)."
           + (f" Zero: {', '.join(zero)}." if zero else ""))
    return _section("breakdown", cap, _div(fig, "breakdown", max(h, 300)))


def _view_memory(go, d: dict) -> str:
    m = d["memory"]
    hbm = m["hbm_bytes"]
    stages = m["stages"]
    xs = [str(s["stage"]) for s in stages]
    fig = go.Figure()
    parts = list(stages[0]["breakdown_bytes"])
    for part in parts:
        ys = [s["breakdown_bytes"].get(part, 0.0) / _GIB for s in stages]
        fig.add_trace(go.Bar(x=xs, y=ys, name=part, marker_color=_MEM_COLORS.get(part, "#888"),
                             hovertemplate=f"{part}: %{{y:.2f}} GiB<extra>stage %{{x}}</extra>"))
    tops = [s["total_bytes"] / _GIB for s in stages]
    if len(stages) <= 8:
        fig.add_trace(go.Scatter(x=xs, y=tops, mode="text", text=[f"{t:.1f} GiB" for t in tops],
                                 textposition="top center", showlegend=False, hoverinfo="skip"))
    fig.add_hline(y=hbm / _GIB, line=dict(color="#c62828", dash="dash", width=2))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"HBM {hbm / _GIB:.0f} GiB",
                             line=dict(color="#c62828", dash="dash", width=2)))
    fig.update_xaxes(title_text="pipeline stage", type="category")
    h = 330 + 20 * len(parts) // 3
    _layout(fig, h, barmode="stack", bargap=0.35 if len(stages) > 1 else 0.6)
    fig.update_layout(legend=dict(orientation="v", traceorder="reversed", x=1.02, xanchor="left", y=1, yanchor="top"),
                      margin=dict(l=70, r=24, t=40, b=50))
    fig.update_yaxes(title_text="GiB per GPU", range=[0, max(hbm, max(s["total_bytes"] for s in stages)) / _GIB * 1.12])
    fits = "fits" if d["summary"]["fits"] else "does NOT fit"
    cap = (f"Most loaded: stage {m['critical_stage']}, {_gib(m['total_bytes'])} of {_gib(hbm)} "
           f"({m['total_bytes'] / hbm * 100:.0f}%): {fits}.")
    return _section("memory", cap, _div(fig, "memory", h))


def _view_landscape(go, d: dict) -> str:
    from plotly.subplots import make_subplots
    s = d["search"]
    chosen = s["chosen"]
    if s.get("status") != "ok":
        return _section("landscape", "Step time against memory per GPU and against GPUs for every feasible plan.",
                        "", note=s.get("note"))
    n = s["num_gpus"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], horizontal_spacing=0.09,
                        subplot_titles=(f"step time against memory per GPU, {n:,} GPUs",
                                        "step time against GPUs (fastest plan per size)"))
    sm = s.get("sample")
    if sm and sm["size"]:
        fig.add_trace(go.Scatter(
            x=[v / _GIB for v in sm["memory_bytes"]], y=sm["step_time_s"], mode="markers",
            name=f"feasible plans ({sm['size']:,}" + (f" of {sm['of']:,})" if sm["method"] == "uniform" else ")"),
            marker=dict(size=4, color="#6b8fbf", opacity=0.35, line=dict(width=0)), text=sm["plan_text"],
            hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"), row=1, col=1)
    fr = s.get("memory_front")
    if fr and fr["step_time_s"]:
        fig.add_trace(go.Scatter(
            x=[v / _GIB for v in fr["memory_bytes"]], y=fr["step_time_s"], mode="lines+markers", line_shape="hv",
            name="front: fastest for its memory", line=dict(color="#E45756", width=2), marker=dict(size=6),
            text=fr["plan_text"], hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra>front</extra>"),
            row=1, col=1)
    plans = s["plans"]
    if plans:
        fig.add_trace(go.Scatter(
            x=[p["memory_per_gpu_bytes"]["total"] / _GIB for p in plans], y=[p["step_time_s"] for p in plans],
            mode="markers", name=f"best {len(plans)} by {s['objective']}",
            marker=dict(symbol="diamond", size=9, color="#F58518", line=dict(color="#222", width=1)),
            text=[f"#{p['rank']} {p['plan_text']}" for p in plans],
            hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(
        x=[chosen["memory_bytes"] / _GIB], y=[chosen["step_time_s"]], mode="markers", name="chosen plan",
        marker=dict(symbol="star", size=18, color="#FFD700", line=dict(color="#222", width=1.5)),
        text=[chosen["plan_text"]], hovertemplate="chosen: %{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"),
        row=1, col=1)
    fig.add_vline(x=s["memory_limit_bytes"] / _GIB, line=dict(color="#c62828", dash="dash", width=1.5), row=1, col=1,
                  annotation_text="memory limit", annotation_position="top left", annotation_font_color="#c62828")
    # GPUs
    pts = [p for p in s["pareto"] if p.get("step_time_s") is not None]
    if pts:
        pts.sort(key=lambda p: p["num_gpus"])
        front = [p for p in pts if p["on_front"]]
        fig.add_trace(go.Scatter(
            x=[p["num_gpus"] for p in front], y=[p["step_time_s"] for p in front], mode="lines",
            line=dict(color="#E45756", width=2), name="Pareto front (GPUs)", showlegend=False,
            hoverinfo="skip"), row=1, col=2)
        fig.add_trace(go.Scatter(
            x=[p["num_gpus"] for p in pts], y=[p["step_time_s"] for p in pts], mode="markers+text",
            marker=dict(size=11, color=["#E45756" if p["on_front"] else "#fff" for p in pts],
                        line=dict(color="#E45756", width=2)),
            text=[f"{p['gpu_hours_per_step']:.3g} GPU-h/step" for p in pts], textposition="bottom center",
            textfont=dict(size=11), name="fastest per GPU count (filled: on the front)", showlegend=False,
            customdata=[p["plan_text"] for p in pts],
            hovertemplate="%{x:,} GPUs: %{customdata}<br>%{y:.4g} s/step<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Scatter(
        x=[chosen["num_gpus"]], y=[chosen["step_time_s"]], mode="markers", showlegend=False,
        marker=dict(symbol="star", size=18, color="#FFD700", line=dict(color="#222", width=1.5)),
        text=[chosen["plan_text"]], hovertemplate="chosen: %{text}<br>%{y:.4g} s<extra></extra>"), row=1, col=2)
    gpus = sorted({p["num_gpus"] for p in s["pareto"]} | {chosen["num_gpus"]})
    fig.update_xaxes(type="log", tickvals=gpus, ticktext=[f"{g:,}" for g in gpus], title_text="GPUs", row=1, col=2,
                     range=[math.log10(min(gpus) / 1.6), math.log10(max(gpus) * 1.6)])
    ys = [chosen["step_time_s"]] + [p["step_time_s"] for p in pts]
    fig.update_yaxes(range=[0, max(ys) * 1.25], title_text="step time (s)", row=1, col=2)
    fig.update_xaxes(title_text="memory per GPU (GiB, most loaded stage)", row=1, col=1)
    fig.update_yaxes(title_text="step time (s)", row=1, col=1)
    all_t = (sm["step_time_s"] if sm else []) + [p["step_time_s"] for p in plans] + [chosen["step_time_s"]]
    if all_t and max(all_t) / max(min(all_t), 1e-12) > 12:
        tv = _log_ticks(min(all_t), max(all_t))
        fig.update_yaxes(type="log", tickvals=tv, ticktext=[f"{v:g}" for v in tv], row=1, col=1)
    h = 500
    _layout(fig, h)
    fig.update_layout(legend=dict(y=1.09), margin=dict(l=70, r=24, t=70, b=50))
    for a in fig.layout.annotations:
        if a.text and a.text.startswith("step time against"):
            a.font = dict(size=13, color="#3b434b")
    pruned = sum(s["pruned"].values())
    cap = (f"{s['evaluated']:,} plans enumerated in {s['elapsed_s']:.2f} s: {pruned:,} pruned, {s['feasible']:,} fit. "
           f"Left: {s.get('note', '')}. Right: the fastest plan at each GPU count of the search's Pareto view "
           "(filled: on the front of step time against GPU-hours). "
           f"★ the chosen plan" + (f" (#{chosen['rank']} of the search)" if chosen.get("rank") else "") + ".")
    return _section("landscape", cap, _div(fig, "landscape", h),
                    note=None if sm else s.get("note"))


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks (1-2-3-5 over less than two decades) from lo to hi."""
    mant = (1, 2, 3, 5) if hi / lo < 100 else (1, 2, 5)
    out = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in mant:
            v = float(f"{m * 10.0 ** e:.12g}")
            if lo / 1.15 <= v <= hi * 1.15:
                out.append(v)
    return out


def _duration_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    cands = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
             2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 90 * 86400, 365 * 86400]
    vals = [v for v in cands if lo <= v <= hi]
    if len(vals) > 9:
        vals = vals[:: math.ceil(len(vals) / 9)]

    def label(v: float) -> str:
        if v < 60:
            return f"{v:g} s"
        if v < 3600:
            return f"{v / 60:g} min"
        if v < 86400:
            return f"{v / 3600:g} h"
        return f"{v / 86400:g} d"
    return vals, [label(v) for v in vals]


def _view_goodput(go, d: dict) -> str:
    g = d["goodput"]
    if not g or "sweep" not in g:
        return _section("goodput", "Expected goodput (ideal time / expected time) for each checkpoint interval.", "",
                        note=(g or {}).get("error", "goodput was not computed"))
    sw = g["sweep"]
    ck = g["checkpoint"]
    fig = go.Figure()
    dashes = {"sync": "dot", "async": "dash", "in-memory": "dashdot"}
    for mode, o in (g.get("other_modes") or {}).items():
        fig.add_trace(go.Scatter(x=o["sweep"]["interval_s"], y=[v * 100 for v in o["sweep"]["goodput"]], mode="lines",
                                 name=f"{mode} checkpoints (best {o['goodput'] * 100:.1f}%)",
                                 line=dict(width=1.5, dash=dashes.get(mode, "dash"), color="#9aa4ae"),
                                 hovertemplate=f"{mode}: every %{{x:.3s}}s → %{{y:.2f}}%<extra></extra>"))
    fig.add_trace(go.Scatter(x=sw["interval_s"], y=[v * 100 for v in sw["goodput"]], mode="lines",
                             name=f"{ck['mode']} checkpoints (this run)", line=dict(width=3, color="#4C78A8"),
                             hovertemplate="every %{x:.3s}s → %{y:.2f}%<extra></extra>"))
    marks = [("chosen" if g["checkpoint_interval_source"] == "given" else "optimal", g["checkpoint_interval_s"],
              g["goodput"], "circle", "#4C78A8")]
    xs, ys = np.asarray(sw["interval_s"]), np.asarray(sw["goodput"])
    for name, x, color, sym in (("Young", ck.get("young_interval_s"), "#54A24B", "triangle-up"),
                                ("Daly", ck.get("daly_interval_s"), "#B279A2", "square")):
        if x and xs.size and xs[0] <= x <= xs[-1]:
            marks.append((name, x, float(np.interp(x, xs, ys)), sym, color))
    labelled: list[float] = [marks[0][1]]
    for i, (name, x, y, sym, color) in enumerate(marks[1:] + marks[:1]):
        primary = i == len(marks) - 1
        show = primary or all(abs(math.log(x / o)) > 0.25 for o in labelled)
        if show and not primary:
            labelled.append(x)
        fig.add_trace(go.Scatter(x=[x], y=[y * 100], mode="markers+text" if show else "markers",
                                 name=f"{name}: every {_dur(x)}",
                                 marker=dict(size=12 if name in ("optimal", "chosen") else 10, symbol=sym, color=color,
                                             line=dict(color="#222", width=1)),
                                 text=[name], textposition="bottom center" if name in ("optimal", "chosen") else "top center",
                                 hovertemplate=f"{name}: every {_dur(x)} → %{{y:.2f}}%<extra></extra>"))
    tv, tt = _duration_ticks(float(xs.min()), float(xs.max()))
    fig.update_xaxes(type="log", title_text="checkpoint interval", tickvals=tv, ticktext=tt,
                     range=[math.log10(float(xs.min())), math.log10(float(xs.max()))])
    x_lo, x_hi = float(xs.min()), float(xs.max())
    allg = [v * 100 for v in sw["goodput"]]
    for o in (g.get("other_modes") or {}).values():
        allg += [v * 100 for x, v in zip(o["sweep"]["interval_s"], o["sweep"]["goodput"]) if x_lo <= x <= x_hi]
    top, low = max(allg), min(allg)
    span = max(top - low, 0.5)
    fig.update_yaxes(title_text="goodput (%)", range=[max(0.0, low - 0.06 * span), min(100.0, top + 0.25 * span)])
    h = 400
    _layout(fig, h)
    fig.update_layout(margin=dict(l=70, r=24, t=60, b=50))
    lost = ", ".join(f"{k} {_dur(v)}" for k, v in g["lost_s"].items() if v)
    cap = (f"{_tokens_text(g['tokens'])} tokens in {g['steps']:,} steps: ideal {_dur(g['ideal_time_to_train_s'])}, "
           f"expected {_dur(g['expected_time_to_train_s'])} (goodput {g['goodput'] * 100:.1f}%). "
           f"Failures every {_dur(g['mtbf_s'])} ({g['failure_model']}); a {ck['mode']} checkpoint "
           f"stalls {_dur(ck['blocking_s'])}. Lost: {lost}.")
    note = None if g.get("tokens_source") == "given" else f"tokens: {g.get('tokens_source')}"
    return _section("goodput", cap, _div(fig, "goodput", h), note=note)


def _view_timeline(go, d: dict) -> str:
    tl = d["timeline"]
    step = tl["step_time_s"]
    scale, unit = (1e3, "ms") if step < 2 else (1.0, "s")
    fig = go.Figure()
    lanes = {"forward": (-0.36, 0.56), "backward": (-0.36, 0.56), "optimizer": (-0.36, 0.56),
             "grad_sync": (0.24, 0.16), "param_gather": (0.24, 0.16)}
    n_bars = sum(len(s["bars"]) for s in tl["stages"])
    for kind in ("forward", "backward", "optimizer", "grad_sync", "param_gather"):
        bars = [(s["stage"], b) for s in tl["stages"] for b in s["bars"] if b["kind"] == kind]
        if not bars:
            continue
        off, width = lanes[kind]
        label = kind in ("forward", "backward") and n_bars <= 2500
        fig.add_trace(go.Bar(
            orientation="h", y=[st for st, _ in bars], x=[(b["end_s"] - b["start_s"]) * scale for _, b in bars],
            base=[b["start_s"] * scale for _, b in bars], offset=off, width=width, name=_TL_LABELS[kind],
            marker=dict(color=_TL_COLORS[kind],
                        line=dict(color="#ffffff", width=0.6 if width > 0.3 and n_bars <= 1500 else 0)),
            text=[str(b["microbatch"]) for _, b in bars] if label else None, textposition="inside",
            insidetextanchor="middle", textfont=dict(size=10, color="#fff"),
            customdata=[[b["name"] + (f" ({b['count']} collectives)" if b.get("count", 1) > 1 else ""),
                         b["start_s"] * scale, (b["end_s"] - b["start_s"]) * scale] for _, b in bars],
            hovertemplate=f"stage %{{y}}: %{{customdata[0]}}<br>start %{{customdata[1]:.4g}} {unit}, "
                          f"%{{customdata[2]:.4g}} {unit}<extra></extra>"))
    pp = tl["pp"]
    fig.add_vline(x=step * scale, line=dict(color="#222", dash="dot", width=1.2))
    fig.add_annotation(x=step * scale, y=1.0, xref="x", yref="paper", yanchor="bottom", xanchor="right",
                       showarrow=False, text=f"end of step: {_fmt_s(step)}", font=dict(size=12))
    h = 150 + 62 * pp
    _layout(fig, h, barmode="overlay", uniformtext=dict(minsize=8, mode="hide"))
    fig.update_layout(margin=dict(l=80, r=24, t=56, b=50))
    fig.update_yaxes(tickvals=list(range(pp)), ticktext=[f"stage {i}" for i in range(pp)], autorange="reversed",
                     range=[pp - 0.5, -0.5], zeroline=False, showgrid=False)
    fig.update_xaxes(title_text=f"time in the iteration ({unit})", range=[0, step * scale * 1.01])
    cap = (f"Discrete-event replay of one iteration ({tl['num_microbatches']} micro-batches per stage, pp={pp}"
           + (f", vpp={tl['vpp']}" if tl["vpp"] > 1 else "") + f"): {_fmt_s(step)} against the analytic "
           f"{_fmt_s(tl['analytic_step_time_s'])}. One row per pipeline stage: compute above (numbers are "
           "micro-batches), data-parallel communication below; pipeline sends are left out.")
    return _section("timeline", cap, _div(fig, "timeline", h))


# ---- the header and the page --------------------------------------------------------------------
def _card(key: str, value: str, detail: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="k">{html.escape(key)}</div><div class="v">{html.escape(value)}</div>'
            f'<div class="d">{html.escape(detail)}</div></div>')


def _header(d: dict) -> str:
    j, s = d["job"], d["summary"]
    hbm = s["hbm_bytes"]
    cards = [
        _card("step time", _fmt_s(s["step_time_s"]), f"{s['num_microbatches']} micro-batches"),
        _card("tokens/s", f"{s['tokens_per_s'] / 1e3:,.0f}k" if s["tokens_per_s"] >= 1e4 else f"{s['tokens_per_s']:,.0f}",
              f"{s['tokens_per_s'] / j['num_gpus']:,.0f} per GPU"),
        _card("MFU", f"{s['mfu'] * 100:.1f}%", f"{s['tflops_per_gpu']:,.0f} TFLOP/s per GPU"),
        _card("memory / GPU", _gib(s["memory_per_gpu_bytes"]), f"of {_gib(hbm)} HBM"),
        _card("fits", "yes" if s["fits"] else "NO", f"{s['memory_per_gpu_bytes'] / hbm * 100:.0f}% of HBM",
              "good" if s["fits"] else "bad"),
        _card("goodput", f"{s['goodput'] * 100:.1f}%" if s["goodput"] is not None else "n/a",
              "failures, checkpoints, stragglers"),
        _card("time to train", _dur(s["expected_time_to_train_s"]) if s["expected_time_to_train_s"] else "n/a",
              f"{_tokens_text(j['tokens'])} tokens" + ("" if j["tokens_source"] == "given" else " (default)")),
    ]
    src = j["plan_source"]
    return (f"<header><h1>{html.escape(j['model'])} <span class=\"sub\">on {j['num_gpus']:,} × "
            f"{html.escape(j['gpu'])} ({html.escape(j['cluster'])})</span></h1>"
            f"<p class=\"plan\">{html.escape(j['plan_text'])} <span class=\"src\">· seq {j['seq_len']:,} · global batch "
            f"{j['global_batch']:,} · {html.escape(j['precision'])} · {html.escape(j['framework'])} · plan: "
            f"{html.escape(src)}</span></p>"
            f"<div class=\"cards\">{''.join(cards)}</div>"
            f"<p class=\"limit\"><b>What limits it:</b> {html.escape(s['bottleneck'])}</p></header>")


def _json_for_script(data: dict) -> str:
    text = json.dumps(data, separators=(",", ":"), default=float, allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(data: dict[str, Any]) -> str:
    """The page for ``data`` (``build_report``'s dict): self-contained, plotly embedded."""
    go = require_plotly()
    from plotly.offline import get_plotlyjs
    j = data["job"]
    views = [_view_breakdown(go, data), _view_memory(go, data)]
    body = (f'<div class="grid">{views[0]}{views[1]}</div>' + _view_landscape(go, data) + _view_goodput(go, data)
            + _view_timeline(go, data))
    title = f"clustertwin report: {j['model']} on {j['num_gpus']:,} x {j['gpu']}"
    import plotly
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
            f"<script type=\"text/javascript\">/* plotly.js {plotly.__version__} (embedded) */\n{get_plotlyjs()}</script>"
            f"</head><body><main>{_header(data)}{body}"
            f"<footer>clustertwin {html.escape(str(data.get('clustertwin', '')))} · predicted from specs · "
            f"the data of this page: <code>clustertwin report ... --json FILE</code> "
            f"(also embedded below as JSON, id clustertwin-data)</footer></main>"
            f"<script type=\"application/json\" id=\"clustertwin-data\">{_json_for_script(data)}</script>"
            "</body></html>\n")


def embedded_data(page: str) -> dict[str, Any]:
    """The data a page was rendered from (its ``clustertwin-data`` script)."""
    start_tag = '<script type="application/json" id="clustertwin-data">'
    i = page.find(start_tag)
    if i < 0:
        raise DataError("report", "no embedded data in this page", "render it with clustertwin report")
    i += len(start_tag)
    k = page.find("</script>", i)
    return json.loads(page[i:k].replace("<\\/", "</").replace("<\\!--", "<!--"))


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, default=float, allow_nan=False) + "\n"


def write_text(path: str | Path, text: str, field: str) -> Path:
    p = Path(path)
    if p.exists() and p.is_dir():
        raise DataError(field, f"{str(p)!r} is a directory", "give a file name")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise DataError(field, f"cannot write {str(p)!r} ({e.strerror or e})", "choose a writable path") from None
    return p


__all__ = ["build_report", "render_html", "embedded_data", "require_plotly", "dumps", "write_text", "VIEWS",
           "SCHEMA", "DEFAULT_SAMPLE", "STEPS"]
