"""Price compute ops: a roofline with shape-dependent efficiency.

time = max(FLOPs / (peak * efficiency(shape)), bytes / (HBM bandwidth * memory efficiency)),
plus the GPU's gap between kernels. A GEMM kernel's compute side also carries its fixed fill-and-drain
time (``HardwareProfile.gemm_fixed_s``, fitted with the shape terms to measured GEMMs:
benchmarks/gemm_shape_fit.py); the bytes it moves meanwhile count toward the memory side, so a
memory-bound GEMM (decode at batch 1) hides it. A GEMM whose leading dimensions are not multiples of 16 bytes runs
at a fraction of that (NVIDIA's Tensor Core requirements). The host's cost of issuing an op's kernels
(``host_time``: the framework's per-kernel dispatch, Python and autograd included) is priced apart:
the schedule runs a phase's ops as a stream the host feeds (``stream_time``), so small kernels cost
what the host needs to issue them and long kernels hide the host behind them.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence, cast

import numpy as np

from ..arith import maximum, minimum
from ..constants import group, value
from ..specs.hardware import GPUSpec
from ..workload.ops import Op, OpKind, Phase, element_bytes, is_score_gemm
from ..specs.framework import FrameworkProfile
from .power import clock as power_clock, time_factor
from .profile import HardwareProfile

# (tile rows, tile cols, relative efficiency of the tile): large tiles run best (cuBLAS heuristics)
_TILES = tuple((*map(int, tile.split("x")), eff) for tile, eff in group("gemm_tile_efficiency").items())
OPTIMIZER_KERNELS = int(value("optimizer.kernels"))  # multi-tensor apply: a handful of launches for the whole step
_QUERY_TILE = int(value("attention.query_tile_rows"))  # rows of one attention thread block
_HEAD_DIM_REF = value("attention.reference_head_dim")  # the head dim the profile's efficiencies are for
_HEAD_DIM_EXP = value("attention.head_dim_exponent")
_ALIGN_BYTES = value("gemm.alignment_bytes")           # leading dimensions in multiples of this run fastest
_UNALIGNED_EFF = value("gemm.unaligned_efficiency")    # efficiency multiplier of an unaligned GEMM
_COLLECTIVE_HOST = value("host.collective_launch_s")   # host time of one collective launch
_TP_CHUNK_STREAMS = value("gemm.tp_overlap_compute_streams")  # TE's compute streams of a TP-overlapped GEMM
_EXPERT_STREAMS = int(value("moe.grouped_gemm_streams"))   # expert GEMMs that run at once (TE grouped linear)
_EXPERT_LAUNCH_HOST = value("moe.expert_gemm_launch_host_s")  # host time of one expert's GEMM launch
_DTOH_SYNC = value("moe.dtoh_sync_s")                  # host time of the MoE token-count read-back
_EXPERT_QUANTIZE_HOST = value("moe.expert_quantize_launch_host_s")   # one expert's FP8 input quantize launch
_EXPERT_PY_HOST = value("moe.expert_python_host_s")    # TE grouped linear's Python per expert (FP8 fwd, wgrad)
_EXPERT_GRAD_HOOK = value("moe.expert_grad_hook_host_s")   # AccumulateGrad + Megatron DDP hook per expert weight
_CPP_LAUNCH_HOST = value("host.cpp_kernel_launch_s")     # a kernel launched from C++ after the call's first
_GRAPH_REPLAY_HOST = value("host.cuda_graph_replay_s")   # one captured region's replay, per phase

# Ops of a layer each CUDA graph scope captures (Megatron-Core core_r0.15, 0d8e071,
# transformer/transformer_layer.py _te_cuda_graph_replay): "attn" the attention part (input norm through
# its residual add, TP collectives included); "moe_router" resumes the layer from the pre-MLP norm through
# MoELayer.route (router GEMM, top-k, aux-loss kernels); "moe_preprocess" adds the token dispatcher's
# dispatch_preprocess (token counts, the first permutation; the alltoall dispatcher's D2H read-back then
# waits before the all-to-all, outside the graph: token_dispatcher.py cuda_dtoh_point
# "before_ep_alltoall"); "layer" the whole layer. The backward of a captured callable replays as a graph
# too (Transformer Engine make_graphed_callables). Each tuple: (names, name prefixes).
GRAPH_SCOPE_OPS = {
    "attn": (("norm1",), ("attn.", "norm1.")),
    "moe_router": (("norm2", "moe.router", "moe.topk"), ("norm2.", "moe.router.", "moe.router_", "moe.topk.")),
    "moe_preprocess": (("moe.token_counts", "moe.permute"), ("moe.token_counts.", "moe.permute.")),
}
# the op whose host time carries each region's replay (the region's first op in issue order, per phase)
_GRAPH_ENTRY = {"attn": ("norm1", "attn.residual.bwd"), "moe_router": ("norm2", "moe.topk.bwd")}


def graph_captured(op: Op, scope: Sequence[str]) -> bool:
    """Whether ``op`` (an op of a layer) runs inside a CUDA graph under ``scope`` (a plan's cuda_graph_scope)."""
    if not scope or op.layer not in ("layer", "moe_layer"):
        return False
    if "layer" in scope:
        return True
    name = op.name
    for s in scope:
        names, prefixes = GRAPH_SCOPE_OPS[s]
        if name in names or name.startswith(prefixes):
            return True
    return False


def graph_replays(op: Op, scope: Sequence[str]) -> int:
    """Graph replays the host issues at ``op``: one per captured region, charged to its entry op."""
    if not scope or op.layer not in ("layer", "moe_layer"):
        return 0
    if "layer" in scope:   # one graph for the layer, forward and backward
        return int(op.name in ("norm1", "norm1.bwd"))
    fwd_bwd = op.phase == Phase.BWD
    # attn with moe_router: one callable from the input norm through the MoE preprocess (one graph);
    # moe_preprocess extends the router's graph: no region of its own
    if "attn" in scope:
        return int(op.name == _GRAPH_ENTRY["attn"][fwd_bwd])
    return int("moe_router" in scope and op.name == _GRAPH_ENTRY["moe_router"][fwd_bwd])


# the Triton port of FlashAttention-1 against FlashAttention-2; torch SDPA's flash backend (PyTorch's build of
# FlashAttention-2) against Dao-AILab's build
_TRITON_FA1 = value("attention.triton_flash1_factor")
_SDPA_FA2_FWD, _SDPA_FA2_BWD = (value("attention.torch_sdpa_flash_forward_factor"),
                                value("attention.torch_sdpa_flash_backward_factor"))


def is_expert_gemm(op: Op) -> bool:
    """A routed experts' GEMM (its batch is the rank's local experts)."""
    return op.kind == OpKind.GEMM and op.name.startswith("moe.expert.")


# stacks whose routed experts run through Transformer Engine's te.GroupedLinear (Megatron-Core's
# TEGroupedMLP, the moe_grouped_gemm path of Megatron-LM, NeMo and Megatron-Bridge recipes)
_TE_GROUPED_FAMILIES = ("megatron", "nemo")


def is_expert_cast(op: Op) -> bool:
    """The FP8 quantization of a routed experts' GEMM input (one quantize per expert in TE's split_quantize)."""
    return op.name.startswith("moe.expert.") and op.name.endswith(".fp8_cast")


def fill_batch(op: Op) -> Any:
    """The GEMMs whose tiles share the SMs' waves: the batch, but for routed experts, which run as one
    cuBLAS GEMM per expert on ``moe.grouped_gemm_streams`` streams, at most that many."""
    batch = op.shape[0]
    return minimum(batch, _EXPERT_STREAMS) if is_expert_gemm(op) else batch


def gemm_launches(op: Op, chunks: Any = 1) -> Any:
    """GEMM kernels of ``op`` whose fixed GPU time (``HardwareProfile.gemm_fixed_s``) is paid one after
    another: the TP-overlap chunks (``chunks``, each its own GEMM) one of ``gemm.tp_overlap_compute_streams``
    streams runs, and for routed experts (one GEMM per expert, ``moe.grouped_gemm_streams`` at once) the
    experts one stream runs; kernels on other streams fill while one drains. Floats, or arrays."""
    per_stream = np.ceil(np.asarray(chunks) / _TP_CHUNK_STREAMS)
    if is_expert_gemm(op):
        return np.ceil(np.asarray(op.shape[0]) / np.asarray(fill_batch(op))) * per_stream
    return per_stream


def gemm_aligned(op: Op) -> bool:
    """Whether a GEMM's leading dimensions are multiples of 16 bytes: k and n of a forward or input-gradient
    GEMM (row-major operands), m and n of a weight gradient (whose k is the token count it reduces over)."""
    _, m, n, k = op.shape
    step = max(1, int(_ALIGN_BYTES) // element_bytes(op.dtype))
    dims = (m, n) if op.name.endswith(".wgrad") else (n, k)
    return all(d % step == 0 for d in dims)


@lru_cache(maxsize=65536)
def gemm_shape_efficiency(m: int, n: int, k: int, batch: int, sms: int, wave_q: float, k_half: float) -> float:
    """Fraction of the GEMM peak a (batch x) m x n x k GEMM reaches: tile padding, wave quantization
    and a short inner dimension all cost. Monotone enough: larger dims never lose much."""
    best = 0.0
    for tm, tn, tile_eff in _TILES:
        rows, cols = math.ceil(m / tm), math.ceil(n / tn)
        tiles = batch * rows * cols
        waves = math.ceil(tiles / sms)
        util = tiles / (waves * sms)
        util = 1.0 - wave_q * (1.0 - util)
        pad = (m * n) / (rows * tm * cols * tn)
        best = max(best, tile_eff * util * pad)
    return best * k / (k + k_half)


def gemm_shape_efficiency_many(m, n, k, batch, sms: int, wave_q: float, k_half: float) -> np.ndarray:
    """``gemm_shape_efficiency`` element by element over arrays of GEMM shapes (the same arithmetic:
    the integer tile counts are exact in floats)."""
    best: Any = 0.0
    for tm, tn, tile_eff in _TILES:
        rows, cols = np.ceil(m / tm), np.ceil(n / tn)
        tiles = batch * rows * cols
        waves = np.ceil(tiles / sms)
        util = tiles / (waves * sms)
        util = 1.0 - wave_q * (1.0 - util)
        pad = (m * n) / (rows * tm * cols * tn)
        best = np.maximum(best, tile_eff * util * pad)
    return best * k / (k + k_half)


def gemm_aligned_many(op: Op) -> Any:
    """``gemm_aligned`` of an op whose shape holds arrays (many shape classes): a bool array."""
    _, m, n, k = op.shape
    step = max(1, int(_ALIGN_BYTES) // element_bytes(op.dtype))
    a, b = (m, n) if op.name.endswith(".wgrad") else (n, k)
    return np.logical_and(np.equal(np.mod(a, step), 0), np.equal(np.mod(b, step), 0))


def host_idle(stream: Sequence[tuple[Any, ...]]) -> Any:
    """GPU idle time of a stream the host feeds, beyond its busy time, per run of ``stream`` in steady
    state. ``stream``: the ops of a phase of a block in issue order as (host seconds, GPU seconds,
    whether it runs on the compute stream[, whether the host first waits for the GPU to finish all it was
    given: a device-to-host read-back such as a dropless MoE layer's token counts]). The host issues each op after the one before; an op starts
    once issued and once the stream's previous op is done; the launch queue lets the host run ahead of
    long kernels (CUDA launches are asynchronous), so host time hides behind GPU time where the GPU is
    behind and adds where the host is. Blocks repeat (layer after layer), and the host's lead carries
    from one to the next: the idle of one run is that of two runs less that of one. Seconds may be
    floats or arrays (many shape classes at once, element by element the same arithmetic)."""
    waits: list[bool]                             # the optional fourth field of an entry
    host: Any = 0.0
    gpu: Any = 0.0
    busy: Any = 0.0
    once: Any = 0.0
    for run in range(2):
        for h, g, on_stream, *waits in stream:
            if any(waits):
                host = maximum(host, gpu)         # the host waits for the GPU to reach this op (a D2H read-back)
            host += h
            if on_stream:
                gpu = maximum(gpu, host) + g
                busy += g
        if run == 0:
            once = maximum(gpu, host) - busy      # the idle of one run
    return maximum(0.0, (maximum(gpu, host) - busy) - once)


class ComputePricer:
    """Prices compute ops of one GPU under one framework; memoizes by op."""

    def __init__(self, gpu: GPUSpec, profile: HardwareProfile, fw: FrameworkProfile, tp_overlap_chunks: int = 1,
                 attention_chunks: int = 1, cuda_graph_scope: Sequence[str] | None = None):
        self.gpu, self.profile, self.fw = gpu, profile, fw
        # parts of each layer replayed as CUDA graphs (a plan's cuda_graph_scope): no per-kernel host time
        self.cuda_graph_scope = tuple(cuda_graph_scope or ())
        # routed experts through Transformer Engine's grouped linear (Megatron-Core TEGroupedMLP)
        self._te_grouped = fw.family in _TE_GROUPED_FAMILIES
        # TP communication overlap (userbuffers ring exchange) splits each layer GEMM into tp
        # sequential chunks of m/tp rows, each filling the GPU less well than the whole GEMM
        self.tp_overlap_chunks = tp_overlap_chunks
        # ring attention (CP) runs the attention kernel on 2*cp load-balanced chunks of the sequence
        self.attention_chunks = attention_chunks
        self.mem_bw = gpu.hbm_bandwidth_bytes_per_s * profile.memory_efficiency
        # a power cap below the rated TDP or a locked clock lowers the tensor clock (cost/power.py; measured
        # GEMM tables include the clocks they were measured at); memory-bound work slows much less
        self.clock = power_clock(gpu, "tensor")
        self.memory_factor = time_factor("memory", power_clock(gpu, "memory"))
        self._cache: dict[Op, float] = {}

    def gemm_time(self, op: Op) -> float:
        batch, m, n, k = op.shape
        tables = self.profile.tables
        if tables is not None and tables.has_gemm(op.dtype):
            return self._measured_gemm_time(op, tables)
        eff = self.profile.gemm_efficiency.get(op.dtype, self.profile.gemm_efficiency["bf16"]) * self.clock
        batch = fill_batch(op)
        chunks = self._gemm_chunks(op)
        if chunks > 1:
            m_chunk = m // chunks if not op.name.endswith(".wgrad") else m
            k_chunk = k // chunks if op.name.endswith(".wgrad") else k
            eff *= gemm_shape_efficiency(max(1, m_chunk), n, max(1, k_chunk), batch, self.gpu.sm_count,
                                         self.profile.wave_quantization, self.profile.k_half)
        else:
            eff *= gemm_shape_efficiency(m, n, k, batch, self.gpu.sm_count, self.profile.wave_quantization,
                                         self.profile.k_half)
        if not gemm_aligned(op):
            eff *= _UNALIGNED_EFF
        # per kernel: fill and drain idle the tensor cores while bytes move, so a memory-bound GEMM hides them
        fixed = self.profile.gemm_fixed_s * float(gemm_launches(op, chunks))
        return max(op.flops / (self.gpu.peak(op.dtype) * eff) + fixed, op.bytes / self.mem_bw)

    def _gemm_chunks(self, op: Op) -> int:
        return self.tp_overlap_chunks if self._is_layer_gemm(op) else 1

    @staticmethod
    def _is_layer_gemm(op: Op) -> bool:
        """A layer GEMM (not attention scores, not an expert's): TP overlap splits it into chunks."""
        return op.layer in ("layer", "moe_layer") and not is_score_gemm(op.name) and not op.name.startswith("moe.")

    def _measured_gemm_time(self, op: Op, tables) -> float:
        """A GEMM priced from a measured (M, N, K) table: a batched GEMM counts as batch x M rows."""
        _, m, n, k = op.shape
        batch = fill_batch(op)
        chunks = self._gemm_chunks(op)
        if chunks > 1:
            wgrad = op.name.endswith(".wgrad")
            m, k = (m, max(1, k // chunks)) if wgrad else (max(1, m // chunks), k)
        eff = tables.gemm_efficiency(op.dtype, batch * m, n, k)
        if not gemm_aligned(op):
            eff *= _UNALIGNED_EFF
        return max(op.flops / (self.gpu.peak(op.dtype) * eff), op.bytes / self.mem_bw)

    def attention_time(self, op: Op) -> float:
        b, heads, s_q, s_kv, dqk, dv = op.shape
        p = self.profile
        rows = s_kv / self.attention_chunks
        measured = None if p.tables is None else p.tables.attention_efficiency(op.phase.value == "bwd", rows,
                                                                                 max(dqk, dv))
        if measured is not None:  # a measured (key length, head dim) table
            eff = measured
        else:
            bwd = op.phase.value == "bwd"
            fa2_eff = p.attention_fa2_bwd_efficiency if bwd else p.attention_fa2_fwd_efficiency
            if op.name.startswith("attn.flash2") and fa2_eff is not None:
                eff = fa2_eff * self._sdpa_factor(bwd)
                seq_half = p.attention_fa2_seq_half or p.attention_seq_half
            else:
                eff = p.attention_bwd_efficiency if bwd else p.attention_fwd_efficiency
                seq_half = p.attention_seq_half
            if op.name.startswith("attn.flash2") and self.fw.attention_triton:
                eff *= _TRITON_FA1     # the Triton port of FlashAttention-1 (llm-foundry attn_impl triton)
            eff *= rows / (rows + seq_half)                      # short rows do not fill the pipeline
            eff *= self.clock
            eff *= min(1.0, (max(dqk, dv) / _HEAD_DIM_REF)) ** _HEAD_DIM_EXP  # head dim 64: ~70-80% of 128's speed
        # fill: few (batch x heads x query tiles) blocks leave SMs idle
        blocks = b * heads * math.ceil(s_q / _QUERY_TILE)
        eff *= min(1.0, blocks / self.gpu.sm_count) if blocks < self.gpu.sm_count else 1.0
        return max(op.flops / (self.gpu.peak("bf16") * eff), op.bytes / self.mem_bw)

    def _sdpa_factor(self, bwd: bool) -> float:
        """FlashAttention-2 as torch SDPA's flash backend runs it, against the Dao-AILab build the profile's
        attention_fa2 figures are for (constants attention.torch_sdpa_flash_*_factor); 1 for other stacks. (The
        Triton port of FlashAttention-1, attention_triton, is priced beside it on every architecture.)"""
        if not self.fw.attention_sdpa:
            return 1.0
        return _SDPA_FA2_BWD if bwd else _SDPA_FA2_FWD

    def time(self, op: Op) -> float:
        t = self._cache.get(op)
        if t is not None:
            return t
        if op.kind == OpKind.GEMM:
            t = self.gemm_time(op)
        elif op.kind == OpKind.ATTENTION:
            t = self.attention_time(op)
        else:  # elementwise, embedding, optimizer: memory bound
            t = self._memory_time(op.bytes, "adamw" if op.kind == OpKind.OPTIMIZER else "elementwise")
        if op.kind == OpKind.OPTIMIZER:   # once per step, outside the layers' stream: its own launch floor
            t = self._launch_bound(t, OPTIMIZER_KERNELS)
        else:                             # GPU time; the host's issue time is priced by stream_time
            t = t + self.fw.kernel_gap_s * op.kernels
        self._cache[op] = t
        return t

    def times(self, op: Op, tp_overlap_chunks: Any = 1, attention_chunks: Any = 1) -> Any:
        """``time`` of an op whose sizes are arrays (the ops of many shape classes, built from stacked
        contexts), element by element the same arithmetic; ``tp_overlap_chunks`` and
        ``attention_chunks`` per element (what a pricer of each shape class holds). Formulas only:
        a profile with measured tables is priced op by op (``time``)."""
        if self.profile.tables is not None:
            raise ValueError("times() prices with the formulas; a profile with measured tables needs time()")
        if op.kind == OpKind.GEMM:
            t = self._gemm_times(op, tp_overlap_chunks)
        elif op.kind == OpKind.ATTENTION:
            t = self._attention_times(op, attention_chunks)
        else:
            t = self._memory_time(op.bytes, "adamw" if op.kind == OpKind.OPTIMIZER else "elementwise")
        if op.kind == OpKind.OPTIMIZER:
            return self._launch_bound(t, OPTIMIZER_KERNELS)
        return t + self.fw.kernel_gap_s * op.kernels

    def _gemm_times(self, op: Op, tp_overlap_chunks: Any) -> Any:
        _, m, n, k = cast("tuple[Any, Any, Any, Any]", op.shape)   # ints, or arrays of many shape classes
        batch = fill_batch(op)
        eff: Any = self.profile.gemm_efficiency.get(op.dtype, self.profile.gemm_efficiency["bf16"]) * self.clock
        if self._is_layer_gemm(op):    # split into chunks where TP overlap chunks it (see gemm_time)
            split = np.asarray(tp_overlap_chunks) > 1
            wgrad = op.name.endswith(".wgrad")
            m, k = (np.where(split, np.maximum(1, m if wgrad else m // tp_overlap_chunks), m),
                    np.where(split, np.maximum(1, k // tp_overlap_chunks if wgrad else k), k))
        eff = eff * gemm_shape_efficiency_many(m, n, k, batch, self.gpu.sm_count, self.profile.wave_quantization,
                                               self.profile.k_half)
        eff = np.where(gemm_aligned_many(op), eff, eff * _UNALIGNED_EFF)
        chunks = np.where(np.asarray(tp_overlap_chunks) > 1, tp_overlap_chunks, 1) if self._is_layer_gemm(op) else 1
        fixed = self.profile.gemm_fixed_s * gemm_launches(op, chunks)
        return np.maximum(op.flops / (self.gpu.peak(op.dtype) * eff) + fixed, op.bytes / self.mem_bw)

    def _attention_times(self, op: Op, attention_chunks: Any) -> Any:
        b, heads, s_q, s_kv, dqk, dv = op.shape
        p = self.profile
        rows = s_kv / np.asarray(attention_chunks)
        bwd = op.phase.value == "bwd"
        fa2_eff = p.attention_fa2_bwd_efficiency if bwd else p.attention_fa2_fwd_efficiency
        eff: Any
        if op.name.startswith("attn.flash2") and fa2_eff is not None:
            eff = fa2_eff * self._sdpa_factor(bwd)
            seq_half = p.attention_fa2_seq_half or p.attention_seq_half
        else:
            eff = p.attention_bwd_efficiency if bwd else p.attention_fwd_efficiency
            seq_half = p.attention_seq_half
        if op.name.startswith("attn.flash2") and self.fw.attention_triton:
            eff = eff * _TRITON_FA1
        eff = eff * (rows / (rows + seq_half))
        eff = eff * self.clock
        eff = eff * min(1.0, (max(dqk, dv) / _HEAD_DIM_REF)) ** _HEAD_DIM_EXP
        blocks = b * heads * np.ceil(s_q / _QUERY_TILE)
        sms = self.gpu.sm_count
        eff = np.where(blocks < sms, eff * np.minimum(1.0, blocks / sms), eff)
        return np.maximum(op.flops / (self.gpu.peak("bf16") * eff), op.bytes / self.mem_bw)

    def host_time(self, op: Op) -> float:
        """Seconds the host spends issuing ``op``: the framework's per-kernel cost (forward and
        recomputation from Python, backward from the autograd engine) times its kernels; a collective
        costs one launch through torch.distributed. An op inside a CUDA graph (``cuda_graph_scope``) costs
        nothing of its own: its region's replay is charged once, to the region's first op."""
        if self.cuda_graph_scope and graph_captured(op, self.cuda_graph_scope):
            return _GRAPH_REPLAY_HOST * graph_replays(op, self.cuda_graph_scope)
        if op.is_comm:
            return _COLLECTIVE_HOST
        per_kernel = self.fw.backward_dispatch_s if op.phase == Phase.BWD else self.fw.cpu_dispatch_s
        if is_expert_gemm(op):   # one grouped-linear call from Python, then a C++ loop of per-expert launches
            experts = op.shape[0]
            # TE's Python loops over the experts: the FP8 weight workspaces (forward), the main-grad
            # buffers of Megatron-Core's fused gradient accumulation (weight gradients)
            # (Megatron-Core's TEGroupedMLP: the Megatron and NeMo stacks)
            python = self._te_grouped and (op.name.endswith(".wgrad") or (op.dtype == "fp8" and op.phase != Phase.BWD))
            # each expert weight's gradient passes the autograd engine's AccumulateGrad node and
            # Megatron-Core DDP's Python backward hook (constants moe.expert_grad_hook_host_s)
            hook = _EXPERT_GRAD_HOOK if self._te_grouped and op.name.endswith(".wgrad") else 0.0
            return per_kernel * op.kernels + (_EXPERT_LAUNCH_HOST + (_EXPERT_PY_HOST if python else 0.0) + hook) * experts
        if self._te_grouped and is_expert_cast(op) and op.extra and "experts" in op.extra:   # split_quantize
            # one quantize per expert, each of op.kernels launches (FP8 current scaling: amax, scale, cast)
            return per_kernel + _EXPERT_QUANTIZE_HOST * op.extra["experts"] * op.kernels
        if op.extra and op.extra.get("host_sync"):   # the read-back the host waits for (host_idle)
            return per_kernel * op.kernels + _DTOH_SYNC
        if op.name.endswith(".fp8_cast"):   # one quantize call from Python; its other kernels launched from C++
            return per_kernel + _CPP_LAUNCH_HOST * (op.kernels - 1)
        return per_kernel * op.kernels

    def _launch_bound(self, t, kernels: int):
        """A kernel's time plus the gap to the next, but never less than the host's cost to launch it."""
        return maximum(t + self.fw.kernel_gap_s * kernels, self.fw.cpu_dispatch_s * kernels)

    def memory_bound_time(self, nbytes, kernels: int = 1):
        """What ``time`` gives memory-bound ops moving ``nbytes`` (floats or arrays of many ops)."""
        return self._launch_bound(self._memory_time(nbytes, "elementwise"), kernels)

    def _memory_time(self, nbytes, kernel: str):
        """Bytes over HBM bandwidth; with a measured table, at the bandwidth measured for that size."""
        table = None if self.profile.tables is None else self.profile.tables.memory_table(kernel)
        if table is None:
            t = nbytes / self.mem_bw
        else:
            t = nbytes / (self.gpu.hbm_bandwidth_bytes_per_s * table.vectorized(nbytes))
        return t if self.memory_factor == 1.0 else t * self.memory_factor
