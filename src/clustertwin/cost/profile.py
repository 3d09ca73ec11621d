"""Hardware profiles: what a GPU achieves, as opposed to its datasheet peak.

A profile holds efficiencies that are properties of the GPU architecture and its libraries
(cuBLAS/hipBLASLt, FlashAttention/cuDNN, NCCL/RCCL), taken from published measurements until a
calibrated profile (``clustertwin calibrate``) replaces them. None is fitted to a training run.

The architecture defaults (``ARCH_PROFILES``) are read from the constant table
(``clustertwin.constants``, entries ``profile.<architecture>.*``), where each figure carries its
source: cuBLAS/hipBLASLt GEMM benchmarks and the shared H100 microbenchmarks for GEMMs,
FlashAttention-2/3 (Dao 2023; Shah et al. 2024) for attention, STREAM-like copies for HBM, and
nccl-tests bus bandwidths for NVLink and the NICs. Blackwell's GEMM, attention and NVLink figures come
from published B200/GB200 benchmarks at sustained clocks (the rest is assumed, never above Hopper's);
CDNA 3's GEMM, HBM and xGMI figures come from AMD's published MI300X measurements (GEMMs at the ~1.2 GHz clock
it sustains under dense load); attention and the shape terms stay assumed, never above Hopper's.
``assumed_fields`` names a profile's assumed entries.
Wave quantization: a GEMM whose tiles do not fill whole waves of SMs idles the rest of the last wave
(NVIDIA GEMM performance guide); Hopper's persistent/stream-K kernels recover part of it.
A GEMM kernel also pays a fixed GPU time that does not scale with its work (``gemm_fixed_s``: CTA
launch, the first k-tiles' loads, the last tiles' epilogue), fitted with Hopper's K_half to the measured
H100 GEMMs (benchmarks/gemm_shape_fit.py); a measured GEMM table includes it already.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields, replace
from typing import Any, Mapping, Protocol, TypeVar

from ..constants import ASSUMED, CONSTANTS, group
from ..specs.hardware import GPUSpec


class MeasuredTables(Protocol):
    """What pricing reads of measured efficiency tables (``calibrate/profile.py`` builds them from a
    profile file): efficiencies relative to the datasheet."""

    def has_gemm(self, dtype: str) -> bool: ...

    def gemm_efficiency(self, dtype: str, m: float, n: float, k: float) -> float: ...

    def attention_efficiency(self, bwd: bool, seq: float, head_dim: float) -> float | None: ...

    def memory_table(self, kernel: str) -> Any: ...


_F = TypeVar("_F")


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    _: KW_ONLY
    gemm_efficiency: dict[str, float]    # by dtype: fraction of the datasheet peak of a large GEMM
    wave_quantization: float             # 1 = full tail loss of the last wave, 0 = none
    k_half: float                        # inner dimension at which a GEMM reaches half its efficiency
    gemm_fixed_s: float                  # GPU seconds per GEMM kernel beyond its work and the launch gap
    attention_fwd_efficiency: float
    attention_bwd_efficiency: float
    attention_seq_half: float            # key length at which flash attention reaches half its efficiency
    # FlashAttention-2 where the architecture's best kernels are a later generation (Hopper: FA3 / cuDNN);
    # None = the same as the numbers above (Ampere, whose best kernel is FlashAttention-2)
    attention_fa2_fwd_efficiency: float | None = None
    attention_fa2_bwd_efficiency: float | None = None
    attention_fa2_seq_half: float | None = None
    memory_efficiency: float             # achievable fraction of HBM bandwidth
    nvlink_efficiency: float             # NCCL bus bandwidth / link peak, intra-node
    nic_efficiency: float                # NCCL bus bandwidth / line rate, inter-node
    source: str = "architecture defaults from published measurements (see clustertwin.constants)"
    measured: tuple[str, ...] = ()       # which entries come from a calibration run
    # measured GEMM/attention/memory tables (calibrate/profile.py); None = the formulas above
    tables: MeasuredTables | None = field(default=None, compare=False, repr=False)
    # framework figures calibrated together with this hardware (``calibrate --from-runs``): framework
    # name (FrameworkProfile.name, or "*" for every framework) -> {FrameworkProfile field: value}
    framework_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict, compare=False)

    def framework(self, fw: _F) -> _F:
        """``fw`` (a FrameworkProfile) with the figures this profile calibrated for it; ``fw`` itself if none."""
        name = getattr(fw, "name", "")
        updates = {**self.framework_params.get("*", {}), **self.framework_params.get(name, {})}
        known = {f.name for f in fields(fw)}   # type: ignore[arg-type]
        updates = {k: v for k, v in updates.items() if k in known}
        return replace(fw, **updates) if updates else fw   # type: ignore[type-var]


def _arch_profile(arch: str, **kw: Any) -> HardwareProfile:
    """The profile of ``arch`` from the constant table (``profile.<arch>.*`` in clustertwin.constants)."""
    fields: dict[str, Any] = group(f"profile.{arch}")   # field name -> value, e.g. k_half
    return HardwareProfile(arch, gemm_efficiency=group(f"profile.{arch}.gemm_efficiency"), **fields, **kw)


ARCH_PROFILES: dict[str, HardwareProfile] = {
    "ampere": _arch_profile("ampere"),
    "hopper": _arch_profile("hopper"),
    "blackwell": _arch_profile("blackwell", source="published B200/GB200 benchmarks at sustained clocks for GEMMs, "
                               "attention and NVLink; the rest assumed at Hopper's figures (clustertwin.constants)"),
    "cdna": _arch_profile("cdna", source="published MI300X measurements for GEMMs (AMD max-achievable FLOPs at "
                          "sustained clocks), HBM (rocprofiler-compute roofline) and xGMI (rccl-tests); attention "
                          "and the rest assumed, never above Hopper's (clustertwin.constants)"),
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


def assumed_fields(arch: str) -> list[str]:
    """The entries of ``arch``'s default profile whose figure is assumed, not measured (their source in
    clustertwin.constants starts with "assumed:"), e.g. ``memory_efficiency`` or ``gemm_efficiency.tf32``."""
    head = f"profile.{arch}."
    return [c.name[len(head):] for c in CONSTANTS if c.name.startswith(head) and c.source.startswith(ASSUMED)]


# architectures whose default profile is new enough that a prediction states what in it is assumed
# (issue 16, regime 7: Blackwell and anything unmeasured)
_STATED_ARCHITECTURES = ("blackwell", "cdna")


def profile_assumption(gpu: GPUSpec, profile: HardwareProfile | None = None) -> str | None:
    """One line for a prediction's assumptions: which figures of ``gpu``'s architecture defaults are
    assumed rather than measured; None for a calibrated or measured profile, or an architecture whose
    defaults are measured where it matters (Ampere, Hopper)."""
    arch = architecture_of(gpu)
    if arch not in _STATED_ARCHITECTURES or (profile is not None and profile != ARCH_PROFILES[arch]):
        return None
    fields = assumed_fields(arch)
    if not fields:
        return None
    return (f"{gpu.name} ({arch}) profile: {', '.join(fields)} assumed (no {arch} measurement at hand; not "
            f"above Hopper's sustained figures); the other efficiencies from published {arch} benchmarks "
            f"(clustertwin.constants profile.{arch}.*)")


def default_profile(gpu: GPUSpec) -> HardwareProfile:
    """The architecture defaults for ``gpu`` (published measurements). The profile clustertwin
    prices with, a shipped measured profile where one exists, is ``calibrate.profile.profile_for``."""
    return ARCH_PROFILES[architecture_of(gpu)]
