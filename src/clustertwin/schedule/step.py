"""Step time of one iteration from its priced stages: the formulas of the schedule.

``batch.py`` runs them on the stages of a batch of plans (arrays) and of one plan (predict); the
``Pricer`` here prices single ops (the batch pricing sums them by block, the discrete-event
replay and the trace exporters price every op of the graph with it).

Per stage and micro-batch: forward, backward and recomputation compute, plus the communication the
plan cannot hide (TP collectives unless overlapped with GEMMs, CP ring exchange beyond the attention
it hides behind, MoE all-to-all). The pipeline runs 1F1B or interleaved 1F1B:
    T_pipe = m * t_slowest + (p - 1) / v * t_mean        (bubble fraction (p-1)/(v*m), Narayanan 2021)
plus the pipeline sends on the critical path of fill and drain: 2 (p - 1), and with interleaving up to
2 (p v - 1) (the depth-first schedule has no slack around the ring: ``ring_wrap_sends``),
then the DP gradient reduction not hidden behind the last micro-batch's backward, the parameter
all-gather not hidden behind the next forward, and the optimizer step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..arith import Num, logical_and, maximum, minimum, pick, where
from ..constants import value
from ..cost.compute import ComputePricer, host_idle
from ..errors import PlanError
from ..specs.framework import FrameworkProfile, pipeline_schedule
from ..cost.network import NetworkPricer
from ..cost.profile import HardwareProfile, default_profile
from ..parallel.layout import group_placements
from .groups import microbatch_groups
from .stragglers import straggler_s
from ..specs.hardware import ClusterSpec
from ..specs.plan import ep_overlap_layout
from ..workload.graph import WorkloadGraph
from ..workload.ops import Op, OpKind, Phase, is_score_gemm
from ..workload.transformer import LAST_STEP_CP

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "moe_imbalance", "pp_comm", "dp_comm",
                  "bubble", "optimizer", "other", "stragglers")

# Megatron-Core buckets gradients (bucket_size = max(40M, 1M x dp) elements); the last bucket's
# reduction starts only when the backward ends, so it is never hidden.
BUCKET_ELEMENTS = value("schedule.dp_bucket_elements")
BUCKET_ELEMENTS_PER_DP_RANK = value("schedule.dp_bucket_elements_per_dp_rank")
# FSDP/ZeRO-3 prefetch: how many units ahead a unit's all-gather may be issued
FSDP_PREFETCH_UNITS = value("schedule.fsdp_prefetch_units")
# compute that runs beside an overlapped NCCL collective runs slower (SMs and HBM bandwidth shared):
# seconds added per second of collective hidden under compute
OVERLAP_SLOWDOWN = value("schedule.overlap_compute_slowdown")
# DualPipe's all-to-all kernels take this many SMs from the compute they overlap
DUALPIPE_COMM_SMS = value("schedule.dualpipe_comm_sms")
# Megatron-Core's EP all-to-all overlap: the SMs its dispatch/combine kernels take, per dispatcher
EP_OVERLAP_COMM_SMS = {"alltoall": value("schedule.nccl_a2a_comm_sms"), "deepep": value("schedule.deepep_comm_sms")}


@dataclass
class StageTime:
    """Seconds of one stage per micro-batch (and once per step), for one plan (floats) or many (arrays)."""

    stage: int
    fwd_s: Num = 0.0
    bwd_s: Num = 0.0
    recompute_s: Num = 0.0
    # of fwd_s + bwd_s + recompute_s, the compute stream's wait for the host to issue kernels (host_idle):
    # host time, which a slower GPU does not stretch (the wait for the slowest GPU leaves it out)
    host_idle_s: Num = 0.0
    wgrad_s: Num = 0.0            # the weight-gradient GEMMs of bwd_s (DualPipe's W)
    tp_s: Num = 0.0
    # TP communication an overlapped (chunked) schedule cannot hide: where a collective outlasts the GEMM
    # it overlaps, its chunks wait for each other, not for the GEMM's (priced with a chunked pricer only)
    tp_excess_s: Num = 0.0
    cp_s: Num = 0.0
    ep_s: Num = 0.0
    moe_imbalance_s: Num = 0.0    # what the busiest EP rank adds to expert GEMMs and all-to-alls
    pp_s: Num = 0.0
    fsdp_s: Num = 0.0
    dp_sync_s: Num = 0.0          # gradient reduction (total, before overlap)
    param_gather_s: Num = 0.0     # ZeRO-1/2 parameter all-gather (total, before overlap)
    optimizer_s: Num = 0.0
    # compute time already spent hiding the CP ring exchange: not available to hide DP/FSDP traffic
    cp_hidden_fwd_s: Num = 0.0
    cp_hidden_bwd_s: Num = 0.0    # backward and recomputation
    # the stage's overlapped pipeline sends use the NICs its DP/FSDP traffic uses (both cross nodes)
    pp_shares_nic: Num = False
    overhead_s: Num = 0.0         # the framework's host time per micro-batch outside the layers
    # FSDP2's copies once per step (gathered once, reduced once under PP): the copy-outs in the stage's
    # first forward, the copy-ins in its last backward, on the compute stream
    step_copies_s: Num = 0.0
    # of tp_s + cp_s + ep_s + moe_imbalance_s (what the compute stream waits for in the open), the
    # forward's part; the rest is the backward's and its recomputation's
    waits_fwd_s: Num = 0.0
    # of cp_s, the ring exchange the compute stream waits for in the open, per pass (the backward's with
    # its recomputation): the link is busy with it then, as in the cp_hidden time
    cp_open_fwd_s: Num = 0.0
    cp_open_bwd_s: Num = 0.0
    # DualPipe (set by ``dualpipe_rank``): what one overlapped forward-backward pair of the rank exposes of
    # its all-to-alls, the mean over its two kinds of pairs (``dualpipe_pair_ep``); None: not a DualPipe rank
    pair_ep_s: Num | None = None

    @property
    def per_microbatch_s(self) -> float:
        return (self.fwd_s + self.bwd_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.fsdp_s
                + self.moe_imbalance_s + self.overhead_s)


@dataclass
class StepEstimate:
    step_time_s: float
    breakdown_s: dict[str, float]
    stages: list[StageTime]
    num_microbatches: int
    critical_stage: int


def tp_overlap_chunks(plan) -> int:
    """Chunks each layer GEMM is split into when TP communication overlaps it (1: no overlap)."""
    return plan.tp if plan.overlap_tp_comm and plan.tp > 1 else 1


class Pricer:
    """Prices every op of a graph on its cluster: the compute pricer and the network pricer
    with the placement of each process group."""

    def __init__(self, graph: WorkloadGraph, profile: HardwareProfile | None = None):
        self._setup(graph.job.cluster, graph.plan, graph.framework, profile)

    @classmethod
    def for_plan(cls, cluster: ClusterSpec, plan, framework: FrameworkProfile, profile: HardwareProfile | None = None,
                 *, compute: ComputePricer | None = None, network: NetworkPricer | None = None) -> "Pricer":
        """A pricer without a graph (search prices the blocks of many plans; ``plan`` needs tp, cp,
        dp, ep, pp and overlap_tp_comm); ``compute``/``network`` share pricers and their caches."""
        self = cls.__new__(cls)
        self._setup(cluster, plan, framework, profile, compute, network)
        return self

    def _setup(self, cluster, plan, framework, profile, compute=None, network=None) -> None:
        gpu = cluster.gpu
        self.profile = profile or default_profile(gpu)
        self.compute = compute or ComputePricer(gpu, self.profile, framework, tp_overlap_chunks(plan), plan.cp,
                                                getattr(plan, "cuda_graph_scope", None))
        self.network = network or NetworkPricer(cluster, self.profile)
        self.groups = group_placements(plan, cluster.gpus_per_node)

    def time(self, op: Op) -> float:
        """Seconds of ``op`` on the rank that takes longest (MoE ops on the busiest EP rank)."""
        if op.is_comm:
            t = self.network.time(op.collective, op.comm_bytes, self.groups[op.group],
                                  op.extra.get("node_dedup") if op.extra else None)
        else:
            t = self.compute.time(op)
        return t * op.extra.get("load_factor", 1.0) if op.extra else t


class _ManyCompute:
    """The compute side of a ManyPricer: ComputePricer.times with each shape class's chunks."""

    def __init__(self, compute: ComputePricer, tp_overlap_chunks, attention_chunks):
        self.base, self.tp_overlap_chunks, self.attention_chunks = compute, tp_overlap_chunks, attention_chunks
        self.host_time = compute.host_time

    def time(self, op: Op):
        return self.base.times(op, self.tp_overlap_chunks, self.attention_chunks)


class ManyPricer:
    """What a ``Pricer`` of each of many shape classes gives, at once: prices the ops built from
    stacked contexts (``workload.transformer.stack_contexts``: sizes as arrays, one element per shape
    class) element by element with the same arithmetic. ``tp_overlap_chunks``, ``attention_chunks``:
    per element; ``groups``: per process group name, the distinct placements and each element's index
    into them."""

    def __init__(self, compute: ComputePricer, network: NetworkPricer, tp_overlap_chunks, attention_chunks,
                 groups: dict[str, tuple[list, np.ndarray]], n: int):
        self.compute = _ManyCompute(compute, tp_overlap_chunks, attention_chunks)
        self.network, self.groups, self.n = network, groups, n
        self._scalar: dict[tuple, float] = {}

    def time(self, op: Op):
        t = self._comm_times(op) if op.is_comm else self.compute.time(op)
        return t * op.extra.get("load_factor", 1.0) if op.extra else t

    def _comm_times(self, op: Op) -> np.ndarray:
        pls, idx = self.groups[op.group]
        kind = op.collective
        nbytes = np.broadcast_to(np.asarray(op.comm_bytes, dtype=float), (self.n,))
        dedup = op.extra.get("node_dedup") if op.extra else None
        out = np.zeros(self.n)
        # groups of one rank cost nothing; an all-to-all across nodes has its own formula (time())
        ring = [j for j, pl in enumerate(pls) if pl.size > 1 and not (kind == "all_to_all" and pl.nodes > 1)]
        if ring:
            remap = np.full(len(pls), -1)
            remap[ring] = np.arange(len(ring))
            sel = remap[idx] >= 0
            if sel.any():
                out[sel] = self.network.time_many(kind, nbytes[sel], [pls[j] for j in ring], remap[idx[sel]])
        for j, pl in enumerate(pls):
            if pl.size > 1 and kind == "all_to_all" and pl.nodes > 1:
                for r in np.flatnonzero(idx == j):
                    key = (kind, float(nbytes[r]), pl, dedup)
                    t = self._scalar.get(key)
                    if t is None:
                        t = self._scalar[key] = self.network.time(kind, float(nbytes[r]), pl, dedup)
                    out[r] = t
        return out


def host_stream_entry(op: Op, t, rep, pricer) -> tuple | None:
    """What ``host_idle`` takes for one op of a layer: (host seconds, seconds on the compute stream,
    whether it blocks the stream, whether the host first waits for the GPU). Embedding and head run
    once beside many layers: the host's lead over the layers' long kernels hides their issue time (not
    priced: the lead is not tracked across blocks), so they give None."""
    if op.layer not in ("layer", "moe_layer"):
        return None
    comm = op.is_comm
    blocking = not comm or (op.group in ("tp", "ep") and not op.overlappable)
    on_stream = t / pricer.compute.tp_overlap_chunks if comm and op.group == "tp" else t
    return (pricer.compute.host_time(op) * rep, on_stream, blocking, bool(op.extra and op.extra.get("host_sync")))


def phase_host_idle(ops, pricer: Pricer) -> float:
    """The GPU's wait for the host over one phase of a block (the ops in issue order, each once): the
    idle ``accumulate_ops`` adds to that phase's compute, for the replay to add the same."""
    stream = [e for op in ops if (e := host_stream_entry(op, pricer.time(op), 1, pricer)) is not None]
    return host_idle(stream) if stream else 0.0


def accumulate_ops(st: StageTime, ops, phase: Phase, pricer: Pricer) -> tuple[float, float]:
    """Add the priced ``(op, repeat)`` pairs of one phase to ``st``: compute to fwd/bwd/recompute,
    exposed TP and MoE communication to tp_s/ep_s. Returns (CP ring time, the compute-stream time that
    hides it) of the phase, for the caller to expose the ring beyond it: the attention kernels', and
    the time the compute stream waits for the host to issue kernels, during which the ring exchange
    (on its own stream) proceeds as well."""
    attn_time = 0.0
    cp_time = 0.0
    compute = 0.0
    stream = []   # (host, GPU, on the compute stream) per op, for the host-bound floor
    chunks = pricer.compute.tp_overlap_chunks
    excess: Any = 0.0          # overlapped TP communication that outlasts its GEMMs
    first_step: list = []      # CP exchanges hidden only behind the ring's first step (FIRST_STEP_CP)
    pending: Any = None        # an overlapped TP collective waiting for the GEMM it runs beside
    after_gemm: Any = None     # the GEMM just before, when the op before was one
    for op, rep in ops:
        t = pricer.time(op) * rep
        comm = op.is_comm
        # (chunks is 1 without TP overlap, per shape class when many are priced: the excess is then 0)
        is_gemm = op.kind == OpKind.GEMM
        if comm and op.group == "tp" and not op.overlappable:
            if after_gemm is not None:   # a reduce-scatter pipelined with the GEMM before it
                excess = excess + tp_overlap_excess(t, after_gemm, chunks)
            else:                        # an all-gather feeding the GEMM after it
                pending = t
        elif is_gemm and pending is not None:
            excess = excess + tp_overlap_excess(pending, t, chunks)
            pending = None
        after_gemm = t if is_gemm else None
        entry = host_stream_entry(op, t, rep, pricer)
        if entry is not None:
            stream.append(entry)
        if op.extra and "load_factor" in op.extra:
            # routing imbalance: the balanced share stays where it belongs, the rest is reported apart
            extra = t - t / op.extra["load_factor"]
            st.moe_imbalance_s += extra
            t = t - extra       # not in place: the stream holds t (an array when many classes are priced)
        if comm:
            if op.group == "tp":
                if op.overlappable:
                    continue  # re-gather for wgrad runs under the dgrad GEMM
                st.tp_s += t
            elif op.group == "cp":
                if op.name.startswith(FIRST_STEP_CP):
                    first_step.append(t)
                elif op.name == LAST_STEP_CP:
                    compute = compute + t         # waited for once the ring's loop ends: nothing hides it
                else:
                    cp_time += t
            elif op.group == "ep":
                st.ep_s += t
            continue
        if op.kind == OpKind.ATTENTION or is_score_gemm(op.name):
            attn_time += t
        if phase == Phase.BWD and is_gemm and op.name.endswith(".wgrad"):
            st.wgrad_s = st.wgrad_s + t
        compute += t
    if pending is not None:   # nothing after it to hide behind
        excess = excess + tp_overlap_excess(pending, 0.0, chunks)
    # an exchange waited for at the ring's second step hides behind the first step's attention only
    # (1/cp of it: the load-balanced ring gives every step the same work); the rest the compute stream waits
    for t in first_step:
        wait = maximum(0.0, t - attn_time / pricer.compute.attention_chunks)
        compute = compute + wait
        cp_time = cp_time + (t - wait)
    idle = host_idle(stream)   # where the host issues slower than the GPU runs, the GPU waits
    # while the compute stream waits for the host, the TP stream goes on: that time hides the excess too
    st.tp_excess_s = st.tp_excess_s + maximum(0.0, excess - idle)
    st.host_idle_s = st.host_idle_s + idle
    if phase == Phase.FWD:
        st.fwd_s += compute + idle
    elif phase == Phase.BWD:
        st.bwd_s += compute + idle
    else:
        st.recompute_s += compute + idle
    return cp_time, attn_time + idle


# CP exchanges issued before the ring's first attention step and waited for at its second: torch's
# all-gather rotater ("'allgather' means to all-gather all kv shards on ranks after the first sub-SDPA
# computation", torchtitan config_manager.py --experimental.context_parallel_rotate_method, 9dec370)
FIRST_STEP_CP = "attn.cp_allgather"


def exposed_cp(cp_time, attn_time):
    """Ring attention hides the K/V exchange behind the attention of the chunk at hand."""
    return maximum(0.0, cp_time - attn_time)


def hidden_cp(cp_time, attn_time):
    """The attention time spent hiding the CP exchange (no longer free to hide other traffic)."""
    return minimum(cp_time, attn_time)


def tp_overlap_excess(comm, gemm, chunks: int):
    """What a TP collective split into ``chunks`` and pipelined with a GEMM of as many chunks exposes
    beyond its first chunk: chunk i's exchange runs beside chunk i-1's GEMM, so each later step takes
    the longer of the two, and (chunks - 1)/chunks of max(0, comm - gemm) is not hidden."""
    return (chunks - 1) / chunks * maximum(0.0, comm - gemm)


def exposed_tp(tp_s, tp, overlap):
    """Userbuffers split each GEMM into tp chunks: the first chunk's communication stays exposed."""
    return where(logical_and(overlap, tp_s > 0), tp_s / tp, tp_s)


def pass_walls(st: StageTime):
    """The compute stream's wall time in one micro-batch's forward and in its backward (with its
    recomputation): the compute of each pass plus what the stream waits for in the open during it
    (exposed TP, EP and CP communication, the busiest EP rank's extra; ``waits_fwd_s`` the forward's,
    the rest the backward's). A prefetched FSDP collective runs on its own stream beside all of it,
    so this, not the compute alone, is what hides it: where faster compute exposes more TP traffic, the
    window the FSDP gathers hide behind shrinks only by what the pass actually saves."""
    waits = st.tp_s + st.ep_s + st.cp_s + st.moe_imbalance_s
    return st.fwd_s + st.waits_fwd_s, st.bwd_s + st.recompute_s + waits - st.waits_fwd_s


def exposed_fsdp(gather, reduce, units, fwd_s, bwd_s, overlap, cp_hidden_fwd=0.0, cp_hidden_bwd=0.0, root_gather=0.0,
                 root_reduce=0.0, root_kept=True, regather=True):
    """Exposed FSDP/ZeRO-3 time of one micro-batch. The framework gathers each of ``units`` units
    (a layer; a parameter group in DeepSpeed) before its forward and again before its backward, and
    reduce-scatters its gradients after its backward (``gather``, ``reduce``: totals over the units of
    one pass). With prefetch (``overlap``) a unit's collectives run under the compute of the unit
    before it, ``FSDP_PREFETCH_UNITS`` ahead (FSDP2: one unit), so the first unit's gather and the
    last unit's reduce-scatter wait in the open and each other unit exposes what its collectives
    take beyond one unit's compute (compute not already hiding the CP ring exchange):
        forward:  a + (L - 1) max(0, a - c_f)
        backward: a + r + (L - 1) max(0, a + r - c_b)
    with a, r one unit's gather and reduce-scatter, c_f, c_b one unit's share of the compute stream's
    wall in the pass (``pass_walls``; with FSDP2's copy-outs and copy-ins, which run on that stream
    between the units' kernels: torch's split_with_sizes_copy in wait_for_unshard and the
    reduce-scatter copy-in in foreach_reduce, both on the current stream; backward with its
    recomputation). Where the collectives outlast it the pass takes L a + c_f (forward) and
    L (a + r) + c_b (backward): the NIC, shared by the all-gather and reduce-scatter streams, sets the
    pace. Without prefetch every collective is exposed. What hides slows the compute beneath it by
    ``OVERLAP_SLOWDOWN`` per second hidden, on the pass's critical path (the replay adds it at the end
    of each pass).

    ``root_gather``, ``root_reduce`` (> 0 where the stage holds the root unit: the embedding, final norm
    and head, which torchtitan wraps together with the root module's fully_shard, parallelize.py
    apply_fsdp): the root unit's own collectives, which are not one L-th of the pass's (Llama 3 8B:
    2 x 128256 x 4096 = 1.05B parameters against 218M per layer). The root is the unit each pass meets
    first (its pre-forward hook gathers it before the embedding runs; the head's backward is the
    first), so its gather stands in the formulas' first a, and its reduce-scatter in the exposed r;
    the other L - 1 units share the rest alike. FSDP2 keeps the root unsharded after the forward
    (``fsdp_units``: _fsdp_state.py FSDPState._lazy_init; ``root_kept``: a stack running FSDP2,
    workload.graph.fsdp_keeps_root), so the backward does not re-gather it:
        backward with a root: r0 + (L - 1) max(0, a + r - c_b)
    (the first layer unit's backward gather is prefetched by the root's pre-backward hook, under the
    head's backward), and the pass's collectives total 2 gather - a0 + reduce.

    ``regather`` False (ZeRO-2 as FSDP's SHARD_GRAD_OP, workload.graph.fsdp_per_unit): the units stay
    gathered from their forward to their backward, so the backward has no all-gather:
        backward: r + (L - 1) max(0, r - c_b)
    and the pass's collectives total gather + reduce. Each collective is one ring over the data-parallel
    group, (N - 1) steps with their latency (cost/network.py), per unit: the latency is paid L times."""
    L = maximum(units, 1)
    rest = maximum(L - 1, 1)
    a0 = where(root_gather > 0, root_gather, gather / L)     # the first unit's
    r0 = where(root_gather > 0, root_reduce, reduce / L)
    a = where(L > 1, (gather - a0) / rest, 0.0)               # each of the other units'
    r = where(L > 1, (reduce - r0) / rest, 0.0)
    window = FSDP_PREFETCH_UNITS
    cf = window * maximum(fwd_s - cp_hidden_fwd, 0.0) / L
    cb = window * maximum(bwd_s - cp_hidden_bwd, 0.0) / L
    fwd = a0 + (L - 1) * maximum(0.0, a - cf)
    has_root = logical_and(root_gather > 0, root_kept)
    g = where(regather, 1.0, 0.0)           # the backward's share of a unit's gather
    bwd = where(has_root, 0.0, g * a0) + r0 + (L - 1) * maximum(0.0, g * a + r - cb)
    total = gather + g * (gather - where(has_root, root_gather, 0.0)) + reduce
    exposed = minimum(fwd + bwd, total)
    # the hidden collectives slow the compute they run beside (schedule.overlap_compute_slowdown)
    return where(overlap, exposed + OVERLAP_SLOWDOWN * (total - exposed), total)


def step_bucket(kind: OpKind, collective: str = "") -> str:
    """Which once-per-iteration time an op adds to: optimizer, param_gather or dp_sync."""
    if kind == OpKind.OPTIMIZER:
        return "optimizer"
    return "param_gather" if collective == "all_gather" else "dp_sync"


def _chunked_exposure(comm, compute, m, p: int, v: int):
    """Exposed part of a stage's DP collective split over its ``v`` model chunks, each chunk's share
    (comm / v) hidden behind the compute that follows its readiness. Gradients: chunk j (j = 0 the
    chunk that finishes last) is reduced once its last backward is done, and the interleaved
    cool-down finishes chunks p chunk-backwards apart, so (j p + 1) chunk-backwards of one micro-batch
    hide it. Parameter gathers mirror this over the warm-up's forwards. Never more compute than the
    step has. With v = 1 this is comm - compute of one micro-batch."""
    per_chunk = compute / v
    exposed = comm / v - minimum(per_chunk, m * compute)
    for j in range(1, v):
        exposed = maximum(exposed, (j + 1) * comm / v - minimum((j * p + 1) * per_chunk, m * compute))
    return maximum(exposed, 0.0)


def bucket_elements(dp):
    """Megatron-Core's default gradient bucket: max(40M, 1M x dp) elements, larger at large dp so that
    the ring's chunks stay bandwidth-bound (distributed_data_parallel.py, core_r0.8.0)."""
    return maximum(BUCKET_ELEMENTS, BUCKET_ELEMENTS_PER_DP_RANK * dp)


def runs_dualpipe(schedule: str | None, framework: FrameworkProfile, pp: int, vpp: int) -> bool:
    """Whether a plan (its ``pp_schedule``, None: the framework's default) runs DualPipe: where it can,
    an even pipeline without interleaving."""
    return pipeline_schedule(framework, schedule, pp, vpp) == "dualpipe" and pp > 1 and pp % 2 == 0 and vpp == 1


def refuse_ep_overlap(plan, framework: FrameworkProfile, what: str) -> None:
    """``what`` (the discrete-event replay, the trace exporter) builds plain 1F1B schedules, not Megatron-Core's
    combined 1F1B that overlaps the MoE all-to-alls (``overlap_ep_comm``)."""
    on = getattr(plan, "overlap_ep_comm", None)
    on = framework.overlap_ep_comm if on is None else on
    if on and plan.ep > 1 and ep_overlap_layout(plan.pp, plan.vpp):
        raise PlanError("plan.overlap_ep_comm", f"{what} builds plain 1F1B schedules, and this plan overlaps the MoE "
                        "all-to-alls (Megatron-Core's combined 1F1B)", "price it with predict, or set overlap_ep_comm=0")


def dualpipe_rank(a: StageTime, b: StageTime, rank: int, sm_count: int = 0) -> StageTime:
    """The rank of a DualPipe pipeline that holds stages ``a`` and ``b`` (i and p-1-i; DeepSeek-V3
    Sec. 3.2.1): half of the micro-batches run through each, so per micro-batch it spends the mean of
    the two stages' times; its once-per-step work (gradient reduction, parameter gathers, optimizer)
    is that of both stages' parameters. Its overlapped pairs are of two kinds, a forward of ``a`` with
    a backward of ``b`` and the reverse, half of them each: ``pair_ep_s`` is their mean exposure
    (``dualpipe_pair_ep``; with ``sm_count``, the GPU's SMs)."""
    out = StageTime(rank)
    if sm_count:
        out.pair_ep_s = (dualpipe_pair_ep(a, b, sm_count) + dualpipe_pair_ep(b, a, sm_count)) / 2
    for name in ("fwd_s", "bwd_s", "recompute_s", "host_idle_s", "wgrad_s", "tp_s", "tp_excess_s", "cp_s", "ep_s",
                 "moe_imbalance_s", "pp_s", "fsdp_s", "cp_hidden_fwd_s", "cp_hidden_bwd_s", "overhead_s",
                 "waits_fwd_s", "cp_open_fwd_s", "cp_open_bwd_s"):
        setattr(out, name, (getattr(a, name) + getattr(b, name)) / 2)
    for name in ("dp_sync_s", "param_gather_s", "optimizer_s", "step_copies_s"):
        setattr(out, name, getattr(a, name) + getattr(b, name))
    out.pp_shares_nic = a.pp_shares_nic
    return out


def dualpipe_exposed_ep(st: StageTime, sm_count: int, comm_sms: float = DUALPIPE_COMM_SMS):
    """What a micro-batch's dispatch and combine all-to-alls (``ep_s``) add to its compute under
    DualPipe: they run beside the other micro-batch's forward or backward chunk (overlapped
    forward-backward pairs, DeepSeek-V3 Sec. 3.2.1) on ``comm_sms`` of the GPU's SMs (DualPipe's
    ``DUALPIPE_COMM_SMS``), so the compute beside them runs on the rest: a pair takes max(C + A s, A)
    with C its compute, A its all-to-all time and s = comm SMs / SMs (the compute slowed by that share
    while overlapping)."""
    compute = st.fwd_s + st.bwd_s + st.recompute_s
    share = comm_sms / sm_count
    return maximum(st.ep_s * share, st.ep_s - compute)


def _ep_split(st: StageTime):
    """A stage's all-to-all seconds per micro-batch, (forward's, backward's): ``ep_s`` split as the
    stage's open waits are (``waits_fwd_s`` the forward's part of tp + cp + ep + imbalance)."""
    waits = st.tp_s + st.cp_s + st.ep_s + st.moe_imbalance_s
    fwd = where(waits > 0, st.ep_s * st.waits_fwd_s / maximum(waits, 1e-30), 0.0)
    return fwd, st.ep_s - fwd


def dualpipe_pair_ep(f: StageTime, b: StageTime, sm_count: int, comm_sms: float = DUALPIPE_COMM_SMS):
    """What an overlapped pair of stage ``f``'s forward chunk and stage ``b``'s backward chunk adds to
    their compute C = F + B (backward with its recomputation) for their all-to-alls A = A_F + A_B. In the
    pair (DeepSeek-V3 Sec. 3.2.1, Figure 4) each chunk's dispatch and combine run on the communication
    stream beside the *other* chunk's compute, and the chunk's own next layer piece waits for them, so
    besides the compute stream (C slowed by the SM share s = comm SMs / SMs while an all-to-all runs:
    C + A s) and the communication stream (A), each chunk's own chain bounds the pair: F + A_F and
    B + A_B. The pair takes
        max(C + A s, F + A_F, B + A_B, A) - C = max(A s, A_F - B, A_B - F, A - C);
    on ranks 0 and p-1 (the dense first stage, whose short forward cannot hide the last stage's
    backward all-to-alls) the chain bound is what sets it. Stages f = b: ``dualpipe_exposed_ep`` unless
    a chunk's all-to-alls outlast the other chunk's compute."""
    af, _ = _ep_split(f)
    _, ab = _ep_split(b)
    fwd, bwd = f.fwd_s, b.bwd_s + b.recompute_s
    a = af + ab
    share = comm_sms / sm_count
    return maximum(maximum(a * share, a - fwd - bwd), maximum(af - bwd, ab - fwd))


def dualpipe_unpaired(m, p: int, rank: int):
    """The share of a DualPipe rank's m chunk forwards (and as many backwards) that DeepSeek's reference
    order runs alone, their all-to-alls exposed (deepseek-ai/DualPipe dualpipe.py DualPipe.step; H = p/2,
    x = min(rank, p-1-rank)): the forwards of steps 1-3 (2(H-x-1) + 2(x+1) + (H-x-1)) and the
    backwards of steps 3, 5, 6 and 7 ((H-x-1) + (H-x-1) + 2(x+1) + (H-x-1)), 3H - x - 1 of each, plus the
    middle ranks' first step-4 pair, run one chunk after the other ("We don't overlap these two chunks
    to further reduce bubble size"). The other m - (3H - x - 1) forwards run in overlapped pairs.
    Ranks 0 and p-1 run the most alone (3H - 1), the middle ranks the fewest (2H + 1)."""
    half = p // 2
    x = min(rank, p - 1 - rank)
    alone = 3 * half - x - 1 + (1 if x == half - 1 else 0)
    return minimum(1.0, alone / maximum(m, 1))


def ep_overlap_unpaired(m, p: int, v: int):
    """The share of a rank's chunk forwards (and as many backwards) that Megatron-Core's combined 1F1B
    (--overlap-moe-expert-parallel-comm) runs alone, their all-to-alls exposed: the warm-up forwards
    and the cool-down backwards have no partner. Without a pipeline the first forward and the last
    backward ("executed alone, no a2a overlapping", combined_1f1b.py
    combined_1f1b_schedule_for_no_pipelining): 1 of m. Interleaved, the first stage's warm-up
    (get_pp_rank_microbatches in schedules.py, core_r0.15): 2(p - 1) + (v - 1) p chunk forwards plus
    "one extra micro-batch forward step before the 1f1b stages" with the overlap, of m v in all
    (the first stage's, whose last backward ends the step)."""
    if p == 1:
        return minimum(1.0, 1.0 / maximum(m, 1))
    warmup = 2 * (p - 1) + (v - 1) * p + 1
    return minimum(1.0, warmup / maximum(m * v, 1))


def ep_overlap_exposed_ep(st: StageTime, sm_count: int, comm_sms: float, unpaired):
    """What a micro-batch's all-to-alls add under Megatron-Core's EP all-to-all overlap: in the
    steady state one micro-batch's forward and another's backward run layer by layer, each one's
    dispatch/combine on a communication stream beside the other's attention and MLP
    (model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run, core_r0.15; the mechanism of
    DualPipe's chunk pairs, priced by ``dualpipe_exposed_ep`` with the dispatcher's SMs); the
    ``unpaired`` share (``ep_overlap_unpaired``) runs alone and exposes its all-to-alls whole."""
    return unpaired * st.ep_s + (1 - unpaired) * dualpipe_exposed_ep(st, sm_count, comm_sms)


def interleaved_bubble_slots(m, p: int, v: int):
    """The pipeline's idle time in chunk-pass pairs (a chunk's forward and backward of one micro-batch)
    on every stage: p - 1 (Narayanan et al. 2021, bubble (p - 1) / (v m) of the step), and with fewer
    micro-batches than stages (N = m < p, the Llama 3 paper's flexible schedule, Sec. 3.3.2) each of
    the v - 1 wraps from the last stage back to the first idles p - m more: a chunk's first micro-batch
    needs p passes to cross the pipeline, and the first stage has only m of the chunk to run meanwhile.
    A discrete-event run of the schedule (sim/schedule.py) gives the same count."""
    if v == 1:
        return p - 1
    return p - 1 + (v - 1) * maximum(0, p - minimum(m, p))


def fill_drain_sends(m, p: int, v: int):
    """Pipeline sends on the critical path of the fill and the drain: the first micro-batch's forward
    crosses p - 1 stage boundaries before the last stage starts, the last micro-batch's backward
    p - 1 on the way back: 2 (p - 1), whatever the interleaving."""
    return 2 * (p - 1)


def ring_wrap_sends(m, p: int, v: int, send_s, pass_s):
    """With interleaving, the sends of each of the v - 1 wraps around the pipeline (last stage, chunk j
    to first stage, chunk j + 1), forward and backward, that the schedule cannot hide, in sends.

    Megatron's depth-first schedule (N = p contiguous micro-batches per chunk, Narayanan et al. 2021)
    has no slack around the ring: the first stage runs N = p passes of a chunk while its first
    micro-batch crosses the p stages, so each of the ring's p sends delays the next chunk: the first
    micro-batch's forward and the last one's backward cross all p v - 1 boundaries, 2 (p v - 1) sends
    on the critical path instead of 1F1B's 2 (p - 1). Larger groups (N > p, the Llama 3 paper's
    flexible N: "more micro-batches to hide point-to-point communication", Sec. 3.3.2, citing
    Lamy-Poirier's breadth-first schedule) leave N - p passes of slack per wrap, which hides that much
    of the p sends. ``send_s``: one send; ``pass_s``: one chunk pass (the mean of forward and backward).
    A discrete-event run of the schedule (sim/schedule.py, tests) gives this count."""
    slack = maximum(0, microbatch_groups(p, m) - p) * pass_s
    per_wrap = maximum(0.0, p * send_s - slack)
    return 2 * (v - 1) * per_wrap / maximum(send_s, 1e-30)


def compose_step(classes: Sequence[StageTime], stage_class: Sequence[int], class_params: Sequence, m, p: int, v: int,
                 overlap_pp: bool, overlap_dp: bool, overlap_param_gather: bool, dp: Num = 1, dualpipe_sms: int = 0,
                 ep_overlap: tuple[int, float] | None = None, straggler_slowdown: float = 0.0):
    """The step of a pipeline from its priced stages: ``classes`` are the distinct stages (each a
    StageTime, ``stage`` its first index, in order), ``stage_class[i]`` the class of stage i.
    Returns (breakdown, index of the critical class). Works on floats (predict) and on arrays of
    many plans sharing a layout (search), with the same arithmetic. ``dp``: the data-parallel size
    (it sets the gradient bucket).

    ``dualpipe_sms`` (the GPU's SM count; 0: 1F1B): DualPipe, ``classes`` being its ranks
    (``dualpipe_rank``): of a rank's micro-batches the share its reference order runs unpaired
    (``dualpipe_unpaired``) exposes its all-to-alls, the rest overlap the paired chunk's compute
    (``pair_ep_s``: ``dualpipe_pair_ep``; ``dualpipe_exposed_ep`` for a rank built without it), and the
    bubble is (p/2 - 1)(F&B + B - 3W) (DeepSeek-V3 Table 2), F&B a forward and a backward chunk, B a
    backward chunk with its recomputation, both of the fill/drain's unpaired chunks (all-to-alls
    exposed), and W its weight-gradient GEMMs, each the mean over the ranks.

    ``ep_overlap`` ((the GPU's SM count, the SMs the all-to-all kernels take); None: off): Megatron-Core's
    EP all-to-all overlap (combined 1F1B, ``ep_overlap_exposed_ep``). The pipeline's fill and drain run
    unpaired chunks, so the bubble is priced with the all-to-alls exposed.

    ``straggler_slowdown``: the expected slowdown of the job's slowest GPU over the mean one
    (``stragglers.job_group_slowdown``); the step waits for it where it runs at its GPU's pace
    (``stragglers.straggler_s``), the ``stragglers`` part. The other parts price the mean GPU."""
    if dualpipe_sms:
        # a rank's unpaired chunks (``dualpipe_unpaired``) expose their all-to-alls whole, its pairs
        # what ``dualpipe_pair_ep`` leaves
        exposed_ep = []
        for c in classes:
            paired = c.pair_ep_s if c.pair_ep_s is not None else dualpipe_exposed_ep(c, dualpipe_sms)
            unpaired = dualpipe_unpaired(m, p, c.stage)
            exposed_ep.append(unpaired * c.ep_s + (1 - unpaired) * paired)
        per_mb = [c.per_microbatch_s - c.ep_s + e for c, e in zip(classes, exposed_ep)]
    elif ep_overlap:
        unpaired = ep_overlap_unpaired(m, p, v)
        exposed_ep = [ep_overlap_exposed_ep(c, ep_overlap[0], ep_overlap[1], unpaired) for c in classes]
        per_mb = [c.per_microbatch_s - c.ep_s + e for c, e in zip(classes, exposed_ep)]
    else:
        exposed_ep = [c.ep_s for c in classes]
        per_mb = [c.per_microbatch_s for c in classes]
    # the slowest stage sets the pace; the first of equals (max() would pick the same)
    crit: Num = 0
    best = per_mb[0]
    for k in range(1, len(classes)):
        better = per_mb[k] > best
        best = where(better, per_mb[k], best)
        crit = where(better, k, crit)
    total: Num = 0.0
    back: Num = 0.0          # the backward (with its recomputation) of one micro-batch, summed over stages
    compute_sum: Num = 0.0   # forward and backward
    # FSDP2's once-per-step copies lengthen each stage's first forward and last backward, which the
    # fill and the drain chain through every stage: each stage's copies are on the critical path
    # (torch.distributed.pipelining: the last backward runs the reduce-scatters' copy-ins; the first
    # forward the all-gathers' copy-outs). DualPipe's ranks each hold two stages.
    step_copies: Num = 0.0
    for i in range(p):
        c = classes[stage_class[i]]
        step_copies = step_copies + c.step_copies_s / (2 if dualpipe_sms else 1)
        total = total + per_mb[stage_class[i]]
        back = back + c.bwd_s + c.recompute_s
        compute_sum = compute_sum + c.fwd_s + c.bwd_s + c.recompute_s
    mean = total / p
    # one stage's backward slot and forward slot of one micro-batch (communication shared in
    # proportion): the pipeline's drain and fill are made of them
    back_share = where(compute_sum > 0, back / maximum(compute_sum, 1e-30), 0.0)
    slot_b = mean * back_share
    slot_f = mean - slot_b

    def cs(field: str):
        return pick(crit, [getattr(c, field) for c in classes])

    if dualpipe_sms:
        # the fill and drain are the reference order's unpaired chunks (steps 1-3 and 5-7 of
        # DualPipe.step, ``dualpipe_unpaired``): a forward and a backward chunk there run alone, their
        # all-to-alls exposed, so Table 2's F&B and B are priced with them exposed
        alone_mean = b_mean = w_mean = 0.0
        for i in range(p):
            c = classes[stage_class[i]]
            alone_mean = alone_mean + c.per_microbatch_s / p
            b_mean = b_mean + (c.bwd_s + c.recompute_s + _ep_split(c)[1]) / p
            w_mean = w_mean + c.wgrad_s / p
        bubble = maximum(0.0, (p / 2 - 1) * (alone_mean + b_mean - 3 * w_mean))
    elif ep_overlap:   # fill and drain: forwards and backwards without a partner, all-to-alls exposed
        bubble = (p - 1) / v * sum(classes[stage_class[i]].per_microbatch_s for i in range(p)) / p
    else:
        bubble = interleaved_bubble_slots(m, p, v) / v * mean

    # pipeline p2p: hidden in the steady state when overlapped, but on the critical path of fill
    # and drain; fully exposed otherwise
    p2p = cs("pp_s")
    if p > 1 and overlap_pp:
        pp_comm = fill_drain_sends(m, p, v) * p2p / (2 * v)
        if v > 1:
            pp_comm = pp_comm + ring_wrap_sends(m, p, v, p2p / (2 * v), mean / (2 * v)) * p2p / (2 * v)
    else:
        pp_comm = m * p2p if p > 1 else 0.0

    # DP, as Megatron-Core (core_r0.8.0) schedules it. Gradients are reduced only in the last
    # micro-batch's backward (the schedules run the others under no_sync). The first pipeline stage
    # (stage 0 in 1F1B, the one that finishes last) buckets its gradients and launches each bucket's
    # reduce-scatter as soon as the bucket's gradients are ready, so its last backward hides all but
    # the last bucket. Later stages neither bucket (distributed_data_parallel.py: bucket_size = None
    # on pipeline ranks > 0, "data-parallel communication on these stages is not on the critical
    # path") nor reduce during their backward (delay_grad_reduce, on by default: schedules.py runs
    # their grad_sync_func after the cool-down, "Other pipeline stages do grad reduction during
    # pipeline bubble"): stage s's reduction starts when its backward ends and hides behind the s
    # backward slots the stages before it still run (the drain), where stage s computes nothing, so
    # nothing is slowed. Parameter all-gathers (--overlap-param-gather) mirror this at the start of
    # the next step: the first stage chains its buckets under its first forward (distrib_optimizer.py:
    # the next bucket's all-gather is launched when the forward reaches the previous one), a later
    # stage's single all-gather is waited for at its first forward, s forward slots into the fill.
    # With interleaving (v chunks) each chunk's reduction starts when its last backward is done
    # (_chunked_exposure) and the drain/fill slots are chunk slots.
    dp_exposed = 0.0
    opt = 0.0
    bucket = bucket_elements(dp)
    for s, params in zip(classes, class_params):
        last_bucket = minimum(1.0, bucket / maximum(params, 1.0))
        # overlapped pipeline sends share the NICs with the DP traffic they run beside: the backward's
        # gradient sends take the backward's window, the forward's activation sends the forward's
        shared = where(logical_and(overlap_pp, s.pp_shares_nic), s.pp_s / 2, 0.0) if p > 1 else 0.0
        slowed = 0.0     # collective time hidden under compute, which it slows (OVERLAP_SLOWDOWN)
        first = s.stage == 0
        drain = s.stage * slot_b / v       # backward slots the earlier stages run after this one ends
        fill = s.stage * slot_f / v        # forward slots before this stage's first forward
        if overlap_dp:
            if first or v > 1:
                backward = s.bwd_s + s.recompute_s - s.cp_hidden_bwd_s - shared   # compute free to hide it
                own = maximum(_chunked_exposure(s.dp_sync_s, backward, m, p, v), s.dp_sync_s * last_bucket)
                slowed = slowed + (s.dp_sync_s - own)
                # a later stage's chunks: its own cool-down hides them first, then the drain
                grad = own if first else maximum(own - drain, 0.0)
            else:       # one bucket, launched when the stage's backward ends
                grad = maximum(s.dp_sync_s - drain, 0.0)
        else:
            grad = s.dp_sync_s
        if overlap_param_gather:
            if first or v > 1:
                own = maximum(_chunked_exposure(s.param_gather_s, s.fwd_s - s.cp_hidden_fwd_s - shared, m, p, v),
                              s.param_gather_s * last_bucket)
                slowed = slowed + (s.param_gather_s - own)
                gather = own if first else maximum(own - fill, 0.0)
            else:       # one all-gather, waited for at the stage's first forward
                gather = maximum(s.param_gather_s - fill, 0.0)
        else:
            gather = s.param_gather_s
        dp_exposed = maximum(dp_exposed, grad + gather + OVERLAP_SLOWDOWN * slowed)
        opt = maximum(opt, s.optimizer_s)
    breakdown = {
        "compute": m * (cs("fwd_s") + cs("bwd_s")),
        "recompute": m * cs("recompute_s"),
        "tp_comm": m * cs("tp_s"),
        "cp_comm": m * cs("cp_s"),
        "ep_comm": m * pick(crit, exposed_ep),
        "moe_imbalance": m * cs("moe_imbalance_s"),
        "pp_comm": pp_comm,
        "dp_comm": dp_exposed + m * cs("fsdp_s") + step_copies,
        "bubble": bubble,
        "optimizer": opt,
        "other": m * cs("overhead_s"),
    }
    breakdown["stragglers"] = straggler_s(breakdown, straggler_slowdown, m * cs("host_idle_s"))
    return breakdown, crit
