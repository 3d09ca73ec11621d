"""The serving workload: a prefill pass and a decode step of a model on one replica, priced with the
training side's GEMM, attention and memory-bound pricing (``cost.compute``) and NCCL collective
pricing (``cost.network``), and the memory plan that gives the KV cache its capacity.

One *iteration* of a continuous-batching engine runs some prefill chunks and some decode tokens
together: every GEMM sees all the iteration's tokens at once (weights read once per step), the
attention of each prefill chunk is causal over its prompt (compute-bound), and each decode token
reads its sequence's whole KV cache (memory-bound). Per GPU of a replica of tp x pp GPUs:

* weights: every matrix split over tp (column/row parallel as Megatron and vLLM split them); KV heads
  fewer than tp are replicated (vLLM); MLA's latent cache and its down-projections are replicated;
  routed experts split over ep ranks and each expert over tp/ep. Embedding and output head stay 16-bit.
* precision: ``bf16``/``fp16``; ``fp8`` (weights and GEMMs in FP8, at the FP8 peak); ``fp8-ffn`` (Meta's
  FP8 checkpoints: the inner layers' feed-forward GEMMs in FP8, attention and the first and last layers
  16-bit); ``int4-awq``
  (weight-only: 4-bit weights with an fp16 scale and a 4-bit zero per group of 128, AutoAWQ's
  q_group_size=128 default; GEMMs stay 16-bit); ``nvfp4`` (4-bit weights, an FP8 scale per 16,
  NVIDIA's NVFP4 format; GEMMs at the FP4 peak where the GPU has one).
* a pipeline of pp stages runs min(pp, sequences) micro-batches in flight (vLLM's virtual engines):
  an iteration advances every sequence one step and takes the time of the whole model at 1/m of the
  batch, plus pp-1 activation sends.
* MoE: the experts a batch touches are read (E (1 - (1 - k/E)^t) of E for t tokens, uniform routing),
  each with its share of the tokens; TP all-reduces after attention and MLP, EP all-to-all dispatch and
  combine instead of the MLP all-reduce when ep > 1.

>>> from clustertwin.catalog import load_model, cluster_for_gpu
>>> from clustertwin.serve.engines import get_engine
>>> s = ServeSetup(load_model("llama3-8b"), cluster_for_gpu("h100-sxm", 1), engine=get_engine("vllm"))
>>> round(s.weight_bytes_per_gpu / 1e9, 1)
16.1
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from ..constants import group, value
from ..cost.compute import ComputePricer
from ..cost.network import NetworkPricer
from ..cost.profile import HardwareProfile
from ..errors import PlanError, SpecError
from ..parallel.layout import GroupPlacement, place_group
from ..specs.hardware import ClusterSpec
from ..specs.model import ModelSpec
from ..workload.ops import Op, OpKind, Phase
from .engines import EngineProfile

# precision -> (bytes per weight, GEMM dtype)
PRECISIONS: dict[str, tuple[float, str]] = {
    "bf16": (2.0, "bf16"),
    "fp16": (2.0, "fp16"),
    "fp8": (1.0, "fp8"),
    # AutoAWQ (casper-hansen/AutoAWQ) default q_group_size 128: fp16 scale + 4-bit zero per 128 weights
    "int4-awq": (0.5 + 2.5 / 128, "bf16"),
    # NVFP4 (NVIDIA Blackwell): one FP8 (E4M3) scale per block of 16 FP4 values
    "nvfp4": (0.5 + 1.0 / 16, "fp4"),
    # Meta's FP8 recipe (Llama 3 paper, arXiv 2407.21783, Sec. 6.2; meta-llama/Llama-3.1-405B-FP8): FP8
    # weights and activations in the feed-forward GEMMs only; self-attention stays BF16, and so do the first
    # and last layers ('we do not perform quantization in the first and last Transformer layers')
    "fp8-ffn": (1.0, "fp8"),
}
FFN_ONLY = {"fp8-ffn"}   # precisions that quantize the inner layers' feed-forward GEMMs only
# precisions whose FP8 GEMMs scale weights per output channel and activations per token (Meta's fbgemm_fp8
# checkpoints: quantization_config 'fbgemm_fp8', one weight scale per row, dynamic per-row activation scales)
CHANNELWISE_FP8 = {"fp8-ffn"}
_UNFUSED_BYTES = value("serve.fp8_channelwise_unfused_bytes")   # per output element of an unfused FP8 GEMM
KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
ACT_BYTES = 2.0   # activations stay 16-bit
# kernels a decoder layer and a step launch, per engine, counted in each engine's model code
# (constants serve.kernels.<engine>.*: dense_layer, tp_layer, moe_layer, mla_layer, fp8_layer,
# attn_split, per_step, with the files and tags they were read from)
_SPLIT_FILL = value("serve.attn_split_fill")   # split-KV decode only below this fill of the SMs
_GAP = value("host.kernel_gap_s")                    # GPU idle between kernels on a busy queue
_DECODE_STALL = value("serve.decode_kernel_stall_s")  # GPU idle per streaming kernel of a decode-only step
# DeepSeek-V3/R1's FP8 checkpoints scale weights per 128 x 128 block and activations per 1 x 128 group
# (config.json quantization_config weight_block_size [128, 128]): a block-FP8 GEMM steps K 128 at a time
_SCALE_BLOCK_K = 128


def parse_serve_plan(text: str | None) -> dict[str, int]:
    """``"tp=8,pp=1,ep=1,dp=1"`` as a dict (missing fields 1; ``adp=8``: attention data-parallel over the
    tp ranks, SGLang --enable-dp-attention / TensorRT-LLM enable_attention_dp). One line error on anything else."""
    out = {"tp": 1, "pp": 1, "ep": 1, "dp": 0, "adp": 1}
    if not text or not text.strip():
        return out
    seen: set[str] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise PlanError("plan", f"{part!r} is not key=value", 'write e.g. --plan "tp=8,pp=1,ep=1,dp=1"')
        k, v = (x.strip().lower() for x in part.split("=", 1))
        if k not in out:
            raise PlanError("plan", f"unknown field {k!r} for serving", "use tp, pp, ep, dp and adp")
        if k in seen:       # "tp=2,tp=4": which one was meant? not the last by accident
            raise PlanError(f"plan.{k}", "given twice", f"give {k} once")
        seen.add(k)
        try:
            n = int(v)
        except ValueError:
            raise PlanError(f"plan.{k}", f"{v!r} is not an integer", 'write e.g. "tp=8"') from None
        if n < 1:
            raise PlanError(f"plan.{k}", f"{n} must be at least 1", "use a positive size")
        out[k] = n
    return out


@dataclass(frozen=True)
class StepCost:
    """One iteration's time and its breakdown (seconds); the parts sum to ``total_s``."""

    gemm_s: float = 0.0           # compute-bound GEMMs
    attention_s: float = 0.0      # compute-bound attention (prefill)
    memory_bound_s: float = 0.0   # weight reads of memory-bound GEMMs, KV-cache reads, elementwise
    communication_s: float = 0.0  # TP all-reduce, EP all-to-all, PP sends
    overhead_s: float = 0.0       # kernel gaps/launches and the engine's host time per step

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.memory_bound_s + self.communication_s + self.overhead_s

    def breakdown(self) -> dict[str, float]:
        return {"gemm": self.gemm_s, "attention": self.attention_s, "memory_bound": self.memory_bound_s,
                "communication": self.communication_s, "overhead": self.overhead_s}


@dataclass(frozen=True)
class ServeSetup:
    """A model served on ``cluster`` by replicas of tp x pp GPUs (dp of them) with one engine."""

    model: ModelSpec
    cluster: ClusterSpec
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    precision: str = "bf16"
    kv_cache_dtype: str = ""      # "" = the engine's default: fp8 weights keep a 16-bit cache too
    engine: EngineProfile = field(default=None)  # type: ignore[assignment]
    profile: HardwareProfile | None = None
    attention_dp: int = 1         # attention data-parallel over the tp ranks (1: off; tp: on), see below

    def __post_init__(self) -> None:
        m, gpn = self.model, self.cluster.gpus_per_node
        if self.precision not in PRECISIONS:
            raise SpecError("precision", f"unknown serving precision {self.precision!r}",
                            f"use one of {', '.join(PRECISIONS)}")
        if self.kv_dtype not in KV_DTYPES:
            raise SpecError("kv_cache_dtype", f"unknown KV-cache dtype {self.kv_cache_dtype!r}",
                            f"use one of {', '.join(KV_DTYPES)}")
        if self.engine is None:
            raise SpecError("engine", "missing", "give an engine profile (serve.engines.get_engine)")
        if self.tp * self.pp * self.dp > self.cluster.num_gpus:
            raise PlanError("plan", f"tp*pp*dp = {self.tp * self.pp * self.dp} exceeds {self.cluster.num_gpus} GPUs",
                            "lower tp, pp or dp, or give more --num-gpus")
        if self.tp > gpn and self.tp % gpn:
            raise PlanError("plan.tp", f"{self.tp} spans nodes of {gpn} GPUs unevenly", f"use a divisor or multiple of {gpn}")
        if m.num_heads % self.tp:
            raise PlanError("plan.tp", f"{self.tp} does not divide the {m.num_heads} attention heads",
                            "choose tp dividing the heads")
        if self.attention_dp not in (1, self.tp):
            raise PlanError("plan.adp", f"adp={self.attention_dp} must be 1 (off) or tp={self.tp}",
                            "attention data parallelism runs attention data-parallel over the whole tp group")
        if self.pp > m.num_layers:
            raise PlanError("plan.pp", f"{self.pp} exceeds the {m.num_layers} layers", "use fewer stages")
        if self.ep > 1:
            if not m.is_moe:
                raise PlanError("plan.ep", f"ep={self.ep} on a dense model", "drop ep (it splits experts)")
            if self.tp % self.ep or m.moe_num_experts % self.ep:
                raise PlanError("plan.ep", f"ep={self.ep} must divide tp={self.tp} and the {m.moe_num_experts} experts",
                                "serving places expert parallelism inside the tp group: choose ep dividing both")

    # ---- sizes --------------------------------------------------------------------------------
    @property
    def kv_dtype(self) -> str:
        return self.kv_cache_dtype or "bf16"

    @property
    def replica_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        return self.replica_gpus * self.dp

    @property
    def weight_bytes_per_param(self) -> float:
        return PRECISIONS[self.precision][0]

    @property
    def gemm_dtype(self) -> str:
        return PRECISIONS[self.precision][1]

    def gemm_format(self, name: str, edge: bool = False) -> tuple[float, str]:
        """(bytes per weight, GEMM dtype) of the GEMM ``name`` (``attn.*``, ``mlp.*``, ``moe.*``) in a first
        or last layer (``edge``) or an inner one: the precision's, except the 16-bit GEMMs of an FFN-only
        recipe (attention, the router, and the edge layers)."""
        if self.precision in FFN_ONLY and (edge or name.startswith("attn.") or name == "moe.router"):
            return ACT_BYTES, "bf16"
        return PRECISIONS[self.precision]

    def edge_layers(self, moe: bool) -> int:
        """Layers of kind ``moe`` among the first and last that an FFN-only precision keeps 16-bit."""
        if self.precision not in FFN_ONLY:
            return 0
        m = self.model
        return sum(1 for i in {0, m.num_layers - 1} if m.is_moe_layer(i) == moe)

    @cached_property
    def heads_gpu(self) -> int:
        return self.model.num_heads // self.tp

    @cached_property
    def kv_heads_gpu(self) -> int:
        return max(1, math.ceil(self.model.kv_heads / self.tp))

    @cached_property
    def kv_bytes_per_token_layer(self) -> float:
        """KV-cache bytes one token adds to one layer on one GPU (attention data-parallel: a sequence's
        whole cache lives on one rank, so a GPU holds 1/tp of the replica's tokens, all heads)."""
        m, b = self.model, KV_DTYPES[self.kv_dtype]
        if m.mla:
            return (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * b / self.attention_dp
        if self.attention_dp > 1:
            return m.kv_heads * (m.qk_head_dim + m.v_head_dim) * b / self.attention_dp
        return self.kv_heads_gpu * (m.qk_head_dim + m.v_head_dim) * b

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token takes on one GPU (its stage's layers)."""
        return self.kv_bytes_per_token_layer * math.ceil(self.model.num_layers / self.pp)

    @cached_property
    def kv_alloc_bytes_per_token(self) -> float:
        """KV-cache bytes one token *occupies* on one GPU: ``kv_bytes_per_token`` unless the engine pads an MLA
        latent entry (EngineProfile.mla_cache_align_bytes: vLLM V0 on CUDA rounds the 576 values up to 256 bytes
        in the model's 16-bit dtype, then stores them in the cache dtype; the kernels read the unpadded part).

        >>> from clustertwin.catalog import load_model, cluster_for_gpu
        >>> from clustertwin.serve.engines import get_engine
        >>> s = ServeSetup(load_model("deepseek-v3"), cluster_for_gpu("h200", 8), tp=8,
        ...                engine=get_engine("vllm").with_overrides(mla_cache_align_bytes=256))
        >>> s.kv_bytes_per_token_layer, s.kv_alloc_bytes_per_token / s.model.num_layers
        (1152.0, 1280.0)
        """
        m, align = self.model, self.engine.mla_cache_align_bytes
        if not (m.mla and align):
            return self.kv_bytes_per_token
        per = align / ACT_BYTES                 # values of the model dtype per aligned unit
        values = math.ceil((m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) / per) * per
        layer = values * KV_DTYPES[self.kv_dtype] / self.attention_dp
        return layer * math.ceil(m.num_layers / self.pp)

    def gemms(self, t: float, moe: bool) -> list[tuple[str, float, float, float, float, float]]:
        """GEMMs of one layer on one GPU for ``t`` tokens: (name, batch, m, n, k, weight elements read).
        MoE expert GEMMs are one grouped GEMM over the experts the tokens touch."""
        m, tp, h = self.model, self.tp, self.model.hidden_size
        out: list[tuple[str, float, float, float, float, float]] = []
        adp = self.attention_dp
        # attention data-parallel: each rank runs all heads on its own 1/tp of the tokens (same FLOPs,
        # the whole attention weights read on every rank); else the heads split over tp
        heads, kv_heads, ta = (m.num_heads, m.kv_heads, t / adp) if adp > 1 else (self.heads_gpu, self.kv_heads_gpu, t)

        def g(name: str, n: float, k: float, rows: float = t) -> None:
            out.append((name, 1, rows, n, k, n * k))
        if m.mla:
            a = m.mla
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                g("attn.q_a", a.q_lora_rank, h, ta)
                g("attn.q_b", heads * qk, a.q_lora_rank, ta)
            else:
                g("attn.q", heads * qk, h, ta)
            g("attn.kv_a", a.kv_lora_rank + a.qk_rope_head_dim, h, ta)
            g("attn.kv_b", heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, ta)
            g("attn.o", h, heads * a.v_head_dim, ta)
        else:
            g("attn.qkv", heads * m.qk_head_dim + kv_heads * (m.qk_head_dim + m.v_head_dim), h, ta)
            g("attn.o", h, heads * m.v_head_dim, ta)
        ups = 2 if m.gated else 1
        if not moe:
            g("mlp.up", ups * m.ffn_hidden_size / tp, h)
            g("mlp.down", h, m.ffn_hidden_size / tp)
            return out
        g("moe.router", m.moe_num_experts, h)
        if m.shared_ffn:
            g("moe.shared_up", ups * m.shared_ffn / tp, h)
            g("moe.shared_down", h, m.shared_ffn / tp)
        E, k, ep = m.moe_num_experts, m.moe_top_k, self.ep
        width = m.expert_ffn * ep / tp                   # each expert split over tp/ep ranks
        touched = (E / ep) * (1.0 - (1.0 - k / E) ** t)  # experts of this GPU some token routes to
        pairs = t * k / ep                               # (token, expert) pairs this GPU computes
        per = pairs / max(touched, 1e-9)
        out.append(("moe.experts_up", touched, per, ups * width, h, touched * ups * width * h))
        out.append(("moe.experts_down", touched, per, h, width, touched * h * width))
        return out

    @cached_property
    def weight_bytes_per_gpu(self) -> float:
        """Weight bytes on the most loaded GPU of a replica (all experts resident)."""
        m = self.model
        total = 0.0
        for i in range(m.num_layers):
            moe = m.is_moe_layer(i)
            edge = i in (0, m.num_layers - 1)
            total += sum(w * self.gemm_format(name, edge)[0] for name, *_, w in self.gemms(1, moe)
                         if not name.startswith("moe.experts"))
            if moe:
                total += ((m.moe_num_experts / self.ep) * m.expert_params * self.ep / self.tp
                          * self.gemm_format("moe.experts_up", edge)[0])
        if m.mla and self.engine.mla_absorbed_weights:   # W_Q_UK and W_UV_O of every layer (EngineProfile)
            a = m.mla
            heads = m.num_heads if self.attention_dp > 1 else self.heads_gpu
            q_rank = a.q_lora_rank or m.hidden_size
            total += m.num_layers * heads * a.kv_lora_rank * (q_rank + m.hidden_size) * self.gemm_format("attn.o")[0]
        per_stage = total / self.pp
        vocab = m.vocab_size * m.hidden_size / self.tp * ACT_BYTES
        emb = vocab if self.pp > 1 or m.tied_embeddings else 2 * vocab
        return per_stage + emb

    def activation_bytes_per_gpu(self, tokens: int, seqs: int) -> float:
        """Peak activation memory of one forward pass of ``tokens`` tokens (what an engine's profiling
        run measures): the widest layer's live tensors, and the fp32 logits of ``seqs`` sampled rows.
        Assumed: input, qkv, attention output and the MLP's up-projection live at once.

        An engine that runs the routed experts through vLLM's Triton fused MoE (EngineProfile.
        fused_moe_chunk_tokens) holds, in a MoE layer, that kernel's three buffers instead of an MLP
        up-projection: (M, top-k, 2 x width), (M x top-k, width) and (M, top-k, hidden) in the activation dtype,
        M the tokens up to the chunk (vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts_impl);
        the peak is the larger of that and a dense layer's MLP."""
        m = self.model
        ffn = max(m.ffn_hidden_size, m.expert_ffn * m.moe_top_k if m.is_moe else 0)
        base = 3 * m.hidden_size + (self.heads_gpu + 2 * self.kv_heads_gpu) * m.qk_head_dim
        logits = seqs * m.vocab_size * 4.0
        chunk = self.engine.fused_moe_chunk_tokens
        if m.is_moe and chunk:
            width = m.expert_ffn * self.ep / self.tp            # an expert's slice on this GPU
            moe = min(tokens, chunk) * m.moe_top_k * (3 * width + m.hidden_size) * ACT_BYTES
            dense = tokens * 3 * m.ffn_hidden_size / self.tp * ACT_BYTES if not all(map(m.is_moe_layer, range(m.num_layers))) else 0.0
            return tokens * base * ACT_BYTES + max(moe, dense) + logits
        return tokens * (base + 3 * ffn / self.tp) * ACT_BYTES + logits


class StepPricer:
    """Prices iterations of one replica of ``setup`` (memoized by token counts).

    >>> from clustertwin.catalog import load_model, cluster_for_gpu
    >>> from clustertwin.serve.engines import get_engine
    >>> p = StepPricer(ServeSetup(load_model("llama3-8b"), cluster_for_gpu("h100-sxm", 1), engine=get_engine("vllm")))
    >>> c = p.price(decode_seqs=1, decode_context=1000)
    >>> c.memory_bound_s > c.gemm_s       # decode at batch 1: weights read, memory-bound
    True
    """

    def __init__(self, setup: ServeSetup):
        from ..calibrate.profile import profile_for
        from ..specs.framework import get_framework
        self.s = setup
        gpu = setup.cluster.gpu
        prof = setup.profile or profile_for(gpu)
        self.compute = ComputePricer(gpu, prof, get_framework("megatron"))
        self.mem_bw = self.compute.mem_bw
        self.net = NetworkPricer(setup.cluster, prof)
        gpn = setup.cluster.gpus_per_node
        self.tp_group: GroupPlacement = place_group(setup.tp, 1, gpn)
        self.ep_group: GroupPlacement = place_group(setup.ep, 1, gpn)
        self.pp_group: GroupPlacement = place_group(setup.pp, setup.tp, gpn)
        m = setup.model
        self.layers = m.num_layers
        self.moe_layers = m.num_moe_layers
        self.dense_layers = m.num_layers - self.moe_layers
        kc = kernel_counts(setup.engine.name)
        # an engine release that runs per-channel FP8 GEMMs unfused on AMD GPUs (EngineProfile.
        # rocm_fp8_channelwise_unfused): each FP8 GEMM writes fp32 and three elementwise kernels follow it
        self._unfused = (setup.engine.rocm_fp8_channelwise_unfused and gpu.vendor == "amd"
                         and setup.precision in CHANNELWISE_FP8)
        self.kernels = self._layer_kernels(kc)
        self.split_kernels = int(self.layers * kc["attn_split"])
        self._split_below = _SPLIT_FILL * gpu.sm_count / max(1, setup.kv_heads_gpu)
        self._tok: dict[int, tuple[float, float, float]] = {}
        self._cb: dict[int, int] = {}     # tokens -> compute-bound GEMM kernels of all layers and the head
        # the decode stall is measured on NVIDIA GPUs (H100; B200 in the same post); others keep the gap
        self._stall = _DECODE_STALL if gpu.vendor == "nvidia" else _GAP
        self._head: dict[int, tuple[float, float]] = {}
        self._pre: dict[tuple[int, int], tuple[float, float]] = {}
        self._proj: dict[int, float] = {}
        self.decode_attention_per_token = self._decode_attention_per_token()
        # block-FP8 dense GEMMs' least time per K step (the catalog's FP8 MLA checkpoints are DeepSeek's
        # block-scaled ones). Measured on H100; AMD GPUs run the same Triton w8a8_block_fp8_matmul (vLLM's
        # cutlass_block_fp8_supported() is False off CUDA; SGLang's DeepGEMM and sgl-kernel block GEMMs are
        # CUDA-only), and H100's time a step is taken as their floor (serve.block_fp8_k_step_s)
        block_fp8 = m.mla is not None and setup.gemm_dtype == "fp8" and setup.precision not in FFN_ONLY
        self._k_step = setup.engine.block_fp8_k_step_s if block_fp8 else 0.0
        # the routed experts of the same checkpoints, where the release runs them through the Triton fused_moe
        # kernel: at most serve.triton_block_fp8_moe_flops_per_s (EngineProfile.block_fp8_moe_flops_per_s)
        self._moe_rate = setup.engine.block_fp8_moe_flops_per_s if block_fp8 else 0.0

    def _fp8_gemms(self, moe: bool) -> int:
        """FP8 GEMMs one layer launches, each after its input's quantization kernel: every GEMM of
        ``ServeSetup.gemms`` but the 16-bit router and, with MLA, kv_b (its halves are absorbed into the
        batched GEMMs around the latent decode kernel); an FFN-only recipe quantizes the MLP's alone."""
        s = self.s
        if s.gemm_dtype != "fp8":
            return 0
        names = [g[0] for g in s.gemms(1, moe) if g[0] != "moe.router" and not (s.model.mla and g[0] == "attn.kv_b")]
        if s.precision in FFN_ONLY:
            names = [n for n in names if not n.startswith("attn.")]
        return len(names)

    def _layer_kernels(self, kc: dict[str, float]) -> int:
        """Kernels one step launches in all layers and outside them, counted in the engine's model code
        (constants serve.kernels.<engine>.*; counts an engine lacks are 0)."""
        s, m = self.s, self.s.model

        def k(name: str) -> float:
            return kc.get(name, 0.0)
        per_layer = k("dense_layer") + (k("tp_layer") if s.tp > 1 else 0)
        if m.mla:
            per_layer += k("mla_layer") + k("mla_rope") + k("mla_glue")
            if s.gemm_dtype == "fp8" and s.precision not in FFN_ONLY:   # FP8 absorbed batched GEMMs
                per_layer += k("mla_bmm_quant") if s.cluster.gpu.vendor == "nvidia" else k("mla_bmm_dequant_rocm")
        topk = s.engine.grouped_topk_kernels
        moe_extra = k("moe_layer") + ((k("grouped_topk") if topk is None else topk) if m.moe_expert_groups else 0)
        moe_extra += k("shared_expert") if m.shared_ffn else 0
        fp8 = k("fp8_per_gemm") + (k("fp8_channelwise_dequant_rocm") if self._unfused else 0)
        total = k("per_step")
        if self.dense_layers:
            total += self.dense_layers * (per_layer + fp8 * self._fp8_gemms(False))
        if self.moe_layers:
            total += self.moe_layers * (per_layer + moe_extra + fp8 * self._fp8_gemms(True))
        return int(total)

    # ---- parts ---------------------------------------------------------------------------------
    def _gemm(self, name: str, batch: float, rows: float, n: float, k: float, welems: float,
              edge: bool = False) -> tuple[float, float]:
        """(compute-bound seconds, memory-bound seconds) of one GEMM: its roofline time, filed under
        memory-bound when reading its weights and activations takes longer than its FLOPs."""
        if rows <= 0 or batch <= 0:
            return 0.0, 0.0
        b = max(1, int(math.ceil(batch)))
        r = max(1, int(math.ceil(rows)))
        flops = 2.0 * batch * rows * n * k
        wbytes, dtype = self.s.gemm_format(name, edge)
        if self.triton_block_fp8(name):
            # the block GEMM rescales its accumulator by both scale vectors after every 128-wide K step, so it
            # computes no faster than a 16-bit GEMM of the same shape: vllm#23280 (H100, M = 4096, N = 2112,
            # K = 7168) measures 403 TFLOP/s for the Triton kernel and 457 for CUTLASS against 716 for BF16 cuBLAS
            dtype = "bf16"
        nbytes = welems * wbytes + batch * rows * (n + k) * ACT_BYTES
        op = Op(name, OpKind.GEMM, Phase.FWD, flops=flops, bytes=nbytes, shape=(b, r, max(1, int(n)), max(1, int(k))),
                dtype=dtype, layer="layer")
        t = self.compute.gemm_time(op)
        # the unfused epilogue of a per-channel FP8 GEMM (fp32 output, two scale multiplies, the cast): HBM
        # passes over the output after the GEMM
        post = batch * rows * n * _UNFUSED_BYTES / self.mem_bw if self._unfused and dtype == "fp8" else 0.0
        floor = self.block_fp8_floor(name, k)
        if floor > t:     # a chain of K steps, not the HBM or the tensor cores, sets the time: streaming
            return 0.0, floor + post
        moe = self.triton_fp8_moe_floor(name, flops)
        if moe > t:       # the fused MoE kernel's own rate, below the GPU's roofline: compute-bound
            return moe, post
        if nbytes / self.mem_bw >= 0.999 * t:
            return 0.0, t + post
        return t, post

    def block_fp8_floor(self, name: str, k: float) -> float:
        """Least seconds of the block-FP8 dense GEMM ``name`` with inner dimension ``k``: its thread blocks walk
        K one 128-wide scale block at a time (serve.block_fp8_k_step_s a step, EngineProfile.block_fp8_k_step_s)
        in engines whose release runs the Triton or CUTLASS-2.x block-FP8 GEMM; 0 elsewhere, and for the
        16-bit router, kv_b (absorbed into the batched GEMMs around the latent attention) and the routed
        experts."""
        if not self.triton_block_fp8(name):
            return 0.0
        return math.ceil(k / _SCALE_BLOCK_K) * self._k_step

    def triton_fp8_moe_floor(self, name: str, flops: float) -> float:
        """Least seconds of the routed experts' grouped GEMM ``name`` of ``flops`` FLOPs where the engine release
        runs DeepSeek's block-FP8 experts through the Triton fused_moe kernel (EngineProfile.
        block_fp8_moe_flops_per_s: the kernel's measured rate, serve.triton_block_fp8_moe_flops_per_s); 0 for
        every other GEMM and elsewhere. It holds in every step: a small decode batch's weight reads take longer
        and set the time, a large one (hundreds of sequences) reaches the rate as a prefill does."""
        if not self._moe_rate or not name.startswith("moe.experts"):
            return 0.0
        return flops / self._moe_rate

    def triton_block_fp8(self, name: str) -> bool:
        """Whether the GEMM ``name`` runs as a block-FP8 dense GEMM of a release whose block GEMM is the Triton
        or CUTLASS-2.x kernel (EngineProfile.block_fp8_k_step_s set): every FP8 GEMM of the layer but the 16-bit
        router, kv_b (absorbed) and the routed experts (the fused MoE kernel: no figure at hand)."""
        return bool(self._k_step) and name not in ("moe.router", "attn.kv_b") and not name.startswith("moe.experts")

    def _elementwise_bytes(self, t: float) -> float:
        m = self.s.model
        ffn = m.ffn_hidden_size / self.s.tp
        rope = 2 * (self.s.heads_gpu + self.s.kv_heads_gpu) * m.qk_head_dim
        return t * (10 * m.hidden_size + 3 * ffn + rope) * ACT_BYTES

    def tokens_part(self, t: int) -> tuple[float, float, float]:
        """(gemm, memory-bound, communication) seconds of all layers for ``t`` tokens (no attention core)."""
        got = self._tok.get(t)
        if got is not None:
            return got
        s, m = self.s, self.s.model
        gemm = mem = comm = 0.0
        cb = 0
        de, me = s.edge_layers(False), s.edge_layers(True)   # layers an FFN-only precision keeps 16-bit
        for moe, count, edge in ((False, self.dense_layers - de, False), (False, de, True),
                                 (True, self.moe_layers - me, False), (True, me, True)):
            if not count:
                continue
            gc = mc = 0.0
            for g in s.gemms(t, moe):
                a, b = self._gemm(*g, edge=edge)
                gc, mc = gc + a, mc + b
                cb += count if a > 0 else 0
            mc += self._elementwise_bytes(t) / self.mem_bw
            msg = t * m.hidden_size * ACT_BYTES
            cc = 0.0
            if s.tp > 1:
                if s.attention_dp == 1:   # attention's output all-reduce (data-parallel attention has none)
                    cc += self.net.time("all_reduce", msg, self.tp_group)
                if not (moe and s.ep > 1):   # the MLP's (attention-DP: all-gather + reduce-scatter, same bytes)
                    cc += self.net.time("all_reduce", msg, self.tp_group)
            if moe and s.ep > 1:
                cc += 2 * self.net.time("all_to_all", msg * m.moe_top_k / s.ep, self.ep_group)
            gemm, mem, comm = gemm + gc * count, mem + mc * count, comm + cc * count
        if s.pp > 1:
            comm += (s.pp - 1) * self.net.time("send_recv", t * m.hidden_size * ACT_BYTES, self.pp_group)
        mem += t * m.hidden_size * ACT_BYTES * 2 / self.mem_bw   # embedding gather
        self._cb[t] = cb
        got = self._tok[t] = (gemm, mem, comm)
        return got

    def compute_bound_kernels(self, t: int) -> int:
        """Layer GEMM kernels (all layers) priced compute-bound for ``t`` tokens: their fill and drain are
        in the GEMM's fixed time, so a decode step's streaming stall does not apply to them. Above 64 tokens
        the count at the bucket below (the simulator prices those token counts between buckets)."""
        if t > 64:
            step = 1 << (t.bit_length() - 5)
            t = (t // step) * step
        if t not in self._cb:
            self.tokens_part(t)
        return self._cb[t]

    def head_part(self, rows: int) -> tuple[float, float]:
        """(gemm, memory-bound) seconds of the output head for ``rows`` sampled tokens (16-bit weights)."""
        got = self._head.get(rows)
        if got is None:
            m = self.s.model
            n, k = m.vocab_size / self.s.tp, m.hidden_size
            flops = 2.0 * rows * n * k
            nbytes = n * k * ACT_BYTES + rows * (n * 4 + k * ACT_BYTES)
            op = Op("head", OpKind.GEMM, Phase.FWD, flops=flops, bytes=nbytes,
                    shape=(1, max(1, rows), max(1, int(n)), k), dtype="bf16", layer="head")
            t = self.compute.gemm_time(op)
            got = self._head[rows] = (0.0, t) if nbytes / self.mem_bw >= 0.999 * t else (t, 0.0)
        return got

    def _decode_attention_per_token(self) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds per cached token a decode step reads, all layers."""
        s, m = self.s, self.s.model
        if m.mla:
            flops = 2.0 * s.heads_gpu * (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
        else:
            flops = 2.0 * s.heads_gpu * (m.qk_head_dim + m.v_head_dim)
        p = self.compute.profile
        t_f = flops / (s.cluster.gpu.peak("bf16") * p.attention_fwd_efficiency)
        t_b = s.kv_bytes_per_token_layer * self.mla_cache_reads() / self.mem_bw
        return ((t_f * self.layers, 0.0) if t_f > t_b else (0.0, t_b * self.layers))

    def prefill_attention(self, q: int, context: int) -> tuple[float, float]:
        """(compute-bound, memory-bound) seconds of the causal attention of a prefill chunk of ``q``
        tokens after ``context`` cached ones, all layers (FlashAttention pricing of the training side)."""
        key = (q, context // 64)
        got = self._pre.get(key)
        if got is None:
            s, m = self.s, self.s.model
            c = (context // 64) * 64
            dqk, dv, name = self.prefill_head_dims()
            flops = 2.0 * q * (c + (q + 1) / 2.0) * s.heads_gpu * (dqk + dv)
            nbytes = (c + q) * s.kv_bytes_per_token_layer + 2 * q * s.heads_gpu * (dqk + dv) * ACT_BYTES
            op = Op(name, OpKind.ATTENTION, Phase.FWD, flops=flops, bytes=nbytes,
                    shape=(1, s.heads_gpu, q, c + q, dqk, dv), layer="layer")
            t = self.compute.attention_time(op)
            got = (0.0, t * self.layers) if nbytes / self.mem_bw >= 0.999 * t else (t * self.layers, 0.0)
            self._pre[key] = got
        return got

    def mla_cache_reads(self) -> int:
        """Times a decode step reads each cached token of an MLA model: once, or once per program of
        ``EngineProfile.mla_decode_head_block`` query heads where the engine's kernel loads the latent cache per
        head group (the heads one GPU computes: all of them with attention data parallelism, 1/tp without)."""
        s = self.s
        blk = s.engine.mla_decode_head_block if s.model.mla else 0
        if not blk:
            return 1
        heads = s.model.num_heads if s.attention_dp > 1 else s.heads_gpu
        return max(1, math.ceil(heads / blk))

    def prefill_head_dims(self) -> tuple[int, int, str]:
        """(q.k width, value width, kernel) of a prefill's attention per head: the model's head dims under a
        FlashAttention kernel, or, where the engine prefills MLA in the absorbed form
        (EngineProfile.mla_absorbed_prefill), the latent widths kv_lora_rank + rope and kv_lora_rank under a
        FlashAttention-2-class kernel (``attn.flash2``: the profile's FA2 efficiency where it has one)."""
        m = self.s.model
        if m.mla and self.s.engine.mla_absorbed_prefill:
            return m.mla.kv_lora_rank + m.mla.qk_rope_head_dim, m.mla.kv_lora_rank, "attn.flash2.mla_absorbed"
        return m.qk_head_dim, m.v_head_dim, "attn.flash"

    def _attention_projections(self, rows: int) -> float:
        """Seconds of one attention-data-parallel rank's attention projections (all heads) for ``rows``
        tokens, all layers."""
        got = self._proj.get(rows)
        if got is None:
            t = sum(sum(self._gemm(*g)) for g in self.s.gemms(rows * self.s.attention_dp, False)
                    if g[0].startswith("attn."))
            got = self._proj[rows] = t * self.layers
        return got

    def attention_dp_excess(self, prefill, decode_seqs: int) -> float:
        """Seconds the most loaded rank of attention data parallelism adds to an iteration over the even
        split the per-GPU pricing assumes (0 without it or without prefill). A sequence and its cache live
        on one rank (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp), so a prefill chunk's
        attention, all heads, and its attention projections run on that rank alone while the others wait
        for it at the MoE's all-gather. Decode tokens are spread evenly; chunks go longest first to the
        least loaded rank (assumed: the engines dispatch new requests round-robin or to the shortest
        queue)."""
        adp = self.s.attention_dp
        if adp <= 1 or not prefill:
            return 0.0
        tok = [decode_seqs / adp] * adp
        core = [0.0] * adp
        even_core = 0.0
        for q, c in sorted(prefill, reverse=True):
            i = min(range(adp), key=tok.__getitem__)
            tok[i] += q
            pg, pm = self.prefill_attention(q, c)    # all heads of the chunk over adp ranks: 1/adp of one rank's
            core[i] += (pg + pm) * adp
            even_core += pg + pm
        even = even_core + self._attention_projections(max(1, round(sum(tok) / adp)))
        worst = max(core[i] + self._attention_projections(max(1, math.ceil(tok[i]))) for i in range(adp))
        return max(0.0, worst - even)

    def kernel_count(self, decode_seqs: int = 0, prefill: bool = False) -> int:
        """Kernels one iteration launches: the engine's per-layer and per-step counts, plus the split-KV
        combine kernel of every layer when a decode-only batch is too small to fill the SMs (engines whose
        decode attention reduces in a second kernel)."""
        split = not prefill and 0 < decode_seqs < self._split_below
        return self.kernels + (self.split_kernels if split else 0)

    def stalled_kernels(self, kernels: int, tokens: int, head_compute_bound: bool) -> int:
        """Kernels of a decode-only step of ``tokens`` tokens that pay the streaming stall: all but the
        compute-bound GEMMs (layers and head)."""
        return max(0, kernels - self.compute_bound_kernels(tokens) - int(head_compute_bound))

    def overhead(self, gpu_s: float, graph: bool, kernels: int | None = None, stalled: int = 0) -> float:
        """Kernel gaps, or the host's launches where they bound the step, plus the engine's host time.
        ``stalled`` of the kernels are streaming kernels of a decode-only step: each idles the GPU for
        serve.decode_kernel_stall_s (straggler blocks, launch, first loads) instead of the plain gap
        (NVIDIA GPUs, where it was measured). Outside a CUDA graph the host launches each kernel at the
        engine's host time per kernel (compiled or eager modules) and bounds the step where it is slower."""
        k = self.kernels if kernels is None else kernels
        gaps = k * _GAP + min(stalled, k) * (self._stall - _GAP)
        launch = gaps if graph else max(gaps, k * self.s.engine.eager_dispatch_s - gpu_s)
        return launch + self.s.engine.step_overhead_s

    # ---- one iteration -------------------------------------------------------------------------
    def price(self, prefill: tuple[tuple[int, int], ...] = (), decode_seqs: int = 0, decode_context: int = 0,
              sampled: int | None = None) -> StepCost:
        """One iteration: ``prefill`` chunks (tokens, context before them), ``decode_seqs`` decode tokens
        reading ``decode_context`` cached tokens in all, ``sampled`` rows through the head (default:
        decode seqs + prefill chunks)."""
        tokens = decode_seqs + sum(q for q, _ in prefill)
        seqs = decode_seqs + len(prefill)
        if tokens <= 0:
            return StepCost()
        rows = seqs if sampled is None else sampled
        micro = max(1, min(self.s.pp, seqs))
        g, mb, comm = self.tokens_part(-(-tokens // micro))
        hg, hm = self.head_part(max(1, -(-rows // micro)))
        dg, dm = self.decode_attention_per_token
        ag, am = dg * decode_context / micro, dm * decode_context / micro
        for q, c in prefill:
            pg, pm = self.prefill_attention(q, c)
            ag, am = ag + pg / micro, am + pm / micro
        ag += self.attention_dp_excess(prefill, decode_seqs) / micro
        gpu = g + mb + comm + hg + hm + ag + am
        graph = not prefill and seqs <= self.s.engine.cuda_graph_max_batch * self.s.attention_dp
        kernels = self.kernel_count(decode_seqs, bool(prefill))
        # a decode-only step streams weights through short dependent kernels: every kernel not priced
        # compute-bound (with its own fill/drain) pays the pipeline stall at its boundary
        stalled = 0 if prefill else self.stalled_kernels(kernels, -(-tokens // micro), hg > 0)
        return StepCost(gemm_s=g + hg, attention_s=ag, memory_bound_s=mb + hm + am, communication_s=comm,
                        overhead_s=self.overhead(gpu, graph, kernels, max(0, stalled)))

    def time(self, prefill: tuple[tuple[int, int], ...], decode_seqs: int, decode_context: int) -> float:
        return self.price(prefill, decode_seqs, decode_context).total_s


@dataclass(frozen=True)
class MemoryPlan:
    """Memory of one GPU and the KV cache it leaves (engine rules: ``EngineProfile.memory_basis``)."""

    hbm_bytes: float
    weight_bytes: float
    activation_bytes: float
    other_bytes: float
    kv_cache_bytes: float
    kv_cache_tokens: int
    block_size: int
    fits: bool
    reason: str = ""

    @property
    def used_bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes + self.other_bytes + max(0.0, self.kv_cache_bytes)

    def to_json(self) -> dict:
        return {"hbm_bytes": self.hbm_bytes, "weight_bytes": self.weight_bytes,
                "activation_bytes": self.activation_bytes, "other_bytes": self.other_bytes,
                "kv_cache_bytes": self.kv_cache_bytes, "kv_cache_tokens": self.kv_cache_tokens, "fits": self.fits}


def memory_plan(setup: ServeSetup, max_request_tokens: int = 0) -> MemoryPlan:
    """Weights, activations of the engine's profiling pass (max_num_batched_tokens), the engine's other
    memory, and the KV cache the engine's memory rule leaves; ``fits`` when one request of
    ``max_request_tokens`` tokens fits in the cache (attention data-parallel: ``kv_cache_tokens`` counts
    the replica's tokens, every rank holding its own sequences)."""
    e = setup.engine
    hbm = setup.cluster.gpu.hbm_bytes
    w = setup.weight_bytes_per_gpu
    act = setup.activation_bytes_per_gpu(e.max_num_batched_tokens, e.max_num_seqs)
    other = e.non_torch_bytes
    if e.memory_basis == "total":
        kv = e.memory_fraction * hbm - w - act - other
    elif e.memory_basis == "free":
        kv = e.memory_fraction * (hbm - w - act - other)
    else:   # static: weights + KV pool in the fraction, activations and the rest outside it
        kv = min(e.memory_fraction * hbm - w, hbm - w - act - other)
    per_token = setup.kv_alloc_bytes_per_token
    blocks = int(max(0.0, kv) // (per_token * e.block_size))
    tokens = blocks * e.block_size
    fits, reason = True, ""
    if kv <= 0:
        fits, reason = False, (f"weights {w / 1e9:.1f} GB + activations {act / 1e9:.1f} GB leave no KV cache in "
                               f"{hbm / 1e9:.0f} GB")
    elif tokens < max(1, max_request_tokens):
        fits, reason = False, f"KV cache of {tokens:,} tokens holds no request of {max_request_tokens:,} tokens"
    return MemoryPlan(hbm, w, act, other, max(0.0, kv), tokens, e.block_size, fits, reason)


def kernel_counts(engine: str) -> dict[str, float]:
    """The kernel counts of ``engine`` (``serve.kernels.<engine>.*``; an engine without its own counts
    takes vLLM's)."""
    got = group(f"serve.kernels.{engine}")
    return got if got else group("serve.kernels.vllm")


__all__ = ["PRECISIONS", "FFN_ONLY", "CHANNELWISE_FP8", "KV_DTYPES", "ServeSetup", "StepCost", "StepPricer", "MemoryPlan", "memory_plan",
           "parse_serve_plan", "kernel_counts"]
