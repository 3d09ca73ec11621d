"""The schedule: price a batch of plans of one job at once, from the graph's ops to step time and memory.

This is clustertwin's one pricing pipeline. ``predict`` prices a batch of one plan through it
(``price_plan``), ``search`` prices millions (``BatchPricer.run``), and the report samples every
feasible plan (``BatchPricer.price``) through the same code.

The ops of a layer depend only on its shape class — (tp, cp, micro-batch, sp, ep) with the job's
sequence length, precision and kernels — so each shape class is built and priced once
(``layer_ops`` and the ``Pricer``, block by block: embedding, dense layer, MoE layer, head), and a
stage of any plan is the sum of its priced blocks. Plans sharing a pipeline layout (pp, vpp) share
their stage classes, and the schedule (``compose_step``) and memory (``stage_memory``) formulas run
on arrays holding all of them. Memory is priced first: a plan that does not fit is never timed.

A batch is a ``PlanSet`` (the job, the plan fields held fixed and the values each searched option
may take) and a list of ``Structure`` (the sizes of a plan: tp, pp, vpp, cp, dp, ep, micro-batch).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np

from ..arith import Num, logical_and, maximum, where
from ..cost.compute import OPTIMIZER_KERNELS, ComputePricer
from ..cost.network import NetworkPricer
from ..cost.profile import HardwareProfile, default_profile
from ..parallel.layout import GroupPlacement, expert_dp_size, group_placements, place_group
from ..parallel.rules import (Capabilities, JobFacts, PlanFacts, Rule, rules_at, tp_overlap_possible,
                              tp_overlap_without_sp)
from ..specs import ClusterSpec, ModelSpec, stage_layer_split
from ..specs.framework import adam_step_bytes, for_plan, get_framework
from ..specs.plan import Plan, ep_overlap_layout
from ..workload.graph import (StageParams, dp_collectives, fsdp2_copies, fsdp_keeps_root, fsdp_per_unit, fsdp_units, layer_context, optimizer_traffic,
                              param_gather_bytes,
                              pipeline_message_bytes,
                              layer_recompute_ops, recompute_mode, recompute_ops, stage_layers, stage_params)
from ..workload.ops import OpKind, Phase
from ..workload.transformer import LayerContext, embedding_ops, head_ops, layer_ops, mtp_ops, stack_contexts, stack_key
from .stragglers import job_group_slowdown
from .memory import DUALPIPE, MemoryEstimate, cp_ring_transient_bytes, in_flight, layer_activation_bytes, stage_memory
from .step import (EP_OVERLAP_COMM_SMS, OVERLAP_SLOWDOWN, ManyPricer, Pricer, StageTime, StepEstimate, accumulate_ops,
                   compose_step, dualpipe_rank, exposed_cp, exposed_fsdp, exposed_tp, hidden_cp, pass_walls, runs_dualpipe,
                   step_bucket, tp_overlap_chunks)

RECOMPUTE_MODES = ("none", "selective", "full")

# plan fields a PlanSet may hold fixed beyond the searched ones (predict holds every field)
_JOB_FIELDS = ("etp", "attention_kernel", "moe_dispatcher", "grad_reduce_dtype", "moe_routing", "moe_placement",
               "moe_capacity_factor", "moe_pad_to_capacity", "first_stage_layers", "last_stage_layers", "pp_schedule", "overlap_ep_comm",
               "fp8_recipe", "cuda_graph_scope", "recompute_modules", "adam_moments_dtype", "master_weights",
               "master_weights_dtype", "fp8_params", "defer_embedding_wgrad")

# per block and phase: compute seconds, exposed TP and MoE communication, CP ring and attention time
# (tp_s, ep_s, moe_imb, tp_excess: both passes; the *_fwd fields: the forward's part of them, for the
# compute stream's wall of each pass, ``pass_walls``)
_FIELDS = ("fwd_s", "bwd_s", "recompute_s", "tp_s", "ep_s", "cp_fwd", "cp_bwd", "cp_rc", "attn_fwd", "attn_bwd",
           "attn_rc", "moe_imb", "tp_excess", "wgrad_s", "tp_fwd", "ep_fwd", "moe_imb_fwd", "tp_excess_fwd",
           "host_idle")
_F = {name: i for i, name in enumerate(_FIELDS)}
_BLOCKS = ("embedding", "layer", "moe_layer", "head")
# below this many shape classes to price, pricing them one by one is faster than stacking them
_STACK_FROM = 8


def _code(ctx_id, overlap_tp, mode):
    """A shape class as one int (ints or arrays): context, TP overlap, index in RECOMPUTE_MODES."""
    return (ctx_id * 2 + overlap_tp) * 3 + mode


@dataclass(frozen=True)
class Structure:
    """The sizes of a plan (its options aside): everything the pipeline layout and shapes depend on."""

    tp: int
    pp: int
    vpp: int
    cp: int
    dp: int
    ep: int
    micro_batch: int


@dataclass(frozen=True)
class PlanSet:
    """One job and the plans of it to price: the fields held fixed and the values each option may take.

    An option held in ``fixed`` takes that value only; otherwise its domain holds every value that
    changes something under the rest of the plan (sequence parallelism only with TP, say), so that
    no plan is priced twice. ``max_memory_fraction`` above 1 (``math.inf``) times plans that do not
    fit too (predict reports them)."""

    model: ModelSpec
    cluster: ClusterSpec
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    framework: str = "megatron"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    max_memory_fraction: float = 1.0

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def memory_limit_bytes(self) -> float:
        return self.max_memory_fraction * self.cluster.gpu.hbm_bytes

    # ---- the options' domains (ints, as a structure has them) ---------------------------------
    def sp_domain(self, tp: int) -> tuple[bool, ...]:
        return (self.fixed["sp"],) if "sp" in self.fixed else ((False, True) if tp > 1 else (False,))

    def overlap_tp_domain(self, tp: int, sp: bool = True) -> tuple[bool, ...]:
        """TP overlap's values under sequence parallelism ``sp``: held fixed, or (False, True) where it
        matters; without sp only False (``tp_overlap_sp``), and a fixed True there is refused by
        that rule (``SearchSpace.option_refusals``)."""
        return self._flag("overlap_tp_comm", bool(self.tp_overlap_matters(tp, sp)))

    def overlap_pp_domain(self, pp: int) -> tuple[bool, ...]:
        return self._flag("overlap_pp_comm", pp > 1)

    def tp_overlap_matters(self, tp, sp=True):
        """Whether overlap_tp_comm changes anything (ints or arrays): with TP, the TP group in one
        NVLink domain and sequence parallelism on (``tp_overlap_possible``)."""
        return (tp > 1) & tp_overlap_possible(tp, self.cluster.gpus_per_node, sp)

    def dp_overlap_matters(self, dp_cp, zero, pp):
        """Whether overlap_dp_comm changes anything (ints or arrays): with a DP group, for ZeRO 0-2, and
        for ZeRO-3 where the framework reduces once per step under PP (torchtitan)."""
        per_step = get_framework(self.framework).fsdp_unsharded_with_pp
        return (dp_cp > 1) & ((zero < 3) | ((pp > 1) & per_step))

    def overlap_dp_domain(self, dp_cp: int, zero: int, pp: int = 1) -> tuple[bool, ...]:
        return self._flag("overlap_dp_comm", bool(self.dp_overlap_matters(dp_cp, zero, pp)))

    def overlap_param_gather_domain(self, dp_cp: int, zero: int) -> tuple[bool, ...]:
        return self._flag("overlap_param_gather", dp_cp > 1 and zero > 0)

    def _flag(self, name: str, matters: bool) -> tuple[bool, ...]:
        if name in self.fixed:
            return (self.fixed[name],)
        return (False, True) if matters else (False,)

    def zero_domain(self, dp_cp: int) -> tuple[int, ...]:
        if "zero_stage" in self.fixed:
            return (self.fixed["zero_stage"],)
        return (0, 1, 2, 3) if dp_cp > 1 else (0, 3)   # ZeRO 1/2 shard nothing over one rank

    @cached_property
    def recompute_domain(self) -> tuple[str, ...]:
        return (self.fixed["recompute"],) if "recompute" in self.fixed else RECOMPUTE_MODES

    def option_count(self, tp: int, pp: int, dp_cp: int) -> int:
        """Candidates a structure stands for: its sp x recompute x ZeRO x overlap options."""
        zero_overlaps = sum(len(self.overlap_param_gather_domain(dp_cp, z)) * len(self.overlap_dp_domain(dp_cp, z, pp))
                            for z in self.zero_domain(dp_cp))
        tp_overlaps = sum(len(self.overlap_tp_domain(tp, sp)) for sp in self.sp_domain(tp))
        return len(self.recompute_domain) * tp_overlaps * len(self.overlap_pp_domain(pp)) * zero_overlaps

    # ---- the same domains for arrays of structures (the pricer's rows) ------------------------
    @cached_property
    def facts(self) -> JobFacts:
        """What the plan rules read of this job (the model, the cluster, the sequence, the framework)."""
        return JobFacts.of(self.model, self.cluster, self.seq_len, get_framework(self.framework))

    @cached_property
    def option_rules(self) -> tuple[Rule, ...]:
        """The framework's capability rules on the options (ZeRO stage, TP overlap); none for a
        framework that runs every plan."""
        return () if self.facts.can == Capabilities() else rules_at("options")

    def flag_allows(self, name: str, value: bool, matters: np.ndarray, refused: np.ndarray | None = None) -> np.ndarray:
        """Rows whose domain of the overlap flag ``name`` holds ``value`` (``matters``: rows where it
        does something) and whose framework can run it (TP overlap: ``framework_tp_overlap``).
        ``refused``: rows where ``value`` True breaks a rule even when held fixed (TP overlap with
        tp > 1 and no sequence parallelism: ``tp_overlap_sp``)."""
        if name in self.fixed:
            allows = np.full(matters.shape, self.fixed[name] == value)
        else:
            allows = matters.copy() if value else np.ones(matters.shape, dtype=bool)
        if name == "overlap_tp_comm" and value and not self.facts.can.tp_overlap:
            allows &= ~matters     # where it matters tp > 1, and the framework cannot overlap TP
        if value and refused is not None:
            allows &= ~refused
        return allows

    def flag_count(self, name: str, matters: np.ndarray, refused: np.ndarray | None = None) -> np.ndarray:
        """Values of the overlap flag ``name`` each row may take (see ``flag_allows``)."""
        return (self.flag_allows(name, False, matters, refused).astype(int)
                + self.flag_allows(name, True, matters, refused))

    def zero_allows(self, zero: int, dp_cp: np.ndarray, *, tp=1, pp=1, cp=1) -> np.ndarray:
        """Rows (structures of sizes tp, pp, cp, dp*cp: ints or arrays) whose ZeRO domain holds
        ``zero`` and whose framework can run it."""
        if "zero_stage" in self.fixed:
            allows = np.full(dp_cp.shape, self.fixed["zero_stage"] == zero)
        else:
            allows = np.full(dp_cp.shape, True) if zero in (0, 3) else dp_cp > 1
        for r in self.option_rules:
            if r.name in ("framework_tp_overlap", "tp_overlap_sp"):
                continue
            allows &= ~np.broadcast_to(np.asarray(r.broken(self.facts, PlanFacts(
                tp, pp=pp, cp=cp, dp=dp_cp // cp, zero_stage=zero)), dtype=bool), dp_cp.shape)
        return allows


@dataclass(frozen=True)
class Candidate:
    """A plan of a PlanSet with the step time and memory the batch pricing gave it."""

    structure: Structure
    sp: bool
    recompute: str
    zero_stage: int
    overlap_tp_comm: bool
    overlap_dp_comm: bool
    overlap_param_gather: bool
    overlap_pp_comm: bool
    step_time_s: float
    memory_bytes: float

    def plan(self, plans: PlanSet) -> Plan:
        s = self.structure
        fields = dict(tp=s.tp, pp=s.pp, vpp=s.vpp, dp=s.dp, cp=s.cp, ep=s.ep, sp=self.sp, zero_stage=self.zero_stage,
                      micro_batch=s.micro_batch, global_batch=plans.global_batch, recompute=self.recompute,
                      precision=plans.precision, overlap_tp_comm=self.overlap_tp_comm,
                      overlap_dp_comm=self.overlap_dp_comm, overlap_param_gather=self.overlap_param_gather,
                      overlap_pp_comm=self.overlap_pp_comm)
        for k in _JOB_FIELDS:
            if k in plans.fixed:
                fields[k] = plans.fixed[k]
        return Plan(**fields)


@dataclass
class Evaluation:
    candidates: list[Candidate]      # the best ``keep`` by step time, fastest first
    feasible: int                    # candidates that fit in memory
    memory_pruned: int
    shape_classes: int               # distinct (layer shape, tp overlap, recompute) priced


@dataclass(frozen=True)
class _StageClass:
    first: int
    n_dense: int
    n_moe: int
    is_first: bool
    is_last: bool
    layer_ids: tuple[int, ...]


@dataclass(frozen=True)
class PricedRows:
    """What one timed batch of a layout tells a sink, row by row (arrays over the rows)."""

    step_time_s: np.ndarray
    memory_bytes: np.ndarray
    valid: np.ndarray                     # rows that belong to the batch's plans under these overlaps
    ref: tuple                            # decodes a row into a Candidate (``BatchPricer.candidate``)
    breakdown_s: dict[str, Num]
    critical_class: Any                   # index into ``stages`` (array)
    stage_classes: list[StageTime]        # the distinct stages (array fields)
    stage_class: list[int]                # the class of each stage
    memory_of: Any                        # row index -> memory breakdown of each class (list of dicts)

    def at(self, i: int) -> "PricedRows":
        """Row ``i`` alone, in floats (predict's view)."""
        def f(v) -> Any:
            if v is None:       # StageTime.pair_ep_s of a stage outside DualPipe
                return v
            if isinstance(v, np.ndarray):
                return float(v[i]) if v.ndim else float(v)
            return float(v)

        stages = [StageTime(int(st.stage), **{k: f(v) for k, v in st.__dict__.items() if k != "stage"})
                  for st in self.stage_classes]
        return PricedRows(np.array([f(self.step_time_s)]), np.array([f(self.memory_bytes)]), np.array([True]),
                          self.ref, {k: f(v) for k, v in self.breakdown_s.items()}, int(f(self.critical_class)),
                          stages, self.stage_class, lambda _j: self.memory_of(i))


class TopK:
    """A sink keeping the ``k`` fastest plans seen."""

    def __init__(self, k: int):
        self.k = k
        self.times: list[np.ndarray] = []
        self.mems: list[np.ndarray] = []
        self.info: list[tuple] = []

    def offer(self, rows: PricedRows) -> None:
        times = rows.step_time_s
        idx = np.flatnonzero(rows.valid)
        if idx.size > self.k:
            idx = idx[np.argpartition(times[idx], self.k - 1)[: self.k]]
        if idx.size:
            self.times.append(times[idx])
            self.mems.append(rows.memory_bytes[idx])
            self.info.append((rows.ref, idx))

    def best(self) -> list[tuple[float, float, tuple, int]]:
        out = [(float(t), float(mem), info, int(i)) for (info, idx), ts, ms in zip(self.info, self.times, self.mems)
               for t, mem, i in zip(ts, ms, idx)]
        out.sort(key=lambda x: (x[0], x[1]))
        return out[: self.k]


class BatchPricer:
    """Prices the plans of one PlanSet; shape classes are memoized across calls (and PlanSets of
    the same model, sequence, precision, framework and fixed fields on the same kind of node)."""

    def __init__(self, plans: PlanSet, profile: HardwareProfile | None = None):
        self.plans = plans
        self._key = _shape_key(plans)
        self.model = plans.model
        self.profile = profile or default_profile(plans.cluster.gpu)
        # the framework with what a calibrated profile fitted for it (launch floor, ...)
        self.fw = for_plan(self.profile.framework(get_framework(plans.framework)),
                           SimpleNamespace(precision=plans.precision, **plans.fixed))
        self.network = NetworkPricer(plans.cluster, self.profile)
        self.kernel = plans.fixed.get("attention_kernel") or self.fw.attention_kernel
        self.etp = plans.fixed.get("etp")
        self.dispatcher = plans.fixed.get("moe_dispatcher") or self.fw.moe_dispatcher
        self.schedule = plans.fixed.get("pp_schedule")      # None: the framework's default where it can run
        # Megatron-Core's EP all-to-all overlap (combined 1F1B): the plan's, else the framework's default
        ep_overlap = plans.fixed.get("overlap_ep_comm")
        self.ep_overlap = self.fw.overlap_ep_comm if ep_overlap is None else bool(ep_overlap)
        # the stack caches Linear inputs in FP8 (hai-llm: DeepSeek-V3 Sec. 3.3.3) under FP8 training
        self.fp8_cache = self.fw.fp8_activation_cache and plans.precision == "fp8"
        # Transformer Engine's FP8 GEMMs save their inputs in FP8 (megatron, nemo)
        self.te_fp8 = self.fw.te_fp8_saved_inputs and plans.precision == "fp8"
        self._computes: dict[tuple[int, int], ComputePricer] = {}
        self._memory_bound = ComputePricer(plans.cluster.gpu, self.profile, self.fw)  # optimizer steps
        self._ctx: dict[tuple, int] = {}
        self._contexts: list[LayerContext] = []
        # priced shape classes: the block table's row of each code (ctx, tp overlap, recompute mode;
        # ``_code``), -1 where not priced yet; rows of (blocks x fields)
        self._ids = np.full(0, -1, dtype=np.int64)
        self._table = np.zeros((0, len(_BLOCKS), len(_FIELDS)))
        self._n_blocks = 0
        self._placed: dict[tuple[int, int, int], dict[str, GroupPlacement]] = {}
        self._acts: dict[tuple, float] = {}
        self._act_arrays: dict[tuple[bool, str], np.ndarray] = {}
        self._params: dict[tuple, StageParams] = {}
        self._layouts: dict[tuple, tuple[list[_StageClass], list[int]]] = {}

    # ---- shape classes -----------------------------------------------------------------------
    def _plan_ns(self, tp: int, cp: int = 1, ep: int = 1, mb: int = 1, sp: bool = False, pp: int = 1, dp: int = 1,
                 overlap_tp: bool = False) -> Any:
        """The plan fields the graph's builders read (``layer_context``, ``stage_params``), for a shape class."""
        f = self.plans.fixed
        return SimpleNamespace(tp=tp, cp=cp, ep=ep, etp=self.etp, micro_batch=mb, sp=sp, pp=pp, dp=dp,
                               precision=self.plans.precision, attention_kernel=self.kernel,
                               moe_dispatcher=self.dispatcher, overlap_tp_comm=overlap_tp,
                               moe_routing=f.get("moe_routing", "uniform"),
                               moe_placement=f.get("moe_placement", "sequential"),
                               moe_capacity_factor=f.get("moe_capacity_factor"),
                               moe_pad_to_capacity=f.get("moe_pad_to_capacity", False),
                               fp8_recipe=f.get("fp8_recipe"))

    def context_id(self, tp: int, cp: int, mb: int, sp: bool, ep: int) -> int:
        key = (tp, cp, mb, sp, ep)
        i = self._ctx.get(key)
        if i is None:
            plan = self._plan_ns(tp, cp, ep, mb, sp)
            i = self._ctx[key] = len(self._contexts)
            self._contexts.append(layer_context(self.model, plan, self.plans.seq_len, self.fw))
        return i

    def _activation(self, ctx_id: int, moe: bool, rc: str) -> float:
        key = (ctx_id, moe, rc)
        v = self._acts.get(key)
        if v is None:
            v = self._acts[key] = layer_activation_bytes(self._contexts[ctx_id], moe, recompute_mode(rc, self.fw),
                                                         self.fp8_cache, self.te_fp8)
        return v

    def _activations(self, ctx_ids: np.ndarray, moe: bool, rc: str) -> np.ndarray:
        """``_activation`` of each context of ``ctx_ids`` (an array over them)."""
        key = (moe, rc)
        have = self._act_arrays.get(key)
        if have is None or have.size < len(self._contexts):
            grown = np.full(len(self._contexts), np.nan)
            if have is not None:
                grown[:have.size] = have
            have = self._act_arrays[key] = grown
        out = have[ctx_ids]
        missing = np.isnan(out)
        if missing.any():
            for c in set(ctx_ids[missing].tolist()):    # (plain np.unique imports numpy.ma: 20 ms once)
                have[c] = self._activation(c, moe, rc)
            out = have[ctx_ids]
        return out

    def _pricer(self, tp: int, cp: int, ep: int, overlap_tp: bool) -> Pricer:
        plan = self._plan_ns(tp, cp, ep, overlap_tp=overlap_tp)
        key = (tp_overlap_chunks(plan), cp)
        compute = self._computes.get(key)
        if compute is None:
            compute = self._computes[key] = ComputePricer(self.plans.cluster.gpu, self.profile, self.fw, *key,
                                                          self.plans.fixed.get("cuda_graph_scope"))
        return Pricer.for_plan(self.plans.cluster, plan, self.fw, self.profile, compute=compute, network=self.network)

    def block_id(self, ctx_id: int, overlap_tp: bool, rc: str) -> int:
        """Index of the priced blocks (embedding, layer, MoE layer, head) of a shape class."""
        return int(self.block_ids(np.array([_code(ctx_id, overlap_tp, RECOMPUTE_MODES.index(rc))]))[0])

    def blocks(self, codes: np.ndarray) -> np.ndarray:
        """The priced blocks of shape classes ``codes`` (``_code``; priced where not yet): for each,
        blocks (embedding, layer, MoE layer, head) x fields (``_FIELDS``)."""
        ids = self.block_ids(codes)
        return self._table[ids]

    def block_ids(self, codes: np.ndarray) -> np.ndarray:
        """Rows of the block table of shape classes ``codes`` (``_code``), pricing those not priced yet."""
        if codes.size and codes.max() < self._ids.size:
            ids = self._ids[codes]
            if ids.min() >= 0:     # all priced already (predict's repeated calls)
                return ids
        uniq, inverse = np.unique(codes, return_inverse=True)
        if uniq.size and uniq[-1] >= self._ids.size:
            grown = np.full(max(int(uniq[-1]) + 1, 2 * self._ids.size), -1, dtype=np.int64)
            grown[:self._ids.size] = self._ids
            self._ids = grown
        ids = self._ids[uniq]
        missing = uniq[ids < 0]
        if missing.size:
            self._price_codes(missing)
            ids = self._ids[uniq]
        return ids[inverse.reshape(-1)]

    def _store(self, codes: np.ndarray, rows: np.ndarray) -> None:
        n = self._n_blocks + len(codes)
        if n > len(self._table):
            grown = np.zeros((max(n, 2 * len(self._table)), len(_BLOCKS), len(_FIELDS)))
            grown[:self._n_blocks] = self._table[:self._n_blocks]
            self._table = grown
        self._table[self._n_blocks:n] = rows
        self._ids[codes] = np.arange(self._n_blocks, n)
        self._n_blocks = n

    def _price_codes(self, codes: np.ndarray) -> None:
        """Price the shape classes ``codes``: stacked by op-list structure (``stack_key``), each stack
        at once (``ManyPricer``); one by one with a measured profile, or when there are few."""
        ctx, otp, mode = codes // 6, (codes // 3) % 2, codes % 3
        if self.profile.tables is not None or len(codes) < _STACK_FROM:
            base: dict[tuple[int, int], np.ndarray] = {}
            rows = []
            for c_id, o, r in zip(ctx.tolist(), otp.tolist(), mode.tolist()):
                c = self._contexts[c_id]
                pricer = self._pricer(c.tp, c.cp, c.ep, bool(o))
                if (c_id, o) not in base:   # forward and backward do not depend on the recompute mode
                    base[(c_id, o)] = self._price_blocks(c, pricer, None)
                rows.append(base[(c_id, o)] + self._price_blocks(c, pricer, RECOMPUTE_MODES[r]))
            self._store(codes, np.array(rows))
            return
        pairs, pair_of = np.unique(ctx * 2 + otp, return_inverse=True)
        pair_of = pair_of.reshape(-1)
        ops_heads = self.fw.selective_recompute == "ops"
        stacks: dict[tuple, list[int]] = {}
        for i, pair in enumerate(pairs.tolist()):
            stacks.setdefault(stack_key(self._contexts[pair // 2], heads=ops_heads), []).append(i)
        for members in stacks.values():
            sel = np.array(members)
            cs = [self._contexts[int(p) // 2] for p in pairs[sel]]
            o = (pairs[sel] % 2).astype(bool)
            vc = stack_contexts(cs)
            many = self._many_pricer(cs, o)
            built: dict[Any, Any] = {}
            base_rows = self._price_blocks(vc, many, None, built)
            # the codes of this stack, by recompute mode
            in_stack = np.full(len(pairs), -1)
            in_stack[sel] = np.arange(len(sel))
            at = in_stack[pair_of]
            for r in sorted(set(mode[at >= 0].tolist())):
                pick_ = np.flatnonzero((at >= 0) & (mode == r))
                rc_rows = self._price_blocks(vc, many, RECOMPUTE_MODES[r], built)
                self._store(codes[pick_], base_rows[at[pick_]] + rc_rows[at[pick_]])

    def _many_pricer(self, cs: list[LayerContext], otp: np.ndarray) -> ManyPricer:
        """A pricer of the shape classes of contexts ``cs`` with TP overlap ``otp`` (one each)."""
        tp = np.array([c.tp for c in cs])
        chunks = np.where(otp & (tp > 1), tp, 1)      # tp_overlap_chunks of each plan
        placed = []
        for c in cs:
            key = (c.tp, c.cp, c.ep)
            pl = self._placed.get(key)
            if pl is None:
                pl = self._placed[key] = group_placements(self._plan_ns(c.tp, c.cp, c.ep),
                                                          self.plans.cluster.gpus_per_node)
            placed.append(pl)
        groups = {}
        for name in placed[0]:
            distinct: dict[GroupPlacement, int] = {}
            idx = np.array([distinct.setdefault(pl[name], len(distinct)) for pl in placed])
            groups[name] = (list(distinct), idx)
        compute = self._computes.get((1, 1))
        if compute is None:
            compute = self._computes[(1, 1)] = ComputePricer(self.plans.cluster.gpu, self.profile, self.fw, 1, 1,
                                                                   self.plans.fixed.get("cuda_graph_scope"))
        return ManyPricer(compute, self.network, chunks, np.array([c.cp for c in cs]), groups, len(cs))

    def _price_blocks(self, c: LayerContext, pricer: Any, rc: str | None, built: dict | None = None) -> np.ndarray:
        """Per block, the fields of one phase group: forward and backward (``rc`` None), or the
        recomputation ``rc`` adds. ``built`` (a dict, for stacked contexts: ``stack_contexts``
        priced by a ManyPricer): the blocks' ops built so far, and the rows come back stacked."""
        m = self.model
        stacked = built is not None
        made: dict[Any, Any] = built if built is not None else {}
        n = pricer.n if stacked else 0
        out = np.zeros((n, len(_BLOCKS), len(_FIELDS)) if stacked else (len(_BLOCKS), len(_FIELDS)))

        def _with_mtp(head, c, stacked: bool):
            """The head's ops and the MTP modules after it (as build_graph puts them on the last stage)."""
            if not m.mtp_depth:
                return head
            f, b = mtp_ops(c, m.vocab_size, self.fw.fused_cross_entropy, m.is_moe_layer(m.num_layers),
                           m.mtp_depth, stacked)
            return (*head[0], *f), (*b, *head[1])

        def ops_of(what: str, moe: bool = False):
            if not stacked:
                if what == "layer":
                    return layer_ops(c, moe)
                if what == "embedding":
                    return embedding_ops(c, m.vocab_size, m.positions == "learned")
                return _with_mtp(head_ops(c, m.vocab_size, self.fw.fused_cross_entropy), c, False)
            key = (what, moe)
            if key not in made:
                if what == "layer":
                    made[key] = layer_ops.__wrapped__(c, moe)
                elif what == "embedding":
                    made[key] = embedding_ops.__wrapped__(c, m.vocab_size, m.positions == "learned")
                else:
                    made[key] = _with_mtp(head_ops.__wrapped__(c, m.vocab_size, self.fw.fused_cross_entropy), c,
                                          True)
            return made[key]

        for b, name in enumerate(_BLOCKS):
            if name in ("layer", "moe_layer"):
                if name == "moe_layer" and not m.is_moe:
                    continue
                f, bwd, core = ops_of("layer", name == "moe_layer")
            elif rc is not None:
                continue  # embedding and head are not recomputed
            elif name == "embedding":
                (f, bwd), core = ops_of("embedding"), ()
            else:
                (f, bwd), core = ops_of("head"), ()
            st = StageTime(0)
            if rc is None:
                cp_f, attn_f = accumulate_ops(st, [(op, 1) for op in f], Phase.FWD, pricer)
                # the forward's, so far (copies: accumulate_ops adds to the fields' arrays in place)
                fwd_waits = tuple(np.array(v, dtype=float) for v in (st.tp_s, st.ep_s, st.moe_imbalance_s,
                                                                      st.tp_excess_s))
                cp_b, attn_b = accumulate_ops(st, [(op, 1) for op in bwd], Phase.BWD, pricer)
                vals = (st.fwd_s, st.bwd_s, 0.0, st.tp_s, st.ep_s, cp_f, cp_b, 0.0, attn_f, attn_b, 0.0,
                        st.moe_imbalance_s, st.tp_excess_s, st.wgrad_s, *fwd_waits, st.host_idle_s)
            else:
                mode = recompute_mode(rc, self.fw)
                ops = (recompute_ops(mode, f, core, c, name == "moe_layer") if stacked
                       else layer_recompute_ops(c, name == "moe_layer", mode))
                cp_r, attn_r = accumulate_ops(st, [(op, 1) for op in ops], Phase.RECOMPUTE, pricer)
                vals = (0.0, 0.0, st.recompute_s, st.tp_s, st.ep_s, 0.0, 0.0, cp_r, 0.0, 0.0, attn_r,
                        st.moe_imbalance_s, st.tp_excess_s, 0.0, 0.0, 0.0, 0.0, 0.0, st.host_idle_s)
            if stacked:
                for k, v in enumerate(vals):
                    out[:, b, k] = v
            else:
                out[b] = vals
        return out

    # ---- layouts -----------------------------------------------------------------------------
    def layout(self, pp: int, vpp: int, every_stage: bool = False) -> tuple[list[_StageClass], list[int]]:
        """The distinct stages of a pipeline layout (as build_graph tells them apart) and the class of
        each stage; ``every_stage``: one class per stage (its memory depends on its place in the pipeline)."""
        key = (pp, vpp, every_stage)
        if key in self._layouts:
            return self._layouts[key]
        f = self.plans.fixed
        split = stage_layer_split(self.model.num_layers, pp, vpp, f.get("first_stage_layers"),
                                  f.get("last_stage_layers"))
        classes: list[_StageClass] = []
        keys: dict[tuple, int] = {}
        stage_class = []
        for i, (chunks, layer_ids) in enumerate(stage_layers(split, pp, vpp)):
            n_moe = sum(self.model.is_moe_layer(li) for li in layer_ids)
            stage_key = (len(layer_ids) - n_moe, n_moe, i == 0, i == pp - 1, tuple(split[c] for c in chunks),
                         i if every_stage else None)
            if stage_key not in keys:
                keys[stage_key] = len(classes)
                classes.append(_StageClass(i, stage_key[0], n_moe, i == 0, i == pp - 1, tuple(layer_ids)))
            stage_class.append(keys[stage_key])
        self._layouts[key] = (classes, stage_class)
        return classes, stage_class

    def _stage_params(self, tp: int, ep: int, pp: int, k: _StageClass) -> StageParams:
        key = (tp, ep, pp, k.layer_ids, k.is_first, k.is_last)
        v = self._params.get(key)
        if v is None:
            v = self._params[key] = stage_params(self.model, self._plan_ns(tp, ep=ep, pp=pp), list(k.layer_ids),
                                                 k.is_first, k.is_last)
        return v

    # ---- pricing -----------------------------------------------------------------------------
    def _use(self, plans: PlanSet | None) -> None:
        if plans is not None:
            if _shape_key(plans) != self._key:
                raise ValueError("a BatchPricer prices PlanSets of one job: they may differ in the options held "
                                 "fixed, the GPU count, batch and memory limit only")
            self.plans = plans

    def price(self, structures: list[Structure], sink, plans: PlanSet | None = None,
              every_stage: bool = False, progress: Callable[[int], None] | None = None) -> tuple[int, int]:
        """Price every plan of ``structures`` and offer each timed batch to ``sink`` (an object with
        ``offer(PricedRows)``). ``plans``: another PlanSet of the same job (it may differ in GPU count,
        global batch and memory limit only). ``every_stage``: price every pipeline stage apart (not
        only the distinct ones), for the memory of each. ``progress``: called with the number of plans
        just priced (fit or not) after each pipeline layout. Returns (plans that fit, plans that did not)."""
        self._use(plans)
        groups: dict[tuple[int, int], list[Structure]] = {}
        for s in structures:
            groups.setdefault((s.pp, s.vpp), []).append(s)
        feasible = pruned = 0
        layouts = []
        for (pp, vpp), ss in groups.items():
            lay = _Layout(self, pp, vpp, ss, every_stage)
            layouts.append((lay, *lay.memory()))
        # the shape classes every layout's plans that fit need, priced together (stacked widest)
        codes = [lay.block_codes(lay.rows(fits)) for lay, _, _, fits in layouts if fits]
        if codes:
            self.block_ids(np.concatenate(codes))
        for lay, f, p, fits in layouts:
            if fits:
                lay.time(fits, sink)
            feasible += f
            pruned += p
            if progress is not None:
                progress(f + p)
        return feasible, pruned

    def run(self, structures: list[Structure], keep: int, plans: PlanSet | None = None,
            progress: Callable[[int], None] | None = None) -> Evaluation:
        """Price ``structures`` and keep the ``keep`` fastest plans (``progress``: as ``price``)."""
        best = TopK(keep)
        feasible, pruned = self.price(structures, best, plans, progress=progress)
        cands = [self.candidate(ref, i, t, mem) for t, mem, ref, i in best.best()]
        return Evaluation(cands, feasible, pruned, self._n_blocks)

    def candidate(self, ref: tuple, i: int, step_time_s: float = 0.0, memory_bytes: float = 0.0) -> Candidate:
        """The plan of row ``i`` of a timed batch (``PricedRows.ref``)."""
        ss, rows, odp, opg, opp = ref
        s_idx, sp, rc, zero, otp = rows[i]
        return Candidate(ss[s_idx], bool(sp), self.plans.recompute_domain[rc], int(zero), bool(otp), odp, opg, opp,
                         step_time_s, memory_bytes)


class _Layout:
    """The plans of one pipeline layout (pp, vpp): their rows, memory, then step time."""

    def __init__(self, pricer: BatchPricer, pp: int, vpp: int, ss: list[Structure], every_stage: bool = False):
        self.pr, self.pp, self.vpp, self.ss = pricer, pp, vpp, ss
        plans, model = pricer.plans, pricer.model
        # DualPipe where the plan or the framework asks for it and it can run (pp even, not interleaved;
        # Plan refuses an explicit dualpipe otherwise): each rank holds stages i and pp-1-i, so the
        # stages are priced one by one and paired (``_partner``)
        self.dualpipe = runs_dualpipe(pricer.schedule, pricer.fw, pp, vpp)
        self.classes, self.stage_class = pricer.layout(pp, vpp, every_stage or self.dualpipe)
        # Megatron-Core's EP all-to-all overlap where it runs: no pipeline or an interleaved one (Plan refuses
        # it asked for outright otherwise), never beside DualPipe, which overlaps the all-to-alls itself
        self.ep_overlap = pricer.ep_overlap and not self.dualpipe and ep_overlap_layout(pp, vpp)
        # rows of (structure, sp)
        s_rows, sp_rows, ctx_rows = [], [], []
        for i, s in enumerate(ss):
            for sp in plans.sp_domain(s.tp):
                s_rows.append(i)
                sp_rows.append(sp)
                ctx_rows.append(pricer.context_id(s.tp, s.cp, s.micro_batch, sp, s.ep))
        self.s_rows, self.sp_rows, self.ctx_rows = np.array(s_rows), sp_rows, ctx_rows
        self.ctx_ids = np.array(ctx_rows, dtype=np.int64)
        self.tp = np.array([s.tp for s in ss])
        self.cp = cp = np.array([s.cp for s in ss])
        dp = np.array([s.dp for s in ss])
        self.ep = np.array([s.ep for s in ss])
        mb = np.array([s.micro_batch for s in ss])
        self.dp_cp = dp * cp
        self.etp = np.array([pricer.etp or s.tp for s in ss])
        self.edp = expert_dp_size(self.tp, cp, dp, self.ep, self.etp)
        self.m = plans.global_batch // (dp * mb)
        # parameters per class and structure
        params = [[pricer._stage_params(s.tp, s.ep, pp, k) for s in ss] for k in self.classes]
        self.dense = [np.array([p.dense + p.embedding for p in ps]) for ps in params]
        self.expert = [np.array([p.expert for p in ps]) for ps in params]
        self.embedding = [np.array([p.embedding for p in ps]) for ps in params]
        self.total_params = [np.array([p.total for p in ps]) for ps in params]
        ctxs = pricer._contexts
        self.logits = np.array([ctxs[c].tokens * -(-model.vocab_size // ctxs[c].tp) for c in ctx_rows], dtype=float)
        self.emb_rows = np.array([ctxs[c].norm_rows * ctxs[c].hidden * ctxs[c].act_bytes for c in ctx_rows],
                                 dtype=float)
        # Megatron-Core defer_embedding_wgrad_compute (tensor_parallel/layers.py, core_r0.9.0): the output layer
        # appends its (sequence-parallel) input to embedding_activation_buffer in forward and its logit gradient
        # to grad_output_buffer in backward, up to wgrad_deferral_limit micro-batches (0: all), and computes the
        # weight gradient from them after the pipeline's last backward (schedules.py
        # finish_embedding_wgrad_compute): both live on the last stage until then. Held together with the
        # activations' peak (assumed: the last chunk's backwards run while the warm-up depth is still in flight)
        limit = plans.fixed.get("defer_embedding_wgrad")
        deferred = 0 if limit is None else (self.m if limit == 0 else np.minimum(self.m, limit))
        self.deferred_wgrad = np.asarray(deferred, dtype=float)[self.s_rows] * np.array(
            [ctxs[c].tokens * -(-model.vocab_size // ctxs[c].tp) * ctxs[c].act_bytes
             + ctxs[c].norm_rows * ctxs[c].hidden * ctxs[c].act_bytes for c in ctx_rows], dtype=float) \
            if limit is not None else None
        # per row of (structure, sp): where TP overlap changes something, and where a fixed TP overlap
        # is refused (tp > 1 without sp: rule tp_overlap_sp)
        tp_rows, sp_arr = self.tp[self.s_rows], np.array(sp_rows, dtype=bool)
        self.otp_matters = plans.tp_overlap_matters(tp_rows, sp_arr)
        self.otp_refused = np.asarray(tp_overlap_without_sp(PlanFacts(tp_rows, overlap_tp=True, sp=sp_arr)), dtype=bool)
        self._rows: np.ndarray | None = None
        self.mem_total: dict[tuple[int, int], np.ndarray] = {}
        self.mem_classes: dict[tuple[int, int], list[dict]] = {}

    # ---- memory, per recompute mode and ZeRO stage ----------------------------------------------
    def memory(self) -> tuple[int, int, dict[tuple[int, int], np.ndarray]]:
        pr, plans, model = self.pr, self.pr.plans, self.pr.model
        sr = self.s_rows
        # one row (predict): its numbers as Python numbers, the same formulas without numpy's per-call cost
        val: Callable[[Any], Any] = (lambda a: a.item() if isinstance(a, np.ndarray) else a) if sr.size == 1 \
            else (lambda a: a)
        dp_cp_m, m_m = val(self.dp_cp[sr]), val(self.m[sr])
        n_otp = plans.flag_count("overlap_tp_comm", self.otp_matters, self.otp_refused)    # per row
        n_opp = len(plans.overlap_pp_domain(self.pp))
        v_sched = DUALPIPE if self.dualpipe else self.vpp
        fits: dict[tuple[int, int], np.ndarray] = {}
        feasible = pruned = 0
        # the compiled CP ring's step outputs, alive while one layer's attention runs (cp_ring_transient_bytes):
        # counted with the layer being recomputed (or, without recomputation, the last layer's forward), beside
        # every kept layer in flight
        ring = val(np.array([cp_ring_transient_bytes(c) for c in pr._contexts])[self.ctx_ids])
        for r, rc in enumerate(plans.recompute_domain):
            ctx = self.ctx_ids
            act_d = val(pr._activations(ctx, False, rc))
            act_m: Any = val(pr._activations(ctx, True, rc)) if model.is_moe else None
            trans_d = val(pr._activations(ctx, False, "none")) - act_d
            trans_m: Any = (val(pr._activations(ctx, True, "none")) - act_m) if model.is_moe else None
            for z in (0, 1, 2, 3):
                in_domain = plans.zero_allows(z, self.dp_cp, tp=self.tp, pp=self.pp, cp=self.cp)[sr]
                if not in_domain.any():
                    continue
                worst: Any = None
                per_class: list[dict] = []
                per_extra: list[dict] = []
                for k, cls in enumerate(self.classes):
                    moe = cls.n_moe > 0
                    # the largest layer kind the stage holds: a stage of MoE layers alone never recomputes
                    # a dense layer (and a stage holding the embedding or head alone, no layer)
                    full_layer = maximum(trans_d if cls.n_dense > 0 else 0.0, trans_m if moe else 0.0) \
                        + (ring if cls.n_dense + cls.n_moe > 0 else 0.0)
                    mem = stage_memory(
                        pr.fw, plans.precision, z, pp=self.pp, vpp=self.vpp, microbatches=m_m,
                        dense=val(self.dense[k][sr]),
                        expert=val(self.expert[k][sr]), dp_cp=dp_cp_m, edp=val(self.edp[sr]), layers_dense=cls.n_dense,
                        tp=val(self.tp[sr]),
                        layers_moe=cls.n_moe, act_dense=act_d, act_moe=act_m if moe else 0.0,
                        act_full_layer=full_layer,
                        in_flight_layers=in_flight(self.pp, v_sched, m_m, cls.first, cls.n_dense + cls.n_moe),
                        logits=val(self.logits) if cls.is_last else None,
                        deferred_wgrad_bytes=val(self.deferred_wgrad) if cls.is_last and self.deferred_wgrad is not None
                        else 0.0,
                        embedding_rows_bytes=val(self.emb_rows) if cls.is_first else None,
                        embedding_in_flight=in_flight(self.pp, v_sched, m_m, cls.first, 1),
                        embedding=val(self.embedding[k][sr]))
                    per_class.append(mem)
                    if self.dualpipe:
                        # what the stage adds to the rank that holds it beside its partner: no second CUDA
                        # context, no second layer being recomputed
                        extra = dict(mem)
                        extra["other"] = extra["other"] - pr.fw.base_memory_bytes
                        extra["activations"] = extra["activations"] - full_layer
                        per_extra.append(extra)
                if self.dualpipe:
                    per_class = [{key: mem[key] + per_extra[self._partner(k)][key] for key in mem}
                                 for k, mem in enumerate(per_class)]
                for mem in per_class:
                    tot = sum(mem.values())
                    worst = tot if worst is None else maximum(worst, tot)
                if not isinstance(worst, np.ndarray):
                    worst = np.array([worst])
                ok = (worst <= plans.memory_limit_bytes) & in_domain
                n_opg = plans.flag_count("overlap_param_gather", (self.dp_cp > 1) & (z > 0))
                n_odp = plans.flag_count("overlap_dp_comm", plans.dp_overlap_matters(self.dp_cp, z, self.pp))
                n_opt = n_otp * (n_odp * n_opg)[sr] * n_opp
                feasible += int(n_opt[ok].sum())
                pruned += int(n_opt[in_domain & ~ok].sum())
                if ok.any():
                    fits[(r, z)] = ok
                    self.mem_total[(r, z)] = worst
                    self.mem_classes[(r, z)] = per_class
        return feasible, pruned, fits

    # ---- step time --------------------------------------------------------------------------------
    def rows(self, fits: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
        """The rows to time: (memory row, recompute index, zero, tp overlap) of the plans that fit."""
        if self._rows is None:
            plans = self.pr.plans
            parts = []
            for (r, z), ok in fits.items():
                for otp in (False, True):
                    sel = np.flatnonzero(ok & plans.flag_allows("overlap_tp_comm", otp, self.otp_matters,
                                                                self.otp_refused))
                    if sel.size:
                        parts.append(np.stack([sel, np.full(sel.size, r), np.full(sel.size, z),
                                               np.full(sel.size, int(otp))], axis=1))
            self._rows = np.concatenate(parts)
        return self._rows

    def block_codes(self, rows: np.ndarray) -> np.ndarray:
        """The shape class (``_code``) of each row."""
        modes = np.array([RECOMPUTE_MODES.index(m) for m in self.pr.plans.recompute_domain])
        return _code(np.asarray(self.ctx_rows)[rows[:, 0]], rows[:, 3], modes[rows[:, 1]])

    def time(self, fits: dict[tuple[int, int], np.ndarray], sink) -> None:
        plans = self.pr.plans
        pp, vpp = self.pp, self.vpp
        rows = self.rows(fits)                  # columns: memory row, recompute index, zero, tp overlap
        mrow, r_col, z_col, otp_col = rows.T
        srow = self.s_rows[mrow]
        mem_rows = np.empty(len(rows))
        for (r, z), tot in self.mem_total.items():
            sel = (r_col == r) & (z_col == z)
            mem_rows[sel] = tot[mrow[sel]]

        base_classes = self._stage_times(rows)
        pp_s = self._pipeline_sends(mrow)
        sync, gather, opt, fsdp, nic_shared, cp_shares_link = self._data_parallel(srow, z_col)
        regather: Any = z_col >= 3     # ZeRO-3 re-gathers each unit for its backward; FSDP's ZeRO-2 does not

        # the schedule, per overlap choice
        dp_cp_r = self.dp_cp[srow]
        m_rows: Any = self.m[srow]
        dp_rows: Any = dp_cp_r / self.cp[srow]     # the data-parallel size that sets the gradient bucket
        params_rows: list[Any] = [params_k[srow] for params_k in self.total_params]
        if len(rows) == 1:   # a batch of one (predict): the same formulas on its floats, without numpy's per-call cost
            base_classes = [StageTime(**{k: _one(v) for k, v in st.__dict__.items()}) for st in base_classes]
            pp_s, nic_shared, cp_shares_link, m_rows = _one(pp_s), _one(nic_shared), _one(cp_shares_link), _one(m_rows)
            dp_rows = _one(dp_rows)
            regather = bool(np.asarray(regather).reshape(-1)[0])
            sync, gather, opt = ([_one(x) for x in v] for v in (sync, gather, opt))
            fsdp = [(_one(ag), _one(rs), units, _one(cp), _one(cf), _one(sc), _one(agr), _one(rsr))
                    for ag, rs, units, cp, cf, sc, agr, rsr in fsdp]
            params_rows = [_one(x) for x in params_rows]
        decoder = _RowDecoder(self.s_rows, self.sp_rows, rows)
        # every plan of the batch fills the cluster: the same expected wait for its slowest GPU
        straggler = job_group_slowdown(plans.cluster)

        def memory_of(i: int) -> list[dict]:
            key = (int(r_col[i]), int(z_col[i]))
            return [{k: float(np.asarray(v)[mrow[i]] if np.ndim(v) else v) for k, v in mem.items()}
                    for mem in self.mem_classes[key]]

        for odp, opg in itertools.product((False, True), (False, True)):
            valid = (plans.flag_allows("overlap_dp_comm", odp, plans.dp_overlap_matters(dp_cp_r, z_col, pp))
                     & plans.flag_allows("overlap_param_gather", opg, (dp_cp_r > 1) & (z_col > 0)))
            if not valid.any():
                continue
            for opp in plans.overlap_pp_domain(pp):
                # overlapped pipeline sends crossing nodes share the NICs with the FSDP traffic of the
                # same micro-batch: the forward's activation sends its forward, the gradients its backward
                pp_nic = where(logical_and(opp, nic_shared), pp_s / 2, 0.0) if pp > 1 else 0.0
                stage_times = []
                for k, base in enumerate(base_classes):
                    # the CP ring takes the link the DP/FSDP traffic needs only when both cross nodes
                    # (NICs) or both stay inside one (NVLink); otherwise both hide behind the attention
                    st = StageTime(base.stage, fwd_s=base.fwd_s, bwd_s=base.bwd_s, recompute_s=base.recompute_s,
                                   host_idle_s=base.host_idle_s, wgrad_s=base.wgrad_s,
                                   tp_s=base.tp_s, cp_s=base.cp_s, ep_s=base.ep_s,
                                   moe_imbalance_s=base.moe_imbalance_s, pp_s=pp_s, dp_sync_s=sync[k],
                                   param_gather_s=gather[k], optimizer_s=opt[k],
                                   cp_hidden_fwd_s=base.cp_hidden_fwd_s * cp_shares_link,
                                   cp_hidden_bwd_s=base.cp_hidden_bwd_s * cp_shares_link,
                                   pp_shares_nic=nic_shared, overhead_s=base.overhead_s,
                                   waits_fwd_s=base.waits_fwd_s, cp_open_fwd_s=base.cp_open_fwd_s,
                                   cp_open_bwd_s=base.cp_open_bwd_s)
                    ag, rs, units, copies, copies_fwd, st.step_copies_s, ag_root, rs_root = fsdp[k]
                    fwd_wall, bwd_wall = pass_walls(st)
                    # FSDP2's copies run on the compute stream between the units' kernels: they add to
                    # the pass and, like its compute, hide the next unit's prefetched collectives. Where
                    # the CP ring shares their link, the wall it takes (hidden or waited for) hides no
                    # FSDP traffic: the link is busy with the ring then
                    busy_fwd = st.cp_hidden_fwd_s + base.cp_open_fwd_s * cp_shares_link + pp_nic
                    busy_bwd = st.cp_hidden_bwd_s + base.cp_open_bwd_s * cp_shares_link + pp_nic
                    st.fsdp_s = exposed_fsdp(ag, rs, units, fwd_wall + copies_fwd, bwd_wall + copies - copies_fwd,
                                             opg, busy_fwd, busy_bwd, ag_root, rs_root,
                                             fsdp_keeps_root(self.pr.fw), regather) + copies
                    stage_times.append(st)
                params_of = params_rows
                if self.dualpipe:   # the ranks, each holding two stages
                    stage_times = [dualpipe_rank(st, stage_times[self._partner(k)], st.stage,
                                                 plans.cluster.gpu.sm_count) for k, st in enumerate(stage_times)]
                    params_of = [p_k + params_rows[self._partner(k)] for k, p_k in enumerate(params_rows)]
                gpu = plans.cluster.gpu
                ep_overlap = (gpu.sm_count, EP_OVERLAP_COMM_SMS[self.pr.dispatcher]) if self.ep_overlap else None
                breakdown, crit = compose_step(stage_times, self.stage_class, params_of, m_rows, pp, vpp, opp, odp,
                                               opg, dp_rows, gpu.sm_count if self.dualpipe else 0, ep_overlap,
                                               straggler)
                step = sum(breakdown.values())
                if not isinstance(step, np.ndarray):
                    step = np.array([step])
                sink.offer(PricedRows(step, mem_rows, valid, (self.ss, decoder, odp, opg, opp), breakdown, crit,
                                      stage_times, self.stage_class, memory_of))

    def _partner(self, k: int) -> int:
        """DualPipe: the class of the stage the rank of class ``k`` holds beside it (p-1-i; one class
        per stage)."""
        return self.stage_class[self.pp - 1 - self.classes[k].first]

    def _stage_times(self, rows: np.ndarray) -> list[StageTime]:
        """Each stage class of every row: the sum of its priced blocks, with the communication the
        plan cannot hide."""
        pr = self.pr
        mrow, r_col, _, otp_col = rows.T
        table = pr.blocks(self.block_codes(rows))     # rows x blocks x fields
        tp_r: Any = self.tp[self.s_rows[mrow]].astype(float)
        otp_r: Any = otp_col.astype(bool)
        one = len(rows) == 1          # a batch of one (predict): its floats, the same arithmetic
        if one:
            tp_r, otp_r, blocks = float(tp_r[0]), bool(otp_r[0]), table[0].tolist()
        out = []
        for cls in self.classes:
            counts = (float(cls.is_first), float(cls.n_dense), float(cls.n_moe), float(cls.is_last))
            sums: Any = 0.0 if not one else [0.0] * len(_FIELDS)
            for b, n in enumerate(counts):
                if n:
                    sums = sums + n * table[:, b, :] if not one else [x + n * y for x, y in zip(sums, blocks[b])]
            if not one and not isinstance(sums, np.ndarray):
                sums = np.zeros((len(rows), len(_FIELDS)))

            def total(name: str, sums=sums) -> Any:
                return sums[_F[name]] if one else sums[:, _F[name]]

            st = StageTime(cls.first, fwd_s=total("fwd_s"), bwd_s=total("bwd_s"), recompute_s=total("recompute_s"),
                           ep_s=total("ep_s"), moe_imbalance_s=total("moe_imb"), wgrad_s=total("wgrad_s"),
                           host_idle_s=total("host_idle"))
            st.cp_open_fwd_s = exposed_cp(total("cp_fwd"), total("attn_fwd"))
            st.cp_open_bwd_s = exposed_cp(total("cp_bwd"), total("attn_bwd")) + exposed_cp(total("cp_rc"), total("attn_rc"))
            st.cp_s = st.cp_open_fwd_s + st.cp_open_bwd_s
            st.cp_hidden_fwd_s = hidden_cp(total("cp_fwd"), total("attn_fwd"))
            st.cp_hidden_bwd_s = (hidden_cp(total("cp_bwd"), total("attn_bwd"))
                                  + hidden_cp(total("cp_rc"), total("attn_rc")))
            # the ring's NCCL send/recv slow the attention they hide behind (schedule.overlap_compute_slowdown)
            st.cp_s = st.cp_s + OVERLAP_SLOWDOWN * (st.cp_hidden_fwd_s + st.cp_hidden_bwd_s)
            # overlapped: the first chunk, and what outlasts the GEMMs it runs beside (0 without overlap:
            # the blocks of plans without it are priced without chunks)
            st.tp_s = exposed_tp(total("tp_s"), tp_r, otp_r) + total("tp_excess")
            # the same waits of the forward alone (exposed_tp is linear in its first argument: the
            # backward's part is the rest)
            st.waits_fwd_s = (exposed_tp(total("tp_fwd"), tp_r, otp_r) + total("tp_excess_fwd") + total("ep_fwd")
                              + total("moe_imb_fwd") + st.cp_open_fwd_s + OVERLAP_SLOWDOWN * st.cp_hidden_fwd_s)
            st.overhead_s = pr.fw.microbatch_overhead_s
            out.append(st)
        return out

    def _pipeline_sends(self, mrow: np.ndarray):
        """Pipeline sends of one micro-batch: 2 x vpp, all alike."""
        pr, pp = self.pr, self.pp
        if pp == 1:
            return 0.0
        p2p_pl = place_group(2, pr.plans.num_gpus // pp, pr.plans.cluster.gpus_per_node)
        ctxs = pr._contexts
        msg = np.array([pipeline_message_bytes(ctxs[c], pr.model) for c in self.ctx_rows], dtype=float)[mrow]
        t_p2p = _ring_times(pr.network, "send_recv", msg, [p2p_pl], np.zeros(len(mrow), dtype=int))
        return 2 * self.vpp * t_p2p

    def _data_parallel(self, srow: np.ndarray, z_col: np.ndarray):
        """Per stage class: gradient reduction, parameter gathers (once per step), FSDP traffic per
        micro-batch ((all-gather of one pass, reduce-scatter, units)), and the optimizer step (they
        depend on the structure and the ZeRO stage); per row whether the DP group's NICs carry
        the pipeline's sends too (both groups cross nodes), and whether the CP ring runs on the DP
        group's links (1.0: both cross nodes or neither does; 0.0: one on NVLink, one on the NICs).

        FSDP2's copies: per micro-batch (all, of it the forward's) and once per step.

        FSDP/ZeRO-3 collectives run per unit (a layer; the embedding and head together one more):
        each is priced as units collectives of 1/units of the stage's parameters, so their latency
        counts once per unit."""
        pr, plans = self.pr, self.pr.plans
        G = plans.cluster.gpus_per_node
        n = len(srow)
        dp_pl, dp_idx = _placements([(int(a), int(b)) for a, b in zip(self.dp_cp, self.tp)], G)
        edp_pl, edp_idx = _placements([(int(a), int(b) * int(c)) for a, b, c in zip(self.edp, self.etp, self.ep)], G)
        gb, pb = pr.fw.grad_reduce_bytes, (4 if plans.precision == "fp32" else 2)
        k_range = range(len(self.classes))
        sync, gather, opt = ([np.zeros(n) for _ in k_range] for _ in range(3))
        fsdp_ag, fsdp_rs, fsdp_copy, fsdp_copy_fwd, fsdp_step_copy = ([np.zeros(n) for _ in k_range] for _ in range(5))
        fsdp_ag_root, fsdp_rs_root = ([np.zeros(n) for _ in k_range] for _ in range(2))
        units = [cls.n_dense + cls.n_moe + int(cls.is_first or cls.is_last) for cls in self.classes]
        nic_shared: Any = False
        dp_cross = np.array([pl.nodes for pl in dp_pl])[dp_idx[srow]] > 1
        if self.pp > 1:
            p2p_nodes = place_group(2, plans.num_gpus // self.pp, G).nodes
            nic_shared = dp_cross & (p2p_nodes > 1)
        # the CP group (stride tp, Megatron rank order) shares the DP group's links when both cross
        # nodes or neither does
        cp_cross = np.array([place_group(int(c), int(t), G).nodes > 1 for c, t in zip(self.cp, self.tp)])[srow]
        cp_shares_link = (cp_cross == dp_cross).astype(float)
        for z in (0, 1, 2, 3):
            sel = z_col == z
            if not sel.any():
                continue
            # priced per structure (rows of one structure and ZeRO stage move the same bytes)
            sr = srow[sel]
            if sr.size > 1:
                sr, inv = np.unique(sr, return_inverse=True)
                inv = inv.reshape(-1)
            else:
                inv = np.zeros(1, dtype=np.int64)
            if sr.size == 1:   # one structure (predict): its numbers as floats, the same arithmetic
                s0 = int(sr[0])

                def take(a: np.ndarray) -> Any:
                    return a[s0].item()
            else:
                def take(a: np.ndarray) -> Any:
                    return a[sr]
            for k in k_range:
                cls = self.classes[k]
                # the dense group's root unit (embedding, final norm and head: ``fsdp_units``) apart
                # from its layers, which are alike
                root = take(self.embedding[k]) if cls.is_first or cls.is_last else 0.0
                layer_units = max(1, cls.n_dense + cls.n_moe)
                groups = ((take(self.dense[k]), root, dp_pl, take(dp_idx), layer_units),
                          (take(self.expert[k]), 0.0, edp_pl, take(edp_idx), max(1, cls.n_moe)))
                acc: dict[str, Any] = {"dp_sync": 0.0, "param_gather": 0.0, "fsdp_ag": 0.0, "fsdp_rs": 0.0,
                                       "fsdp_ag_root": 0.0, "fsdp_rs_root": 0.0}
                per_unit = fsdp_per_unit(z, pr.fw)
                for nparams, root_params, pls, idx, n_units in groups:
                    for name, kind, _phase, per_mb, elem in dp_collectives(
                            z, per_unit and self.pp > 1 and pr.fw.fsdp_unsharded_with_pp, pr.fw.fsdp_shard_grad_op):
                        per_elem = gb if elem == "grad" else pb
                        nbytes = nparams * per_elem
                        if name == "dp.param_all_gather":
                            # the root unit's parameters: the embedding and output layer (none in the expert group)
                            nbytes = param_gather_bytes(nparams, root_params, pb, plans.precision, pr.fw)
                        t_root: Any = 0.0
                        if per_unit:   # one collective per unit: the root's, and each layer's
                            if not isinstance(root_params, float) or root_params > 0:
                                t_root = _ring_times(pr.network, kind, root_params * per_elem, pls, idx)
                            t = t_root
                            if cls.n_dense + cls.n_moe:    # (a stage may hold the embedding or head alone)
                                t = t + n_units * _ring_times(pr.network, kind, (nbytes - root_params * per_elem)
                                                              / n_units, pls, idx)
                        else:
                            t = _ring_times(pr.network, kind, nbytes, pls, idx)
                        if per_mb:
                            if name.endswith(".bwd"):
                                continue          # the backward's re-gather: the same as the forward's
                            bucket = "fsdp_ag" if kind == "all_gather" else "fsdp_rs"
                            acc[bucket + "_root"] = acc[bucket + "_root"] + t_root
                        else:
                            bucket = step_bucket(OpKind.COLLECTIVE, kind)
                        acc[bucket] = acc[bucket] + t
                _, adam = optimizer_traffic(take(self.dense[k]), take(self.expert[k]), take(self.dp_cp),
                                            take(self.edp), z, pb, pr.fw.grad_buffer_checks, gb,
                                            foreach=pr.fw.optimizer_impl == "torch_foreach",
                                            step_bytes=adam_step_bytes(pr.fw, plans.precision, pb))
                step_copies, mb_copies = self._fsdp2_copies(k, z, take, pb, gb)
                if mb_copies is not None:      # per micro-batch, on the compute stream
                    fsdp_copy[k][sel] = _rows_of(mb_copies[0], inv)
                    fsdp_copy_fwd[k][sel] = _rows_of(mb_copies[1], inv)
                sync[k][sel] = _rows_of(acc["dp_sync"], inv)
                gather[k][sel] = _rows_of(acc["param_gather"], inv)
                fsdp_ag[k][sel] = _rows_of(acc["fsdp_ag"], inv)
                fsdp_rs[k][sel] = _rows_of(acc["fsdp_rs"], inv)
                fsdp_ag_root[k][sel] = _rows_of(acc["fsdp_ag_root"], inv)
                fsdp_rs_root[k][sel] = _rows_of(acc["fsdp_rs_root"], inv)
                opt_t = pr._memory_bound.memory_bound_time(adam, OPTIMIZER_KERNELS)
                if step_copies is not None:    # gathered and reduced once per step: in the pipeline's fill and drain
                    fsdp_step_copy[k][sel] = _rows_of(step_copies, inv)
                opt[k][sel] = _rows_of(opt_t, inv)
        fsdp = [(fsdp_ag[k], fsdp_rs[k], units[k], fsdp_copy[k], fsdp_copy_fwd[k], fsdp_step_copy[k], fsdp_ag_root[k],
                 fsdp_rs_root[k]) for k in k_range]
        return sync, gather, opt, fsdp, nic_shared, cp_shares_link

    def _fsdp2_copies(self, k: int, z: int, take, pb: int, gb: int) -> tuple[Any, Any]:
        """Seconds of FSDP2's copy-outs and reduce-scatter copy-ins of stage class ``k``, (once per step,
        (per micro-batch, of it the forward's)), None where there are none: the ops the workload graph holds (``fsdp2_copies``,
        per parameter group sharded over more than one rank, at ZeRO-3 under a framework whose FSDP
        copies them: fsdp2_copies), priced as ``Pricer.time`` prices them (memory-bound kernels, one
        kernel gap each)."""
        pr = self.pr
        if not fsdp_per_unit(z, pr.fw) or not pr.fw.fsdp2_copies:
            return None, None
        cls = self.classes[k]
        units = fsdp_units(cls.n_dense, cls.n_moe, cls.is_first or cls.is_last)
        per_step = self.pp > 1 and pr.fw.fsdp_unsharded_with_pp
        total: Any = 0.0
        fwd: Any = 0.0
        for group, params, size in (("dp_cp", take(self.dense[k]), take(self.dp_cp)),
                                    ("edp", take(self.expert[k]), take(self.edp))):
            sharded = params * (size > 1)
            # the root unit (``fsdp_units``), not copied out again in the backward
            root = (take(self.embedding[k]) * (size > 1)
                    if group == "dp_cp" and (cls.is_first or cls.is_last) and fsdp_keeps_root(pr.fw) else 0.0)
            for _name, phase, nbytes, kernels, _per_mb in fsdp2_copies(sharded, units[group], pb, gb, per_step,
                                                                       root, regather=z >= 3):
                t = pr._memory_bound._memory_time(nbytes, "elementwise") + pr.fw.kernel_gap_s * kernels
                t = t * (sharded > 0)     # no kernels where the group holds nothing sharded
                total = total + t
                if phase == Phase.FWD:
                    fwd = fwd + t
        return (total, None) if per_step else (None, (total, fwd))


def _shape_key(plans: PlanSet) -> tuple:
    """What a BatchPricer's priced shape classes depend on: the job, and the plan fields of the job
    (kernel, dispatcher, routing, ...) it holds fixed; not the searched options, GPU count or batch."""
    c = plans.cluster
    hit = _NETS.get(id(c))
    if hit is None or hit[0] is not c:
        if len(_NETS) >= _PRICERS_KEPT:
            _NETS.pop(next(iter(_NETS)))
        hit = _NETS[id(c)] = (c, repr(c.model_dump(exclude={"name", "source", "num_nodes"})))
    job_fields = tuple(sorted((k, v) for k, v in plans.fixed.items() if k in _JOB_FIELDS))
    return (plans.model, plans.seq_len, plans.precision, plans.framework, job_fields, hit[1])


# what _shape_key reads of a cluster (its network), by cluster identity: specs are frozen, and the
# dump costs more than the rest of a repeated predict's bookkeeping
_NETS: dict[int, tuple[ClusterSpec, str]] = {}


class _RowDecoder:
    """Turns a timed row back into (structure index, sp, recompute index, zero, tp overlap)."""

    def __init__(self, s_rows: np.ndarray, sp_rows: list[bool], rows: np.ndarray):
        self.s_rows, self.sp_rows, self.rows = s_rows, sp_rows, rows

    def __getitem__(self, i: int) -> tuple[int, bool, int, int, bool]:
        mr, r, z, otp = (int(x) for x in self.rows[i])
        return int(self.s_rows[mr]), self.sp_rows[mr], r, z, bool(otp)


def _one(x: Any) -> Any:
    """The value of a one-element array as a Python number (int, float or bool); anything else as it is."""
    return x.item() if isinstance(x, np.ndarray) and x.size == 1 else x


def _rows_of(v: Any, index: np.ndarray) -> Any:
    """Per-structure figures ``v`` (an array, or one value for all) at the rows ``index``."""
    return v[index] if isinstance(v, np.ndarray) and v.ndim else v


def _ring_times(network: NetworkPricer, kind: str, nbytes: Any, placements: list[GroupPlacement],
                index: Any) -> Any:
    """``network.time_many``; for a handful of collectives (predict's batch of one) one ``time`` call
    each, which prices them alike (element by element the same arithmetic) without building arrays."""
    if not isinstance(nbytes, np.ndarray):    # one (a float, ``index`` an int)
        return network.time(kind, float(nbytes), placements[index])
    if len(nbytes) > 2:
        return network.time_many(kind, nbytes, placements, index)
    return np.array([network.time(kind, float(b), placements[i]) for b, i in zip(nbytes, index)], dtype=float)


def _placements(groups: list[tuple[int, int]], gpus_per_node: int) -> tuple[list[GroupPlacement], np.ndarray]:
    """Distinct placements of (size, stride) groups and the index of each group's placement."""
    index: dict[tuple[int, int], int] = {}
    out = np.empty(len(groups), dtype=int)
    for i, key in enumerate(groups):
        out[i] = index.setdefault(key, len(index))
    return [place_group(size, stride, gpus_per_node) for size, stride in index], out


# ---- one plan: predict's view of the same pipeline -------------------------------------------------
class _One:
    """A sink for a batch of one plan: keeps everything the pipeline knows of its row."""

    def __init__(self):
        self.rows: PricedRows | None = None
        self.i = -1

    def offer(self, rows: PricedRows) -> None:
        idx = np.flatnonzero(rows.valid)
        if idx.size:
            self.rows, self.i = rows, int(idx[0])


def plan_set_of(plan: Plan, model: ModelSpec, cluster: ClusterSpec, seq_len: int, framework: str,
                max_memory_fraction: float = math.inf) -> tuple[PlanSet, Structure]:
    """The PlanSet holding exactly one resolved plan (every option fixed), and its structure."""
    fixed = {k: getattr(plan, k) for k in ("sp", "zero_stage", "recompute", "overlap_tp_comm", "overlap_dp_comm",
                                           "overlap_param_gather", "overlap_pp_comm", *_JOB_FIELDS)}
    fixed = {k: v for k, v in fixed.items() if v is not None}
    fixed["sp"] = bool(plan.sp and plan.tp > 1)
    s = Structure(plan.tp, plan.pp, plan.vpp, plan.cp, plan.dp or 1, plan.ep, plan.micro_batch)
    return PlanSet(model, cluster, plan.global_batch or 0, seq_len, plan.precision, framework, fixed,
                   max_memory_fraction), s


# BatchPricers of recent jobs: predict calls on plans of one job reuse its priced shape classes
_PRICERS: dict[tuple, BatchPricer] = {}
_PRICERS_KEPT = 16


def _pricer_for(plans: PlanSet, profile: HardwareProfile | None) -> BatchPricer:
    key = (_shape_key(plans), id(profile) if profile is not None else None)
    pricer = _PRICERS.pop(key, None)
    if pricer is None or (profile is not None and pricer.profile is not profile):
        pricer = BatchPricer(plans, profile)
    else:
        pricer.plans = plans
    _PRICERS[key] = pricer                       # most recent last
    while len(_PRICERS) > _PRICERS_KEPT:
        del _PRICERS[next(iter(_PRICERS))]
    return pricer


def _price_one(plans: PlanSet, s: Structure, profile: HardwareProfile | None, every_stage: bool) -> PricedRows:
    sink = _One()
    _pricer_for(plans, profile).price([s], sink, every_stage=every_stage)
    assert sink.rows is not None, "a batch of one plan gave no row"
    return sink.rows.at(sink.i)


def _at_stage(st: StageTime, stage: int) -> StageTime:
    out = StageTime.__new__(StageTime)     # a shallow copy (copy.copy costs more than the rest of it)
    out.__dict__.update(st.__dict__)
    out.stage = stage
    return out


def price_plan(plan: Plan, model: ModelSpec, cluster: ClusterSpec, seq_len: int, framework: str,
               profile: HardwareProfile | None = None) -> tuple[StepEstimate, MemoryEstimate]:
    """Step time and memory of one resolved plan (its overlaps, kernel and dispatcher set): a batch
    of one through the pipeline search uses. Plans that do not fit are priced too."""
    plans, s = plan_set_of(plan, model, cluster, seq_len, framework)
    rows = _price_one(plans, s, profile, every_stage=False)
    classes = rows.stage_classes
    stages = [classes[k] if classes[k].stage == i else _at_stage(classes[k], i) for i, k in enumerate(rows.stage_class)]
    breakdown = rows.breakdown_s
    m = plans.global_batch // (s.dp * s.micro_batch)
    step = StepEstimate(sum(breakdown.values()), breakdown, stages, m, classes[rows.critical_class].stage)
    per_class = rows.memory_of(0)
    totals = [sum(d.values()) for d in per_class]
    worst = max(range(len(per_class)), key=lambda k: (totals[k], -k))   # the first of equals

    def every_stage() -> list[dict[str, float]]:   # each stage holds its own micro-batches in flight
        return _price_one(plans, s, profile, every_stage=True).memory_of(0)

    memory = MemoryEstimate(per_class[worst], cluster.gpu.hbm_bytes, classes[worst].stage, every_stage)
    return step, memory


__all__ = ["BatchPricer", "Candidate", "Evaluation", "PlanSet", "PricedRows", "Structure", "TopK", "plan_set_of",
           "price_plan", "RECOMPUTE_MODES"]
