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

The model and its expected group slowdown live in the pricing core (``schedule/stragglers.py``), which
prices the step's ``stragglers`` part with them; this module turns them into goodput's straggler loss
and one slow node's effect, over the step with every GPU at the mean speed (``base_step_time_s``).

>>> round(expected_group_slowdown(1, 8, StragglerModel()), 6)
0.0
>>> 0.03 < expected_group_slowdown(16384, 8, StragglerModel()) < 0.07
True
"""
from __future__ import annotations

import math

from ..schedule.stragglers import (COMPUTE_PARTS, LOCAL_PARTS, PART, StragglerModel,  # noqa: F401 (re-exported)
                                   expected_group_slowdown, pipeline_factor, stretched_s)


def base_step_time_s(prediction) -> float:
    """The step time with every GPU at the mean speed: the prediction's step less its ``stragglers`` part."""
    return prediction.mean_gpu_step_time_s


def step_slowdown_from_group(prediction, group_slowdown: float) -> float:
    """Relative step-time increase when the slowest GPU of the job is ``group_slowdown`` slower, over
    the step with every GPU at the mean speed (``base_step_time_s``)."""
    step = base_step_time_s(prediction)
    if step <= 0 or group_slowdown <= 0:
        return 0.0
    return group_slowdown * stretched_s(prediction.breakdown_s, host_idle_s(prediction)) / step


def host_idle_s(prediction) -> float:
    """Of the step's compute, the critical stage's wait for the host over its micro-batches
    (StageTime.host_idle_s), which a slower GPU does not stretch: as compose_step leaves it out."""
    est = prediction.step
    crit = next((st for st in est.stages if st.stage == est.critical_stage), None)
    return float(est.num_microbatches * crit.host_idle_s) if crit is not None else 0.0


def expected_step_slowdown(prediction, model: StragglerModel | None = None) -> float:
    """Expected relative step-time increase of the whole (synchronous) job from stragglers, over the
    step with every GPU at the mean speed; ``model``: default the cluster's (then it is the prediction's
    ``stragglers`` part over that step).

    The job is one synchronous group: TP and CP synchronise every layer, PP every micro-batch, and DP
    (gradient reduction) every step, so every GPU of the job waits for the slowest."""
    c = prediction.job.cluster
    model = c.stragglers if model is None else model
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
