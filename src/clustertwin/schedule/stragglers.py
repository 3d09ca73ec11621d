"""The wait for the slowest GPU: a synchronous step runs at the pace of its slowest member.

TP and CP synchronise every layer, PP every micro-batch and DP (the gradient reduction) every step,
so every GPU of a job waits for the slowest one. The step-time formulas price the mean GPU; this
module prices the expected wait on top of it, the step's ``stragglers`` part.

Each GPU's sustained slowdown over the mean GPU is modelled (``specs.hardware.StragglerModel``) as

    x = e + t * [hottest GPU of its node] + d * [its node is fail-slow],   e ~ Normal(0, cv)

- ``cv`` = 1%: Sinha et al., "Not All GPUs Are Created Equal" (SC'22, arXiv 2208.11035): 8% average
  performance variation across the same-SKU GPUs of large clusters, about 8 standard deviations of
  ~10^4 GPUs.
- ``t`` = 1.5%: the Lit Silicon effect (Kurzynski et al., arXiv 2511.09861), the hottest GPU of a node
  throttles and the others wait; the middle of Llama 3's 1-2% temperature swing (arXiv 2407.21783
  sec. 3.3.4).
- ``d`` on a fraction ``f`` of nodes: fail-slow hosts (MegaScale, arXiv 2402.15627 sec. 6.3: ~10%);
  f = 0 by default.

For n GPUs on nodes of g the expected slowdown of the slowest over the mean GPU is E[max] - E[x], from
the exact distribution of the maximum (numerical integration). What stretches is the slowest GPU's own
work: its stage's m forward and backward passes with their recomputation (the breakdown's ``compute``
and ``recompute``, priced on the critical stage) and its optimizer step. Exposed communication and host
time do not stretch, and neither does the pipeline's bubble, which is the other stages' work (1F1B:
m * t_slowest + (p-1)/v * t_mean, Narayanan et al. 2021; the same holds for interleaved schedules with
fewer micro-batches than stages and for DualPipe, whose bubbles are priced from the mean rank).

>>> expected_group_slowdown(1, 8, StragglerModel())
0.0
>>> 0.03 < expected_group_slowdown(16384, 8, StragglerModel()) < 0.07
True
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..specs.hardware import StragglerModel

# Parts of the step breakdown that stretch with a slower GPU (the rest is exposed communication, host
# time and the bubble, the other stages' work).
COMPUTE_PARTS = ("compute", "recompute")
LOCAL_PARTS = ("optimizer",)
# the breakdown's part for the wait
PART = "stragglers"

_ERF = np.frompyfunc(math.erf, 1, 1)


def _phi(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.asarray(_ERF(z / math.sqrt(2.0)), dtype=float))


def expected_group_slowdown(n_gpus: int, gpus_per_node: int, model: StragglerModel) -> float:
    """Expected slowdown of the slowest of ``n_gpus`` synchronous GPUs relative to the mean GPU."""
    if n_gpus <= 1 or model.off:
        return 0.0
    return _group_slowdown(int(n_gpus), int(gpus_per_node), model.gpu_speed_cv, model.thermal_slowdown,
                           model.slow_node_fraction, model.slow_node_slowdown)


@lru_cache(maxsize=4096)
def _group_slowdown(n_gpus: int, gpus_per_node: int, s: float, t: float, f: float, d: float) -> float:
    g = max(1, gpus_per_node)
    t = t if g > 1 else 0.0
    full_nodes, rest = divmod(n_gpus, g)
    # mean slowdown of one GPU: the hottest of g carries t, a slow node carries d
    mean = t / g + f * d
    if s == 0.0:
        # deterministic per-GPU speeds: the maximum is t (if a hottest GPU is in the group) plus d if any node is slow
        k = full_nodes + (1 if rest else 0)
        has_hot = t if (full_nodes or rest == g) else t * rest / g
        return max(0.0, has_hot + d * (1.0 - (1.0 - f) ** k) - mean)
    lo = -8.0 * s
    hi = t + d + 9.0 * s
    x = np.linspace(lo, hi, 4001)

    def node_cdf(members: int, hot_share: float) -> np.ndarray:
        """P(max slowdown of ``members`` GPUs of one node <= x); the node's hottest GPU is among them
        with probability ``hot_share``."""
        def cdf_at(shift: float) -> np.ndarray:
            base = _phi((x - shift) / s)
            hot = _phi((x - shift - t) / s)
            with_hot = base ** (members - 1) * hot
            without = base ** members
            return hot_share * with_hot + (1.0 - hot_share) * without
        return (1.0 - f) * cdf_at(0.0) + f * cdf_at(d) if f > 0 else cdf_at(0.0)

    log_cdf = np.zeros_like(x)
    with np.errstate(divide="ignore"):
        if full_nodes:
            log_cdf += full_nodes * np.log(node_cdf(g, 1.0))
        if rest:
            log_cdf += np.log(node_cdf(rest, rest / g))
    cdf = np.exp(log_cdf)
    trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")
    e_max = lo + float(trapezoid(1.0 - cdf, x))
    return max(0.0, e_max - mean)


def pipeline_factor(num_microbatches, pp: int, vpp: int = 1):
    """Share of a pipeline's compute-plus-bubble time that stretches when its slowest stage slows:
    the slowest stage runs all m micro-batches of the m + (p-1)/v slots (1F1B, Narayanan et al. 2021).
    Works on a number of micro-batches or an array of them (the search)."""
    m = np.maximum(1, num_microbatches) if isinstance(num_microbatches, np.ndarray) else max(1, num_microbatches)
    return m / (m + (pp - 1) / max(1, vpp))


def stretched_s(breakdown: dict, host_idle=0.0):
    """Seconds of a step that run at the pace of the slowest GPU: its own compute and recomputation
    (every micro-batch of its stage) and its optimizer step, less ``host_idle``, the part of that compute
    the GPU spends waiting for the host to issue kernels (StageTime.host_idle_s: host time, which a
    slower GPU does not stretch); exposed communication and the bubble do not stretch either. Works on
    floats or arrays of plans (the search)."""
    return (sum(breakdown.get(k, 0.0) for k in COMPUTE_PARTS) - host_idle
            + sum(breakdown.get(k, 0.0) for k in LOCAL_PARTS))


def straggler_s(breakdown: dict, group_slowdown, host_idle=0.0):
    """The step's ``stragglers`` part: the expected wait for the job's slowest GPU, ``group_slowdown``
    (``expected_group_slowdown``) times the seconds that stretch (``stretched_s``)."""
    if isinstance(group_slowdown, (int, float)) and group_slowdown <= 0:
        return 0.0
    return group_slowdown * stretched_s(breakdown, host_idle)


def job_group_slowdown(cluster) -> float:
    """The expected slowdown of the slowest GPU of a job filling ``cluster`` (its fleet's StragglerModel)."""
    return expected_group_slowdown(cluster.num_gpus, cluster.gpus_per_node, cluster.stragglers)


__all__ = ["StragglerModel", "COMPUTE_PARTS", "LOCAL_PARTS", "PART", "expected_group_slowdown", "pipeline_factor",
           "stretched_s", "straggler_s", "job_group_slowdown"]
