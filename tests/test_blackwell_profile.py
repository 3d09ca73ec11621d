"""The Blackwell (B200) hardware profile: published measurements where there are any, never above Hopper's
sustained figures where there are none, and said so in a prediction's assumptions (issue 16, regime 7)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from clustertwin.catalog import load_gpu
from clustertwin.constants import CONSTANTS, group, value
from clustertwin.cost import power as pw
from clustertwin.cost.compute import ComputePricer
from clustertwin.cost.profile import ARCH_PROFILES, assumed_fields, profile_assumption
from clustertwin.errors import SpecError
from clustertwin.specs.framework import get_framework
from clustertwin.validate.runs import MeasuredRow, job_from_row
from clustertwin.workload.ops import Op, OpKind, Phase
from clustertwin.workload.transformer import gemm

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"


def _pricer(gpu):
    return ComputePricer(gpu, ARCH_PROFILES["blackwell" if gpu.name == "b200" else "hopper"], get_framework("megatron"))


def _gemm_fraction(gpu, dtype, m, n, k):
    """Achieved fraction of the datasheet peak the profile prices an m x n x k GEMM at."""
    op = gemm("g", m, n, k, dtype, 2)
    return op.flops / _pricer(gpu).gemm_time(op) / gpu.peak(dtype)


def test_assumed_blackwell_figures_are_not_above_hoppers():
    """Regime 7: an unmeasured Blackwell efficiency is at most Hopper's sustained figure (FP4 has no Hopper
    figure: FP8's stands in)."""
    hopper = {c.name.removeprefix("profile.hopper."): c.value for c in CONSTANTS if c.name.startswith("profile.hopper.")}
    checked = 0
    for c in CONSTANTS:
        if not c.name.startswith("profile.blackwell.") or not c.assumed or not c.unit.startswith("fraction"):
            continue
        key = c.name.removeprefix("profile.blackwell.")
        ref = hopper.get(key, hopper.get(key.replace("fp4", "fp8")))
        assert ref is not None and c.value <= ref, (c.name, c.value, ref)
        checked += 1
    assert checked >= 3


def test_measured_blackwell_figures_cite_their_source():
    for c in CONSTANTS:
        if c.name.startswith("profile.blackwell.") and not c.assumed:
            assert any(w in c.source for w in ("#", "Azure/AI-benchmarking-guide", "Hopper's figure, checked")), c.name


def test_b200_sustained_fp8_gemm_is_the_measured_one():
    """Azure ND GB200 v6 cuBLASLt FP8 after 10,000 warm-ups: 2,877 TFLOP/s of 5.0 PFLOP/s at 8192^3 (0.575),
    2,907 at 16384^3 (0.581); the profile prices B200 at the same fraction of its own peak, within 3%."""
    b200 = load_gpu("b200")
    assert _gemm_fraction(b200, "fp8", 8192, 8192, 8192) == pytest.approx(2876.6 / 5000, rel=0.03)
    assert _gemm_fraction(b200, "fp8", 16384, 16384, 16384) == pytest.approx(2906.9 / 5000, rel=0.03)


def test_b200_bf16_gemm_is_below_its_short_run_benchmark_and_hoppers_fraction():
    """pytorch/ao#2427 measured 1.42 PFLOP/s (0.631 of 2.25) for a BF16 8192^3 GEMM in short runs; sustained it
    cannot be more. Nor may B200 reach a larger fraction of its datasheet than H100 (measured ratio 0.875)."""
    b200, h100 = load_gpu("b200"), load_gpu("h100-sxm")
    for m, n, k in ((8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096)):
        frac = _gemm_fraction(b200, "bf16", m, n, k)
        assert frac <= _gemm_fraction(h100, "bf16", m, n, k)
    assert _gemm_fraction(b200, "bf16", 8192, 8192, 8192) <= 1.42e15 / 2.25e15
    assert value("profile.blackwell.gemm_efficiency.bf16") == pytest.approx(
        value("profile.hopper.gemm_efficiency.bf16") * 0.575 / 0.657, abs=0.005)


def test_b200_attention_is_fa4_at_sustained_clocks():
    """FA4 causal d=128 s=8192 forward 1,418 TFLOP/s in a short run (flash-attention#2280) times the measured
    sustained derate 1,237/1,450 (flashinfer#2899): the profile's forward attention at 8K keys, within 3%."""
    b200 = load_gpu("b200")
    b, heads, s, d = 4, 16, 8192, 128
    flops = 2.0 * b * s * heads * (s / 2) * (d + d)
    op = Op("attn.flash", OpKind.ATTENTION, Phase.FWD, flops=flops, bytes=1.0, shape=(b, heads, s, s, d, d))
    achieved = flops / _pricer(b200).attention_time(op)
    assert achieved == pytest.approx(1418e12 * 1237 / 1450, rel=0.03)
    p = ARCH_PROFILES["blackwell"]
    assert p.attention_fwd_efficiency <= ARCH_PROFILES["hopper"].attention_fwd_efficiency
    assert p.attention_bwd_efficiency <= ARCH_PROFILES["hopper"].attention_bwd_efficiency


def test_flash_attention_2_on_blackwell_is_the_measured_fraction():
    """FA2 does not use Blackwell's tcgen05 tensor cores: GB200 373.9 TFLOP/s (0.150 of 2.5 PFLOP/s) against
    H200 329.3 (0.333 of 989) in the same harness; the profile keeps that ratio of Hopper's FA2 figures."""
    bw, hp = ARCH_PROFILES["blackwell"], ARCH_PROFILES["hopper"]
    ratio = (373.9 / 2500) / (329.3 / 989.4)
    assert bw.attention_fa2_fwd_efficiency == pytest.approx(hp.attention_fa2_fwd_efficiency * ratio, rel=0.01)
    assert bw.attention_fa2_bwd_efficiency == pytest.approx(hp.attention_fa2_bwd_efficiency * ratio, rel=0.01)


def test_b200_hbm_and_nvlink_are_the_measured_figures():
    b200 = load_gpu("b200")
    assert b200.hbm_bandwidth_bytes_per_s == pytest.approx(7680 / 8 * 3.996e9 * 2, rel=0.01)  # 7.67 TB/s
    # Azure ND GB200 v6 ring all-reduce over NVLink 5, 8 GB: 679.6 GB/s bus bandwidth of 900 GB/s
    assert b200.scaleup_bandwidth_bytes_per_s * ARCH_PROFILES["blackwell"].nvlink_efficiency == pytest.approx(
        679.6e9, rel=0.01)
    assert ARCH_PROFILES["blackwell"].nvlink_efficiency <= ARCH_PROFILES["hopper"].nvlink_efficiency


def test_b200_reference_clock_is_the_sustained_clock():
    """The efficiencies hold the sustained 1,580 MHz at 1,000 W (below the 1,856 MHz the datasheet's
    2.25 PFLOP/s implies: 148 SMs x 8192 FLOP/clock), so --clock refers to it: at it nothing changes, a
    locked clock below it slows GEMMs in proportion, and a clock above it is refused."""
    b200 = load_gpu("b200")
    assert value("power.reference_clock_mhz.b200") == 1580
    assert b200.peak("bf16") == pytest.approx(1.856e9 * 148 * 8192, rel=0.001)
    op = gemm("g", 8192, 8192, 8192, "bf16", 2)
    same = pw.with_power(b200, clock_hz=1.58e9)
    assert _pricer(same).gemm_time(op) == pytest.approx(_pricer(b200).gemm_time(op), rel=1e-9)
    locked = pw.with_power(b200, clock_hz=1.185e9)
    assert _pricer(locked).gemm_time(op) == pytest.approx(_pricer(b200).gemm_time(op) * 1580 / 1185, rel=1e-6)
    with pytest.raises(SpecError):
        pw.with_power(b200, clock_hz=1.856e9)


def test_a_b200_prediction_says_what_is_assumed():
    b200_note = profile_assumption(load_gpu("b200"))
    assert b200_note and "assumed" in b200_note
    assert all(f in b200_note for f in assumed_fields("blackwell"))
    assert profile_assumption(load_gpu("h100-sxm")) is None
    rows = {r["run_id"]: r for r in csv.DictReader(open(DATA / "moe_public_runs.csv", newline=""))}
    for run_id, expect in (("nemo25.02-b200-mixtral-8x7b-fp8-64gpu", True),
                           ("mbridge26.02-h100-qwen3-235b-a22b-fp8-256gpu", False)):
        row = MeasuredRow(run_id, "tokens_per_s_per_gpu", 1.0, rows[run_id], 0)
        job_from_row(row)
        assert any("profile" in a and "assumed" in a for a in row.assumptions) == expect


def test_blackwell_group_reads_every_field():
    assert set(group("profile.blackwell")) >= {"attention_fa2_fwd_efficiency", "attention_seq_half",
                                               "memory_efficiency", "nvlink_efficiency"}


def test_predict_states_the_assumed_figures_on_blackwell_only():
    import clustertwin as ct
    b200 = ct.predict("llama3-8b", gpu="b200", num_gpus=8, micro_batch=1, global_batch=16, seq_len=4096)
    h100 = ct.predict("llama3-8b", gpu="h100-sxm", num_gpus=8, micro_batch=1, global_batch=16, seq_len=4096)
    # the profile's assumed figures on Blackwell only; both state the wait for the slowest GPU they price
    assert b200.to_json()["assumptions"][:-1] == [profile_assumption(load_gpu("b200"))]
    assert h100.to_json()["assumptions"][:-1] == []
    assert all("slowest of 8 GPUs" in p.to_json()["assumptions"][-1] for p in (b200, h100))
    assert 0 < b200.mfu < h100.mfu <= 1      # B200 sustains a smaller share of its datasheet than H100
