"""Per-stage GPU clocks that cut a pipeline's energy at no or bounded slowdown (Perseus).

Perseus (Chung et al., "Perseus: Reducing Energy Bloat in Large Model Training", SOSP'24, arXiv
2312.06902): pipeline stages with less work than the slowest stage finish early and wait; running
their forward and backward computations at lower clocks removes that "intrinsic energy bloat" without
lengthening the iteration, and a slower iteration can be traded for more energy along the time-energy
frontier. Here:

- the pipeline runs 1F1B (warm-up forwards, steady one-forward-one-backward, cool-down backwards) as a
  dependency graph of per-micro-batch forward and backward computations, replayed exactly;
- a plan gives each stage one clock for its forwards and one for its backwards; the first forward and
  the last backward of every stage (the fill and drain chain, always on the critical path) keep the
  full clock, as Perseus' per-computation plans would;
- a computation at relative clock f takes its tensor time x f0/f, its memory-bound time by
  ``cost.power.time_factor``, its communication unchanged, and draws ``cost.power.power`` for each
  part; a GPU waiting draws static power;
- the frontier is built greedily: for each step-time budget (increasing), lower the clock of the
  (stage, phase) whose next step down saves the most energy while the iteration stays within the
  budget, until no step saves energy. Budgets only grow and clocks only fall, so along the frontier
  step time never decreases and energy never increases.

Energy counts every GPU of the job over the whole step (the DP reduction, optimizer and other
non-pipeline time priced as in ``power.energy``, unchanged by the plan).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cost import power as pw
from ..errors import SpecError
from .energy import estimate_energy, stage_work

SLOWDOWN_BUDGETS = (0.0, 0.0025, 0.005, 0.0075, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2)
STEP_MHZ = 15.0          # NVIDIA's supported SM clocks step by 15 MHz (nvidia-smi -q -d SUPPORTED_CLOCKS)
LOWEST_CLOCK = 0.4       # of the reference clock: below it no plan saves energy under this model


@dataclass(frozen=True)
class Work:
    """One computation's seconds at the prediction's clocks: tensor, memory-bound, communication."""

    tensor: float
    memory: float
    comm: float


@dataclass
class PipelineModel:
    gpu: Any
    stages: list[dict[str, Work]]          # per stage: "fwd" and "bwd" per micro-batch
    m: int
    f0: float                              # the tensor clock the prediction ran at
    f0_memory: float
    levels: list[float]                    # allowed clocks, highest first
    _memo: dict = field(default_factory=dict)

    def duration(self, w: Work, f: float) -> float:
        t = w.tensor * self.f0 / f
        fm = min(f, self.f0_memory)
        t_mem = w.memory * pw.time_factor("memory", fm) / pw.time_factor("memory", self.f0_memory)
        return t + t_mem + w.comm

    def energy(self, w: Work, f: float) -> float:
        fm = min(f, self.f0_memory)
        t_mem = w.memory * pw.time_factor("memory", fm) / pw.time_factor("memory", self.f0_memory)
        return (w.tensor * self.f0 / f * pw.power(self.gpu, "tensor", f)
                + t_mem * pw.power(self.gpu, "memory", fm)
                + w.comm * pw.power(self.gpu, "comm", pw.clock(self.gpu, "comm")))

    def _de(self, s: int, phase: str, f: float) -> tuple[float, float]:
        key = (s, phase, f)
        hit = self._memo.get(key)
        if hit is None:
            w = self.stages[s][phase]
            hit = self._memo[key] = (self.duration(w, f), self.energy(w, f))
        return hit

    def run(self, clocks: list[tuple[float, float]]) -> tuple[float, float]:
        """(makespan, energy of one GPU per stage summed over stages) of a 1F1B iteration with
        ``clocks[s] = (forward clock, backward clock)``."""
        p, m = len(self.stages), self.m
        dur, en = [], []
        for s, st in enumerate(self.stages):
            ff, fb = clocks[s]
            (dff, eff), (dfb, efb) = self._de(s, "fwd", ff), self._de(s, "bwd", fb)
            (dF0, eF0), (dB0, eB0) = self._de(s, "fwd", self.f0), self._de(s, "bwd", self.f0)
            d = {("F", i): dff for i in range(1, m)}
            d[("F", 0)] = dF0
            d.update({("B", i): dfb for i in range(m - 1)})
            d[("B", m - 1)] = dB0
            dur.append(d)
            en.append(eF0 + eB0 + (m - 1) * (eff + efb))
        orders = []
        for s in range(p):
            warm = min(p - s - 1, m)
            order = [("F", i) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i), ("B", i)]
            order += [("B", i) for i in range(m - warm, m)]
            orders.append(order)
        end: dict[tuple[int, str, int], float] = {}
        pos = [0] * p
        free = [0.0] * p
        busy = [0.0] * p
        remaining = sum(len(o) for o in orders)
        while remaining:
            progressed = False
            for s in range(p):
                while pos[s] < len(orders[s]):
                    ph, i = orders[s][pos[s]]
                    if ph == "F":
                        dep = None if s == 0 else (s - 1, "F", i)
                    else:
                        dep = (s, "F", i) if s == p - 1 else (s + 1, "B", i)
                    if dep is not None and dep not in end:
                        break
                    start = max(free[s], end[dep] if dep is not None else 0.0)
                    t = dur[s][(ph, i)]
                    end[(s, ph, i)] = free[s] = start + t
                    busy[s] += t
                    pos[s] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:  # pragma: no cover - 1F1B orders always progress
                raise RuntimeError("pipeline schedule deadlocked")
        makespan = max(free)
        wait_w = pw.power(self.gpu, "wait", 1.0)
        energy = sum(e + wait_w * (makespan - b) for e, b in zip(en, busy))
        return makespan, energy


@dataclass
class EnergyPlan:
    baseline_step_time_s: float
    baseline_energy_j: float
    frontier: list[dict[str, float]]
    plans: list[list[tuple[float, float]]]      # clocks of each frontier point
    max_slowdown: float
    chosen: int
    reference_mhz: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def energy_saving(self) -> float:
        return 1.0 - self.frontier[self.chosen]["energy_per_step_j"] / self.baseline_energy_j

    @property
    def slowdown(self) -> float:
        return self.frontier[self.chosen]["step_time_s"] / self.baseline_step_time_s - 1.0

    def clocks(self, i: int | None = None) -> dict[str, dict[str, float]]:
        plan = self.plans[self.chosen if i is None else i]
        key, scale = ("mhz", self.reference_mhz) if self.reference_mhz else ("relative", 1.0)
        return {f"stage{s}": {f"forward_{key}": round(ff * scale, 4), f"backward_{key}": round(fb * scale, 4)}
                for s, (ff, fb) in enumerate(plan)}

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "energy_saving": self.energy_saving, "slowdown": self.slowdown,
                "max_slowdown": self.max_slowdown,
                "baseline": {"step_time_s": self.baseline_step_time_s, "energy_per_step_j": self.baseline_energy_j},
                "frontier": self.frontier, "clocks": self.clocks(), "notes": self.notes}


def pipeline_model(prediction) -> PipelineModel:
    gpu = prediction.job.cluster.gpu
    stages = []
    for w in stage_work(prediction):
        c = w["comm_per_mb"]
        tot = w["fwd"] + w["bwd"]
        cf = c * w["fwd"] / tot if tot > 0 else 0.0
        stages.append({"fwd": Work(w["fwd"] * w["fwd_tensor_share"], w["fwd"] * (1 - w["fwd_tensor_share"]), cf),
                       "bwd": Work(w["bwd"] * w["bwd_tensor_share"], w["bwd"] * (1 - w["bwd_tensor_share"]), c - cf)})
    f0 = pw.clock(gpu, "tensor")
    try:
        ref = pw.reference_clock_mhz(gpu)
        step = STEP_MHZ / ref
    except SpecError:
        step = 0.01
    levels = []
    f = f0
    while f >= LOWEST_CLOCK - 1e-12:
        levels.append(f)
        f = f0 - step * len(levels)
    return PipelineModel(gpu, stages, prediction.graph.num_microbatches, f0, pw.clock(gpu, "memory"), levels)


def plan_energy(prediction, max_slowdown: float = 0.01,
                budgets: tuple[float, ...] = SLOWDOWN_BUDGETS) -> EnergyPlan:
    """The time-energy frontier of per-stage clock plans for ``prediction``'s pipeline and the plan
    saving the most energy within ``max_slowdown`` (a fraction of the step time)."""
    if not (0.0 <= max_slowdown <= 0.5):
        raise SpecError("max-slowdown", f"{max_slowdown!r} is not a fraction between 0 and 0.5",
                        "e.g. 0.01 for at most 1% slower")
    model = pipeline_model(prediction)
    base = estimate_energy(prediction)
    step0, e0 = prediction.step_time_s, base.energy_per_step_j
    n_per_stage = base.gpus_per_stage
    p = len(model.stages)
    idx = [[0, 0] for _ in range(p)]

    def clocks_of(ix):
        return [(model.levels[a], model.levels[b]) for a, b in ix]

    m0, pe0 = model.run(clocks_of(idx))
    notes = []
    if prediction.graph.plan.vpp > 1:
        notes.append("interleaved pipeline planned as plain 1F1B")
    if p == 1:
        notes.append("one pipeline stage: no work off the critical path; only a slower step saves energy")

    def point(ms: float, pe: float) -> dict[str, float]:
        return {"step_time_s": step0 + (ms - m0), "energy_per_step_j": e0 + n_per_stage * (pe - pe0)}

    frontier = [point(m0, pe0)]
    plans = [clocks_of(idx)]
    cur_m, cur_e = m0, pe0
    for b in sorted(set(budgets) | {max_slowdown}):
        limit = m0 + b * step0 + 1e-12 * step0
        while True:
            best = None
            for s in range(p):
                for ph in (0, 1):
                    if idx[s][ph] + 1 >= len(model.levels):
                        continue
                    idx[s][ph] += 1
                    ms, pe = model.run(clocks_of(idx))
                    idx[s][ph] -= 1
                    if ms <= limit and pe < cur_e - 1e-12 and (best is None or pe < best[2]):
                        best = (s, ph, pe, ms)
            if best is None:
                break
            s, ph, cur_e, cur_m = best
            idx[s][ph] += 1
        pt = point(cur_m, cur_e)
        if pt["energy_per_step_j"] < frontier[-1]["energy_per_step_j"] - 1e-9:
            frontier.append(pt)
            plans.append(clocks_of(idx))
    chosen = max(i for i, pt in enumerate(frontier) if pt["step_time_s"] <= step0 * (1 + max_slowdown) + 1e-9)
    ref = None
    try:
        ref = pw.reference_clock_mhz(model.gpu)
    except SpecError:
        pass
    return EnergyPlan(step0, e0, frontier, plans, max_slowdown, chosen, ref, notes)
