"""Sanity against practice: for every published run in the validation CSV with a measured iteration
time, search the same job (model, GPUs, global batch, sequence length, precision, framework, and
the software stack's kernels) and compare the best plan found with the published plan, both under
the model. Prints a Markdown table (docs/search.md holds its output).

    python benchmarks/search_vs_published.py [data/validation/public_runs.csv]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from clustertwin.predict import predict_job
from clustertwin.search.tuner import search
from clustertwin.validate import job_from_row, read_runs

DEFAULT_CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "public_runs.csv"


def stack_fixed(job) -> dict:
    """Plan fields that belong to the published software stack rather than to the plan."""
    plan = job.plan
    fixed = {}
    if plan.attention_kernel is not None:
        fixed["attention_kernel"] = plan.attention_kernel
    if plan.overlap_tp_comm is False:          # TP overlap did not exist in that stack
        fixed["overlap_tp_comm"] = False
    if plan.overlap_dp_comm is not None:       # the row says whether DP overlap was used
        fixed["overlap_dp_comm"] = plan.overlap_dp_comm
    return fixed


def why(pub, best) -> str:
    """Where the best plan found differs from the published one, in a few words."""
    a, b = pub.graph.plan, best.graph.plan
    diffs = [f"{k} {getattr(a, k)}→{getattr(b, k)}" for k in ("tp", "pp", "vpp", "cp", "micro_batch", "zero_stage",
                                                              "recompute") if getattr(a, k) != getattr(b, k)]
    if a.dp != b.dp:
        diffs.append(f"dp {a.dp}→{b.dp}")
    gain = {k: pub.breakdown_s[k] - best.breakdown_s[k] for k in pub.breakdown_s}
    top = sorted((k for k in gain if gain[k] > 0), key=lambda k: -gain[k])[:2]
    saved = ", ".join(f"{k} −{gain[k]:.2g} s" for k in top)
    return (", ".join(diffs) or "same sizes, other options") + (f" (saves {saved})" if saved else "")


def short(pred) -> str:
    return pred.graph.plan.short()


def main(csv: Path) -> None:
    rows = [r for r in read_runs(csv) if r.metric == "iteration_time_s"]
    print("| run | GPUs | measured | published plan | model | best found | model | speed-up | "
          "best at the published ZeRO stage | model | speed-up | published fits? | where the best differs |")
    print("|---|---:|---:|---|---:|---|---:|---:|---|---:|---:|---|---|")
    worse = worse_zero = 0
    t0 = time.perf_counter()
    for row in rows:
        job = job_from_row(row)
        pub = predict_job(job)
        kw = dict(cluster=job.cluster, global_batch=job.plan.global_batch, seq_len=job.seq_len,
                  precision=job.plan.precision, framework=job.framework, top=1, pareto_points=1)
        fixed = stack_fixed(job)
        best = search(job.model, fix=fixed, **kw).plans[0].prediction
        same_zero = search(job.model, fix={**fixed, "zero_stage": job.plan.zero_stage}, **kw).plans[0].prediction
        worse += best.step_time_s > pub.step_time_s * (1 + 1e-9)
        worse_zero += same_zero.step_time_s > pub.step_time_s * (1 + 1e-9)

        def ratio(p) -> str:
            r = pub.step_time_s / p.step_time_s
            return f"{r:.2f}x" + (" (slower)" if p.step_time_s > pub.step_time_s * (1 + 1e-9) else "")
        fits = "yes" if pub.fits else f"no: {pub.memory.total_bytes / 2**30:.0f} GiB"
        print(f"| {row.run_id} | {job.cluster.num_gpus:,} | {row.value:.3g} s | {short(pub)} | {pub.step_time_s:.3g} s "
              f"| {short(best)} | {best.step_time_s:.3g} s | {ratio(best)} | {short(same_zero)} | "
              f"{same_zero.step_time_s:.3g} s | {ratio(same_zero)} | {fits} | {why(pub, best)} |", flush=True)
    print(f"\n{len(rows)} runs; best found slower than the published plan under the model: {worse} "
          f"(at the published ZeRO stage: {worse_zero}); {time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CSV)
