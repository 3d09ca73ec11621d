"""Measured hardware profiles: the file format, its validation, and monotone interpolation.

A profile file (YAML or JSON) holds what ``clustertwin calibrate`` measured on one GPU:

.. code-block:: yaml

    schema: clustertwin-profile
    version: 1
    gpu: h100-sxm                       # catalog name the profile is for
    device_name: NVIDIA H100 80GB HBM3  # what the driver reports
    date: 2025-01-31
    driver: "550.54.15"
    torch: "2.5.1"
    cuda: "12.4"
    synthetic: false                    # true only for test fixtures: never a shipped profile
    measured: [gemm.bf16, attention, memory.copy, launch, nccl.all_reduce]
    datasheet: [nic]                    # entries still taken from cost/profile.py's defaults
    peak_flops: {bf16: 9.89e14}         # datasheet peaks the efficiencies below are relative to
    hbm_bandwidth_bytes_per_s: 3.35e12
    gemm:                               # achieved TFLOP/s over an (M, N, K) grid, per dtype
      bf16: {m: [...], n: [...], k: [...], tflops: [[[...]]]}
    attention:                          # causal SDPA, FLOPs counted as clustertwin's attention ops
      seq: [...]
      head_dim: [...]
      fwd_tflops: [[...]]               # [seq][head_dim]
      bwd_tflops: [[...]]
    memory:                             # achieved GB/s (bytes read + written) against bytes moved
      copy: {bytes: [...], gbps: [...]}
    launch_overhead_s: {cpu_dispatch: 5.0e-6, gpu_gap: 1.5e-6}
    nccl:                               # bus bandwidth against message size
      all_reduce: {world: 8, bytes: [...], busbw_gbps: [...]}
    fitted:                             # version 2: scalars fitted to measured runs (calibrate --from-runs)
      method: robust least squares on log step time (soft-L1)
      runs: [runs.csv]                  # the files fitted
      n_rows: 51
      architecture: hopper
      hardware: {gemm_efficiency.bf16: 0.72, attention_fwd_efficiency: 0.70, ...}   # HardwareProfile fields
      framework: {megatron: {cpu_dispatch_s: 4.0e-6}}                             # FrameworkProfile fields
      parameters: [{name, value, default, bounds, sd, at_bound}, ...]             # the fit's report
      error: {in_sample_mape: 0.05, cv_mape: 0.08, cv: leave-one-source-out}

Version 1 files (no ``fitted``) are still read. A profile holding only ``fitted`` scalars (no measured
tables) applies to any GPU of the architecture it was fitted on; one with tables only to its GPU.

Interpolation (``GridTable``): values are first made monotone non-decreasing along every axis
(a cumulative max), then interpolated multilinearly in log-space of the sizes. Multilinear
interpolation of data monotone along each axis is monotone in each coordinate, so a bigger GEMM
never gets a lower efficiency. Outside the grid: above the largest size the edge value holds
(never above the measured asymptote); below the smallest size the efficiency falls in proportion
to the size (the kernel takes no less time than at the edge), never below ``FLOOR``.
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..cost.profile import HardwareProfile, default_profile
from ..errors import DataError
from ..specs.hardware import GPUSpec

SCHEMA = "clustertwin-profile"
SCHEMA_VERSION = 2
READ_VERSIONS = (1, 2)  # version 2 added ``fitted``
FLOOR = 0.01          # the lowest efficiency a table ever returns
CEILING = 1.0         # no kernel beats the datasheet peak
_TOLERANCE = 1.05     # a measured value this far above peak is an error in the file, not a fast GPU
PROFILES_DIR = Path(__file__).resolve().parent.parent / "catalog" / "profiles"


def link_busbw(measured_busbw: float, world: int, gpu, memory_efficiency: float, arch: str) -> float:
    """The links' bus bandwidth behind a measured ring all-reduce's: nccl-tests' figure includes the
    ring's one local copy per loop (the rank's chunk read and written in memory while the links wait,
    constants nccl.ring_local_copy_bytes_per_byte, priced by cost.network), so the link's share is
    what is left once that copy's time is taken out: time/S = 2(n-1)/n / link + c / (n * hbm), so
    1/link = 1/busbw - c / (2 (n-1) hbm). Hopper and later nodes reduce in the switch (NVLS), no ring
    copy: the figure is the link's. Unknown world (0 or 1): the figure as measured."""
    from ..constants import value
    if world <= 1 or arch in ("hopper", "blackwell"):
        return measured_busbw
    copy = value("nccl.ring_local_copy_bytes_per_byte") / (2 * (world - 1) * gpu.hbm_bandwidth_bytes_per_s
                                                          * memory_efficiency)
    inv = 1.0 / measured_busbw - copy
    return 1.0 / inv if inv > 0 else measured_busbw


class GridTable:
    """Efficiencies on a grid (one axis per dimension), monotone and bounded. Callable with scalars."""

    def __init__(self, axes: list[list[float]], values: Any, floor: float = FLOOR, ceiling: float = CEILING):
        self.axes = [np.asarray(a, dtype=float) for a in axes]
        v = np.asarray(values, dtype=float)
        v = np.where(np.isfinite(v), v, 0.0)
        for d in range(v.ndim):  # monotone cleanup: cumulative max along every axis
            v = np.maximum.accumulate(v, axis=d)
        self.asymptote = float(min(ceiling, v.max())) if v.size else floor
        self.floor = min(floor, self.asymptote)
        self.values = np.clip(v, self.floor, self.asymptote)
        self._log_axes = [np.log(a) for a in self.axes]

    def __call__(self, *coords: float) -> float:
        weights: list[tuple[int, int, float]] = []
        scale = 1.0
        for x, ax, lax in zip(coords, self.axes, self._log_axes):
            x = float(x)
            if x < ax[0]:  # below the grid: no faster than the smallest measured size
                scale *= max(x, 1e-12) / ax[0]
                x = ax[0]
            x = min(x, ax[-1])
            if len(ax) == 1:
                weights.append((0, 0, 0.0))
                continue
            lx = math.log(x)
            i = int(np.searchsorted(lax, lx, side="right")) - 1
            i = min(max(i, 0), len(ax) - 2)
            t = (lx - lax[i]) / (lax[i + 1] - lax[i])
            weights.append((i, i + 1, min(1.0, max(0.0, t))))
        value = 0.0
        n = len(weights)
        for corner in range(1 << n):
            w, idx = 1.0, []
            for d, (lo, hi, t) in enumerate(weights):
                if corner >> d & 1:
                    w *= t
                    idx.append(hi)
                else:
                    w *= 1.0 - t
                    idx.append(lo)
            if w:
                value += w * float(self.values[tuple(idx)])
        return min(self.asymptote, max(self.floor, value * scale))

    def vectorized(self, x: Any) -> Any:
        """One-axis tables on numpy arrays (the search evaluates many plans at once)."""
        if isinstance(x, np.ndarray):
            return np.vectorize(lambda v: self(v), otypes=[float])(x)
        return self(x)


@dataclass
class MeasuredTables:
    """What pricing reads from a measured profile (efficiencies relative to the datasheet)."""
    gemm: dict[str, GridTable] = field(default_factory=dict)               # dtype -> (M, N, K)
    attention_fwd: GridTable | None = None                                  # (seq, head_dim)
    attention_bwd: GridTable | None = None
    memory: dict[str, GridTable] = field(default_factory=dict)             # kernel -> (bytes,)

    def has_gemm(self, dtype: str) -> bool:
        return dtype in self.gemm

    def gemm_efficiency(self, dtype: str, m: float, n: float, k: float) -> float:
        return self.gemm[dtype](m, n, k)

    def attention_efficiency(self, bwd: bool, seq: float, head_dim: float) -> float | None:
        t = self.attention_bwd if bwd else self.attention_fwd
        return None if t is None else t(seq, head_dim)

    def memory_table(self, kernel: str) -> GridTable | None:
        for name in (kernel, "elementwise", "copy"):
            if name in self.memory:
                return self.memory[name]
        return None

    @property
    def hbm_efficiency(self) -> float | None:
        t = self.memory_table("copy")
        return None if t is None else t.asymptote


@dataclass
class MeasuredProfile:
    """A profile file, validated. ``to_hardware_profile`` makes what ``predict`` uses."""
    gpu: str
    device_name: str = ""
    date: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    synthetic: bool = False
    measured: list[str] = field(default_factory=list)
    datasheet: list[str] = field(default_factory=list)
    peak_flops: dict[str, float] = field(default_factory=dict)
    hbm_bandwidth_bytes_per_s: float = 0.0
    gemm: dict[str, dict[str, list]] = field(default_factory=dict)
    attention: dict[str, list] | None = None
    memory: dict[str, dict[str, list]] = field(default_factory=dict)
    launch_overhead_s: dict[str, float] = field(default_factory=dict)
    nccl: dict[str, dict[str, Any]] = field(default_factory=dict)
    fitted: dict[str, Any] | None = None    # calibrate --from-runs: scalars fitted to measured runs
    source: str = ""
    path: str = ""

    @property
    def has_tables(self) -> bool:
        return bool(self.gemm or self.attention or self.memory or self.nccl)

    # ---- derived tables --------------------------------------------------------------------
    def tables(self) -> MeasuredTables:
        t = MeasuredTables()
        for dtype, g in self.gemm.items():
            peak = self.peak_flops[dtype]
            eff = np.asarray(g["tflops"], dtype=float) * 1e12 / peak
            t.gemm[dtype] = GridTable([g["m"], g["n"], g["k"]], eff)
        if self.attention:
            a, peak = self.attention, self.peak_flops["bf16"]
            t.attention_fwd = GridTable([a["seq"], a["head_dim"]], np.asarray(a["fwd_tflops"], float) * 1e12 / peak)
            t.attention_bwd = GridTable([a["seq"], a["head_dim"]], np.asarray(a["bwd_tflops"], float) * 1e12 / peak)
        for kernel, m in self.memory.items():
            eff = np.asarray(m["gbps"], dtype=float) * 1e9 / self.hbm_bandwidth_bytes_per_s
            t.memory[kernel] = GridTable([m["bytes"]], eff)
        return t

    def nccl_busbw(self, op: str = "all_reduce") -> float | None:
        """The largest measured bus bandwidth of ``op`` (bytes/s), or None."""
        e = self.nccl.get(op)
        return max(e["busbw_gbps"]) * 1e9 if e and e.get("busbw_gbps") else None

    def to_hardware_profile(self, gpu=None):
        """A ``HardwareProfile``: the architecture defaults, with the measured entries replacing them."""
        from dataclasses import replace

        from ..cost.profile import ARCH_PROFILES, architecture_of
        if gpu is None:
            from ..catalog import load_gpu
            gpu = load_gpu(self.gpu)
        check_gpu_matches(self, gpu)
        base = ARCH_PROFILES[architecture_of(gpu)]
        tables = self.tables()
        updates: dict[str, Any] = {"tables": tables, "name": f"measured:{self.gpu}",
                                   "source": self.source or f"measured profile {self.path or self.gpu} ({self.date})",
                                   "measured": tuple(self.measured)}
        if tables.hbm_efficiency is not None:
            updates["memory_efficiency"] = tables.hbm_efficiency
        busbw = self.nccl_busbw("all_reduce")
        if busbw is not None and self.nccl["all_reduce"].get("intra_node", True):
            updates["nvlink_efficiency"] = min(1.0, link_busbw(busbw, int(self.nccl["all_reduce"].get("world", 0)),
                                                              gpu, updates.get("memory_efficiency",
                                                                               base.memory_efficiency),
                                                              architecture_of(gpu))
                                                    / gpu.scaleup_bandwidth_bytes_per_s)
        if self.fitted:
            hw = dict(self.fitted.get("hardware") or {})
            gemm = dict(base.gemm_efficiency)
            for key in [k for k in hw if k.startswith("gemm_efficiency.")]:
                gemm[key.split(".", 1)[1]] = hw.pop(key)
            updates.update(hw, gemm_efficiency=gemm, measured=tuple(self.measured) + ("fitted",),
                           framework_params={k: dict(v) for k, v in (self.fitted.get("framework") or {}).items()})
            if not self.source:
                updates["source"] = (f"fitted to {self.fitted.get('n_rows', '?')} measured runs "
                                     f"({', '.join(self.fitted.get('runs') or []) or 'unnamed files'})")
        return replace(base, **updates)

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        # version 1 where nothing needs version 2: older clustertwins keep reading measured tables
        d: dict[str, Any] = {"schema": SCHEMA, "version": SCHEMA_VERSION if self.fitted else 1, "gpu": self.gpu,
                             "device_name": self.device_name, "date": self.date, "driver": self.driver,
                             "torch": self.torch, "cuda": self.cuda, "synthetic": self.synthetic,
                             "source": self.source, "measured": list(self.measured),
                             "datasheet": list(self.datasheet), "peak_flops": dict(self.peak_flops),
                             "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s, "gemm": self.gemm,
                             "attention": self.attention, "memory": self.memory,
                             "launch_overhead_s": self.launch_overhead_s, "nccl": self.nccl}
        if self.fitted:
            d["fitted"] = self.fitted
        return _plain(d)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    return x


def check_gpu_matches(p: MeasuredProfile, gpu) -> None:
    from ..catalog import normalize
    if not p.has_tables and p.fitted:   # fitted scalars only: they hold for the architecture
        from ..cost.profile import architecture_of
        arch = p.fitted.get("architecture")
        if arch and arch != architecture_of(gpu):
            raise DataError("profile", f"fitted on {arch} GPUs ({p.gpu}), but the job runs on {gpu.name} "
                            f"({architecture_of(gpu)})", f"calibrate on runs of {gpu.name} or run on {p.gpu}")
        return
    if normalize(p.gpu) != normalize(gpu.name):
        raise DataError("profile", f"measured on {p.gpu}, but the job runs on {gpu.name}",
                        f"use a profile measured on {gpu.name} or run on {p.gpu}")


# ---- validation ------------------------------------------------------------------------------
def _err(where: str, problem: str) -> DataError:
    return DataError(f"profile.{where}", problem, "fix the profile file or run `clustertwin calibrate` again")


def _axis(d: dict, key: str, where: str) -> list[float]:
    a = d.get(key)
    if not isinstance(a, list) or not a:
        raise _err(f"{where}.{key}", "missing or empty list")
    try:
        vals = [float(v) for v in a]
    except (TypeError, ValueError):
        raise _err(f"{where}.{key}", "not a list of numbers") from None
    if any(not math.isfinite(v) or v <= 0 for v in vals):
        raise _err(f"{where}.{key}", "sizes must be positive numbers")
    if any(b <= a for a, b in zip(vals, vals[1:])):
        raise _err(f"{where}.{key}", "sizes must be strictly increasing")
    return vals


def _values(d: dict, key: str, shape: tuple[int, ...], where: str, limit: float | None) -> list:
    try:
        v = np.asarray(d.get(key), dtype=float)
    except (TypeError, ValueError):
        raise _err(f"{where}.{key}", "not a (nested) list of numbers") from None
    if v.shape != shape:
        raise _err(f"{where}.{key}", f"shape {v.shape} does not match the axes {shape}")
    if np.any(~np.isfinite(v)) or np.any(v < 0):
        raise _err(f"{where}.{key}", "values must be finite and non-negative")
    if limit is not None and v.size and v.max() > limit * _TOLERANCE:
        raise _err(f"{where}.{key}", f"{v.max():.4g} exceeds the datasheet peak {limit:.4g}")
    return v.tolist()


def _number(d: dict, key: str, where: str = "") -> float:
    try:
        v = float(d[key])
    except (KeyError, TypeError, ValueError):
        raise _err(where + key, "missing or not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise _err(where + key, "must be a positive number")
    return v


def parse_profile(data: Any, path: str = "") -> MeasuredProfile:
    """Validate a profile's data (as read from YAML/JSON); every problem is a one-line DataError."""
    if not isinstance(data, dict):
        raise DataError("profile", "not a mapping", "give a profile written by `clustertwin calibrate`")
    if data.get("schema") != SCHEMA:
        raise DataError("profile.schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}",
                        "give a profile written by `clustertwin calibrate`")
    if data.get("version") not in READ_VERSIONS:
        raise DataError("profile.version", f"version {data.get('version')!r} is not supported (this clustertwin reads "
                        f"{', '.join(map(str, READ_VERSIONS))})", "recalibrate or upgrade clustertwin")
    gpu = data.get("gpu")
    if not isinstance(gpu, str) or not gpu:
        raise _err("gpu", "missing catalog GPU name")
    peaks_raw = data.get("peak_flops") or {}
    if not isinstance(peaks_raw, dict):
        raise _err("peak_flops", "not a mapping of dtype to FLOP/s")
    peaks = {str(k): _number(peaks_raw, k, "peak_flops.") for k in peaks_raw}
    p = MeasuredProfile(gpu=gpu, device_name=str(data.get("device_name") or ""), date=str(data.get("date") or ""),
                        driver=str(data.get("driver") or ""), torch=str(data.get("torch") or ""),
                        cuda=str(data.get("cuda") or ""), synthetic=bool(data.get("synthetic", False)),
                        measured=[str(x) for x in data.get("measured") or []],
                        datasheet=[str(x) for x in data.get("datasheet") or []], peak_flops=peaks,
                        source=str(data.get("source") or ""), path=path)
    gemm = data.get("gemm") or {}
    if not isinstance(gemm, dict):
        raise _err("gemm", "not a mapping of dtype to tables")
    for dtype, g in gemm.items():
        where = f"gemm.{dtype}"
        if not isinstance(g, dict):
            raise _err(where, "not a mapping")
        if dtype not in peaks:
            raise _err("peak_flops", f"no peak for dtype {dtype!r} that gemm measures")
        m, n, k = (_axis(g, ax, where) for ax in ("m", "n", "k"))
        p.gemm[str(dtype)] = {"m": m, "n": n, "k": k,
                              "tflops": _values(g, "tflops", (len(m), len(n), len(k)), where, peaks[dtype] / 1e12)}
    att = data.get("attention")
    if att:
        if not isinstance(att, dict):
            raise _err("attention", "not a mapping")
        if "bf16" not in peaks:
            raise _err("peak_flops", "no bf16 peak, which attention efficiencies are relative to")
        s, hd = _axis(att, "seq", "attention"), _axis(att, "head_dim", "attention")
        lim = peaks["bf16"] / 1e12
        p.attention = {"seq": s, "head_dim": hd,
                       "fwd_tflops": _values(att, "fwd_tflops", (len(s), len(hd)), "attention", lim),
                       "bwd_tflops": _values(att, "bwd_tflops", (len(s), len(hd)), "attention", lim)}
    mem = data.get("memory") or {}
    if not isinstance(mem, dict):
        raise _err("memory", "not a mapping of kernel to tables")
    if mem:
        p.hbm_bandwidth_bytes_per_s = _number(data, "hbm_bandwidth_bytes_per_s")
    for kernel, m in mem.items():
        where = f"memory.{kernel}"
        if not isinstance(m, dict):
            raise _err(where, "not a mapping")
        b = _axis(m, "bytes", where)
        p.memory[str(kernel)] = {"bytes": b, "gbps": _values(m, "gbps", (len(b),), where,
                                                             p.hbm_bandwidth_bytes_per_s / 1e9)}
    launch = data.get("launch_overhead_s") or {}
    if not isinstance(launch, dict):
        raise _err("launch_overhead_s", "not a mapping")
    p.launch_overhead_s = {str(k): _number(launch, k, "launch_overhead_s.") for k in launch}
    nccl = data.get("nccl") or {}
    if not isinstance(nccl, dict):
        raise _err("nccl", "not a mapping of collective to tables")
    for op, e in nccl.items():
        where = f"nccl.{op}"
        if not isinstance(e, dict):
            raise _err(where, "not a mapping")
        b = _axis(e, "bytes", where)
        p.nccl[str(op)] = {"world": int(_number(e, "world", where + ".")), "bytes": b,
                           "busbw_gbps": _values(e, "busbw_gbps", (len(b),), where, None),
                           "intra_node": bool(e.get("intra_node", True))}
    if data.get("fitted") is not None:
        p.fitted = _fitted(data["fitted"])
    return p


def _fitted_value(v: Any, where: str, efficiency: bool) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise _err(where, "not a number") from None
    if not math.isfinite(x) or x < 0 or (efficiency and not 0 < x <= CEILING):
        raise _err(where, f"{v!r} is out of range ({'a fraction in (0, 1]' if efficiency else 'non-negative'})")
    return x


def _fitted(f: Any) -> dict[str, Any]:
    """Check a ``fitted`` section: known HardwareProfile / FrameworkProfile fields with numbers in range."""
    from dataclasses import fields as dc_fields

    from ..specs.framework import FrameworkProfile
    if not isinstance(f, dict):
        raise _err("fitted", "not a mapping")
    hw_fields = {x.name for x in dc_fields(HardwareProfile)}
    fw_fields = {x.name for x in dc_fields(FrameworkProfile)}
    hw = f.get("hardware") or {}
    if not isinstance(hw, dict):
        raise _err("fitted.hardware", "not a mapping of HardwareProfile field to value")
    out_hw = {}
    for k, v in hw.items():
        k = str(k)
        if k.split(".")[0] not in hw_fields or (k.startswith("gemm_efficiency") and "." not in k):
            raise _err(f"fitted.hardware.{k}", "not a scalar HardwareProfile field (gemm_efficiency.<dtype>, "
                       "attention_fwd_efficiency, memory_efficiency, ...)")
        out_hw[k] = _fitted_value(v, f"fitted.hardware.{k}", k.split(".")[0].endswith("efficiency"))
    fw = f.get("framework") or {}
    if not isinstance(fw, dict) or any(not isinstance(v, dict) for v in fw.values()):
        raise _err("fitted.framework", "not a mapping of framework name to {field: value}")
    out_fw: dict[str, dict[str, float]] = {}
    for name, vals in fw.items():
        for k, v in vals.items():
            if str(k) not in fw_fields:
                raise _err(f"fitted.framework.{name}.{k}", "not a FrameworkProfile field")
            out_fw.setdefault(str(name), {})[str(k)] = _fitted_value(v, f"fitted.framework.{name}.{k}", False)
    out = {k: v for k, v in f.items() if k not in ("hardware", "framework")}
    out.update(hardware=out_hw, framework=out_fw)
    return out


def load_profile(path: str | Path) -> MeasuredProfile:
    """Read and validate a profile file (YAML or JSON)."""
    from ..catalog import read_data_file
    p = Path(path)
    return parse_profile(read_data_file(p, "profile"), str(p))


def save_profile(profile: MeasuredProfile, path: str | Path) -> Path:
    import json

    import yaml
    p = Path(path)
    data = profile.to_dict()
    if p.suffix.lower() == ".json":
        p.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    else:
        p.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120), encoding="utf-8")
    return p


def shipped_profile_path(gpu_name: str) -> Path | None:
    """The catalog's measured profile for a GPU (``catalog/profiles/<gpu>.yaml``), if one ships."""
    from ..catalog import normalize
    for ext in (".yaml", ".yml", ".json"):
        p = PROFILES_DIR / f"{normalize(gpu_name)}{ext}"
        if p.is_file():
            return p
    return None


def today() -> str:
    return _dt.date.today().isoformat()


_SHIPPED: dict[str, Any] = {}


def profile_for(gpu: GPUSpec) -> HardwareProfile:
    """The profile clustertwin prices ``gpu`` with: the measured profile the catalog ships for it
    (``catalog/profiles/<gpu>.yaml``), else its architecture's defaults (``cost.profile``)."""
    if gpu.name not in _SHIPPED:
        path = shipped_profile_path(gpu.name)
        _SHIPPED[gpu.name] = load_profile(path).to_hardware_profile(gpu) if path is not None else None
    return _SHIPPED[gpu.name] or default_profile(gpu)
