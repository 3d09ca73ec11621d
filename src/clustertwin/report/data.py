"""The data of ``clustertwin report``: one plain dict (the document ``report --json`` writes and the
page embeds), from which report.views draws the page and nothing else.

``build_report`` gathers it: the prediction of the chosen plan (given, or the search's best), the
search around it (a uniform sample of every feasible plan, at most ``sample``, default 20,000, and
the exact front of step time against memory over all of them), its goodput against the checkpoint
interval and the discrete-event replay of one iteration. The job options are every command's
(clustertwin.jobs): with none of model, plan, cluster, GPU or GPU count given, the default job.

>>> d = build_report("gpt3-125m", gpu="h100", num_gpus=8, plan="tp=2,pp=2,dp=2", micro_batch=1,
...                  global_batch=8, seq_len=1024, tokens=1e9, search=False)
>>> sorted(d["views"]) == sorted(VIEWS) and d["timeline"]["pp"] == 2
True
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, get_args

import numpy as np

from ..errors import ClusterTwinError, DataError, SpecError
from ..reliability.checkpoint import CheckpointMode
from ..jobs import JobOptions, job_from_options, search_inputs
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
STEPS = ("predict", "search", "landscape", "goodput", "timeline")
_MODES = get_args(CheckpointMode)   # every mode goodput prices, the chosen one and the others compared


def _dur(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "never"
    return format_duration(seconds)


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def build_report(model: Any = None, *, gpu: str | None = None, num_gpus: int | None = None, cluster: Any = None,
                 gpus_per_node: int | None = None, plan: Any = None, micro_batch: int | None = None,
                 global_batch: int | None = None, seq_len: int | None = None, precision: str | None = None,
                 framework: str = "megatron", tokens: float | str | None = None,
                 goodput_options: dict | None = None, search: bool = True, top: int = 10, objective: str = "time",
                 fix: str | dict | None = None, max_memory_fraction: float = 1.0, pareto_points: int = 3,
                 gpu_hour_price: float | None = None, sample: int = DEFAULT_SAMPLE, seed: int = 0,
                 on_step: Callable[[str], None] | None = None,
                 on_progress: Callable[[int, int], None] | None = None, stragglers: Any = None) -> dict[str, Any]:
    """The report's data. The job arguments are every command's (clustertwin.jobs.JobOptions), the
    rest the search's and goodput's; without ``plan`` (and with a model, cluster or GPU count given)
    the search's best plan is the chosen one, searched over the job of ``search_inputs`` (the plan
    fields given, e.g. ``micro_batch``, held fixed). ``on_step(name)`` is called as each of STEPS
    starts, ``on_progress(done, total)`` as the search and the landscape price plans."""
    from ..predict import predict_job
    step = on_step or (lambda name: None)
    if not isinstance(sample, int) or isinstance(sample, bool) or not (0 <= sample <= MAX_SAMPLE):
        raise SpecError("sample", f"{sample!r} is out of range", f"give 0 to {MAX_SAMPLE:,} plans (0: no scatter)")
    if not isinstance(seed, int) or seed < 0:
        raise SpecError("seed", f"{seed!r} must be a non-negative integer", "e.g. --seed 0")
    options = JobOptions(model=model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                         plan=plan, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                         precision=precision, framework=framework, stragglers=stragglers)
    search_args: dict[str, Any] = dict(top=top, objective=objective, max_memory_fraction=max_memory_fraction,
                       pareto_points=pareto_points, gpu_hour_price=gpu_hour_price)

    # ---- the chosen plan: given (the default job's, when no job option is), or the search's best
    result = None
    search_error = None
    if plan is not None or options.is_default_job:
        step("predict")
        pred = predict_job(job_from_options(options))
        plan_source = "given"
    else:
        inputs = search_inputs(options)
        if not search:
            raise SpecError("plan", "no plan given and the search is off",
                            'give --plan, e.g. "tp=8,pp=4", or drop --no-search to let the search choose')
        from ..search import search as run_search
        tok, tok_source = _tokens(tokens, inputs.model)
        step("search")
        result = run_search(inputs.model, **inputs.search_kwargs(fix), tokens=tok if objective != "time" else None,
                            goodput_options=_goodput_opts(goodput_options), progress=on_progress, **search_args)
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
                                fix=fix, tokens=tok if objective != "time" else None,
                                goodput_options=_goodput_opts(goodput_options), progress=on_progress,
                                **search_args)
        except ClusterTwinError as e:
            if e.field in ("objective", "top", "pareto_points", "tokens", "gpu_hour_price", "sample") \
                    or e.field.startswith("fix") or e.field.startswith("max_memory"):
                raise
            search_error = e.one_line()
    if search and result is not None:
        step("landscape")
    landscape = _landscape(result, pred, sample, seed, search, search_error, on_progress)

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


def _sample_space(space, k: int, seed: int, on_progress: Callable[[int, int], None] | None = None
                  ) -> tuple[tuple[Any, _Collector] | None, str]:
    """Every feasible plan of ``space`` priced as the search prices them, sampled."""
    from ..calibrate.profile import profile_for
    from ..schedule.batch import BatchPricer
    try:
        pricer = BatchPricer(space, profile_for(space.cluster.gpu))
        structures, pruned, evaluated = space.structures()
        col = _Collector(k, seed)
        total, done = evaluated - sum(pruned.values()), [0]

        def count(n: int) -> None:
            done[0] += n
            if on_progress is not None:
                on_progress(done[0], total)
        pricer.price(structures, col, progress=count)
        col.finish()
        return (pricer, col), ""
    except ClusterTwinError as e:
        return None, e.one_line()


def _decode(pricer, ref: tuple) -> str:
    info, i = ref
    p = pricer.candidate(info, i).plan(pricer.plans)
    flags = [name for name, on in (("dp", p.overlap_dp_comm), ("pg", p.overlap_param_gather),
                                   ("tp", p.overlap_tp_comm), ("pp", p.overlap_pp_comm)) if on]
    return p.short() + (",ovl=" + "+".join(flags) if flags else "")


def _landscape(result, pred, sample: int, seed: int, enabled: bool, error: str | None,
               on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    from ..search.tuner import plan_text
    chosen = {"plan_text": plan_text(pred), "num_gpus": pred.job.cluster.num_gpus, "step_time_s": pred.step_time_s,
              "memory_bytes": float(pred.memory.total_bytes)}
    if not enabled:
        return {"status": "off", "note": "the search was not run (--no-search)", "chosen": chosen}
    if result is None:
        return {"status": "error", "note": f"the search found nothing to plot: {error}", "chosen": chosen}
    s = result.space
    sampled, why = _sample_space(s, sample, seed, on_progress)
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
    if not pred.fits:
        out["error"] = (f"the plan does not fit: {pred.memory.total_bytes / 2**30:.1f} GiB of "
                        f"{pred.memory.capacity_bytes / 2**30:.0f} GiB per GPU (stage {pred.memory.critical_stage}), "
                        "so it cannot run and has no time to train")
        return out
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
    return {"step_time_s": step, "analytic_step_time_s": pred.step_time_s,
            "analytic_stragglers_s": pred.breakdown_s.get("stragglers", 0.0), "pp": plan.pp, "vpp": plan.vpp,
            "num_microbatches": r.num_microbatches, "tasks_simulated": r.tasks_simulated, "stages": stages}


# ---- the dict as JSON and as a file ---------------------------------------------------------------
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


__all__ = ["build_report", "dumps", "write_text", "VIEWS", "SCHEMA", "DEFAULT_SAMPLE", "MAX_SAMPLE", "STEPS",
           "TOKENS_PER_PARAM"]
