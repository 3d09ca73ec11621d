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
from typing import Any

import numpy as np

from ..constants import value
from ..errors import DataError
from ..profiler.kineto import GemmShape, Kernel, Trace
from ..profiler.measure import GemmSample, gemm_op, gemm_samples
from .fit import BUS_FACTOR, fit_profile
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
                raw["memory"].append(_memory_sample("elementwise", k))
            elif k.category == "memcpy" and k.bytes > 0 and "DtoD" in k.name:
                raw["memory"].append(_memory_sample("copy", k))
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


def _memory_sample(kernel: str, k: Kernel) -> dict:
    """A memory-bound kernel as a raw sample at the nearest power of two of its bytes (the bandwidth it
    reached kept): traces hold every size, a profile needs a short axis."""
    snapped = 2.0 ** round(math.log2(k.bytes))
    return {"kernel": kernel, "bytes": snapped, "seconds": k.dur * 1e-6 * snapped / k.bytes}


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
    return check_gemms_with(samples, prof.to_hardware_profile(gpu), gpu)


def calibrate_from_trace(files: list, out, gpu_name: str | None, as_json: bool) -> None:
    """``clustertwin calibrate --from-trace FILE...``: fit, write, and show how well the profile reproduces
    the traces' GEMMs (against the profile clustertwin would use without it)."""
    import json
    import sys
    from pathlib import Path

    from rich.console import Console

    from ..catalog import load_gpu
    from ..profiler.kineto import read_traces
    from .profile import profile_for, save_profile
    traces = read_traces(files)
    name = gpu_name or trace_gpu(traces[0])
    if name is None:
        raise DataError("gpu", f"cannot tell which catalog GPU the traces ran on "
                        f"({traces[0].device_name or 'no device recorded'})", "give --gpu NAME")
    gpu = load_gpu(name)
    prof = fit_traces(traces, gpu)
    path = save_profile(prof, out or Path(f"profile-{gpu.name}-trace.yaml"))
    samples = gemm_samples(traces)
    fitted = check_gemms(samples, prof, gpu) if samples and prof.gemm else None
    before = check_gemms_with(samples, profile_for(gpu), gpu) if samples else None
    beyond = beyond_unaligned_rule(samples, gpu)
    tables: dict[str, Any] = {"gemm": {d: {"samples": sum(1 for s in samples if s.shape.dtype == d),
                           "grid": [len(g["m"]), len(g["n"]), len(g["k"])]} for d, g in prof.gemm.items()},
              "memory": {k: len(v["bytes"]) for k, v in prof.memory.items()},
              "nccl": {k: {"world": v["world"], "sizes": len(v["bytes"])} for k, v in prof.nccl.items()},
              "attention": None if not prof.attention else [len(prof.attention["seq"]), len(prof.attention["head_dim"])]}
    if as_json:
        def chk(c):
            return None if c is None else {"n": c.n, "measured_s": c.measured_s, "predicted_s": c.predicted_s,
                                           "total_error": c.total_error, "median_abs_error": c.median_abs_error,
                                           "time_share_within_10pct": c.within_10pct}
        sys.stdout.write(json.dumps({"schema": 1, "profile": str(path), "gpu": gpu.name, "measured": prof.measured,
                                     "datasheet": prof.datasheet, "tables": tables, "gemm_check": chk(fitted),
                                     "gemm_check_default_profile": chk(before),
                                     "gemms_beyond_unaligned_rule": {"n": len(beyond),
                                                                     "measured_s": sum(x.seconds for x in beyond)},
                                     "traces": [t.path for t in traces]}, indent=2, default=float) + "\n")
        return
    con = Console()
    con.print(f"fitted {', '.join(prof.measured)} from {len(traces)} trace(s) "
              f"({sum(len(t.steps) for t in traces)} steps); kept from the datasheet: {', '.join(prof.datasheet) or '-'}")
    for d, g in tables["gemm"].items():
        con.print(f"  gemm.{d}: {g['samples']} GEMMs on a {'x'.join(map(str, g['grid']))} (M, N, K) grid")
    for k, v in tables["nccl"].items():
        con.print(f"  nccl.{k}: {v['sizes']} message sizes over {v['world']} ranks")
    for k, n in tables["memory"].items():
        con.print(f"  memory.{k}: {n} sizes")
    if fitted is not None and before is not None:
        con.print(f"the traces' GEMMs, {_ms(fitted.measured_s)} ms measured: the fitted profile prices them at "
                  f"{_ms(fitted.predicted_s)} ms ({fitted.total_error * 100:+.1f}%; median per GEMM "
                  f"{fitted.median_abs_error * 100:.0f}%), the {profile_for(gpu).name} profile at "
                  f"{_ms(before.predicted_s)} ms ({before.total_error * 100:+.1f}%)")
    if beyond:
        con.print(f"{len(beyond)} GEMMs ({_ms(sum(x.seconds for x in beyond))} ms) ran faster than clustertwin's "
                  f"unaligned-GEMM rule allows (x{_UNALIGNED_EFF:g} for leading dimensions not in multiples of "
                  f"{_ALIGN_BYTES:g} bytes): they are priced slower than measured")
    con.print(f"wrote {path} (use it with `clustertwin predict --profile {path} --gpu {gpu.name}`)")


def trace_gpu(trace: Trace) -> str | None:
    """The catalog GPU a trace ran on, from its device name (and memory: an "A100" of about 40 GB, such as
    the A100-PG509-200, is the 40 GB model); None when the trace does not tell."""
    from .measure import guess_gpu
    name = guess_gpu(trace.device_name) if trace.device_name else None
    if name == "a100-80gb" and 0 < trace.device_memory_bytes < 60e9:
        return "a100-40gb"
    return name


def beyond_unaligned_rule(samples: list[GemmSample], gpu) -> list[GemmSample]:
    """GEMMs that ran faster than clustertwin's unaligned-GEMM rule allows (their time, divided by the
    unaligned factor, beats the datasheet peak): the table cannot hold them, they are priced slow."""
    out = []
    for s in samples:
        if not gemm_is_aligned(s.shape) and s.shape.flops / s.seconds / _UNALIGNED_EFF > gpu.peak(s.shape.dtype):
            out.append(s)
    return out


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f}"


def check_gemms_with(samples: list[GemmSample], hw, gpu) -> GemmCheck:
    """``check_gemms`` with a HardwareProfile (the one clustertwin uses without a fitted profile)."""
    from ..cost.compute import ComputePricer
    from ..specs.framework import get_framework
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
