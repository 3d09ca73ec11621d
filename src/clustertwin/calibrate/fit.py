"""Turn raw microbenchmark timings into a profile's tables.

Raw measurements (what ``microbench.run_all`` returns and ``calibrate --raw`` saves) are a dict:

- ``meta``: device_name, driver, torch, cuda, date
- ``gemm``: [{dtype, m, n, k, seconds}]                         FLOPs = 2·m·n·k
- ``attention``: [{batch, heads, kv_heads, seq, head_dim, fwd_s, fwd_bwd_s}]  causal SDPA; FLOPs as
  clustertwin's attention ops count them: forward 2·b·h·s·(s/2)·2d, backward 2.5× forward
- ``memory``: [{kernel, bytes, seconds}]                        bytes read + written
- ``launch``: {cpu_dispatch_s, gpu_gap_s}
- ``nccl``: [{op, world, bytes, seconds, intra_node}]           bus bandwidth = algbw × (2(n-1)/n for
  all-reduce, (n-1)/n for all-gather and reduce-scatter), as nccl-tests reports it

Repeated points take the median; values are capped at the datasheet peak and made monotone
non-decreasing along every axis (a cumulative max), the same cleanup the interpolator applies.
"""
from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

import numpy as np

from ..errors import DataError
from .profile import MeasuredProfile, today

BUS_FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> tuple[float, float]:
    """Forward and backward FLOPs of causal attention, as ``workload/transformer.py`` counts them."""
    fwd = 2.0 * batch * seq * heads * (seq / 2.0) * (2 * head_dim)
    return fwd, 2.5 * fwd


def _monotone(v: np.ndarray) -> np.ndarray:
    for d in range(v.ndim):
        v = np.maximum.accumulate(v, axis=d)
    return v


def _grid(points: dict[tuple, list[float]], ndim: int) -> tuple[list[list[float]], np.ndarray]:
    axes = [sorted({p[d] for p in points}) for d in range(ndim)]
    v = np.zeros([len(a) for a in axes])
    for p, vals in points.items():
        v[tuple(axes[d].index(p[d]) for d in range(ndim))] = median(vals)
    return [[float(x) for x in a] for a in axes], _monotone(v)


def _positive(rec: dict, key: str, what: str) -> float:
    try:
        v = float(rec[key])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"raw.{what}.{key}", "missing or not a number", "re-run calibrate") from None
    if not v > 0:
        raise DataError(f"raw.{what}.{key}", f"{v!r} is not positive", "re-run calibrate")
    return v


def fit_profile(raw: dict[str, Any], gpu, source: str = "", synthetic: bool = False) -> MeasuredProfile:
    """A MeasuredProfile for catalog GPU ``gpu`` (a GPUSpec) from raw measurements."""
    meta = raw.get("meta") or {}
    prof = MeasuredProfile(gpu=gpu.name, device_name=str(meta.get("device_name", "")),
                           date=str(meta.get("date") or today()), driver=str(meta.get("driver", "")),
                           torch=str(meta.get("torch", "")), cuda=str(meta.get("cuda", "")), synthetic=synthetic,
                           source=source, hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s)
    # GEMM: achieved TFLOP/s per dtype over (M, N, K)
    by_dtype: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in raw.get("gemm") or []:
        m, n, k = (int(_positive(r, x, "gemm")) for x in ("m", "n", "k"))
        by_dtype[str(r.get("dtype", "bf16"))][(m, n, k)].append(2.0 * m * n * k / _positive(r, "seconds", "gemm") / 1e12)
    for dtype, pts in sorted(by_dtype.items()):
        peak = gpu.peak(dtype)
        prof.peak_flops[dtype] = peak
        (mx, nx, kx), v = _grid(pts, 3)
        prof.gemm[dtype] = {"m": mx, "n": nx, "k": kx, "tflops": np.minimum(v, peak / 1e12).round(3).tolist()}
        prof.measured.append(f"gemm.{dtype}")
    # attention: forward and backward TFLOP/s over (key length, head dim)
    fwd_pts: dict[tuple, list[float]] = defaultdict(list)
    bwd_pts: dict[tuple, list[float]] = defaultdict(list)
    for r in raw.get("attention") or []:
        b, h, s, d = (int(_positive(r, x, "attention")) for x in ("batch", "heads", "seq", "head_dim"))
        ff, fb = attention_flops(b, h, s, d)
        fwd_s, total_s = _positive(r, "fwd_s", "attention"), _positive(r, "fwd_bwd_s", "attention")
        fwd_pts[(s, d)].append(ff / fwd_s / 1e12)
        bwd_pts[(s, d)].append(fb / max(total_s - fwd_s, 1e-9) / 1e12)
    if fwd_pts:
        peak = gpu.peak("bf16")
        prof.peak_flops.setdefault("bf16", peak)
        (sx, dx), vf = _grid(fwd_pts, 2)
        _, vb = _grid(bwd_pts, 2)
        cap = peak / 1e12
        prof.attention = {"seq": sx, "head_dim": dx, "fwd_tflops": np.minimum(vf, cap).round(3).tolist(),
                          "bwd_tflops": np.minimum(vb, cap).round(3).tolist()}
        prof.measured.append("attention")
    # memory-bound kernels: achieved GB/s against bytes moved
    mem: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in raw.get("memory") or []:
        nbytes = int(_positive(r, "bytes", "memory"))
        mem[str(r.get("kernel", "copy"))][(nbytes,)].append(nbytes / _positive(r, "seconds", "memory") / 1e9)
    for kernel, pts in sorted(mem.items()):
        (bx,), v = _grid(pts, 1)
        cap = gpu.hbm_bandwidth_bytes_per_s / 1e9
        prof.memory[kernel] = {"bytes": bx, "gbps": np.minimum(v, cap).round(2).tolist()}
        prof.measured.append(f"memory.{kernel}")
    launch = raw.get("launch") or {}
    for key in ("cpu_dispatch_s", "gpu_gap_s"):
        if launch.get(key):
            prof.launch_overhead_s[key.removesuffix("_s")] = float(launch[key])
    if prof.launch_overhead_s:
        prof.measured.append("launch")
    # NCCL: bus bandwidth against message size
    coll: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
    worlds: dict[str, tuple[int, bool]] = {}
    for r in raw.get("nccl") or []:
        op, world = str(r["op"]), int(_positive(r, "world", "nccl"))
        if op not in BUS_FACTOR:
            raise DataError("raw.nccl.op", f"unknown collective {op!r}", f"use one of {', '.join(BUS_FACTOR)}")
        nbytes = int(_positive(r, "bytes", "nccl"))
        coll[op][(nbytes,)].append(nbytes / _positive(r, "seconds", "nccl") * BUS_FACTOR[op](world) / 1e9)
        worlds[op] = (world, bool(r.get("intra_node", True)))
    for op, pts in sorted(coll.items()):
        (bx,), v = _grid(pts, 1)
        prof.nccl[op] = {"world": worlds[op][0], "bytes": bx, "busbw_gbps": v.round(2).tolist(),
                         "intra_node": worlds[op][1]}
        prof.measured.append(f"nccl.{op}")
    prof.datasheet = [e for e in ("attention", "memory", "launch", "nccl", "nic")
                      if not any(x == e or x.startswith(e + ".") for x in prof.measured)]
    if not prof.gemm:
        prof.datasheet.insert(0, "gemm")
    return prof
