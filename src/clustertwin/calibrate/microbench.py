"""Microbenchmarks behind ``clustertwin calibrate``: GEMM grid, SDPA forward/backward, memory-bound
kernels, fused AdamW, kernel launch overhead and (under torchrun with >= 2 GPUs) NCCL collectives.

torch is imported lazily: without it, or without a CUDA GPU, ``require_cuda`` raises a one-line
GpuError. Every timing is CUDA events around the kernel after warm-up, the median of the repeats.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

from ..errors import ClusterTwinError


class GpuError(ClusterTwinError):
    """A GPU command run where PyTorch sees no CUDA GPU."""


def require_cuda(command: str = "calibrate"):
    """torch, when it sees a CUDA GPU; else a one-line GpuError."""
    def fail() -> GpuError:
        return GpuError("gpu", "no CUDA GPU visible to PyTorch",
                        f"run {command} on a machine with an NVIDIA GPU (pip install 'clustertwin[gpu]')")
    try:
        import torch
    except ImportError:
        raise fail() from None
    if not torch.cuda.is_available():
        raise fail()
    return torch


# ---- grids --------------------------------------------------------------------------------------
def gemm_grid(quick: bool) -> list[tuple[int, int, int]]:
    sizes = [256, 1024, 4096, 16384] if quick else [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    ks = [128, 1024, 8192] if quick else [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    return [(m, n, k) for m in sizes for n in sizes for k in ks]


def attention_grid(quick: bool) -> list[dict[str, int]]:
    seqs = [512, 2048, 8192] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]
    dims = [64, 128] if quick else [64, 128, 256]
    gqa = [1, 4] if quick else [1, 4, 8]
    out = []
    for s in seqs:
        for d in dims:
            for g in gqa:
                heads = max(8, 2048 // d)  # a typical width per GPU: 2048 hidden / head dim
                batch = max(1, 16384 // s)  # ~16K tokens: enough blocks to fill the GPU
                out.append({"batch": batch, "heads": heads, "kv_heads": max(1, heads // g), "seq": s, "head_dim": d})
    return out


def memory_sizes(quick: bool) -> list[int]:
    exps = range(16, 31, 2) if quick else range(14, 32)
    return [2 ** e for e in exps]  # bytes of the input tensor


MEMORY_KERNELS = ("copy", "elementwise", "layernorm", "rmsnorm", "softmax", "cross_entropy")
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


# ---- timing -------------------------------------------------------------------------------------
def cuda_times(torch, fn: Callable[[], Any], warmup: int = 3, iters: int = 10,
               after_warmup: Callable[[], Any] | None = None,
               on_iter: Callable[[int, float], Any] | None = None) -> list[float]:
    """Seconds of each of ``iters`` calls of ``fn`` on the GPU (CUDA events), after ``warmup`` calls;
    ``after_warmup`` runs once the warm-up has synchronised, ``on_iter(i, seconds)`` after each call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if after_warmup is not None:
        after_warmup()
    times = []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        if on_iter is not None:
            on_iter(i, times[-1])
    return times


def cuda_time(torch, fn: Callable[[], Any], warmup: int = 3, iters: int = 10) -> float:
    """Median seconds of ``fn`` on the GPU (CUDA events), after ``warmup`` calls."""
    return statistics.median(cuda_times(torch, fn, warmup, iters))


def _fp8_supported(torch) -> bool:
    major, minor = torch.cuda.get_device_capability()
    return (major, minor) >= (8, 9) and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")


def bench_gemm(torch, m: int, n: int, k: int, dtype: str) -> float:
    dev = "cuda"
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
        one = torch.ones((), device=dev)
        fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        t = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        a, b = torch.randn(m, k, device=dev, dtype=t), torch.randn(k, n, device=dev, dtype=t)
        fn = lambda: torch.mm(a, b)  # noqa: E731
    iters = 5 if m * n * k > 2 ** 38 else 20
    return cuda_time(torch, fn, warmup=3, iters=iters)


def bench_attention(torch, batch: int, heads: int, kv_heads: int, seq: int, head_dim: int) -> tuple[float, float]:
    import torch.nn.functional as F
    q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    rep = heads // kv_heads

    def fwd():
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=rep > 1)
        except TypeError:  # torch < 2.5: no enable_gqa
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                  is_causal=True)
    grad = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)

    def fwd_bwd():
        out = fwd()
        out.backward(grad)
    with torch.no_grad():
        fwd_s = cuda_time(torch, fwd, 2, 5)
    total_s = cuda_time(torch, fwd_bwd, 2, 5)
    return fwd_s, total_s


def bench_memory(torch, kernel: str, nbytes: int) -> tuple[int, float]:
    """(bytes moved, seconds) of one memory-bound kernel on an input of ``nbytes`` (bf16, fp32 for copy)."""
    import torch.nn.functional as F
    bf = torch.bfloat16
    n = max(1024, nbytes // 2)
    cols = 4096 if n >= 4096 * 8 else 1024
    rows = max(1, n // cols)
    x = torch.randn(rows, cols, device="cuda", dtype=bf)
    if kernel == "copy":
        y = torch.empty_like(x)
        return 2 * x.numel() * 2, cuda_time(torch, lambda: y.copy_(x))
    if kernel == "elementwise":
        y = torch.randn_like(x)
        return 3 * x.numel() * 2, cuda_time(torch, lambda: torch.add(x, y))
    if kernel == "layernorm":
        w, b = torch.ones(cols, device="cuda", dtype=bf), torch.zeros(cols, device="cuda", dtype=bf)
        return 2 * x.numel() * 2, cuda_time(torch, lambda: F.layer_norm(x, (cols,), w, b))
    if kernel == "rmsnorm":
        w = torch.ones(cols, device="cuda", dtype=bf)
        rms = getattr(F, "rms_norm", None)
        fn = (lambda: rms(x, (cols,), w)) if rms else (lambda: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(bf) * w)  # noqa: E731,E501
        return 2 * x.numel() * 2, cuda_time(torch, fn)
    if kernel == "softmax":
        return 2 * x.numel() * 2, cuda_time(torch, lambda: torch.softmax(x, dim=-1))
    if kernel == "cross_entropy":
        tgt = torch.randint(0, cols, (rows,), device="cuda")
        return x.numel() * 2, cuda_time(torch, lambda: F.cross_entropy(x.float(), tgt))
    raise ValueError(kernel)


def bench_adamw(torch, numel: int) -> tuple[int, float]:
    """Fused AdamW over fp32 params: reads p, g, m, v and writes p, m, v (28 bytes per parameter)."""
    p = torch.nn.Parameter(torch.randn(numel, device="cuda"))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    return 28 * numel, cuda_time(torch, opt.step)


def bench_launch(torch) -> dict[str, float]:
    """Host cost to launch one tiny kernel, and the GPU's time per kernel when they queue back to back."""
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    cpu = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()

    def burst():
        for _ in range(200):
            x.add_(1)
    gpu = cuda_time(torch, burst, 2, 5) / 200
    return {"cpu_dispatch_s": cpu, "gpu_gap_s": gpu}


def bench_nccl(torch, op: str, nbytes: int) -> float:
    import torch.distributed as dist
    world = dist.get_world_size()
    n = max(world, nbytes // 2 // world * world)
    if op == "all_reduce":
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        fn = lambda: dist.all_reduce(x)  # noqa: E731
    elif op == "all_gather":
        x = torch.randn(n // world, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        fn = lambda: dist.all_gather_into_tensor(y, x)  # noqa: E731
    else:
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(n // world, device="cuda", dtype=torch.bfloat16)
        fn = lambda: dist.reduce_scatter_tensor(y, x)  # noqa: E731
    dist.barrier()
    return cuda_time(torch, fn, 3, 10)


def meta(torch) -> dict[str, str]:
    from .profile import today
    driver = ""
    try:
        import subprocess
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, IndexError, ValueError, Exception):  # noqa: BLE001 - informational only
        pass
    return {"device_name": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
            "cuda": str(torch.version.cuda), "date": today()}


# ---- the whole run ------------------------------------------------------------------------------
def run_all(quick: bool = False, quiet: bool = False, nccl: bool = True) -> dict[str, Any]:
    """Measure everything; returns raw measurements (see fit.py). Needs a CUDA GPU."""
    torch = require_cuda("calibrate")
    torch.backends.cuda.matmul.allow_tf32 = True
    dtypes = ["bf16"] + (["fp8"] if _fp8_supported(torch) else [])
    tasks: list[tuple[str, Any]] = [("gemm", (d, s)) for d in dtypes for s in gemm_grid(quick)]
    tasks += [("attention", a) for a in attention_grid(quick)]
    tasks += [("memory", (kname, b)) for kname in MEMORY_KERNELS for b in memory_sizes(quick)]
    tasks += [("adamw", 2 ** e) for e in (range(20, 29, 2) if quick else range(18, 30))]
    tasks += [("launch", None)]
    dist = _dist(torch) if nccl else None
    if dist is not None:
        tasks += [("nccl", (op, 2 ** e)) for op in NCCL_OPS for e in (range(16, 31, 2) if quick else range(12, 32))]
    raw: dict[str, Any] = {"meta": {**meta(torch), "quick": quick}, "gemm": [], "attention": [], "memory": [],
                           "launch": {}, "nccl": []}
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    rank0 = dist is None or dist.get_rank() == 0
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), disable=quiet or not rank0) as bar:
        job = bar.add_task("calibrating", total=len(tasks))
        for kind, arg in tasks:
            bar.update(job, description=f"{kind} {arg if not isinstance(arg, dict) else arg['seq']}"[:28])
            try:
                _one(torch, raw, kind, arg)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()  # a point that does not fit: skipped, the fit fills it monotonically
            bar.advance(job)
    if dist is not None:
        raw["meta"]["world"] = dist.get_world_size()
    return raw


def _one(torch, raw: dict, kind: str, arg: Any) -> None:
    if kind == "gemm":
        dtype, (m, n, k) = arg
        raw["gemm"].append({"dtype": dtype, "m": m, "n": n, "k": k, "seconds": bench_gemm(torch, m, n, k, dtype)})
    elif kind == "attention":
        fwd_s, total_s = bench_attention(torch, **arg)
        raw["attention"].append({**arg, "fwd_s": fwd_s, "fwd_bwd_s": total_s})
    elif kind == "memory":
        kname, nbytes = arg
        moved, s = bench_memory(torch, kname, nbytes)
        raw["memory"].append({"kernel": kname, "bytes": moved, "seconds": s})
    elif kind == "adamw":
        moved, s = bench_adamw(torch, arg)
        raw["memory"].append({"kernel": "adamw", "bytes": moved, "seconds": s})
    elif kind == "launch":
        raw["launch"] = bench_launch(torch)
    elif kind == "nccl":
        import torch.distributed as dist
        op, nbytes = arg
        s = bench_nccl(torch, op, nbytes)
        world = dist.get_world_size()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        raw["nccl"].append({"op": op, "world": world, "bytes": nbytes, "seconds": s, "intra_node": local == world})
    torch.cuda.empty_cache() if kind in ("attention", "adamw") else None


def _dist(torch):
    """torch.distributed when launched by torchrun with >= 2 ranks (NCCL), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    import torch.distributed as dist
    if not dist.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    return dist
