"""Stragglers: per-GPU speed variation turned into the slowdown of a synchronous group.

A synchronous step waits for its slowest member. Each GPU's sustained slowdown (relative to the
nominal GPU the step-time model prices) is modelled as

    x = e + t * [hottest GPU of its node] + d * [its node is a slow node],   e ~ Normal(0, cv)

- ``cv``: silicon and power-management variation between GPUs of one SKU. Sinha et al., "Not All
  GPUs Are Created Equal" (SC'22, arXiv 2208.11035) measure 8% average performance variation (max
  22%) across the GPUs of large clusters; read as the fastest-to-slowest range of ~10^4 GPUs, which
  is about 8 standard deviations of a normal sample that size, this is cv = 1%.
- ``t``: the Lit Silicon effect (Kurzynski et al., arXiv 2511.09861): thermal imbalance inside a node
  makes the hottest GPU throttle and, through overlapped compute and communication, the node's other
  GPUs wait for it; mitigating it recovered up to 6% on MI300X nodes. Default 1.5%: the middle of the
  1-2% throughput swing Llama 3 saw from temperature-driven DVFS (arXiv 2407.21783 sec. 3.3.4).
- ``d`` on a fraction ``f`` of nodes: fail-slow hosts. MegaScale (arXiv 2402.15627 sec. 6.3) found
  hosts that took about 10% longer; default f = 0 (production runs find and drain them).

For a group of n GPUs on k nodes the expected slowdown of its slowest member over the mean GPU is
E[max] - E[x], computed from the exact distribution of the maximum (numerical integration).
Only the compute-bound part of a step stretches (compute, recomputation, pipeline bubbles, the
optimizer); exposed communication does not. In a pipeline the slowest stage stretches m of the
m + (p-1)/v micro-batch slots; data parallelism makes every replica wait for the slowest one.

>>> round(expected_group_slowdown(1, 8, StragglerModel()), 6)
0.0
>>> 0.03 < expected_group_slowdown(16384, 8, StragglerModel()) < 0.07
True
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from pydantic import Field

from ..specs.model import Frozen

# Parts of the step breakdown that stretch with a slower GPU (the rest is exposed communication).
COMPUTE_PARTS = ("compute", "recompute", "bubble")
LOCAL_PARTS = ("optimizer",)

_ERF = np.frompyfunc(math.erf, 1, 1)


class StragglerModel(Frozen):
    gpu_speed_cv: float = Field(0.01, ge=0.0, le=0.5,
                                description="per-GPU sustained speed variation, std/mean (Sinha et al. SC'22)")
    thermal_slowdown: float = Field(0.015, ge=0.0, le=0.5,
                                    description="the hottest GPU of each node is this much slower (Lit Silicon; "
                                                "Llama 3 sec. 3.3.4: 1-2% from temperature)")
    slow_node_fraction: float = Field(0.0, ge=0.0, le=1.0, description="share of nodes that are fail-slow")
    slow_node_slowdown: float = Field(0.10, ge=0.0, le=10.0,
                                      description="slowdown of a fail-slow node (MegaScale sec. 6.3: ~10%)")

    @property
    def off(self) -> bool:
        return self.gpu_speed_cv == 0 and self.thermal_slowdown == 0 and (
            self.slow_node_fraction == 0 or self.slow_node_slowdown == 0)


def _phi(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _ERF(z / math.sqrt(2.0)).astype(float))


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
    e_max = lo + float(np.trapezoid(1.0 - cdf, x)) if hasattr(np, "trapezoid") else lo + float(np.trapz(1.0 - cdf, x))
    return max(0.0, e_max - mean)


def pipeline_factor(num_microbatches: int, pp: int, vpp: int = 1) -> float:
    """Share of a pipeline's compute-plus-bubble time that stretches when its slowest stage slows:
    the slowest stage runs all m micro-batches of the m + (p-1)/v slots (1F1B, Narayanan et al. 2021)."""
    m = max(1, num_microbatches)
    return m / (m + (pp - 1) / max(1, vpp))


def step_slowdown_from_group(prediction, group_slowdown: float) -> float:
    """Relative step-time increase when the slowest GPU of the job is ``group_slowdown`` slower."""
    b = prediction.breakdown_s
    step = prediction.step_time_s
    if step <= 0 or group_slowdown <= 0:
        return 0.0
    plan = prediction.graph.plan
    pf = pipeline_factor(prediction.graph.num_microbatches, plan.pp, plan.vpp)
    stretch = pf * sum(b.get(k, 0.0) for k in COMPUTE_PARTS) + sum(b.get(k, 0.0) for k in LOCAL_PARTS)
    return group_slowdown * stretch / step


def expected_step_slowdown(prediction, model: StragglerModel) -> float:
    """Expected relative step-time increase of the whole (synchronous) job from stragglers.

    The job is one synchronous group: TP and CP synchronise every layer, PP every micro-batch, and DP
    (gradient reduction) every step, so every GPU of the job waits for the slowest."""
    c = prediction.job.cluster
    return step_slowdown_from_group(prediction, expected_group_slowdown(c.num_gpus, c.gpus_per_node, model))


def slow_node_impact(prediction, slowdown: float = 0.10) -> dict[str, float]:
    """What one node running ``slowdown`` slower (e.g. 0.10 = 10% longer kernels) does to each group.

    Returns relative slowdowns: ``tp_group`` (its TP groups run every layer at its pace), ``pipeline``
    (its stage becomes the slowest; the pipeline stretches by the stage's share of the slots),
    ``dp`` (every data-parallel replica waits for this one at the gradient reduction, so the whole job
    pays the pipeline's slowdown) and ``step`` (the job's step time, exposed communication unstretched),
    plus ``gpus_waiting``: GPUs of the job that idle while it catches up.
    """
    if not (isinstance(slowdown, (int, float)) and math.isfinite(slowdown) and slowdown >= 0):
        from ..errors import SpecError
        raise SpecError("slowdown", f"{slowdown!r} must be a non-negative fraction", "e.g. 0.1 for 10% slower")
    plan = prediction.graph.plan
    c = prediction.job.cluster
    pf = pipeline_factor(prediction.graph.num_microbatches, plan.pp, plan.vpp)
    step = step_slowdown_from_group(prediction, slowdown)
    return {
        "tp_group": slowdown if plan.tp > 1 else 0.0,
        "pipeline": slowdown * pf,
        "dp": slowdown * pf if plan.dp > 1 else 0.0,
        "step": step,
        "gpus_waiting": float(c.num_gpus - min(c.gpus_per_node, c.num_gpus)),
    }


def straggler_model_from_temperatures(gpu, temps_c, **fields) -> StragglerModel:
    """A StragglerModel whose ``thermal_slowdown`` comes from a node's GPU temperatures (deg C) by the
    Lit Silicon model of ``clustertwin.power.heat`` instead of the 1.5% default: the hottest GPU's
    clock under the shared cap against the mean of the node's others."""
    from ..power.heat import node_thermal
    t = min(0.5, node_thermal(gpu, temps_c).thermal_slowdown)
    return StragglerModel(thermal_slowdown=t, **fields)
