"""Memory per GPU: weights, gradients, optimizer states (by precision and ZeRO stage), activations
(by recompute mode, SP, CP and attention kernel; Korthikanti et al. 2022, arXiv 2205.05198), the
micro-batches in flight on a stage under 1F1B / interleaved 1F1B, and framework overhead.

Activations per layer and micro-batch are counted from the tensors each op saves for its backward;
for a GPT layer with dropout and no parallelism this is s*b*h*(34 + 5*a*s/h) bytes, Korthikanti's
equation; TP divides all but the norm and dropout-mask terms, SP divides those too, selective
recomputation drops the 5as/h term (so does flash attention), full recomputation keeps only the
layer input.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..arith import maximum, minimum, where
from ..constants import value
from ..specs.framework import FrameworkProfile, fsdp_per_unit, optimizer_storage_bytes
from .groups import microbatch_groups
from ..workload.transformer import LayerContext

_ADAM_WITH_MASTER = value("memory.adam_bytes_per_param_with_master")  # fp32 master, m, v (optimizer_storage_bytes)
_FP8_WEIGHT_CACHE = value("memory.fp8_weight_cache_bytes_per_param")
_FP8_PARAM = value("memory.fp8_param_bytes_per_param")     # an FP8 weight with its transpose / columnwise copy
_FP8_CACHE = value("memory.fp8_cache_bytes_per_element")    # an FP8 activation with its 1x128 tile scales
_TE_FP8_INPUT = value("memory.te_fp8_saved_input_bytes_per_element")
_TE_MXFP8_INPUT = value("memory.te_mxfp8_saved_input_bytes_per_element")


def te_fp8_input_bytes(c: LayerContext) -> float:
    """Bytes per element of a GEMM input a Transformer Engine FP8 Linear saves for its weight gradient, by
    the FP8 recipe's scales (per tensor; 1x32 E8M0 for MXFP8; 1x128 FP32 tiles for blockwise)."""
    if c.fp8_recipe == "mxfp8":
        return _TE_MXFP8_INPUT
    if c.fp8_recipe == "blockwise":
        return _FP8_CACHE
    return _TE_FP8_INPUT
_E5M6_CACHE = value("memory.e5m6_cache_bytes_per_element")
_LOSS_FUSED = value("memory.loss_fused_bytes_per_logit")
_LOSS_MEGATRON = value("memory.loss_megatron_bytes_per_logit")
_LOSS_TORCH = value("memory.loss_torch_fp32_bytes_per_logit")
_LOSS_PARALLEL = value("memory.loss_parallel_dtensor_bytes_per_logit")


def loss_bytes_per_logit(fw: FrameworkProfile, tp=1):
    """Bytes per logit (of one micro-batch, on one rank) the loss holds at its peak, by the loss the
    framework runs (constants memory.loss_*); ``tp`` may be an array (many plans)."""
    if fw.loss_memory == "torch":
        return where(tp > 1, _LOSS_PARALLEL, _LOSS_TORCH)
    return _LOSS_FUSED if fw.fused_cross_entropy else _LOSS_MEGATRON


# ---- PyTorch's CUDA caching allocator: what it reserves for the blocks it hands out ------------------
_MIN_BLOCK = int(value("memory.allocator.min_block_bytes"))
_SMALL_SIZE = int(value("memory.allocator.small_size_bytes"))
_SMALL_BUFFER = int(value("memory.allocator.small_buffer_bytes"))
_LARGE_BUFFER = int(value("memory.allocator.large_buffer_bytes"))
_MIN_LARGE_ALLOC = int(value("memory.allocator.min_large_alloc_bytes"))
_ROUND_LARGE = int(value("memory.allocator.round_large_bytes"))


def _ceil_to(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def allocator_block_bytes(size: int) -> int:
    """The block the caching allocator hands out for a request of ``size`` bytes (round_size: a
    multiple of kMinBlockSize, 512 B)."""
    return _ceil_to(max(int(size), 1), _MIN_BLOCK)


def allocator_segment_bytes(size: int) -> int:
    """The cudaMalloc a request of ``size`` bytes makes when no cached block fits (get_allocation_size):
    a 2 MiB segment for small blocks (<= 1 MiB), a 20 MiB one for blocks under 10 MiB, else the
    block rounded up to 2 MiB. Without expandable segments."""
    block = allocator_block_bytes(size)
    if block <= _SMALL_SIZE:
        return _SMALL_BUFFER
    if block < _MIN_LARGE_ALLOC:
        return _LARGE_BUFFER
    return _ceil_to(block, _ROUND_LARGE)


def reserved_bytes(live_sizes, expandable_segments: bool = False) -> int:
    """What the allocator reserves to hold ``live_sizes`` (bytes of the tensors alive together) by its
    rounding rules alone, with no free block between live ones: small blocks packed into 2 MiB segments,
    blocks under 10 MiB into 20 MiB ones, larger ones in a segment of their own rounded up to 2 MiB;
    with ``expandable_segments`` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) one segment per
    pool mapped in 2 MiB (small) and 20 MiB (large) pages. Reserved beyond this is fragmentation: free
    blocks between live ones, which depends on the order of allocations, not on their sizes."""
    blocks = [allocator_block_bytes(n) for n in live_sizes]
    small = sum(b for b in blocks if b <= _SMALL_SIZE)
    large = [b for b in blocks if b > _SMALL_SIZE]
    if expandable_segments:
        return _ceil_to(small, _SMALL_BUFFER) + _ceil_to(sum(large), _LARGE_BUFFER)
    medium = sum(b for b in large if b < _MIN_LARGE_ALLOC)
    own = sum(_ceil_to(b, _ROUND_LARGE) for b in large if b >= _MIN_LARGE_ALLOC)
    return _ceil_to(small, _SMALL_BUFFER) + _ceil_to(medium, _LARGE_BUFFER) + own


def _norm_up_layer_bytes(c: LayerContext, moe: bool, fp8_cache: bool) -> float:
    """What a layer keeps when every RMSNorm and the MLA up-projections are recomputed in backward
    (DeepSeek-V3, arXiv 2412.19437, Sec. 3.2.3) and, with ``fp8_cache``, the Linear inputs are cached
    in FP8, the attention output in E5M6 and the SwiGLU inputs in FP8 with the SwiGLU output recomputed
    (Sec. 3.3.3; without it those caches are 16-bit and the SwiGLU output is recomputed all the same).
    Kept: the input of each norm (the residual stream, 16-bit: the norm is recomputed from it), the norm
    output as the next GEMMs' input, the MLA latents the recomputed up-projections start from, the
    attention output and its log-sum-exp, the router's selected scores, the dispatched tokens and the
    SwiGLU inputs. Not kept: the norm outputs in 16-bit, q/k/v, the SwiGLU output, and the expert
    outputs (assumed: the combine's gate gradient is the dot product of the down-projection's output
    gradient with the expert output, which the stack can take from the recomputed SwiGLU output and the
    down-projection's data gradient; the report lists no cache of the expert outputs)."""
    T, h, a = c.tokens, c.hidden, c.act_bytes
    rows = c.norm_rows
    gemm_in = c.tokens if c.sp_keeps_gathered else rows
    lin = _FP8_CACHE if fp8_cache else a      # a Linear's input as cached for its weight gradient
    ups = 2 if c.gated else 1
    mask = 1 if c.dropout else 0
    # attention block: the block input, the norm output (input of the q/kv down-projections)
    total = rows * h * a + gemm_in * h * lin + rows * h * mask
    if c.mla:
        q_rank, kv_rank, rope = c.mla
        total += T * (q_rank + kv_rank + rope) * a     # the latents, before their (recomputed) norms
    else:   # no up-projection to recompute: q, k and v are kept
        total += T * (c.heads * c.qk_head_dim + c.kv_heads * (c.qk_head_dim + c.v_head_dim)) * a
    total += T * c.heads * c.v_head_dim * (_E5M6_CACHE if fp8_cache else a)   # the output projection's input
    if c.attention_kernel in ("flash", "flash2"):
        total += T * c.heads * 4  # log-sum-exp, fp32
    else:
        scores = c.micro_batch * c.heads * (T // c.micro_batch) * c.seq_len
        total += scores * (2 * a + 1) if mask else scores * a
    # MLP block: the block input, the norm output (the up-projections' and the dispatch's input)
    total += rows * h * a + gemm_in * h * lin + rows * h * mask
    if moe:
        routed = c.moe_tokens * c.top_k
        total += routed * 4                            # the selected gate scores (fp32) the combine applies
        total += routed * h * lin + routed * c.expert_ffn * ups * lin     # dispatched tokens, SwiGLU inputs
        if c.shared_ffn:
            total += T * c.shared_ffn * ups * lin
    else:
        total += T * c.ffn * ups * lin
    return float(total)


def layer_activation_bytes(c: LayerContext, moe: bool = False, recompute: str = "none",
                           fp8_cache: bool = False, te_fp8: bool = False) -> float:
    """Bytes one layer keeps for its backward, for one micro-batch, on one rank (``fp8_cache``: the
    stack caches Linear inputs in FP8, with recompute ``selective_norm_up``; ``te_fp8``: Transformer
    Engine's FP8 GEMMs save their inputs in FP8, ``te_fp8_input_bytes``)."""
    if recompute == "selective_norm_up":
        return _norm_up_layer_bytes(c, moe, fp8_cache)
    T, h, a = c.tokens, c.hidden, c.act_bytes
    # a GEMM input as its Linear saves it; the 16-bit tensors other ops save (norms, attention, the
    # activation function, the router, the combine) stay 16-bit
    lin = te_fp8_input_bytes(c) if te_fp8 else a
    rows = c.norm_rows
    # Megatron with SP keeps the sharded norm output and re-gathers it for the weight gradient
    # (Korthikanti et al. 2022 Sec. 4.2.2); DTensor's SP keeps the gathered input its GEMMs saw
    gemm_in = c.tokens if c.sp_keeps_gathered else rows
    if recompute == "full":
        return rows * h * a
    if recompute == "selective_ops":
        if moe or c.mla or c.attention_kernel == "unfused":
            recompute = "selective"   # op-level SAC is counted for dense blocks with a fused attention kernel
        else:
            # the block input, then what op-level SAC keeps: wq and wv outputs, the attention output
            # and its log-sum-exp, w1's output and w2's (gated MLP; w1's alone otherwise)
            q, v = c.heads * c.qk_head_dim, c.kv_heads * c.v_head_dim
            kept = rows * h * a + T * (q + v + c.heads * c.v_head_dim) * a + T * c.heads * 4
            kept += T * c.ffn * a + (T * h * a if c.gated else 0)
            return float(kept)
    # Megatron-Core's named submodules (recompute_modules): what each one's recomputation stops keeping
    modules = recompute.removeprefix("modules:").split("+") if recompute.startswith("modules:") else []
    if modules:
        recompute = "selective" if "core_attn" in modules else "none"
    norm_out = 0 if "layernorm" in modules else 1      # the norm outputs (output-discarding checkpoint)
    mask = 1 if c.dropout else 0
    total = 0.0
    # attention block: norm input, QKV input, Q/K/V, attention output (= projection input), dropout mask
    total += rows * h * a + gemm_in * h * lin * norm_out
    qkv = T * (c.heads * c.qk_head_dim + c.kv_heads * (c.qk_head_dim + c.v_head_dim)) * a
    if c.mla and "mla_up_proj" in modules:
        # the up-projections and RoPE recomputed from the latents they start from (multi_latent_attention.py:
        # output-discarding checkpoint of the q/kv up-projections): q, k and v are not kept
        q_rank, kv_rank, rope = c.mla
        qkv = T * (q_rank + kv_rank + rope) * a
    # the attention's 16-bit output and its log-sum-exp: saved by the core attention for its backward, and
    # the output projection's input. Recomputing the core attention (Megatron's selective recomputation,
    # recompute_modules=core_attn: tensor_parallel.checkpoint of the core attention from q, k, v) keeps
    # neither for the core: the log-sum-exp is the core's alone and is recomputed with it, in bf16 and FP8
    # alike; the 16-bit output stays as the output projection's input in bf16, while under Transformer
    # Engine FP8 the projection keeps only its FP8 copy (_Linear.forward saves the quantized input)
    core_recomputed = recompute == "selective"
    core_kept = 0 if te_fp8 and core_recomputed else 1
    total += qkv + T * c.heads * c.v_head_dim * a * core_kept + rows * h * mask
    if te_fp8:   # the output projection's FP8 copy of the attention output
        total += T * c.heads * c.v_head_dim * lin
    if c.attention_kernel in ("flash", "flash2"):
        total += 0 if core_recomputed else T * c.heads * 4  # log-sum-exp, fp32
    elif recompute != "selective":
        scores = c.micro_batch * c.heads * (T // c.micro_batch) * c.seq_len
        total += scores * (2 * a + 1) if mask else scores * a
    # MLP block: norm input, up-projection input, activation input, down-projection input, mask
    total += rows * h * a + rows * h * mask
    ups = 2 if c.gated else 1
    if not c.fused_norm:
        # eager PyTorch (composite norm in fp32): each op saves what it computes on. The norm saves
        # x.float() and its 16-bit output instead of its 16-bit input (+4 bytes per element, two norms);
        # RoPE on view_as_complex(xq.float()) saves the fp32 complex q and k (torchtitan, Meta's Llama
        # reference model.py); SwiGLU as F.silu(w1(x)) * w3(x) also keeps silu's output for the product
        total += 2 * rows * h * 4
        if c.rope and not c.fused_rope:
            total += T * (c.heads * c.qk_head_dim + c.kv_heads * c.qk_head_dim) * 4
        if c.gated and not c.fused_bias_act and not moe:
            total += T * c.ffn * a
    if moe:
        tokens = c.moe_tokens
        routed = tokens * c.top_k
        total += tokens * h * a * norm_out
        if "moe" in modules:     # the whole block recomputed from its input (normal checkpointing)
            return float(total + (tokens * h * a if not norm_out else 0))
        act_out = 0 if "moe_act" in modules else 1     # the experts' activation output, recomputed
        # the dispatched tokens (the experts' first GEMM input) and the expert outputs (the combine's);
        # the SwiGLU input and its output (the second GEMM's input)
        total += routed * h * (lin + a) + routed * c.expert_ffn * (ups * a + act_out * lin)
        if c.shared_ffn and "shared_experts" not in modules:
            total += T * c.shared_ffn * (ups * a + lin) + (T * h * lin if te_fp8 else 0)
    elif "mlp" in modules:       # the dense MLP recomputed from its input (normal checkpointing)
        total += gemm_in * h * a
    else:
        total += gemm_in * h * lin * norm_out + T * c.ffn * (ups * a + lin)
    return float(total)


def cp_ring_transient_bytes(c: LayerContext) -> float:
    """Bytes the compiled context-parallel ring (torchtitan-compile: ``cp_ring_compiled``) holds for one
    layer's attention beyond what the layer keeps: Inductor fuses the merge of every ring step into one
    kernel after the last SDPA call (workload.transformer._compiled_ring_passes, constants cp.compiled_*),
    so every step's block output (16-bit, tokens x heads x v_head_dim of this rank) and its log-sum-exp
    (fp32, tokens x heads) stay alive until it runs: ``cp`` SDPA calls on the last rank of the ring (the
    busiest: whole query chunk every step; torch/distributed/tensor/experimental/_attention.py
    _templated_ring_attention). Freed once merged, so it lives while one layer's attention runs, in its
    forward or its recomputation. The eager ring (torchtitan-eager) merges each step into the running
    output as it comes (_SDPAMerger.step), holding one step at a time: nothing counted beyond the layer's."""
    if not c.cp_ring_compiled or c.cp_ring != "torch" or c.cp <= 1:
        return 0.0
    return float(c.cp * c.tokens * c.heads * (c.v_head_dim * c.act_bytes + 4))


# ``in_flight``'s v for DualPipe's schedule
DUALPIPE = 0


def in_flight(p: int, v: int, m, stage: int, layers_on_stage: int):
    """Layer-micro-batches whose activations stage ``stage`` holds at its peak (Megatron's warm-up
    depth) from the pipeline's shape (``v``: virtual chunks, or ``DUALPIPE``); ``m`` may be an array
    (many plans)."""
    if v == 1:
        return layers_on_stage * minimum(m, p - stage)
    if v == DUALPIPE:
        # DualPipe (DeepSeek-V3 Table 2): PP + 1 micro-batches of activations on every rank, a rank
        # holding two stages (stage i and p-1-i): half of them on each
        return layers_on_stage * minimum(m, p + 1) / 2
    # warm-up of (v - 1) N chunk forwards beyond 1F1B's, N the micro-batch group (sim/schedule.py)
    chunks = minimum(m * v, (p - stage - 1) * 2 + (v - 1) * microbatch_groups(p, m) + 1)
    return layers_on_stage / v * chunks


@dataclass
class MemoryEstimate:
    """Memory of the most loaded stage (``critical_stage``) and of every stage, by kind."""

    breakdown_bytes: dict[str, float]
    capacity_bytes: float
    critical_stage: int
    every_stage: Callable[[], list[dict[str, float]]] | None = field(default=None, repr=False, compare=False)

    def stages_bytes(self) -> list[dict[str, float]]:
        """The breakdown of every pipeline stage, in order (priced when asked for)."""
        return self.every_stage() if self.every_stage is not None else [self.breakdown_bytes]

    @property
    def total_bytes(self) -> float:
        return sum(self.breakdown_bytes.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def stage_memory(fw: FrameworkProfile, precision: str, zero_stage: int, *, dense, expert, dp_cp, edp,
                 pp: int = 1, vpp: int = 1, microbatches=1, tp=1,
                 layers_dense: int, layers_moe: int, act_dense, act_moe, act_full_layer, in_flight_layers,
                 logits=None, embedding_rows_bytes=None, embedding_in_flight=None, embedding=0.0,
                 deferred_wgrad_bytes=0.0) -> dict:
    """Memory of one rank of a stage, by kind. ``dense``/``expert``: parameters of the rank (sharded
    over dp*cp and over the expert-data-parallel group; ``embedding``: the part of ``dense`` that is
    embedding or head); ``act_*``: activation bytes of one layer and micro-batch
    (``act_full_layer``: what the layer being recomputed holds beyond what it kept, while its
    recomputed part lives for its backward: the largest layer kind of the stage);
    ``logits``: elements of one micro-batch's logits on the last stage (None elsewhere), ``tp`` the
    tensor-parallel size (which loss a framework runs);
    ``embedding_rows_bytes``: the embedding output kept on the first stage (None elsewhere).
    ``deferred_wgrad_bytes``: the output layer's inputs and logit gradients a deferred embedding weight
    gradient keeps on the last stage (Megatron-Core defer_embedding_wgrad_compute; 0 elsewhere).
    ``vpp``: pipeline chunks per rank (which share of the stage's gradient is unsharded at once, on a
    stack that reduces each chunk's gradient when its backward is done: ``grad_reduce_per_chunk``).
    Floats, or arrays of many plans sharing this stage's layout and these settings."""
    z = zero_stage
    fp32 = precision == "fp32"
    # FSDP's SHARD_GRAD_OP (a ZeRO-2 that runs per unit): parameters sharded outside computation, each unit
    # gathered before its forward and kept until after its backward, gradients reduce-scattered per unit and
    # micro-batch into the rank's shard (torch.distributed.fsdp.ShardingStrategy.SHARD_GRAD_OP; FSDP2's
    # reshard_after_forward=False)
    grad_op = z == 2 and fsdp_per_unit(z, fw)

    def shard(n_dense, n_expert, on: bool):
        return (n_dense / dp_cp + n_expert / edp) if on else (n_dense + n_expert)

    w_bytes, g_bytes, o_bytes = optimizer_storage_bytes(fw, precision)
    fp8_params = precision == "fp8" and fw.fp8_params
    if fp8_params:
        # the GEMM weights in FP8 with their second layout (memory.fp8_param_bytes_per_param); the embedding
        # and output layer are not Transformer Engine modules and stay 16-bit
        weights = (_FP8_PARAM * shard(dense - embedding, expert, z >= 3 or grad_op)
                   + w_bytes * shard(embedding, 0.0, z >= 3 or grad_op))
    else:
        weights = w_bytes * shard(dense, expert, z >= 3 or grad_op)
    if grad_op:
        grads = g_bytes * shard(dense, expert, True)
    elif z == 2 and fw.grad_reduce_per_chunk and vpp > 1:
        # a pipeline chunk's gradient is complete once the chunk's contiguous micro-batches have run their
        # backward, and is then reduce-scattered into the rank's shard (Llama 3 paper Sec. 3.3.2: FSDP
        # "shards optimizer states and gradients", N contiguous micro-batches per stage): the shard lives
        # through the step, the unsharded buffer of the chunk accumulating and of the one being reduced
        # (asynchronously) beside it: two of the vpp chunks' gradients
        grads = g_bytes * (shard(dense, expert, True) + shard(dense, expert, False) * min(2, vpp) / vpp)
    elif z == 2:
        # ZeRO-2 reduces the gradients once per step (as Megatron's distributed optimizer and FSDP
        # without resharding do): with gradient accumulation the full buffer lives between
        # micro-batches, and only a single micro-batch lets it keep just its shard
        grads = g_bytes * where(microbatches > 1, shard(dense, expert, False), shard(dense, expert, True))
    else:
        grads = g_bytes * shard(dense, expert, z >= 3)
    optimizer = o_bytes * shard(dense, expert, z >= 1)
    other = fw.base_memory_bytes
    if (z >= 3 or grad_op) and pp > 1 and fw.fsdp_unsharded_with_pp:
        # the stage's 16-bit weights stay gathered through the step, and its gradients accumulate
        # unsharded in the reduce dtype (fp32) until the last micro-batch, ZeRO-2 (SHARD_GRAD_OP) and
        # ZeRO-3 alike, as the step time prices them (one gather and one reduction a step) (FSDP2: "accumulated
        # gradient of the reduce dtype if the previous backward did not reduce-scatter")
        other += where(maximum(dp_cp, edp) > 1, 2 * (dense + expert), 0.0)
        grads = grads + where(maximum(dp_cp, edp) > 1, fw.grad_reduce_bytes * (dense + expert), 0.0)
    elif grad_op:
        # every unit's gathered 16-bit weights live from its forward to its backward: all of them at the
        # activations' peak, the start of the backward (nothing is sharded without a DP group)
        other += where(maximum(dp_cp, edp) > 1, 2 * (dense + expert), 0.0)
    elif z >= 3:  # FSDP: the gathered 16-bit weights of the unit in use and the one prefetched
        # beside the root unit (embedding, final norm, head), which FSDP2 keeps gathered from the forward
        # to the end of the backward (workload.graph.fsdp_units: _fsdp_state.py FSDPState._lazy_init),
        # so it is held at the activations' peak, the start of the backward, with two layer units (stacks
        # running FSDP2, marked fsdp2_copies: workload.graph.fsdp_keeps_root)
        layer = (dense - embedding + expert) / max(1, layers_dense + layers_moe)
        gathered = 2 * (2 * layer + embedding) if fw.fsdp2_copies else 2 * maximum(2 * layer, layer + embedding)
        other += where(maximum(dp_cp, edp) > 1, gathered, 0.0)  # nothing is sharded without a DP group
    elif not fw.master_in_optimizer and not fp32:  # autocast keeps 16-bit copies of the weights in use
        other += 2 * (dense + expert)
    if precision == "fp8" and not fp8_params:  # Transformer Engine caches fp8 copies of the GEMM weights
        other += _FP8_WEIGHT_CACHE * shard(dense, expert, z >= 3)

    n_layers = layers_dense + layers_moe
    mean_layer = (act_dense * layers_dense + act_moe * layers_moe) / max(1, n_layers)
    acts = mean_layer * in_flight_layers
    acts += act_full_layer  # the layer being recomputed, during its backward
    if logits is not None:  # the loss of one micro-batch at its peak (loss_bytes_per_logit)
        acts += logits * loss_bytes_per_logit(fw, tp)
    if embedding_rows_bytes is not None:
        acts += embedding_rows_bytes * embedding_in_flight
    acts += deferred_wgrad_bytes
    # fragmentation of what the caching allocator hands out and takes back; buffers allocated once
    # and never freed leave no holes (contiguous_param_grad_buffers)
    churned = acts if fw.contiguous_param_grad_buffers else acts + weights + grads
    other += fw.allocator_overhead * churned
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": acts, "other": other}
