"""The modelling constants of the core, each with its unit, its source and what it prices.

One table: the pricing code reads every modelling constant from it (``value``, ``group``), and the
constant tables of docs/model.md are generated from it (``python benchmarks/constants_table.py --write
docs/model.md``; a test checks they match). A source is a citation (paper and section or figure,
documentation, a measurement under shared/calibration and what it measured) or starts with
"assumed:" and says why. Framework profiles (``FrameworkProfile``) keep their own figures.

This module imports nothing from clustertwin, so every part of the package may import it.

>>> value("gemm_tile_efficiency.128x128")
0.92
>>> group("profile.hopper.gemm_efficiency")["fp8"]
0.6
>>> constant("schedule.dp_bucket_elements").unit
'elements'
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

ASSUMED = "assumed:"


@dataclass(frozen=True)
class Constant:
    """One modelling constant: ``source`` cites where the value comes from, or starts with
    "assumed:" and says why; ``prices`` says what it changes in a prediction."""

    name: str
    value: float
    unit: str
    source: str
    prices: str

    @property
    def assumed(self) -> bool:
        return self.source.startswith(ASSUMED)


# ---- shared source texts -------------------------------------------------------------------------
_CUBLAS_A100 = ("public cuBLAS benchmarks (no one publication pinned, no A100 measurement at hand): ~250 of "
                "A100's 312 TFLOP/s on large BF16/FP16 GEMMs in sustained use")
_H100_GEMM = ("shared/calibration h100-sxm_microbench_2026-11-22.csv: large BF16 GEMMs reach 0.75-0.80 of the "
              "989 TFLOP/s peak in short runs at default clocks (8192^3: 795 TFLOP/s; the shape fit of "
              "benchmarks/gemm_shape_fit.py puts their large-shape level at 0.845, so 0.72 is 0.85 of it); times "
              "the shape efficiency this gives ~0.69 on large GEMMs, the ~700 TFLOP/s public H100 runs sustain at "
              "700 W where clocks fall below the 1.98 GHz boost")
_H100_FP8 = ("assumed: ~1,200 of the 1,979 TFLOP/s FP8 peak sustained (the BF16 reasoning: short benchmarks "
             "run higher, sustained clocks lower); no FP8 measurement at hand")
_FA2_A100 = ("Dao 2023 (FlashAttention-2, arXiv 2307.08691) Fig. 4-6: up to 73% of A100 peak forward, "
             "~63% forward+backward at head dim 128")
_FA3_H100 = ("Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608) Fig. 5-7: FA3 / cuDNN on H100 ~600-660 "
             "TFLOP/s forward at 8K-16K keys (causal, head dim 128), backward ~450-560")
_FA2_H100 = ("Shah et al. 2024 (arXiv 2407.08608) Fig. 5: FlashAttention-2 on H100 ~330-370 TFLOP/s forward at "
             "head dim 128 against FA3's 600+; pytorch/pytorch#142132 measures SDPA's flash kernel at 329 "
             "TFLOP/s against cuDNN's 631 at 4,608 keys")
_STREAM = "STREAM-like copies reach ~85-90% of HBM peak on A100/H100 in public benchmarks"
_H100_COPY = ("shared/calibration h100-sxm_microbench_2026-11-22.csv: a 2 GiB copy moves 3.0 TB/s "
              "(read + write) of the 3.35 TB/s datasheet HBM3 bandwidth (0.90); " + _STREAM)
_NCCL_A100 = "nccl-tests on DGX A100: all-reduce bus bandwidth ~230 GB/s of NVLink 3's 300 GB/s per direction"
_NCCL_H100 = "nccl-tests on DGX H100: all-reduce bus bandwidth ~360-370 GB/s of NVLink 4's 450 GB/s per direction"
_NCCL_IB = "nccl-tests across DGX nodes: InfiniBand/RoCE bus bandwidth ~90-95% of line rate"
_CDNA = "assumed: no CDNA measurement at hand; set below the NVIDIA figures, as MI300X's public GEMM results are"
# CDNA 3 (MI300X at 750 W): published measurements. AMD measures "max-achievable FLOPs" (MAF) with hipBLASLt at a
# shape that fills all 304 CUs in whole waves with a long K, over ~1 s runs, i.e. at the clock the part sustains
# under dense matrix load; under that load MI300X runs at ~1.2 GHz, not its 2.1 GHz boost. Where no CDNA
# measurement exists the figure says "assumed:" and is not above Hopper's sustained one (issue 16, item 7).
_MI300X_MAF = ("ROCm blogs, 'Measuring Max-Achievable FLOPs - Part 2' (AMD, 2025; hipBLASLt db8e93b, ROCm 6.3, "
               "MI300X 750 W, 4096x4864x32896, ~1 s runs): BF16 708 TFLOP/s at a median 1,207 MHz engine clock, "
               "FP16 654 at 1,115 MHz, FP8 (4096x3648x32896) 1,273 at 1,230 MHz (footnote: 1,223.6); the boost "
               "clock is 2,100 MHz, so dense GEMMs run at ~0.57-0.59 of the clock the datasheet peak assumes")
_CDNA_BF16 = (_MI300X_MAF + ": 708 / 1,307.4 = 0.54 at a shape with whole waves and K = 32,896 (shape terms "
              "~0.99); below Hopper's 0.72")
_CDNA_FP16 = _MI300X_MAF + ": 654 / 1,307.4 = 0.50; below Hopper's 0.72"
_CDNA_FP8 = (_MI300X_MAF + ": 1,223.6-1,273 / 2,614.9 = 0.47-0.49, taken as 0.48; below Hopper's 0.60. "
             "Lower readings exist (ROCm/hipBLASLt#1721: 907 TFLOP/s at 8192^3 with the clock pinned at 1,005 MHz)")
_CDNA_ASSUMED = ("assumed: Hopper's figure (no CDNA measurement at hand; no efficiency above Hopper's sustained one "
                 "until a measurement says otherwise)")
_CDNA_MEM = ("ROCm/rocm-systems rocprofiler-compute tests/test_metric_validation.py: the roofline memcopy's HBM "
             "bandwidth on MI300X is 3,910.62 GB/s (AMD's reference value, 5% tolerance) = 0.74 of the 5.3 TB/s "
             "datasheet peak; a user's ROCm roofline run on MI300X reads 4.2 TB/s (0.79, ROCm/legacy-rocm-build"
             "#5070); AMD: 'The 5.3 TB/s BW in the datasheet is the theoretical peak, not achievable with real-world "
             "tests' (ROCm/rocm_bandwidth_test#121). Below Hopper's measured 0.88")
_CDNA_XGMI = ("ROCm blogs, 'Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X' (AMD, March "
              "2025; RCCL 2.22.3, ROCm 6.3, one process per GPU): 8x MI300X rccl-tests all_reduce_perf bus bandwidth "
              "310.5 GB/s at 512 MB, 314.7 at 1 GB, 318.0 at 8 GB, 319.0 at 16 GB of the 448 GB/s per direction "
              "(7 x 64 GB/s links) = 0.71 at 8 GB; each xGMI link carries 45-48 of its 64 GB/s after CRC and "
              "protocol overhead (TransferBench all-to-all in the same post; ROCm/rccl#1210) and the slowest of "
              "the 7 links caps a ring. Below Hopper's measured 0.81")
# vLLM's FP8 linear layer for per-channel weight scales with per-token activation scales (Meta's fbgemm_fp8
# checkpoints such as meta-llama/Llama-3.1-405B-FP8) where no CUTLASS kernel runs (ROCm): the 'naive' fallback
_ROCM_FP8_NAIVE = ("vLLM apply_fp8_linear, torch._scaled_mm fallback 'for channelwise case, where we use unfused "
                   "DQ due to limitations with scaled_mm' (vllm-project/vllm#6552, 2024-07, in "
                   "layers/quantization/utils/w8a8_utils.py through v0.7.2; later torch_channelwise_w8a8_scaled_mm: "
                   "'fallback to naive if per channel or per token'): cutlass_fp8_supported() is False off CUDA, so "
                   "on ROCm the GEMM runs through torch._scaled_mm at unit scales with out_dtype=torch.float32 "
                   "and the scales are applied after it; a row-wise scaled torch._scaled_mm (pytorch#144432, "
                   "hipBLASLt, torch 2.7) replaced it on ROCm from vLLM 0.7.3 (vllm-project/vllm#12501, 'speeds up "
                   "current naive implementation by at least 2 times'; vLLM blog 2025-02-24 'PTPC-FP8 ... vLLM "
                   "(v0.7.3+) on AMD ROCm')")
_GENERIC = ("assumed: the generic HardwareProfile default from before the per-architecture fill terms; "
            "no measurement of this architecture at hand")
# Blackwell (B200 at 1,000 W; GB200 at up to 1,200 W): published measurements. A figure a benchmark took in a
# short run at boost clocks is not the sustained one: under continuous tensor load a B200 falls from 1,965 to
# ~1,580 MHz at ~1,000 W and FA4 from 1,450 to 1,237 TFLOP/s (x 0.853; _B200_THROTTLE). Where no Blackwell
# measurement exists the figure says "assumed:" and is not above Hopper's sustained one (issue 16, regime 7).
_B200_THROTTLE = ("flashinfer-ai/flashinfer#2899 (B200): sustained back-to-back kernels draw ~1,000 W and the SM "
                  "clock falls from 1,965 to ~1,580 MHz; BF16 FA4 forward (b=4, s=8192, 16 heads, d=128) falls "
                  "from 1,450 to 1,237 TFLOP/s (x 0.853)")
_AZURE_GB200 = ("Azure/AI-benchmarking-guide Azure_Results ND_GB200_v6 and ND_H200_v5 (cuBLASLt FP8, random "
                "data, 10,000 warm-up iterations, i.e. at sustained clocks): GB200 8192^3 2,877, 16384^3 2,907, "
                "6144x12288x12288 2,896 TFLOP/s = 0.575-0.581 of its 5.0 PFLOP/s dense FP8; H200 1,301 / 1,366 "
                "/ 1,318 = 0.657-0.690 of 1,979")
_BW_GEMM_RATIO = 0.575 / 0.657   # Blackwell / Hopper sustained FP8 GEMM efficiency, same harness: 0.875
_BLACKWELL_BF16 = ("Hopper's 0.72 (measured on H100: profile.hopper.gemm_efficiency.bf16) x 0.875, the "
                   "Blackwell/Hopper sustained-efficiency ratio of the same cuBLASLt harness (" + _AZURE_GB200 +
                   "); agrees with a direct B200 measurement: pytorch/ao#2427 torch.matmul BF16 (cuBLAS) 4096^3 "
                   "1.41, 6144^3 1.45, 8192^3 1.42 PFLOP/s = 0.63-0.65 of 2.25 (short runs); vllm-project/vllm"
                   "#19566 (sm100) torch BF16 16384x4096x4096 1,512 TFLOP/s (0.67); MLPerf Training v4.1 (NVIDIA technical "
                   "blog 'Blackwell Doubles LLM Training Performance in MLPerf Training v4.1', Nov. 2024): HGX "
                   "B200 at 1,000 W 2.0x H100 per GPU on GPT-3 175B (FP8), against a 2.27x FP8 peak ratio (0.88)")
_BLACKWELL_FP8 = (_AZURE_GB200 + ": 0.575-0.581 after the shape efficiency (~0.965 at these shapes) is 0.60; "
                  "in short runs: triton-lang/triton#9044 (B200, cuBLAS 13.1) MXFP8 (1x32 E8M0 block scales) 8192^3 "
                  "2,850 TFLOP/s (0.63 of 4.5), vllm-project/vllm#19566 (sm100) per-tensor FP8 16384x4096x4096 "
                  "2,544 (0.57); GB200's fraction of its own (higher-clocked) peak taken for B200")
_BLACKWELL_FP4 = ("pytorch/ao#2427 (B200) NVFP4 GEMM 6144^3 5.50, 8192^3 5.37 PFLOP/s = 0.60-0.61 of 9 PFLOP/s "
                  "dense FP4; Azure ND_GB200_v6 cuBLASLt FP4 reaches 7.5 of 10 PFLOP/s (0.75) at 8192^3 on the "
                  "1,200 W part, not taken for the 1,000 W B200")
_BLACKWELL_ATTN = ("FlashAttention-4 (Zadouri et al. 2026: on B200 up to 1,613 TFLOP/s BF16, 71% of peak, and up "
                   "to 1.3x cuDNN 9.13), in Dao-AILab/flash-attention#2280 (sm100) causal, d=128, s=8192: forward "
                   "1,418, backward 1,118 (1-CTA) / 1,209 (2-CTA) TFLOP/s = 0.63 / 0.50-0.54 of 2.25 in short runs; "
                   "x 0.853 sustained (" + _B200_THROTTLE + ") / (8192 / (8192 + 1024)) gives 0.60 forward, "
                   "0.48 backward; below Hopper's FA3 0.70 / 0.58")
_BLACKWELL_SEQ_HALF = ("Dao-AILab/flash-attention#2605 (sm100, cuDNN and FA4, causal, d=64): forward 627, 826, 977, "
                       "1,071, 1,115 TFLOP/s at 1K, 2K, 4K, 8K, 16K keys, i.e. 0.56 / 0.74 / 0.88 / 0.96 of the "
                       "16K rate; s/(s + 1024), relative to 16K, gives 0.53 / 0.71 / 0.85 / 0.94 (as Hopper's FA3)")
_BLACKWELL_FA2 = ("Azure/AI-benchmarking-guide (benchmark_flash_attention.py, FlashAttention-2, causal, d=128, "
                  "b=2, s=8192, forward + backward): GB200 373.9 TFLOP/s = 0.150 of its 2.5 PFLOP/s BF16, H200 "
                  "329.3 = 0.333 of 989: FA2's mma.sync path does not use Blackwell's tcgen05 tensor cores; "
                  "Hopper's FA2 figures x 0.449")
_BLACKWELL_SHAPE = ("Hopper's figure, checked against Blackwell GEMMs by shape (Azure/AI-benchmarking-guide "
                    "ND_GB200_v6 cuBLASLt FP8, sustained): with fp8 0.60, K_half 256 and wave 0.5 on 148 SMs the model gives "
                    "0.50 / 0.53 / 0.58 / 0.59 of peak at 2048^3 / 4096^3 / 8192^3 / 16384^3 and 0.58 at "
                    "6144x12288x12288 against measured 0.45 / 0.57 / 0.575 / 0.58 and 0.58 (K_half 512: 0.45 / "
                    "0.50 / 0.56 / 0.58, no better)")
_BLACKWELL_ASSUMED = ("assumed: Hopper's figure (no Blackwell measurement at hand; no efficiency above Hopper's "
                      "sustained one until a measurement says otherwise)")
_BLACKWELL_MEM = ("assumed: Hopper's figure (profile.hopper.memory_efficiency, from a measured H100 copy) on "
                  "B200's corrected 7.7 TB/s peak; no B200 STREAM measurement at hand (a CUDA-samples "
                  "bandwidthTest device-to-device copy on HGX B200 moves 'over 6,000 GB/s', newmind.ai 2025: "
                  "a lower bound of 0.78)")
_BLACKWELL_NVLINK = ("Azure/AI-benchmarking-guide ND_GB200_v6 (NVLink 5, 4 GPUs of an NVL72 rack, NCCL 2.25.1): "
                     "all_reduce_perf ring, in-place, 8 GB: bus bandwidth 679.6 GB/s of the 900 GB/s per direction "
                     "(0.755; 4 GB 673, 2 GB 667); below Hopper's 0.81")
_BLACKWELL_NIC = ("assumed: Hopper's figure (" + _NCCL_IB + "); DGX B200 ships the same ConnectX-7 400 Gb/s NICs "
                  "as DGX H100 (NVIDIA DGX B200 user guide); no multi-node B200 nccl-tests at hand")

_GEMM_EFF = "GEMM time: fraction of the dtype's datasheet peak a large {dtype} GEMM sustains on {arch}"
_ATTN = "attention time: fraction of the BF16 peak {kind} reaches {phase} on {arch} at long rows"
_SEQ_HALF = "attention time: key length at which {kind} reaches half its efficiency on {arch}, s/(s + s_half)"
_K_HALF = "GEMM time: inner dimension K at which a GEMM reaches half its efficiency on {arch}, K/(K + K_half)"
_GEMM_FIXED = ("GEMM time: GPU seconds per GEMM kernel that do not scale with its work on {arch} (CTA launch, the "
               "first k-tiles' loads before any MMA, the last output tiles' epilogue writes after it), added to each "
               "GEMM kernel besides the inter-kernel gap (host.kernel_gap_s and the framework's)")
# Hopper's shape terms fitted to the measured H100 GEMMs by benchmarks/gemm_shape_fit.py (the procedure is its
# docstring: time = t_fixed + 2mnk / (peak x e_short x shape), a grid over K_half and t_fixed, least RMS log
# residual; RMS 2.2% over the 7 shapes, largest 3.4%).
_H100_SHAPE_FIT = ("fitted by benchmarks/gemm_shape_fit.py to the 7 bf16 GEMMs of shared/calibration "
                   "h100-sxm_microbench_2026-11-22.csv (8192^3 ... 2048^3, 16384x768x768): time = t_fixed + "
                   "2mnk / (peak x e_short x shape) gives K_half 272, t_fixed 4.8 us, e_short 0.845, RMS log "
                   "residual 2.2% (largest 3.4%; 4096^3 and 16384x4096x4096 share K and wave fill yet differ "
                   "by 6.5%, the data's own scatter); measured / model ratio to 8192^3: 2048^3 0.766 / 0.761, "
                   "16384x768x768 0.648 / 0.665, 16384x2304x768 0.744 / 0.729")
_H100_K_HALF = (_H100_SHAPE_FIT + ". The physics agrees: a tile's epilogue writes its m x n outputs (2 bytes each) "
                "at the SM's share of HBM bandwidth, not overlapped with the k-loop's 2k FLOP per output at the "
                "SM's share of the tensor rate, so K_half = e_short x peak / copy bandwidth = 0.845 x 989 / 3.0 "
                "= 279 elements (the same file's copy row)")
_H100_GEMM_FIXED = (_H100_SHAPE_FIT + ": t_fixed 4.8 us less host.kernel_gap_s (1 us, the back-to-back launch "
                    "gap the pricing adds to every kernel, which the benchmark's timed loop includes) = 3.8 us. "
                    "Azure/AI-benchmarking-guide ND H100 v5 / ND H200 v5 cuBLASLt FP8 (another harness) with "
                    "the same shape terms implies 2.4-5.4 us per kernel at 1024^3, 1024x2145x1024 and 2048^3")
_WAVE = ("GEMM time: share of the idle last wave of SMs a GEMM pays on {arch} "
         "(1 = the whole tail, 0 = none)")
_MEM = "memory-bound op time: achievable fraction of HBM bandwidth on {arch}"
_NVLINK = "collective time: NCCL bus bandwidth over the scale-up link peak (intra-node) on {arch}"
_NIC = "collective time: NCCL bus bandwidth over NIC line rate (inter-node) on {arch} clusters"


def _gemm(arch: str, effs: dict[str, float], sources: dict[str, str]) -> list[Constant]:
    return [Constant(f"profile.{arch}.gemm_efficiency.{d}", v, "fraction of peak", sources[d],
                     _GEMM_EFF.format(dtype=d.upper(), arch=arch)) for d, v in effs.items()]


def _profile(arch: str, gemm: list[Constant], *, wave: tuple[float, str], k_half: tuple[float, str],
             gemm_fixed: tuple[float, str], fwd: tuple[float, str], bwd: tuple[float, str], seq_half: tuple[float, str],
             mem: tuple[float, str], nvlink: tuple[float, str], nic: tuple[float, str],
             fa2: tuple[float, float, float, str] | None = None) -> list[Constant]:
    """The constants of one architecture's hardware profile, in HardwareProfile's field order."""
    kernel = "FlashAttention-2" if arch == "ampere" else "the best flash kernel (FA3 / cuDNN class)"
    out = list(gemm)
    out += [
        Constant(f"profile.{arch}.wave_quantization", wave[0], "fraction", wave[1], _WAVE.format(arch=arch)),
        Constant(f"profile.{arch}.k_half", k_half[0], "elements", k_half[1], _K_HALF.format(arch=arch)),
        Constant(f"profile.{arch}.gemm_fixed_s", gemm_fixed[0], "s", gemm_fixed[1], _GEMM_FIXED.format(arch=arch)),
        Constant(f"profile.{arch}.attention_fwd_efficiency", fwd[0], "fraction of peak", fwd[1],
                 _ATTN.format(kind=kernel, phase="forward", arch=arch)),
        Constant(f"profile.{arch}.attention_bwd_efficiency", bwd[0], "fraction of peak", bwd[1],
                 _ATTN.format(kind=kernel, phase="backward", arch=arch)),
        Constant(f"profile.{arch}.attention_seq_half", seq_half[0], "keys", seq_half[1],
                 _SEQ_HALF.format(kind=kernel, arch=arch)),
    ]
    if fa2 is not None:
        f_fwd, f_bwd, f_half, f_src = fa2
        out += [
            Constant(f"profile.{arch}.attention_fa2_fwd_efficiency", f_fwd, "fraction of peak", f_src,
                     _ATTN.format(kind="FlashAttention-2 (attention_kernel flash2)", phase="forward", arch=arch)),
            Constant(f"profile.{arch}.attention_fa2_bwd_efficiency", f_bwd, "fraction of peak", f_src,
                     _ATTN.format(kind="FlashAttention-2 (attention_kernel flash2)", phase="backward", arch=arch)),
            Constant(f"profile.{arch}.attention_fa2_seq_half", f_half, "keys",
                     "assumed: as on Ampere, whose best kernel is the same FlashAttention-2",
                     _SEQ_HALF.format(kind="FlashAttention-2", arch=arch)),
        ]
    out += [
        Constant(f"profile.{arch}.memory_efficiency", mem[0], "fraction of bandwidth", mem[1], _MEM.format(arch=arch)),
        Constant(f"profile.{arch}.nvlink_efficiency", nvlink[0], "fraction of bandwidth", nvlink[1],
                 _NVLINK.format(arch=arch)),
        Constant(f"profile.{arch}.nic_efficiency", nic[0], "fraction of bandwidth", nic[1], _NIC.format(arch=arch)),
    ]
    return out


_PROFILES: list[Constant] = [
    *_profile(
        "ampere",
        _gemm("ampere", {"bf16": 0.80, "fp16": 0.80, "fp8": 0.80, "fp32": 0.85, "tf32": 0.75}, {
            "bf16": _CUBLAS_A100, "fp16": _CUBLAS_A100,
            "fp8": "A100 has no FP8 tensor cores: an FP8 plan runs at the BF16 peak (GPUSpec.peak falls back), "
                   "so the BF16 figure (" + _CUBLAS_A100 + ")",
            "fp32": "assumed: FP32 GEMMs run on the SIMT units, which cuBLAS keeps busier than tensor cores; "
                    "no measurement at hand",
            "tf32": "assumed: a little below BF16 (TF32 operands are twice as wide); no measurement at hand"}),
        wave=(1.0, "NVIDIA Matrix Multiplication Background guide (DU-09799-001) Sec. 3.2, wave quantization: "
                   "a GEMM whose tiles do not fill whole waves of SMs idles the rest of the last wave"),
        k_half=(128, "assumed: half Hopper's (fill/drain and epilogue amortised over K weigh less on tensor "
                     "cores ~3x slower per SM); not measured on an A100"),
        gemm_fixed=(0.0, "Azure/AI-benchmarking-guide ND A100 v4 cuBLASLt FP16 (10,000 warm-ups): with these shape "
                         "terms 1024^3 (119.4 TFLOP/s, 18.0 us) leaves 0.8 us per kernel beyond the work, within "
                         "the launch gap the pricing already adds (host.kernel_gap_s); no A100 measurement in "
                         "shared/calibration to fit Hopper's procedure (benchmarks/gemm_shape_fit.py) on"),
        fwd=(0.72, _FA2_A100), bwd=(0.60, _FA2_A100),
        seq_half=(512, "assumed: half Hopper's, as FlashAttention-2 on A100 saturates at shorter rows than "
                       "FA3's warp-specialised pipeline (Dao 2023 Fig. 4-6 show the rise with sequence length)"),
        mem=(0.86, "assumed: " + _STREAM + "; no A100 measurement at hand"),
        nvlink=(0.78, _NCCL_A100), nic=(0.92, _NCCL_IB)),
    *_profile(
        "hopper",
        _gemm("hopper", {"bf16": 0.72, "fp16": 0.72, "fp8": 0.60, "fp32": 0.80, "tf32": 0.68}, {
            "bf16": _H100_GEMM, "fp16": _H100_GEMM, "fp8": _H100_FP8,
            "fp32": "assumed: FP32 GEMMs run on the SIMT units, which cuBLAS keeps busier than tensor cores; "
                    "no measurement at hand",
            "tf32": "assumed: a little below BF16 (TF32 operands are twice as wide); no measurement at hand"}),
        wave=(0.5, "assumed: Hopper's persistent / stream-K cuBLAS kernels recover about half of the last "
                   "wave's tail (the tail: Matrix Multiplication Background guide Sec. 3.2; the half is not measured)"),
        k_half=(272, _H100_K_HALF), gemm_fixed=(3.8e-6, _H100_GEMM_FIXED),
        fwd=(0.70, _FA3_H100), bwd=(0.58, _FA3_H100),
        seq_half=(1024, "Shah et al. 2024 (arXiv 2407.08608) Fig. 5-7: FA3 causal, head dim 128 runs ~420-500 "
                        "TFLOP/s at 2K keys and ~600-660 at 8K-16K; 0.70 x 989 x s/(s + 1024) gives 461 and 651"),
        fa2=(0.36, 0.31, 512, _FA2_H100),
        mem=(0.88, _H100_COPY), nvlink=(0.81, _NCCL_H100), nic=(0.93, _NCCL_IB)),
    *_profile(
        "blackwell",
        _gemm("blackwell", {"bf16": 0.63, "fp16": 0.63, "fp8": 0.60, "fp4": 0.60, "fp32": 0.80,
                            "tf32": round(0.68 * _BW_GEMM_RATIO, 3)}, {
            "bf16": _BLACKWELL_BF16, "fp16": _BLACKWELL_BF16, "fp8": _BLACKWELL_FP8, "fp4": _BLACKWELL_FP4,
            "fp32": "assumed: Hopper's figure (FP32 GEMMs run on the SIMT units; no measurement at hand)",
            "tf32": "assumed: Hopper's 0.68 (itself assumed) x 0.875, the measured Blackwell/Hopper sustained "
                    "tensor-core ratio (" + _AZURE_GB200 + ")"}),
        wave=(0.5, _BLACKWELL_SHAPE), k_half=(256, _BLACKWELL_SHAPE),
        gemm_fixed=(0.0, "Azure/AI-benchmarking-guide ND GB200 v6 cuBLASLt FP8 (10,000 warm-ups) with these shape "
                         "terms: 2048^3 (2,244 TFLOP/s, 7.7 us) leaves 0.7 us per kernel beyond the work, within "
                         "the launch gap the pricing already adds (host.kernel_gap_s); 1024^3 and 1024x2145x1024 "
                         "leave 2-3 us"),
        fwd=(0.60, _BLACKWELL_ATTN), bwd=(0.48, _BLACKWELL_ATTN), seq_half=(1024, _BLACKWELL_SEQ_HALF),
        fa2=(round(0.36 * 0.449, 3), round(0.31 * 0.449, 3), 512, _BLACKWELL_FA2),
        mem=(0.88, _BLACKWELL_MEM), nvlink=(0.755, _BLACKWELL_NVLINK), nic=(0.93, _BLACKWELL_NIC)),
    *_profile(
        "cdna",
        _gemm("cdna", {"bf16": 0.54, "fp16": 0.50, "fp8": 0.48, "fp32": 0.7, "tf32": 0.5}, {
            "bf16": _CDNA_BF16, "fp16": _CDNA_FP16, "fp8": _CDNA_FP8, "fp32": _CDNA, "tf32": _CDNA}),
        wave=(1.0, "assumed: the whole tail of the last wave (no stream-K assumed in hipBLASLt)"),
        k_half=(272, _CDNA_ASSUMED + "; was 48, which priced short-K GEMMs above Hopper's K/(K + K_half)"),
        gemm_fixed=(3.8e-6, _CDNA_ASSUMED),
        fwd=(0.40, _CDNA), bwd=(0.30, _CDNA),
        seq_half=(1024, _CDNA_ASSUMED + "; was 256, which priced short rows above Hopper's s/(s + 1024)"),
        mem=(0.74, _CDNA_MEM), nvlink=(0.71, _CDNA_XGMI),
        nic=(0.90, "assumed: the low end of " + _NCCL_IB + " for RCCL")),
]

_TILE_SOURCE = ("assumed: the relative efficiencies are not measured; the tile shapes, and larger tiles running "
                "more efficiently, from NVIDIA's Matrix Multiplication Background guide (DU-09799-001) Sec. 2.3")
_TILE_PRICES = "GEMM time: efficiency of the {m}x{n} output tile; each GEMM takes its best tile"

_COMPUTE: list[Constant] = [
    Constant("gemm_tile_efficiency.256x128", 1.0, "fraction", _TILE_SOURCE, _TILE_PRICES.format(m=256, n=128)),
    Constant("gemm_tile_efficiency.128x256", 1.0, "fraction", _TILE_SOURCE, _TILE_PRICES.format(m=128, n=256)),
    Constant("gemm_tile_efficiency.128x128", 0.92, "fraction", _TILE_SOURCE, _TILE_PRICES.format(m=128, n=128)),
    Constant("gemm_tile_efficiency.64x128", 0.78, "fraction", _TILE_SOURCE, _TILE_PRICES.format(m=64, n=128)),
    Constant("gemm_tile_efficiency.64x64", 0.6, "fraction", _TILE_SOURCE, _TILE_PRICES.format(m=64, n=64)),
    Constant("gemm.tp_overlap_compute_streams", 3, "streams",
             "Transformer Engine comm_gemm_overlap.h '#define NVTE_COMM_OVERLAP_MAX_STREAMS 3' (the default "
             "num_max_streams of CommOverlapBase/CommOverlapP2PBase); common/comm_gemm_overlap/"
             "comm_gemm_overlap.cpp issues the tp chunk GEMMs of a split/ring-exchange overlap round-robin on "
             "_stream_compute[i % _stream_compute.size()]",
             "GEMM time: under TP communication overlap a layer GEMM's tp chunk GEMMs run on this many streams, "
             "so one chunk's fill overlaps another's drain: the fixed time (profile.<arch>.gemm_fixed_s) is "
             "paid ceil(chunks / streams) times"),
    Constant("attention.query_tile_rows", 128, "rows",
             "FlashAttention-2 forward at head dim 128 runs blocks of kBlockM = 128 query rows, one thread "
             "block per (batch, head, query tile) (Dao-AILab/flash-attention flash_fwd_launch_template.h)",
             "attention time: blocks = batch x heads x ceil(queries / 128); fewer blocks than SMs idle the rest"),
    Constant("attention.reference_head_dim", 128, "elements",
             "the head dim of the published efficiencies (Dao 2023 Fig. 4-6; Shah et al. 2024 Fig. 5-7)",
             "attention time: head dims below it run slower, (d / 128)^exponent"),
    Constant("attention.head_dim_exponent", 0.5, "exponent",
             "Shah et al. 2024 (arXiv 2407.08608) Fig. 5, forward at 16K keys: head dim 64 runs at 0.73 of head "
             "dim 128 with FA3 (473 vs 648 TFLOP/s) and 0.81 with FA2 (299 vs 370); (64/128)^0.5 = 0.71",
             "attention time: efficiency x min(1, d / 128)^0.5 for head dim d"),
    Constant("attention.torch_sdpa_flash_forward_factor", round(329.5 / 368, 3), "ratio",
             "pytorch/pytorch#142132 (torch nightly 2.6.0.dev20241204, H100, tritonbench flash_attention at "
             "(batch 1, heads 24, 4608 keys, head dim 128)): torch SDPA with its default backend, flash (PyTorch's "
             "own build of FlashAttention-2, aten/src/ATen/native/transformers/cuda/flash_attn, not cuDNN: 'This is "
             "expected', the maintainer's answer there) runs 329.5 TFLOP/s forward where FA3 runs 631.8 on the same GPU, "
             "FA3's published speed at 4K (Shah et al. 2024, arXiv 2407.08608, Fig. 5: 638), so the GPU ran at full "
             "clock; Dao-AILab's FlashAttention-2 in that figure runs 368 at 4K, the source of the Hopper "
             "attention_fa2 efficiencies: 329.5 / 368",
             "attention time: the FlashAttention-2 efficiency (profile attention_fa2_fwd_efficiency) of a stack "
             "that calls torch SDPA (FrameworkProfile.attention_sdpa: torchtitan), forward and recomputation"),
    Constant("attention.triton_flash1_factor", 0.5, "ratio",
             "Dao 2023 (FlashAttention-2, arXiv 2307.08691), abstract: FlashAttention (the first version) reaches "
             "'only 25-40% of the theoretical maximum FLOPs/s' and FlashAttention-2 yields 'around 2x speedup "
             "compared to FlashAttention, reaching 50-73%' on A100; the Triton port of FlashAttention that "
             "llm-foundry runs for attn_impl 'triton' (llmfoundry/models/layers/flash_attn_triton.py, copied from "
             "HazyResearch/flash-attention flash_attn/flash_attn_triton.py @eff9fe6, on triton_pre_mlir) says of "
             "itself: 'Triton forward is generally faster than CUDA forward, while Triton backward is generally "
             "slower than CUDA backward. Overall Triton forward + backward is slightly slower than CUDA forward + "
             "backward', i.e. FlashAttention-1 class: 1/2 of FlashAttention-2's speed, forward and backward alike "
             "(the split between them is not published; 'slightly slower' is not counted). Assumed to carry to "
             "H100, where neither kernel uses Hopper's wgmma/TMA",
             "attention time: the FlashAttention-2 efficiency (the profile's attention_fa2_*_efficiency, on Ampere "
             "its attention_*_efficiency) of a stack that runs the Triton FlashAttention "
             "(FrameworkProfile.attention_triton: llm-foundry-triton, llm-foundry's attn_impl 'triton')"),
    Constant("attention.torch_sdpa_flash_backward_factor", round(329.5 / 368 * (245.5 / 300.6) / (310 / 368), 3),
             "ratio",
             "the forward factor (attention.torch_sdpa_flash_forward_factor) times SDPA flash's backward/forward "
             "speed over Dao-AILab FlashAttention-2's: pytorch/pytorch#128888 (H100, batch 1, 16 heads, 4096 "
             "keys, head dim 128, non-causal, SDPBackend.FLASH_ATTENTION) measures 457.1 us forward and 1,399 us "
             "backward, 300.6 and 245.5 TFLOP/s with the backward's 2.5x FLOPs (ratio 0.817); Shah et al. 2024 "
             "(H100 80GB SXM5, head dim 128, 4K keys), FlashAttention-2: 368 forward (Fig. 5), 310 backward (its "
             "backward-speed figure), ratio 0.842",
             "attention time: the FlashAttention-2 backward efficiency (profile attention_fa2_bwd_efficiency) of a "
             "stack that calls torch SDPA (FrameworkProfile.attention_sdpa: torchtitan)"),
    Constant("optimizer.kernels", 4, "kernels",
             "assumed: the fused multi-tensor Adam (apex / torch foreach) launches a handful of kernels for the "
             "whole step, not one per tensor",
             "optimizer time: launch-bound floor (kernels x CPU dispatch) and inter-kernel gaps of the step"),
]

_ATEN_OP = ("pytorch/pytorch#41383: ~7 us per elementwise op issued from Python with autograd recording "
             "(~5 us without; 'approx half of it is python parsing overhead'); flagos-ai/FlagGems#4812 measures "
             "~7 us per eager pointwise op on a tiny CUDA tensor, kernel launch included")
_AUTOGRAD_FN = ("pytorch/pytorch#189573: a Python torch.autograd.Function adds ~17 us per apply over a direct "
                "op call (20.7 vs 3.2 us median, 13 inputs)")
_HOST_PRICES = ("host time of one kernel launch, {phase}: a phase of a layer takes max(GPU time, host time) as "
                "the stream runs (host issues ahead of the GPU; a kernel cannot start before it is issued)")

_HOST: list[Constant] = [
    Constant("host.megatron_forward_per_kernel_s", 35e-6, "s",
             "derived from a count of the host operations of one Megatron GPT layer forward "
             "(ParallelTransformerLayer, Megatron-LM and Megatron-DeepSpeed): its ~15 kernels are issued by "
             "~60 aten calls (the kernels' ops plus views, transposes, splits, the CUDA RNG-tracker state "
             "get/set around each dropout) at ~7 us each and ~8 Python autograd.Function applies (fused "
             "layer norm, linear with gradient accumulation, TP region copies, fused softmax, bias-GeLU) at "
             "~17 us: (60 x 7 + 8 x 17) / 15 = 37 us per kernel. " + _ATEN_OP + "; " + _AUTOGRAD_FN,
             _HOST_PRICES.format(phase="forward and recomputation, Megatron-style Python modules")),
    Constant("host.torch_forward_per_kernel_s", 15e-6, "s",
             "derived: plain nn.Module code (torchtitan, nanoGPT-style) issues about two aten calls per kernel "
             "(the op and a view/transpose/cast) and no Python autograd.Function: 2 x 7 us. " + _ATEN_OP,
             _HOST_PRICES.format(phase="forward and recomputation, eager PyTorch modules")),
    Constant("host.compiled_per_kernel_s", 8e-6, "s",
             "assumed: torch.compile (Inductor, no CUDA graphs) launches each fused Triton kernel from "
             "generated Python wrapper code, one call per kernel with no dispatcher or autograd recording: "
             "about one aten op's cost (" + _ATEN_OP + ")",
             _HOST_PRICES.format(phase="compiled forward and backward")),
    Constant("host.backward_per_kernel_s", 10e-6, "s",
             "derived: the backward runs in the C++ autograd engine, one node per op at about an aten call "
             "without its Python half (~4 us, " + _ATEN_OP + "), plus the Python backward of the "
             "autograd.Functions Megatron-style code uses (" + _AUTOGRAD_FN + ") for about a third of its "
             "kernels: ~4 + 17/3 = 10 us",
             _HOST_PRICES.format(phase="backward, Megatron-style modules")),
    Constant("host.torch_backward_per_kernel_s", 5e-6, "s",
             "derived: the C++ autograd engine, one node per kernel at about an aten call without its Python "
             "half (" + _ATEN_OP + ")",
             _HOST_PRICES.format(phase="backward, eager PyTorch modules")),
    Constant("host.deepspeed_forward_per_kernel_s", 80e-6, "s",
             "fitted: the megatron-deepspeed profile's host time per forward kernel, fitted (framework "
             "fields only; hardware efficiencies left at their shipped values) to the 1,440 measured "
             "Megatron-DeepSpeed iterations of vTrain (Bang et al., MICRO 2024; VIA-Research/vTrain "
             "data/ground_truth_single.csv, data/validation/vtrain_single_node.csv): their pp = 1 rows "
             "take 3.3-3.6 ms per layer per micro-batch at micro-batch 1 whatever the hidden size (1024 or "
             "2048) and tp (1, 2, 4): a host-bound floor ~2.3x Megatron's derived figure "
             "(host.megatron_forward_per_kernel_s); benchmarks/vtrain_residuals.py prints it. "
             "`calibrate --from-runs` fits it as megatron-deepspeed.cpu_dispatch_s. Not out of sample: "
             "no other data set runs this stack",
             _HOST_PRICES.format(phase="forward and recomputation, Megatron-DeepSpeed")),
    Constant("host.deepspeed_backward_per_kernel_s", 40e-6, "s",
             "fitted with host.deepspeed_forward_per_kernel_s on the same 1,440 vTrain runs: the pair "
             "80/40 us has the lowest MAPE (6.5%) of a grid of forward 60-100 us x backward 10-40 us (and of "
             "75-80/50, 70/60 us); fitted "
             "on half of the rows (hidden 1024, 2 and 4 GPUs, or 12-16 layers) the grid picks 80/40 or 85/20 "
             "and the other half's MAPE is 5-9% (tp 1-2 -> tp 4-8: 12%). 4x host.backward_per_kernel_s. "
             "Not in `calibrate --from-runs`' parameter set (it fits cpu_dispatch_s and *_overhead_s only)",
             _HOST_PRICES.format(phase="backward, Megatron-DeepSpeed")),
    Constant("host.collective_launch_s", 30e-6, "s",
             "assumed: a torch.distributed collective from Python (c10d wrapper, ProcessGroupNCCL work object, "
             "two CUDA event records and a stream wait, the NCCL enqueue) costs a few aten calls (" + _ATEN_OP
             + ") plus the autograd.Function around Megatron's TP regions (" + _AUTOGRAD_FN + ")",
             "host time of one collective launch inside a layer (TP, EP): counts toward the phase's host time"),
    Constant("host.megatron_microbatch_overhead_s", 0.5e-3, "s",
             "assumed: per micro-batch Megatron's get_batch broadcasts the batch over the TP group and reads the "
             "sizes back (megatron/core/tensor_parallel/data.py _build_key_size_numel_dictionaries: "
             "sizes_cuda.cpu(), a host-device synchronization that drains the launch queue), builds the "
             "attention mask and position ids, and runs the schedule's Python (forward_step, loss_func); "
             "about 70 aten-call equivalents (" + _ATEN_OP + "), not measured",
             "step time: host time per micro-batch and pipeline stage outside the layers (breakdown 'other')"),
    Constant("host.deepspeed_microbatch_overhead_s", 1.0e-3, "s",
             "assumed: Megatron-DeepSpeed runs every model through DeepSpeed's PipelineEngine, even at pp = 1 "
             "(deepspeedai/Megatron-DeepSpeed#6 'use pp engine even for pp=1'), whose Python interpreter "
             "executes ~4-6 instructions per micro-batch (LoadMicroBatch, ForwardPass, BackwardPass, sends and "
             "receives) on top of Megatron's get_batch with its host-device synchronization "
             "(host.megatron_microbatch_overhead_s): about twice Megatron's, not measured",
             "step time: host time per micro-batch and pipeline stage outside the layers (breakdown 'other')"),
    Constant("host.torch_microbatch_overhead_s", 0.2e-3, "s",
             "assumed: a plain PyTorch training loop's per-micro-batch Python (batch to device, loss, "
             "backward call), ~30 aten-call equivalents (" + _ATEN_OP + "), not measured",
             "step time: host time per micro-batch outside the layers (breakdown 'other')"),
    Constant("host.kernel_gap_s", 1e-6, "s",
             "assumed: ~1 us between back-to-back kernels of one stream on a busy queue (launch latency the "
             "queue hides only partly); not measured here",
             "compute time: added to every kernel of fused stacks (Megatron, NeMo, DeepSpeed, compiled PyTorch)"),
    Constant("host.kernel_gap_torchtitan_s", 1.5e-6, "s",
             "assumed: between the fused stacks' and eager PyTorch's gap (torchtitan runs eager blocks under FSDP2 "
             "hooks); not measured here",
             "compute time: added to every kernel of torchtitan"),
    Constant("host.kernel_gap_eager_s", 2e-6, "s",
             "assumed: twice the fused stacks' gap for eager PyTorch's short, dependent elementwise kernels; not "
             "measured here",
             "compute time: added to every kernel of eager PyTorch"),
    Constant("memory.base_bytes", 1.5e9, "bytes",
             "assumed: CUDA context (~0.5 GB), cuBLAS/cuDNN/Transformer Engine workspaces and NCCL buffers of a "
             "Megatron-style stack (~1 GB); no measurement at hand",
             "memory: 'other' of every rank (Megatron, NeMo, DeepSpeed, torchtitan)"),
    Constant("memory.base_bytes_plain_torch", 0.6e9, "bytes",
             "assumed: CUDA context and cuBLAS workspace of plain PyTorch without Transformer Engine or large NCCL "
             "buffers; no measurement at hand",
             "memory: 'other' of every rank (pytorch-eager, pytorch-compile)"),
    Constant("memory.allocator_overhead", 0.05, "fraction",
             "assumed: fragmentation of PyTorch's caching allocator under the varied tensor sizes of pipeline and "
             "TP stacks, a fraction of the tensors held; no measurement at hand",
             "memory: 'other' += this x (activations + weights + gradients; activations only where weights "
             "and gradients sit in contiguous buffers allocated once, as Megatron-Core's)"),
    Constant("memory.allocator_overhead_plain_torch", 0.03, "fraction",
             "assumed: less fragmentation for one model replica without pipeline buffers; no measurement at hand",
             "memory: 'other' += this x (activations + weights + gradients), plain PyTorch"),
]

_ALIGN = ("NVIDIA Matrix Multiplication Background guide (DU-09799-001) Sec. 2.2, Tensor Core requirements: "
          "with cuBLAS 11+ Tensor Cores run any size, but most efficiently when the dimensions that are "
          "leading dimensions are multiples of 16 bytes (8 FP16/BF16 elements); smaller alignments fall to "
          "kernels with narrower loads")

_GEMM_ALIGN: list[Constant] = [
    Constant("gemm.alignment_bytes", 16, "bytes", _ALIGN,
             "GEMM time: a GEMM whose leading dimensions (k and n; m and n for a weight gradient) are not "
             "multiples of this many bytes runs at gemm.unaligned_efficiency"),
    Constant("gemm.unaligned_efficiency", 0.5, "fraction",
             "derived: padding GPT-2's vocabulary from 50,257 to 50,304 made nanoGPT ~25% faster (Karpathy, "
             "x.com/karpathy/status/1621578354024677377; nanoGPT model.py GPTConfig: 'padded up to nearest "
             "multiple of 64 for efficiency'); the LM head is ~27% of GPT-2 124M's FLOPs at 1,024 tokens "
             "(2 x 768 x 50,304 of 284 MFLOP per token), so it ran ~1.9-2.2x slower unaligned. " + _ALIGN,
             "GEMM time: efficiency multiplier of a GEMM with an unaligned leading dimension"),
]

_SCHEDULE: list[Constant] = [
    Constant("schedule.dp_bucket_elements", 40e6, "elements",
             "Megatron-Core DistributedDataParallelConfig.bucket_size: default max(40M, 1M x dp) parameters "
             "(megatron/core/distributed/distributed_data_parallel_config.py); the 1M x dp term is "
             "schedule.dp_bucket_elements_per_dp_rank",
             "exposed DP time: the last gradient bucket's reduction starts when the backward ends, never hidden"),
    Constant("schedule.dp_bucket_elements_per_dp_rank", 1e6, "elements",
             "Megatron-Core DistributedDataParallel default bucket_size = max(40000000, 1000000 * "
             "data_parallel_world_size), 'if using very large dp_sizes, make buckets larger to ensure that "
             "chunks used in NCCL ring-reduce implementations are large enough to remain bandwidth-bound' "
             "(megatron/core/distributed/distributed_data_parallel.py, core_r0.8.0)",
             "exposed DP time: the last gradient bucket (and the first parameter-gather bucket) grows with dp"),
    Constant("schedule.fsdp_prefetch_units", 1, "units",
             "PyTorch FSDP2 (torch.distributed.fsdp.fully_shard) prefetches the next unit's all-gather while "
             "the current unit computes (implicit prefetching, one unit ahead; FSDP1 backward_prefetch="
             "BACKWARD_PRE likewise one); DeepSpeed ZeRO-3 prefetches parameter groups up to "
             "stage3_prefetch_bucket_size, taken as one unit",
             "exposed FSDP time: a unit's collectives hide under this many units' compute"),
    Constant("schedule.overlap_compute_slowdown", 0.189, "fraction",
             "arXiv 2507.03114 (Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed "
             "Deep Learning, 2025), abstract: overlapping computation with communication slows the "
             "computation by 18.9% on average (40.0% at most) against running it alone, over GPT and LLaMA "
             "training on 4 A100s, H100s, MI250s and MI210s; NCCL kernels take SMs (NCCL_MIN/MAX_NCHANNELS "
             "blocks) and HBM bandwidth from the GEMMs beside them",
             "compute slowed by overlapped NCCL collectives: each second of DP reduction, parameter gather, "
             "FSDP gather/reduce-scatter or CP ring exchange hidden under compute adds this many seconds "
             "(counted in dp_comm or cp_comm)"),
    Constant("schedule.dualpipe_comm_sms", 20, "SMs",
             "DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.2.1/3.2.2: the dispatch and combine "
             "all-to-all kernels of DualPipe's overlapped forward-backward chunk pairs run on 20 of the H800's "
             "132 SMs ('only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink')",
             "DualPipe: while an all-to-all overlaps the other micro-batch's compute, that compute runs on the "
             "GPU's other SMs (slowed by 20/sm_count of the overlapped time)"),
    Constant("schedule.deepep_comm_sms", 20, "SMs",
             "Megatron-Core TransformerConfig.moe_deepep_num_sms = 20 ('Number of SMs to use for DeepEP'; "
             "megatron/core/transformer/transformer_config.py, core_r0.15 as pinned by Megatron-Bridge v0.2.0, "
             "unchanged in the core_r0.16 of v0.3.0); the same 20 SMs DeepSeek-V3 Sec. 3.2.2 gives its kernels",
             "EP all-to-all overlap (Megatron-Core --overlap-moe-expert-parallel-comm) with the deepep dispatcher: "
             "the compute beside an overlapped dispatch/combine runs on the GPU's other SMs"),
    Constant("schedule.nccl_a2a_comm_sms", 32, "SMs",
             "NCCL runs a send/recv (all-to-all) on p2pnChannels = min(nChannels, NCCL_MAX_P2P_NCHANNELS) "
             "channels, one CTA (thread block, i.e. one SM) each (NVIDIA/nccl src/graph/paths.cc "
             "ncclTopoComputeP2pChannels); assumed: 32 channels on an 8-GPU NVSwitch node with a NIC per GPU "
             "(MAXCHANNELS 32 of the NCCL 2.2x releases; the '32 p2p channels' NCCL's init log reports on such "
             "nodes), not a measurement of these runs",
             "EP all-to-all overlap (Megatron-Core --overlap-moe-expert-parallel-comm) with the alltoall "
             "(NCCL) dispatcher: the compute beside an overlapped dispatch/combine runs on the GPU's other SMs"),
]

_ALLOC = "PyTorch c10/cuda/CUDACachingAllocator.cpp (the CUDA caching allocator): "

_MEMORY: list[Constant] = [
    Constant("memory.adam_bytes_per_param_with_master", 12, "bytes/parameter",
             "Rajbhandari et al. 2019 (ZeRO, arXiv 1910.02054) Sec. 3.1: mixed-precision Adam keeps fp32 "
             "master weights, momentum and variance, K = 12 bytes per parameter",
             "memory: optimizer states when the optimizer holds the fp32 master copy (Megatron, DeepSpeed)"),
    Constant("memory.adam_bytes_per_param_without_master", 8, "bytes/parameter",
             "Adam's fp32 momentum and variance (Rajbhandari et al. 2019 Sec. 3.1, without the master copy): "
             "fp32 weights used through autocast (PyTorch AMP, FSDP2 with fp32 sharded parameters)",
             "memory: optimizer states when the weights themselves are fp32"),
    Constant("memory.adam_bytes_per_param_bf16_moments", 8, "bytes/parameter",
             "DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.3.3: AdamW's first and second moments "
             "tracked in BF16 while the master weights (and the accumulated gradients) stay FP32: 4 + 2 + 2 "
             "bytes per parameter",
             "memory: optimizer states of a stack that keeps BF16 Adam moments (hai-llm)"),
    Constant("memory.adam_bytes_per_param_bf16_moments_without_master", 4, "bytes/parameter",
             "torch.optim.Adam on bf16 parameters (NeMo AutoModel: the model cast to bfloat16, "
             "nemo_automodel/components/models/qwen3_moe/model.py initialize_weights self.to(dtype), and the "
             "benchmark configs' optimizer torch.optim.Adam): exp_avg and exp_avg_sq are zeros_like(param), "
             "bf16, and no master copy is kept (torch/optim/adam.py _init_group): 2 + 2 bytes per parameter",
             "memory: optimizer states of a plan with master_weights=0 and adam_moments_dtype=bf16"),
    Constant("memory.bf16_master_bytes_per_param", 2, "bytes/parameter",
             "apex DistributedFusedAdam (apex/contrib/optimizers/distributed_fused_adam.py, StateBucket: "
             "'self.params_shard = torch.zeros([shard_size], dtype=self.dtype)', dtype = 'datatype for "
             "optimizer state'); NeMo 1.x sets store_params=True when fp8_params is on "
             "(nemo/collections/nlp/models/language_modeling/megatron_base_model.py setup_optimization@v2.0.0), "
             "so with optim.dtype bf16 the master copy is a bf16 shard: 2 bytes per parameter beside the moments",
             "memory: optimizer states of a plan with master_weights_dtype=bf16 (added to the moments' bytes)"),
    Constant("memory.fp8_param_bytes_per_param", 2, "bytes/parameter",
             "Megatron-Core fp8_param_gather (Megatron-Bridge bf16_with_mxfp8_mixed / "
             "bf16_with_fp8_current_scaling_mixed set it, src/megatron/bridge/training/mixed_precision.py@v0.2.0): "
             "the GEMM weights are Transformer Engine FP8 tensors with no 16-bit copy (param_and_grad_buffer.py "
             "core_r0.15: FP8 params map into a uint8 buffer; with MXFP8, reuse_grad_buf_for_mxfp8_param_ag "
             "all-gathers into the gradient buffer, no parameter buffer at all); the backward's GEMMs need the "
             "other layout as well (Hopper: the FP8 transpose; Blackwell MXFP8: the columnwise copy, with one "
             "E8M0 scale per 32 elements), held between forward and backward: 1 + 1 bytes per parameter "
             "(MXFP8's 2/32 bytes of scales left out)",
             "memory: weights of FP8-parameter plans (fp8_params), in place of 16-bit weights and the FP8 cache"),
    Constant("memory.fp8_param_gather_bytes_per_param", 1, "bytes/parameter",
             "Megatron-Core fp8_param_gather: the distributed optimizer's parameter all-gather moves the FP8 "
             "GEMM weights as they are stored, one byte each (param_and_grad_buffer.py core_r0.15: FP8 params "
             "map into a uint8 buffer, and the bucket's all-gather runs over that buffer); the other layout "
             "(memory.fp8_param_bytes_per_param) is made locally after the gather, and the embedding, output "
             "layer and norms, not Transformer Engine FP8 modules, are gathered in 16 bits",
             "dp time: the ZeRO-1/2 parameter all-gather of the GEMM weights of FP8-parameter plans (fp8_params)"),
    Constant("memory.te_fp8_saved_input_bytes_per_element", 1, "bytes/element",
             "Transformer Engine's FP8 Linear saves for its weight gradient the FP8 input it cast (or that "
             "input's FP8 transpose), not the 16-bit one: transformer_engine/pytorch/module/linear.py "
             "_Linear.forward, 'if fp8 and not ...override_linear_precision.wgrad: saved_inputmat = inputmat "
             "(FP8) / saved_inputmat_t = inputmat_t', the 16-bit inputmat_no_fp8 saved only without FP8 "
             "(LayerNormLinear and GroupedLinear alike); per-tensor scaling: one FP32 scale per tensor",
             "memory: the GEMM inputs a Transformer Engine stack keeps under FP8 (delayed / current scaling)"),
    Constant("memory.te_mxfp8_saved_input_bytes_per_element", 1 + 1 / 32, "bytes/element",
             "as memory.te_fp8_saved_input_bytes_per_element, with MXFP8 (Blackwell): the columnwise FP8 copy "
             "the weight-gradient GEMM reads, with one E8M0 (1-byte) scale per 32-element block (OCP "
             "Microscaling Formats v1.0, block size 32)",
             "memory: the GEMM inputs a Transformer Engine stack keeps under MXFP8"),
    Constant("memory.fp8_cache_bytes_per_element", 1 + 4 / 128, "bytes/element",
             "DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.3.2/3.3.3: activations cached for the "
             "backward in FP8 (1 byte) with fine-grained 1x128 tile scaling, one FP32 scale (4 bytes) per "
             "128 elements",
             "memory: activations a stack caches in FP8 (hai-llm's Linear inputs and SwiGLU inputs)"),
    Constant("memory.e5m6_cache_bytes_per_element", 1.5, "bytes/element",
             "DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.3.3: the inputs of the Linear after "
             "attention are cached in the customized E5M6 format (1 sign + 5 exponent + 6 mantissa bits = "
             "12 bits)",
             "memory: the attention output a stack caches in E5M6 (hai-llm)"),
    Constant("memory.fp8_weight_cache_bytes_per_param", 1, "bytes/parameter",
             "Transformer Engine keeps an FP8 copy of each GEMM weight between the forward and the backward "
             "(TE fp8 weight caching); one byte per parameter of the rank",
             "memory: 'other' of FP8 plans"),
    Constant("memory.allocator.min_block_bytes", 512, "bytes",
             _ALLOC + "kMinBlockSize = 512 ('all sizes are rounded to at least 512 bytes')",
             "memory: reserved_bytes, every block rounded up to it"),
    Constant("memory.allocator.small_size_bytes", 1048576, "bytes",
             _ALLOC + "kSmallSize = 1 MiB ('largest \"small\" allocation is 1 MiB')",
             "memory: reserved_bytes, blocks up to it come from the small pool"),
    Constant("memory.allocator.small_buffer_bytes", 2097152, "bytes",
             _ALLOC + "kSmallBuffer = 2 MiB ('\"small\" allocations are packed in 2 MiB blocks'); also the "
             "small pool's page of an expandable segment",
             "memory: reserved_bytes, segment (page) of the small pool"),
    Constant("memory.allocator.large_buffer_bytes", 20971520, "bytes",
             _ALLOC + "kLargeBuffer = 20 MiB ('\"large\" allocations may be packed in 20 MiB blocks'); also the "
             "large pool's page of an expandable segment (segment_size = pool->is_small ? kSmallBuffer : "
             "kLargeBuffer)",
             "memory: reserved_bytes, segment of 1-10 MiB blocks, page of the large pool's expandable segment"),
    Constant("memory.allocator.min_large_alloc_bytes", 10485760, "bytes",
             _ALLOC + "kMinLargeAlloc = 10 MiB ('allocations between 1 and 10 MiB may use kLargeBuffer')",
             "memory: reserved_bytes, blocks from it up get a segment of their own"),
    Constant("memory.allocator.round_large_bytes", 2097152, "bytes",
             _ALLOC + "kRoundLarge = 2 MiB ('round up large allocations to 2 MiB')",
             "memory: reserved_bytes, a segment of its own is rounded up to it"),
    Constant("memory.loss_megatron_bytes_per_logit", 8, "bytes/logit",
             "Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py) on fp32 "
             "logits: an fp32 copy of the 16-bit logits, whose exp is normalised in place and saved as the "
             "softmax, and the fp32 gradient written into it in backward; the 16-bit logits beside it: "
             "4 + 4 bytes (unchanged figure of the model)",
             "memory: the loss peak of the last stage, unfused loss of Megatron-family stacks (one micro-batch)"),
    Constant("memory.loss_fused_bytes_per_logit", 2, "bytes/logit",
             "a fused cross-entropy reads the 16-bit logits once and writes their 16-bit gradient in place "
             "(no fp32 copy kept)",
             "memory: the loss peak of the last stage, fused loss (one micro-batch)"),
    Constant("memory.loss_torch_fp32_bytes_per_logit", 12, "bytes/logit",
             "torchtitan train.py loss_fn (pytorch/torchtitan@9dec370): F.cross_entropy(pred.flatten(0, 1)"
             ".float(), ...), 'del pred' before loss.backward(); log_softmax saves its fp32 output (4), "
             "nll_loss_backward writes a dense fp32 gradient (zeros + scatter, 4) and "
             "_log_softmax_backward_data a new fp32 gradient (4) while both live: 12 bytes per logit",
             "memory: the loss peak, F.cross_entropy on fp32 logits without TP (torchtitan)"),
    Constant("memory.loss_parallel_dtensor_bytes_per_logit", 16, "bytes/logit",
             "PyTorch torch/distributed/tensor/parallel/loss.py (loss_parallel, which torchtitan enables with "
             "TP): _log_softmax saves its fp32 output (4); _nll_loss_and_log_softmax_backward builds "
             "grad_input = zeros_like(x) (4), then (grad_input + exp(x)) (4 + 4) and its product with "
             "grad_output (4), grad_input still referenced: 16 bytes per local logit at its peak",
             "memory: the loss peak, DTensor loss parallel on fp32 logits (torchtitan with TP)"),
]

_WORKLOAD: list[Constant] = [
    Constant("attention.backward_flops_factor", 2.5, "ratio",
             "Dao 2023 (FlashAttention-2, arXiv 2307.08691): the backward runs 5 matmuls against the forward's "
             "2, 2.5x its FLOPs",
             "attention backward FLOPs"),
    Constant("attention.fused_softmax_batch_multiple", 4, "attention batches",
             "Megatron's FusedScaleMaskSoftmax.is_kernel_available runs the fused CUDA softmax only when "
             "attn_batches = micro-batch x heads per TP rank is a multiple of 4 (\"np * b must be divisor of 4\"; "
             "the causal kernel's batch_per_block is 4 at keys 128-4096), and otherwise forward_torch_softmax: "
             "megatron/model/fused_softmax.py of Megatron-LM (2021-22) and microsoft/Megatron-DeepSpeed "
             "(custom_kernel_constraint ... attn_batch_size % 4 == 0), megatron/core/fusions/fused_softmax.py",
             "attention time (unfused kernel): below it the softmax runs as PyTorch ops in fp32 (workload/"
             "transformer.py _attention_core)"),
]

_NETWORK: list[Constant] = [
    Constant("cluster.nodes_per_leaf", 32, "nodes",
             "NVIDIA DGX SuperPOD reference architecture (DGX A100 / H100): a scalable unit of 32 nodes "
             "under one rail of leaf switches",
             "collective time: a group spread over more nodes pays the fat-tree's oversubscription "
             "(default of ClusterSpec.nodes_per_leaf)"),
    Constant("cluster.intra_node_latency_s", 1.9e-6, "s",
             "NVIDIA/nccl src/graph/tuning.cc hwLatencies NVLINK: a ring step costs 1.9 us with LL128 "
             "(default of ClusterSpec.intra_node_latency_s)",
             "collective latency: a ring step on NVLink with LL128; a cluster's larger figure adds the "
             "difference to every NVLink step of every protocol; pipeline p2p latency inside a node"),
    Constant("cluster.inter_node_latency_s", 4e-6, "s",
             "NVIDIA/nccl src/graph/tuning.cc hwLatencies NET: a ring step costs 4.0 us with LL128 on "
             "InfiniBand, whose net plugin adds no latency (net_ib props->latency = 0) "
             "(default of ClusterSpec.inter_node_latency_s)",
             "collective latency: a ring step on the network with LL128; a cluster's larger figure adds the "
             "difference to every network step (twice for Simple), as NCCL adds a net plugin's latency; "
             "pipeline p2p latency across nodes"),
    Constant("gpu.pcie_bandwidth_bytes_per_s", 32e9, "bytes/s",
             "PCIe 4.0 x16: 64 GB/s both ways, 32 GB/s each way (A100 datasheet); the default of a GPU preset "
             "that gives none",
             "collective time on a PCIe scale-up fabric (GPUSpec.pcie_bandwidth_bytes_per_s default)"),
]


# ---- collectives as NCCL prices them ---------------------------------------------------------------
_TUNING = ("NVIDIA/nccl src/graph/tuning.cc (commit 5067397c2676d5aed50042fc39e5c8ee96eb0027, 2026-06) "
           "ncclTunerConstantsDefaults")
_TUNING_MODEL = ("NVIDIA/nccl src/graph/tuning.cc (commit 5067397c2676d5aed50042fc39e5c8ee96eb0027) "
                 "ncclTopoTuneModel")
_NVLS = "NVIDIA/nccl src/transport/nvls.cc (commit 5067397c2676d5aed50042fc39e5c8ee96eb0027)"
_LAT = "collective latency: {what} of the {algo} algorithm with the {proto} protocol (NCCL's cost model)"
_PROTOS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}


def _nccl_latencies() -> list[Constant]:
    out = []
    tables = {
        "base": ({"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4), "pat": (None, None, 8.0),
                  "nvls": (None, None, 0.0), "nvls_tree": (None, None, 0.0),
                  "collnet_direct": (None, None, 0.0), "collnet_chain": (None, None, 0.0)},
                 "baseLatencies", "fixed cost per call"),
        "nvlink": ({"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0), "nvls": (None, None, 25.0),
                    "collnet_direct": (None, None, 3.7), "collnet_chain": (None, None, 2.8)},
                   "hwLatencies NVLINK", "cost per step on NVLink"),
        "net": ({"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0), "nvls_tree": (None, None, 20.9),
                 "pat": (None, None, 14.0), "nvls": (None, None, 18.0), "collnet_direct": (None, None, 31.0),
                 "collnet_chain": (None, None, 30.0)},
                "hwLatencies NET", "cost per step on the network"),
    }
    for tier, (table, label, what) in tables.items():
        for algo, vals in table.items():
            for proto, v in zip(_PROTOS, vals):
                if v is None:
                    continue
                out.append(Constant(f"nccl.latency.{tier}.{algo}.{proto}", v * 1e-6, "s",
                                    f"{_TUNING} {label}, {algo} {_PROTOS[proto]}: {v:g} us",
                                    _LAT.format(what=what, algo=algo, proto=_PROTOS[proto])))
    return out


_NCCL: list[Constant] = [
    *_nccl_latencies(),
    Constant("nccl.net_overhead_s", 1e-6, "s",
             _TUNING_MODEL + " getNetOverhead: 1 us per network post on x86 (Intel; AMD 2 us); assumed Intel, the "
             "DGX H100 host CPU",
             "collective latency: floor of a ring step inside a node when the ring also crosses the network"),
    Constant("nccl.net_overhead_simple_factor", 3, "ratio",
             _TUNING_MODEL + ": netOverhead *= 3 for the Simple protocol",
             "collective latency: the network post overhead of a Simple ring step"),
    Constant("nccl.ring_local_copy_bytes_per_byte", 2, "ratio",
             "NVIDIA/nccl v2.18.5-1 src/collectives/device/all_reduce.h runRing (all_gather.h, reduce_scatter.h "
             "alike): each loop one thread block per channel runs 2(n-1) steps that take their data from the ring's "
             "previous rank and one step that moves nothing over the link, one after the other: with P2P read "
             "(src/graph/paths.cc ncclTopoCheckP2p: 'Enable P2P Read for Ampere/NVLink only', compute capability "
             "8.0) the Simple FIFO sits on the sender (src/transport/p2p.cc: 'For P2P Read the SIMPLE buffer is "
             "tagged on the end of the ncclSendMem structure'), so step 0's prims.send copies the rank's chunk "
             "from its user buffer into its own memory; with P2P write the last step's recv copies the FIFO into "
             "the output. The copy reads each byte of the chunk once and writes it once; every rank does it at the "
             "same point of the lockstep ring, so the links wait for it",
             "collective time: a ring collective's one local copy per loop, its chunk (bytes / ranks in all) "
             "read and written at the GPU's memory bandwidth"),
    Constant("nccl.ring_simple_plateau", 1.4, "ratio",
             "NVIDIA/nccl src/graph/tuning.cc ncclTopoGetAlgoTime: 'Plateau effect of ring', latency x1.4 for a "
             "multi-node Simple ring all-reduce (compute capability 8.0 and above)",
             "collective latency: multi-node ring all-reduce with the Simple protocol"),
    Constant("nccl.ll_bandwidth_factor", 0.5, "ratio",
             _TUNING_MODEL + ": ring LL busBw * .5 (LL sends 8-byte lines of 4 bytes data, 4 bytes flag)",
             "collective bandwidth: LL protocol's share of the link bandwidth (ring)"),
    Constant("nccl.ll128_bandwidth_factor", 0.92, "ratio",
             _TUNING_MODEL + ": ring LL128 busBw * 0.92 (120 data bytes per 128-byte line)",
             "collective bandwidth: LL128 protocol's share of the link bandwidth (ring)"),
    Constant("nccl.ll_max_busbw.ampere", 87.7e9, "bytes/s", _TUNING + " llMaxBws Ampere-N1: 87.7 GB/s",
             "collective bandwidth: cap of the LL protocol's bus bandwidth inside one Ampere node"),
    Constant("nccl.ll_max_busbw.hopper", 141e9, "bytes/s", _TUNING + " llMaxBws Hopper-N1: 141 GB/s",
             "collective bandwidth: cap of the LL protocol's bus bandwidth inside one Hopper node"),
    Constant("nccl.ll_max_busbw.blackwell", 282e9, "bytes/s", _TUNING + " llMaxBws Blackwell-N1: 2 x 141 GB/s",
             "collective bandwidth: cap of the LL protocol's bus bandwidth inside one Blackwell node"),
    Constant("nccl.ll_max_busbw.net_2nodes", 39e9, "bytes/s",
             _TUNING + " llMaxBws Intel-N2: 39 GB/s (x86 Intel host assumed, as for nccl.net_overhead_s)",
             "collective bandwidth: cap of the LL protocol's bus bandwidth over two nodes"),
    Constant("nccl.ll_max_busbw.net_many", 20.4e9, "bytes/s",
             _TUNING + " llMaxBws Intel-N4: 20.4 GB/s (x86 Intel host assumed)",
             "collective bandwidth: cap of the LL protocol's bus bandwidth over three nodes or more"),
    Constant("nccl.tree_bandwidth_factor", 0.92, "ratio", _TUNING_MODEL + ": tree all-reduce busBw * .92",
             "collective bandwidth: tree all-reduce's share of the link bandwidth"),
    Constant("nccl.tree_ll_bandwidth_factor", 1 / 3.8, "ratio", _TUNING_MODEL + ": tree LL busBw * 1.0 / 3.8",
             "collective bandwidth: LL protocol's share with the tree algorithm"),
    Constant("nccl.tree_ll128_bandwidth_factor", 120 / 128, "ratio",
             _TUNING_MODEL + ": tree LL128 busBw * 120.0 / 128.0 across nodes",
             "collective bandwidth: LL128 protocol's share with the tree algorithm"),
    Constant("nccl.tree_correction_unit_bytes", 64, "bytes",
             "NVIDIA/nccl src/graph/tuning.cc (commit 5067397c) ncclTopoGetAlgoTime: logSize = log2i(nBytes >> 6), "
             "the treeCorrectionFactor column of a message ('Powers of two, 64 B to 256MB')",
             "collective time: which size column of NCCL's tree correction a message falls in"),
    *[Constant(f"nccl.tree_correction.{proto}.{i}", v, "ratio",
               "NVIDIA/nccl src/graph/tuning.cc (commit 5067397c, NCCL 2.30) treeCorrectionFactor, applied by "
               "ncclTopoGetAlgoTime to the tree all-reduce's bandwidth at log2(bytes / 64) < 23 ('Trees are not "
               f"perfectly sticking to the model for medium sizes'): {_PROTOS[proto]} at {64 << i} bytes",
               "collective time: tree all-reduce bandwidth at mid-size messages (NCCL's own correction of its "
               "tree model)")
      for proto, row in (("ll", (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
                                 1.0, 1.0, 1.0, 1.0)),
                         ("ll128", (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
                                    .9, .9, 1.0, 1.0)),
                         ("simple", (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
                                     .7, .8, .9, .9)))
      for i, v in enumerate(row)],
    Constant("nccl.pat_bandwidth_factor", 0.75, "ratio", _TUNING_MODEL + ": PAT busBw *= .75",
             "collective bandwidth: PAT (all-gather / reduce-scatter, one rank per node) against a ring"),
    Constant("nccl.pat_latency_per_rank_s", 2.8e-6, "s", _TUNING_MODEL + ": PAT latency + nRanks * 2.8 us",
             "collective latency: PAT's linear term per rank"),
    Constant("nccl.pat_log_latency_divisor", 3.5, "ratio",
             _TUNING_MODEL + ": PAT latency log2i(nNodes) * (interLat / 3.5)",
             "collective latency: PAT's per-level network latency, as a fraction of a network step"),
    Constant("nccl.nvls_allreduce_efficiency.hopper", 0.61, "fraction of link",
             "data/validation/nccl_tests.csv: NVLS all-reduce on one 8-GPU H100/H200 node plateaus at 477-480 GB/s "
             "bus bandwidth (dgxc-benchmarking v25.10 DGX H100; Azure ND H100 v5 and ND H200 v5, NVLS), i.e. "
             "480 / (2 x 7/8) = 274 GB/s algorithm bandwidth = 0.61 of NVLink 4's 450 GB/s per direction",
             "collective bandwidth: NVLink SHARP (NVLS) all-reduce algorithm bandwidth over the link peak"),
    Constant("nccl.nvls_allreduce_efficiency.blackwell", 0.53, "fraction of link",
             "assumed: Hopper's measured 0.61 scaled by NCCL's nvlsEfficiency Blackwell/Hopper 0.74/0.85 "
             "(tuning.cc); no Blackwell NVLS measurement at hand",
             "collective bandwidth: NVLink SHARP (NVLS) all-reduce algorithm bandwidth over the link peak"),
    Constant("nccl.nvls_channels.hopper", 16, "channels",
             _NVLS + " NVLS_NCHANNELS_SM90 16",
             "collective time: NVLS chunk lanes (channels x one head per GPU) on Hopper"),
    Constant("nccl.nvls_channels.blackwell_one_node", 24, "channels",
             _NVLS + " NVLS_NCHANNELS_SM100_NVL 24 (compute capability 10 and up, one node)",
             "collective time: NVLS chunk lanes on one Blackwell node"),
    Constant("nccl.nvls_channels.blackwell_many_nodes", 32, "channels",
             _NVLS + " NVLS_NCHANNELS_SM100 32 (compute capability 10 and up, several nodes; "
             "ncclNvlsTreeSm100Tuning may set 24)",
             "collective time: NVLS tree chunk lanes on Blackwell nodes"),
    Constant("nccl.nvls_chunk_bytes", 131072, "bytes",
             _NVLS + " NCCL_PARAM(NvlsChunkSize, \"NVLS_CHUNKSIZE\", 128 * 1024); cut to 64/32/16 KiB below "
             "64x/8x/2x lanes x chunk (src/enqueue.cc calcCollChunking)",
             "collective time: largest NVLS chunk; smaller messages get smaller chunks"),
    *[Constant(f"nccl.nvls_cut.{tree}.{i}.{what}", v, unit,
               "NVIDIA/nccl src/enqueue.cc calcCollChunking (commit 5067397c): the NVLS"
               + (" tree" if tree == "tree" else "") + " chunk drops to chunk_bytes while the message is below "
               "multiple x lanes x chunk",
               "collective time: the chunk size of a mid-size NVLS" + (" tree" if tree == "tree" else "")
               + " all-reduce")
      for tree, cuts in (("flat", ((64, 65536), (8, 32768), (2, 16384))),
                         ("tree", ((32, 262144), (16, 131072), (4, 65536), (1, 32768))))
      for i, (mult, size) in enumerate(cuts)
      for what, v, unit in (("multiple", mult, "x lanes x chunk"), ("chunk_bytes", size, "bytes"))],
    *[Constant(f"nccl.nvls_sm100.{name}", v, unit,
               "NVIDIA/nccl src/transport/nvls.cc ncclNvlsTreeSm100Tuning (commit 5067397c; its GPU-to-NIC path "
               "conditions left out): " + why,
               "collective time: NVLS tree channels and chunks on Blackwell nodes")
      for name, v, unit, why in (
          ("two_nodes.min_nic_bytes_per_s", 48e9, "bytes/s", "two nodes with NICs of 48 GB/s or more per GPU ..."),
          ("two_nodes.channels", 32, "channels", "... run 32 channels ..."),
          ("two_nodes.tree_max_chunk_bytes", 131072, "bytes", "... with 128 KiB tree chunks ..."),
          ("two_nodes.small_ppn", 4, "ranks per node", "... and with at most 4 ranks per node ..."),
          ("two_nodes.small_ppn_chunk_bytes", 262144, "bytes", "... 256 KiB chunks"),
          ("many_nodes.fast_nic_bytes_per_s", 96e9, "bytes/s", "more than two nodes with NICs of 96 GB/s or more per GPU ..."),
          ("many_nodes.fast_max_ppn", 8, "ranks per node", "... and at most 8 ranks per node ..."),
          ("many_nodes.fast_channels", 24, "channels", "... run 24 channels ..."),
          ("many_nodes.fast_chunk_bytes", 262144, "bytes", "... with 256 KiB chunks and tree chunks; more ranks "
                                                            "per node ..."),
          ("many_nodes.dense_channels", 32, "channels", "... run 32 channels ..."),
          ("many_nodes.dense_ppn", 32, "ranks per node", "... with 128 KiB tree chunks below 32 ranks per node ..."),
          ("many_nodes.dense_tree_max_chunk_bytes", 131072, "bytes", "... (128 KiB) ..."),
          ("many_nodes.densest_tree_max_chunk_bytes", 65536, "bytes", "... and 64 KiB from 32 ranks per node"),
          ("many_nodes.slow_nic_bytes_per_s", 48e9, "bytes/s", "more than two nodes with NICs of 48-96 GB/s per GPU ..."),
          ("many_nodes.slow_channels", 24, "channels", "... run 24 channels ..."),
          ("many_nodes.slow_tree_max_chunk_bytes", 131072, "bytes", "... with 128 KiB tree chunks"))],
    Constant("nccl.nvls_tree_max_chunk_bytes.many_nodes", 65536, "bytes",
             _NVLS + " ncclNvlsTuning: treeMaxChunkSize = 65536 when nNodes >= 4, else the NVLS chunk",
             "collective time: largest NVLS tree chunk on four nodes or more"),
    Constant("nccl.nvls_pipeline_stages", 3, "stages",
             "NVIDIA/nccl src/device/all_reduce.h (commit 5067397c) RunWorkColl NVLS all-reduce, one node: three "
             "warp groups a chunk passes in turn (scatter into the NVLS buffer, reduce and multicast through the "
             "switch, gather out of it), each on the next chunk while the later one works on this",
             "collective time: a chunked NVLS all-reduce takes (rounds + stages - 1) round times"),
    Constant("nccl.nvls_tree_stages_per_level", 2, "stages",
             "NVIDIA/nccl src/device/all_reduce.h RunWorkColl NVLS_TREE: the reduce group sends each chunk up the "
             "tree over the network and the broadcast group receives it back down: one network hop each way per "
             "level of the log2(nodes)-deep tree",
             "collective time: extra pipeline stages of an NVLS tree all-reduce per tree level"),
    Constant("nccl.collnet_arity_latency_s", 0.4e-6, "s",
             _TUNING_MODEL + ": CollNet Direct latency + (ranks per node - 1) x 0.4 us 'arity serialization', twice",
             "collective latency: CollNet Direct (SHARP) all-reduce, per local rank"),
    Constant("nccl.collnet_direct_efficiency.hopper", 0.85, "ratio",
             _TUNING_MODEL + ": CollNet Direct all-reduce busBw *= .85 when the minimum compute capability is 9.0 "
                             "or above",
             "collective bandwidth: CollNet Direct (SHARP) all-reduce on Hopper and Blackwell nodes"),
    Constant("cluster.switch_radix", 64, "ports",
             "NVIDIA Quantum-2 (QM9700) InfiniBand switch: 64 ports of 400 Gb/s; a two-tier fat tree of them "
             "reaches 64 x 32 = 2,048 endpoints per rail at full bisection",
             "switch tiers a group crosses: one leaf up to nodes_per_leaf nodes, two tiers up to "
             "nodes_per_leaf x radix, three beyond"),
    Constant("cluster.switch_hop_latency_s", 0.3e-6, "s",
             "assumed: cut-through port-to-port latency of a 400G InfiniBand switch is quoted at 130-400 ns in "
             "vendor material (Quantum-2 class); no NVIDIA datasheet figure at hand",
             "collective latency: each switch tier beyond the leaf adds two hops (up and down) to a network step"),
]

# ---- power and clocks (cost/power.py): DVFS physics under a power cap or a locked clock --------------
_PEAK_CLOCK = ("the clock the datasheet's dense BF16 peak implies: peak / (SMs x dense FP16/BF16 tensor FLOP per "
               "clock per SM; {flops} on {arch}, NVIDIA {arch} architecture whitepaper)")
_POWER: list[Constant] = [
    Constant("power.reference_clock_mhz.a100-80gb", 1410, "MHz",
             "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), Table 1: GPU Boost Clock 1410 MHz; "
             "312 TFLOP/s = 108 SMs x 2048 FLOP/clk x 1.41 GHz",
             "--clock: the SM clock the datasheet peaks (and the profile's efficiencies) refer to"),
    Constant("power.reference_clock_mhz.a100-40gb", 1410, "MHz",
             "NVIDIA A100 whitepaper (2020), Table 1: GPU Boost Clock 1410 MHz",
             "--clock: the SM clock the datasheet peaks refer to"),
    *[Constant(f"power.reference_clock_mhz.{g}", 1830, "MHz",
               _PEAK_CLOCK.format(flops="4096", arch="Hopper") + ": 989.4 TFLOP/s / (132 x 4096) = 1.83 GHz",
               "--clock: the SM clock the datasheet peaks refer to")
      for g in ("h100-sxm", "h100-sxm-96gb", "h800", "h200")],
    Constant("power.reference_clock_mhz.h100-pcie", 1620, "MHz",
             _PEAK_CLOCK.format(flops="4096", arch="Hopper") + ": 756.5 TFLOP/s / (114 x 4096) = 1.62 GHz",
             "--clock: the SM clock the datasheet peaks refer to"),
    Constant("power.reference_clock_mhz.b200", 1580, "MHz",
             "the clock the profile's sustained efficiencies refer to: sustained tensor load at 1,000 W holds "
             "~1,580 MHz (flashinfer-ai/flashinfer#2899; the boost clock is 1,965 MHz, and the datasheet's dense "
             "BF16 peak implies 1,856 MHz: 2.25 PFLOP/s / (148 SMs x 8192 dense BF16 tensor FLOP per clock per SM "
             "on sm100, NVIDIA/cudnn-frontend benchmarks' _FLOPS_PER_CLOCK_PER_SM)); a locked clock slows work "
             "from there, and no clock above it is reachable at the rated power",
             "--clock: the SM clock the profile's sustained efficiencies refer to (the highest --clock accepted)"),
    Constant("power.reference_clock_mhz.mi300x", 1207, "MHz",
             "the clock the profile's sustained efficiencies refer to: dense BF16 GEMMs at 750 W hold a median "
             "1,207 MHz (FP8 1,230 MHz) (ROCm blogs, 'Measuring Max-Achievable FLOPs - Part 2', 2025), against "
             "the 2.1 GHz peak engine clock the datasheet's dense BF16 peak implies (1,307.4 TFLOP/s / (304 CUs x "
             "2,048 dense BF16 matrix FLOP per clock per CU on CDNA 3); AMD MI300X data sheet); a locked clock "
             "slows work from there, and no clock above it is reachable at the rated power",
             "--clock: the engine clock the profile's sustained efficiencies refer to (the highest --clock accepted)"),
    Constant("power.static_fraction", 0.2, "fraction of TDP",
             "assumed: power a busy-waiting GPU draws at its clocks without tensor or memory work (leakage at "
             "operating temperature, HBM refresh, board), 80 W of an A100's 400 W; Perseus (Chung et al., "
             "SOSP'24) counts the power GPUs draw while blocked on communication as energy bloat. No "
             "measurement at hand",
             "power: the floor of every op's power and what a GPU draws waiting (bubbles, exposed waits); "
             "with the cap it sets the clock a power cap allows: P = P_static + (P_rated - P_static) f^3"),
    Constant("power.activity.tensor", 1.0, "fraction of dynamic power",
             "by definition: a dense tensor-core GEMM at the reference clock draws the rated TDP (the premise of "
             "the capped-GPU derate: peaks and efficiencies refer to the rated TDP)",
             "power of GEMMs and attention; the clock a power cap allows them"),
    Constant("power.activity.memory", 0.55, "fraction of dynamic power",
             "assumed: memory-bound kernels keep HBM busy but leave tensor cores idle; public A100/H100 traces "
             "show elementwise-heavy phases well under TDP; no measurement at hand",
             "power of memory-bound ops (norms, activations, optimizer); the clock a power cap allows them"),
    Constant("power.activity.comm", 0.3, "fraction of dynamic power",
             "assumed: NCCL kernels run on a few SMs and drive NVLink/NIC; no measurement at hand",
             "power of exposed communication"),
    Constant("power.voltage_floor_clock", 0.6, "fraction of reference clock",
             "assumed: DVFS lowers voltage with clock down to a floor (minimum stable voltage), below which only "
             "the clock falls: dynamic power C V^2 f goes as f^3 above the floor and as f below it (CMOS DVFS "
             "physics, as Zeus, NSDI'23, and Perseus, SOSP'24, use it); the floor on A100/H100 is not published",
             "power at clocks below the floor (--clock, energy planning)"),
    Constant("power.memory_clock_sensitivity", 0.15, "fraction",
             "assumed: HBM runs on its own clock, which SM DVFS does not change; the SM-side issue rate makes "
             "a memory-bound kernel slightly slower at low SM clocks (cf. Tang et al., e-Energy'19, 'The "
             "Impact of GPU DVFS on the Energy and Performance of Deep Learning'); no measurement at hand",
             "memory-bound op time at a lower SM clock: x (1 - b + b f_ref/f)"),
    Constant("power.min_cap_fraction", 0.25, "fraction of rated TDP",
             "assumed: the driver's lowest power limit (nvidia-smi -q, 'Min Power Limit') is a fraction of the "
             "default; a quarter is taken as the lowest plausible cap (no per-GPU figure at hand)",
             "--power-cap: the lowest cap accepted"),
]

# Box bounds of the parameters `calibrate --from-runs` fits (calibrate/runs.py): a fit never leaves them.
# Efficiencies are fractions of a datasheet figure, so never above 1; the lower bounds only keep a fit
# out of unphysical corners. A ``_``-prefixed key in runs.py (``_overhead_s``) bounds every profile field
# ending so.
_FIT_BOUNDS_SRC = {
    "gemm_efficiency": (0.2, 1.0, "no GEMM beats the datasheet peak; below 0.2 a large GEMM would be broken"),
    "attention_fwd_efficiency": (0.1, 1.0, "fraction of the BF16 peak; unfused attention is priced separately"),
    "memory_efficiency": (0.3, 1.0, "fraction of HBM bandwidth; STREAM-like copies reach 0.85-0.9"),
    "nvlink_efficiency": (0.2, 1.0, "NCCL bus bandwidth over the link peak"),
    "nic_efficiency": (0.2, 1.0, "NCCL bus bandwidth over NIC line rate"),
    "cpu_dispatch_s": (1e-6, 1e-4, "a kernel launch from Python costs a few us; 100 us is a host far overloaded"),
    "overhead_s": (0.0, 0.1, "framework time per unit of work; 100 ms would be visible in any profile"),
    "latency_s": (1e-7, 1e-3, "per-message latency of a link: 0.1 us to 1 ms"),
}
_FIT_UNITS = {"cpu_dispatch_s": "s", "overhead_s": "s", "latency_s": "s"}
_FIT_BOUNDS: list[Constant] = [
    Constant(f"calibrate.bounds.{name}.{end}", v, _FIT_UNITS.get(name, "fraction"), f"assumed: {why}",
             f"calibrate --from-runs: the {'lowest' if end == 'low' else 'highest'} value a fit may give {name}")
    for name, (lo, hi, why) in _FIT_BOUNDS_SRC.items() for end, v in (("low", lo), ("high", hi))
]

# ---- PyTorch's own distributed code paths as torchtitan ran them (torch nightly 1963fc8 of 2024-12-23,
# torchtitan 9dec370 of 2024-12-26): bytes each memory-bound pass moves, read from the code ---------------
_CP_COMPILED = ("torchtitan 9dec370 parallelize_llama.py apply_compile: torch.compile(block, fullgraph=True) per "
                "TransformerBlock, so F.scaled_dot_product_attention under context_parallel (DTensor's SDPA handler, "
                "_templated_ring_attention and its backward; _attention.py _maybe_wait: 'When tracing the code, the "
                "result tensor is not an AsyncCollectiveTensor') is traced into the graph and Inductor compiles the "
                "merge; counted from Inductor's generated code for a standalone copy of the Dec 2024 merge math "
                "(bf16 out, fp32 lse, convert_to_f32, allgather rotater, round-robin load balance, cp 4 and 8, first "
                "and last rank; attention and collectives as opaque ops, as flash and the functional collectives are "
                "to Inductor), torch 2.13 CPU build with config.force_pointwise_cat as the GPU lowering chooses "
                "pointwise cat for these two-input cats (lowering.py cat: pointwise_cat disabled on CPU only); "
                "assumption: the pointwise scheduler's fusion is the same on GPU and in the Dec 2024 nightly")
_TORCH_STACK: list[Constant] = [
    Constant("fsdp2.copy_out_bytes_per_element", 4, "bytes/element",
             "PyTorch FSDP2 _fsdp_collectives.py foreach_all_gather_copy_out: after each all-gather, "
             "torch.ops.fsdp.split_with_sizes_copy copies the gathered buffer into every unsharded parameter "
             "(read and write one 16-bit element each), on the default stream in FSDPParamGroup.wait_for_unshard",
             "FSDP2 step time: memory-bound copy per all-gathered parameter element, on the compute stream"),
    Constant("fsdp2.reduce_copy_in_read_bytes_per_element", 2, "bytes/element",
             "PyTorch FSDP2 foreach_reduce: foreach_reduce_scatter_copy_in (torch._chunk_cat of the unsharded "
             "16-bit gradients into the reduce_dtype input buffer) before each reduce-scatter; the default "
             "stream waits for it before freeing the gradients ('Only after the copy-in finishes can we free "
             "the gradients')",
             "FSDP2 step time: the gradient read of the copy-in (the write is the reduce dtype's bytes)"),
    Constant("optimizer.torch_foreach_adamw_bytes_per_param", 80, "bytes/param",
             "torch/optim/adamw.py _multi_tensor_adamw (foreach=True; torchtitan optimizer.py passes "
             "foreach = not fused, --optimizer.fused off by default), fp32 params, grads and states: "
             "_foreach_mul_ (weight decay) 8 + _foreach_lerp_ (exp_avg) 12 + _foreach_mul_ (exp_avg_sq) 8 + "
             "_foreach_addcmul_ 12 + _foreach_sqrt 8 + _foreach_div_ 8 + _foreach_add_ (eps) 8 + "
             "_foreach_addcdiv_ 16 bytes read and written per parameter",
             "optimizer time of the torch foreach AdamW (torchtitan): bytes per parameter of the rank's shard"),
    Constant("optimizer.torch_clip_grad_norm_bytes_per_param", 12, "bytes/param",
             "torch.nn.utils.clip_grad_norm_ (torchtitan utils.clip_grad_norm_, max_norm = 1.0 in its train "
             "configs): _foreach_norm reads each fp32 gradient (4) and clip_grads_with_norm_ always runs "
             "_foreach_mul_ by the clamped coefficient (read and write, 8)",
             "optimizer time of torchtitan: the gradient-norm clipping passes per parameter of the shard"),
    Constant("cp.torch_merge_bytes_per_output_element", 38, "bytes/element",
             "torch/distributed/tensor/experimental/_attention.py _SDPAMerger (convert_to_f32 = True) per "
             "ring step: block_out.to(float32) 6 (read 2, write 4), out - block_out 12, "
             "sigmoid(block_lse - lse) * (...) 8, out - (...) 12 bytes per output element in eager kernels "
             "(torchtitan-eager: nothing compiles the ring; under torchtitan-compile the ring is traced into the "
             "block's graph and Inductor fuses it: cp.compiled_*)",
             "torch ring attention (torchtitan CP): forward output merge per ring step"),
    Constant("cp.torch_forward_once_bytes_per_output_element", 12, "bytes/element",
             "_SDPAMerger: the first step's output cast to float32 (step: out.to(torch.float32), read 2, write "
             "4) and results() casting the merged output back to 16 bits (read 4, write 2)",
             "torch ring attention: forward casts once per layer call"),
    Constant("cp.torch_kv_contiguous_bytes_per_element", 4, "bytes/element",
             "_templated_ring_attention and its backward: key.contiguous(), value.contiguous() copy the K/V "
             "torchtitan passes (repeat_kv output transposed to (bs, heads, seq, dim): not contiguous; "
             "torchtitan models/llama/model.py) -- read 2, write 2 bytes per element, forward and backward",
             "torch ring attention: the K/V copies at the start of forward and backward"),
    Constant("cp.torch_forward_kv_concat_bytes_per_element", 4, "bytes/element",
             "_templated_ring_attention: every step but the last builds the send buffer, next_kv = "
             "torch.cat([key.flatten(), value.flatten()]) (read 2, write 2 bytes per K/V element), before "
             "rotater.exchange_buffers; the all-gather rotater (torchtitan's default) sends only the first one "
             "(_AllGatherRotater.exchange_buffers: 'We only need to perform the allgather once') but the "
             "concatenation runs every step",
             "torch ring attention: forward K/V concatenation per ring step but the last"),
    Constant("cp.torch_grad_once_bytes_per_element", 10, "bytes/element",
             "_templated_ring_attention_backward: torch.zeros_like float32 accumulators for dQ, dK, dV (write "
             "4) and the final casts to the input dtype (grad_query.to, next_grad_kv.to: read 4, write 2)",
             "torch ring attention backward: once per layer call, per Q and K/V element"),
    Constant("cp.torch_merge_kernels_per_step", 9, "kernels",
             "_SDPAMerger._merge_one: to(float32), two subtractions, sigmoid, multiply, subtraction for the "
             "output; subtraction, logsigmoid, subtraction for the log-sum-exp",
             "torch ring attention: kernels of one merge step"),
    Constant("cp.torch_grad_accum_q_bytes_per_element", 10, "bytes/element",
             "_attention.py _templated_ring_attention_backward: grad_query (float32, convert_to_f32) += the "
             "step's 16-bit dQ: read 4 + 2, write 4 bytes per query element and ring step",
             "torch ring attention backward: dQ accumulation per ring step"),
    Constant("cp.torch_grad_accum_kv_bytes_per_element", 25, "bytes/element",
             "_attention.py _templated_ring_attention_backward per ring step on the heaviest rank "
             "(i <= rank: _partial_update): half the K/V gradient added in float32 (10 / 2 = 5), torch.cat "
             "of its chunks (8), torch.cat of grad_key and grad_value for the send (8), and the 16-bit K/V "
             "concatenated for the next rank (torch.cat, 4) bytes per K/V element (K and V counted)",
             "torch ring attention backward: dK/dV accumulation and the buffers sent, per ring step"),
    Constant("cp.torch_grad_accum_kernels_per_step", 6, "kernels",
             "_templated_ring_attention_backward per step: the dK and dV additions, the two torch.cat of "
             "_partial_update, the torch.cat of the send buffer and the dQ addition",
             "torch ring attention backward: kernels per ring step"),
    Constant("cp.compiled_merge_read_bytes_per_output_element", 2, "bytes/element",
             _CP_COMPILED + ": the SDPA calls do not read the running output, so the whole merge chain (the "
             "float32 casts, every step's sigmoid/subtract/multiply and results()' cast back) is one pointwise "
             "kernel after the last step that reads each step's 16-bit block output once; the float32 running "
             "output never reaches memory (the log-sum-exp chain, 1/head_dim of the elements, is left out). The "
             "last rank's pattern (cp 4: 10, cp 8: 18 bytes per element with the write); the first rank's "
             "partial updates also stored a float32 intermediate every few steps in the same code (cp 8: about "
             "27), not counted",
             "torch ring attention compiled (torchtitan-compile): forward merge, bytes read per output element "
             "and ring step"),
    Constant("cp.compiled_merge_write_bytes_per_output_element", 2, "bytes/element",
             _CP_COMPILED + ": the fused merge writes the merged output once, in the input dtype (16 bits)",
             "torch ring attention compiled: forward merge, bytes written per output element, once per layer call"),
    Constant("cp.compiled_grad_kv_bytes_per_element", 10, "bytes/element",
             _CP_COMPILED + ": per ring step after the first, one kernel reads the float32 dK/dV received (4) and "
             "the step's 16-bit dK/dV (2, whole chunk on the first rank, i > rank; half on the last) and writes "
             "the float32 send buffer of the next permute (4): _partial_update's add and both torch.cat fused, "
             "the busiest rank (the first) counted as the steps wait for each other's exchange",
             "torch ring attention compiled backward: dK/dV accumulation and send buffer, per K/V element and "
             "ring step after the first"),
    Constant("cp.compiled_grad_kv_first_bytes_per_element", 6, "bytes/element",
             _CP_COMPILED + ": the first step's zeros_like + dK/dV is folded into the send buffer's write: read 2, "
             "write 4",
             "torch ring attention compiled backward: the first step's dK/dV send buffer, per K/V element"),
    Constant("cp.compiled_grad_q_read_bytes_per_element", 2, "bytes/element",
             _CP_COMPILED + ": the dQ accumulation (grad_query += grad_query_, fp32) feeds nothing until the "
             "final cast, so every step's add is one kernel after the loop reading each step's 16-bit dQ once "
             "and writing the 16-bit result (cp.compiled_merge_write_bytes_per_output_element)",
             "torch ring attention compiled backward: dQ, bytes read per query element and ring step"),
    Constant("cp.compiled_grad_kv_final_bytes_per_element", 6, "bytes/element",
             _CP_COMPILED + ": the last dK/dV received cast to the input dtype (dkv_rotater.next_buffer().to: "
             "read 4, write 2), a kernel of its own",
             "torch ring attention compiled backward: the final dK/dV cast, per K/V element"),
    Constant("cp.compiled_forward_kernels_per_step", 1, "kernels",
             _CP_COMPILED + ": the log-sum-exp merge of a step (the first rank's partial updates) as its own "
             "small kernel; the send-buffer torch.cat of steps after the first is dead code in the graph (the "
             "allgather rotater uses only the first), so one concatenation per forward",
             "torch ring attention compiled: forward kernels per ring step"),
    Constant("cp.torch_grad_exchange_bytes_per_element", 4, "bytes/element",
             "_templated_ring_attention_backward: the dK/dV sent to the next rank every ring step are the "
             "float32 accumulators (accum_dtype float32; dkv_rotater = _RotateMethod.ALL_TO_ALL, "
             "ft_c.permute_tensor)",
             "torch ring attention backward: bytes per K/V gradient element passed per ring step"),
]

# ---- mixture-of-experts layers (issue 16: fine-grained experts) ----------------------------------
_MCORE_DISPATCHER = ("Megatron-Core megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher "
                     "(preprocess, dispatch_postprocess, combine_preprocess, _maybe_dtoh_and_synchronize)")
_TE_GROUPED = ("Transformer Engine common/include/transformer_engine/gemm.h 'constexpr int num_streams = 4' and "
               "nvte_multi_stream_cublas_gemm (common/gemm/cublaslt_gemm.cu): te.GroupedLinear runs one cuBLAS GEMM "
               "per local expert, round-robin over num_streams compute streams joined by events ('For now, we "
               "only have multi-stream cublas backend', pytorch/csrc/extensions/gemm.cpp)")

_MOE: list[Constant] = [
    Constant("moe.grouped_gemm_streams", 4, "streams", _TE_GROUPED,
             "expert GEMM time: a layer's local experts run as separate GEMMs, at most this many at once; the "
             "tiles of the concurrent ones share the SMs' waves (priced as a batch of min(streams, experts) "
             "GEMMs, repeated experts/streams times)"),
    Constant("moe.expert_gemm_launch_host_s", 5e-6, "s",
             "assumed: one cublasLtMatmul call with its workspace and stream/event bookkeeping, issued from TE's "
             "C++ loop (no Python, no autograd per expert): a few us, the usual cost of a CUDA kernel launch "
             "from C++ (NVIDIA, 'Getting Started with CUDA Graphs', 2019: a few us of launch overhead per "
             "kernel); not measured here. " + _TE_GROUPED,
             "host time of an expert GEMM: one Python call of the grouped linear plus this per local expert"),
    Constant("moe.expert_quantize_launch_host_s", 5e-6, "s",
             "assumed, as moe.expert_gemm_launch_host_s: one quantize launch per expert from a C++ loop. "
             "Transformer Engine v2.9 (the release Megatron-Bridge v0.2.0 pins, transformer-engine>=2.9,<2.10) "
             "te.GroupedLinear quantizes its FP8 input per expert with tex.split_quantize "
             "(pytorch/csrc/extensions/cast.cpp): multi_tensor_quantize_impl fuses the experts into one "
             "multi_cast_transpose kernel only for delayed scaling ('Note: Currently only have fused kernel for "
             "FP8 delayed scaling'); every other recipe (MXFP8, FP8 block scaling, per-tensor current scaling) "
             "runs 'Quantize kernels individually', one quantizer->quantize per expert (current scaling: three "
             "kernels each, amax, scale and cast, quantizer.cpp: fp8.current_scaling_kernels_per_quantize)",
             "host time of the FP8 cast of a routed experts' GEMM input: one Python call plus this per local expert"),
    Constant("fp8.current_scaling_kernels_per_quantize", 3, "kernels",
             "Transformer Engine v2.9 pytorch/csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize: "
             "nvte_compute_amax (reads the 16-bit input), the amax all-reduce where a group is set, "
             "nvte_compute_scale_from_amax, then nvte_quantize (the cast-transpose); a DelayedScaling quantize is "
             "one kernel (cast-transpose with the amax of the next step fused, scale from the history), as are "
             "MXFP8 and FP8 block-scaling quantizes (their scales are computed inside the cast kernel)",
             "FP8 current scaling: kernels of one input quantize (1 under the other recipes)"),
    Constant("fp8.current_scaling_amax_read_bytes_per_element", 2, "bytes/element",
             "Float8CurrentScalingQuantizer::quantize (TE v2.9 quantizer.cpp): nvte_compute_amax reads the "
             "16-bit input once before the cast reads it again",
             "FP8 current scaling: the extra HBM read of each quantized input"),
    Constant("host.cpp_kernel_launch_s", 5e-6, "s",
             "assumed, as moe.expert_gemm_launch_host_s: one kernel launch from C++ (no Python, no autograd): a few "
             "us (NVIDIA, 'Getting Started with CUDA Graphs', 2019: a few us of launch overhead per kernel); "
             "not measured here",
             "host time of each kernel beyond the first that one C++ extension call launches (FP8 current "
             "scaling's amax and scale kernels)"),
    Constant("host.cuda_graph_replay_s", 20e-6, "s",
             "derived: one Python torch.autograd.Function apply (" + _AUTOGRAD_FN + ") around one CUDA graph "
             "launch: Transformer Engine's make_graphed_callables replays each captured callable through an "
             "autograd.Function (forward: copy the inputs into the static buffers, graph.replay(); backward: "
             "the backward graph's replay), and a cudaGraphLaunch costs a few us whatever the kernels inside "
             "(NVIDIA, 'Getting Started with CUDA Graphs', 2019)",
             "host time of one captured region of a layer (Megatron-Core cuda_graph_scope), per phase: its "
             "kernels pay no per-kernel launch time"),
    Constant("moe.expert_python_host_s", 7e-6, "s",
             "derived: one aten-call equivalent (" + _ATEN_OP + ") per expert for the Python loops over the "
             "experts in Transformer Engine v2.9 module/grouped_linear.py: in an FP8 forward "
             "module.get_weight_workspace(...) for each of num_gemms weights; in the backward "
             "handle_custom_ddp_from_mcore(weight, wgrad) for each expert (Megatron-Core's fused weight-gradient "
             "accumulation: a torch.empty of the main gradient's shape per expert)",
             "host time of a routed experts' GEMM: per local expert, FP8 forward GEMMs and weight-gradient GEMMs"),
    Constant("moe.expert_grad_hook_host_s", 10e-6, "s",
             "derived: te.GroupedLinear's backward returns one weight gradient per expert (Transformer Engine "
             "v2.9 module/grouped_linear.py _GroupedLinear.backward: *wgrad_list, one dummy torch.empty per "
             "expert under Megatron-Core's fused gradient accumulation), so the autograd engine runs each expert "
             "weight's AccumulateGrad node and the Python hook Megatron-Core's DDP registers on it "
             "(megatron/core/distributed/distributed_data_parallel.py _make_backward_post_hook, core_r0.15 "
             "0d8e071: bucket-group lookup, param.grad reset, register_grad_ready): the node at about an aten call "
             "without its Python half (~4 us) plus the hook at about one aten-call equivalent (" + _ATEN_OP + ")",
             "host time of a routed experts' weight-gradient GEMM (Megatron, NeMo): per local expert weight"),
    Constant("moe.dtoh_sync_s", 10e-6, "s",
             "assumed: a few small pinned device-to-host copies of the token counts (cudaMemcpyAsync on a side "
             "stream) and a cudaEventSynchronize wake-up after the GPU reaches them, a few us each; not measured "
             "here. The synchronisation itself: " + _MCORE_DISPATCHER + " copies the per-rank and per-expert "
             "token counts to the host and synchronises ('A synchronization is needed before expert parallel "
             "AlltoAll communication to get the input_splits and output_splits CPU values'); "
             "te.GroupedLinear.forward takes the per-expert token counts as a host list (m_splits), so every "
             "dropless dispatcher feeding it reads them back once per MoE layer and micro-batch",
             "host time of a dropless MoE layer's forward: the host waits until the GPU has run everything "
             "before the dispatch (its lead over the GPU is lost), then pays this"),
    Constant("moe.router_kernels_forward", 14, "kernels",
             "derived: Megatron-Core's fused router and alltoall preprocess per MoE layer forward "
             "(megatron/core/transformer/moe/router.py TopKRouter with moe_router_fusion, and "
             + _MCORE_DISPATCHER + "): fused top-k with score function (1), aux-loss scores, tokens per "
             "expert and the fused aux loss (3); routing-map sum, input splits, the gathered counts' slice, "
             "two sums (5); the device-to-host copies of the token counts, input/output splits and "
             "num_out_tokens (5)",
             "host time of the router/top-k/aux-loss op of a MoE layer forward (kernels x per-kernel dispatch)"),
    Constant("moe.router_kernels_backward", 3, "kernels",
             "derived: the backward of the fused top-k/score function (1) and of the aux loss (2) in "
             "Megatron-Core's router (megatron/core/transformer/moe/router.py, moe_utils.py)",
             "host time of the router/top-k/aux-loss backward of a MoE layer"),
]


# ---- serving: kernels per decoder layer and per step, counted in each engine's model code ----------
_VLLM_LLAMA = ("vLLM vllm/model_executor/models/llama.py LlamaDecoderLayer.forward (v0.6-v0.7 tags): "
               "input_layernorm (ops.fused_add_rms_norm; plain rms_norm on layer 0), qkv_proj, rotary_emb "
               "(ops.rotary_embedding), Attention: reshape_and_cache_flash + flash_attn_with_kvcache "
               "(FlashAttentionImpl), o_proj, post_attention_layernorm (fused_add_rms_norm), gate_up_proj, "
               "act_fn (ops.silu_and_mul), down_proj")
_SGL_LLAMA = ("SGLang python/sglang/srt/models/llama.py LlamaDecoderLayer.forward (v0.4 tags): the same "
              "layer as vLLM's (fused_add_rmsnorm, qkv_proj, rotary_emb, o_proj, gate_up_proj, silu_and_mul, "
              "down_proj) with RadixAttention; the KV write is MHATokenToKVPool.set_kv_buffer, two index "
              "stores (k_buffer[loc] = k, v_buffer[loc] = v), then the FlashInfer decode kernel")
_TRT_LLAMA = ("TensorRT-LLM tensorrt_llm/models/llama/model.py LLaMADecoderLayer.forward (v0.8-v0.17, "
              "TensorRT backend): input_layernorm, Attention (fused QKV GEMM; gpt_attention plugin: "
              "QKV preprocessing kernel (RoPE + paged KV write) then the XQA/MMHA generation kernel), "
              "dense GEMM, post_layernorm, FusedGatedMLP (tensorrt_llm/plugin/plugin.py PluginConfig use_fused_mlp default True: 'combines "
              "two Matmul operations into a single one followed by a separate SwiGLU kernel'), proj GEMM; residual adds fused into the next norm by "
              "TensorRT's pointwise fusion (assumed: the engine's fusion is not in the source)")
_SERVE_KERNELS = [
    Constant("serve.kernels.vllm.dense_layer", 10, "kernels", _VLLM_LLAMA + ": 10 kernels at tp = 1",
             "serving step overhead: inter-kernel gaps per dense layer (vLLM)"),
    Constant("serve.kernels.sglang.dense_layer", 11, "kernels", _SGL_LLAMA + ": 11 kernels at tp = 1",
             "serving step overhead: inter-kernel gaps per dense layer (SGLang)"),
    Constant("serve.kernels.trtllm.dense_layer", 9, "kernels", _TRT_LLAMA + ": 9 kernels at tp = 1",
             "serving step overhead: inter-kernel gaps per dense layer (TensorRT-LLM)"),
    *[Constant(f"serve.kernels.{e}.tp_layer", 2, "kernels",
               f"{src}: two tensor-parallel all-reduces per layer (after o_proj and down_proj), each one "
               "custom all-reduce kernel (vLLM/SGLang custom_all_reduce one-shot/two-shot; TensorRT-LLM "
               "allreduce plugin; fused AR+norm is opt-in: trtllm-build --reduce_fusion, default disable in 0.14-0.17)",
               "serving step overhead: kernels a layer adds at tp > 1")
      for e, src in (("vllm", _VLLM_LLAMA), ("sglang", _SGL_LLAMA), ("trtllm", _TRT_LLAMA))],
    *[Constant(f"serve.kernels.{e}.moe_layer", 4, "kernels",
               "vLLM vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts (v0.6-v0.7; SGLang v0.4 "
               "vendors the same Triton path): the dense MLP's 3 kernels become router GEMM, topk_softmax, "
               "moe_align_block_size, fused_moe_kernel (w13), silu_and_mul, fused_moe_kernel (w2), moe_sum: "
               "7, so 4 more; TensorRT-LLM's MoE plugin runs routing, permute, two grouped GEMMs, "
               "activation and finalize (assumed the same +4)",
               "serving step overhead: kernels a MoE layer adds over a dense one")
      for e in ("vllm", "sglang", "trtllm")],
    *[Constant(f"serve.kernels.{e}.mla_layer", 6, "kernels",
               "vLLM vllm/model_executor/models/deepseek_v2.py DeepseekV2MLAAttention (v0.7.3) against a GQA "
               "layer: separate q_a_proj and kv_a_proj_with_mqa GEMMs (+1), q_a_layernorm and kv_a_layernorm "
               "(+2), q_b_proj (+1), the absorbed W_UK and W_UV batched GEMMs around the latent decode "
               "kernel (+2); SGLang v0.4 deepseek_v2.py forward_absorb and TensorRT-LLM's DeepSeek path "
               "assumed alike",
               "serving step overhead: kernels an MLA layer adds over a GQA one")
      for e in ("vllm", "sglang", "trtllm")],
    Constant("serve.kernels.vllm.fp8_per_gemm", 1, "kernels",
             "vLLM Fp8LinearMethod.apply (v0.6-v0.7): per-tensor checkpoints quantize the input with "
             "ops.scaled_fp8_quant before each FP8 GEMM (layers/quantization/utils/w8a8_utils.py "
             "apply_fp8_linear); block-scaled checkpoints (DeepSeek-V3/R1, weight_block_size [128, 128]) with "
             "per_token_group_quant_fp8 (apply_w8a8_block_fp8_linear, utils/fp8_utils.py, read at v0.7.3); the "
             "fused MoE quantizes each of its two expert GEMMs' inputs the same way (fused_moe.py "
             "invoke_fused_moe_kernel, v0.7.3): one kernel per FP8 GEMM a layer launches (qkv, o, gate_up, down "
             "of a Llama layer: 4; an MLA MoE layer: q_a, q_b, kv_a, o, the shared expert's two and the "
             "experts' two: 8)",
             "serving step overhead: kernels an FP8 layer adds, one per FP8 GEMM (vLLM)"),
    Constant("serve.kernels.sglang.fp8_per_gemm", 1, "kernels",
             "SGLang v0.4 Fp8LinearMethod (srt/layers/quantization/fp8.py): apply_fp8_linear (one input "
             "quantization per GEMM) or, for block-scaled checkpoints, apply_w8a8_block_fp8_linear "
             "(per_token_group_quant_fp8 then the w8a8 block GEMM); fused_moe_triton invoke_fused_moe_kernel "
             "quantizes each expert GEMM's input (read at v0.4.1, v0.4.2.post4, v0.4.3.post2)",
             "serving step overhead: kernels an FP8 layer adds, one per FP8 GEMM (SGLang)"),
    Constant("serve.kernels.trtllm.fp8_per_gemm", 0, "kernels",
             "TensorRT-LLM FP8 checkpoints carry per-tensor activation scales; the quantize nodes fold into the "
             "norm and activation kernels (TensorRT Q/DQ fusion, TensorRT developer guide 'Working with "
             "Quantized Types')",
             "serving step overhead: kernels an FP8 layer adds, one per FP8 GEMM (TensorRT-LLM)"),
    *[Constant(f"serve.kernels.{e}.grouped_topk", 16, "kernels",
               f"{src}: a model with group-limited routing (DeepSeek-V3 n_group 8, topk_group 4, "
               "noaux_tc) routes with PyTorch ops instead of the one fused topk_softmax kernel: sigmoid, "
               "+ correction bias, per-group topk(2), sum, topk of the groups, zeros_like, scatter_, the "
               "expanded mask's reshape copy, bool, logical not, masked_fill, topk, gather of the unbiased "
               "scores, renormalize (sum, divide), casts to float32 and int32: 17 kernels, so 16 more",
               "serving step overhead: kernels a MoE layer with grouped top-k routing adds")
      for e, src in (("vllm", "vLLM v0.7.3 vllm/model_executor/layers/fused_moe/fused_moe.py grouped_topk"),
                     ("sglang", "SGLang v0.4.1-v0.4.3.post2 python/sglang/srt/layers/moe/topk.py "
                                "biased_grouped_topk"))],
    *[Constant(f"serve.kernels.{e}.shared_expert", 5, "kernels",
               f"{src} DeepseekV2MoE.forward: the shared experts run as a separate MLP (gate_up_proj, "
               "silu_and_mul, down_proj: 3 kernels), then the routed output is multiplied by "
               "routed_scaling_factor and the shared output added (2): 5 kernels per MoE layer with shared "
               "experts (their FP8 input quantizations are counted by fp8_per_gemm)",
               "serving step overhead: kernels a MoE layer with shared experts adds")
      for e, src in (("vllm", "vLLM v0.7.3 vllm/model_executor/models/deepseek_v2.py"),
                     ("sglang", "SGLang v0.4.1-v0.4.3.post2 python/sglang/srt/models/deepseek_v2.py"))],
    *[Constant(f"serve.kernels.{e}.mla_rope", 12, "kernels",
               f"{src}: DeepSeek's YaRN rotary embedding (DeepseekScalingRotaryEmbedding.forward) is "
               "PyTorch-native: the cos/sin gather, two repeat_interleave, then for q and k each a negate, "
               "stack (_rotate_gptj), two multiplies and an add: 13 kernels in place of the one fused "
               "rotary kernel a layer counts, so 12 more",
               "serving step overhead: kernels an MLA layer's rotary embedding adds")
      for e, src in (("vllm", "vLLM v0.7.3 vllm/model_executor/layers/rotary_embedding.py"),
                     ("sglang", "SGLang v0.4.3.post2 python/sglang/srt/layers/rotary_embedding.py (v0.4.1 "
                                "imports vLLM's)"))],
    Constant("serve.kernels.vllm.mla_glue", 2, "kernels",
             "vLLM v0.7.3 DeepseekV2MLAAttention.forward and MLACommonImpl.forward / TritonMLAImpl._forward_decode "
             "(vllm/attention/backends/mla/utils.py, triton_mla.py): kv_c.contiguous(), the q_pe GEMM "
             "(hidden_states_or_q_c @ W_QR), torch.cat of q_nope and q_pe, torch.zeros of the output: 4 kernels "
             "besides those counted, less 2 because W_UK is absorbed into q_b (one W_Q_UK GEMM) and W_UV into "
             "o_proj (one W_UV_O GEMM) where mla_layer counts a batched GEMM each",
             "serving step overhead: kernels an MLA decode layer adds (vLLM)"),
    Constant("serve.kernels.sglang.mla_glue", 6, "kernels",
             "SGLang v0.4.1-v0.4.3.post2 DeepseekV2AttentionMLA.forward_absorb (srt/models/deepseek_v2.py): "
             "copies into q_input and k_input (q_nope_out, q_pe, the normed latent, k_pe: 4), "
             "v_input.contiguous(), and the transposed bmm output flattened for o_proj: 6 kernels",
             "serving step overhead: kernels an MLA decode layer adds (SGLang)"),
    Constant("serve.kernels.sglang.mla_bmm_quant", 24, "kernels",
             "SGLang v0.4.1-v0.4.3.post2 forward_absorb with FP8 (e4m3fn) w_kc/w_vc: each of the two absorbed "
             "batched GEMMs (bmm_fp8) first quantizes its input per tensor with input_to_float8 "
             "(srt/layers/quantization/fp8_utils.py): aminmax, two abs, maximum, clamp, the scale's divide, "
             "multiply, clamp, cast, contiguous copy, float cast, reciprocal: 12 kernels each",
             "serving step overhead: kernels an FP8 MLA layer adds around its absorbed GEMMs (SGLang, NVIDIA)"),
    Constant("serve.kernels.sglang.mla_bmm_dequant_rocm", 6, "kernels",
             "SGLang v0.4.2.post4-v0.4.3.post2 forward_absorb with float8_e4m3fnuz weights (ROCm: 'TODO(kernel): "
             "add bmm_fp8 for torch.float8_e4m3fnuz'): each absorbed GEMM casts its input to bf16 and "
             "dequantizes the weight every step (w.to(bfloat16) * w_scale) before a bf16 torch.bmm: 3 kernels "
             "each",
             "serving step overhead: kernels an FP8 MLA layer adds around its absorbed GEMMs (SGLang, AMD)"),
    Constant("serve.kernels.vllm.fp8_channelwise_dequant_rocm", 3, "kernels",
             _ROCM_FP8_NAIVE + ": after the GEMM, 'output = output * x_scale * weight_scale.t()' (two "
             "elementwise multiplies) and 'output.to(dtype=input.dtype)' (a cast); torch.narrow is a view: 3 "
             "kernels a GEMM",
             "serving step overhead: kernels each FP8 GEMM of a per-channel-weight, per-token-activation "
             "checkpoint adds on AMD GPUs in vLLM releases without a fused row-wise scaled GEMM "
             "(EngineProfile.rocm_fp8_channelwise_unfused)"),
    *[Constant(f"serve.kernels.{e}.attn_split", 1, "kernels", src,
               "serving step overhead: kernels a layer adds when decode attention splits the KV length")
      for e, src in (
          ("vllm", "flash-attention csrc flash_api.cpp (vLLM's vllm-flash-attn fork, v2): "
                   "num_splits_heuristic splits the KV length when batch x kv-heads blocks fill under "
                   "80% of the SMs and then launches flash_fwd_splitkv_combine_kernel after the split kernel"),
          ("sglang", "FlashInfer BatchDecodeWithPagedKVCache (v0.1.x/0.2): split-KV when the batch leaves SMs "
                     "idle, then VariableLengthMergeStates, a second kernel"))],
    Constant("serve.kernels.trtllm.attn_split", 0, "kernels",
             "TensorRT-LLM decoderMaskedMultiheadAttentionTemplate.h (multi_block_mode): the blocks of one "
             "sequence merge their partial softmax inside the same kernel (the last block, counted with a "
             "cuda::atomic, reduces), and XQA's multi-block mode merges in-kernel with semaphores: no second "
             "kernel",
             "serving step overhead: kernels a layer adds when decode attention splits the KV length"),
    Constant("serve.decode_kernel_stall_s", 5e-6, "s",
             "Spector, Juravsky et al., Hazy Research 'Look Ma, No Bubbles! Designing a Low-Latency Megakernel "
             "for Llama-1B' (2025-05-27, hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles): between two "
             "kernels of a memory-bound decode step no weights load (a kernel's blocks wait for the previous "
             "kernel's stragglers; launch costs about 1.3 us on H100 even under CUDA graphs, 2.1 us on a "
             "stream, measured with a dummy kernel; the next kernel then waits for its first weight and "
             "activation loads), 'an optimistic 5 us of stalling per kernel (counting stragglers, kernel "
             "launch, and memory latencies)'; their figures agree: vLLM and SGLang reach at most 50% of H100 "
             "bandwidth on Llama-3.2-1B at batch 1 (about 115 kernels a step) where one megakernel reaches 78%",
             "serving step overhead: GPU idle per kernel of a decode-only step whose work is priced as streaming "
             "(memory-bound: no fill or drain term), in place of host.kernel_gap_s; compute-bound GEMMs keep "
             "their fill/drain (profile gemm_fixed_s) and the gap; NVIDIA GPUs only (measured on H100, the "
             "post also runs B200): AMD GPUs keep host.kernel_gap_s, no ROCm measurement at hand"),
    Constant("serve.block_fp8_k_step_s", 23.3e-6 / 56, "s",
             "vllm-project/vllm#23280 (2025-09, NVIDIA H100 80GB HBM3, TFLOP/s table 'DeepSeek-V3, N=2112 K=7168', "
             "block_size (128, 128)): the Triton w8a8_block_fp8_matmul reaches 1.298 TFLOP/s at batch 1 and 20.76 "
             "at batch 16, i.e. 2 x M x 2112 x 7168 / rate = 23.3 us at both (15.1 MB of FP8 weights: 0.65 TB/s, "
             "a fifth of the HBM), and the CUTLASS block-FP8 kernel is slower still there (0.89 TFLOP/s at batch "
             "1, 34 us). A thread block of the kernel walks the whole K in steps of the 128-wide scale block, "
             "each step loading its A and B tiles and both scale vectors before the scaled accumulate; at decode "
             "sizes a few tiles cover N (N / BLOCK_SIZE_N of 32-128), so the chain of K steps, not the HBM, sets "
             "the time: 23.3 us / (7168 / 128 = 56 steps). SGLang's H200 tables of the same kernels (sglang#3893, "
             "2025-02, 'SGLang' column = Triton w8a8_block_fp8_matmul: 45-51 us at K = 7168 for N 576-2304, "
             "M 8-64; sglang#5820, 'vllm' = vLLM's CUTLASS block FP8: 45.6 us at N = 3072-4608, K = 7168) run "
             "slower per step; their units are not printed, so the H100 figure with stated units is taken. AMD "
             "GPUs run the same Triton kernel (vLLM's cutlass_block_fp8_supported() is False off CUDA, "
             "layers/quantization/utils/w8a8_utils.py; SGLang's DeepGEMM and sgl-kernel block GEMMs are CUDA-only) "
             "and take H100's time a step as their floor, assumed: the one CDNA measurement at hand is slower "
             "(ROCm/aiter#1232, 2025-10, MI350X, a Triton block-scale GEMM at M = 64-256, N = 2112, K = 7168: "
             "117-129 us before tuning and 43-68 us after, 0.8-2.3 us a K step against H100's 0.42)",
             "serving: least time of one block-FP8 (128 x 128 scaled) dense GEMM per 128 of its K, in engines "
             "that run the Triton or CUTLASS-2.x block-FP8 GEMM (EngineProfile.block_fp8_k_step_s)"),
    Constant("serve.triton_block_fp8_moe_flops_per_s",
             2 * 2048 * 8 * (512 + 256) * 7168 / 2818.65e-6, "FLOP/s",
             "vllm-project/vllm#13932 (2025-02-26, 'Add option to use DeepGemm contiguous grouped gemm kernel for "
             "fused MoE operations'), 'H100 results' of benchmarks/kernels/benchmark_moe.py --dtype=fp8_w8a8 "
             "--model deepseek-ai/DeepSeek-V3 (E = 256, topk = 8, K = 7168, N = 512 at TP = 8): the Triton "
             "fused_moe with DeepSeek's 128 x 128 block-scaled FP8 weights takes 2818.65 us a call at batch 2048, "
             "TP = 8; its FLOPs are 2 x 2048 tokens x 8 experts x (512 + 256) x 7168 (w1 gate+up, w2 down) = "
             "1.80e11, i.e. 64 TFLOP/s, a fifteenth of H100's dense BF16 peak. The same table at TP = 1, 2, 4 "
             "(N = 4096, 2048, 1024) gives 69-80 TFLOP/s at batch 1536-3072 (e.g. TP = 1, batch 3072: 27189.87 "
             "us for 2.16e12 FLOPs), so the rate is the kernel's, not one shape's: like the dense block GEMM "
             "(serve.block_fp8_k_step_s) it rescales its accumulator by both scale vectors after every 128-wide "
             "K step, and it gathers its rows through the sorted token ids. Taken as the ceiling on other GPUs "
             "running the same Triton kernel (H200: the same SMs; AMD: vLLM and SGLang ROCm releases of early "
             "2025 run the same Triton fused_moe), assumed: no other measurement at hand",
             "serving: most FLOP/s of the routed experts' grouped GEMMs (a prefill's) in engine releases that run "
             "DeepSeek's block-FP8 MoE through the Triton fused_moe kernel (EngineProfile.block_fp8_moe_flops_per_s)"),
    Constant("serve.fp8_channelwise_unfused_bytes", 24, "bytes",
             _ROCM_FP8_NAIVE + ": per output element the GEMM writes fp32 (4 bytes where a fused GEMM writes 2 "
             "of bf16: +2), the multiply by the token scales reads and writes fp32 (8), the multiply by the "
             "channel scales likewise (8), the cast reads fp32 and writes bf16 (6): 2 + 8 + 8 + 6 = 24 bytes of "
             "HBM traffic a fused (CUTLASS epilogue or row-wise scaled) GEMM does not move",
             "serving: HBM bytes per output element of an FP8 GEMM that vLLM runs unfused on AMD GPUs "
             "(EngineProfile.rocm_fp8_channelwise_unfused), priced memory-bound after the GEMM"),
    Constant("serve.trtllm_pytorch_unfused_routing_kernels", 17, "kernels",
             "NVIDIA TensorRT-LLM tech blog 'Optimizing DeepSeek R1 Throughput on NVIDIA Blackwell GPUs' "
             "(docs/source/blogs/tech_blog/blog3_...md), 'Top-K Kernels Fusions': DeepSeek-R1's group-limited "
             "routing with bias and scales 'resulted in 18 PyTorch ops when not fused, see Deepseekv3RoutingImpl' "
             "(tensorrt_llm/_torch/models/modeling_deepseekv3.py), fused later into 'as few as 2 kernels'; the "
             "blog's baseline is February 2025's. 18 ops less the one routing kernel serve.kernels.*.moe_layer "
             "counts: 17",
             "serving step overhead: kernels a grouped-routing MoE layer adds on TensorRT-LLM's PyTorch backend "
             "before the routing fusion (EngineProfile.grouped_topk_kernels)"),
    Constant("serve.triton_mla_decode_block_h", 16, "heads",
             "SGLang python/sglang/srt/layers/attention/triton_ops/decode_attention.py, _decode_grouped_att_m_fwd "
             "(v0.3-v0.4, the backend its model_runner.py forces for MLA models: 'MLA optimization is turned on. "
             "Use triton backend.'): 'BLOCK_H = 16' and grid = (batch, triton.cdiv(head_num, min(BLOCK_H, "
             "kv_group_num)), NUM_KV_SPLITS); MLA's latent cache has one KV head, so kv_group_num = head_num and "
             "each program of 16 query heads loads its sequence's whole latent cache (Lk 576, BLOCK_DMODEL 512 + "
             "BLOCK_DPE 64). Batch is the grid's fastest index, so the head groups of one sequence run a batch "
             "of programs apart: assumed no L2 reuse between them",
             "serving: an MLA decode step on an engine running this kernel reads the latent cache once per 16 "
             "query heads a GPU computes (EngineProfile.mla_decode_head_block)"),
    Constant("serve.vllm_v0_min_batched_tokens", 2048, "tokens",
             "vLLM V0 SchedulerConfig.__post_init__ (vllm/config.py, read at v0.7.3): without chunked prefill "
             "'max_num_batched_tokens = max(self.max_model_len, 2048)' ('If max_model_len is too short, use 2048 "
             "as the default value for higher throughput'); with chunked prefill 2048 at v0.7.3 (512 at v0.6.3)",
             "serving: the token budget of a vLLM V0 step without chunked prefill (--max-model-len known)"),
    Constant("serve.vllm_mla_cache_align_bytes", 256, "bytes",
             "vLLM V0 vllm/worker/cache_engine.py (0.7.x): CacheEngine._align_cache is 'model_config.use_mla and "
             "current_platform.is_cuda() and envs.VLLM_CUDA_MEM_ALIGN_KV_CACHE' (on by default), and "
             "get_cache_block_size / _allocate_kv_cache round each token's latent entry (one KV head of 576 = "
             "kv_lora_rank 512 + rope 64 values, the whole latent on every tp rank) up with align_to_256bytes in "
             "the model's 16-bit dtype: 1152 -> 1280 bytes, the kernels reading the first 576 values. Removed by "
             "vllm-project/vllm#14842 (2025-03-15, 'Get rid of mla cache alignment', before v0.8.0), whose log "
             "shows DeepSeek-R1 tp 8 on V0 with 4739 GPU blocks aligned against 5266 unaligned (ratio 0.90 = "
             "1152/1280)",
             "serving: KV-cache capacity of an MLA model on vLLM below 0.8 on NVIDIA GPUs "
             "(EngineProfile.mla_cache_align_bytes)"),
    Constant("serve.vllm_fused_moe_chunk_tokens", 32768, "tokens",
             "vLLM vllm/envs.py 'VLLM_FUSED_MOE_CHUNK_SIZE' default '32768' (0.6-0.8 line); vllm/model_executor/"
             "layers/fused_moe/fused_moe.py fused_experts_impl: 'M = min(num_tokens, CHUNK_SIZE)', "
             "intermediate_cache1 (M, topk, N), intermediate_cache2 (M * topk, N // 2), intermediate_cache3 (M, "
             "topk, K) in the activation dtype (N = 2 x the expert's width on the GPU, K = hidden). Check: a vLLM "
             "0.7.3 start-up log of DeepSeek-R1 tp 8 on H200 with --max-num-batched-tokens 32000 --max-num-seqs "
             "1024 reports 'PyTorch activation peak memory takes 6.37GiB'; the estimate with these buffers is 6.1 "
             "GiB, without them 2.7 GiB",
             "serving: the activation peak of vLLM's profiling pass for a MoE model, which comes out of the KV "
             "cache (EngineProfile.fused_moe_chunk_tokens)"),
    Constant("serve.max_position_embeddings.deepseek-v3", 163840, "tokens",
             "deepseek-ai/DeepSeek-V3 and DeepSeek-R1 config.json max_position_embeddings 163840; vLLM takes it "
             "as max_model_len when --max-model-len is not given (vllm-project/vllm#14921, 2025-03-17: the V0 "
             "engine v0.7.4.dev497 serving DeepSeek-R1 with no --max-model-len logs 'max_seq_len=163840, ... "
             "chunked_prefill_enabled=False')",
             "serving: vLLM's default max_model_len for this model, which sizes V0's unchunked token budget and "
             "its profiling pass (serve.run.build_setup)"),
    Constant("serve.attn_split_fill", 0.8, "fraction",
             "flash-attention csrc flash_api.cpp num_splits_heuristic: one split once batch x heads x "
             "m-blocks reach 80% of the SMs",
             "serving step overhead: decode batches below this SM fill launch the split-KV combine kernel"),
    Constant("serve.kernels.vllm.per_step", 8, "kernels",
             "vLLM LlamaForCausalLM (v0.6-v0.7): embed_tokens, final norm, last-token index_select "
             "(LogitsProcessor._prune_hidden_states), lm_head, logits float cast, sampler softmax, "
             "log_softmax and argmax/multinomial (vllm/model_executor/layers/sampler.py)",
             "serving step overhead: kernels outside the layers per step (vLLM)"),
    Constant("serve.kernels.sglang.per_step", 8, "kernels",
             "SGLang v0.4 LlamaForCausalLM and LogitsProcessor: embed_tokens, final norm, last-token gather, "
             "lm_head, float cast; Sampler: softmax, top-k/top-p sampling from probs (flashinfer) or argmax, "
             "and the next-token write",
             "serving step overhead: kernels outside the layers per step (SGLang)"),
    Constant("serve.kernels.trtllm.per_step", 8, "kernels",
             "TensorRT-LLM LLaMAForCausalLM: vocab_embedding, ln_f, gather_last_token_logits, lm_head; the "
             "batch manager's decoder: softmax/top-k sampling (samplingTopKKernels.cu: two stages), stop "
             "criteria and sequence-length update (assumed one kernel each)",
             "serving step overhead: kernels outside the layers per step (TensorRT-LLM)"),
]

# ---- stragglers: the synchronous wait for the slowest GPU (defaults of specs.hardware.StragglerModel) --
_STRAGGLERS: list[Constant] = [
    Constant("stragglers.gpu_speed_cv", 0.01, "fraction",
             "Sinha et al., 'Not All GPUs Are Created Equal' (SC'22, arXiv 2208.11035): 8% average performance "
             "variation (max 22%) across the same-SKU GPUs of large clusters, read as the fastest-to-slowest "
             "range of ~10^4 GPUs, about 8 standard deviations of a normal sample that size: cv = 1%",
             "step time (part 'stragglers'): per-GPU sustained speed variation, std/mean; the step waits for "
             "the slowest GPU of the job (expected maximum of the job's GPUs over the mean)"),
    Constant("stragglers.thermal_slowdown", 0.015, "fraction",
             "Kurzynski et al., Lit Silicon (arXiv 2511.09861): the hottest GPU of a node throttles and the "
             "node's others wait for it (mitigation recovered up to 6% on MI300X); 1.5% is the middle of the "
             "1-2% throughput swing Llama 3 saw from temperature-driven DVFS (arXiv 2407.21783 sec. 3.3.4)",
             "step time (part 'stragglers'): the hottest GPU of each node runs this much slower"),
    Constant("stragglers.slow_node_fraction", 0.0, "fraction",
             "assumed: production runs find and drain fail-slow hosts (MegaScale, arXiv 2402.15627 sec. 6.3), "
             "so a priced job has none by default",
             "step time (part 'stragglers'): the share of nodes that are fail-slow"),
    Constant("stragglers.slow_node_slowdown", 0.10, "fraction",
             "MegaScale (arXiv 2402.15627 sec. 6.3): fail-slow hosts took about 10% longer",
             "step time (part 'stragglers'): how much slower a fail-slow node runs"),
]

CONSTANTS: tuple[Constant, ...] = (*_PROFILES, *_COMPUTE, *_GEMM_ALIGN, *_HOST, *_WORKLOAD, *_SCHEDULE, *_MEMORY,
                                   *_NETWORK, *_NCCL, *_POWER, *_FIT_BOUNDS, *_TORCH_STACK, *_MOE,
                                   *_SERVE_KERNELS, *_STRAGGLERS)

TABLE: Mapping[str, Constant] = MappingProxyType({c.name: c for c in CONSTANTS})
if len(TABLE) != len(CONSTANTS):  # pragma: no cover - caught by the tests
    raise RuntimeError("duplicate constant names")

ARCHITECTURES = ("ampere", "hopper", "blackwell", "cdna")


def constant(name: str) -> Constant:
    """The entry ``name`` of the table (KeyError if there is none)."""
    return TABLE[name]


def value(name: str) -> float:
    """The value of constant ``name``."""
    return TABLE[name].value


def group(prefix: str) -> dict[str, float]:
    """The constants named ``prefix.<key>`` (one level down), as {key: value} in table order."""
    head = prefix + "."
    return {c.name[len(head):]: c.value for c in CONSTANTS
            if c.name.startswith(head) and "." not in c.name[len(head):]}


# ---- markdown ------------------------------------------------------------------------------------
_ARCH_LABELS = {"ampere": "Ampere (A100)", "hopper": "Hopper (H100, H800, H200)", "blackwell": "Blackwell (B200)",
                "cdna": "CDNA (MI250X, MI300X)"}


def _fmt(v: float) -> str:
    return f"{v:g}"


def architecture_table() -> str:
    """The per-architecture summary of the hardware profiles (docs/model.md, section 2)."""
    rows = ["| architecture | GEMM bf16 / fp8 | K½ | attention fwd / bwd, s½ | FlashAttention-2 fwd / bwd, s½ "
            "| HBM | NVLink / NIC (NCCL bus bw) |",
            "|---|---|---|---|---|---|---|"]
    for arch in ARCHITECTURES:
        p = f"profile.{arch}"
        g = group(p + ".gemm_efficiency")
        v = group(p)
        label = _ARCH_LABELS[arch]
        if all(c.assumed for c in CONSTANTS if c.name.startswith(p + ".")):
            label += " (assumed, unmeasured)"
        fa2 = (f"{_fmt(v['attention_fa2_fwd_efficiency'])} / {_fmt(v['attention_fa2_bwd_efficiency'])}, "
               f"s½ {_fmt(v['attention_fa2_seq_half'])}" if "attention_fa2_fwd_efficiency" in v else "as flash")
        rows.append(f"| {label} | {_fmt(g['bf16'])} / {_fmt(g['fp8'])} | {_fmt(v['k_half'])} "
                    f"| {_fmt(v['attention_fwd_efficiency'])} / {_fmt(v['attention_bwd_efficiency'])}, "
                    f"s½ {_fmt(v['attention_seq_half'])} | {fa2} | {_fmt(v['memory_efficiency'])} "
                    f"| {_fmt(v['nvlink_efficiency'])} / {_fmt(v['nic_efficiency'])} |")
    return "\n".join(rows)


def markdown_table(constants: Sequence[Constant] = CONSTANTS) -> str:
    """Every constant as a markdown table: name, value, unit, what it prices, source."""
    rows = ["| constant | value | unit | prices | source |", "|---|---|---|---|---|"]
    for c in constants:
        rows.append(f"| `{c.name}` | {_fmt(c.value)} | {c.unit} | {c.prices} | {c.source} |")
    return "\n".join(rows)


BLOCKS = {"architectures": architecture_table, "all": markdown_table}
_BLOCK = re.compile(r"(<!-- BEGIN generated constants:(\w+)[^>]*-->\n)(.*?)(<!-- END generated constants:\2 -->)",
                    re.S)


def render(doc: str) -> str:
    """``doc`` with each generated block (between its BEGIN/END markers) replaced by the table's text."""
    return _BLOCK.sub(lambda m: m.group(1) + BLOCKS[m.group(2)]() + "\n" + m.group(4), doc)
