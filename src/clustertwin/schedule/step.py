"""Step time of one iteration from the priced workload graph.

Per stage and micro-batch: forward, backward and recomputation compute, plus the communication the
plan cannot hide (TP collectives unless overlapped with GEMMs, CP ring exchange beyond the attention
it hides behind, MoE all-to-all). The pipeline runs 1F1B or interleaved 1F1B:
    T_pipe = m * t_slowest + (p - 1) / v * t_mean        (bubble fraction (p-1)/(v*m), Narayanan 2021)
then the DP gradient reduction not hidden behind the last micro-batch's backward, the parameter
all-gather not hidden behind the next forward, and the optimizer step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..cost.compute import ComputePricer
from ..cost.network import GroupPlacement, NetworkPricer, place_group
from ..cost.profile import HardwareProfile, profile_for
from ..workload.graph import StageGraph, WorkloadGraph
from ..workload.ops import Op, OpKind, Phase

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble",
                  "optimizer", "other")

# Megatron-Core buckets gradients (bucket_size = max(40M, 1M x dp) elements); the last bucket's
# reduction starts only when the backward ends, so it is never hidden.
_BUCKET_ELEMENTS = 40e6


@dataclass
class StageTime:
    stage: int
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    recompute_s: float = 0.0
    tp_s: float = 0.0
    cp_s: float = 0.0
    ep_s: float = 0.0
    pp_s: float = 0.0
    fsdp_s: float = 0.0
    dp_sync_s: float = 0.0          # gradient reduction (total, before overlap)
    param_gather_s: float = 0.0     # ZeRO-1/2 parameter all-gather (total, before overlap)
    optimizer_s: float = 0.0
    op_times: dict[str, float] = field(default_factory=dict)

    @property
    def per_microbatch_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.fsdp_s


@dataclass
class StepEstimate:
    step_time_s: float
    breakdown_s: dict[str, float]
    stages: list[StageTime]
    num_microbatches: int
    critical_stage: int


class Pricer:
    """Prices every op of a graph on its cluster: the compute pricer and the network pricer
    with the placement of each process group."""

    def __init__(self, graph: WorkloadGraph, profile: HardwareProfile | None = None):
        job, plan = graph.job, graph.plan
        gpu = job.cluster.gpu
        self.profile = profile or profile_for(gpu)
        chunks = plan.tp if plan.overlap_tp_comm and plan.tp > 1 else 1
        self.compute = ComputePricer(gpu, self.profile, graph.framework, chunks, plan.cp)
        self.network = NetworkPricer(job.cluster, self.profile)
        G = job.cluster.gpus_per_node
        tp, cp, dp, ep = plan.tp, plan.cp, plan.dp or 1, plan.ep
        self.groups: dict[str, GroupPlacement] = {
            "tp": place_group(tp, 1, G),
            "cp": place_group(cp, tp, G),
            "dp_cp": place_group(dp * cp, tp, G),
            "ep": place_group(ep, tp, G),
            "edp": place_group(max(1, dp * cp // ep), tp * ep, G),
            "pp": place_group(2 if plan.pp > 1 else 1, tp * cp * dp, G),
        }

    def time(self, op: Op) -> float:
        if op.is_comm:
            return self.network.time(op.collective, op.comm_bytes, self.groups[op.group])
        return self.compute.time(op)


def _price_stage(sg: StageGraph, pricer: Pricer, graph: WorkloadGraph) -> StageTime:
    plan = graph.plan
    st = StageTime(sg.stage)
    overlap_tp = bool(plan.overlap_tp_comm)
    for phase in (Phase.FWD, Phase.BWD, Phase.RECOMPUTE):
        attn_time = 0.0
        cp_time = 0.0
        gemm_time = 0.0
        for op, rep in sg.ops(phase):
            t = pricer.time(op) * rep
            st.op_times[f"{phase.value}:{op.name}"] = st.op_times.get(f"{phase.value}:{op.name}", 0.0) + t
            if op.is_comm:
                if op.group == "tp":
                    if op.overlappable:
                        continue  # re-gather for wgrad runs under the dgrad GEMM
                    st.tp_s += t
                elif op.group == "cp":
                    cp_time += t
                elif op.group == "ep":
                    st.ep_s += t
                continue
            if op.kind == OpKind.ATTENTION or op.name.startswith("attn.qk") or op.name.startswith("attn.av"):
                attn_time += t
            if op.kind == OpKind.GEMM:
                gemm_time += t
            if phase == Phase.FWD:
                st.fwd_s += t
            elif phase == Phase.BWD:
                st.bwd_s += t
            else:
                st.recompute_s += t
        # ring attention hides the K/V exchange behind the attention of the chunk at hand
        st.cp_s += max(0.0, cp_time - attn_time)
    if overlap_tp and st.tp_s > 0:
        # userbuffers split each GEMM into tp chunks: the first chunk's communication stays exposed
        st.tp_s = st.tp_s / plan.tp
    # FSDP/ZeRO-3: gathers and reduce-scatters per micro-batch, prefetched under compute
    fsdp = sum(pricer.time(op) for op in sg.microbatch_dp_ops)
    if fsdp:
        hidden = (st.fwd_s + st.bwd_s) if plan.overlap_param_gather else 0.0
        st.fsdp_s = max(fsdp - hidden, fsdp * 0.05)
    for op in sg.p2p:
        st.pp_s += pricer.time(op)
    for op in sg.step_ops:
        t = pricer.time(op)
        st.op_times[f"step:{op.name}"] = t
        if op.kind == OpKind.OPTIMIZER:
            st.optimizer_s += t
        elif op.collective == "all_gather":
            st.param_gather_s += t
        else:
            st.dp_sync_s += t
    return st


def estimate_step(graph: WorkloadGraph, profile: HardwareProfile | None = None) -> StepEstimate:
    plan = graph.plan
    pricer = Pricer(graph, profile)
    memo: dict[int, StageTime] = {}
    stages: list[StageTime] = []
    for sg in graph.stages:
        key = id(sg.blocks)
        if key not in memo:
            memo[key] = _price_stage(sg, pricer, graph)
        base = memo[key]
        if base.stage != sg.stage:
            base = StageTime(**{**base.__dict__, "stage": sg.stage})
        stages.append(base)
    m, p, v = graph.num_microbatches, plan.pp, plan.vpp
    per_mb = [s.per_microbatch_s for s in stages]
    crit = max(range(p), key=lambda i: per_mb[i])
    cs = stages[crit]
    mean = sum(per_mb) / p
    bubble = (p - 1) / v * mean
    # pipeline p2p: hidden in the steady state when overlapped, but on the critical path of fill
    # and drain; fully exposed otherwise
    p2p = cs.pp_s
    pp_comm = (2 * (p - 1) * p2p / (2 * v) if plan.overlap_pp_comm else m * p2p) if p > 1 else 0.0

    # DP: reductions of the stage that finishes last (stage 0 in 1F1B) overlap its last backward
    dp_exposed = 0.0
    opt = 0.0
    for s in stages:
        params = graph.stages[s.stage].params.total
        last_bucket = min(1.0, _BUCKET_ELEMENTS / max(params, 1.0))
        if plan.overlap_dp_comm:
            window = (s.bwd_s + s.recompute_s) * (1 + (v - 1) / v)  # later chunks finish their backward earlier
            # stages other than the first finish early: the drain of the pipeline hides their sync
            window += (s.stage) * mean / v
            grad = max(s.dp_sync_s - window, s.dp_sync_s * last_bucket)
        else:
            grad = s.dp_sync_s
        if plan.overlap_param_gather:
            gather = max(s.param_gather_s - s.fwd_s, s.param_gather_s * last_bucket)
        else:
            gather = s.param_gather_s
        dp_exposed = max(dp_exposed, grad + gather)
        opt = max(opt, s.optimizer_s)
    breakdown = {
        "compute": m * (cs.fwd_s + cs.bwd_s),
        "recompute": m * cs.recompute_s,
        "tp_comm": m * cs.tp_s,
        "cp_comm": m * cs.cp_s,
        "ep_comm": m * cs.ep_s,
        "pp_comm": pp_comm,
        "dp_comm": dp_exposed + m * cs.fsdp_s,
        "bubble": bubble,
        "optimizer": opt,
        "other": 0.0,
    }
    total = sum(breakdown.values())
    return StepEstimate(total, breakdown, stages, m, crit)
