"""Which kind of work a GPU kernel is, from its name: the categories clustertwin's ops are priced in.

Patterns are case-insensitive substrings, checked in order (the first match wins), written from the
kernel names of cuBLAS/cuBLASLt (``ampere_*gemm*``, ``sm90_xmma_gemm_*``, ``nvjet_*``), CUTLASS
(``cutlass_80_tensorop_*gemm*``), FlashAttention 2/3 (``flash_fwd_kernel``, ``flash_bwd_*``), PyTorch's
memory-efficient attention (``fmha_cutlass*``), cuDNN SDPA (``cudnn_generated_fort_native_sdpa``),
PyTorch's own kernels (``at::native::*``), Apex/Transformer Engine fused kernels and NCCL
(``ncclKernel_*``, ``ncclDevKernel_*``) and DeepEP (``deep_ep::internode::dispatch``, ``combine``, ...) as they
appear in public traces.
"""
from __future__ import annotations

import re

# category -> what clustertwin prices it as (workload/ops.py OpKind), for the reports
CATEGORIES = ("gemm", "attention", "elementwise", "embedding", "optimizer", "collective", "p2p", "conv",
              "memcpy", "memset", "other")

_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # NCCL, and DeepEP's expert-parallel all-to-all kernels (deep_ep::intranode/internode::dispatch, combine,
    # notify_dispatch, cached_notify; DeepSeek's own build names them dpsk::ep::...)
    ("collective", ("nccl", "ep::internode::", "ep::intranode::", "ep::internode_ll::")),
    ("attention", ("flash_fwd", "flash_bwd", "flash::", "flash_attn", "fmha", "sdpa", "attention_kernel",
                   "efficient_attention", "mha_fwd", "mha_bwd", "flashattn", "fused_attn")),
    ("embedding", ("embedding", "index_select", "indexselect")),
    ("optimizer", ("multi_tensor_apply", "adam", "lamb_", "sgd_kernel", "fused_sgd", "adagrad")),
    ("conv", ("implicit_gemm", "conv", "fprop", "dgrad", "wgrad", "winograd", "scudnn", "nchwtonhwc", "nhwctonchw",
              "cudnn::")),
    ("gemm", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "_mma_", "wmma", "matmul", "sm90_", "sm80_", "sm100_",
              "s16816", "h16816", "s1688", "h1688", "hmma", "tensorop")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "reduce_kernel", "layer_norm", "layernorm", "rms",
                     "norm", "softmax", "rotary", "rope", "silu", "gelu", "swiglu", "dropout", "add", "mul",
                     "copy", "cat", "fill", "cast", "scatter", "gather", "index", "transpose", "permute",
                     "pool", "bias", "relu", "sigmoid", "tanh", "where", "masked", "cross_entropy", "nll",
                     "log_softmax", "triton_", "fused", "bn_", "batch_norm", "sort", "radix", "topk", "cumsum",
                     "kernel")),
)
_P2P = ("sendrecv", "_send_", "_recv_", "_send(", "_recv(")


def classify(name: str) -> str:
    """The category of a kernel named ``name`` (one of ``CATEGORIES``): from its short name first
    (``family``: template arguments such as ``fbgemm_gpu::...`` say nothing of the kernel), else the
    whole name."""
    cat = _classify(family(name))
    return cat if cat not in ("other", "elementwise") else (_classify(name) if cat == "other" else cat)


def _classify(name: str) -> str:
    n = name.lower()
    for cat, pats in _RULES:
        if any(p in n for p in pats):
            if cat == "collective" and any(p in n for p in _P2P):
                return "p2p"
            return cat
    return "other"


_KIND = (("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("allgather", "all_gather"),
         ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"), ("sendrecv", "send_recv"),
         ("broadcast", "broadcast"), ("_send", "send_recv"), ("_recv", "send_recv"), ("reduce", "reduce"),
         ("ep::inter", "all_to_all"), ("ep::intra", "all_to_all"))


def nccl_kind(name: str) -> str:
    """The collective an NCCL kernel runs, from its name (``ncclDevKernel_AllGather_RING_LL``)."""
    n = name.lower()
    for pat, kind in _KIND:
        if pat in n:
            return kind
    return "other"


_FUNCTOR = re.compile(r"(?:native::|::)((?:\(anonymous namespace\)::)?[A-Za-z_][A-Za-z0-9_]*(?:Functor|_kernel|Op)"
                      r"[A-Za-z0-9_]*)")


def family(name: str, category: str = "") -> str:
    """A short name for a kernel (template arguments and parameters dropped), to group a trace's kernels."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    base = s.split("(", 1)[0] if not s.startswith("(") else s
    head = base.split("<", 1)[0].split("::")[-1]
    if category == "collective" or category == "p2p":
        return head[:60]
    if "<" in base:
        inner = base.split("<", 1)[1]
        # cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>: the instantiated kernel names the tile
        if head in ("Kernel", "Kernel2", "device_kernel") and inner:
            return re.split(r"[<>,( ]", inner, maxsplit=1)[0].split("::")[-1][:60]
        m = _FUNCTOR.search(inner)
        if m and "elementwise" in head:
            return f"{head}<{m.group(1).replace('(anonymous namespace)::', '')}>"[:60]
    return head[:60] or name[:60]
