"""Price every plan of a search space at once, with the graph and schedule predict uses.

The ops of a layer depend only on its shape class — (tp, cp, micro-batch, sp, ep) with the job's
sequence length, precision and kernels — so each shape class is built and priced once
(``layer_ops`` and the ``Pricer``, block by block), and a stage of any plan is the sum of its
priced blocks. Plans sharing a pipeline layout (pp, vpp) share their stage classes, and the
schedule (``compose_step``) and memory (``stage_memory``) formulas run on arrays holding all of
them: the same code predict runs on the floats of one plan. Memory is priced first: a plan that
does not fit is never timed. Values agree with ``predict_job`` to rounding (the stage sums add
blocks rather than ops); the tuner re-predicts the plans it reports.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..cost.compute import OPTIMIZER_KERNELS, ComputePricer
from ..specs.framework import for_plan, get_framework
from ..calibrate.profile import profile_for
from ..cost.network import NetworkPricer
from ..cost.profile import HardwareProfile
from ..parallel.layout import GroupPlacement, ParallelDims, expert_dp_size, place_group
from ..schedule.memory import in_flight, layer_activation_bytes, stage_memory
from ..schedule.step import (Pricer, StageTime, accumulate_ops, compose_step, exposed_cp, exposed_fsdp, exposed_tp,
                             hidden_cp,
                             step_bucket, tp_overlap_chunks)
from ..specs import stage_layer_split
from ..specs.plan import Plan
from ..workload.graph import (_recompute_ops, dp_collectives, layer_context, optimizer_traffic, recompute_mode,
                              pipeline_message_bytes, stage_layers, stage_params)
from ..workload.ops import OpKind, Phase
from ..workload.transformer import LayerContext, embedding_ops, head_ops, layer_ops
from .space import SearchSpace, Structure

# per block and phase: compute seconds, exposed TP and MoE communication, CP ring and attention time
_FIELDS = ("fwd_s", "bwd_s", "recompute_s", "tp_s", "ep_s", "cp_fwd", "cp_bwd", "cp_rc", "attn_fwd", "attn_bwd",
           "attn_rc", "moe_imb")
_F = {name: i for i, name in enumerate(_FIELDS)}
_BLOCKS = ("embedding", "layer", "moe_layer", "head")


@dataclass(frozen=True)
class Candidate:
    """A plan of the space with the step time the batch evaluation gave it."""

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

    def plan(self, space: SearchSpace) -> Plan:
        s = self.structure
        fields = dict(tp=s.tp, pp=s.pp, vpp=s.vpp, dp=s.dp, cp=s.cp, ep=s.ep, sp=self.sp, zero_stage=self.zero_stage,
                      micro_batch=s.micro_batch, global_batch=space.global_batch, recompute=self.recompute,
                      precision=space.precision, overlap_tp_comm=self.overlap_tp_comm,
                      overlap_dp_comm=self.overlap_dp_comm, overlap_param_gather=self.overlap_param_gather,
                      overlap_pp_comm=self.overlap_pp_comm)
        for k in ("etp", "attention_kernel", "moe_dispatcher", "grad_reduce_dtype"):
            if k in space.fixed:
                fields[k] = space.fixed[k]
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


class _Keep:
    """The ``k`` fastest plans seen so far."""

    def __init__(self, k: int):
        self.k = k
        self.times: list[np.ndarray] = []
        self.mems: list[np.ndarray] = []
        self.info: list[tuple] = []

    def offer(self, times: np.ndarray, mems: np.ndarray, valid: np.ndarray, info: tuple) -> None:
        idx = np.flatnonzero(valid)
        if idx.size > self.k:
            idx = idx[np.argpartition(times[idx], self.k - 1)[: self.k]]
        if idx.size:
            self.times.append(times[idx])
            self.mems.append(mems[idx])
            self.info.append((info, idx))

    def best(self) -> list[tuple[float, float, tuple, int]]:
        out = [(float(t), float(mem), info, int(i)) for (info, idx), ts, ms in zip(self.info, self.times, self.mems)
               for t, mem, i in zip(ts, ms, idx)]
        out.sort(key=lambda x: (x[0], x[1]))
        return out[: self.k]


class Evaluator:
    """Prices the plans of one SearchSpace; shape classes are memoized across calls (and spaces of
    the same model, sequence, precision and framework on the same kind of node)."""

    def __init__(self, space: SearchSpace, profile: HardwareProfile | None = None):
        self.space = space
        self._key = _shape_key(space)
        self.model = space.model
        self.fw = for_plan(get_framework(space.framework), SimpleNamespace(**space.fixed))
        self.profile = profile or profile_for(space.cluster.gpu)
        self.network = NetworkPricer(space.cluster, self.profile)
        self.kernel = space.fixed.get("attention_kernel") or self.fw.attention_kernel
        self.etp = space.fixed.get("etp")
        self.dispatcher = space.fixed.get("moe_dispatcher") or self.fw.moe_dispatcher
        self._computes: dict[tuple[int, int], ComputePricer] = {}
        self._memory_bound = ComputePricer(space.cluster.gpu, self.profile, self.fw)  # optimizer steps
        self._ctx: dict[tuple, int] = {}
        self._contexts: list[LayerContext] = []
        self._blocks: dict[tuple, int] = {}
        self._priced: dict[tuple, np.ndarray] = {}
        self._block_rows: list[np.ndarray] = []
        self._acts: dict[tuple, float] = {}
        self._params: dict[tuple, float] = {}

    # ---- shape classes -----------------------------------------------------------------------
    def _plan_ns(self, tp: int, cp: int = 1, ep: int = 1, mb: int = 1, sp: bool = False, pp: int = 1, dp: int = 1,
                 overlap_tp: bool = False) -> SimpleNamespace:
        return SimpleNamespace(tp=tp, cp=cp, ep=ep, etp=self.etp, micro_batch=mb, sp=sp, pp=pp, dp=dp,
                               precision=self.space.precision, attention_kernel=self.kernel,
                               moe_dispatcher=self.dispatcher, overlap_tp_comm=overlap_tp)

    def context_id(self, tp: int, cp: int, mb: int, sp: bool, ep: int) -> int:
        key = (tp, cp, mb, sp, ep)
        i = self._ctx.get(key)
        if i is None:
            plan = self._plan_ns(tp, cp, ep, mb, sp)
            i = self._ctx[key] = len(self._contexts)
            self._contexts.append(layer_context(self.model, plan, self.space.seq_len, self.fw))
        return i

    def _activation(self, ctx_id: int, moe: bool, rc: str) -> float:
        key = (ctx_id, moe, rc)
        v = self._acts.get(key)
        if v is None:
            v = self._acts[key] = layer_activation_bytes(self._contexts[ctx_id], moe, recompute_mode(rc, self.fw))
        return v

    def _pricer(self, tp: int, cp: int, ep: int, overlap_tp: bool) -> Pricer:
        plan = self._plan_ns(tp, cp, ep, overlap_tp=overlap_tp)
        key = (tp_overlap_chunks(plan), cp)
        compute = self._computes.get(key)
        if compute is None:
            compute = self._computes[key] = ComputePricer(self.space.cluster.gpu, self.profile, self.fw, *key)
        return Pricer.for_plan(self.space.cluster, plan, self.fw, self.profile, compute=compute, network=self.network)

    def block_id(self, ctx_id: int, overlap_tp: bool, rc: str) -> int:
        """Index of the priced blocks (embedding, layer, MoE layer, head) of a shape class."""
        key = (ctx_id, overlap_tp, rc)
        i = self._blocks.get(key)
        if i is None:
            c = self._contexts[ctx_id]
            pricer = self._pricer(c.tp, c.cp, c.ep, overlap_tp)
            base = self._priced.get((ctx_id, overlap_tp))
            if base is None:  # forward and backward do not depend on the recompute mode
                base = self._priced[(ctx_id, overlap_tp)] = self._price_blocks(c, pricer, None)
            i = self._blocks[key] = len(self._block_rows)
            self._block_rows.append(base + self._price_blocks(c, pricer, rc))
        return i

    def _price_blocks(self, c: LayerContext, pricer: Pricer, rc: str | None) -> np.ndarray:
        """Per block, the fields of one phase group: forward and backward (``rc`` None), or the
        recomputation ``rc`` adds."""
        m = self.model
        out = np.zeros((len(_BLOCKS), len(_FIELDS)))
        for b, name in enumerate(_BLOCKS):
            if name in ("layer", "moe_layer"):
                if name == "moe_layer" and not m.is_moe:
                    continue
                f, bwd, core = layer_ops(c, name == "moe_layer")
            elif rc is not None:
                continue  # embedding and head are not recomputed
            elif name == "embedding":
                (f, bwd), core = embedding_ops(c, m.vocab_size, m.positions == "learned"), ()
            else:
                (f, bwd), core = head_ops(c, m.vocab_size, self.fw.fused_cross_entropy), ()
            st = StageTime(0)
            if rc is None:
                cp_f, attn_f = accumulate_ops(st, [(op, 1) for op in f], Phase.FWD, pricer, record=False)
                cp_b, attn_b = accumulate_ops(st, [(op, 1) for op in bwd], Phase.BWD, pricer, record=False)
                out[b] = (st.fwd_s, st.bwd_s, 0.0, st.tp_s, st.ep_s, cp_f, cp_b, 0.0, attn_f, attn_b, 0.0,
                          st.moe_imbalance_s)
            else:
                ops = _recompute_ops(recompute_mode(rc, self.fw), f, core, c, name == "moe_layer")
                cp_r, attn_r = accumulate_ops(st, [(op, 1) for op in ops], Phase.RECOMPUTE, pricer, record=False)
                out[b] = (0.0, 0.0, st.recompute_s, st.tp_s, st.ep_s, 0.0, 0.0, cp_r, 0.0, 0.0, attn_r,
                          st.moe_imbalance_s)
        return out

    # ---- layouts -----------------------------------------------------------------------------
    def layout(self, pp: int, vpp: int) -> tuple[list[_StageClass], list[int]]:
        """The distinct stages of a pipeline layout (as build_graph tells them apart) and the class of each stage."""
        split = stage_layer_split(self.model.num_layers, pp, vpp)
        classes: list[_StageClass] = []
        keys: dict[tuple, int] = {}
        stage_class = []
        for i, (chunks, layer_ids) in enumerate(stage_layers(split, pp, vpp)):
            n_moe = sum(self.model.is_moe_layer(li) for li in layer_ids)
            key = (len(layer_ids) - n_moe, n_moe, i == 0, i == pp - 1, tuple(split[c] for c in chunks))
            if key not in keys:
                keys[key] = len(classes)
                classes.append(_StageClass(i, key[0], n_moe, i == 0, i == pp - 1, tuple(layer_ids)))
            stage_class.append(keys[key])
        return classes, stage_class

    def _stage_params(self, tp: int, ep: int, pp: int, k: _StageClass):
        key = (tp, ep, pp, k.layer_ids, k.is_first, k.is_last)
        v = self._params.get(key)
        if v is None:
            v = self._params[key] = stage_params(self.model, self._plan_ns(tp, ep=ep, pp=pp), list(k.layer_ids),
                                                 k.is_first, k.is_last)
        return v

    # ---- the search --------------------------------------------------------------------------
    def run(self, structures: list[Structure], keep: int, space: SearchSpace | None = None) -> Evaluation:
        """Price ``structures`` (of ``space``, by default the evaluator's own; another space may differ
        in its GPU count, global batch and memory limit only) and keep the ``keep`` fastest plans."""
        if space is not None:
            if _shape_key(space) != self._key:
                raise ValueError("an Evaluator prices spaces that differ only in GPU count, batch and memory limit")
            self.space = space
        groups: dict[tuple[int, int], list[Structure]] = {}
        for s in structures:
            groups.setdefault((s.pp, s.vpp), []).append(s)
        best = _Keep(keep)
        feasible = pruned = 0
        for (pp, vpp), ss in groups.items():
            f, p = self._run_layout(pp, vpp, ss, best)
            feasible += f
            pruned += p
        cands = []
        for t, mem, (ss, rows, odp, opg, opp), i in best.best():
            s_idx, sp, rc, zero, otp = rows[i]
            cands.append(Candidate(ss[s_idx], bool(sp), self.space.recompute_domain[rc], int(zero), bool(otp),
                                   odp, opg, opp, t, mem))
        return Evaluation(cands, feasible, pruned, len(self._block_rows))

    def _run_layout(self, pp: int, vpp: int, ss: list[Structure], best: _Keep) -> tuple[int, int]:
        space, model, fw = self.space, self.model, self.fw
        G = space.cluster.gpus_per_node
        classes, stage_class = self.layout(pp, vpp)
        rc_domain = space.recompute_domain
        opp_domain = space.overlap_pp_domain(pp)

        # ---- rows of (structure, sp) ----
        s_rows, sp_rows, ctx_rows = [], [], []
        for i, s in enumerate(ss):
            for sp in space.sp_domain(s.tp):
                s_rows.append(i)
                sp_rows.append(sp)
                ctx_rows.append(self.context_id(s.tp, s.cp, s.micro_batch, sp, s.ep))
        s_rows_a = np.array(s_rows)
        ctx_a = np.array(ctx_rows)
        tp = np.array([s.tp for s in ss])
        cp = np.array([s.cp for s in ss])
        dp = np.array([s.dp for s in ss])
        ep = np.array([s.ep for s in ss])
        mb = np.array([s.micro_batch for s in ss])
        dp_cp = dp * cp
        etp = np.broadcast_to(ParallelDims(tp, etp=self.etp).expert_tp, tp.shape)
        edp = expert_dp_size(tp, cp, dp, ep, etp)
        m_s = space.global_batch // (dp * mb)

        # parameters per class and structure
        params = [[self._stage_params(s.tp, s.ep, pp, k) for s in ss] for k in classes]
        dense = [np.array([p.dense + p.embedding for p in ps]) for ps in params]
        expert = [np.array([p.expert for p in ps]) for ps in params]
        embedding = [np.array([p.embedding for p in ps]) for ps in params]
        total_params = [np.array([p.total for p in ps]) for ps in params]

        # per-context quantities on the rows
        ctxs = self._contexts
        logits = np.array([ctxs[c].tokens * -(-model.vocab_size // ctxs[c].tp) for c in ctx_rows], dtype=float)
        emb_rows = np.array([ctxs[c].norm_rows * ctxs[c].hidden * ctxs[c].act_bytes for c in ctx_rows], dtype=float)

        # ---- memory, per recompute mode and ZeRO stage ----
        dp_cp_m = dp_cp[s_rows_a]
        m_m = m_s[s_rows_a]
        tp_many = space.tp_overlap_matters(tp)
        n_otp = space.flag_count("overlap_tp_comm", tp_many)
        fits: dict[tuple[int, int], np.ndarray] = {}
        mem_total: dict[tuple[int, int], np.ndarray] = {}
        feasible = pruned = 0
        for r, rc in enumerate(rc_domain):
            act_d = np.array([self._activation(c, False, rc) for c in ctx_rows])
            act_m = np.array([self._activation(c, True, rc) for c in ctx_rows]) if model.is_moe else None
            trans_d = np.array([self._activation(c, False, "none") for c in ctx_rows]) - act_d
            trans_m = (np.array([self._activation(c, True, "none") for c in ctx_rows]) - act_m) if model.is_moe \
                else None
            for z in (0, 1, 2, 3):
                in_domain = space.zero_allows(z, dp_cp, tp=tp, pp=pp, cp=cp)[s_rows_a]
                if not in_domain.any():
                    continue
                worst = None
                for k, cls in enumerate(classes):
                    moe = cls.n_moe > 0
                    transient = np.maximum(trans_d, trans_m) if moe else trans_d
                    mem = stage_memory(
                        fw, space.precision, z, rc, pp=pp, microbatches=m_m, dense=dense[k][s_rows_a],
                        expert=expert[k][s_rows_a],
                        dp_cp=dp_cp_m, edp=edp[s_rows_a], layers_dense=cls.n_dense, layers_moe=cls.n_moe,
                        act_dense=act_d, act_moe=act_m if moe else 0.0, act_full_layer=transient,
                        in_flight_layers=in_flight(pp, vpp, m_m, cls.first, cls.n_dense + cls.n_moe),
                        logits=logits if cls.is_last else None,
                        embedding_rows_bytes=emb_rows if cls.is_first else None,
                        embedding_in_flight=in_flight(pp, vpp, m_m, cls.first, 1),
                        embedding=embedding[k][s_rows_a])
                    tot = sum(mem.values())
                    worst = tot if worst is None else np.maximum(worst, tot)
                ok = (worst <= space.memory_limit_bytes) & in_domain
                n_opg = space.flag_count("overlap_param_gather", (dp_cp > 1) & (z > 0))
                n_odp = space.flag_count("overlap_dp_comm", space.dp_overlap_matters(dp_cp, z, pp))
                n_opt = (n_otp * n_odp * n_opg * len(opp_domain))[s_rows_a]
                feasible += int(n_opt[ok].sum())
                pruned += int(n_opt[in_domain & ~ok].sum())
                if ok.any():
                    fits[(r, z)] = ok
                    mem_total[(r, z)] = worst
        if not fits:
            return feasible, pruned

        # ---- rows to time: (structure, sp, recompute, zero, tp overlap) that fit ----
        parts = []
        for (r, z), ok in fits.items():
            for otp in (False, True):
                sel = np.flatnonzero(ok & space.flag_allows("overlap_tp_comm", otp, tp_many)[s_rows_a])
                if sel.size:
                    parts.append(np.stack([sel, np.full(sel.size, r), np.full(sel.size, z),
                                           np.full(sel.size, int(otp))], axis=1))
        rows = np.concatenate(parts)            # columns: memory row, recompute index, zero, tp overlap
        mrow, r_col, z_col, otp_col = rows.T
        srow = s_rows_a[mrow]
        mem_rows = np.empty(len(rows))
        for (r, z), tot in mem_total.items():
            sel = (r_col == r) & (z_col == z)
            mem_rows[sel] = tot[mrow[sel]]

        # priced blocks of each row's shape class
        keys = (ctx_a[mrow] * 2 + otp_col) * len(rc_domain) + r_col
        uniq, inverse = np.unique(keys, return_inverse=True)
        ids = np.array([self.block_id(int(k // (2 * len(rc_domain))), bool((k // len(rc_domain)) % 2),
                                      rc_domain[int(k % len(rc_domain))]) for k in uniq])
        table = np.stack([self._block_rows[i] for i in ids])[inverse]     # rows x blocks x fields

        # stage classes: the sum of their blocks
        tp_r = tp[srow].astype(float)
        otp_r = otp_col.astype(bool)
        base_classes = []
        for cls in classes:
            counts = (float(cls.is_first), float(cls.n_dense), float(cls.n_moe), float(cls.is_last))

            def total(field: str) -> np.ndarray:
                j = _F[field]
                out = 0.0
                for b, n in enumerate(counts):
                    if n:
                        out = out + n * table[:, b, j]
                return out if isinstance(out, np.ndarray) else np.zeros(len(rows))

            st = StageTime(cls.first, fwd_s=total("fwd_s"), bwd_s=total("bwd_s"), recompute_s=total("recompute_s"),
                           ep_s=total("ep_s"), moe_imbalance_s=total("moe_imb"))
            st.cp_s = (exposed_cp(total("cp_fwd"), total("attn_fwd")) + exposed_cp(total("cp_bwd"), total("attn_bwd"))
                       + exposed_cp(total("cp_rc"), total("attn_rc")))
            st.cp_hidden_fwd_s = hidden_cp(total("cp_fwd"), total("attn_fwd"))
            st.cp_hidden_bwd_s = hidden_cp(total("cp_bwd"), total("attn_bwd")) + hidden_cp(total("cp_rc"), total("attn_rc"))
            st.tp_s = exposed_tp(total("tp_s"), tp_r, otp_r)
            base_classes.append(st)

        # pipeline sends: 2 x vpp per micro-batch, all alike
        p2p_pl = place_group(2 if pp > 1 else 1, space.num_gpus // pp, G)
        msg = np.array([pipeline_message_bytes(ctxs[c], model) for c in ctx_rows], dtype=float)[mrow]
        t_p2p = self.network.time_many("send_recv", msg, [p2p_pl], np.zeros(len(rows), dtype=int))
        pp_s = 0.0
        if pp > 1:
            for _ in range(2 * vpp):
                pp_s = pp_s + t_p2p

        # data-parallel collectives and the optimizer, per class (they depend on the structure and ZeRO)
        dp_pl, dp_idx = _placements([(int(a), int(b)) for a, b in zip(dp_cp, tp)], G)
        edp_pl, edp_idx = _placements([(int(a), int(b) * int(c)) for a, b, c in zip(edp, etp, ep)], G)
        gb, pb = fw.grad_reduce_bytes, (4 if space.precision == "fp32" else 2)
        compute = self._memory_bound
        sync = [np.zeros(len(rows)) for _ in classes]
        gather = [np.zeros(len(rows)) for _ in classes]
        opt = [np.zeros(len(rows)) for _ in classes]
        fsdp = [np.zeros(len(rows)) for _ in classes]
        for z in (0, 1, 2, 3):
            sel = z_col == z
            if not sel.any():
                continue
            sr = srow[sel]
            for k in range(len(classes)):
                groups = ((dense[k][sr], dp_pl, dp_idx[sr]), (expert[k][sr], edp_pl, edp_idx[sr]))
                acc = {"dp_sync": 0.0, "param_gather": 0.0, "fsdp": 0}
                for n, pls, idx in groups:
                    for _name, kind, _phase, per_mb, elem in dp_collectives(
                            z, z >= 3 and pp > 1 and self.fw.fsdp_unsharded_with_pp):
                        t = self.network.time_many(kind, n * (gb if elem == "grad" else pb), pls, idx)
                        bucket = "fsdp" if per_mb else step_bucket(OpKind.COLLECTIVE, kind)
                        acc[bucket] = acc[bucket] + t
                _, adam = optimizer_traffic(dense[k][sr], expert[k][sr], dp_cp[sr], edp[sr], z, pb)
                sync[k][sel] = acc["dp_sync"]
                gather[k][sel] = acc["param_gather"]
                fsdp[k][sel] = acc["fsdp"]
                opt[k][sel] = 0.0 + compute.memory_bound_time(adam, OPTIMIZER_KERNELS)

        # ---- the schedule, per overlap choice ----
        dp_cp_r = dp_cp[srow]
        m_rows = m_s[srow]
        params_rows = [params_k[srow] for params_k in total_params]
        for odp, opg in itertools.product((False, True), (False, True)):
            valid = (space.flag_allows("overlap_dp_comm", odp, space.dp_overlap_matters(dp_cp_r, z_col, pp))
                     & space.flag_allows("overlap_param_gather", opg, (dp_cp_r > 1) & (z_col > 0)))
            if not valid.any():
                continue
            stage_times = []
            for k, base in enumerate(base_classes):
                st = StageTime(base.stage, fwd_s=base.fwd_s, bwd_s=base.bwd_s, recompute_s=base.recompute_s,
                               tp_s=base.tp_s, cp_s=base.cp_s, ep_s=base.ep_s, moe_imbalance_s=base.moe_imbalance_s,
                               pp_s=pp_s, dp_sync_s=sync[k],
                               param_gather_s=gather[k], optimizer_s=opt[k], cp_hidden_fwd_s=base.cp_hidden_fwd_s,
                               cp_hidden_bwd_s=base.cp_hidden_bwd_s)
                st.fsdp_s = exposed_fsdp(fsdp[k], st.fwd_s, st.bwd_s, opg, st.cp_hidden_fwd_s + st.cp_hidden_bwd_s)
                stage_times.append(st)
            for opp in opp_domain:
                breakdown, _ = compose_step(stage_times, stage_class, params_rows, m_rows, pp, vpp, opp, odp, opg)
                step = sum(breakdown.values())
                best.offer(step, mem_rows, valid, (ss, _RowDecoder(s_rows_a, sp_rows, rows), odp, opg, opp))
        return feasible, pruned


def _shape_key(space: SearchSpace) -> tuple:
    c = space.cluster
    net = c.model_dump(exclude={"name", "source", "num_nodes"})
    return (space.model, space.seq_len, space.precision, space.framework, tuple(sorted(space.fixed.items())), repr(net))


class _RowDecoder:
    """Turns a timed row back into (structure index, sp, recompute index, zero, tp overlap)."""

    def __init__(self, s_rows: np.ndarray, sp_rows: list[bool], rows: np.ndarray):
        self.s_rows, self.sp_rows, self.rows = s_rows, sp_rows, rows

    def __getitem__(self, i: int) -> tuple[int, bool, int, int, bool]:
        mr, r, z, otp = (int(x) for x in self.rows[i])
        return int(self.s_rows[mr]), self.sp_rows[mr], r, z, bool(otp)


def _placements(groups: list[tuple[int, int]], gpus_per_node: int) -> tuple[list[GroupPlacement], np.ndarray]:
    """Distinct placements of (size, stride) groups and the index of each group's placement."""
    index: dict[tuple[int, int], int] = {}
    out = np.empty(len(groups), dtype=int)
    for i, key in enumerate(groups):
        out[i] = index.setdefault(key, len(index))
    return [place_group(size, stride, gpus_per_node) for size, stride in index], out
