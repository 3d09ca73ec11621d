"""Residuals of vTrain's single-node Megatron-DeepSpeed runs against every configuration dimension.

Predicts every row of data/validation/vtrain_single_node.csv (1,440 measured iterations on 2-8 A100s of
one node) and prints, per value of tp, pp, dp, micro-batch, hidden, layers, sequence, heads, global
batch, GPUs and micro-batches per iteration: rows, mean signed error, median, MAPE and rows beyond 25%.
Then, for pp = 1, the measured and predicted time per layer per micro-batch (forward, recomputation and
backward of one layer), the table that shows the host-bound floor; the same along the diagonals of equal
work per GPU (micro-batch / tp fixed), where what grows with tp is the TP all-reduce; and the mean error
per tp and micro-batch.

    python benchmarks/vtrain_residuals.py [--framework-field NAME=VALUE ...]

``--framework-field cpu_dispatch_s=35e-6`` prices the rows with that megatron-deepspeed profile field
replaced (for example the Megatron defaults, to see the residuals before the profile's host costs).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from clustertwin.specs import framework as fw_mod  # noqa: E402
from clustertwin.validate.compare import validate_rows  # noqa: E402
from clustertwin.validate.runs import read_runs  # noqa: E402

CSV = ROOT / "data" / "validation" / "vtrain_single_node.csv"
DIMS = ("tp", "pp", "dp", "micro_batch", "hidden", "layers", "seq_len", "heads", "global_batch", "num_gpus",
        "microbatches")


def _row_values(raw: dict) -> dict[str, int]:
    v = {k: int(raw[k]) for k in DIMS if k != "microbatches"}
    v["microbatches"] = v["global_batch"] // (v["micro_batch"] * v["dp"])
    return v


def _line(key: str, errs: list[float]) -> str:
    return (f"  {key:>6} {len(errs):5d} {st.mean(errs):+8.3f} {st.median(errs):+8.3f} "
            f"{st.mean(abs(e) for e in errs):7.3f} {sum(abs(e) > 0.25 for e in errs):6d}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework-field", action="append", default=[], metavar="NAME=VALUE",
                    help="replace a float field of the megatron-deepspeed profile")
    args = ap.parse_args(argv)
    if args.framework_field:
        base = fw_mod.FRAMEWORK_PROFILES["megatron-deepspeed"]
        kw = {k: float(v) for k, v in (f.split("=", 1) for f in args.framework_field)}
        fw_mod.FRAMEWORK_PROFILES["megatron-deepspeed"] = dataclasses.replace(base, **kw)
    runs = read_runs(CSV)
    report = validate_rows(runs)
    data = []
    for run, res in zip(runs, report.rows):
        if res.error is None:
            continue
        data.append((_row_values(run.raw), res.error, res.measured, res.predicted))
    errs = [e for _, e, _, _ in data]
    print(f"vTrain single node: {len(data)} rows, MAPE {st.mean(abs(e) for e in errs):.3f}, "
          f"mean error {st.mean(errs):+.3f}, beyond 25%: {sum(abs(e) > 0.25 for e in errs)}")
    print("error = predicted / measured - 1 (negative: the model is too fast)")
    for dim in DIMS:
        groups: dict[int, list[float]] = defaultdict(list)
        for v, e, _, _ in data:
            groups[v[dim]].append(e)
        print(f"\n{dim}\n  {'value':>6} {'rows':>5} {'mean':>8} {'median':>8} {'MAPE':>7} {'>25%':>6}")
        for key in sorted(groups):
            print(_line(str(key), groups[key]))
    print("\npp = 1: ms per layer per micro-batch (forward + recomputation + backward), mean over rows")
    print(f"  {'hidden':>6} {'tp':>3} {'mb':>3} {'rows':>5} {'measured':>9} {'predicted':>9}")
    cells: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
    for v, _, m, p in data:
        if v["pp"] == 1:
            per = 1e3 / (v["microbatches"] * v["layers"])
            cells[(v["hidden"], v["tp"], v["micro_batch"])].append((m * per, p * per))
    for (h, tp, mb), xs in sorted(cells.items()):
        print(f"  {h:6d} {tp:3d} {mb:3d} {len(xs):5d} {st.mean(x for x, _ in xs):9.2f} "
              f"{st.mean(y for _, y in xs):9.2f}")
    print("\npp = 1, equal work per GPU (micro-batch / tp fixed: the same GEMM FLOPs and score elements per GPU):"
          "\n  ms per layer per micro-batch as above, and the TP all-reduce message (MiB, fp16 activations,"
          "\n  six per layer: forward, recomputation and backward each two)")
    print(f"  {'hidden':>6} {'mb/tp':>5} {'tp':>3} {'mb':>3} {'msg MiB':>7} {'measured':>9} {'predicted':>9}")
    for h in sorted({k[0] for k in cells}):
        for ratio in (1, 2, 4, 8):
            for tp in (1, 2, 4, 8):
                key = (h, tp, ratio * tp)
                if key in cells:
                    xs = cells[key]
                    # micro-batch x seq 1024 x hidden x 2 bytes; none at tp 1
                    msg = f"{ratio * tp * 1024 * h * 2 / 2**20:7.0f}" if tp > 1 else f"{'-':>7}"
                    print(f"  {h:6d} {ratio:5d} {tp:3d} {ratio * tp:3d} {msg} "
                          f"{st.mean(x for x, _ in xs):9.2f} {st.mean(y for _, y in xs):9.2f}")
    print("\nmean error by tp (rows) and micro-batch (columns)")
    grid: dict[tuple[int, int], list[float]] = defaultdict(list)
    for v, e, _, _ in data:
        grid[(v["tp"], v["micro_batch"])].append(e)
    mbs = sorted({k[1] for k in grid})
    print("  tp  " + "".join(f"{mb:>8d}" for mb in mbs))
    for tp in sorted({k[0] for k in grid}):
        print(f"  {tp:2d}  " + "".join(f"{st.mean(grid[(tp, mb)]):+8.3f}" if (tp, mb) in grid else f"{'':>8}"
                                       for mb in mbs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
