"""How fast the serving twin simulates: 10,000 requests of Llama 3 70B on 8 H100s (tp=8), vLLM profile,
Poisson arrivals at 10 requests/s, 1,024 input and 256 output tokens (issue 18's target: <= 5 s).

    python benchmarks/serve_speed.py [--requests 10000] [--rate 10]

Prints the wall time of the whole prediction (pricing, simulation, metrics) and of the simulation alone.
"""
from __future__ import annotations

import argparse
import time

from clustertwin.serve import ServeRequest, predict_serving


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=10.0)
    a = ap.parse_args()
    for label, kw in (("poisson", {"request_rate": a.rate}), ("offline", {}), ("concurrency 256", {"concurrency": 256})):
        q = ServeRequest(model="llama3-70b", gpu="h100-sxm", num_gpus=8, plan="tp=8", input_len=1024, output_len=256,
                         num_requests=a.requests, **kw)
        t0 = time.perf_counter()
        r = predict_serving(q)
        wall = time.perf_counter() - t0
        print(f"{label:>16}: {a.requests:,} requests of llama3-70b on 8 x h100-sxm in {wall:.2f} s wall "
              f"({r.sim.iterations:,} iterations; {r.output_tokens_per_s:,.0f} output tokens/s simulated)")


if __name__ == "__main__":
    main()
