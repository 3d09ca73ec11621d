"""Hardware profiles: what a GPU achieves, as opposed to its datasheet peak.

A profile holds efficiencies that are properties of the GPU architecture and its libraries
(cuBLAS/hipBLASLt, FlashAttention/cuDNN, NCCL/RCCL), taken from published measurements until a
calibrated profile (``clustertwin calibrate``) replaces them. None is fitted to a training run.

Published figures used for the defaults (architecture level):
- GEMM: cuBLAS reaches ~250 of A100's 312 TFLOP/s on large BF16/FP16 GEMMs in sustained use
  (80%; NVIDIA "Matrix Multiplication Background" guide, public cuBLAS benchmarks). H100 SXM runs
  large BF16 GEMMs at ~750-800 TFLOP/s in short benchmarks but settles near ~700 under sustained
  training load at 700 W (clocks drop from the 1.98 GHz boost), so 0.70 of the 989 TFLOP/s peak;
  FP8 near ~1,200 of 1,979 (0.60) for the same reason. MI300X: hipBLASLt BF16 ~600-700 of 1,307
  TFLOP/s (public MI300X GEMM benchmarks).
- Attention: FlashAttention-2 on A100 reaches up to 73% of peak forward and ~63% forward+backward
  at head dim 128 (Dao 2023, arXiv 2307.08691, Fig. 4-6); FlashAttention-3 / cuDNN on H100 reach
  ~600-660 TFLOP/s forward (causal, head dim 128, 8K-16K keys) but ~420-500 at 2K keys, backward
  ~450-560 (Shah et al. 2024, arXiv 2407.08608, Fig. 5-7): efficiency = max * s/(s + s_half),
  s_half 1K on Hopper (its warp-specialised pipeline needs long rows), 512 on Ampere.
- FlashAttention-2 on H100 (PyTorch SDPA's own flash kernel until cuDNN became its default on
  Hopper in torch 2.9+): ~330-350 TFLOP/s forward at head dim 128 against FA3's ~600+ (Shah et al.
  2024, Fig. 5; pytorch/pytorch#142132 measures 329 TFLOP/s against cuDNN's 631 at 4,608 keys),
  backward ~300: 0.36 / 0.31 of peak, s_half 512 as on Ampere.
- Memory-bound kernels: STREAM-like copies reach ~85-90% of HBM peak on A100/H100.
- NCCL bus bandwidth: ~230 GB/s of A100's 300 GB/s NVLink per direction; ~360-370 GB/s of H100's
  450 GB/s; InfiniBand/RoCE reach ~90-95% of line rate (nccl-tests on DGX systems).
- Wave quantization: a GEMM whose tiles do not fill whole waves of SMs idles the rest of the last
  wave (NVIDIA GEMM performance guide); Hopper's persistent/stream-K kernels recover part of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..specs.hardware import GPUSpec


class MeasuredTables(Protocol):
    """What pricing reads of measured efficiency tables (``calibrate/profile.py`` builds them from a
    profile file): efficiencies relative to the datasheet."""

    def has_gemm(self, dtype: str) -> bool: ...

    def gemm_efficiency(self, dtype: str, m: float, n: float, k: float) -> float: ...

    def attention_efficiency(self, bwd: bool, seq: float, head_dim: float) -> float | None: ...

    def memory_table(self, kernel: str) -> Any: ...


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    gemm_efficiency: dict[str, float] = field(default_factory=lambda: {"bf16": 0.80, "fp16": 0.80, "fp8": 0.65, "fp32": 0.80, "tf32": 0.75})
    wave_quantization: float = 1.0       # 1 = full tail loss of the last wave, 0 = none
    k_half: float = 48.0                 # inner dimension at which a GEMM reaches half its efficiency
    attention_fwd_efficiency: float = 0.65
    attention_bwd_efficiency: float = 0.50
    attention_seq_half: float = 256.0    # key length at which flash attention reaches half its efficiency
    # FlashAttention-2 where the architecture's best kernels are a later generation (Hopper: FA3 / cuDNN);
    # None = the same as the numbers above (Ampere, whose best kernel is FlashAttention-2)
    attention_fa2_fwd_efficiency: float | None = None
    attention_fa2_bwd_efficiency: float | None = None
    attention_fa2_seq_half: float | None = None
    memory_efficiency: float = 0.85      # achievable fraction of HBM bandwidth
    nvlink_efficiency: float = 0.78      # NCCL bus bandwidth / link peak, intra-node
    nic_efficiency: float = 0.92         # NCCL bus bandwidth / line rate, inter-node
    source: str = "architecture defaults from published measurements (see cost/profile.py)"
    measured: tuple[str, ...] = ()       # which entries come from a calibration run
    # measured GEMM/attention/memory tables (calibrate/profile.py); None = the formulas above
    tables: MeasuredTables | None = field(default=None, compare=False, repr=False)


ARCH_PROFILES: dict[str, HardwareProfile] = {
    "ampere": HardwareProfile(
        "ampere", gemm_efficiency={"bf16": 0.80, "fp16": 0.80, "fp8": 0.80, "fp32": 0.85, "tf32": 0.75},
        wave_quantization=1.0, k_half=128, attention_fwd_efficiency=0.72, attention_bwd_efficiency=0.60, attention_seq_half=512,
        memory_efficiency=0.86, nvlink_efficiency=0.78, nic_efficiency=0.92),
    "hopper": HardwareProfile(
        "hopper", gemm_efficiency={"bf16": 0.72, "fp16": 0.72, "fp8": 0.60, "fp32": 0.80, "tf32": 0.68},
        wave_quantization=0.5, k_half=256, attention_fwd_efficiency=0.70, attention_bwd_efficiency=0.58, attention_seq_half=1024,
        attention_fa2_fwd_efficiency=0.36, attention_fa2_bwd_efficiency=0.31, attention_fa2_seq_half=512,
        memory_efficiency=0.88, nvlink_efficiency=0.81, nic_efficiency=0.93),
    "blackwell": HardwareProfile(
        "blackwell", gemm_efficiency={"bf16": 0.75, "fp16": 0.75, "fp8": 0.70, "fp4": 0.6, "fp32": 0.8, "tf32": 0.7},
        wave_quantization=0.5, k_half=256, attention_fwd_efficiency=0.60, attention_bwd_efficiency=0.45,
        memory_efficiency=0.88, nvlink_efficiency=0.80, nic_efficiency=0.93,
        source="assumed close to Hopper until measured"),
    "cdna": HardwareProfile(
        "cdna", gemm_efficiency={"bf16": 0.52, "fp16": 0.52, "fp8": 0.45, "fp32": 0.7, "tf32": 0.5},
        wave_quantization=1.0, attention_fwd_efficiency=0.40, attention_bwd_efficiency=0.30,
        memory_efficiency=0.80, nvlink_efficiency=0.70, nic_efficiency=0.90),
}


def architecture_of(gpu: GPUSpec) -> str:
    name = gpu.name.lower()
    if name.startswith(("a100", "a800", "a40", "a30", "a10")):
        return "ampere"
    if name.startswith(("h100", "h800", "h200", "h20", "gh200")):
        return "hopper"
    if name.startswith(("b100", "b200", "gb200", "b300", "gb300")):
        return "blackwell"
    if name.startswith("mi") or gpu.vendor.lower() == "amd":
        return "cdna"
    return "hopper"


def default_profile(gpu: GPUSpec) -> HardwareProfile:
    """The architecture defaults for ``gpu`` (published measurements). The profile clustertwin
    prices with, a shipped measured profile where one exists, is ``calibrate.profile.profile_for``."""
    return ARCH_PROFILES[architecture_of(gpu)]
