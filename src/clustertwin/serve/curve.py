"""The data of the serving view: one run's latency distributions and the throughput-latency curve over
request rate (the same deployment simulated at rates from light load to past its capacity).

>>> from clustertwin.serve.run import ServeRequest
>>> d = serving_view_data(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=256,
...                                    output_len=32, num_requests=40), points=3)
>>> len(d["curve"]), sorted(d["samples"])
(3, ['e2e_latency_s', 'tpot_s', 'ttft_s'])
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from .run import ServeRequest, predict_serving

LOADS = (0.1, 0.25, 0.5, 0.7, 0.85, 1.0, 1.15)   # fractions of the offline capacity
MAX_SAMPLES = 2000


def serving_view_data(q: ServeRequest, *, points: int = len(LOADS),
                      progress: Callable[[int, int], None] | None = None) -> dict:
    """``q``'s result (JSON), its per-request latencies (at most MAX_SAMPLES, evenly picked) and, for
    ``points`` request rates spread up to 115% of the offline capacity, throughput and latencies."""
    total = points + 2
    base = predict_serving(q)
    if progress:
        progress(1, total)
    out: dict = {"schema": 1, "run": base.to_json(), "samples": {}, "curve": []}
    if base.sim is None:
        return out
    for name, x in (("ttft_s", base.sim.ttft_s), ("tpot_s", base.sim.tpot_s), ("e2e_latency_s", base.sim.e2e_s)):
        pick = np.linspace(0, len(x) - 1, min(len(x), MAX_SAMPLES)).astype(int) if len(x) else np.array([], int)
        out["samples"][name] = [float(v) for v in np.sort(x)[pick]]
    cap = predict_serving(replace(q, concurrency=None, request_rate=None, workload="offline", dataset_file=None)
                          if q.dataset_file is None else replace(q, concurrency=None, request_rate=None,
                                                                 workload="offline"))
    if progress:
        progress(2, total)
    capacity = cap.requests_per_s
    loads = np.linspace(LOADS[0], LOADS[-1], points) if points != len(LOADS) else np.array(LOADS)
    for i, f in enumerate(loads):
        rate = float(f * capacity)
        r = predict_serving(replace(q, concurrency=None, request_rate=rate, workload="poisson"))
        out["curve"].append({"request_rate": rate, "load": float(f), "output_tokens_per_s": r.output_tokens_per_s,
                             "ttft_s": r.latency("ttft_s"), "tpot_s": r.latency("tpot_s"),
                             "e2e_latency_s": r.latency("e2e_latency_s")})
        if progress:
            progress(3 + i, total)
    out["capacity_requests_per_s"] = capacity
    return out


__all__ = ["serving_view_data", "LOADS"]
