"""Engine profiles: what vLLM, SGLang and TensorRT-LLM do by default, each figure with its source or
"assumed: why". A profile is data; the simulation (``serve.sim``) and the memory plan
(``serve.workload``) read it.

>>> get_engine("vllm").block_size, get_engine("vllm").memory_fraction
(16, 0.9)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..constants import value
from ..errors import SpecError

# host time per kernel a step launches outside a CUDA graph: compiled code (a torch.compile'd graph's
# generated wrapper, or a C++ runtime) or eager PyTorch modules (see constants host.*_per_kernel_s)
_COMPILED = value("host.compiled_per_kernel_s")
_EAGER = value("host.torch_forward_per_kernel_s")
_V0_MIN_BUDGET = value("serve.vllm_v0_min_batched_tokens")
_BLOCK_FP8_K_STEP = value("serve.block_fp8_k_step_s")
_TRITON_FP8_MOE_FLOPS = value("serve.triton_block_fp8_moe_flops_per_s")
_TRITON_MLA_BLOCK_H = int(value("serve.triton_mla_decode_block_h"))
_TRT_TORCH_ROUTING = value("serve.trtllm_pytorch_unfused_routing_kernels")
_MLA_ALIGN = int(value("serve.vllm_mla_cache_align_bytes"))
_V1_DEFAULT = (0, 8)    # vLLM release whose default engine is V1 (v0.8.0 release notes)


@dataclass(frozen=True)
class EngineProfile:
    """The defaults of one serving engine that decide batching, KV-cache capacity and overhead.

    ``memory_basis``: what ``memory_fraction`` is a fraction of. ``total`` (vLLM
    ``gpu_memory_utilization``: the engine may use this share of the GPU for weights, activations and
    the KV cache together), ``free`` (TensorRT-LLM ``free_gpu_memory_fraction``: the KV cache takes this
    share of what is free after weights and buffers), ``static`` (SGLang ``mem_fraction_static``:
    weights and the KV pool take this share; activations live in the rest).
    """

    name: str
    block_size: int                 # KV-cache page, tokens
    memory_fraction: float
    memory_basis: str               # total | free | static
    max_num_seqs: int               # running requests at most
    max_num_batched_tokens: int     # tokens one iteration schedules at most (prefill chunk budget)
    chunked_prefill: bool
    cuda_graph_max_batch: int       # decode batches up to this size replay a CUDA graph
    step_overhead_s: float          # host time per iteration the GPU waits for (schedule, sample, detokenize)
    non_torch_bytes: float          # CUDA context, NCCL buffers, CUDA graphs: memory outside weights/activations/KV
    admission_reserve: float = 0.0  # share of a request's output tokens its admission reserves in the cache
    scheduler_steps: int = 1        # decode iterations one scheduling decision runs (vLLM --num-scheduler-steps)
    # whether an iteration that prefills also advances the running decodes: ``always`` (TensorRT-LLM's
    # in-flight batching), ``chunked`` (vLLM: with chunked prefill; its V0 default scheduler without it runs
    # prefill-only steps), ``never`` (SGLang: a prefill batch runs alone unless --enable-mixed-chunk)
    mixed_batches: str = "chunked"
    eager_dispatch_s: float = _COMPILED     # host time per kernel launched outside a CUDA graph
    # least time of a block-FP8 dense GEMM per 128 of its K (serve.block_fp8_k_step_s) where the release runs
    # DeepSeek's block-scaled linear layers through the Triton or CUTLASS-2.x block-FP8 GEMM; 0: not priced
    block_fp8_k_step_s: float = 0.0
    # most FLOP/s of the routed experts' grouped GEMMs where the release runs DeepSeek's block-FP8 MoE through
    # the Triton fused_moe kernel (serve.triton_block_fp8_moe_flops_per_s); 0: priced on the GPU's roofline
    block_fp8_moe_flops_per_s: float = 0.0
    # on AMD GPUs, the release runs the FP8 GEMMs of a per-channel-weight, per-token-activation checkpoint
    # (Meta's fbgemm_fp8) unfused: a GEMM into fp32, then the scales and the cast as separate kernels
    # (PLATFORM_RULES; priced by serve.workload with serve.fp8_channelwise_unfused_bytes)
    rocm_fp8_channelwise_unfused: bool = False
    # MLA prefill in the absorbed form (attention over the latent: q.k over kv_lora_rank + rope dims, output
    # kv_lora_rank wide, per head) by a Triton kernel, instead of the decompressed MHA form; see VERSION_RULES
    mla_absorbed_prefill: bool = False
    # query heads per program of an MLA decode kernel that reads the latent cache once per program
    # (serve.triton_mla_decode_block_h); 0: the kernel reads it once per step for all heads
    mla_decode_head_block: int = 0
    # kernels a group-limited-routing MoE layer adds (None: the engine's serve.kernels.<engine>.grouped_topk)
    grouped_topk_kernels: float | None = None
    # bytes each token's MLA latent-cache entry (per layer, in the model's 16-bit dtype) is rounded up to where the
    # release pads it for alignment (serve.vllm_mla_cache_align_bytes); 0: stored unpadded
    mla_cache_align_bytes: int = 0
    # the release keeps, beside an MLA model's weights, the absorbed products W_Q_UK (q_lora_rank x heads x
    # kv_lora_rank) and W_UV_O (heads x kv_lora_rank x hidden) of every layer, at the attention GEMMs' byte width
    mla_absorbed_weights: bool = False
    # tokens the routed experts' Triton fused MoE processes at a time (its buffers' rows, which the profiling pass's
    # activation peak holds: ServeSetup.activation_bytes_per_gpu); 0: the generic MLP estimate
    fused_moe_chunk_tokens: int = 0
    sources: tuple[str, ...] = ()

    @property
    def prefill_stalls_decode(self) -> bool:
        """True when a step that prefills runs no decode tokens (the running requests wait for it)."""
        return self.mixed_batches == "never" or (self.mixed_batches == "chunked" and not self.chunked_prefill)

    def with_overrides(self, **kw: object) -> "EngineProfile":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})  # type: ignore[arg-type]


_GIB = 1024.0 ** 3

ENGINES: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        "vllm", block_size=16, memory_fraction=0.9, memory_basis="total", max_num_seqs=256,
        max_num_batched_tokens=8192, chunked_prefill=True, cuda_graph_max_batch=512,
        step_overhead_s=1.5e-3, non_torch_bytes=2.0 * _GIB, admission_reserve=0.0, eager_dispatch_s=_COMPILED,
        fused_moe_chunk_tokens=int(value("serve.vllm_fused_moe_chunk_tokens")),
        sources=(
            "block_size 16: vLLM CacheConfig.DEFAULT_BLOCK_SIZE (docs.vllm.ai/en/stable/api/vllm/config/cache/)",
            "gpu_memory_utilization 0.9: vLLM engine arguments (docs.vllm.ai, engine_args; 0.92 in the newest "
            "releases)",
            "max_num_seqs 256: vLLM engine arguments default (V0 and V1 below 70 GiB GPUs; V1 raises it on large "
            "GPUs: assumed 256 as the documented default)",
            "max_num_batched_tokens 8192 with chunked prefill: vLLM V1 default for the OpenAI server on GPUs of "
            "70 GiB or more (vllm/engine/arg_utils.py, _set_default_args_v1; recalled, not re-checked here)",
            "cuda_graph_max_batch 512: vLLM CompilationConfig max_capture_size default (recalled; assumed)",
            "step_overhead 1.5 ms: assumed: the scheduler, sampler and detokenizer of vLLM V1 run on the host "
            "between iterations, partly overlapped; a few ms were measured for V0 (vLLM blog, 2024-09-05 "
            "'vLLM v0.6.0: 2.7x throughput', which cut it by overlapping); no per-step figure for V1 found",
            "non_torch 2 GiB: assumed: CUDA context, NCCL buffers and captured CUDA graphs, as vLLM's startup log "
            "reports them (order of 1-3 GiB); not a published constant",
            "kernels per layer and per step: constants serve.kernels.vllm.* (counted in models/llama.py, "
            "v0.6-v0.7)",
            "without chunked prefill (--enable-chunked-prefill=False, or V0's default for MLA models, see "
            "VERSION_RULES) a step runs prefills or decodes, never both: vLLM V0 vllm/core/scheduler.py "
            "_schedule_default, 'Don't schedule decodes if prefills are scheduled'",
            "outside CUDA graphs (prefill steps, batches above the captured sizes) the V1 engine runs the "
            "model torch.compile'd ('In vLLM's V1 architecture, torch.compile is enabled by default', "
            "docs.vllm.ai/en/latest/design/torch_compile/), so a kernel costs the compiled launch "
            "(host.compiled_per_kernel_s); V0 (below 0.8, VERSION_RULES) runs the nn.Modules eagerly, and so "
            "does --enforce-eager ('Turn off torch.compile and CUDAGraphs', docs.vllm.ai design/debug_vllm_compile)",
            "admission: a request is admitted when its next chunk's blocks are free (nothing reserved for its "
            "output); when the cache runs out the newest request is preempted and recomputed (vLLM docs, "
            "'Preemption' in Optimization and Tuning: recompute is the V1 default)",
        )),
    "sglang": EngineProfile(
        "sglang", block_size=1, memory_fraction=0.88, memory_basis="static", max_num_seqs=1024,
        max_num_batched_tokens=8192, chunked_prefill=True, cuda_graph_max_batch=160,
        step_overhead_s=0.5e-3, non_torch_bytes=1.5 * _GIB, admission_reserve=0.5, mixed_batches="never",
        eager_dispatch_s=_EAGER,
        sources=(
            "page_size 1: SGLang server arguments default (docs.sglang.ai, server_args)",
            "mem_fraction_static 0.88: SGLang ServerArgs default for a single GPU of 80 GB class (sglang "
            "server_args.py picks 0.79-0.88 by tp size and GPU memory; recalled, assumed for tp=1)",
            "chunked_prefill_size 8192: SGLang default on 80 GB class GPUs (server_args.py; recalled)",
            "max_running_requests: derived by SGLang from the KV pool; assumed 1024 as a cap",
            "cuda_graph_max_bs 160: SGLang default on H100-class GPUs (server_args.py; recalled, assumed)",
            "admission reserves half the output: assumed between SGLang's initial new-token ratio 0.7 and its floor "
            "0.1 (schedule_policy.py / server_args.py; recalled), retracting requests when the cache runs out",
            "kernels per layer and per step: constants serve.kernels.sglang.* (counted in srt/models/llama.py, "
            "v0.4)",
            "prefill first, never mixed with decode: Scheduler.get_next_batch_to_run runs a new prefill batch "
            "whenever get_new_batch_prefill forms one ('# Run prefill first if possible') and the running decode "
            "batch only when none forms; decodes join a prefill batch only with --enable-mixed-chunk "
            "(ServerArgs.enable_mixed_chunk default False; python/sglang/srt/managers/scheduler.py and "
            "server_args.py, v0.3-v0.4 and later)",
            "outside CUDA graphs the model's nn.Modules run eagerly (host.torch_forward_per_kernel_s a "
            "kernel): torch.compile is off by default (ServerArgs.enable_torch_compile False) and, when on, "
            "compiles only the CUDA-graph batch sizes up to --torch-compile-max-bs (server_args.py, v0.3-v0.4)",
            "step_overhead 0.5 ms: assumed: SGLang's overlap scheduler runs the CPU work of the next batch "
            "while the GPU runs this one ('zero-overhead batch scheduler', SGLang v0.4 blog, lmsys.org "
            "2024-12-04); the residue is a guess",
        )),
    "trtllm": EngineProfile(
        "trtllm", block_size=32, memory_fraction=0.9, memory_basis="free", max_num_seqs=2048,
        max_num_batched_tokens=8192, chunked_prefill=True, cuda_graph_max_batch=2048,
        step_overhead_s=0.4e-3, non_torch_bytes=1.5 * _GIB, admission_reserve=1.0, mixed_batches="always",
        sources=(
            "tokens_per_block 32: TensorRT-LLM KvCacheConfig default "
            "(nvidia.github.io/TensorRT-LLM/llm-api/reference/KvCacheConfig.html)",
            "free_gpu_memory_fraction 0.9 of the memory free after weights and buffers: same page and "
            "nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html",
            "max_batch_size 2048, max_num_tokens 8192: the engine's BuildConfig / LLM API defaults "
            "(NVIDIA/TensorRT-LLM tensorrt_llm/builder.py, BuildConfig, checked at commit 008b2b8d); trtllm-serve lowers the batch to 256 (trtllm-serve "
            "docs): give --max-num-seqs 256 to model trtllm-serve",
            "enable_chunked_context: assumed on (trtllm-serve pytorch backend)",
            "admission reserves the whole output: the default capacity scheduler policy GUARANTEED_NO_EVICT admits a "
            "request only when its prompt and maximum output fit (TensorRT-LLM docs, scheduler / "
            "CapacitySchedulerPolicy)",
            "kernels per layer and per step: constants serve.kernels.trtllm.* (counted in LLaMADecoderLayer and "
            "the gpt_attention plugin, v0.8-v0.17)",
            "decode launch: assumed cheap at every batch (a TensorRT engine or a captured graph enqueued from C++)",
            "step_overhead 0.4 ms: assumed: C++ batch manager with overlapped scheduling; a guess",
        )),
}


@dataclass(frozen=True)
class VersionRule:
    """A default an engine release changes, for the runs it concerns: ``overrides`` apply to releases
    below ``before`` (a release tuple) when the run has ``needs`` (``mla``: a model with multi-head latent
    attention; ``pytorch``: TensorRT-LLM's PyTorch backend, trtllm-serve --backend pytorch; ``""``: any run)."""

    engine: str
    before: tuple[int, ...]
    needs: str
    overrides: tuple[tuple[str, object], ...]
    note: str


VERSION_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        "vllm", (0, 8), "", (("eager_dispatch_s", _EAGER),),
        "vLLM below 0.8 runs its V0 engine (V1 became the default in v0.8.0), whose model runs as eager "
        "nn.Modules outside CUDA graphs (torch.compile only at -O levels above 0; V1 compiles by default: "
        "docs.vllm.ai/en/latest/design/torch_compile/): host.torch_forward_per_kernel_s a kernel"),
    VersionRule(
        "vllm", (0, 8), "mla", (("chunked_prefill", False),),
        "vLLM below 0.8 runs its V0 engine (V1 became the default in v0.8.0), and V0 serves MLA models without "
        "chunked prefill: vLLM 0.7.1-0.7.3 vllm/config.py VllmConfig logs 'MLA is enabled; forcing chunked "
        "prefill and prefix caching to be disabled' (quoted in vllm-project/vllm#13374, 2025-02-17), and "
        "from 0.7.4 V0's EngineArgs._set_default_args_v0 keeps it off ('Chunked prefill not supported for "
        "Multimodal or MLA in V0'); V0's default scheduler then runs prefill-only steps that stall the "
        "running decodes"),
    VersionRule(
        "vllm", (0, 8), "mla", (("block_fp8_k_step_s", _BLOCK_FP8_K_STEP),),
        "vLLM below 0.8 runs DeepSeek's block-FP8 linear layers through its CUTLASS block-FP8 GEMM ('our existing "
        "CUTLASS Block FP8', vllm-project/vllm#13996, 2025-02-27, 8xH100/8xH200) and the Triton "
        "w8a8_block_fp8_matmul where N or K is not a multiple of 128 (kv_a, N = 576): at decode sizes both walk K "
        "in a chain of 128-wide steps (serve.block_fp8_k_step_s a step)"),
    VersionRule(
        "vllm", (0, 8), "mla", (("mla_absorbed_weights", True),),
        "vLLM 0.7.x materializes MLA's absorbed matrices W_Q_UK and W_UV_O of every layer beside the original "
        "weights (introduced with the latent decode, vllm-project/vllm#12528, 2025-01-31, v0.7.1; requantized to "
        "FP8 when kv_b_proj is FP8; removed by vllm-project/vllm#14770, 2025-03-13, 'MLA get rid of "
        "materialization': 'the weight materialization eats up too much of the GPU memory'): for DeepSeek-V3/R1 at "
        "tp 8, (1536 + 7168) x 16 x 512 FP8 bytes a layer, 4.35 GB a GPU (a vLLM 0.7.3 start-up log of DeepSeek-R1, "
        "tp 8 on H200, reports 'model weights take 83.88GiB')"),
    VersionRule(
        "sglang", (0, 4, 4), "mla", (("block_fp8_k_step_s", _BLOCK_FP8_K_STEP),),
        "SGLang below 0.4.4 runs DeepSeek's block-FP8 linear layers through the Triton w8a8_block_fp8_matmul "
        "(the 'SGLang' column of sglang#3893, 2025-02-26, before DeepGEMM and sgl-kernel's CUTLASS block GEMM "
        "were wired in): at decode sizes it walks K in a chain of 128-wide steps (serve.block_fp8_k_step_s a "
        "step)"),
    VersionRule(
        "vllm", (0, 8), "mla", (("block_fp8_moe_flops_per_s", _TRITON_FP8_MOE_FLOPS),),
        "vLLM below 0.8 runs DeepSeek's block-FP8 routed experts through its Triton fused_moe kernel (DeepGEMM's "
        "grouped GEMM came only as an opt-in, vllm-project/vllm#13932, 2025-02-26, whose H100 table measures the "
        "Triton kernel at 64-80 TFLOP/s on DeepSeek-V3's shapes, serve.triton_block_fp8_moe_flops_per_s): the "
        "expert GEMMs of every step (a prefill's, and a decode batch large enough) run at most at that rate; "
        "the 0.8 bound is assumed (later releases keep the Triton kernel with retuned configs, vllm#29346, and "
        "no rate is at hand for them)"),
    VersionRule(
        "sglang", (0, 4, 4), "mla", (("block_fp8_moe_flops_per_s", _TRITON_FP8_MOE_FLOPS),),
        "SGLang below 0.4.4 runs DeepSeek's block-FP8 routed experts through its Triton fused_moe kernel (the "
        "kernel vLLM's fused_moe_triton was ported from; DeepGEMM's grouped GEMM is not wired in): the expert "
        "GEMMs of every step run at most at the rate vllm-project/vllm#13932 measures for that kernel on "
        "DeepSeek-V3's shapes (serve.triton_block_fp8_moe_flops_per_s); the 0.4.4 bound is assumed"),
    VersionRule(
        "sglang", (0, 4, 6), "mla", (("mla_absorbed_prefill", True), ("mla_decode_head_block", _TRITON_MLA_BLOCK_H)),
        "SGLang below 0.4.6 runs MLA models on its Triton attention backend (model_runner.py: 'MLA optimization "
        "is turned on. Use triton backend.', unless --enable-flashinfer-mla from 0.4.3 or --attention-backend fa3 "
        "later). Its decode kernel reads a sequence's latent cache once per 16 query heads "
        "(serve.triton_mla_decode_block_h: 8 times with attention data parallelism's 128 heads a GPU, once "
        "with tp 8's 16). It prefills in the absorbed form (forward_absorb: attention over the 576-wide "
        "latent keys and 512-wide latent values of all heads), as its FlashInfer backends do too; the "
        "decompressed MHA path (forward_normal) runs only with --attention-backend fa3 (maintainer, sglang#5731, "
        "2025-04-25: 'Other backends almost always uses forward absorb'; it needs a batch with no cached "
        "prefix). Its Triton extend kernel tiles a 576-wide query by BLOCK_M 32 on Hopper (extend_attention.py, "
        "'BLOCK_M, BLOCK_N = (32, 64)' for Lq > 256, num_stages 1), below the 64 rows a Hopper warpgroup MMA "
        "needs, so it runs mma.sync like FlashAttention-2: priced at the profile's FlashAttention-2 efficiency"),
    VersionRule(
        "trtllm", (0, 21), "pytorch", (("cuda_graph_max_batch", 0), ("eager_dispatch_s", _EAGER)),
        "TensorRT-LLM's PyTorch backend before the 1.0 API runs the model as eager nn.Modules unless told "
        "otherwise: PyTorchConfig.use_cuda_graph defaults to False ('If true, use CUDA graphs for decoding') "
        "and torch_compile_enabled to False (tensorrt_llm/_torch/pyexecutor/config.py, read at 0.20; the "
        "backend first shipped in 0.17, 'The PyTorch backend of TensorRT LLM is available in version 0.17 and "
        "later', docs torch.md); a trtllm-serve launch without --extra_llm_api_options keeps them"),
    VersionRule(
        "trtllm", (0, 18), "pytorch", (("grouped_topk_kernels", _TRT_TORCH_ROUTING),),
        "TensorRT-LLM's PyTorch backend of the 0.17 line routes DeepSeek's group-limited top-k with 18 PyTorch "
        "ops (Deepseekv3RoutingImpl; the tech blog 'Optimizing DeepSeek R1 Throughput on NVIDIA Blackwell "
        "GPUs' fused them into as few as 2 kernels after its February baseline; assumed unfused through 0.17)"),
)


# Defaults a release changes on one vendor's GPUs only (``needs``: the GPU vendor of the run's catalog entry,
# ``amd`` or ``nvidia``): applied by ``engine_for_platform`` once the cluster is known.
PLATFORM_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        "vllm", (0, 7, 3), "amd", (("rocm_fp8_channelwise_unfused", True),),
        "vLLM below 0.7.3 on ROCm runs an FP8 GEMM with per-channel weight and per-token activation scales "
        "(Meta's fbgemm_fp8 checkpoints) through its unfused fallback: cutlass_fp8_supported() is False off "
        "CUDA, so torch._scaled_mm runs at unit scales into fp32 and 'output * x_scale * weight_scale.t()' and "
        "the bf16 cast follow as separate kernels (layers/quantization/utils/w8a8_utils.py apply_fp8_linear, "
        "vllm-project/vllm#6552); the row-wise scaled torch._scaled_mm replaced it on ROCm in 0.7.3 "
        "(vllm-project/vllm#12501; vLLM blog 2025-02-24, PTPC-FP8 on ROCm)"),
    VersionRule(
        "vllm", (0, 8), "nvidia", (("mla_cache_align_bytes", _MLA_ALIGN),),
        "vLLM below 0.8 (V0) on CUDA pads an MLA model's latent-cache entry to 256 bytes (vllm/worker/"
        "cache_engine.py CacheEngine._align_cache, VLLM_CUDA_MEM_ALIGN_KV_CACHE on by default): DeepSeek's 576 "
        "16-bit values (1152 bytes) take 1280 bytes a token and layer, 10% fewer tokens in the same memory "
        "(vllm-project/vllm#14842 removed it before v0.8.0: 4739 -> 5266 GPU blocks for DeepSeek-R1 tp 8)"),
)


def engine_for_platform(profile: EngineProfile, version: str | None,
                        vendor: str | None) -> tuple[EngineProfile, list[str]]:
    """``profile`` with the PLATFORM_RULES that hold for release ``version`` on a GPU of ``vendor``, and one
    note per rule applied; an unknown version or vendor keeps the profile.

    >>> e, notes = engine_for_platform(get_engine("vllm"), "0.6.3.dev109+gcb3b2b9b", "amd")
    >>> e.rocm_fp8_channelwise_unfused, len(notes)
    (True, 1)
    >>> engine_for_platform(get_engine("vllm"), "0.6.3", "nvidia")[0].rocm_fp8_channelwise_unfused
    False
    """
    rel = parse_version(version)
    notes: list[str] = []
    if rel is None or not vendor:
        return profile, notes
    for rule in PLATFORM_RULES:
        if rule.engine != profile.name or rel >= rule.before or rule.needs != vendor.lower():
            continue
        profile = replace(profile, **dict(rule.overrides))   # type: ignore[arg-type]
        notes.append(f"{profile.name} {version} on {vendor.upper()} GPUs: " + rule.note)
    return profile, notes


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """The release numbers of an engine version string (``0.7.3.dev138+g21f6ca217`` -> (0, 7, 3)); None when
    empty or unreadable."""
    nums: list[int] = []
    for part in (text or "").strip().lstrip("vV").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
        if len(digits) < len(part):
            break
    return tuple(nums) or None


def engine_for_version(profile: EngineProfile, version: str | None, mla: bool,
                       backend: str | None = None, max_model_len: int | None = None) -> tuple[EngineProfile, list[str]]:
    """``profile`` with the VERSION_RULES that hold for ``version`` (a model with MLA when ``mla``; the
    engine's ``backend``, e.g. ``pytorch``), and one note per rule applied. An unknown or empty version keeps
    the profile (the current defaults).

    vLLM's V0 engine (below 0.8) without chunked prefill sizes its token budget to the longest sequence it
    serves, max(max_model_len, 2048) (SchedulerConfig, serve.vllm_v0_min_batched_tokens): with the run's
    ``max_model_len`` (vllm serve --max-model-len) known, that budget replaces the profile's 8192 (which is
    V1's). Unknown, the profile's budget stays (a prompt longer than it is still prefilled whole, alone)."""
    rel = parse_version(version)
    notes: list[str] = []
    if rel is None:
        return profile, notes
    have = {"": True, "mla": mla, "pytorch": (backend or "").lower() == "pytorch"}
    for rule in VERSION_RULES:
        if rule.engine != profile.name or rel >= rule.before or not have.get(rule.needs, False):
            continue
        profile = replace(profile, **dict(rule.overrides))   # type: ignore[arg-type]
        notes.append(f"{profile.name} {version}: " + rule.note)
    if profile.name == "vllm" and rel < _V1_DEFAULT and not profile.chunked_prefill and max_model_len:
        budget = max(int(max_model_len), int(_V0_MIN_BUDGET))
        profile = replace(profile, max_num_batched_tokens=budget)
        notes.append(f"vllm {version}: V0 without chunked prefill schedules max(max_model_len {max_model_len:,}, "
                     f"{int(_V0_MIN_BUDGET):,}) = {budget:,} tokens a step (vllm/config.py SchedulerConfig."
                     "__post_init__, v0.6-v0.7)")
    return profile, notes


def get_engine(name: str) -> EngineProfile:
    key = (name or "").strip().lower().replace("-", "").replace("_", "")
    key = {"tensorrtllm": "trtllm", "trt": "trtllm"}.get(key, key)
    if key not in ENGINES:
        raise SpecError("engine", f"unknown engine {name!r}", f"use one of {', '.join(ENGINES)}")
    return ENGINES[key]


__all__ = ["EngineProfile", "ENGINES", "get_engine", "VersionRule", "VERSION_RULES", "PLATFORM_RULES",
           "parse_version", "engine_for_version", "engine_for_platform"]
