"""Energy of a serving run: the one place that turns GPU time into joules (clustertwin's power model
may replace ``average_power_w`` later; nothing else needs to change).

Assumed: a GPU draws ``IDLE_FRACTION`` of its board power (``tdp_w``) when idle and its full board power
while an iteration runs, linearly in between by the fraction of time it is busy. Idle: about 10% of
TDP (an H100 SXM idles near 60-75 W of 700 W in nvidia-smi; assumed, not a datasheet figure). Full
board power while busy over-states memory-bound decode (which draws less) — an upper bound.
"""
from __future__ import annotations

IDLE_FRACTION = 0.10


def average_power_w(tdp_w: float, busy_fraction: float) -> float:
    """Mean power of one GPU busy ``busy_fraction`` of the time."""
    u = min(1.0, max(0.0, busy_fraction))
    return tdp_w * (IDLE_FRACTION + (1.0 - IDLE_FRACTION) * u)


def energy_j(tdp_w: float, busy_fraction: float, duration_s: float, num_gpus: int) -> float:
    """Joules ``num_gpus`` GPUs draw over ``duration_s`` seconds."""
    return average_power_w(tdp_w, busy_fraction) * duration_s * num_gpus


ASSUMPTION = (f"energy: each GPU draws {IDLE_FRACTION:.0%} of its TDP idle and its TDP while busy, linear in "
              "the busy fraction (assumed; an upper bound for memory-bound decode)")

__all__ = ["average_power_w", "energy_j", "IDLE_FRACTION", "ASSUMPTION"]
