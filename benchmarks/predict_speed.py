"""Microseconds per prediction (goal: <= 1 ms for GPT-3 175B on 1024 A100s).

Run: python benchmarks/predict_speed.py
Prints the cold time (first call: builds and prices the graph) and the warm time per call for a few
jobs. Warm calls still build the job's graph and price every op; only per-shape layer op lists and
GEMM shape efficiencies are memoized.
"""
from __future__ import annotations

import platform
import time

from clustertwin.predict import make_training_job, predict_job

JOBS = {
    "gpt3-175b / 1024 x a100-80gb": dict(model="gpt3-175b", gpu="a100-80gb", num_gpus=1024,
                                         plan="tp=8,pp=16,dp=8,sp=1,recompute=selective",
                                         micro_batch=1, global_batch=1536, seq_len=2048),
    "llama3.1-405b / 16384 x h100": dict(model="llama3.1-405b", gpu="h100-sxm", num_gpus=16384,
                                         plan="tp=8,pp=16,dp=128,sp=1", micro_batch=1, global_batch=2048,
                                         seq_len=8192),
    "megatron-1t / 3072 x a100-80gb": dict(model="megatron-1t", gpu="a100-80gb", num_gpus=3072,
                                           plan="tp=8,pp=64,dp=6,recompute=full", micro_batch=1,
                                           global_batch=3072, seq_len=2048),
}


def main() -> None:
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'})")
    for label, kw in JOBS.items():
        kw = dict(kw)
        model = kw.pop("model")
        t0 = time.perf_counter()
        job = make_training_job(model, **kw)
        predict_job(job)
        cold = time.perf_counter() - t0
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            predict_job(job)
        warm = (time.perf_counter() - t0) / n
        print(f"{label:34s} cold {cold * 1e3:8.2f} ms   warm {warm * 1e6:8.1f} us/prediction"
              f"   ({'meets' if warm <= 1e-3 else 'misses'} the 1 ms goal)")


if __name__ == "__main__":
    main()
