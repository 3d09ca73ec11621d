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

import re
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
    # bytes per gradient element under fp16 training when the stack reduces in the parameter dtype
    # (None: grad_reduce_bytes whatever the precision)
    grad_reduce_bytes_fp16: int | None = None
    # passes over the whole gradient buffer the DP wrapper makes each step outside the optimizer, each
    # reading (and, for the scaling, writing) every gradient element before its bucket is reduced:
    # "nan_check" (a norm, one read) and "scale" (the 1/dp averaging, a read and a write, when dp > 1)
    grad_buffer_checks: tuple[str, ...] = ()
    # host time per kernel, Python and dispatcher included (constants host.*): a layer's phase takes at
    # least the host time of issuing its kernels, forward (and recomputation) and backward apart
    cpu_dispatch_s: float = value("host.megatron_forward_per_kernel_s")
    backward_dispatch_s: float = value("host.backward_per_kernel_s")
    kernel_gap_s: float = value("host.kernel_gap_s")  # GPU idle between consecutive kernels
    microbatch_overhead_s: float = value("host.megatron_microbatch_overhead_s")  # per micro-batch and stage
    fused_norm: bool = True                # one norm kernel (apex/TE/Inductor); False: eager composite in fp32
    vocab_pad_multiple: int = 1            # the vocabulary is padded to a multiple of this x tp (Megatron: 128)
    overlap_dp_comm: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    overlap_pp_comm: bool = True
    base_memory_bytes: float = value("memory.base_bytes")  # CUDA context, library workspaces, NCCL buffers
    allocator_overhead: float = value("memory.allocator_overhead")  # caching allocator fragmentation
    # weights and gradients live in contiguous buffers allocated once (Megatron-Core DDP's
    # _ParamAndGradBuffer: one torch.zeros for the parameters, one for the gradients, per dtype), so
    # fragmentation (allocator_overhead) only comes from what is allocated and freed each step
    contiguous_param_grad_buffers: bool = False
    # True: 16-bit weights, fp32 master + Adam moments in the optimizer (Megatron, DeepSpeed: 2 + g + 12
    # bytes/param). False: fp32 weights used through autocast, Adam moments only (PyTorch AMP, FSDP2
    # with fp32 sharded params: 4 + 4 + 8 bytes/param, plus a 16-bit copy of the weights in use).
    master_in_optimizer: bool = True
    moe_dispatcher: str = "alltoall"       # MoE token dispatch: alltoall (one copy per expert) | deepep
    # what recompute=selective repeats: "attention" (Megatron: the attention core, Korthikanti et al.
    # 2022), "ops" (torchtitan's op-level SAC: keeps attention and every other matmul output) or "norm_up"
    # (DeepSeek-V3 Sec. 3.2.3: every RMSNorm and the MLA up-projections, with the SwiGLU output of an
    # FP8 activation cache)
    selective_recompute: str = "attention"
    # the loss as memory sees it (constants memory.loss_*): "" = the fused loss (fused_cross_entropy) or
    # Megatron's vocab-parallel one; "torch" = F.cross_entropy on fp32 logits (torchtitan's loss_fn),
    # DTensor's loss_parallel with TP
    loss_memory: str = ""
    # TP with sequence parallelism keeps the all-gathered input of the column-parallel GEMMs for their
    # backward (DTensor: the redistributed input is what F.linear saves) instead of re-gathering it in
    # backward from the sharded norm output as Megatron does (Korthikanti et al. 2022 Sec. 4.2.2)
    sp_saves_gathered_input: bool = False
    # FSDP under pipeline parallelism keeps each stage's parameters gathered and accumulates unsharded
    # gradients (in the reduce dtype) until the last micro-batch (torchtitan: reshard_after_forward off with PP)
    fsdp_unsharded_with_pp: bool = False
    # ZeRO-2 is FSDP's SHARD_GRAD_OP (FSDP1 ShardingStrategy.SHARD_GRAD_OP: "unshards before the forward,
    # does not reshard them after the forward, and only reshards them after the backward computation";
    # FSDP2 fully_shard(reshard_after_forward=False): "avoids the all-gather in backward"; PyTorch docs,
    # torch.distributed.fsdp): per unit and per micro-batch, one all-gather before its forward and one
    # reduce-scatter after its backward, prefetched as at ZeRO-3 but without the backward's re-gather
    # (workload.graph.fsdp_per_unit). False: ZeRO-2 as a bucketed reduce-scatter of the whole gradient and
    # one parameter all-gather per step (Megatron-Core's distributed optimizer, DeepSpeed ZeRO-2)
    fsdp_shard_grad_op: bool = False
    # context parallelism's ring: "" = Megatron-Core / Transformer Engine's (K/V passed around the ring,
    # priced as its exchange); "torch" = torch.distributed.tensor.experimental.context_parallel as of Dec
    # 2024 (K/V all-gathered once, repeated K/V heads, one SDPA call per ring step, fp32 output merges and
    # fp32 dQ/dK/dV accumulation passed around the ring: transformer.py _torch_ring_ops)
    cp_ring: str = ""
    # the torch ring's merges and gradient accumulation compiled with the block (torchtitan-compile:
    # torch.compile(block, fullgraph=True) traces the ring into the graph and Inductor fuses its pointwise
    # ops; constants cp.compiled_*) rather than run as eager kernels (torchtitan-eager)
    cp_ring_compiled: bool = False
    # attention through torch.nn.functional.scaled_dot_product_attention, whose flash backend is PyTorch's
    # own build of FlashAttention-2 (aten/src/ATen/native/transformers/cuda/flash_attn), measured slower on
    # Hopper than Dao-AILab's build the attention_fa2 efficiencies come from (constants
    # attention.torch_sdpa_flash_forward_factor / _backward_factor; cost/compute.py)
    attention_sdpa: bool = False
    # the FlashAttention-2-class kernel is the Triton port of FlashAttention-1 (llm-foundry's attn_impl 'triton',
    # llmfoundry/models/layers/flash_attn_triton.py): constants attention.triton_flash1_factor of the FA2
    # efficiencies, forward and backward (cost/compute.py)
    attention_triton: bool = False
    # the optimizer step's memory passes: "fused" (one multi-tensor Adam pass, optimizer_traffic) or
    # "torch_foreach" (torch.optim.AdamW(foreach=True) and clip_grad_norm_: one pass per foreach op)
    optimizer_impl: str = "fused"
    # FSDP2 (fully_shard) copies each all-gathered buffer into the unsharded parameters and each unsharded
    # gradient into the reduce-scatter buffer on the compute stream (workload/graph.py fsdp2_copies: ops of the graph)
    fsdp2_copies: bool = False
    # DeepSeek's documented memory savings (hai-llm; DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.3.3):
    # AdamW moments in BF16 beside FP32 master weights (constants memory.adam_bytes_per_param_bf16_moments)
    adam_moments_bf16: bool = False
    # FP8 plans cache the Linear inputs in FP8 (1x128 tiles), the attention output in E5M6, and the MoE
    # SwiGLU's inputs in FP8, recomputing its output in backward (layer_activation_bytes)
    fp8_activation_cache: bool = False
    # the submodules recompute=selective repeats when a plan names them (Megatron-Core recompute_modules;
    # empty: ``selective_recompute`` decides); set from the plan by ``for_plan``
    recompute_modules: tuple[str, ...] = ()
    # FP8 GEMMs through Transformer Engine save their inputs for the weight gradient in FP8, not 16-bit
    # (constants memory.te_fp8_saved_input_bytes_per_element: TE's _Linear.forward)
    te_fp8_saved_inputs: bool = False
    # the optimizer holds an fp32 master copy of the 16-bit weights (with master_in_optimizer). False: the
    # optimizer steps the stored 16-bit weights, its states in their dtype (torch.optim.Adam on bf16
    # parameters: exp_avg and exp_avg_sq are zeros_like(param), torch/optim/adam.py _init_group)
    master_weights: bool = True
    # the master copy is bf16, not fp32 (apex DistributedFusedAdam store_params with dtype=bf16: the params
    # shard is allocated in the optimizer's state dtype; constants memory.bf16_master_bytes_per_param)
    master_weights_bf16: bool = False
    # the GEMM weights stored in FP8 only (Megatron-Core fp8_param_gather, Transformer Engine fp8_model_init):
    # no 16-bit model copy and no separate FP8 weight cache (memory.fp8_param_* constants)
    fp8_params: bool = False
    # ZeRO-2 with an interleaved pipeline: each pipeline chunk's gradient is reduce-scattered into the rank's
    # shard once the chunk's contiguous micro-batches have run their backward, so only the chunks in
    # accumulation and in reduction hold unsharded gradients (Meta's Llama 3 stack: FSDP "shards optimizer
    # states and gradients", N contiguous micro-batches per stage, arXiv 2407.21783 Sec. 3.3.2); False:
    # the whole stage's gradient buffer lives through the step (Megatron-Core, FSDP under no_sync)
    grad_reduce_per_chunk: bool = False
    # pipeline schedule when the plan does not say: "1f1b" (interleaved with vpp > 1) or "dualpipe"
    # (DeepSeek-V3 Sec. 3.2.1: bidirectional, overlapped forward-backward chunk pairs)
    pp_schedule: str = "1f1b"
    # MoE all-to-all hidden under another micro-batch's compute when the plan does not say: Megatron-Core's
    # --overlap-moe-expert-parallel-comm ("EP A2A overlap", core_v0.14.0 and later: combined 1F1B schedule,
    # megatron/core/pipeline_parallel/combined_1f1b.py; the forward of one micro-batch and the backward of
    # another run layer by layer, each one's dispatch/combine on a communication stream beside the other's
    # attention/MLP, model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run). Off by default in
    # Megatron-Core (model_parallel_config.py) and in every stack here; recipes turn it on (Megatron-Bridge
    # scripts/performance moe_a2a_overlap), so a run states it (plan overlap_ep_comm, CSV column ep_overlap)
    overlap_ep_comm: bool = False
    # which plans it can run (module docstring; parallel/rules.py checks them)
    capabilities: Capabilities = Capabilities()
    # what a run of this stack does when its description is silent (validate states it as an assumption)
    default_zero_stage: int = 1            # ZeRO stage without a ZeRO/FSDP flag
    sp_with_tp: bool = True                # sequence parallelism whenever tp > 1
    # the stack this profile describes: its family (what a CSV's `framework` column names) and the
    # release it documents (YYYY-MM), which orders the versions of one family
    family: str = ""
    released: str = ""


# constants of clustertwin.constants the profiles below share
_GAP, _GAP_TITAN, _GAP_EAGER = (value("host.kernel_gap_s"), value("host.kernel_gap_torchtitan_s"),
                                value("host.kernel_gap_eager_s"))
_BASE_TORCH = value("memory.base_bytes_plain_torch")
_ALLOC_TORCH = value("memory.allocator_overhead_plain_torch")

_DEEPSPEED_CAPS = Capabilities(sharded_grads_with_pp=False, interleaved_pp=False, context_parallel=False,
                               expert_tp_any=False)
_TORCHTITAN_CAPS = Capabilities(zero_stages=(0, 2, 3), ddp_with_model_parallel=False, expert_tp_any=False)
# Megatron-LM before Megatron-Core: the interleaved schedule (--num-layers-per-virtual-pipeline-stage,
# SC21) but no context parallelism, no MoE (the tag megatron-main-before-moe is of 2023-02) and no
# --tp-comm-overlap (2023-10); ZeRO-0 only in 2021, ZeRO-1 (--use-distributed-optimizer) from 2022
_MEGATRON_2021_CAPS = Capabilities(zero_stages=(0,), context_parallel=False, expert_parallel=False, tp_overlap=False)
_MEGATRON_2022_CAPS = Capabilities(zero_stages=(0, 1), context_parallel=False, expert_parallel=False,
                                   tp_overlap=False)
# Megatron-DeepSpeed / DeepSpeed 2021: DeepSpeed's pipeline engine and ZeRO, no TP communication
# overlap option in either
_DEEPSPEED_NO_TP_OVERLAP_CAPS = replace(_DEEPSPEED_CAPS, tp_overlap=False)
# async TP is an Inductor pass: only a compiled torchtitan overlaps TP
_TORCHTITAN_EAGER_CAPS = replace(_TORCHTITAN_CAPS, tp_overlap=False)
# llm-foundry trains MPT with Composer's FSDP (FULL_SHARD / SHARD_GRAD_OP / NO_SHARD) or DDP: no TP, PP, CP
# or EP in MPT's code of 2023 (llmfoundry/models/mpt/modeling_mpt.py has no model-parallel layers)
_LLM_FOUNDRY_CAPS = Capabilities(zero_stages=(0, 2, 3), tensor_parallel=False, pipeline_parallel=False,
                                 sharded_grads_with_pp=False, ddp_with_model_parallel=False, interleaved_pp=False,
                                 context_parallel=False, expert_parallel=False, tp_overlap=False)

# ---- versioned stacks: kernels and defaults are properties of the framework and its release --------
_STACKS: tuple[FrameworkProfile, ...] = (
    # Megatron-LM v2.5 (tag of 2021-08-10), the code of Narayanan et al. SC21 (arXiv 2104.04473):
    # - attention: scale + mask + softmax fused (--no-masked-softmax-fusion turns it off, so on by
    #   default) around two batched GEMMs; FlashAttention reached Megatron-LM only in Dec 2022
    #   (commit d693034 "Integrate FlashAttention into Megatron-LM", opt-in --use-flash-attn)
    # - no TP communication overlap (--tp-comm-overlap arrived Oct 2023, commit 116ffdd)
    # - --DDP-impl local (default): gradients all-reduced after the backward of all micro-batches
    #   (training.py: model.allreduce_gradients() after forward_backward_func), not overlapped;
    #   in the parameter dtype unless --accumulate-allreduce-grads-in-fp32 (store_true; forced for bf16):
    #   2 bytes under fp16, 4 under bf16 (megatron/model/distributed.py, arguments.py)
    # - pipeline send/recv blocking: batch_isend_irecv, req.wait(), torch.cuda.synchronize()
    #   (p2p_communication.py); --overlap-p2p-communication came with Megatron-Core
    # - no distributed optimizer (ZeRO-1 arrived in 2022: --use-distributed-optimizer) and no
    #   sequence parallelism (Korthikanti et al. 2022): ZeRO-0, sp off
    # - vocab-parallel cross-entropy in PyTorch ops on fp32 logits (--fp16-lm-cross-entropy off)
    FrameworkProfile("megatron-lm@2021", attention_kernel="unfused", fused_cross_entropy=False, vocab_pad_multiple=128,
                     grad_reduce_bytes_fp16=2, overlap_dp_comm=False, overlap_pp_comm=False, overlap_tp_comm=False,
                     default_zero_stage=0, sp_with_tp=False, capabilities=_MEGATRON_2021_CAPS, family="megatron",
                     released="2021-08"),
    # Megatron-LM as of Korthikanti et al. 2022 (arXiv 2205.05198; tree of 2022-07, commit 2755bcb):
    # the same fused-softmax attention, local DDP and blocking p2p as 2021; --sequence-parallel and
    # --use-distributed-optimizer exist but are opt-in (store_true), so ZeRO-0 and sp off unless stated
    FrameworkProfile("megatron-lm@2022", attention_kernel="unfused", fused_cross_entropy=False, vocab_pad_multiple=128,
                     grad_reduce_bytes_fp16=2, overlap_dp_comm=False, overlap_pp_comm=False, overlap_tp_comm=False,
                     default_zero_stage=0, sp_with_tp=False, capabilities=_MEGATRON_2022_CAPS, family="megatron",
                     released="2022-05"),
    # Megatron-Core as its 2024 performance runs use it (releases core_v0.5.0 2024-02 .. core_r0.10.0;
    # Megatron-LM README "Training Speed and Scalability", core_r0.8.0): Transformer Engine attention
    # (FlashAttention / cuDNN fused attention), --overlap-grad-reduce --overlap-param-gather
    # --tp-comm-overlap, distributed optimizer (ZeRO-1), sequence parallelism with TP. The loss is the
    # vocab-parallel cross-entropy in PyTorch ops (fp32 logits) unless --cross-entropy-loss-fusion
    # (off by default). bf16 gradients reduced in fp32 ("bfloat16 requires gradient accumulation and
    # all-reduce to be done in fp32", arguments.py). Before each bucket's reduce-scatter the DDP
    # wrapper takes the bucket's norm to check for NaN (check_for_nan_in_grad, on unless
    # --no-check-for-nan-in-loss-and-grad) and scales it by 1/dp (gradient_scaling_factor; averaging
    # in the collective is opt-in, --ddp-average-in-collective): Bucket.start_grad_sync in
    # megatron/core/distributed/param_and_grad_buffer.py, core_r0.8.0.
    FrameworkProfile("megatron-core@2024", overlap_tp_comm=True, fused_cross_entropy=False, vocab_pad_multiple=128,
                     contiguous_param_grad_buffers=True, grad_buffer_checks=("nan_check", "scale"), family="megatron",
                     te_fp8_saved_inputs=True, released="2024-01"),
    # NeMo on Megatron-Core, as NVIDIA's published NeMo / DGX Cloud benchmarks run it: TE attention,
    # TP overlap (userbuffers) and DP overlap; 2-byte gradient buffers and reductions: the H100
    # launcher examples of the NeMo 1.x containers pass +training.model.optim.grad_sync_dtype=bf16
    # (NVIDIA/NeMo-Framework-Launcher examples/training/llama/h100/*_bf16.sh); the NeMo 2.0 performance
    # recipes (pretrain_recipe(performance_mode=True), scripts/performance) set grad_reduce_in_fp32 =
    # False. The releases below differ in the attention kernel only:
    # - 24.07 (and 24.05): the launcher's launcher_scripts/conf/config.yaml exports env_vars
    #   NVTE_FUSED_ATTN: 0 ("Disable cudnn FA until we've tested it more", since commit 562dcb45 of
    #   2024-02-13; tags 24.05 and 24.07) into every job, and Transformer Engine 1.8 (the 24.07
    #   container's, NeMo user guide "Software Component Versions") then leaves cuDNN fused attention
    #   out (DotProductAttention: use_fused_attention = int(os.getenv("NVTE_FUSED_ATTN", "1"))) and
    #   runs the flash-attn package's FlashAttention-2 (flash_attn_varlen_func): flash2
    # - 24.09: the override is gone (commit 04b8d098 "enable fused attention", 2024-08-29; tag 24.09
    #   of 35e4393 has no NVTE_FUSED_ATTN), and Transformer Engine (1.10 in 24.09) prefers cuDNN fused
    #   attention on sm90 ("Disabling FlashAttention to give FusedAttention preference on Hopper+ for
    #   performance reasons", transformer_engine/pytorch/attention.py at v1.8 and v1.10): the FA3 / cuDNN
    #   class, as in the NeMo 2.0 releases
    FrameworkProfile("nemo@24.07", overlap_tp_comm=True, grad_reduce_bytes=2, vocab_pad_multiple=128, family="nemo",
                     contiguous_param_grad_buffers=True, te_fp8_saved_inputs=True, attention_kernel="flash2",
                     released="2024-07"),
    FrameworkProfile("nemo@24.09", overlap_tp_comm=True, grad_reduce_bytes=2, vocab_pad_multiple=128, family="nemo",
                     contiguous_param_grad_buffers=True, te_fp8_saved_inputs=True, released="2024-09"),
    FrameworkProfile("nemo@25.02", overlap_tp_comm=True, grad_reduce_bytes=2, vocab_pad_multiple=128, family="nemo",
                     contiguous_param_grad_buffers=True, te_fp8_saved_inputs=True, released="2025-02"),
    # Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/arguments.py @f4157be, 2024-12):
    # - attention: FusedScaleMaskSoftmax (masked_softmax_fusion on by default) unless
    #   --use-flash-attn / --use-flash-attn-v2 / --use-flash-attn-triton (all store_true): unfused
    # - fused bias-GeLU and bias-dropout-add (--no-bias-gelu-fusion / --no-bias-dropout-fusion turn
    #   them off); no fused RoPE; Megatron's vocab-parallel cross-entropy in PyTorch ops
    # - no TP overlap; pipeline p2p through DeepSpeed's engine: blocking dist.send / dist.recv
    #   (deepspeed/runtime/pipe/p2p.py); --overlap-p2p-communication opt-in
    # - DP through the DeepSpeed engine: overlap_comm defaults to False below ZeRO-3
    #   (deepspeed/runtime/zero/config.py), gradients reduced in the training dtype
    #   (engine.communication_data_type: fp16 under fp16)
    # - host time per kernel: fitted to vTrain's 1,440 measured runs of this stack (constants
    #   host.deepspeed_forward/backward_per_kernel_s): at small micro-batches its layers are host-bound
    #   at ~2.3x (forward) and 4x (backward) Megatron's derived per-kernel cost
    FrameworkProfile("megatron-deepspeed", attention_kernel="unfused", fused_rope=False, fused_cross_entropy=False,
                     vocab_pad_multiple=128, microbatch_overhead_s=value("host.deepspeed_microbatch_overhead_s"),
                     cpu_dispatch_s=value("host.deepspeed_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.deepspeed_backward_per_kernel_s"),
                     grad_reduce_bytes_fp16=2, overlap_dp_comm=False, overlap_pp_comm=False,
                     default_zero_stage=0, sp_with_tp=False, capabilities=_DEEPSPEED_NO_TP_OVERLAP_CAPS,
                     family="megatron-deepspeed"),
    # DeepSpeed ZeRO-3 as released in 2021 (v0.5.8, 2021-12): overlap_comm defaults to True under
    # ZeRO-3 (ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT), parameters prefetched in 5e7-element buckets
    # (stage3_prefetch_bucket_size) with at most 1e9 live (stage3_max_live_parameters); fp16 gradients
    # reduced in fp16 (allreduce_always_fp32 off). Attention unfused: FlashAttention was published in
    # May 2022 (arXiv 2205.14135); the models run with it then used Megatron's fused softmax or
    # eager softmax.
    FrameworkProfile("deepspeed-zero3@2021", attention_kernel="unfused", fused_rope=False, fused_cross_entropy=False,
                     microbatch_overhead_s=value("host.deepspeed_microbatch_overhead_s"),
                     grad_reduce_bytes_fp16=2, overlap_pp_comm=False, default_zero_stage=3,
                     sp_with_tp=False, capabilities=_DEEPSPEED_NO_TP_OVERLAP_CAPS, family="deepspeed",
                     released="2021-12"),
    # torchtitan as benchmarked in docs/performance.md (torchtitan 9dec370 of 2024-12-26, torch nightly
    # 1963fc8 of 2024-12-23):
    # - attention: F.scaled_dot_product_attention(is_causal=True) (models/llama/model.py), which ran
    #   FlashAttention-2 on Hopper (cuDNN attention was opt-in, pytorch/pytorch#138522)
    # - eager: RoPE as complex multiplication in fp32 (view_as_complex(xq.float()...)), SwiGLU as
    #   F.silu(w1(x)) * w3(x), residual adds: one kernel per elementwise op, nothing fused
    # - compile: torch.compile on each TransformerBlock (parallelize_llama.py apply_compile), so
    #   Inductor fuses the block's elementwise ops (RoPE, SwiGLU, residual); the output layer and the
    #   loss stay eager (train.py: "if job_config.training.compile: loss_fn = torch.compile(loss_fn)"
    #   commented out)
    # - FSDP2 (ZeRO-3) by default, TP always with sequence parallelism (SequenceParallel on the norms)
    # - memory: the loss is F.cross_entropy(pred.flatten(0, 1).float(), ...) with 'del pred' before
    #   backward (train.py), under torch.distributed.tensor.parallel.loss_parallel when TP is on; the TP
    #   plan redistributes the Shard(1) norm outputs to Replicate before wq/wk/wv and w1/w3
    #   (PrepareModuleInput + ColwiseParallel, parallelize_llama.py), so each GEMM saves the gathered input;
    #   run_llama_train.sh sets PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"; the logged memory
    #   is the caching allocator's peak reserved bytes (metrics.py, reserved_bytes.all.peak)
    # - CP: torch.distributed.tensor.experimental.context_parallel with the K/V all-gathered
    #   (--experimental.context_parallel_rotate_method default "allgather", config_manager.py), SDPA
    #   limited to flash / memory-efficient (utils.py get_train_context: sdpa_kernel([FLASH_ATTENTION,
    #   EFFICIENT_ATTENTION])) so flash (FlashAttention-2) runs, K/V heads repeated before SDPA (model.py
    #   repeat_kv): cp_ring="torch"; compiled, torch.compile(block, fullgraph=True) (parallelize_llama.py
    #   apply_compile) traces the ring into the block's graph, so Inductor fuses its merges: cp_ring_compiled
    # - optimizer: torch.optim.AdamW(foreach = not fused; --optimizer.fused off, optimizer.py) and
    #   clip_grad_norm_ (max_norm 1.0 in the train configs): optimizer_impl="torch_foreach"
    # - FSDP2 (fully_shard) all-gather copy-out and reduce-scatter copy-in on the compute stream: fsdp2_copies
    FrameworkProfile("torchtitan-eager", fused_bias_act=False, fused_residual=False, fused_rope=False,
                     fused_norm=False, fused_cross_entropy=False, cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                     kernel_gap_s=_GAP_TITAN, master_in_optimizer=False,
                     selective_recompute="ops", attention_kernel="flash2", fsdp_unsharded_with_pp=True,
                     loss_memory="torch", sp_saves_gathered_input=True, cp_ring="torch", attention_sdpa=True,
                     optimizer_impl="torch_foreach", fsdp2_copies=True,
                     fsdp_shard_grad_op=True,
                     capabilities=_TORCHTITAN_EAGER_CAPS, default_zero_stage=3, family="torchtitan", released="2024-12"),
    FrameworkProfile("torchtitan-compile", fused_bias_act=True, fused_residual=True, fused_rope=True,
                     fused_cross_entropy=False, cpu_dispatch_s=value("host.compiled_per_kernel_s"),
                     backward_dispatch_s=value("host.compiled_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                     kernel_gap_s=_GAP_TITAN, master_in_optimizer=False,
                     selective_recompute="ops", attention_kernel="flash2", fsdp_unsharded_with_pp=True,
                     loss_memory="torch", sp_saves_gathered_input=True, cp_ring="torch", cp_ring_compiled=True,
                     attention_sdpa=True,
                     optimizer_impl="torch_foreach", fsdp2_copies=True,
                     fsdp_shard_grad_op=True,
                     capabilities=_TORCHTITAN_CAPS, default_zero_stage=3, family="torchtitan", released="2024-12"),
    # MosaicML llm-foundry training MPT through Composer with PyTorch FSDP (FSDP1), as its benchmark tables
    # ran; two profiles that differ only in attn_impl (as torchtitan's differ in compile): llm-foundry-triton
    # (MPTConfig's and submit_benchmarks.py's default, 'triton') and llm-foundry-flash ('flash') (scripts/train/benchmarking at mosaicml/llm-foundry b2a43a14, 2023-10-19, and 5e85bd62, 2024-01-06;
    # torch 2.1 image; the model code of llmfoundry/models at b2a43a14):
    # - attention: attn_impl 'triton' by default (submit_benchmarks.py; llmfoundry/models/layers/
    #   flash_attn_triton.py, a Triton FlashAttention) or 'flash' (flash_attn 2.x with '.[gpu-flash2]');
    #   the Triton kernel is a port of FlashAttention-1 ("Overall Triton forward + backward is slightly slower
    #   than CUDA forward + backward", its docstring), priced as the FlashAttention-2 kernel at FA1's speed
    #   (attention_triton, constants attention.triton_flash1_factor); a run with attn_impl 'flash' ran
    #   llm-foundry-flash
    # - norm: norm_type 'low_precision_layernorm' (submit_benchmarks.py): F.layer_norm on the 16-bit tensors
    #   with autocast off (llmfoundry/models/layers/norm.py), one native kernel: fused_norm
    # - MLP: up_proj, nn.GELU(approximate='none'), down_proj (layers/ffn.py MPTMLP): the GELU its own eager
    #   kernel; residual adds eager (blocks.py: x = x + self.resid_attn_dropout(b)); no RoPE
    # - loss: loss_fn 'fused_crossentropy' by default (mpt/modeling_mpt.py: flash_attn.losses.cross_entropy
    #   CrossEntropyLoss, a Triton kernel): fused_cross_entropy
    # - FSDP1 through Composer: one unit per MPTBlock (MPTModel.fsdp_wrap_fn) plus the root, sharded fp32 flat
    #   parameters cast to bf16 for compute (fsdp_config mixed_precision DEFAULT: reduce dtype fp32; PURE: bf16),
    #   limit_all_gathers, backward_prefetch BACKWARD_PRE (sweep.py): master_in_optimizer False (4 + 4 + 8 bytes
    #   per parameter), ZeRO-3 unless sharding_strategy SHARD_GRAD_OP (ZeRO-2 as fsdp_shard_grad_op: each unit
    #   gathered in the forward, kept for the backward, reduce-scattered after it). limit_all_gathers is torch
    #   2.1's rate limiter, at most 2 all-gathers in flight (_limiter_utils.py _FreeEventQueue): the current
    #   unit's and the one prefetched, no tighter than the one-unit window (schedule.fsdp_prefetch_units)
    # - optimizer: Composer DecoupledAdamW, whose step runs a Python loop of torch ops per parameter
    #   (composer/optim/decoupled_weight_decay.py DecoupledAdamW.adamw), and gradient clipping by norm
    #   (the pretrain yamls): the same passes over memory as the foreach AdamW, optimizer_impl "torch_foreach"
    # - eager PyTorch: the per-kernel host costs and gaps of pytorch-eager; no torch.compile (b2a43a14:
    #   "rm compile support in profiling")
    FrameworkProfile("llm-foundry-triton", fused_bias_act=False, fused_residual=False, fused_rope=False,
                     fused_norm=True, fused_cross_entropy=True, grad_reduce_bytes=4,
                     cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                     kernel_gap_s=_GAP_EAGER, base_memory_bytes=_BASE_TORCH, allocator_overhead=_ALLOC_TORCH,
                     master_in_optimizer=False, attention_kernel="flash2", attention_triton=True,
                     optimizer_impl="torch_foreach", default_zero_stage=3, sp_with_tp=False,
                     fsdp_shard_grad_op=True,
                     capabilities=_LLM_FOUNDRY_CAPS, family="llm-foundry", released="2023-10"),
    # the same stack run with attn_impl 'flash' (flash_attn 2.x, installed with '.[gpu-flash2]'):
    # Dao-AILab's FlashAttention-2
    FrameworkProfile("llm-foundry-flash", fused_bias_act=False, fused_residual=False, fused_rope=False,
                     fused_norm=True, fused_cross_entropy=True, grad_reduce_bytes=4,
                     cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                     kernel_gap_s=_GAP_EAGER, base_memory_bytes=_BASE_TORCH, allocator_overhead=_ALLOC_TORCH,
                     master_in_optimizer=False, attention_kernel="flash2",
                     optimizer_impl="torch_foreach", default_zero_stage=3, sp_with_tp=False,
                     fsdp_shard_grad_op=True,
                     capabilities=_LLM_FOUNDRY_CAPS, family="llm-foundry", released="2023-10"),
    # HAI-LLM, DeepSeek's in-house framework, as the DeepSeek-V3 Technical Report (arXiv 2412.19437)
    # documents it (Sec. 3.2, 3.3); what the report does not describe keeps the Megatron-Core defaults
    # (fused kernels, flash-class attention, overlapped DP reduction and pipeline sends):
    # - DualPipe (Sec. 3.2.1, Table 2): bubble (PP/2 - 1)(F&B + B - 3W), two copies of the parameters,
    #   PP + 1 micro-batches of activations; the dispatch/combine all-to-alls of one micro-batch overlap
    #   another micro-batch's compute, on 20 of the 132 SMs (constants schedule.dualpipe_comm_sms)
    # - recomputation (Sec. 3.2.3): every RMSNorm and the MLA up-projections in backward, not the
    #   attention core (recompute=selective means this here); EMA parameters in CPU memory (never
    #   counted on the GPU by this model)
    # - FP8 storage (Sec. 3.3.3): Linear inputs cached in FP8, the attention output in E5M6, the MoE
    #   SwiGLU's inputs in FP8 with its output recomputed; AdamW moments in BF16; FP32 master weights
    #   and gradient accumulation
    #   (the caches are counted with recompute=selective, the report's configuration; recompute=none
    #   prices the stack's kernels with Megatron's activation count)
    # - node-limited routing with the dispatch deduplicated per node (Sec. 3.2.2): deepep
    # - ZeRO-1 data parallelism (Sec. 3.2), no TP in the V3 run
    FrameworkProfile("hai-llm", moe_dispatcher="deepep", selective_recompute="norm_up", adam_moments_bf16=True,
                     fp8_activation_cache=True, pp_schedule="dualpipe", family="hai-llm", released="2024-12",
                     capabilities=Capabilities(dualpipe=True)),
    # Meta's in-house PyTorch stack that trained Llama 3 405B, as The Llama 3 Herd of Models (arXiv
    # 2407.21783) documents it (Sec. 3.3.2); what the paper does not describe keeps the Megatron-Core
    # defaults the CSV rows' "other" was priced with (fused kernels, flash-class attention, overlapped DP
    # reduction and pipeline sends, the vocab-parallel loss):
    # - FSDP as the outermost dimension: "shards optimizer states and gradients, but for model shards we do
    #   not reshard after forward computation" (ZeRO-2 with the stage's 16-bit weights gathered through the
    #   step: default_zero_stage 2); gradients accumulated and reduce-scattered in FP32 ("FP32 gradient
    #   accumulation during backward computation over multiple micro-batches and also reduce-scatter
    #   gradients in FP32 across data parallel workers in FSDP")
    # - pipeline: an interleaved schedule with V stages per rank and N contiguous micro-batches for the same
    #   stage's forward or backward ("our key insight is to make N tunable"), so a chunk's gradient is
    #   complete after its N backward passes and is reduce-scattered then: grad_reduce_per_chunk
    # - "the first model chunk on the first stage has only the embedding, and the last model chunk on the
    #   last stage has only output projection and loss calculation": plan first_stage_layers=0,
    #   last_stage_layers=0 (a plan option, not a default, since it needs vpp = (layers + 2) / pp)
    # - the input and output tensors of each pipeline stage freed when no longer needed, which the model
    #   never counts (stage_memory holds no pipeline-boundary buffers)
    # - FSDP parameters and gradients live in per-unit flat buffers allocated and freed within the step,
    #   so the allocator allowance covers them too (contiguous_param_grad_buffers off)
    # - "our key insight is to make N tunable ... allows setting N flexibly ... which can run an arbitrary
    #   number of micro-batches in each batch" (Sec. 3.3.2, Fig. 6): any number of micro-batches, not only
    #   multiples of pp (capabilities any_interleaved_microbatches; sim/schedule.py microbatch_group)
    FrameworkProfile("meta-llama3", overlap_tp_comm=True, fused_cross_entropy=False, vocab_pad_multiple=128,
                     grad_reduce_per_chunk=True, default_zero_stage=2, family="meta-llama3", released="2024-07",
                     capabilities=Capabilities(any_interleaved_microbatches=True)),
)

# ---- the unversioned names, as they were before versions (the CLI's and the search's stacks) -------
_BASE: tuple[FrameworkProfile, ...] = (
    # = megatron-core@2024 (the same defaults under the old name)
    replace(_STACKS[2], name="megatron", released=""),
    # = nemo@25.02 (the same defaults under the old name)
    replace(next(s for s in _STACKS if s.name == "nemo@25.02"), name="nemo", released=""),
    # DeepSpeed with Megatron-style kernels and flash attention; ZeRO comes from the plan. Not a
    # documented release: name megatron-deepspeed or deepspeed-zero3@2021 for those stacks.
    # Megatron's vocab-parallel cross-entropy in PyTorch ops (no fused loss), its vocabulary padding,
    # DeepSpeed's PipelineEngine per micro-batch
    FrameworkProfile("deepspeed", fused_rope=False, fused_cross_entropy=False, vocab_pad_multiple=128,
                     microbatch_overhead_s=value("host.deepspeed_microbatch_overhead_s"), default_zero_stage=0,
                     sp_with_tp=False, capabilities=_DEEPSPEED_CAPS, family="deepspeed"),
    # torchtitan as benchmarked, eager: nn.RMSNorm and complex-number RoPE as composites of PyTorch ops,
    # SwiGLU as silu and mul, residual adds and the loss (F.cross_entropy on fp32 logits) apart
    FrameworkProfile("torchtitan", fused_bias_act=False, fused_residual=False, fused_rope=False, fused_norm=False,
                     fused_cross_entropy=False, cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"), kernel_gap_s=_GAP_TITAN,
                     master_in_optimizer=False, selective_recompute="ops", attention_kernel="flash2",
                     fsdp_unsharded_with_pp=True, loss_memory="torch", sp_saves_gathered_input=True, cp_ring="torch",
                     attention_sdpa=True,
                     optimizer_impl="torch_foreach", fsdp2_copies=True,
                     fsdp_shard_grad_op=True,
                     capabilities=_TORCHTITAN_CAPS, default_zero_stage=3,
                     family="torchtitan"),
    FrameworkProfile("pytorch-eager", fused_bias_act=False, fused_residual=False, fused_rope=False,
                     fused_norm=False, fused_cross_entropy=False, grad_reduce_bytes=4,
                     cpu_dispatch_s=value("host.torch_forward_per_kernel_s"),
                     backward_dispatch_s=value("host.torch_backward_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"),
                     kernel_gap_s=_GAP_EAGER, base_memory_bytes=_BASE_TORCH,
                     allocator_overhead=_ALLOC_TORCH,
                     master_in_optimizer=False, default_zero_stage=0, sp_with_tp=False,
                     fsdp_shard_grad_op=True,
                     capabilities=Capabilities(expert_parallel=False, tp_overlap=False), family="pytorch"),
    FrameworkProfile("pytorch-compile", fused_bias_act=True, fused_residual=True, fused_rope=True,
                     fused_cross_entropy=True, cpu_dispatch_s=value("host.compiled_per_kernel_s"),
                     backward_dispatch_s=value("host.compiled_per_kernel_s"),
                     microbatch_overhead_s=value("host.torch_microbatch_overhead_s"), kernel_gap_s=_GAP,
                     base_memory_bytes=_BASE_TORCH, allocator_overhead=_ALLOC_TORCH,
                     master_in_optimizer=False, default_zero_stage=0, sp_with_tp=False,
                     fsdp_shard_grad_op=True,
                     capabilities=Capabilities(expert_parallel=False), family="pytorch"),
)

FRAMEWORK_PROFILES: dict[str, FrameworkProfile] = {fw.name: fw for fw in _BASE + _STACKS}

# other spellings of a profile's name
_ALIASES = {"megatron-lm": "megatron", "megatron-core": "megatron", "mcore": "megatron", "eager": "pytorch-eager",
            "compile": "pytorch-compile", "torch-compile": "pytorch-compile", "pytorch": "pytorch-eager",
            "megatron-ds": "megatron-deepspeed", "torchtitan-compiled": "torchtitan-compile"}
# what a family name before "@" may be spelled as
_FAMILIES = {"megatron": "megatron", "megatron-lm": "megatron", "megatron-core": "megatron", "mcore": "megatron",
             "nemo": "nemo", "deepspeed": "deepspeed", "torchtitan": "torchtitan", "hai-llm": "hai-llm",
             "meta-llama3": "meta-llama3", "llm-foundry": "llm-foundry", "llmfoundry": "llm-foundry"}
# Megatron-Core releases by date (the tags' dates in NVIDIA/Megatron-LM: core_v0.4.0 2023-12-11,
# core_v0.5.0 2024-02-26, core_v0.6.0 2024-04-18, core_v0.7.0 2024-05-30, core_r0.8.0 2024-08-12,
# core_r0.9.0 2024-10-24, core_r0.10.0 2025-02-17, v0.11.0 2025-03-14, v0.12.0rc2 2025-04-08)
_MCORE_RELEASES = {4: (2023, 12), 5: (2024, 2), 6: (2024, 4), 7: (2024, 5), 8: (2024, 8), 9: (2024, 10),
                   10: (2025, 2), 11: (2025, 3), 12: (2025, 4)}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def parse_version(family: str, version: str) -> tuple[int, int] | None:
    """(year, month) of a release as a source writes it: 2021 (read as its December), 2024-12, 24.07 / 25.02.01 (NeMo's
    year.month containers), core_r0.8.0 / 0.8 (Megatron-Core). None when it cannot be read."""
    v = version.strip().lower()
    m = re.fullmatch(r"(?:core[-_]?)?[rv]?0\.(\d+)(?:\.\d+)?(?:rc\d+)?", v)
    if m and family == "megatron":
        minor = int(m.group(1))
        if minor in _MCORE_RELEASES:
            return _MCORE_RELEASES[minor]
        return None
    m = re.fullmatch(r"v?(20\d\d)(?:[-./](\d{1,2}))?(?:[-./]\d{1,2})?", v)
    if m:   # a bare year: any release of that year
        return int(m.group(1)), int(m.group(2) or 12)
    m = re.fullmatch(r"v?(\d\d)\.(\d\d)(?:\.\d+)*", v)
    if m and 1 <= int(m.group(2)) <= 12:
        return 2000 + int(m.group(1)), int(m.group(2))
    return None


def family_versions(family: str) -> list[FrameworkProfile]:
    """The documented releases of one family (torchtitan's differ by compile, llm-foundry's by attn_impl, not by
    date)."""
    return sorted((fw for fw in _STACKS if fw.family == family and family not in ("torchtitan", "llm-foundry")),
                  key=lambda f: f.released)


def resolve_stack(framework: str, version: str | None = None, compile: bool | None = None,
                  attention_impl: str | None = None) -> tuple[str, str]:
    """The profile a run of ``framework`` (a family or a profile name) at ``version`` with or
    without torch.compile ran on, and how it was chosen ("" when named outright). A version picks
    the family's latest documented release at or before it (the earliest when it precedes them all).
    llm-foundry's profiles differ in ``attention_impl`` (its attn_impl: "triton", the default, or "flash")."""
    key = _key(framework)
    field = "framework_version"
    if "@" in key and not version:
        key, version = key.split("@", 1)
        field = "framework"
        if not version.strip():
            raise SpecError(field, f"{framework!r} names no release after '@'",
                            f"write {key}@<release> (a year, 2024-12, 24.07), or {key} alone")
    name = _ALIASES.get(key, key)
    family = _FAMILIES.get(key)
    if version and family is None and name in FRAMEWORK_PROFILES:
        family = FRAMEWORK_PROFILES[name].family or None
    if family == "torchtitan" and compile is not None:
        return ("torchtitan-compile" if compile else "torchtitan-eager"), ""
    if version and family and (parse_version(family, version) is None):
        raise SpecError(field, f"cannot read {version!r} as a release of {family}",
                        "write a year (2021), a date (2024-12) or a release (24.07, core_r0.8.0)")
    if version and name in FRAMEWORK_PROFILES and key not in _FAMILIES:
        # a stack named outright (torchtitan-eager, llm-foundry-flash): it is the profile; its release is
        # documented as one, and the version asked for is noted, not modelled apart
        released = FRAMEWORK_PROFILES[name].released
        same = bool(released) and family is not None and \
            parse_version(family, version) == (int(released[:4]), int(released[5:7]))
        note = "" if not released or same else (
            f"{name} is documented as of {released}; release {version} not modelled apart")
        return name, note
    if family == "llm-foundry" and name not in FRAMEWORK_PROFILES:
        profile = "llm-foundry-flash" if attention_impl == "flash-attn" else "llm-foundry-triton"
        said = [] if attention_impl else ["attn_impl unknown: 'triton', llm-foundry's default (MPTConfig, "
                                          "submit_benchmarks.py)"]
        released = FRAMEWORK_PROFILES[profile].released
        if version and parse_version(family, version) != (int(released[:4]), int(released[5:])):
            said.append(f"one profile per attn_impl, documented from llm-foundry's scripts and model code of "
                        f"{released}; release {version} not modelled apart")
        return profile, "; ".join(said)
    if version and family:
        when = parse_version(family, version)
        releases = family_versions(family)
        if when is None or not releases:
            raise SpecError(field, f"cannot read {version!r} as a release of {family}",
                            "write a year (2021), a date (2024-12) or a release (24.07, core_r0.8.0)")
        at = f"{when[0]:04d}-{when[1]:02d}"
        older = [fw for fw in releases if fw.released <= at]
        pick = older[-1] if older else releases[0]
        how = (f"the latest documented {family} release at or before {version}" if older else
               f"{version} precedes every documented {family} release; the earliest")
        return pick.name, how
    if name not in FRAMEWORK_PROFILES:
        raise SpecError("framework", f"unknown framework {framework!r}",
                        f"use one of {', '.join(FRAMEWORK_PROFILES)} (or family@version, e.g. megatron@2021)")
    return name, ""


def equivalent_release(fw: FrameworkProfile) -> FrameworkProfile | None:
    """The documented release whose defaults an unversioned profile has (megatron: megatron-core@2024)."""
    def fields(f: FrameworkProfile) -> tuple:
        return tuple(getattr(f, k) for k in f.__dataclass_fields__ if k not in ("name", "released"))
    latest_first = sorted((s for s in _STACKS if s.released), key=lambda s: s.released, reverse=True)
    return next((s for s in latest_first if fields(s) == fields(fw)), None)


# ---- the optimizer's storage per parameter and what its step moves: one definition for the memory model
# (schedule.memory.stage_memory) and the optimizer step's time (workload.graph.optimizer_traffic)
_ADAM_WITH_MASTER = value("memory.adam_bytes_per_param_with_master")        # fp32 master, m, v
_ADAM_WITHOUT_MASTER = value("memory.adam_bytes_per_param_without_master")  # fp32 m, v
_ADAM_BF16_MOMENTS = value("memory.adam_bytes_per_param_bf16_moments")  # fp32 master, bf16 m, v
_ADAM_BF16_NO_MASTER = value("memory.adam_bytes_per_param_bf16_moments_without_master")  # bf16 m, v
_BF16_MASTER = value("memory.bf16_master_bytes_per_param")   # a bf16 master copy (apex DistributedFusedAdam)


def fsdp_per_unit(zero_stage: int, fw: FrameworkProfile) -> bool:
    """Whether a ZeRO stage runs FSDP's per-unit collectives: ZeRO-3, and ZeRO-2 where the framework's
    ZeRO-2 is FSDP's SHARD_GRAD_OP (``FrameworkProfile.fsdp_shard_grad_op``)."""
    return zero_stage >= 3 or (zero_stage == 2 and fw.fsdp_shard_grad_op)


def optimizer_storage_bytes(fw: FrameworkProfile, precision: str) -> tuple[int, int, float]:
    """(bytes per parameter of the stored weights, of the gradients, of the optimizer's states): the one
    definition ``stage_memory`` holds and the optimizer step's traffic reads and writes
    (workload.graph.optimizer_traffic), in one place."""
    fp32 = precision == "fp32"
    if fw.master_in_optimizer and not fp32 and not fw.master_weights:
        # the optimizer steps the 16-bit weights themselves, its moments in their dtype (torch.optim.Adam
        # on bf16 parameters; for_plan's default without a master copy) or in fp32
        return 2, fw.grad_reduce_bytes, _ADAM_BF16_NO_MASTER if fw.adam_moments_bf16 else _ADAM_WITHOUT_MASTER
    if fw.master_in_optimizer and not fp32 and fw.master_weights_bf16:
        # the moments in their dtype beside a bf16 master shard (apex DistributedFusedAdam store_params with
        # dtype=bf16)
        return 2, fw.grad_reduce_bytes, \
            (_ADAM_BF16_NO_MASTER if fw.adam_moments_bf16 else _ADAM_WITHOUT_MASTER) + _BF16_MASTER
    if fw.master_in_optimizer and not fp32:
        return 2, fw.grad_reduce_bytes, _ADAM_BF16_MOMENTS if fw.adam_moments_bf16 else _ADAM_WITH_MASTER
    return 4, 4, _ADAM_WITHOUT_MASTER


def adam_step_bytes(fw: FrameworkProfile, precision: str, param_bytes: float) -> float:
    """Bytes per parameter of its shard that the fused Adam step moves: it reads the gradient
    (``grad_read_bytes``), reads and writes every state it stores (``optimizer_storage_bytes``: the moments,
    and the master copy where it keeps one) and writes the model weights (``param_bytes`` each) from it;
    without a master copy (torch.optim.Adam on bf16 parameters, torch/optim/adam.py: the update applied to
    the parameter in place) it reads and writes the 16-bit weights themselves; fp32 weights (autocast, fp32
    training) are read and written beside their moments, and the 16-bit weights written as before."""
    w_bytes, _, o_bytes = optimizer_storage_bytes(fw, precision)
    grad = grad_read_bytes(fw, precision)
    if w_bytes == 4:                      # the fp32 weights are the stepped copy
        return grad + 2 * (o_bytes + w_bytes) + param_bytes
    if not fw.master_weights:             # the 16-bit weights stepped in place
        return grad + 2 * (o_bytes + w_bytes)
    return grad + 2 * o_bytes + param_bytes


def grad_read_bytes(fw: FrameworkProfile, precision: str) -> float:
    """Bytes per parameter of the shard the optimizer step moves to read the gradient, from the dtype of the
    gradient buffer (``optimizer_storage_bytes``): an fp32 buffer is read once (4). A 16-bit buffer
    (grad_reduce_dtype=bf16) is read as it is where the optimizer takes the gradient in that dtype: the
    16-bit weights stepped in place (torch.optim.Adam, the gradient in the parameter's dtype), and an
    optimizer keeping 16-bit states (Megatron-Core's precision-aware optimizer, which exp_avg_dtype /
    main_params_dtype need: distrib_optimizer.py _copy_model_grads_to_main_grads hands it the buffer's shard
    as ``decoupled_grad``; apex DistributedFusedAdam, its gradient buffer in grad_sync_dtype). Beside fp32
    master weights and moments the distributed optimizer first copies the shard to the master's fp32
    ``.grad`` (same function: ``shard_main_param.grad = shard_model_grad.float()``, read 2, write 4), which
    Adam then reads (4)."""
    _, g_bytes, _ = optimizer_storage_bytes(fw, precision)
    if g_bytes == 4 or not fw.master_weights or fw.adam_moments_bf16 or fw.master_weights_bf16:
        return g_bytes
    return g_bytes + 4 + 4


def for_plan(fw: FrameworkProfile, plan) -> FrameworkProfile:
    """The framework with what a plan overrides: the gradient reduction dtype, given outright or by
    fp16 training on a stack that reduces in the parameter dtype; the optimizer's storage (Adam moments'
    dtype, fp32 master copy), FP8 weights and the submodules selective recomputation repeats."""
    update: dict = {}
    dtype = getattr(plan, "grad_reduce_dtype", None)
    nbytes = None
    if dtype is not None:
        nbytes = 4 if dtype == "fp32" else 2
    elif getattr(plan, "precision", None) == "fp16" and fw.grad_reduce_bytes_fp16 is not None:
        nbytes = fw.grad_reduce_bytes_fp16
    if nbytes is not None and nbytes != fw.grad_reduce_bytes:
        update["grad_reduce_bytes"] = nbytes
    moments = getattr(plan, "adam_moments_dtype", None)
    if moments is not None and (moments == "bf16") != fw.adam_moments_bf16:
        update["adam_moments_bf16"] = moments == "bf16"
    master = getattr(plan, "master_weights", None)
    if master is not None and master != fw.master_weights:
        update["master_weights"] = bool(master)
    if master is not None and not master and moments is None and not fw.adam_moments_bf16:
        # without a master copy the optimizer steps the bf16 parameters and keeps its moments in their
        # dtype (torch.optim.Adam _init_group: exp_avg = torch.zeros_like(p, memory_format=torch.preserve_format))
        update["adam_moments_bf16"] = True
    master_dtype = getattr(plan, "master_weights_dtype", None)
    if master_dtype is not None and (master_dtype == "bf16") != fw.master_weights_bf16:
        update["master_weights_bf16"] = master_dtype == "bf16"
    fp8_params = getattr(plan, "fp8_params", None)
    if fp8_params is not None and fp8_params != fw.fp8_params:
        update["fp8_params"] = bool(fp8_params)
    modules = tuple(getattr(plan, "recompute_modules", None) or ())
    if modules and modules != fw.recompute_modules:
        update["recompute_modules"] = modules
    return replace(fw, **update) if update else fw


def pipeline_schedule(fw: FrameworkProfile, schedule: str | None, pp: int, vpp: int) -> str:
    """The pipeline schedule a plan runs: its own (``schedule``), else the framework's default where
    that can run (DualPipe: an even pipeline, not interleaved), else 1f1b."""
    if schedule:
        return schedule
    if fw.pp_schedule == "dualpipe" and not (pp > 1 and pp % 2 == 0 and vpp == 1):
        return "1f1b"
    return fw.pp_schedule


def get_framework(name: str) -> FrameworkProfile:
    """A profile by name: a profile's own name, an alias (megatron-lm, mcore, eager, ...) or
    family@version (megatron@2021, nemo@24.09, megatron-core@core_r0.8.0)."""
    key = _key(name)
    if key in FRAMEWORK_PROFILES:
        return FRAMEWORK_PROFILES[key]
    return FRAMEWORK_PROFILES[resolve_stack(name)[0]]


# where each stack's defaults come from (the comments above _STACKS give the detail)
STACK_SOURCES = {
    "megatron-lm@2021": "Megatron-LM v2.5 arguments.py, training.py, p2p_communication.py; Narayanan et al. 2021 Sec. 4.2",
    "megatron-lm@2022": "Megatron-LM tree of 2022-07 (2755bcb) arguments.py; Korthikanti et al. 2022 Sec. 4.1",
    "megatron-core@2024": "Megatron-LM README performance table (core_r0.8.0) flags; arguments.py",
    "nemo@24.07": "NeMo-Framework-Launcher H100 examples (grad_sync_dtype=bf16); NeMo recipes on Megatron-Core; "
                  "launcher conf/config.yaml at 24.07: NVTE_FUSED_ATTN=0 (TE 1.8 runs flash-attn 2)",
    "nemo@24.09": "NeMo-Framework-Launcher 24.09 (no NVTE_FUSED_ATTN override: TE prefers cuDNN attention on "
                  "sm90); otherwise as nemo@24.07",
    "nemo@25.02": "NeMo 2.0 performance recipes (performance_mode: grad_reduce_in_fp32 False, TP overlap)",
    "megatron-deepspeed": "microsoft/Megatron-DeepSpeed arguments.py @f4157be; DeepSpeed zero/config.py, engine.py, pipe/p2p.py",
    "deepspeed-zero3@2021": "DeepSpeed v0.5.8 zero/constants.py, zero/config.py; FlashAttention arXiv 2205.14135 (2022)",
    "torchtitan-eager": "torchtitan 9dec370 models/llama/model.py (SDPA, complex RoPE); pytorch/pytorch#138522",
    "torchtitan-compile": "torchtitan 9dec370 parallelize_llama.py apply_compile (per block), train.py (loss eager)",
    "llm-foundry-triton": "mosaicml/llm-foundry b2a43a14 / 5e85bd62 scripts/train/benchmarking, llmfoundry/models "
                          "(flash_attn_triton.py, norm.py, ffn.py, modeling_mpt.py); Composer DecoupledAdamW",
    "llm-foundry-flash": "as llm-foundry-triton, attn_impl 'flash' (flash_attn 2.x, '.[gpu-flash2]'; sweep.py @5e85bd62)",
    "hai-llm": "DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.2.1 (DualPipe, Table 2), 3.2.3, 3.3.3",
    "meta-llama3": "The Llama 3 Herd of Models (arXiv 2407.21783) Sec. 3.3.2 (FSDP, pipeline schedule, numerical "
                   "stability)",
}


def stacks_markdown() -> str:
    """The versioned stacks and their defaults as docs/model.md shows them (a test keeps the two equal)."""
    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    lines = ["| stack | family | release | attention | TP overlap | DP overlap | PP overlap | fused bias-act / "
             "residual / RoPE | fused loss | grad reduce bytes (fp16) | ZeRO | sp with tp | source |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fw in _STACKS:
        fp16 = fw.grad_reduce_bytes_fp16 if fw.grad_reduce_bytes_fp16 is not None else fw.grad_reduce_bytes
        attention = fw.attention_kernel + (" (Triton FA1 port)" if fw.attention_triton else "")
        lines.append(f"| {fw.name} | {fw.family} | {fw.released or '-'} | {attention} | "
                     f"{yes(fw.overlap_tp_comm)} | {yes(fw.overlap_dp_comm)} | {yes(fw.overlap_pp_comm)} | "
                     f"{yes(fw.fused_bias_act)} / {yes(fw.fused_residual)} / {yes(fw.fused_rope)} | "
                     f"{yes(fw.fused_cross_entropy)} | {fw.grad_reduce_bytes} ({fp16}) | {fw.default_zero_stage} | "
                     f"{yes(fw.sp_with_tp)} | {STACK_SOURCES[fw.name]} |")
    return "\n".join(lines)


def capabilities_markdown() -> str:
    """The capability table as docs/model.md shows it (a test keeps the two equal)."""
    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    lines = ["| framework | ZeRO stages | ZeRO-2/3 with PP | DDP with TP/PP/CP | interleaved PP | CP | EP | etp | "
             "TP overlap | DualPipe |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, fw in FRAMEWORK_PROFILES.items():
        c = fw.capabilities
        lines.append(f"| {name} | {', '.join(map(str, c.zero_stages))} | {yes(c.sharded_grads_with_pp)} | "
                     f"{yes(c.ddp_with_model_parallel)} | {yes(c.interleaved_pp)} | {yes(c.context_parallel)} | "
                     f"{yes(c.expert_parallel)} | {'any' if c.expert_tp_any else '1 or tp'} | {yes(c.tp_overlap)} | "
                     f"{yes(c.dualpipe)} |")
    return "\n".join(lines)
