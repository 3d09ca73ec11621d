"""``clustertwin calibrate --from-trace``: a measured hardware profile fitted to the kernels of real
profiler traces instead of microbenchmarks. It writes the same file ``calibrate`` writes on a GPU
(``calibrate/profile.py``), so ``predict --profile`` reads it unchanged.

What each table is fitted from (the kernels of every ``ProfilerStep``; ``profiler/kineto.py`` reads them):

- ``gemm.<dtype>``: GEMM kernels whose launching op recorded its shapes (``record_shapes=True``):
  achieved TFLOP/s = 2·batch·m·n·k / (the op's kernels' summed time). A GEMM whose leading dimensions are
  not 16-byte multiples is stored divided by clustertwin's unaligned-GEMM factor
  (``gemm.unaligned_efficiency``), because pricing multiplies it back. Shapes are put on a grid: an
  axis keeps its distinct sizes when there are at most ``MAX_AXIS`` of them, else sizes snap to powers
  of two (the geometric mean of the shapes snapped together). The table must be monotone
  (``GridTable``): each cell is the geometric mean of the running maximum from the small end and the
  running minimum from the large end, both monotone, so cells between measurements are filled and a
  measured cell keeps its value unless its neighbours disagree with it.
- ``attention``: SDPA/flash kernels under ``aten::_scaled_dot_product_*`` ops with shapes, FLOPs as
  clustertwin counts them (``calibrate.fit.attention_flops``): forward and backward by (key length,
  head dim).
- ``memory.elementwise``: PyTorch elementwise kernels, bytes read + written estimated from the launching
  op's input shapes and types; ``memory.copy``: device-to-device copies (read + write).
- ``nccl.<collective>``: NCCL kernels with message sizes (PyTorch >= 2.0 records them): bus bandwidth by
  message size for the most common group size. A collective kernel's time includes waiting for the
  slowest peer, so this is what the job saw, not the link's best.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Iterable

import numpy as np

from ..constants import value
from ..errors import DataError
from ..profiler.kineto import GemmShape, Kernel, Trace
from ..profiler.measure import GemmSample, gemm_op, gemm_samples
from .fit import BUS_FACTOR, attention_flops, fit_profile
from .profile import MeasuredProfile, today

MAX_AXIS = 16          # distinct sizes an axis keeps before snapping to a log grid (the YAML stays small)
STEPS_PER_OCTAVE = 1   # that grid: powers of two (finer grids fit real traces no better: see docs/profiler-traces.md)
_ALIGN_BYTES = value("gemm.alignment_bytes")
_UNALIGNED_EFF = value("gemm.unaligned_efficiency")
_ELEM = {"fp8": 1, "fp4": 1, "fp32": 4, "tf32": 4}


def gemm_is_aligned(g: GemmShape) -> bool:
    """As ``cost.compute.gemm_aligned`` judges a forward GEMM: n and k in multiples of 16 bytes."""
    step = max(1, int(_ALIGN_BYTES) // _ELEM.get(g.dtype, 2))
    return g.n % step == 0 and g.k % step == 0


def _axis(values: list[int]) -> list[float]:
    vals = sorted(set(values))
    if len(vals) <= MAX_AXIS:
        return [float(v) for v in vals]
    q = STEPS_PER_OCTAVE
    lo, hi = math.floor(math.log2(vals[0]) * q), math.ceil(math.log2(vals[-1]) * q)
    return [float(round(2 ** (e / q))) for e in range(lo, hi + 1) if e == lo or round(2 ** (e / q)) > round(2 ** ((e - 1) / q))]


def _snap(x: int, axis: list[float]) -> int:
    lx = math.log(x)
    return min(range(len(axis)), key=lambda i: abs(math.log(axis[i]) - lx))


def _monotone_table(cells: dict[tuple[int, int, int], float], shape: tuple[int, ...]) -> np.ndarray:
    """A table monotone along every axis through the measured cells: the geometric mean of the smallest
    monotone table above them (running max from the small end) and the largest one below them
    (running min from the large end), both monotone, so the mean is too."""
    v = np.full(shape, np.nan)
    for idx, x in cells.items():
        v[idx] = x
    up = np.where(np.isnan(v), 0.0, v)
    down = np.where(np.isnan(v), np.inf, v)
    for d in range(v.ndim):
        up = np.maximum.accumulate(up, axis=d)
        down = np.flip(np.minimum.accumulate(np.flip(down, axis=d), axis=d), axis=d)
    up = np.where(up > 0, up, down)
    down = np.where(np.isfinite(down), down, up)
    v = np.sqrt(up * down)
    # cells neither above nor below any measurement: the median measurement, then made monotone
    v = np.where(np.isfinite(v) & (v > 0), v, float(np.median(list(cells.values()))))
    for d in range(v.ndim):
        v = np.maximum.accumulate(v, axis=d)
    return v


FIT_ROUNDS = 12   # rounds of correcting the measured cells for what interpolation and monotonicity do to them


def gemm_table(samples: list[GemmSample], peak_flops: float) -> dict[str, list]:
    """An (M, N, K) -> achieved TFLOP/s table in the profile's format from GEMM samples of one dtype.

    The table is priced the way ``predict`` prices a GEMM (multilinear in log sizes, times the
    unaligned factor where it applies), and the measured cells are corrected a few rounds so that
    the samples of each cell, priced through the table, add up to their measured time."""
    from .profile import GridTable
    ax = [_axis([s.shape.batch * s.shape.m for s in samples]), _axis([s.shape.n for s in samples]),
          _axis([s.shape.k for s in samples])]
    cap = peak_flops / 1e12
    shape = tuple(len(a) for a in ax)
    logs: dict[tuple[int, int, int], list[float]] = defaultdict(list)
    where = []
    for s in samples:
        g = s.shape
        factor = 1.0 if gemm_is_aligned(g) else _UNALIGNED_EFF
        idx = (_snap(g.batch * g.m, ax[0]), _snap(g.n, ax[1]), _snap(g.k, ax[2]))
        logs[idx].append(math.log(min(g.flops / s.seconds / 1e12 / factor, cap)))
        where.append((idx, g, factor, s.seconds))
    cells = {idx: math.exp(sum(x) / len(x)) for idx, x in logs.items()}
    v = _monotone_table(cells, shape)
    for _ in range(FIT_ROUNDS):
        table = GridTable(ax, v / cap)
        meas: dict[tuple, float] = defaultdict(float)
        pred: dict[tuple, float] = defaultdict(float)
        for idx, g, factor, secs in where:
            meas[idx] += secs
            pred[idx] += g.flops / (peak_flops * table(g.batch * g.m, g.n, g.k) * factor)
        for idx in cells:
            cells[idx] = min(cap, cells[idx] * min(2.0, max(0.5, pred[idx] / meas[idx])))
        v = _monotone_table(cells, shape)
    return {"m": ax[0], "n": ax[1], "k": ax[2], "tflops": np.round(v, 4).tolist()}


def fit_traces(traces: list[Trace], gpu, source: str = "") -> MeasuredProfile:
    """A MeasuredProfile for catalog GPU ``gpu`` from the kernels of ``traces``."""
    raw: dict = {"meta": {"device_name": traces[0].device_name, "date": today()}, "attention": [], "memory": [],
                 "nccl": []}
    # attention: forward and backward ops of one shape, paired by shape (their kernels summed per op)
    att: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: {"fwd": [], "bwd": []})
    for t in traces:
        per_op: dict[int, list[Kernel]] = defaultdict(list)
        for k in t.kernels:
            if k.step < 0 or k.dur <= 0:
                continue
            if k.category == "attention" and k.attention is not None:
                per_op[k.op_id].append(k)
            elif k.category == "elementwise" and k.bytes > 0 and "elementwise" in k.family:
                raw["memory"].append({"kernel": "elementwise", "bytes": k.bytes, "seconds": k.dur * 1e-6})
            elif k.category == "memcpy" and k.bytes > 0 and "DtoD" in k.name:
                raw["memory"].append({"kernel": "copy", "bytes": k.bytes, "seconds": k.dur * 1e-6})
            elif (k.category == "collective" and k.collective in BUS_FACTOR and k.comm_bytes > 0
                  and k.group_size > 1):
                raw["nccl"].append({"op": k.collective, "world": k.group_size, "bytes": k.comm_bytes,
                                    "seconds": k.dur * 1e-6, "intra_node": k.group_size <= gpu_node_size(gpu)})
        for ks in per_op.values():
            a = ks[0].attention
            assert a is not None
            att[(a.batch, a.heads, a.seq_kv, a.head_dim)]["bwd" if a.bwd else "fwd"].append(sum(k.dur for k in ks) * 1e-6)
    for (b, h, s, d), tt in att.items():
        if tt["fwd"] and tt["bwd"]:
            f = median(tt["fwd"])
            raw["attention"].append({"batch": b, "heads": h, "kv_heads": h, "seq": s, "head_dim": d,
                                     "fwd_s": f, "fwd_bwd_s": f + median(tt["bwd"])})
    # one group size per collective (the profile holds one): the most common
    for op in {r["op"] for r in raw["nccl"]}:
        world = Counter(r["world"] for r in raw["nccl"] if r["op"] == op).most_common(1)[0][0]
        raw["nccl"] = [r for r in raw["nccl"] if r["op"] != op or r["world"] == world]
    # memory-bound samples below 1 MiB measure launch latency, not bandwidth: keep them, the grid is monotone
    names = ", ".join(sorted({t.path.rsplit("/", 1)[-1] for t in traces}))
    prof = fit_profile(raw, gpu, source=source or f"clustertwin calibrate --from-trace {names}")
    samples = gemm_samples(traces)
    by_dtype: dict[str, list[GemmSample]] = defaultdict(list)
    for s in samples:
        by_dtype[s.shape.dtype].append(s)
    for dtype, ss in sorted(by_dtype.items()):
        peak = gpu.peak(dtype)
        prof.peak_flops[dtype] = peak
        prof.gemm[dtype] = gemm_table(ss, peak)
        prof.measured.append(f"gemm.{dtype}")
    if "gemm" in prof.datasheet and prof.gemm:
        prof.datasheet.remove("gemm")
    if not prof.measured:
        raise DataError("from-trace", "no kernel in the traces could be fitted (no GEMM with shapes, no attention "
                        "with shapes, no sized elementwise kernel or collective)",
                        "profile with record_shapes=True (and PyTorch >= 2.0 for NCCL message sizes)")
    prof.device_name = traces[0].device_name
    return prof


def gpu_node_size(gpu) -> int:
    """GPUs on one NVLink domain, to call a traced group intra-node: the traces do not say where their
    ranks sit. Assumed: the common 8-GPU HGX/DGX server (the catalog's default nodes of NVIDIA GPUs)."""
    return 8


@dataclass(frozen=True)
class GemmCheck:
    n: int
    measured_s: float
    predicted_s: float
    median_abs_error: float     # per GEMM op, |predicted/measured - 1|
    within_10pct: float         # share of the measured GEMM time whose op is within 10%

    @property
    def total_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def check_gemms(samples: list[GemmSample], prof: MeasuredProfile, gpu) -> GemmCheck:
    """Price each measured GEMM with the fitted profile (as ``predict`` prices a GEMM op) and compare."""
    from ..cost.compute import ComputePricer
    from ..specs.framework import get_framework
    hw = prof.to_hardware_profile(gpu)
    pricer = ComputePricer(gpu, hw, get_framework("pytorch-eager"))
    errs, meas, pred, good = [], 0.0, 0.0, 0.0
    for s in samples:
        p = pricer.gemm_time(gemm_op(s.shape))
        meas += s.seconds
        pred += p
        e = abs(p / s.seconds - 1.0)
        errs.append(e)
        good += s.seconds if e <= 0.10 else 0.0
    return GemmCheck(len(samples), meas, pred, float(median(errs)) if errs else 0.0, good / meas if meas else 0.0)
