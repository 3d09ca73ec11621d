"""Framework profiles: which kernels exist (fusion), what runs by default, and what a framework
keeps in memory. They change *which* ops the graph holds and their byte counts, never the
hardware's speed.

Sources: Megatron-LM and NeMo fuse bias+GeLU, bias+dropout+add, softmax, RoPE and the
vocab-parallel cross-entropy, use FlashAttention/cuDNN attention through Transformer Engine, and
reduce gradients in fp32 for bf16 (Megatron-LM arguments.py: "bfloat16 requires gradient
accumulation and all-reduce to be done in fp32"). NeMo's H100 recipes enable TP communication
overlap (userbuffers) and DP overlap. torchtitan (arXiv 2410.06511) trains with FSDP2, SDPA flash
attention and reduces gradients in fp32; as benchmarked (torch nightly of Dec 2024) SDPA ran
FlashAttention-2 on Hopper (cuDNN attention was opt-in, pytorch/pytorch#138522), and its selective
activation checkpointing is op-level (torchtitan parallelize_llama.py). Eager PyTorch launches one kernel per elementwise op,
each kernel paying the CPU dispatch cost.

Capabilities (which plans a framework can run; ``parallel/rules.py`` turns them into the rules
``check_plan`` and the search apply, named ``framework_*``):
- Megatron-LM / Megatron-Core: ZeRO-0 (DDP), ZeRO-1 (--use-distributed-optimizer), ZeRO-2/3 through
  Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads /
  optim_grads_params: "similar to ... ZeRO-2", "... and training parameters are sharded",
  Megatron-Core developer guide, megatron_fsdp ShardingStrategy; M-Core 0.14 renamed its custom FSDP
  to Megatron-FSDP) or --use-torch-fsdp2; interleaved 1F1B (--num-layers-per-virtual-pipeline-stage),
  --context-parallel-size, --expert-model-parallel-size with any --expert-tensor-parallel-size, and
  --tp-comm-overlap. Everything the plan can say.
- NeMo: Megatron-Core underneath (MegatronStrategy passes the same sizes and DDP/FSDP options): as Megatron.
- DeepSpeed: ZeRO 0-3, but its pipeline engine refuses ZeRO-2/3 ("ZeRO-2 and ZeRO-3 are incompatible
  with pipeline parallelism", deepspeed/runtime/pipe/engine.py) and runs one schedule, 1F1B
  (TrainSchedule in deepspeed/runtime/pipe/schedule.py: no interleaving); its sequence parallelism
  (DeepSpeed-Ulysses, arXiv 2309.14509) splits heads with all-to-alls, not the ring attention ``cp``
  prices, so no cp; DeepSpeed-MoE has expert parallelism (ep_size) and splits experts over the whole
  TP group or not at all (enable_expert_tensor_parallelism): etp in {1, tp}.
- torchtitan: FSDP2 (fully_shard, ZeRO-3; reshard_after_forward=False ~ ZeRO-2, its
  fsdp_reshard_after_forward "never") and DDP (data_parallel_replicate_degree) only as the sole
  parallelism ("DDP has not supported > 1D parallelism", torchtitan parallelize_llama.py); no
  optimizer-only sharding (ZeRO-1); TP with sequence parallelism, async TP (TP overlap, under
  torch.compile), PP with interleaved schedules (Interleaved1F1B, ...), context parallelism (ring
  attention), expert parallelism with "either etp = tp or etp = 1" (torchtitan config
  expert_tensor_parallel_degree).
- Plain PyTorch (pytorch-eager / pytorch-compile): DDP, ZeroRedundancyOptimizer (ZeRO-1), FSDP
  (SHARD_GRAD_OP ~ ZeRO-2, FULL_SHARD / fully_shard ~ ZeRO-3), DTensor tensor and sequence parallelism,
  torch.distributed.pipelining (ScheduleInterleaved1F1B), context_parallel (ring attention,
  torch.distributed.tensor.experimental); no expert-parallel API (token dispatch is model code, as
  torchtitan writes it); async TP is an Inductor pass (needs torch.compile), so TP overlap only compiled.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..constants import value
from ..errors import SpecError
from ..parallel.rules import Capabilities


@dataclass(frozen=True)
class FrameworkProfile:
    name: str
    attention_kernel: str = "flash"        # default when the plan does not say
    fused_bias_act: bool = True            # bias + activation (GeLU / SwiGLU) in one kernel
    fused_residual: bool = True            # bias + dropout + residual add in one kernel
    fused_rope: bool = True
    fused_cross_entropy: bool = True       # logits read once, no fp32 copy of the logits kept
    grad_reduce_bytes: int = 4             # bytes per gradient element in the DP reduction
    # host time per kernel, Python and dispatcher included (constants host.*): a layer's phase takes at
    # least the host time of issuing its kernels, forward (and recomputation) and backward apart
    cpu_dispatch_s: float = value("host.megatron_forward_per_kernel_s")
    backward_dispatch_s: float = value("host.backward_per_kernel_s")
    kernel_gap_s: float = 1e-6             # GPU idle between consecutive kernels
    microbatch_overhead_s: float = value("host.megatron_microbatch_overhead_s")  # per micro-batch and stage
    fused_norm: bool = True                # one norm kernel (apex/TE/Inductor); False: eager composite in fp32
    vocab_pad_multiple: int = 1            # the vocabulary is padded to a multiple of this x tp (Megatron: 128)
    overlap_dp_comm: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    overlap_pp_comm: bool = True
    base_memory_bytes: float = 1.5e9       # CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers
    allocator_overhead: float = 0.05       # fragmentation of the caching allocator, fraction of tensors
    # True: 16-bit weights, fp32 master + Adam moments in the optimizer (Megatron, DeepSpeed: 2 + g + 12
    # bytes/param). False: fp32 weights used through autocast, Adam moments only (PyTorch AMP, FSDP2
    # with fp32 sharded params: 4 + 4 + 8 bytes/param, plus a 16-bit copy of the weights in use).
    master_in_optimizer: bool = True
    moe_dispatcher: str = "alltoall"       # MoE token dispatch: alltoall (one copy per expert) | deepep
    # what recompute=selective repeats: "attention" (Megatron: the attention core, Korthikanti et al.
    # 2022) or "ops" (torchtitan's op-level SAC: keeps attention and every other matmul output)
    selective_recompute: str = "attention"
    # FSDP under pipeline parallelism keeps each stage's parameters gathered and accumulates unsharded
    # gradients (in the reduce dtype) until the last micro-batch (torchtitan: reshard_after_forward off with PP)
    fsdp_unsharded_with_pp: bool = False
    # which plans it can run (module docstring; parallel/rules.py checks them)
    capabilities: Capabilities = Capabilities()


FRAMEWORK_PROFILES: dict[str, FrameworkProfile] = {
    # Megatron-LM / Megatron-Core as run in its papers: fused kernels, no TP overlap by default.
    # Megatron-Core as its performance recipes run it (README: --overlap-grad-reduce
    # --overlap-param-gather --tp-comm-overlap, distributed optimizer, TE flash attention).
    # The loss is Megatron's vocab-parallel cross-entropy in PyTorch ops (fp32 logits) unless
    # --cross-entropy-loss-fusion is given (off by default). The vocabulary is padded to a multiple of
    # 128 x tp (--make-vocab-size-divisible-by 128, megatron/training/tokenizer _vocab_size_with_padding).
    "megatron": FrameworkProfile("megatron", overlap_tp_comm=True, fused_cross_entropy=False, vocab_pad_multiple=128),
    # NeMo recipes on Megatron-Core: the same kernels and overlaps; its performance recipes (what
    # NVIDIA's published NeMo/DGX Cloud figures run: pretrain_recipe(performance_mode=True) and
    # scripts/performance) set grad_reduce_in_fp32 = False, "bf16 grad dtype": 2-byte gradient
    # buffers and reductions.
    "nemo": FrameworkProfile("nemo", overlap_tp_comm=True, grad_reduce_bytes=2, vocab_pad_multiple=128),
    # DeepSpeed with Megatron-style kernels (Megatron-DeepSpeed): Megatron's vocab-parallel cross-entropy
    # in PyTorch ops (no fused loss), its vocabulary padding, DeepSpeed's PipelineEngine per micro-batch;
    # ZeRO comes from the plan.
    "deepspeed": FrameworkProfile("deepspeed", fused_rope=False, fused_cross_entropy=False, vocab_pad_multiple=128,
                                  microbatch_overhead_s=value("host.deepspeed_microbatch_overhead_s"),
                                  capabilities=Capabilities(sharded_grads_with_pp=False, interleaved_pp=False,
                                                            context_parallel=False, expert_tp_any=False)),
    # torchtitan (eager): nn.RMSNorm and complex-number RoPE as composites of PyTorch ops, SwiGLU as
    # silu and mul, residual adds and the loss (F.cross_entropy on fp32 logits) as separate kernels.
    "torchtitan": FrameworkProfile("torchtitan", fused_bias_act=False, fused_residual=False, fused_rope=False,
                                   fused_norm=False, fused_cross_entropy=False,
                                   cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                                   backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                                   microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                                   kernel_gap_s=1.5e-6,
                                   master_in_optimizer=False, selective_recompute="ops", attention_kernel="flash2",
                                   fsdp_unsharded_with_pp=True,
                                   capabilities=Capabilities(zero_stages=(0, 2, 3), ddp_with_model_parallel=False,
                                                             expert_tp_any=False)),
    "pytorch-eager": FrameworkProfile("pytorch-eager", fused_bias_act=False, fused_residual=False, fused_rope=False,
                                      fused_norm=False, fused_cross_entropy=False, grad_reduce_bytes=4,
                                      cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                                      backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                                      microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                                      kernel_gap_s=2e-6, base_memory_bytes=0.6e9, allocator_overhead=0.03,
                                      master_in_optimizer=False,
                                      capabilities=Capabilities(expert_parallel=False, tp_overlap=False)),
    "pytorch-compile": FrameworkProfile("pytorch-compile", fused_bias_act=True, fused_residual=True, fused_rope=True,
                                        fused_cross_entropy=True, cpu_dispatch_s=value("host.compiled_per_kernel_s"),
                                        backward_dispatch_s=value("host.compiled_per_kernel_s"),
                                        microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                                        kernel_gap_s=1e-6,
                                        base_memory_bytes=0.6e9, allocator_overhead=0.03,
                                        master_in_optimizer=False,
                                        capabilities=Capabilities(expert_parallel=False)),
}


def for_plan(fw: FrameworkProfile, plan) -> FrameworkProfile:
    """The framework with what a plan overrides (the gradient reduction dtype)."""
    dtype = getattr(plan, "grad_reduce_dtype", None)
    if dtype is None:
        return fw
    nbytes = 4 if dtype == "fp32" else 2
    return fw if nbytes == fw.grad_reduce_bytes else replace(fw, grad_reduce_bytes=nbytes)


def get_framework(name: str) -> FrameworkProfile:
    key = name.strip().lower().replace("_", "-")
    key = {"megatron-lm": "megatron", "megatron-core": "megatron", "mcore": "megatron", "eager": "pytorch-eager",
           "compile": "pytorch-compile", "torch-compile": "pytorch-compile", "pytorch": "pytorch-eager"}.get(key, key)
    if key not in FRAMEWORK_PROFILES:
        raise SpecError("framework", f"unknown framework {name!r}", f"use one of {', '.join(FRAMEWORK_PROFILES)}")
    return FRAMEWORK_PROFILES[key]


def capabilities_markdown() -> str:
    """The capability table as docs/model.md shows it (a test keeps the two equal)."""
    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    lines = ["| framework | ZeRO stages | ZeRO-2/3 with PP | DDP with TP/PP/CP | interleaved PP | CP | EP | etp | "
             "TP overlap |", "|---|---|---|---|---|---|---|---|---|"]
    for name, fw in FRAMEWORK_PROFILES.items():
        c = fw.capabilities
        lines.append(f"| {name} | {', '.join(map(str, c.zero_stages))} | {yes(c.sharded_grads_with_pp)} | "
                     f"{yes(c.ddp_with_model_parallel)} | {yes(c.interleaved_pp)} | {yes(c.context_parallel)} | "
                     f"{yes(c.expert_parallel)} | {'any' if c.expert_tp_any else '1 or tp'} | {yes(c.tp_overlap)} |")
    return "\n".join(lines)
