"""Search speed: plans evaluated, plans/s and total time of an exhaustive search, and the speed-up
over calling predict once per plan.

    python benchmarks/search_speed.py            # the three dense cases of docs/search.md, and MoE
    python benchmarks/search_speed.py --quick     # the smallest case only
    python benchmarks/search_speed.py --only deepseek   # the cases whose model name holds "deepseek"

For each case the exhaustive search at the GPU count given is timed (``--pareto-points 1``), then
the default search with its Pareto view (N, N/2, N/4). The naive alternative is priced by timing
``make_job`` + ``predict_job`` on a random sample of the space's candidates (valid and invalid
alike, as a loop over the space would meet them) and scaling to the space's size. Figures only: no
assertion; the machine (CPU count, Python) is printed with them.
"""
from __future__ import annotations

import os
import platform
import random
import sys
import time

from clustertwin.catalog import cluster_for_gpu, load_cluster, load_model
from clustertwin.errors import ClusterTwinError
from clustertwin.predict import predict_job
from clustertwin.search import make_space, search
from clustertwin.specs import make_job, make_plan

# (label, model, GPU, GPU count, global batch, sequence); a GPU given as "cluster:NAME" is that cluster
# preset (its GPU count). DeepSeek-V3 on its 2,048-H800 cluster at what `clustertwin search --model
# deepseek-v3 --cluster deepseek-v3-h800` defaults to (512 sequences of 4,096 tokens).
CASES = [
    ("GPT-3 175B on 1,024 A100", "gpt3-175b", "a100-80gb", 1024, 1536, 2048),
    ("Llama 3.1 405B on 16,384 H100", "llama3.1-405b", "h100-sxm", 16384, 2048, 8192),
    ("Megatron 1T on 16,384 H100", "megatron-1t", "h100-sxm", 16384, 8192, 2048),
    ("DeepSeek-V3 (MoE) on 2,048 H800", "deepseek-v3", "cluster:deepseek-v3-h800", 2048, 512, 4096),
]


def naive_seconds_per_plan(space, samples: int, seed: int = 0) -> tuple[float, float]:
    """Mean seconds of make_job + predict_job over random candidates of the space, and the share of
    them that are valid (the rest raise a PlanError, which is cheaper)."""
    rng = random.Random(seed)
    facts = list(space.factorizations())
    valid = 0
    t0 = time.perf_counter()
    for _ in range(samples):
        tp, pp, cp, dp = rng.choice(facts)
        plan = make_plan(tp=tp, pp=pp, cp=cp, dp=dp, vpp=rng.choice(space.vpp_domain), ep=rng.choice(space.ep_domain),
                         micro_batch=rng.choice(space.mb_domain), global_batch=space.global_batch,
                         sp=tp > 1 and rng.random() < 0.5, zero_stage=rng.choice((0, 1, 2, 3)),
                         recompute=rng.choice(("none", "selective", "full")), precision=space.precision,
                         overlap_dp_comm=rng.random() < 0.5, overlap_param_gather=rng.random() < 0.5,
                         overlap_tp_comm=rng.random() < 0.5, overlap_pp_comm=rng.random() < 0.5)
        try:
            predict_job(make_job(space.model, space.cluster, plan, space.seq_len, space.framework))
            valid += 1
        except ClusterTwinError:
            pass
    return (time.perf_counter() - t0) / samples, valid / samples


def valid_seconds_per_plan(space, samples: int, seed: int = 1) -> float:
    """Mean seconds of make_job + predict_job over random plans that pass every check but memory."""
    rng = random.Random(seed)
    structures, _, _ = space.structures()
    t0 = time.perf_counter()
    for _ in range(samples):
        s = rng.choice(structures)
        plan = make_plan(tp=s.tp, pp=s.pp, vpp=s.vpp, cp=s.cp, dp=s.dp, ep=s.ep, micro_batch=s.micro_batch,
                         global_batch=space.global_batch, sp=s.tp > 1 and rng.random() < 0.5,
                         zero_stage=rng.choice((0, 1, 2, 3)), recompute=rng.choice(("none", "selective", "full")),
                         precision=space.precision)
        predict_job(make_job(space.model, space.cluster, plan, space.seq_len, space.framework))
    return (time.perf_counter() - t0) / samples


def main(quick: bool = False, only: str | None = None) -> None:
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.machine()}")
    print("| case | plans evaluated | fit in memory | shape classes | exhaustive search | plans/s | "
          "with Pareto view (N, N/2, N/4) | predict per plan (valid) | predict once per plan | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases = [c for c in CASES if only is None or only in c[1]]
    for label, model, gpu, n, gb, seq in cases[:1] if quick else cases:
        preset = gpu.removeprefix("cluster:") if gpu.startswith("cluster:") else None
        kw = (dict(cluster=preset) if preset else dict(gpu=gpu, num_gpus=n)) | dict(global_batch=gb, seq_len=seq)
        t0 = time.perf_counter()
        r = search(model, **kw, top=10, pareto_points=1)
        exhaustive = time.perf_counter() - t0
        t0 = time.perf_counter()
        search(model, **kw, top=10, pareto_points=3)
        with_pareto = time.perf_counter() - t0
        space = make_space(load_model(model), load_cluster(preset) if preset else cluster_for_gpu(gpu, n), gb, seq)
        per_plan, valid_share = naive_seconds_per_plan(space, 300)
        per_valid = valid_seconds_per_plan(space, 100)
        naive = per_plan * r.evaluated
        print(f"| {label} | {r.evaluated:,} | {r.feasible:,} | {r.shape_classes:,} | {exhaustive:.2f} s | "
              f"{r.evaluated / exhaustive:,.0f} | {with_pareto:.2f} s | {per_valid * 1e3:.2f} ms | "
              f"{naive / 3600:,.1f} h ({valid_share * 100:.0f}% valid) | {naive / exhaustive:,.0f}x |", flush=True)
        best = r.plans[0]
        print(f"|   best: {best.prediction.graph.plan.short()} | {best.prediction.step_time_s:.2f} s/step | "
              f"MFU {best.prediction.mfu * 100:.1f}% | | | | | | | |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main("--quick" in args, args[args.index("--only") + 1] if "--only" in args else None)
