"""Measured kernels matched to the twin's named ops, and collectives to the plan's process groups.

- **Named GEMMs.** A traced GEMM op (its kernels summed) is the graph op of the traced stage with the
  same (batch, m, n, k) in the same pass: forward ops in the forward, ``dgrad``/``wgrad`` and recomputed
  forward ops in the backward (a kernel launched under an autograd node, ``...Backward0``, is a backward
  one). PyTorch and Megatron compute a weight gradient as dY^T X, the transpose of the twin's
  ``wgrad`` (X^T dY), so a ``wgrad`` is matched as (n, m, k). Ops with one shape in one pass (a layer's
  ``mlp.up.dgrad`` and ``mlp.down`` in a trace with no pass recorded) share a row.
- **Named attention, norms, RoPE, activations, loss, embedding, optimizer**: by kernel name and the
  launching CPU op (``flash_bwd`` -> ``attn.flash.bwd``; ``*layer_norm*``/``*rms*`` -> the norms;
  ``rotary``/``rope`` -> ``attn.rope``; ``silu``/``gelu``/``swiglu`` -> ``mlp.act``; ``cross_entropy``/
  ``log_softmax``/``nll`` -> ``head.cross_entropy``); the rest of the memory-bound kernels against the
  rest of the twin's elementwise ops.
- **Collectives to groups** (tp, cp, dp_cp, ep, edp, pp, Megatron rank order as ``parallel.layout``):
  the group whose members equal the kernel's ``Process Group Ranks``; else the role its
  ``Process Group Description`` names (``mesh_tp``, ``TENSOR_MODEL_PARALLEL_GROUP``, ...); else the
  groups of the traced size, told apart by the collective (all-to-all: ep; send/recv: pp) and then by
  the message size closest to the twin's op of that kind in the group.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from ..parallel.layout import ParallelDims
from ..schedule.step import Pricer
from ..workload.graph import WorkloadGraph
from ..workload.ops import Op, OpKind, Phase
from .kineto import Kernel, Trace

GROUPS = ("tp", "cp", "dp_cp", "ep", "edp", "pp")


def stage_of_rank(rank: int, plan: Any) -> int:
    """The pipeline stage of global ``rank`` in Megatron's rank order (tp, cp, dp inner; pp outermost)."""
    d = ParallelDims.of(plan)
    per_stage = int(d.tp * d.cp * d.dp)
    return min(int(d.pp) - 1, max(0, rank) // max(1, per_stage))


@dataclass(frozen=True)
class TwinOp:
    op: Op
    count: float        # per step on one rank of the stage
    phase: str          # fwd | bwd (backward and recompute) | step
    label: str          # the op's name, "(recompute)" added for recomputed forward ops


def stage_ops(graph: WorkloadGraph, stage: int) -> list[TwinOp]:
    """Every op one rank of ``stage`` runs in a step, with its count (layers x micro-batches)."""
    st = graph.stages[stage]
    mb = graph.num_microbatches
    out = [TwinOp(op, rep * mb, "fwd", op.name) for op, rep in st.ops(Phase.FWD)]
    out += [TwinOp(op, rep * mb, "bwd", op.name) for op, rep in st.ops(Phase.BWD)]
    out += [TwinOp(op, rep * mb, "bwd", f"{op.name} (recompute)") for op, rep in st.ops(Phase.RECOMPUTE)]
    out += [TwinOp(op, mb, "fwd" if op.phase == Phase.FWD else "bwd", op.name) for op in st.p2p]
    out += [TwinOp(op, mb, "step", op.name) for op in st.microbatch_dp_ops]
    out += [TwinOp(op, 1, "step", op.name) for op in st.step_ops]
    return out


@dataclass
class OpRow:
    """One named op (or ops sharing a shape), per step on one rank."""
    op: str
    category: str
    measured_count: float
    predicted_count: float
    measured_s: float
    predicted_s: float
    shape: str = ""
    measured_flops: float = 0.0     # per step, GEMMs with shapes only
    predicted_flops: float = 0.0

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s if self.measured_s > 0 else float("inf")

    @property
    def ratio_same_work(self) -> float:
        """Predicted over measured time for the same work: per FLOP where both sides count FLOPs (GEMMs:
        a fused twin op traced as separate GEMMs compares right), else per instance. The ratio that holds
        when the trace covers part of a step, or another micro-batch count, than the twin's."""
        if self.measured_s <= 0:
            return float("inf")
        if self.measured_flops > 0 and self.predicted_flops > 0:
            return (self.predicted_s / self.predicted_flops) / (self.measured_s / self.measured_flops)
        if self.measured_count <= 0 or self.predicted_count <= 0:
            return float("inf")
        return (self.predicted_s / self.predicted_count) / (self.measured_s / self.measured_count)


def _gemm_key(twin: TwinOp, phased: bool) -> tuple:
    b, m, n, k = twin.op.shape
    if twin.op.name.endswith(".wgrad"):
        m, n = n, m
    return (twin.phase if phased else "", b, m, n, k)


def _join(labels: list[str]) -> str:
    return " + ".join(dict.fromkeys(labels))


# (row, twin op test, kernel test): kernel text is its family, name and launching op, lower case
_ELEMENTWISE_ROWS: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("norms", lambda n: n.split(".")[0] in ("norm1", "norm2", "final_norm"), ("layer_norm", "layernorm", "rms_norm",
                                                                               "rmsnorm", "rms", "_norm_")),
    ("attn.rope", lambda n: n.startswith("attn.rope"), ("rotary", "rope")),
    ("mlp.act", lambda n: n.startswith("mlp.act") or n.startswith("moe.act") or ".act" in n,
     ("silu", "swiglu", "gelu", "geglu", "glu_kernel", "activation")),
    ("head.cross_entropy", lambda n: n.startswith("head.cross_entropy"), ("cross_entropy", "log_softmax", "nll_loss")),
)


def _elementwise_row(k: Kernel) -> str:
    text = f"{k.family} {k.name[:200]} {k.op} {k.module}".lower()
    if "batch_norm" in text:
        return "other elementwise"
    for row, _, pats in _ELEMENTWISE_ROWS:
        if any(p in text for p in pats):
            return row
    return "other elementwise"


def _twin_elementwise_row(name: str) -> str:
    for row, test, _ in _ELEMENTWISE_ROWS:
        if test(name):
            return row
    return "other elementwise"


def fused_parts(graph: WorkloadGraph) -> dict[str, tuple[int, ...]]:
    """The output widths of the GEMMs a fused twin GEMM stands for where a model may run them apart:
    ``attn.qkv`` as q, k and v projections (Hugging Face models), a gated ``mlp.up`` as gate and up."""
    c = graph.context
    out: dict[str, tuple[int, ...]] = {}
    if not c.mla:
        out["attn.qkv"] = (c.heads * c.qk_head_dim, c.kv_heads * c.qk_head_dim, c.kv_heads * c.v_head_dim)
    if c.gated:
        out["mlp.up"] = (c.ffn, c.ffn)
    return out


def _part_keys(x: TwinOp, parts_of: dict[str, tuple[int, ...]], phased: bool) -> list[tuple]:
    name = x.op.name
    base = name.removesuffix(".dgrad").removesuffix(".wgrad")
    if base not in parts_of:
        return []
    b, m, n, k = x.op.shape
    out = []
    for w in set(parts_of[base]):
        shape = (b, m, n, w) if name.endswith(".dgrad") else (b, m, w, k)
        out.append(_gemm_key(TwinOp(replace(x.op, shape=shape), x.count, x.phase, x.label), phased))
    return out


def _shape_label(x: TwinOp) -> str:
    b, m, n, k = x.op.shape
    if x.op.name.endswith(".wgrad"):
        m, n = n, m
    return f"{b}x {m}x{n}x{k}" if b > 1 else f"{m}x{n}x{k}"


def named_ops(traces: list[Trace], nsteps: int, twin: list[TwinOp], pricer: Pricer,
              parts_of: dict[str, tuple[int, ...]] | None = None) -> list[OpRow]:
    """Measured kernels per named op of the twin (per step: measured averaged over ``nsteps`` steps).
    ``parts_of``: the widths of fused GEMMs a trace may show apart (``fused_parts``)."""
    parts_of = parts_of or {}
    rows: dict[tuple[str, str], OpRow] = {}

    def row(cat: str, label: str, shape: str = "") -> OpRow:
        return rows.setdefault((cat, label), OpRow(label, cat, 0.0, 0.0, 0.0, 0.0, shape))

    # ---- GEMMs by shape and pass
    gemm_ops: dict[tuple[int, int], list[Kernel]] = defaultdict(list)
    for n, t in enumerate(traces):
        for k in t.kernels:
            if k.step >= 0 and k.category == "gemm" and k.gemm is not None and k.dur > 0:
                gemm_ops[(n, k.op_id)].append(k)
    phased = bool(gemm_ops) and all(ks[0].phase for ks in gemm_ops.values())
    twin_gemms = [x for x in twin if x.op.kind == OpKind.GEMM and len(x.op.shape) == 4]
    exact: dict[tuple, list[int]] = defaultdict(list)
    for i, x in enumerate(twin_gemms):
        exact[_gemm_key(x, phased)].append(i)

    def sample_key(ks: list[Kernel], keys: Any) -> tuple | None:
        g = ks[0].gemm
        assert g is not None
        ph = ks[0].phase if phased else ""
        for key in ((ph, g.batch, g.m, g.n, g.k), (ph, g.batch, g.n, g.m, g.k)):
            if key in keys:
                return key
        return None
    hit = {key for ks in gemm_ops.values() if (key := sample_key(ks, exact)) is not None}
    # a fused op never seen fused in the trace (q, k, v or gate, up as separate GEMMs) is matched by its parts
    parts: dict[tuple, list[int]] = defaultdict(list)
    for i, x in enumerate(twin_gemms):
        if _gemm_key(x, phased) not in hit:
            for key in _part_keys(x, parts_of, phased):
                parts[key].append(i)
    parent = list(range(len(twin_gemms)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    samples: list[tuple[list[int], float, float]] = []
    unmatched = [0.0, 0.0]
    for ks in gemm_ops.values():
        cands = list(exact.get(sample_key(ks, exact) or (), []))
        pk = sample_key(ks, parts)
        cands += parts.get(pk, []) if pk is not None else []
        secs = sum(k.dur for k in ks) * 1e-6
        flops = ks[0].gemm.flops if ks[0].gemm is not None else 0.0
        if not cands:
            unmatched[0] += 1
            unmatched[1] += secs
            continue
        for c in cands[1:]:
            parent[find(c)] = find(cands[0])
        samples.append((cands, secs, flops))
    comps: dict[int, list[int]] = defaultdict(list)
    for i in range(len(twin_gemms)):
        comps[find(i)].append(i)
    comp_row: dict[int, OpRow] = {}
    for root, idx in comps.items():
        xs = [twin_gemms[i] for i in idx]
        shapes = {_shape_label(x) for x in xs}
        r = row("gemm", _join([x.label for x in xs]), shapes.pop() if len(shapes) == 1 else "")
        r.predicted_count += sum(x.count for x in xs)
        r.predicted_s += sum(pricer.time(x.op) * x.count for x in xs)
        r.predicted_flops += sum(x.op.flops * x.count for x in xs)
        comp_row[root] = r
    for cands, secs, flops in samples:
        r = comp_row[find(cands[0])]
        r.measured_count += 1 / nsteps
        r.measured_s += secs / nsteps
        r.measured_flops += flops / nsteps
    if unmatched[0]:
        r = row("gemm", "(GEMMs of shapes not in the graph)")
        r.measured_count += unmatched[0] / nsteps
        r.measured_s += unmatched[1] / nsteps
    # ---- attention, memory-bound work, embedding, optimizer by name (forward and backward apart where the
    # trace says which pass launched a kernel)
    split = any(k.phase for t in traces for k in t.kernels if k.category in ("elementwise", "embedding"))

    def passed(label: str, bwd: bool) -> str:
        return f"{label} (bwd)" if split and bwd else label
    for x in twin:
        kind = x.op.kind
        if kind == OpKind.ATTENTION:
            r = row("attention", x.op.name.split(" ")[0])
        elif kind == OpKind.ELEMENTWISE:
            r = row("elementwise", passed(_twin_elementwise_row(x.op.name), x.phase == "bwd"))
        elif kind == OpKind.EMBEDDING:
            r = row("embedding", passed("embedding", x.phase == "bwd"))
        elif kind == OpKind.OPTIMIZER:
            r = row("optimizer", "optimizer")
        elif kind == OpKind.GEMM and len(x.op.shape) != 4:
            r = row("gemm", x.label)
        else:
            continue
        r.predicted_count += x.count * max(1, x.op.kernels)
        r.predicted_s += pricer.time(x.op) * x.count
    attn_fwd = next((lbl for (c, lbl) in rows if c == "attention" and not lbl.endswith(".bwd")), "attention")
    for t in traces:
        for k in t.kernels:
            if k.step < 0:
                continue
            if k.category == "attention":
                kn = k.name.lower()      # the kernel's name says its pass (flash_fwd/flash_bwd) before its op does
                bwd = ("bwd" in kn or "backward" in kn) if ("fwd" in kn or "bwd" in kn or "backward" in kn) else (
                    k.phase == "bwd" or "backward" in k.op.lower())
                r = row("attention", attn_fwd + ".bwd" if bwd else attn_fwd)
            elif k.category == "elementwise":
                r = row("elementwise", passed(_elementwise_row(k), k.phase == "bwd"))
            elif k.category == "embedding":
                r = row("embedding", passed("embedding", k.phase == "bwd"))
            elif k.category == "optimizer":
                r = row("optimizer", "optimizer")
            else:
                continue
            r.measured_count += 1 / nsteps
            r.measured_s += k.dur * 1e-6 / nsteps
    order = {"gemm": 0, "attention": 1, "elementwise": 2, "embedding": 3, "optimizer": 4}
    return sorted(rows.values(), key=lambda r: (order.get(r.category, 9), -(r.measured_s + r.predicted_s)))


# ---- collectives to process groups ----------------------------------------------------------------
def group_shapes(plan: Any) -> dict[str, tuple[int, int]]:
    """(size, stride) of the plan's process groups in Megatron's rank order; pp as the whole pipeline."""
    d = ParallelDims.of(plan)
    shapes = {g: (int(s), int(st)) for g, (s, st) in d.group_shapes().items()}
    shapes["pp"] = (int(d.pp), int(d.tp * d.cp * d.dp))
    return {g: v for g, v in shapes.items() if v[0] > 1}


def members(rank: int, size: int, stride: int) -> tuple[int, ...]:
    """The ranks of the (size, stride) group that holds ``rank``."""
    base = rank - ((rank // stride) % size) * stride
    return tuple(base + i * stride for i in range(size))


def role_of(desc: str) -> str:
    """The group a process group's description names, or "" (Megatron's ``TENSOR_MODEL_PARALLEL_GROUP``,
    ``DATA_PARALLEL_GROUP_WITH_CP``, ``EXPERT_DATA_PARALLEL_GROUP``; torchtitan's ``mesh_tp``,
    ``mesh_dp_shard_cp``, ...). Compound groups (``TENSOR_AND_DATA_PARALLEL_GROUP``, ``MODEL_PARALLEL_GROUP``,
    embedding groups) and expert-tensor groups are no group of the twin: ""."""
    t = set(re.split(r"[^a-z0-9]+", desc.lower())) - {""}
    if "and" in t or "embedding" in t or t == {"model", "parallel", "group"}:
        return ""
    if "expert" in t or "ep" in t:
        if t & {"data", "dp"}:
            return "edp"
        return "" if t & {"tensor", "tp"} else "ep"
    if "edp" in t:
        return "edp"
    for role, words in (("dp_cp", {"data", "dp", "fsdp", "shard", "replicate"}), ("cp", {"context", "cp"}),
                        ("tp", {"tensor", "tp"}), ("pp", {"pipeline", "pp"})):
        if t & words:
            return role
    return ""


_KIND_PREF = {"all_to_all": ("ep",), "send_recv": ("pp", "cp"),
              "all_reduce": ("tp", "dp_cp", "edp", "cp"), "reduce_scatter": ("dp_cp", "edp", "tp"),
              "all_gather": ("dp_cp", "edp", "tp", "cp")}


def assign_group(k: Kernel, shapes: dict[str, tuple[int, int]], twin_bytes: dict[tuple[str, str], list[float]]
                 ) -> tuple[str, str]:
    """(group, how) for one traced collective: how is ranks | name | size | size+bytes | kind | ""
    (unassigned)."""
    if len(k.group_ranks) >= 2:
        rs = tuple(sorted(set(k.group_ranks)))
        hit = [g for g, (s, st) in shapes.items() if s == len(rs) and members(rs[0], s, st) == rs]
        if len(hit) == 1:
            return hit[0], "ranks"
        if hit:
            pref = [g for g in _KIND_PREF.get(k.collective, ()) if g in hit]
            return (pref or hit)[0], "ranks"
    size = k.group_size or len(k.group_ranks)
    role = role_of(k.group_desc) if k.group_desc else ""
    if role and role in shapes and (not size or shapes[role][0] == size):
        return role, "name"
    if not size:     # nothing recorded (DeepEP's kernels): the collective alone, where it has one home
        home = {"all_to_all": "ep", "send_recv": "pp"}.get(k.collective, "")
        return (home, "kind") if home in shapes else ("", "")
    cands = [g for g, (s, _) in shapes.items() if s == size]
    if not cands:
        return "", ""
    if len(cands) == 1:
        return cands[0], "size"
    pref = [g for g in _KIND_PREF.get(k.collective, ()) if g in cands]
    if len(pref) == 1 or not k.comm_bytes:
        return (pref or cands)[0], "size"
    sized = [(abs(math.log(k.comm_bytes / b)), g) for g in (pref or cands) for b in twin_bytes.get((g, k.collective), ())
             if b > 0]
    if sized:
        return min(sized)[1], "size+bytes"
    return (pref or cands)[0], "size"


@dataclass
class GroupRow:
    group: str            # tp | cp | dp_cp | ep | edp | pp | "(unassigned)"
    size: int
    measured_count: float
    measured_s: float
    predicted_count: float
    predicted_s: float
    how: dict[str, int] = field(default_factory=dict)   # assignment method -> kernels

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s if self.measured_s > 0 else float("inf")


def group_rows(traces: list[Trace], nsteps: int, twin: list[TwinOp], pricer: Pricer, plan: Any) -> list[GroupRow]:
    """Measured collective and p2p kernel time per process group of the plan, beside the twin's."""
    shapes = group_shapes(plan)
    twin_bytes: dict[tuple[str, str], list[float]] = defaultdict(list)
    rows: dict[str, GroupRow] = {}

    def row(g: str) -> GroupRow:
        return rows.setdefault(g, GroupRow(g or "(unassigned)", shapes.get(g, (0, 0))[0], 0.0, 0.0, 0.0, 0.0))
    for x in twin:
        if x.op.kind in (OpKind.COLLECTIVE, OpKind.P2P) and x.op.group:
            twin_bytes[(x.op.group, x.op.collective)].append(x.op.comm_bytes)
            r = row(x.op.group)
            r.predicted_count += x.count
            r.predicted_s += pricer.time(x.op) * x.count
    for t in traces:
        for k in t.kernels:
            if k.step < 0 or k.category not in ("collective", "p2p"):
                continue
            g, how = assign_group(k, shapes, twin_bytes)
            r = row(g)
            r.measured_count += 1 / nsteps
            r.measured_s += k.dur * 1e-6 / nsteps
            r.how[how or "none"] = r.how.get(how or "none", 0) + 1
    order = {g: i for i, g in enumerate(GROUPS)}
    return sorted(rows.values(), key=lambda r: order.get(r.group, 99))
