"""GPU power and clocks: the DVFS model the pricer and the energy accounting share.

Dynamic power is C V^2 f; over the DVFS range the voltage follows the clock, so it goes as f^3, and
below the voltage floor (``power.voltage_floor_clock``) only the clock falls, so it goes as f. A GPU
running work of activity ``a`` (the share of the dynamic power a dense tensor-core GEMM draws: 1 for
GEMMs and attention, less for memory-bound ops and communication) at relative clock ``f`` draws

    P(a, f) = P_static + (P_rated - P_static) * a * d(f),   d(f) = f^3 above the floor, f * f_v^2 below

where f = 1 is the reference clock the datasheet peaks refer to (``power.reference_clock_mhz``) and
P_rated the TDP the peaks and efficiencies refer to (``GPUSpec.rated_tdp_w``, else ``tdp_w``). A
power cap (``tdp_w`` below ``rated_tdp_w``) lets each kind of work run at the highest clock whose
power fits; a locked clock (``GPUSpec.clock_hz``) runs every kind at that clock, or lower where the
cap says so. Compute-bound time scales with 1/f; memory-bound time hardly (HBM has its own clock:
``power.memory_clock_sensitivity``); communication not at all.

With neither a cap nor a locked clock every clock is exactly 1 and no time changes.

>>> from clustertwin.catalog import load_gpu
>>> round(clock(load_gpu("h100-sxm-96gb"), "tensor"), 3)    # 500 W cap on a 700 W part
0.863
>>> clock(load_gpu("h100-sxm"), "tensor")
1.0
"""
from __future__ import annotations

import math
from typing import Literal

from ..constants import group, value
from ..errors import SpecError
from ..specs.hardware import GPUSpec

OpKindPower = Literal["tensor", "memory", "comm", "wait"]
KINDS: tuple[str, ...] = ("tensor", "memory", "comm", "wait")

STATIC_FRACTION = value("power.static_fraction")
VOLTAGE_FLOOR = value("power.voltage_floor_clock")
MEMORY_SENSITIVITY = value("power.memory_clock_sensitivity")
MIN_CAP_FRACTION = value("power.min_cap_fraction")
ACTIVITY: dict[str, float] = {"tensor": value("power.activity.tensor"), "memory": value("power.activity.memory"),
                              "comm": value("power.activity.comm"), "wait": 0.0}
REFERENCE_CLOCK_MHZ: dict[str, float] = group("power.reference_clock_mhz")
MIN_CLOCK = 0.1   # relative clocks below this are refused (input check: A100's lowest is 210 of 1410 MHz)


def rated_power(gpu: GPUSpec) -> float:
    """The board power the datasheet peaks refer to (W)."""
    return gpu.rated_tdp_w or gpu.tdp_w


def static_power(gpu: GPUSpec) -> float:
    """What the GPU draws with no tensor or memory work at its clocks (W)."""
    return STATIC_FRACTION * rated_power(gpu)


def dynamic_scale(f: float) -> float:
    """Dynamic power at relative clock ``f`` over that at the reference clock: f^3 above the voltage
    floor, linear in f below it (continuous at the floor)."""
    if f >= VOLTAGE_FLOOR:
        return f ** 3
    return f * VOLTAGE_FLOOR ** 2


def power(gpu: GPUSpec, kind: str, f: float, static_w: float | None = None) -> float:
    """Power (W) of one GPU doing work of ``kind`` at relative clock ``f``; ``static_w`` overrides the
    static power (a hotter GPU leaks more: power/heat.py)."""
    ps = static_power(gpu) if static_w is None else static_w
    return ps + (rated_power(gpu) - static_power(gpu)) * ACTIVITY[kind] * dynamic_scale(f)


def clock_under_cap(gpu: GPUSpec, kind: str, cap_w: float, static_w: float | None = None) -> float:
    """The highest relative clock (at most 1) at which work of ``kind`` draws no more than ``cap_w``."""
    ps = static_power(gpu) if static_w is None else static_w
    k = (rated_power(gpu) - static_power(gpu)) * ACTIVITY[kind]
    if k <= 0 or ps + k <= cap_w:
        return 1.0
    budget = (cap_w - ps) / k          # the dynamic_scale allowed
    if budget <= 0:
        return MIN_CLOCK
    f = budget ** (1.0 / 3.0)
    if f < VOLTAGE_FLOOR:
        f = budget / VOLTAGE_FLOOR ** 2
    return max(MIN_CLOCK, min(1.0, f))


def locked_clock(gpu: GPUSpec) -> float | None:
    """The locked clock relative to the reference clock, or None when DVFS picks it."""
    if gpu.clock_hz is None:
        return None
    return gpu.clock_hz / (reference_clock_mhz(gpu) * 1e6)


def clock(gpu: GPUSpec, kind: str) -> float:
    """The relative clock work of ``kind`` runs at: the locked clock, or lower where the power cap
    (``tdp_w`` below the rated TDP) allows less; exactly 1.0 with neither."""
    f = locked_clock(gpu)
    f = 1.0 if f is None else min(1.0, f)
    if gpu.rated_tdp_w is not None and gpu.tdp_w < gpu.rated_tdp_w:
        f = min(f, clock_under_cap(gpu, kind, gpu.tdp_w))
    return f


def time_factor(kind: str, f: float) -> float:
    """How much longer work of ``kind`` takes at relative clock ``f`` than at the reference clock."""
    if f >= 1.0:
        return 1.0
    if kind == "tensor":
        return 1.0 / f
    if kind == "memory":
        return 1.0 - MEMORY_SENSITIVITY + MEMORY_SENSITIVITY / f
    return 1.0


def reference_clock_mhz(gpu: GPUSpec) -> float:
    """The SM clock (MHz) the GPU's datasheet peaks refer to; SpecError where none is known."""
    mhz = REFERENCE_CLOCK_MHZ.get(gpu.name)
    if mhz is None:
        known = ", ".join(sorted(REFERENCE_CLOCK_MHZ))
        raise SpecError("clock", f"no reference clock is known for {gpu.name}",
                        f"use --power-cap instead, or one of {known}")
    return mhz


def with_power(gpu: GPUSpec, cap_w: float | None = None, clock_hz: float | None = None) -> GPUSpec:
    """``gpu`` under a power cap (W) and/or a locked SM clock (Hz), checked: a cap between a quarter of
    the rated TDP and the rated TDP, a clock between a tenth of the reference clock and it."""
    update: dict = {}
    rated = rated_power(gpu)
    if cap_w is not None:
        if not (isinstance(cap_w, (int, float)) and math.isfinite(cap_w)):
            raise SpecError("power-cap", f"{cap_w!r} is not a power", 'e.g. "500W"')
        lo = MIN_CAP_FRACTION * rated
        if not lo <= cap_w <= rated:
            raise SpecError("power-cap", f"{cap_w:g} W is outside {gpu.name}'s range {lo:g}-{rated:g} W",
                            f'give a cap between {lo:g} W and its rated {rated:g} W, e.g. "{round(0.7 * rated)}W"')
        update.update(tdp_w=float(cap_w), rated_tdp_w=float(rated))
    if clock_hz is not None:
        ref = reference_clock_mhz(gpu) * 1e6
        if not (isinstance(clock_hz, (int, float)) and math.isfinite(clock_hz)) or not (
                MIN_CLOCK * ref <= clock_hz <= ref * (1 + 1e-9)):
            raise SpecError("clock", f"{clock_hz / 1e6:g} MHz is outside {gpu.name}'s range "
                                     f"{MIN_CLOCK * ref / 1e6:g}-{ref / 1e6:g} MHz",
                            f'give an SM clock at most the reference {ref / 1e6:g} MHz, e.g. "{round(0.8 * ref / 1e6)}MHz"')
        update["clock_hz"] = float(clock_hz)
    return gpu.model_copy(update=update) if update else gpu
