"""Measured steps of profiler traces beside clustertwin's prediction of the same job.

Three comparisons, from the most to the least assumption-free:

1. **Per op, by shape** (``matched``): every measured GEMM whose shape the trace recorded, and every
   collective whose message size it recorded, priced by clustertwin's cost model for that shape on the
   job's GPU and profile (``ComputePricer.gemm_time``, ``NetworkPricer.time``). It holds whatever model
   the trace ran: the kernels are compared one by one.
2. **Per category** (``categories``): measured kernel time per step (GEMM, attention, elementwise,
   embedding, optimizer, collectives, p2p, ...) against the sum of the predicted op times of one step of
   one rank of the traced pipeline stage (``--stage``, or the stage of the traces' rank) of the job given on
   the command line; and per named op of that stage (``named.py``: GEMMs by shape and pass, attention,
   norms, RoPE, activations by kernel name) and per process group (tp, cp, dp, ep, pp). Meaningful when that job is
   the one traced.
3. **Breakdown** (``breakdown``): the measured step (wall time of ``ProfilerStep#N``, or the span of its
   kernels on the GPU where that is longer) split into compute,
   optimizer, exposed communication, exposed p2p and the rest (host-bound gaps, bubbles, waits), beside
   predict's breakdown folded into the same fields; and communication exposed vs hidden as measured (the
   part of the collectives' kernel time during which a compute kernel ran on another stream).

Measured figures are averages over the traces' steps and ranks.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..cost.profile import HardwareProfile
from ..parallel.layout import place_group
from ..schedule.batch import price_plan
from ..schedule.step import Pricer
from ..specs import TrainingJob
from ..errors import PlanError
from ..workload.graph import WorkloadGraph, build_graph
from ..workload.ops import OpKind
from .kineto import GemmShape, Kernel, Trace
from .measure import gemm_op, gemm_samples
from .named import GroupRow, OpRow, TwinOp, fused_parts, group_rows, named_ops, stage_of_rank, stage_ops

COMM = ("collective", "p2p")
COMPUTE_CATS = ("gemm", "attention", "elementwise", "embedding", "conv", "other")
BREAKDOWN = ("compute", "optimizer", "exposed_comm", "exposed_p2p", "rest")
# predict's breakdown fields folded into the measured ones
PREDICTED_FIELDS = {"compute": ("compute", "recompute"), "optimizer": ("optimizer",),
                    # the wait for the slowest GPU: a faster rank's trace shows it inside the collective
                    # kernels that wait for the slow one
                    "exposed_comm": ("tp_comm", "cp_comm", "ep_comm", "dp_comm", "moe_imbalance", "stragglers"),
                    "exposed_p2p": ("pp_comm",), "rest": ("bubble", "other")}


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in iv)


def _intersection(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    i = j = 0
    tot = 0.0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            tot += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return tot


@dataclass
class MeasuredStep:
    """One step of one rank: seconds."""
    wall_s: float
    categories: dict[str, float]
    families: dict[tuple[str, str], float]
    breakdown: dict[str, float]
    comm_s: float                # union of communication kernels
    comm_overlapped_s: float     # of which a compute kernel ran at the same time


@dataclass
class Measured:
    traces: list[Trace]
    steps: list[MeasuredStep]
    owner: list[int] = field(default_factory=list)     # the trace each step is from

    def mean(self, f) -> float:
        return sum(f(s) for s in self.steps) / len(self.steps)

    @property
    def step_s(self) -> float:
        return self.mean(lambda s: s.wall_s)

    def categories(self) -> dict[str, float]:
        keys = {k for s in self.steps for k in s.categories}
        return {k: self.mean(lambda s, k=k: s.categories.get(k, 0.0)) for k in keys}

    def families(self) -> dict[tuple[str, str], float]:
        keys = {k for s in self.steps for k in s.families}
        return {k: self.mean(lambda s, k=k: s.families.get(k, 0.0)) for k in keys}

    def breakdown(self) -> dict[str, float]:
        return {k: self.mean(lambda s, k=k: s.breakdown[k]) for k in BREAKDOWN}


def measure_step(kernels: list[Kernel], wall_s: float) -> MeasuredStep:
    cats: dict[str, float] = defaultdict(float)
    fams: dict[tuple[str, str], float] = defaultdict(float)
    compute, comm, p2p, opt = [], [], [], 0.0
    for k in kernels:
        cats[k.category] += k.dur * 1e-6
        fams[(k.category, k.family)] += k.dur * 1e-6
        iv = (k.ts * 1e-6, k.end * 1e-6)
        if k.category == "collective":
            comm.append(iv)
        elif k.category == "p2p":
            p2p.append(iv)
        elif k.category == "optimizer":
            opt += k.dur * 1e-6
            compute.append(iv)
        elif k.category not in ("memcpy", "memset"):
            compute.append(iv)
    cu, co, pu = _union(compute), _union(comm), _union(p2p)
    allcomm = _union(comm + p2p)
    comm_hidden = _intersection(co, cu)
    p2p_exposed = _length(pu) - _intersection(pu, _union(compute + comm))
    busy = _length(cu)
    exposed = _length(co) - comm_hidden
    bd = {"compute": max(0.0, busy - opt), "optimizer": opt, "exposed_comm": exposed, "exposed_p2p": p2p_exposed}
    bd["rest"] = max(0.0, wall_s - sum(bd.values()))
    return MeasuredStep(wall_s, dict(cats), dict(fams), bd, _length(allcomm), _intersection(allcomm, cu))


def measure(traces: list[Trace]) -> Measured:
    steps, owner = [], []
    for n, t in enumerate(traces):
        for i, s in enumerate(t.steps):
            ks = t.step_kernels(i)
            if any(k.category not in ("memcpy", "memset") for k in ks):
                # the step's wall time, or the GPU's span of its kernels where they outlast it (a
                # profiling window of one step, or a GPU running behind the host)
                span = max(k.end for k in ks) - min(k.ts for k in ks)
                steps.append(measure_step(ks, max(s.dur, span) * 1e-6))
                owner.append(n)
    return Measured(traces, steps, owner)


# ---- the twin's side ------------------------------------------------------------------------------
def op_category(kind: OpKind, collective: str = "") -> str:
    return {OpKind.GEMM: "gemm", OpKind.ATTENTION: "attention", OpKind.ELEMENTWISE: "elementwise",
            OpKind.EMBEDDING: "embedding", OpKind.OPTIMIZER: "optimizer", OpKind.COLLECTIVE: "collective",
            OpKind.P2P: "p2p"}[kind]


@dataclass
class Predicted:
    step_s: float
    breakdown: dict[str, float]            # predict's fields
    categories: dict[str, float]           # kernel time per step on one rank of the first stage
    ops: dict[tuple[str, str], float]      # (category, op name) -> seconds per step


def predicted(job: TrainingJob, profile: HardwareProfile, stage: int = 0
              ) -> tuple[Predicted, Pricer, WorkloadGraph, list[TwinOp]]:
    """The twin's step, and the op times per step of one rank of pipeline stage ``stage``."""
    graph = build_graph(job)
    step, _ = price_plan(graph.plan, job.model, job.cluster, job.seq_len, job.framework, profile)
    pricer = Pricer(graph, profile)
    twin = stage_ops(graph, stage)
    cats: dict[str, float] = defaultdict(float)
    ops: dict[tuple[str, str], float] = defaultdict(float)
    for x in twin:
        t = pricer.time(x.op) * x.count
        c = op_category(x.op.kind)
        cats[c] += t
        ops[(c, f"{x.op.name} ({x.op.phase.value})")] += t
    return Predicted(step.step_time_s, dict(step.breakdown_s), dict(cats), dict(ops)), pricer, graph, twin


# ---- per op, by shape --------------------------------------------------------------------------------
@dataclass
class Match:
    kind: str              # gemm | collective | p2p
    what: str              # "GEMM 4096x2798x64 tf32" / "all_reduce 8.2 MB over 2"
    count: float           # per step
    measured_s: float      # per step
    predicted_s: float     # per step

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s if self.measured_s else float("inf")

    @property
    def miss_s(self) -> float:
        return self.predicted_s - self.measured_s


def _stride(ranks: tuple[int, ...]) -> int:
    if len(ranks) < 2:
        return 1
    r = sorted(ranks)
    d = {b - a for a, b in zip(r, r[1:])}
    return d.pop() if len(d) == 1 else 1


def gemm_label(g: GemmShape) -> str:
    b = f"{g.batch}x " if g.batch > 1 else ""
    return f"GEMM {b}{g.m}x{g.n}x{g.k} {g.dtype}"


def matched(measured: Measured, pricer: Pricer, gpus_per_node: int) -> list[Match]:
    """Measured GEMMs (by shape) and sized collectives (by kind, size, group) with their predicted time."""
    nsteps = len(measured.steps)
    rows: dict[tuple, list[float]] = {}
    for s in gemm_samples(measured.traces):
        key = ("gemm", gemm_label(s.shape))
        r = rows.setdefault(key, [0.0, 0.0, 0.0])
        r[0] += 1
        r[1] += s.seconds
        r[2] += pricer.compute.gemm_time(gemm_op(s.shape))
    for t in measured.traces:
        for k in t.kernels:
            if k.step < 0 or k.category not in COMM or not k.comm_bytes or k.group_size < 2:
                continue
            kind = "send_recv" if k.category == "p2p" else k.collective
            if kind not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
                continue
            pl = place_group(k.group_size, _stride(k.group_ranks), gpus_per_node)
            key = (k.category, f"{kind} {k.comm_bytes / 1e6:,.2f} MB over {k.group_size}")
            r = rows.setdefault(key, [0.0, 0.0, 0.0])
            r[0] += 1
            r[1] += k.dur * 1e-6
            r[2] += pricer.network.time(kind, k.comm_bytes, pl)
    return [Match(kind, what, n / nsteps, m / nsteps, p / nsteps) for (kind, what), (n, m, p) in rows.items()]


@dataclass
class TraceComparison:
    job: TrainingJob
    measured: Measured
    predicted: Predicted
    matches: list[Match]
    profile_name: str
    notes: list[str] = field(default_factory=list)
    stage: int = 0
    stage_from: str = "first stage"         # --stage | the traces' rank | first stage
    named: list[OpRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)

    def categories(self) -> list[tuple[str, float, float]]:
        m, p = self.measured.categories(), self.predicted.categories
        keys = sorted(set(m) | set(p), key=lambda k: -(m.get(k, 0.0) + p.get(k, 0.0)))
        return [(k, m.get(k, 0.0), p.get(k, 0.0)) for k in keys]

    def breakdown(self) -> list[tuple[str, float, float]]:
        m = self.measured.breakdown()
        p = {k: sum(self.predicted.breakdown.get(f, 0.0) for f in fs) for k, fs in PREDICTED_FIELDS.items()}
        return [(k, m[k], p[k]) for k in BREAKDOWN]

    def per_trace(self) -> list[dict[str, Any]]:
        """Each trace's (rank's) mean step: a straggler or an unbalanced rank shows here."""
        out = []
        for n, t in enumerate(self.measured.traces):
            ss = [s for s, o in zip(self.measured.steps, self.measured.owner) if o == n]
            if not ss:
                continue
            out.append({"path": t.path, "rank": t.rank, "steps": len(ss), "step_s": sum(s.wall_s for s in ss) / len(ss),
                        "exposed_comm_s": sum(s.breakdown["exposed_comm"] for s in ss) / len(ss),
                        "exposed_p2p_s": sum(s.breakdown["exposed_p2p"] for s in ss) / len(ss)})
        return out

    def misses(self, top: int = 10) -> list[Match]:
        return sorted(self.matches, key=lambda x: -abs(x.miss_s))[:top]

    def matched_totals(self) -> dict[str, tuple[float, float]]:
        out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for x in self.matches:
            out[x.kind][0] += x.measured_s
            out[x.kind][1] += x.predicted_s
        return {k: (v[0], v[1]) for k, v in out.items()}

    def to_json(self, top: int = 10) -> dict[str, Any]:
        ms = self.measured
        return {
            "schema": 1,
            "traces": [{"path": t.path, "producer": t.producer, "device": t.device_name, "rank": t.rank,
                        "world_size": t.world_size, "steps": len(t.steps), "kernels": len(t.kernels),
                        "record_shapes": t.record_shapes} for t in ms.traces],
            "job": {"model": self.job.model.name, "gpu": self.job.cluster.gpu.name,
                    "num_gpus": self.job.cluster.num_gpus, "plan": self.job.plan.short() if hasattr(self.job.plan, "short") else str(self.job.plan),
                    "framework": self.job.framework, "profile": self.profile_name},
            "steps_measured": len(ms.steps),
            "per_trace": self.per_trace(),
            "step_time_s": {"measured": ms.step_s, "predicted": self.predicted.step_s},
            "breakdown_s": [{"field": k, "measured": a, "predicted": b} for k, a, b in self.breakdown()],
            "communication_s": {"measured_total": ms.mean(lambda s: s.comm_s),
                                "measured_overlapped": ms.mean(lambda s: s.comm_overlapped_s)},
            "stage": {"stage": self.stage, "from": self.stage_from, "pp": self.job.plan.pp},
            "categories_s": [{"category": k, "measured": a, "predicted": b} for k, a, b in self.categories()],
            "named_ops": [{"op": r.op, "category": r.category, "shape": r.shape,
                           "count_per_step": {"measured": r.measured_count, "predicted": r.predicted_count},
                           "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                           "ratio": r.ratio if r.measured_s > 0 else None,
                           "ratio_same_work": r.ratio_same_work if math.isfinite(r.ratio_same_work) else None}
                          for r in self.named],
            "groups": [{"group": r.group, "size": r.size,
                        "count_per_step": {"measured": r.measured_count, "predicted": r.predicted_count},
                        "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                        "ratio": r.ratio if r.measured_s > 0 else None, "assigned_by": r.how} for r in self.groups],
            "matched_totals_s": {k: {"measured": a, "predicted": b} for k, (a, b) in self.matched_totals().items()},
            "largest_misses": [{"kind": x.kind, "what": x.what, "count_per_step": x.count, "measured_s": x.measured_s,
                                "predicted_s": x.predicted_s, "ratio": x.ratio} for x in self.misses(top)],
            "measured_kernels": [{"category": c, "kernel": f, "seconds": s} for (c, f), s in
                                 sorted(ms.families().items(), key=lambda kv: -kv[1])[:top]],
            "predicted_ops": [{"category": c, "op": o, "seconds": s} for (c, o), s in
                              sorted(self.predicted.ops.items(), key=lambda kv: -kv[1])[:top]],
            "notes": self.notes,
        }


def compare_traces(traces: list[Trace], job: TrainingJob, profile: HardwareProfile,
                   profile_name: str = "", stage: int | None = None) -> TraceComparison:
    """Compare ``traces`` with the job; the predicted side is one rank of pipeline stage ``stage``
    (None: the stage of the first trace's rank in Megatron's rank order when the traces record ranks of
    a job of the same size, else the first)."""
    pp = job.plan.pp
    notes = []
    if stage is not None:
        if not 0 <= stage < pp:
            raise PlanError("stage", f"{stage} is not a pipeline stage of {job.plan.short()} (stages 0..{pp - 1})",
                            f"give --stage between 0 and {pp - 1}")
        how = "--stage"
    elif pp > 1 and all(t.world_size == job.cluster.num_gpus for t in traces):
        stages = sorted({stage_of_rank(t.rank, job.plan) for t in traces})
        stage, how = stages[0], "the traces' rank"
        if len(stages) > 1:
            notes.append(f"the traces are of ranks on stages {stages}: the prediction is stage {stage}'s; "
                         "compare one stage's traces at a time (--stage)")
    else:
        stage, how = 0, "first stage"
    ms = measure(traces)
    pred, pricer, graph, twin = predicted(job, profile, stage)
    if not any(t.record_shapes for t in traces):
        notes.append("the traces recorded no shapes (record_shapes=False): GEMMs are compared by category only")
    if not any(k.comm_bytes for t in traces for k in t.kernels if k.category in COMM):
        notes.append("the traces recorded no collective message sizes (PyTorch < 2.0 or no NCCL profiler "
                     "args): collectives are compared by category only")
    worlds = {t.world_size for t in traces}
    if len(worlds) == 1 and (w := worlds.pop()) > 1 and w != job.cluster.num_gpus:
        notes.append(f"the traces ran on {w} ranks, the job has {job.cluster.num_gpus} GPUs")
    nsteps = max(1, len(ms.steps))
    return TraceComparison(job, ms, pred, matched(ms, pricer, job.cluster.gpus_per_node), profile_name or profile.name,
                           notes, stage, how, named_ops(traces, nsteps, twin, pricer, fused_parts(graph)),
                           group_rows(traces, nsteps, twin, pricer, graph.plan))


# ---- a timeline of the measured step (for Perfetto, beside the predicted one) --------------------------
def measured_timeline(traces: list[Trace], pid0: int = 1) -> list[dict[str, Any]]:
    """Chrome trace events of one measured step per trace (the step of median length), from 0 us at the
    step's start: one process per trace, one thread per CUDA stream, each kernel named by its family
    with its category."""
    events: list[dict[str, Any]] = []
    for n, t in enumerate(traces):
        if not t.steps:
            continue
        order = sorted(range(len(t.steps)), key=lambda i: t.steps[i].dur)
        i = order[len(order) // 2]
        ks = t.step_kernels(i)
        if not ks:
            continue
        t0 = min(t.steps[i].start, min(k.ts for k in ks))
        pid = pid0 + n
        name = t.path.replace("\\", "/").rsplit("/", 1)[-1]
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"measured: rank {t.rank}, {t.steps[i].name} ({name})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        for s in sorted({k.stream for k in ks}):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": s, "args": {"name": f"stream {s}"}})
        for k in ks:
            args: dict[str, Any] = {"kernel": k.name[:200]}
            if k.gemm is not None:
                args["gemm"] = gemm_label(k.gemm)
            if k.comm_bytes:
                args.update(collective=k.collective, bytes=k.comm_bytes, group_size=k.group_size)
            events.append({"name": k.family, "cat": k.category, "ph": "X", "pid": pid, "tid": k.stream,
                           "ts": round(k.ts - t0, 3), "dur": round(k.dur, 3), "args": args})
    return events
