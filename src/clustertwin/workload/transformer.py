"""Ops of one transformer layer (dense or MoE), the embedding and the LM head, for one micro-batch
on one rank. Sizes are already divided by the parallelism (tp heads and widths, cp sequence).

Byte counts follow the tensors each kernel must read and write (16-bit activations unless noted);
FLOPs count two per multiply-add. ``kernels`` counts the launches each op stands for in the framework
that runs it: a fused stack (apex/Transformer Engine/Inductor) runs a norm as one kernel forward and two
backward (input gradient, then the weight-gradient reduction), an eager PyTorch stack runs the norm,
RoPE, SwiGLU and the loss as composites of several kernels, several of them in fp32 (the recipes are in
``_norm``, ``_rope``, ``_mlp`` and ``head_ops``, each derived from the code that runs them). Backward GEMMs are the dgrad and wgrad GEMMs of each forward GEMM;
FlashAttention's backward does 2.5x the forward FLOPs (5 GEMMs against 2; Dao 2023, arXiv 2307.08691).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..arith import maximum
from ..constants import value
from .ops import Op, OpKind, Phase, is_score_gemm

FWD, BWD = Phase.FWD, Phase.BWD
_ATTN_BWD_FLOPS = value("attention.backward_flops_factor")  # FlashAttention backward / forward FLOPs
_SOFTMAX_BATCH_MULTIPLE = int(value("attention.fused_softmax_batch_multiple"))  # fused softmax's batch rule
# torch's experimental ring attention (cp_ring "torch"): bytes of its eager passes (constants cp.torch_*)
_CP_MERGE, _CP_FWD_ONCE, _CP_KV_CONTIG = (value("cp.torch_merge_bytes_per_output_element"),
                                          value("cp.torch_forward_once_bytes_per_output_element"),
                                          value("cp.torch_kv_contiguous_bytes_per_element"))
_CP_ACC_Q, _CP_ACC_KV, _CP_BWD_ONCE = (value("cp.torch_grad_accum_q_bytes_per_element"),
                                       value("cp.torch_grad_accum_kv_bytes_per_element"),
                                       value("cp.torch_grad_once_bytes_per_element"))
_CP_GRAD_XCHG = value("cp.torch_grad_exchange_bytes_per_element")
_CP_FWD_KV_CAT = value("cp.torch_forward_kv_concat_bytes_per_element")
_CP_MERGE_KERNELS = int(value("cp.torch_merge_kernels_per_step"))
# the same ring traced into a compiled block (torchtitan-compile): what Inductor's fused kernels move
_CPC_MERGE_READ, _CPC_WRITE = (value("cp.compiled_merge_read_bytes_per_output_element"),
                               value("cp.compiled_merge_write_bytes_per_output_element"))
_CPC_GRAD_KV, _CPC_GRAD_KV_FIRST, _CPC_GRAD_KV_FINAL = (value("cp.compiled_grad_kv_bytes_per_element"),
                                                        value("cp.compiled_grad_kv_first_bytes_per_element"),
                                                        value("cp.compiled_grad_kv_final_bytes_per_element"))
_CPC_GRAD_Q = value("cp.compiled_grad_q_read_bytes_per_element")
_CPC_FWD_KERNELS = int(value("cp.compiled_forward_kernels_per_step"))
_CP_ACC_KERNELS = int(value("cp.torch_grad_accum_kernels_per_step"))
_ROUTER_KERNELS_FWD = value("moe.router_kernels_forward")   # router, aux loss and dispatcher preprocess
_ROUTER_KERNELS_BWD = value("moe.router_kernels_backward")
_CS_KERNELS = value("fp8.current_scaling_kernels_per_quantize")    # amax, scale, cast (current scaling)
_CS_AMAX_READ = value("fp8.current_scaling_amax_read_bytes_per_element")


@dataclass(frozen=True)
class LayerContext:
    """Everything that shapes the ops of a layer on one rank: hashable, so layers are memoized."""

    micro_batch: int
    seq_len: int            # full sequence (keys per query)
    tokens: int             # tokens of this rank: micro_batch * seq_len / cp
    hidden: int
    heads: int              # query heads on this rank (after tp)
    kv_heads: int           # kv heads on this rank (replicated when tp > kv heads)
    qk_head_dim: int
    v_head_dim: int
    ffn: int                # dense MLP width on this rank
    tp: int
    cp: int
    sp: bool
    gated: bool
    norm: str               # layernorm | rmsnorm
    rope: bool
    bias: bool
    dropout: bool
    attention_kernel: str   # flash | unfused
    gemm_dtype: str         # bf16 | fp16 | fp8 | fp32
    act_bytes: int          # bytes per activation element
    fused_bias_act: bool
    fused_residual: bool
    fused_rope: bool
    # MoE (zero when dense)
    experts_local: int = 0
    top_k: int = 0
    ep: int = 1
    expert_ffn: int = 0     # expert width on this rank (after expert tp)
    shared_ffn: int = 0     # shared expert width on this rank
    num_experts: int = 0
    mla: tuple[int, ...] = ()   # (q_lora_rank or 0, kv_lora_rank, qk_rope_head_dim) when MLA
    moe_load_factor: float = 1.0  # busiest EP rank's tokens over the mean (routing imbalance)
    moe_node_dedup: tuple[int, ...] = ()  # (top_k, groups, groups per token) with a node-deduplicating dispatcher
    etp: int = 1            # expert tensor-parallel size (expert_ffn is already divided by it)
    moe_dispatcher: str = "alltoall"  # alltoall (Megatron's) | deepep: which token passes the layer makes
    moe_pad_capacity: float = 0.0  # token-drop-and-pad: every expert's input padded to this capacity factor (0: dropless)
    fused_norm: bool = True  # one norm kernel; False: PyTorch's composite in fp32 (eager)
    vocab_pad: int = 1      # the framework pads the vocabulary to a multiple of vocab_pad x tp
    loss: str = "fused"     # fused | vocab_parallel (Megatron's, fp32) | eager (F.cross_entropy on fp32 logits)
    sp_keeps_gathered: bool = False  # with SP, the column-parallel GEMMs save their all-gathered input (DTensor)
    cp_ring: str = ""       # "" (Megatron / Transformer Engine ring) | "torch" (torch's experimental ring, _torch_ring_ops)
    cp_ring_compiled: bool = False  # the torch ring traced into the compiled block (Inductor-fused merges)
    fp8_recipe: str = "delayed"  # delayed | current | mxfp8 | blockwise: what one FP8 input quantize runs

    @property
    def moe_tokens(self) -> int:
        """Tokens a rank's experts process: its sequence-parallel shard (1/tp of the tokens; Megatron-Core
        runs MoE with TP on the SP shard), gathered over the etp ranks that split each expert."""
        return self.tokens * self.etp // self.tp

    @property
    def norm_rows(self) -> int:
        """Rows a norm/residual kernel touches: 1/tp of the tokens with sequence parallelism."""
        return self.tokens // self.tp if self.sp else self.tokens   # sp holds only with tp > 1 (tokens // 1 else)


# ---- many shape classes at once -------------------------------------------------------------------
# The builders below run on one context (ints) or on a stack of contexts (``stack_contexts``: the
# fields that differ held as numpy arrays, one value per context), with the same arithmetic element
# by element, so that a search builds the ops of thousands of shape classes in one call. The fields
# that may differ within a stack are numbers only; every branch the builders take on one of them is a
# predicate of ``stack_key``, so the contexts of one stack take the same branches (``_all`` checks).
STACKED_FIELDS = ("micro_batch", "tokens", "heads", "kv_heads", "ffn", "tp", "cp", "experts_local", "ep",
                  "expert_ffn", "shared_ffn", "moe_load_factor", "etp")
_CONTEXT_FIELDS = tuple(f.name for f in fields(LayerContext))


def stack_key(c: LayerContext, *, heads: bool = False) -> tuple:
    """What contexts stacked together must share: every field but the numbers of ``STACKED_FIELDS``,
    and the branches the builders take on those numbers; ``heads``: the head counts too (op-level
    selective recomputation's shares depend on them)."""
    same = tuple(getattr(c, f) for f in _CONTEXT_FIELDS if f not in STACKED_FIELDS)
    return (*same, c.tp == 1, c.cp == 1, c.ep > 1, c.shared_ffn > 0, c.moe_load_factor == 1.0, c.experts_local > 1,
            bool(torch_softmax(c)), *((c.tp, c.heads, c.kv_heads) if heads else ()))


def stack_contexts(cs: Sequence[LayerContext]) -> LayerContext:
    """One context standing for ``cs`` (of one ``stack_key``): a field equal in all of them keeps its
    value, one that differs becomes a numpy array of theirs. Not hashable: build its ops with the
    builders' ``__wrapped__`` (``layer_ops.__wrapped__``)."""
    values: dict[str, Any] = {}
    for f in _CONTEXT_FIELDS:
        col = [getattr(c, f) for c in cs]
        first = col[0]
        if all(v == first for v in col):
            values[f] = first
        elif f in STACKED_FIELDS:
            values[f] = np.array(col)
        else:
            raise ValueError(f"contexts differ in {f}: stack only contexts of one stack_key")
    return LayerContext(**values)


def _float(x: Any) -> Any:
    """``float(x)``, element-wise on an array."""
    return x.astype(float) if isinstance(x, np.ndarray) else float(x)


def _ceil_div_mul(n: Any, d: int, factor: float) -> Any:
    """ceil(n / d x factor), element-wise on an array."""
    if isinstance(n, np.ndarray):
        return np.ceil(n / d * factor).astype(n.dtype)
    return math.ceil(n / d * factor)


def _all(cond: Any) -> bool:
    """A branch's condition: a bool, or an array of one value (contexts of one stack_key branch alike)."""
    if isinstance(cond, np.ndarray):
        if cond.all():
            return True
        if cond.any():
            raise ValueError("stacked contexts take different branches: stack by stack_key")
        return False
    return bool(cond)


def gemm(name: str, m: int, n: int, k: int, dtype: str, act_bytes: int, batch: int = 1, phase: Phase = FWD,
         layer: str = "layer") -> Op:
    elem = 1 if dtype == "fp8" else (4 if dtype == "fp32" else 2)
    traffic = batch * ((m * k + k * n) * elem + m * n * act_bytes)
    return Op(name, OpKind.GEMM, phase, flops=2.0 * batch * m * n * k, bytes=_float(traffic),
              shape=(batch, m, n, k), dtype=dtype, layer=layer)


def gemm_backward(op: Op) -> tuple[Op, Op]:
    """dgrad (dX = dY W^T) and wgrad (dW = X^T dY) of a forward GEMM."""
    batch, m, n, k = op.shape
    dgrad = gemm(op.name + ".dgrad", m, k, n, op.dtype, 2, batch, BWD, op.layer)
    wgrad = gemm(op.name + ".wgrad", k, n, m, op.dtype, 2, batch, BWD, op.layer)
    return dgrad, wgrad


def elementwise(name: str, nbytes: float, phase: Phase = FWD, layer: str = "layer", flops: float = 0.0,
                kernels: int = 1) -> Op:
    return Op(name, OpKind.ELEMENTWISE, phase, flops=flops, bytes=_float(nbytes), layer=layer, kernels=kernels)


def collective(name: str, kind: str, group: str, nbytes: float, phase: Phase, overlappable: bool = False,
               layer: str = "layer") -> Op:
    op_kind = OpKind.P2P if kind == "send_recv" else OpKind.COLLECTIVE
    return Op(name, op_kind, phase, collective=kind, group=group, comm_bytes=_float(nbytes),
              overlappable=overlappable, layer=layer)


def _norm(c: LayerContext, name: str, layer: str) -> tuple[Op, Op]:
    """A layer norm or RMSNorm over the rank's rows, forward and backward.

    Fused (apex, Transformer Engine, Inductor): the forward reads x and writes y (saving fp32 row
    statistics); the backward reads x and dy and writes dx, accumulating per-block partial weight
    gradients, then a second kernel reduces the partials (TE ln_bwd + ln_bwd_finalize).
    Eager: PyTorch's composite. RMSNorm (aten rms_norm composite, as nn.RMSNorm runs it) computes in
    fp32: to(fp32), pow, mean, add, rsqrt, mul, type_as, mul(weight): 8 kernels moving (24 + 4a) bytes
    per element (a: activation bytes); its autograd backward (weight gradient: mul + sum; type_as; the
    two mul gradients with a row sum; pow; the add of both paths; the cast back) 12 kernels, (52 + 8a).
    LayerNorm under autocast runs in fp32 (layer_norm is on autocast's fp32 list): cast in, the fp32
    kernel, cast out for the next GEMM: 3 kernels, (16 + 2a); backward 4 kernels, (28 + 2a)."""
    n = c.norm_rows * c.hidden
    a = c.act_bytes
    if c.fused_norm:
        fwd_b, fwd_k, bwd_b, bwd_k = 2 * a, 1, 3 * a, 2
    elif c.norm == "rmsnorm":
        fwd_b, fwd_k, bwd_b, bwd_k = 24 + 4 * a, 8, 52 + 8 * a, 12
    else:
        fwd_b, fwd_k, bwd_b, bwd_k = 16 + 2 * a, 3, 28 + 2 * a, 4
    fwd = elementwise(name, n * fwd_b, FWD, layer, flops=5.0 * n, kernels=fwd_k)
    bwd = elementwise(name + ".bwd", n * bwd_b, BWD, layer, flops=8.0 * n, kernels=bwd_k)
    return fwd, bwd


def _tp_enter(c: LayerContext, name: str, layer: str) -> tuple[list[Op], list[Op]]:
    """Entering a tensor-parallel region: SP all-gathers the sequence (RS in backward); without SP
    the forward is an identity and the backward all-reduces the input gradient."""
    if _all(c.tp == 1):
        return [], []
    size = c.tokens * c.hidden * c.act_bytes
    if c.sp:
        return ([collective(name + ".ag", "all_gather", "tp", size, FWD, layer=layer)],
                [collective(name + ".rs", "reduce_scatter", "tp", size, BWD, layer=layer),
                 # Megatron re-gathers the input for the wgrad GEMM, overlapped with dgrad
                 collective(name + ".ag_wgrad", "all_gather", "tp", size, BWD, overlappable=True, layer=layer)])
    return [], [collective(name + ".ar", "all_reduce", "tp", size, BWD, layer=layer)]


def _tp_exit(c: LayerContext, name: str, layer: str) -> tuple[list[Op], list[Op]]:
    """Leaving a tensor-parallel region: all-reduce (or reduce-scatter with SP) of the output."""
    if _all(c.tp == 1):
        return [], []
    size = c.tokens * c.hidden * c.act_bytes
    if c.sp:
        return ([collective(name + ".rs", "reduce_scatter", "tp", size, FWD, layer=layer)],
                [collective(name + ".ag", "all_gather", "tp", size, BWD, layer=layer)])
    return [collective(name + ".ar", "all_reduce", "tp", size, FWD, layer=layer)], []


def _residual(c: LayerContext, name: str, layer: str) -> tuple[list[Op], list[Op]]:
    """bias + dropout + residual add: fused into one kernel, or one kernel each."""
    n = c.norm_rows * c.hidden
    a = c.act_bytes
    mask = 1 if c.dropout else 0
    if c.fused_residual:
        # backward: the dropout-masked gradient, and with a bias its gradient (a reduction over tokens)
        return ([elementwise(name, n * (3 * a + mask), FWD, layer)],
                [elementwise(name + ".bwd", n * (3 * a + mask), BWD, layer, kernels=2 if c.bias else 1)])
    fwd = []
    if c.bias:
        fwd.append(elementwise(name + ".bias", n * 2 * a, FWD, layer))
    if c.dropout:
        fwd.append(elementwise(name + ".dropout", n * (2 * a + 1), FWD, layer))
    fwd.append(elementwise(name + ".add", n * 3 * a, FWD, layer))
    bwd = [elementwise(op.name + ".bwd", op.bytes, BWD, layer) for op in fwd]
    return fwd, bwd


def _attention_core(c: LayerContext, layer: str) -> tuple[list[Op], list[Op], list[Op]]:
    """Attention scores and values for the rank's queries against the whole sequence.
    Returns forward ops, backward ops, and the ops selective recomputation repeats."""
    b, a = c.micro_batch, c.heads
    s_q = c.tokens // b
    s_kv = c.seq_len
    if c.attention_kernel in ("flash", "flash2"):
        # causal: on average each query sees half the keys (CP load-balances the halves)
        flops = 2.0 * c.tokens * a * (s_kv / 2.0) * (c.qk_head_dim + c.v_head_dim)
        io = c.tokens * (a * c.qk_head_dim + c.kv_heads * (c.qk_head_dim + c.v_head_dim) + a * c.v_head_dim) * 2
        shape = (b, a, s_q, s_kv, c.qk_head_dim, c.v_head_dim)
        name = "attn." + c.attention_kernel
        kernel = Op(name, OpKind.ATTENTION, FWD, flops=flops, bytes=_float(io), shape=shape, layer=layer)
        kernel_bwd = Op(name + ".bwd", OpKind.ATTENTION, BWD, flops=_ATTN_BWD_FLOPS * flops, bytes=_float(2 * io),
                        shape=shape, layer=layer)
        return [kernel], [kernel_bwd], [kernel]
    scores = b * a * s_q * s_kv
    if _all(torch_softmax(c)):
        # Megatron's FusedScaleMaskSoftmax falls back to forward_torch_softmax (constants
        # attention.fused_softmax_batch_multiple): with query-key layer scaling (on by default) the softmax
        # runs in fp32: float() (a + 4), * scale (8), masked_fill_ (4 + 1 mask byte + 4), softmax (8), the
        # cast back (4 + a): 5 kernels; the autograd backward mirrors each: the cast's gradient (a + 4),
        # softmax's (12), masked_fill's (9), the scale's (8), float()'s (4 + a)
        per_score = 33 + 2 * c.act_bytes
        softmax = elementwise("attn.softmax", scores * per_score, FWD, layer, flops=5.0 * scores, kernels=5)
    else:
        softmax = elementwise("attn.softmax", scores * 4, FWD, layer, flops=5.0 * scores)
    fwd = [gemm("attn.qk", s_q, s_kv, c.qk_head_dim, "bf16", 2, b * a, FWD, layer), softmax]
    if c.dropout:
        fwd.append(elementwise("attn.dropout", scores * 5, FWD, layer))
    fwd.append(gemm("attn.av", s_q, c.v_head_dim, s_kv, "bf16", 2, b * a, FWD, layer))
    # [b, heads, s, d] -> [s, b, heads * d] for the projection: permute + contiguous, one copy kernel
    fwd.append(elementwise("attn.context_copy", c.tokens * a * c.v_head_dim * 2 * c.act_bytes, FWD, layer))
    bwd: list[Op] = []
    for op in reversed(fwd):
        if op.kind == OpKind.GEMM:
            bwd.extend(gemm_backward(op))
        elif op.name == "attn.context_copy" or (op.name == "attn.softmax" and op.kernels > 1):
            # a copy's gradient is a copy; the PyTorch softmax's backward moves what its forward does
            bwd.append(elementwise(op.name + ".bwd", op.bytes, BWD, layer, flops=op.flops, kernels=op.kernels))
        else:
            bwd.append(elementwise(op.name + ".bwd", op.bytes * 1.5, BWD, layer, flops=op.flops))
    return fwd, bwd, list(fwd)


def torch_softmax(c: LayerContext) -> Any:
    """Whether the unfused attention's softmax runs as PyTorch ops rather than Megatron's fused kernel:
    its micro-batch x heads per rank is not a multiple of ``attention.fused_softmax_batch_multiple``."""
    return (c.attention_kernel == "unfused") & ((c.micro_batch * c.heads) % _SOFTMAX_BATCH_MULTIPLE != 0)


def _cp_exchange(c: LayerContext, layer: str) -> tuple[list[Op], list[Op]]:
    """Ring attention (context parallelism): cp-1 steps passing this rank's K/V chunk around the ring,
    overlapped with the attention of the chunk at hand; backward passes K/V and their gradients."""
    if _all(c.cp == 1):
        return [], []
    if c.cp_ring == "torch":
        return _torch_ring_ops(c, layer)
    kv = c.tokens * c.kv_heads * (c.qk_head_dim + c.v_head_dim) * 2
    steps = c.cp - 1
    return ([collective("attn.cp_ring", "send_recv", "cp", kv * steps, FWD, overlappable=True, layer=layer)],
            [collective("attn.cp_ring.bwd", "send_recv", "cp", 2 * kv * steps, BWD, overlappable=True, layer=layer)])


# the ring's exchanges the compute stream waits for at once (schedule/step.py accumulate_ops)
LAST_STEP_CP = "attn.cp_grad_exchange_last"


def _torch_ring_ops(c: LayerContext, layer: str) -> tuple[list[Op], list[Op]]:
    """What torch's experimental ring attention (torch/distributed/tensor/experimental/_attention.py of
    Dec 2024, as torchtitan 9dec370 calls it) runs besides its SDPA calls, on the busiest rank (the last
    of the ring: every step after the first merges the whole output), per layer and micro-batch:

    * K/V exchange: torchtitan repeats the K/V heads before SDPA (repeat_kv), so the ring moves
      ``heads`` K/V heads, not ``kv_heads``; the default rotater (``allgather``) all-gathers them once
      (bf16), issued before the first step's attention and waited at the second step; backward
      all-gathers them again and passes the float32 dK/dV accumulators to the next rank every step
      (all-to-all rotater), each beside the next step's attention; the last one is waited for after
      the loop (``LAST_STEP_CP``).
    * forward: one flash call per step (priced by the attention kernel), each step's output cast to
      float32 and merged with the running output and log-sum-exp in eager kernels
      (``cp.torch_merge_*``), the first cast and the final cast back, the K/V made contiguous, and the
      K/V concatenated into a send buffer every step but the last (``cp.torch_forward_kv_concat_*``).
    * backward: float32 zeros for dQ/dK/dV, per step dQ and dK/dV accumulated in float32, the chunks
      concatenated, the send buffers built (``cp.torch_grad_*``), the final casts.
    * compiled (``cp_ring_compiled``, torchtitan-compile): the ring is traced into the block's graph and
      those passes are Inductor's fused kernels instead (_compiled_ring_passes, ``cp.compiled_*``).
    """
    steps = c.cp
    kv_elems = c.tokens * c.heads * (c.qk_head_dim + c.v_head_dim)     # K and V, heads repeated
    q_elems = c.tokens * c.heads * c.qk_head_dim
    out_elems = c.tokens * c.heads * c.v_head_dim
    kv_bytes = kv_elems * c.act_bytes
    fwd = [collective("attn.cp_allgather", "all_gather", "cp", kv_bytes * c.cp, FWD, overlappable=True,
                      layer=layer),
           elementwise("attn.cp_merge", out_elems * (_CP_FWD_ONCE + _CP_MERGE * (steps - 1))
                       + kv_elems * (_CP_KV_CONTIG + _CP_FWD_KV_CAT * (steps - 1)), FWD, layer,
                       kernels=2 + (_CP_MERGE_KERNELS + 1) * (steps - 1))]
    bwd_passes = elementwise("attn.cp_grad_accum", (q_elems * _CP_ACC_Q + kv_elems * _CP_ACC_KV) * steps
                             + (q_elems + kv_elems) * _CP_BWD_ONCE + kv_elems * _CP_KV_CONTIG, BWD, layer,
                             kernels=4 + _CP_ACC_KERNELS * steps)
    if c.cp_ring_compiled:
        fwd[1], bwd_passes = _compiled_ring_passes(c, layer, steps, q_elems, kv_elems, out_elems)
    bwd = [collective("attn.cp_allgather.bwd", "all_gather", "cp", kv_bytes * c.cp, BWD, overlappable=True,
                      layer=layer),
           collective("attn.cp_grad_exchange", "send_recv", "cp", kv_elems * _CP_GRAD_XCHG * (steps - 1), BWD,
                      overlappable=True, layer=layer),
           # the last step's dK/dV, waited for after the loop (dkv_rotater.next_buffer()): nothing left to hide it
           collective(LAST_STEP_CP, "send_recv", "cp", kv_elems * _CP_GRAD_XCHG, BWD, overlappable=True, layer=layer),
           bwd_passes]
    return fwd, bwd


def _compiled_ring_passes(c: LayerContext, layer: str, steps: int, q_elems: Any, kv_elems: Any,
                          out_elems: Any) -> tuple[Op, Op]:
    """The ring's memory passes when torch.compile traces it into the block (torchtitan-compile,
    constants cp.compiled_*): Inductor fuses the forward merge of every step into one kernel after the
    last SDPA call (each step's 16-bit block output read once, the merged output written once), keeps one
    send-buffer concatenation (the later ones feed nothing with the allgather rotater), and in backward
    writes each step's float32 dK/dV send buffer in one kernel, sums the steps' dQ in one kernel after the
    loop and casts the last dK/dV back. The K/V contiguous copies stay (the flash kernel's inputs)."""
    fwd = elementwise("attn.cp_merge", out_elems * (_CPC_MERGE_READ * steps + _CPC_WRITE)
                      + kv_elems * (_CP_KV_CONTIG + _CP_FWD_KV_CAT), FWD, layer,
                      kernels=2 + _CPC_FWD_KERNELS * (steps - 1))     # send-buffer cat, fused merge, lse steps
    bwd = elementwise("attn.cp_grad_accum", q_elems * (_CPC_GRAD_Q * steps + _CPC_WRITE)
                      + kv_elems * (_CPC_GRAD_KV_FIRST + _CPC_GRAD_KV * (steps - 1) + _CPC_GRAD_KV_FINAL
                                    + _CP_KV_CONTIG + _CP_FWD_KV_CAT), BWD, layer,
                      kernels=3 + steps)     # one per step, the send-buffer cat, the dQ sum, the dK/dV cast
    return fwd, bwd


def _mlp(c: LayerContext, name: str, width: int, tokens: int, layer: str, batch: int = 1) -> tuple[list[Op], list[Op]]:
    ups = 2 if c.gated else 1
    a = c.act_bytes
    up = gemm(f"{name}.up", tokens, ups * width, c.hidden, c.gemm_dtype, a, batch, FWD, layer)
    down = gemm(f"{name}.down", tokens, c.hidden, width, c.gemm_dtype, a, batch, FWD, layer)
    n = batch * tokens * width
    if c.fused_bias_act or not c.gated:
        # one kernel: reads the up projection(s), writes the activation; backward reads dy and the
        # inputs, writes their gradients
        act_fwd = [elementwise(f"{name}.act", n * (ups + 1) * a, FWD, layer, flops=8.0 * n)]
        act_bwd = [elementwise(f"{name}.act.bwd", n * (1 + 2 * ups) * a, BWD, layer, flops=8.0 * n)]
    else:
        # eager SwiGLU, silu(gate) * up: silu (2a) and mul (3a); backward: the two mul gradients (3a
        # each) and silu's (3a)
        act_fwd = [elementwise(f"{name}.act", n * 5 * a, FWD, layer, flops=8.0 * n, kernels=2)]
        act_bwd = [elementwise(f"{name}.act.bwd", n * 9 * a, BWD, layer, flops=8.0 * n, kernels=3)]
    if c.bias and not c.fused_bias_act:
        act_fwd.insert(0, elementwise(f"{name}.bias", n * ups * 2 * a, FWD, layer))
        act_bwd.append(elementwise(f"{name}.bias.bwd", n * ups * 2 * a, BWD, layer))
    fwd = [up, *act_fwd, down]
    bwd = [*gemm_backward(down), *act_bwd, *gemm_backward(up)]
    return fwd, bwd


def _moe_mlp(c: LayerContext, layer: str) -> tuple[list[Op], list[Op]]:
    """Router, dispatch (all-to-all over ep), grouped expert GEMMs, combine; shared experts beside.

    What a dropless Megatron-Core layer runs (megatron/core/transformer/moe/token_dispatcher.py,
    MoEAlltoAllTokenDispatcher): the router and its aux loss (a dozen small kernels,
    ``moe.router_kernels_forward``), the token counts gathered over the EP group and copied to the host,
    where the host *waits* for them (``moe.dtoh_sync``: the all-to-all's splits and the grouped GEMM's
    per-expert sizes are host integers), permutation 1 (tokens grouped by destination rank), the
    all-to-all, permutation 2 (``sort_chunks_by_idxs``: the received chunks regrouped by local expert,
    when a rank holds more than one), the experts (in FP8 between a padding and an unpadding copy:
    megatron/core/transformer/moe/experts.py TEGroupedMLP.forward, quantization_padding), and the same
    passes in reverse to combine. DeepEP
    sends each token straight from its unsorted place and groups the received ones by expert once
    (one permutation each way)."""
    a = c.act_bytes
    tokens = c.moe_tokens                                     # the SP shard, gathered over expert TP
    routed = tokens * c.top_k                                 # token copies this rank sends (balanced)
    padded = c.moe_pad_capacity > 0
    if padded:
        # token-drop-and-pad: every expert gets exactly its capacity, ceil(tokens x top_k / experts x c)
        # rows (Megatron-Core moe_utils.get_capacity), dropped tokens and padding included, on every rank
        routed = _ceil_div_mul(routed, c.num_experts, c.moe_pad_capacity) * c.num_experts
    router = gemm("moe.router", tokens, c.num_experts, c.hidden, "fp32", 4, 1, FWD, layer)
    fwd: list[Op] = [router, elementwise("moe.topk", tokens * c.num_experts * 8, FWD, layer,
                                         kernels=int(_ROUTER_KERNELS_FWD)),
                     elementwise("moe.permute", routed * c.hidden * 2 * a, FWD, layer)]
    bwd_tail: list[Op] = [*gemm_backward(router), elementwise("moe.permute.bwd", routed * c.hidden * 2 * a, BWD, layer),
                          elementwise("moe.topk.bwd", tokens * c.num_experts * 8, BWD, layer,
                                      kernels=int(_ROUTER_KERNELS_BWD))]
    # the per-expert token counts of every EP rank (int64), gathered before the host can size the all-to-all
    # (padded to capacity, the splits and the experts' sizes are known on the host: no gather, no read-back;
    # token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess returns before either when drop_and_pad)
    if _all(c.ep > 1) and not padded:
        fwd.insert(2, collective("moe.token_counts", "all_gather", "ep", c.num_experts * 8 * c.ep, FWD, layer=layer))
    # the counts' device-to-host copy; the host waits for it (compute.host_sync)
    if not padded:
        fwd.append(Op("moe.dtoh_sync", OpKind.ELEMENTWISE, FWD, bytes=_float(8.0 * c.num_experts), layer=layer,
                      extra={"host_sync": True}))
    sort = c.moe_dispatcher != "deepep" and _all(c.experts_local > 1) and _all(c.ep > 1)
    # Megatron's alltoall dispatcher sends the routing probabilities in an all-to-all of their own, after the
    # tokens' (token_dispatcher.py MoEAlltoAllTokenDispatcher.token_dispatch: global_probs = all_to_all(...),
    # core_r0.15 0d8e071 and core_r0.16 b0cc270): one value per routed copy, in the router logits' dtype;
    # its gradient returns the same way in the backward. DeepEP carries the probabilities in its dispatch.
    probs_a2a = _all(c.ep > 1) and c.moe_dispatcher != "deepep"
    if _all(c.ep > 1):
        fwd.append(collective("moe.dispatch", "all_to_all", "ep", routed * c.hidden * a, FWD, layer=layer))
    if probs_a2a:
        fwd.append(collective("moe.dispatch_probs", "all_to_all", "ep", routed * a, FWD, layer=layer))
    if sort:
        fwd.append(elementwise("moe.sort_chunks", routed * c.hidden * 2 * a, FWD, layer))
    per_expert = maximum(1, routed // maximum(1, c.experts_local))
    e_fwd, e_bwd = _mlp(c, "moe.expert", c.expert_ffn, per_expert, layer, batch=c.experts_local)
    if c.gemm_dtype == "fp8" and c.moe_dispatcher != "deepep":
        # FP8 GEMMs need each expert's rows in multiples of the recipe's alignment: Megatron-Core's
        # TEGroupedMLP copies the tokens into a padded buffer (TE Fp8Padding) and the output back out
        # (Fp8Unpadding); each copy's backward is the reverse copy of the gradient
        pad = routed * c.hidden * 2 * a
        e_fwd = [elementwise("moe.expert.fp8_pad", pad, FWD, layer), *e_fwd,
                 elementwise("moe.expert.fp8_unpad", pad, FWD, layer)]
        e_bwd = [elementwise("moe.expert.fp8_unpad.bwd", pad, BWD, layer), *e_bwd,
                 elementwise("moe.expert.fp8_pad.bwd", pad, BWD, layer)]
    e_fwd, e_bwd = _loaded(e_fwd, c.moe_load_factor), _loaded(e_bwd, c.moe_load_factor)
    fwd += e_fwd
    bwd: list[Op] = []
    if sort:
        fwd.append(elementwise("moe.unsort_chunks", routed * c.hidden * 2 * a, FWD, layer))
    if _all(c.ep > 1):
        fwd.append(collective("moe.combine", "all_to_all", "ep", routed * c.hidden * a, FWD, layer=layer))
        bwd.append(collective("moe.combine.bwd", "all_to_all", "ep", routed * c.hidden * a, BWD, layer=layer))
    if sort:
        bwd.append(elementwise("moe.unsort_chunks.bwd", routed * c.hidden * 2 * a, BWD, layer))
    fwd.append(elementwise("moe.unpermute", routed * c.hidden * 2 * a, FWD, layer))
    bwd.append(elementwise("moe.unpermute.bwd", routed * c.hidden * 2 * a, BWD, layer))
    bwd += e_bwd
    if sort:
        bwd.append(elementwise("moe.sort_chunks.bwd", routed * c.hidden * 2 * a, BWD, layer))
    if probs_a2a:
        bwd.append(collective("moe.dispatch_probs.bwd", "all_to_all", "ep", routed * a, BWD, layer=layer))
    if _all(c.ep > 1):
        bwd.append(collective("moe.dispatch.bwd", "all_to_all", "ep", routed * c.hidden * a, BWD, layer=layer))
    bwd += bwd_tail
    fwd = [op if not op.name.startswith(("moe.dispatch", "moe.combine")) else _a2a(op, c) for op in fwd]
    bwd = [op if not op.name.startswith(("moe.dispatch", "moe.combine")) else _a2a(op, c) for op in bwd]
    if _all(c.shared_ffn > 0):
        s_fwd, s_bwd = _mlp(c, "moe.shared", c.shared_ffn, c.tokens, layer)
        fwd += s_fwd
        bwd = s_bwd + bwd
    return fwd, bwd


def _a2a(op: Op, c: LayerContext) -> Op:
    """A dispatch/combine all-to-all with the busiest rank's load and, with a node-deduplicating
    dispatcher, what the network pricer needs to count one copy per target node."""
    op = _loaded([op], c.moe_load_factor)[0]
    return replace(op, extra={**op.extra, "node_dedup": c.moe_node_dedup}) if c.moe_node_dedup else op


def _loaded(ops: list[Op], factor: float) -> list[Op]:
    """Ops that the busiest EP rank runs ``factor`` times longer (priced balanced, then scaled)."""
    if _all(factor == 1.0):
        return ops
    return [replace(op, extra={**op.extra, "load_factor": factor}) for op in ops]


def _qkv(c: LayerContext, layer: str) -> list[Op]:
    a, h, dt = c.act_bytes, c.hidden, c.gemm_dtype
    T = c.tokens
    if c.mla:
        q_rank, kv_rank, rope = c.mla
        ops = []
        if q_rank:
            ops += [gemm("attn.q_down", T, q_rank, h, dt, a, 1, FWD, layer),
                    gemm("attn.q_up", T, c.heads * c.qk_head_dim, q_rank, dt, a, 1, FWD, layer)]
        else:
            ops.append(gemm("attn.q", T, c.heads * c.qk_head_dim, h, dt, a, 1, FWD, layer))
        nope = c.qk_head_dim - rope
        ops += [gemm("attn.kv_down", T, kv_rank + rope, h, dt, a, 1, FWD, layer),
                gemm("attn.kv_up", T, c.heads * (nope + c.v_head_dim), kv_rank, dt, a, 1, FWD, layer)]
        return ops
    n = c.heads * c.qk_head_dim + c.kv_heads * (c.qk_head_dim + c.v_head_dim)
    return [gemm("attn.qkv", T, n, h, dt, a, 1, FWD, layer)]


@lru_cache(maxsize=4096)
def layer_ops(c: LayerContext, moe: bool) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """(forward, backward, attention-core) ops of one layer for one micro-batch."""
    layer = "moe_layer" if moe else "layer"
    fwd: list[Op] = []
    bwd_rev: list[list[Op]] = []   # backward built in reverse order of the forward sections

    n1, n1b = _norm(c, "norm1", layer)
    e_f, e_b = _tp_enter(c, "attn.tp_in", layer)
    qkv = _qkv(c, layer)
    fwd += [n1, *e_f, *qkv]
    section = [*[x for op in reversed(qkv) for x in gemm_backward(op)], *e_b, n1b]
    bwd_rev.append(section)
    if c.rope:
        # fused: one kernel per tensor (q, k) reading and writing it. Eager (torchtitan's complex
        # rotation): per tensor float() (a + 4), the complex multiply (8), type_as (4 + a): 3 kernels; the
        # backward mirrors it
        elems = c.tokens * (c.heads + c.kv_heads) * c.qk_head_dim
        per_elem, kernels = (2 * c.act_bytes, 2) if c.fused_rope else (16 + 2 * c.act_bytes, 6)
        fwd.append(elementwise("attn.rope", elems * per_elem, FWD, layer, kernels=kernels))
        bwd_rev.append([elementwise("attn.rope.bwd", elems * per_elem, BWD, layer, kernels=kernels)])
    core_f, core_b, core_rc = _attention_core(c, layer)
    cp_f, cp_b = _cp_exchange(c, layer)
    fwd += [*cp_f, *core_f]
    bwd_rev.append([*cp_b, *core_b])
    proj = gemm("attn.proj", c.tokens, c.hidden, c.heads * c.v_head_dim, c.gemm_dtype, c.act_bytes, 1, FWD, layer)
    x_f, x_b = _tp_exit(c, "attn.tp_out", layer)
    r_f, r_b = _residual(c, "attn.residual", layer)
    fwd += [proj, *x_f, *r_f]
    bwd_rev.append([*r_b, *x_b, *gemm_backward(proj)])

    n2, n2b = _norm(c, "norm2", layer)
    if moe:
        m_f, m_b = _moe_mlp(c, layer)
        # shared experts and TP regions: MoE layers run on the SP shard; dense pieces keep tp comm
        fwd += [n2, *m_f]
        r2_f, r2_b = _residual(c, "mlp.residual", layer)
        fwd += r2_f
        bwd_rev.append([*r2_b, *m_b, n2b])
    else:
        e2_f, e2_b = _tp_enter(c, "mlp.tp_in", layer)
        m_f, m_b = _mlp(c, "mlp", c.ffn, c.tokens, layer)
        x2_f, x2_b = _tp_exit(c, "mlp.tp_out", layer)
        r2_f, r2_b = _residual(c, "mlp.residual", layer)
        fwd += [n2, *e2_f, *m_f, *x2_f, *r2_f]
        bwd_rev.append([*r2_b, *x2_b, *m_b, *e2_b, n2b])
    bwd = [op for section in reversed(bwd_rev) for op in section]
    if c.gemm_dtype == "fp8":
        fwd, bwd = _with_fp8_casts(fwd, c.fp8_recipe), _with_fp8_casts(bwd, c.fp8_recipe)
    return tuple(fwd), tuple(bwd), tuple(core_rc)


def op_sac_recompute(c: LayerContext, fwd: tuple[Op, ...]) -> tuple[Op, ...]:
    """The forward ops that op-level selective activation checkpointing repeats (torchtitan's
    ``selective_ac_option = "op"``, torchtitan/parallelisms/parallelize_llama.py): it keeps the
    outputs of the attention kernel and of every other matmul of the block -- in call order wq, wk,
    wv, wo, w1, w3, w2 (gated) it keeps wq, wv, w1, w2 -- and recomputes everything else: norms,
    RoPE, activations, residual adds and the wk, wo and w3 matmuls (w2 for a non-gated MLP).
    Our fused QKV and gate/up GEMMs contribute the share of the matmuls recomputed."""
    q = c.heads * c.qk_head_dim
    k = c.kv_heads * c.qk_head_dim
    v = c.kv_heads * c.v_head_dim
    keep_share = {"attn.qkv": (q + v) / (q + k + v), "mlp.up": 0.5 if c.gated else 1.0,
                  "mlp.down": 1.0 if c.gated else 0.0, "attn.proj": 0.0}
    out = []
    for op in fwd:
        if op.is_comm or op.kind == OpKind.ATTENTION or is_score_gemm(op.name) or op.name.startswith("attn.cp_"):
            continue    # (the ring's merges run inside the SDPA op whose output SAC keeps)
        base = op.name.removesuffix(".fp8_cast")
        share = 1.0 - keep_share.get(base, 0.0)
        if share <= 0.0:
            continue
        if share < 1.0 and op.kind == OpKind.GEMM:       # the recomputed columns of a fused GEMM
            batch, m, n, k = op.shape
            op = replace(gemm(op.name, m, max(1, round(n * share)), k, op.dtype, c.act_bytes, batch, FWD, op.layer))
        elif share < 1.0:                                 # its input cast, in proportion
            op = replace(op, bytes=op.bytes * share)
        out.append(op)
    return tuple(out)


def _with_fp8_casts(ops: list[Op], recipe: str = "delayed") -> list[Op]:
    """FP8 GEMMs (Transformer Engine) need their A operand quantized, in both the row-wise and the
    transposed layout Hopper's FP8 tensor cores require: one cast-transpose kernel per GEMM input
    (forward activations, backward output gradients) reading 16-bit and writing two 8-bit copies.
    Weight-gradient GEMMs reuse those copies; weights are cast once per iteration (not here).
    Current scaling (``recipe`` "current") first reads the input for its amax and computes the scale:
    three kernels and one more read per quantize (``fp8.current_scaling_*``); delayed scaling, MXFP8
    and block scaling quantize in the one kernel."""
    current = recipe == "current"
    kernels = int(_CS_KERNELS) if current else 1
    per_elem = 4 + (_CS_AMAX_READ if current else 0)
    out: list[Op] = []
    for op in ops:
        if op.kind == OpKind.GEMM and op.dtype == "fp8" and not op.name.endswith(".wgrad"):
            batch, m, _, k = op.shape
            cast = elementwise(op.name + ".fp8_cast", batch * m * k * per_elem, op.phase, op.layer, kernels=kernels)
            if op.name.startswith("moe.expert."):
                # routed experts: Transformer Engine's split_quantize quantizes each expert's rows apart
                # (one kernel per expert, constants moe.expert_quantize_launch_host_s)
                cast = replace(cast, extra={**cast.extra, "experts": batch})
            out.append(cast)
        out.append(op)
    return out


def _padded_vocab(c: LayerContext, vocab: int) -> int:
    """The vocabulary rows of one TP rank: Megatron pads the vocabulary to a multiple of
    ``vocab_pad`` x tp (--make-vocab-size-divisible-by), others split it as it is."""
    multiple = c.vocab_pad * c.tp
    return -(-vocab // multiple) * multiple // c.tp


@lru_cache(maxsize=1024)
def embedding_ops(c: LayerContext, vocab: int, learned_positions: bool) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Token (and position) embedding on the first stage: vocab-parallel over tp."""
    a = c.act_bytes
    T = c.tokens
    fwd = [Op("embedding.lookup", OpKind.EMBEDDING, FWD,
              bytes=_float(T * c.hidden * a * (3 if learned_positions else 2)),
              layer="embedding", kernels=3 if learned_positions else 1)]
    # backward: embedding_dense_backward sorts the token ids and sums rows into a zeroed (vocab x hidden)
    # gradient, which is then added into the accumulated gradient (read both, write one)
    table = _padded_vocab(c, vocab) * c.hidden * a
    bwd = [Op("embedding.grad", OpKind.EMBEDDING, BWD, bytes=_float(T * c.hidden * (a + 4) * 2 + 4 * table),
              layer="embedding", kernels=5)]
    if _all(c.tp > 1):
        size = T * c.hidden * a
        kind = "reduce_scatter" if c.sp else "all_reduce"
        fwd.append(collective("embedding.tp", kind, "tp", size, FWD, layer="embedding"))
        if c.sp:
            bwd.insert(0, collective("embedding.tp.bwd", "all_gather", "tp", size, BWD, layer="embedding"))
    return tuple(fwd), tuple(bwd)


def mtp_ops(c: LayerContext, vocab: int, fused_ce: bool, moe: bool, depth: int,
            stacked: bool = False) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """The multi-token-prediction modules trained beside the model on its last stage (DeepSeek-V3
    Technical Report, arXiv 2412.19437, Sec. 2.2, Fig. 3; D = ``depth`` modules, V3: 1). Each module k:
    the shared embedding looked up for the tokens k positions ahead, RMSNorm of it and of the previous
    depth's hidden state, their concatenation projected 2h -> h (M_k), one transformer block (the
    layer type of the model's next layer, ``moe``: V3's MTP block is an MoE layer) and the shared output
    head with its cross-entropy run again. The projection is priced column-parallel over tp (its
    output's tp exchange is left out: one h-wide tensor per module). ``stacked``: ``c`` holds arrays of
    many shape classes (the cached builders' undecorated functions are called)."""
    if depth <= 0:
        return (), ()
    lay = layer_ops.__wrapped__ if stacked else layer_ops
    emb = embedding_ops.__wrapped__ if stacked else embedding_ops
    head = head_ops.__wrapped__ if stacked else head_ops
    a, T, h = c.act_bytes, c.tokens, c.hidden
    e_f, e_b = emb(c, vocab, False)
    nh, nhb = _norm(c, "mtp.norm_hidden", "head")
    ne, neb = _norm(c, "mtp.norm_embedding", "head")
    cat = elementwise("mtp.concat", T * 2 * h * a * 2, FWD, "head")          # torch.cat: read both, write
    cat_b = elementwise("mtp.concat.bwd", T * 2 * h * a * 2, BWD, "head")    # the split of its gradient
    proj = gemm("mtp.proj", T, h // c.tp, 2 * h, c.gemm_dtype, a, 1, FWD, "head")
    l_f, l_b, _ = lay(c, moe)
    h_f, h_b = head(c, vocab, fused_ce)
    fwd = (*e_f, nh, ne, cat, proj, *l_f, *h_f)
    bwd = (*h_b, *l_b, *gemm_backward(proj), cat_b, neb, nhb, *e_b)
    return fwd * depth, bwd * depth


@lru_cache(maxsize=1024)
def head_ops(c: LayerContext, vocab: int, fused_ce: bool) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Final norm, output projection over a vocab-parallel head, cross-entropy in fp32."""
    n, nb = _norm(c, "final_norm", "head")
    e_f, e_b = _tp_enter(c, "head.tp_in", "head")
    v_local = _padded_vocab(c, vocab)
    logits = gemm("head.logits", c.tokens, v_local, c.hidden, "bf16" if c.gemm_dtype == "fp8" else c.gemm_dtype,
                  c.act_bytes, 1, FWD, "head")
    elems = c.tokens * v_local
    a = c.act_bytes
    loss = "fused" if fused_ce else (c.loss if c.loss != "fused" else "eager")
    if loss == "fused":      # logits read once, the gradient written in the forward kernel
        f_b, f_k, b_b, b_k = 4, 1, 2, 1
    elif loss == "vocab_parallel":
        # Megatron's vocab-parallel cross-entropy on fp32 logits: float() (a + 4), max (4), subtract (8),
        # exp (8), sum (4), divide (8) and the target pick; backward: the one-hot subtract, mul_ by the
        # loss gradient (8) and the cast back to the logits' dtype (4 + a)
        f_b, f_k, b_b, b_k = 36 + a, 8, 12 + a, 3
    else:
        # F.cross_entropy(logits.float()): float() (a + 4), log_softmax (8), nll; backward: the nll
        # gradient (zero fill, scatter: 4), log_softmax's (12), the cast back (4 + a)
        f_b, f_k, b_b, b_k = 12 + a, 3, 20 + a, 4
    ce_f = elementwise("head.cross_entropy", elems * f_b, FWD, "head", flops=5.0 * elems, kernels=f_k)
    ce_b = elementwise("head.cross_entropy.bwd", elems * b_b, BWD, "head", flops=2.0 * elems, kernels=b_k)
    fwd = [n, *e_f, logits, ce_f]
    if _all(c.tp > 1):
        fwd.append(collective("head.ce_stats", "all_reduce", "tp", c.tokens * 4 * 3, FWD, layer="head"))
    bwd = [ce_b, *gemm_backward(logits), *e_b, nb]
    return tuple(fwd), tuple(bwd)
