"""Energy of a serving run: the one place that turns GPU time into joules, with the power model
training uses (cost/power.py: static power plus the dynamic power of the work's kind, at the clock a
power cap or a locked clock leaves).

Each iteration's time is split as its step breakdown says (serve/workload.py ``StepCost``): GEMMs and
prefill attention are ``tensor`` work, weight/KV-cache reads and elementwise ops ``memory``, TP
all-reduce / EP all-to-all / PP sends ``comm``, and the kernel gaps, launches and the engine's host time
per step ``wait`` (the GPU idles at static power); time between iterations (no request to run) is
``wait`` too. Every GPU of a replica does the same work, so a replica's energy is its GPUs times the
sum over kinds of seconds x ``cost.power.power(gpu, kind, clock)``.

>>> from clustertwin.catalog import load_gpu
>>> g = load_gpu("h100-sxm")
>>> idle = energy_j(g, {}, duration_s=10.0, replicas=1, gpus_per_replica=1)
>>> busy = energy_j(g, {"tensor": 10.0}, duration_s=10.0, replicas=1, gpus_per_replica=1)
>>> idle < energy_j(g, {"memory": 10.0}, 10.0, 1, 1) < busy, round(busy / 10.0) == round(g.tdp_w)
(True, True)
"""
from __future__ import annotations

from collections.abc import Mapping

from ..cost import power
from ..specs.hardware import GPUSpec


def kind_power_w(gpu: GPUSpec, kind: str) -> float:
    """Watts one GPU draws doing work of ``kind`` (tensor, memory, comm, wait) at its clock for that kind."""
    return power.power(gpu, kind, power.clock(gpu, kind))


def energy_j(gpu: GPUSpec, busy_by_kind_s: Mapping[str, float], duration_s: float, replicas: int,
             gpus_per_replica: int) -> float:
    """Joules of ``replicas`` replicas of ``gpus_per_replica`` GPUs over ``duration_s`` seconds, busy
    ``busy_by_kind_s`` seconds by kind (summed over replicas); the rest of each replica's time waits."""
    busy = sum(max(0.0, busy_by_kind_s.get(k, 0.0)) for k in power.KINDS)
    idle = max(0.0, replicas * duration_s - busy)
    j = sum(max(0.0, busy_by_kind_s.get(k, 0.0)) * kind_power_w(gpu, k) for k in power.KINDS)
    return (j + idle * kind_power_w(gpu, "wait")) * gpus_per_replica


def average_power_w(gpu: GPUSpec, busy_by_kind_s: Mapping[str, float], duration_s: float, replicas: int) -> float:
    """Mean power of one GPU over the run."""
    return energy_j(gpu, busy_by_kind_s, duration_s, replicas, 1) / max(replicas * duration_s, 1e-12)


ASSUMPTION = ("energy: the power model of training (cost/power.py): static power plus the dynamic power of each "
              "step's work by kind (GEMMs and prefill attention: tensor; weight, KV and elementwise reads: memory; "
              "collectives: comm; kernel gaps, host time per step and idle time between steps: static only)")

__all__ = ["energy_j", "average_power_w", "kind_power_w", "ASSUMPTION"]
