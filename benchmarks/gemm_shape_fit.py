"""Fit Hopper's GEMM shape terms to the measured H100 GEMM microbenchmarks, and print the residuals.

Reads the ``gemm`` rows of shared/calibration/h100-sxm_microbench_2026-11-22.csv (bf16 ``a @ b`` on one
H100 SXM, back-to-back calls from PyTorch, default clocks; value = 2mnk / time). The model of one call is

    time = t_fixed + 2mnk / (peak x e_short x shape(m, n, k))

- ``shape``: the pricing's ``gemm_shape_efficiency`` (best tile, padding to whole tiles, wave quantization
  with ``profile.hopper.wave_quantization`` held, and the k-loop's per-tile prologue/epilogue K/(K + K_half));
- ``t_fixed``: GPU time per GEMM kernel that does not scale with its work: the launch latency between
  back-to-back kernels on a busy queue (``host.kernel_gap_s``, which the pricing already adds to every
  kernel) plus the kernel's own fill and drain (CTA launch, the first k-tiles' loads before any MMA,
  the last output tiles' epilogue writes after the last);
- ``e_short``: the large-shape level of these short runs (not used in pricing: training runs sustain
  lower clocks, ``profile.hopper.gemm_efficiency.bf16`` keeps the documented sustained level).

Procedure: a grid over K_half (16-element steps) and t_fixed (0.1 us steps); for each point ``e_short``
in closed form (the geometric mean that zeroes the mean log residual); the point with the least RMS of
log(predicted / measured time) wins. Wave quantization is held: the scan printed below shows the data do
not determine it. The fitted t_fixed less ``host.kernel_gap_s`` is ``profile.hopper.gemm_fixed_s``.

    python benchmarks/gemm_shape_fit.py [--csv PATH]
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from clustertwin.constants import value  # noqa: E402
from clustertwin.cost.compute import gemm_shape_efficiency  # noqa: E402

CSV = ROOT.parent / "shared" / "calibration" / "h100-sxm_microbench_2026-11-22.csv"
PEAK_BF16 = 989e12        # H100 SXM dense BF16 datasheet peak (the catalog's h100-sxm figure)
SMS = 132                 # H100 SXM streaming multiprocessors
K_HALF_GRID = np.arange(0, 1024 + 1, 16)
T_FIXED_GRID = np.arange(0.0, 12e-6 + 1e-9, 0.1e-6)


def read_gemms(path: Path) -> list[tuple[int, int, int, float]]:
    with open(path, newline="") as f:
        return [(int(r["m"]), int(r["n"]), int(r["k"]), float(r["value"]))
                for r in csv.DictReader(f) if r["kind"] == "gemm" and r["dtype"] == "bf16"]


def model(rows, k_half: float, t_fixed: float, wave_q: float):
    """(RMS log residual, e_short, log residuals) of one parameter point; None where t_fixed exceeds a time."""
    flops = np.array([2.0 * m * n * k for m, n, k, _ in rows])
    meas = flops / np.array([v for *_, v in rows])
    shape = np.array([gemm_shape_efficiency(m, n, k, 1, SMS, wave_q, k_half) for m, n, k, _ in rows])
    work = meas - t_fixed
    if (work <= 0).any():
        return None
    e_short = math.exp(float(np.mean(np.log(flops / (PEAK_BF16 * shape * work)))))
    pred = t_fixed + flops / (PEAK_BF16 * e_short * shape)
    res = np.log(pred / meas)
    return float(np.sqrt(np.mean(res ** 2))), e_short, res


def fit(rows, wave_q: float):
    best = None
    for kh in K_HALF_GRID:
        for t0 in T_FIXED_GRID:
            out = model(rows, float(kh), float(t0), wave_q)
            if out is not None and (best is None or out[0] < best[0]):
                best = (out[0], float(kh), float(t0), out[1], out[2])
    assert best is not None
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    args = ap.parse_args(argv)
    rows = read_gemms(args.csv)
    wave_q = value("profile.hopper.wave_quantization")
    gap = value("host.kernel_gap_s")
    rms, kh, t0, e_short, res = fit(rows, wave_q)
    print(f"{args.csv.name}: {len(rows)} bf16 GEMMs; wave_quantization held at {wave_q}")
    print(f"fit: K_half = {kh:.0f} elements, t_fixed = {t0 * 1e6:.1f} us per kernel "
          f"(= host.kernel_gap_s {gap * 1e6:.1f} us + in-kernel fill/drain {(t0 - gap) * 1e6:.1f} us), "
          f"e_short = {e_short:.3f}; RMS log residual {rms * 100:.1f}%")
    _, e0, res0 = model(rows, value("profile.hopper.k_half"), 0.0, wave_q)  # type: ignore[misc]
    big = 0   # the 8192^3 row: the large-shape reference of the ratios
    flops = [2.0 * m * n * k for m, n, k, _ in rows]
    meas_eff = [v / PEAK_BF16 for *_, v in rows]
    print(f"\n{'m x n x k':>20} {'time us':>9} {'meas eff':>9} {'ratio':>6} | {'fit ratio':>9} {'resid':>6} | "
          f"{'no t_fixed ratio':>16} {'resid':>6}")
    fit_eff = [f / (t0 + f / (PEAK_BF16 * e_short * gemm_shape_efficiency(m, n, k, 1, SMS, wave_q, kh)))
               for f, (m, n, k, _) in zip(flops, rows)]
    old_eff = [gemm_shape_efficiency(m, n, k, 1, SMS, wave_q, value("profile.hopper.k_half")) for m, n, k, _ in rows]
    for i, (m, n, k, v) in enumerate(rows):
        print(f"{f'{m}x{n}x{k}':>20} {flops[i] / v * 1e6:9.1f} {meas_eff[i]:9.3f} {meas_eff[i] / meas_eff[big]:6.3f} | "
              f"{fit_eff[i] / fit_eff[big]:9.3f} {-res[i] * 100:+5.1f}% | {old_eff[i] / old_eff[big]:16.3f} "
              f"{-res0[i] * 100:+5.1f}%")
    print("(resid: measured time / model time - 1 as log; 'no t_fixed': the shape terms alone, K_half "
          f"{value('profile.hopper.k_half'):.0f}, no per-kernel fixed time, e_short {e0:.3f})")
    print("\nwave_quantization scan (K_half and t_fixed refitted at each):")
    for wq in (0.0, 0.25, 0.5, 0.75, 1.0):
        r, k2, t2, e2, _ = fit(rows, wq)
        print(f"  wave {wq:4.2f}: RMS {r * 100:.2f}%  K_half {k2:.0f}  t_fixed {t2 * 1e6:.1f} us  e_short {e2:.3f}")
    print("\nprofile of the training-run level (sustained clocks): profile.hopper.gemm_efficiency.bf16 "
          f"{value('profile.hopper.gemm_efficiency.bf16')} x shape(8192^3) "
          f"{gemm_shape_efficiency(8192, 8192, 8192, 1, SMS, wave_q, kh):.3f} = "
          f"{value('profile.hopper.gemm_efficiency.bf16') * gemm_shape_efficiency(8192, 8192, 8192, 1, SMS, wave_q, kh):.3f}"
          f" of peak; sustained / short-run level {value('profile.hopper.gemm_efficiency.bf16') / e_short:.3f}")
    copy = [float(r["value"]) for r in csv.DictReader(open(args.csv, newline="")) if r["kind"] == "copy_read_plus_write"]
    if copy:
        print(f"physics check of K_half: a tile's epilogue writes its outputs at the SM's share of the copy bandwidth "
              f"while the k-loop runs 2k FLOP per output at its share of the tensor rate: K_half = e_short x peak / "
              f"copy bandwidth = {e_short:.3f} x {PEAK_BF16 / 1e12:.0f}e12 / {copy[0]:.3g} = "
              f"{e_short * PEAK_BF16 / copy[0]:.0f} elements (fitted {kh:.0f})")


if __name__ == "__main__":
    main()
