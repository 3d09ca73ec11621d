"""The CDNA 3 (MI300X) hardware profile: AMD's published sustained-clock measurements where there are any,
never above Hopper's sustained figures where there are none, and said so in a prediction's assumptions
(issue 16 item 7, issue 18)."""
from __future__ import annotations

import pytest

from clustertwin.catalog import load_gpu
from clustertwin.constants import CONSTANTS, value
from clustertwin.cost import power as pw
from clustertwin.cost.compute import ComputePricer
from clustertwin.cost.profile import ARCH_PROFILES, architecture_of, assumed_fields, profile_assumption
from clustertwin.specs.framework import get_framework
from clustertwin.workload.transformer import gemm


def _gemm_fraction(gpu, dtype, m, n, k):
    """Achieved fraction of the datasheet peak the profile prices an m x n x k GEMM at."""
    arch = architecture_of(gpu)
    op = gemm("g", m, n, k, dtype, 2)
    t = ComputePricer(gpu, ARCH_PROFILES[arch], get_framework("megatron")).gemm_time(op)
    return op.flops / t / gpu.peak(dtype)


def _profile_constants(arch):
    head = f"profile.{arch}."
    return {c.name.removeprefix(head): c for c in CONSTANTS if c.name.startswith(head)}


def test_no_cdna_efficiency_is_above_hoppers():
    """Measured or assumed, no CDNA fraction of peak exceeds Hopper's sustained one (MI300X's published GEMMs and
    copies all sit below H100's)."""
    hopper = {k: c.value for k, c in _profile_constants("hopper").items()}
    checked = 0
    for key, c in _profile_constants("cdna").items():
        if c.unit.startswith("fraction of") and key in hopper:
            assert c.value <= hopper[key], (c.name, c.value, hopper[key])
            checked += 1
    assert checked >= 10


def test_cdna_fill_terms_are_not_more_optimistic_than_hoppers():
    """A smaller K_half or s_half reaches full efficiency sooner: unmeasured on CDNA, they may not undercut
    Hopper's measured ones, and the whole-wave tail is at least Hopper's."""
    cdna, hopper = ARCH_PROFILES["cdna"], ARCH_PROFILES["hopper"]
    assert cdna.k_half >= hopper.k_half
    assert cdna.attention_seq_half >= hopper.attention_seq_half
    assert cdna.wave_quantization >= hopper.wave_quantization


def test_mi300x_maf_gemms_match_amds_published_figures():
    """AMD's max-achievable FLOPs (hipBLASLt, 750 W, ~1 s runs): BF16 708 TFLOP/s at 4096x4864x32896, FP16 654,
    FP8 1,223.6-1,273 at 4096x3648x32896; the profile prices the same shapes within 4%, and never above."""
    mi300x = load_gpu("mi300x")
    bf16 = _gemm_fraction(mi300x, "bf16", 4096, 4864, 32896) * mi300x.peak("bf16")
    fp16 = _gemm_fraction(mi300x, "fp16", 4096, 4864, 32896) * mi300x.peak("fp16")
    fp8 = _gemm_fraction(mi300x, "fp8", 4096, 3648, 32896) * mi300x.peak("fp8")
    assert bf16 == pytest.approx(708e12, rel=0.04) and bf16 <= 708e12 * 1.005
    assert fp16 == pytest.approx(654e12, rel=0.04) and fp16 <= 654e12 * 1.005
    # FP8's MAF shape is cut in 192-wide tiles, which the tile model lacks (it prices that shape ~25% lower):
    # the large-GEMM fraction itself is AMD's, and no shape is priced above it
    assert value("profile.cdna.gemm_efficiency.fp8") == pytest.approx((1223.6 + 1273) / 2 / 2614.9, rel=0.03)
    assert fp8 <= 1273e12 * 1.005


def test_mi300x_gemms_are_below_h100s_fraction_at_every_shape():
    mi300x, h100 = load_gpu("mi300x"), load_gpu("h100-sxm")
    for dtype in ("bf16", "fp8"):
        for m, n, k in ((8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096), (256, 8192, 1024)):
            assert _gemm_fraction(mi300x, dtype, m, n, k) <= _gemm_fraction(h100, dtype, m, n, k)


def test_mi300x_memory_bound_rate_is_the_measured_copy():
    """rocprofiler-compute's MI300X roofline memcopy reference: 3,910.62 GB/s of the 5.3 TB/s peak."""
    mi300x = load_gpu("mi300x")
    achieved = mi300x.hbm_bandwidth_bytes_per_s * ARCH_PROFILES["cdna"].memory_efficiency
    assert achieved == pytest.approx(3910.62e9, rel=0.01)


def test_xgmi_all_reduce_is_the_measured_rccl_bus_bandwidth():
    """AMD's rccl-tests all_reduce_perf on 8x MI300X: 318 GB/s bus bandwidth at 8 GB; it stays under RCCL's
    per-link ceiling of 48 of 64 GB/s (protocol and CRC overhead)."""
    mi300x = load_gpu("mi300x")
    busbw = mi300x.scaleup_bandwidth_bytes_per_s * ARCH_PROFILES["cdna"].nvlink_efficiency
    assert busbw == pytest.approx(318.0e9, rel=0.01)
    assert ARCH_PROFILES["cdna"].nvlink_efficiency <= 48 / 64


def test_measured_cdna_figures_cite_a_measurement():
    for key, c in _profile_constants("cdna").items():
        if not c.assumed:
            assert any(w in c.source for w in ("Max-Achievable", "rocprofiler-compute", "rccl-tests")), c.name


def test_mi300x_prediction_lists_what_is_assumed():
    mi300x = load_gpu("mi300x")
    note = profile_assumption(mi300x)
    assert note is not None and "assumed" in note
    for field in ("attention_fwd_efficiency", "attention_seq_half", "k_half"):
        assert field in note
    for measured in ("gemm_efficiency.bf16", "gemm_efficiency.fp8", "memory_efficiency", "nvlink_efficiency"):
        assert measured not in assumed_fields("cdna")
    # a calibrated or measured profile says nothing
    from dataclasses import replace
    assert profile_assumption(mi300x, replace(ARCH_PROFILES["cdna"], memory_efficiency=0.7)) is None


def test_mi300x_clock_reference_and_locked_clock_is_slower():
    mi300x = load_gpu("mi300x")
    # the reference is the clock the sustained efficiencies hold (1,207 MHz at 750 W), not the 2.1 GHz
    # the dense BF16 peak implies (304 CUs x 2,048 FLOP/clk): locking it changes nothing
    assert pw.reference_clock_mhz(mi300x) == value("power.reference_clock_mhz.mi300x") == 1207
    assert mi300x.peak("bf16") == pytest.approx(304 * 2048 * 2100e6, rel=0.001)
    assert pw.clock(pw.with_power(mi300x, clock_hz=1.207e9), "tensor") == pytest.approx(1.0)
    slow = pw.with_power(mi300x, clock_hz=1.0e9)
    assert pw.clock(slow, "tensor") == pytest.approx(1000 / 1207)
