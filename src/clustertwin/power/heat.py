"""Heat and stragglers inside a node (Lit Silicon).

Kurzynski, Aga and Wu, "Lit Silicon: A Case Where Thermal Imbalance Couples Concurrent Execution in
Multiple GPUs" (arXiv 2511.09861): the GPUs of one node run at different temperatures; a hotter GPU
leaks more, so under the same power cap less of its budget is left for dynamic power and DVFS runs it
at a lower clock; the synchronous step (and, through overlapped compute and communication, the other
GPUs) waits for it. Moving power cap from the cool leaders to the hot stragglers at equal node power
equalises the clocks; the paper measured up to 6% performance (and 4% power) on MI300X nodes.

Model: the static power of GPU i is ``P_static (1 + LEAKAGE_PER_K (T_i - T_mean))``; its clock under
its cap is the highest whose power (``cost.power.power``) fits; the node computes at the pace of its
slowest GPU. Rebalancing finds the common clock whose total power equals the node's power (each cap
at most the rated TDP) and gives each GPU the cap that clock needs.

Hooks: ``NodeThermal.sim_flags`` gives ``clustertwin sim --slow-rank R --slowdown X`` for the node's
straggler, and ``thermal_slowdown`` is ``reliability.stragglers.StragglerModel.thermal_slowdown``
(the hottest GPU's slowdown over the node's others; ``straggler_model_from_temperatures`` there).

>>> from clustertwin.catalog import load_gpu
>>> n = node_thermal(load_gpu("h100-sxm-96gb"), [55, 58, 60, 62, 63, 65, 68, 75])
>>> n.straggler, n.rebalanced_speed > n.speed
(7, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..cost import power as pw
from ..errors import SpecError
from ..specs.hardware import GPUSpec

# assumed: CMOS leakage grows roughly exponentially with temperature, about doubling every 25-35 K;
# linearised near operating temperature that is ~2-3% of static power per kelvin; 2% taken. No GPU
# measurement at hand (Lit Silicon reports the clock and temperature spread, not the leakage slope).
LEAKAGE_PER_K = 0.02
_TEMP_RANGE = (-20.0, 120.0)   # input check: GPUs throttle hard near 90-105 C; beyond this range is a unit slip


@dataclass
class NodeThermal:
    gpu: str
    temps_c: list[float]
    caps_w: list[float]
    clocks: list[float]                 # relative to the reference clock, per GPU
    rebalanced_caps_w: list[float]
    rebalanced_clock: float

    @property
    def straggler(self) -> int:
        return min(range(len(self.clocks)), key=lambda i: (self.clocks[i], -i))

    @property
    def speed(self) -> float:
        """The node's synchronous pace: its slowest GPU's clock."""
        return min(self.clocks)

    @property
    def rebalanced_speed(self) -> float:
        return self.rebalanced_clock

    @property
    def thermal_slowdown(self) -> float:
        """How much slower the straggler computes than the mean of the node's other GPUs."""
        others = [c for i, c in enumerate(self.clocks) if i != self.straggler] or [self.speed]
        return (sum(others) / len(others)) / self.speed - 1.0

    @property
    def imbalance_slowdown(self) -> float:
        """Compute-bound step slowdown against the node's GPUs all at their mean clock."""
        return (sum(self.clocks) / len(self.clocks)) / self.speed - 1.0

    @property
    def rebalance_gain(self) -> float:
        """Compute-bound speed-up from moving power cap to the stragglers at equal node power."""
        return self.rebalanced_speed / self.speed - 1.0

    @property
    def power_saving(self) -> float:
        """Share of the node's GPU power the equalised caps leave unused (where every GPU already runs
        at its rated power, leaders can give up power without slowing the node: Lit Silicon's case 1)."""
        return 1.0 - sum(self.rebalanced_caps_w) / sum(self.caps_w)

    @property
    def sim_flags(self) -> str:
        return f"--slow-rank {self.straggler} --slowdown {1.0 + self.thermal_slowdown:.4f}"

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "temps_c": self.temps_c, "caps_w": self.caps_w, "clocks": self.clocks,
                "straggler": self.straggler, "thermal_slowdown": self.thermal_slowdown,
                "imbalance_slowdown": self.imbalance_slowdown, "rebalanced_caps_w": self.rebalanced_caps_w,
                "rebalanced_clock": self.rebalanced_clock, "rebalance_gain": self.rebalance_gain,
                "power_saving": self.power_saving,
                "node_power_w": sum(self.caps_w), "sim_flags": self.sim_flags}


def node_thermal(gpu: GPUSpec, temps_c: Sequence[float], caps_w: Sequence[float] | None = None) -> NodeThermal:
    """Clocks of a node's GPUs at temperatures ``temps_c`` (deg C) under ``caps_w`` (default: each at
    the GPU's power limit), and the caps that equalise them at the same node power."""
    temps = [float(t) for t in temps_c]
    if not temps:
        raise SpecError("temps", "no temperatures given", "give one per GPU of the node, e.g. 60,62,65,70")
    for t in temps:
        if not (math.isfinite(t) and _TEMP_RANGE[0] <= t <= _TEMP_RANGE[1]):
            raise SpecError("temps", f"{t:g} C is not a GPU temperature",
                            f"give degrees Celsius between {_TEMP_RANGE[0]:g} and {_TEMP_RANGE[1]:g}, e.g. 65")
    caps = [float(gpu.tdp_w)] * len(temps) if caps_w is None else [float(c) for c in caps_w]
    if len(caps) != len(temps):
        raise SpecError("caps", f"{len(caps)} caps for {len(temps)} GPUs", "give one cap per GPU")
    rated = pw.rated_power(gpu)
    mean_t = sum(temps) / len(temps)
    statics = [pw.static_power(gpu) * max(0.0, 1.0 + LEAKAGE_PER_K * (t - mean_t)) for t in temps]
    locked = pw.locked_clock(gpu)
    top = 1.0 if locked is None else min(1.0, locked)
    clocks = [min(top, pw.clock_under_cap(gpu, "tensor", c, s)) for c, s in zip(caps, statics)]
    budget = sum(caps)

    def need(f: float) -> float:
        return sum(pw.power(gpu, "tensor", f, s) for s in statics)

    # no GPU may run above its rated power: the hottest bounds the common clock
    lo, hi = pw.MIN_CLOCK, min([top] + [pw.clock_under_cap(gpu, "tensor", rated, s) for s in statics])
    if need(hi) <= budget:
        lo = hi
    else:
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if need(mid) <= budget else (lo, mid)
    f_star = max(lo, min(clocks))      # the rebalanced caps never make the node slower
    new_caps = [min(rated, pw.power(gpu, "tensor", f_star, s)) for s in statics]
    return NodeThermal(gpu.name, temps, caps, clocks, new_caps, f_star)
