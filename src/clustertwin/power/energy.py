"""Energy of one training step: each GPU's time split by what it does, times the power of doing it.

Per pipeline stage, a GPU spends the step on
- tensor work (GEMMs, attention) and memory-bound work (norms, activations, optimizer): the stage's
  compute, split by re-pricing its ops (``cost.compute``) into the two kinds;
- exposed communication (TP/CP/EP per micro-batch, FSDP gathers, the DP reduction and pipeline
  sends the step does not hide);
- waiting: the rest of the step (pipeline bubbles, the slowest stage, host gaps), at static power.
The segments of a stage sum to the step time, so energy = integral of power over the step; each
segment's power is ``cost.power.power`` at the clock that kind of work runs at (under the GPU's cap
and locked clock), hence never above the cap.

>>> import clustertwin as ct
>>> e = estimate_energy(ct.predict("gpt3-1.3b", gpu="a100-80gb", num_gpus=8, plan="tp=1,pp=4,dp=2",
...                                micro_batch=1, global_batch=32, seq_len=2048))
>>> 0 < e.average_power_per_gpu_w <= 400
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cost import power as pw
from ..cost.compute import ComputePricer
from ..cost.profile import default_profile
from ..specs.hardware import GPUSpec
from ..workload.ops import OpKind, Phase

_TENSOR_KINDS = (OpKind.GEMM, OpKind.ATTENTION)


@dataclass(frozen=True)
class Segment:
    """Seconds one GPU of a stage spends on one kind of work in a step, and the power it draws."""

    kind: str
    seconds: float
    power_w: float

    @property
    def energy_j(self) -> float:
        return self.seconds * self.power_w


@dataclass
class EnergyEstimate:
    step_time_s: float
    tokens_per_step: float
    gpus_per_stage: float
    stages: list[list[Segment]] = field(default_factory=list)   # per stage: one GPU's segments
    cap_w: float = 0.0

    @property
    def energy_per_step_j(self) -> float:
        return self.gpus_per_stage * sum(s.energy_j for st in self.stages for s in st)

    @property
    def num_gpus(self) -> float:
        return self.gpus_per_stage * len(self.stages)

    @property
    def average_power_w(self) -> float:
        """All GPUs of the job together, averaged over the step."""
        return self.energy_per_step_j / self.step_time_s

    @property
    def average_power_per_gpu_w(self) -> float:
        return self.average_power_w / self.num_gpus

    @property
    def energy_per_token_j(self) -> float:
        return self.energy_per_step_j / self.tokens_per_step

    @property
    def peak_power_w(self) -> float:
        """The highest power any GPU draws in any segment (never above the cap)."""
        return max(s.power_w for st in self.stages for s in st)

    def summary(self) -> dict[str, float]:
        return {"energy_per_step_j": self.energy_per_step_j, "average_power_w": self.average_power_w,
                "average_power_per_gpu_w": self.average_power_per_gpu_w,
                "energy_per_token_j": self.energy_per_token_j}

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "power_cap_w": self.cap_w, "peak_power_w": self.peak_power_w,
                "stages": [{s.kind: {"seconds": s.seconds, "power_w": s.power_w} for s in st} for st in self.stages]}


def tensor_shares(graph, gpu: GPUSpec) -> list[dict[str, float]]:
    """Per stage, the share of forward and of backward (with recomputation) compute time that is
    tensor-core work, from re-pricing the stage's ops at the architecture's default efficiencies."""
    pricer = ComputePricer(gpu, default_profile(gpu), graph.framework)
    out = []
    for sg in graph.stages:
        shares = {}
        for name, phases in (("fwd", (Phase.FWD,)), ("bwd", (Phase.BWD, Phase.RECOMPUTE))):
            tensor = other = 0.0
            for ph in phases:
                for op, rep in sg.ops(ph):
                    if op.is_comm:
                        continue
                    t = float(pricer.time(op)) * rep
                    if op.kind in _TENSOR_KINDS:
                        tensor += t
                    else:
                        other += t
            shares[name] = tensor / (tensor + other) if tensor + other > 0 else 0.0
        out.append(shares)
    return out


def stage_work(prediction) -> list[dict[str, float]]:
    """Per stage, seconds of one GPU per step: tensor, memory, comm (exposed), and the forward and
    backward parts per micro-batch the planner needs."""
    step = prediction.step
    graph = prediction.graph
    m = graph.num_microbatches
    b = prediction.breakdown_s
    shares = tensor_shares(graph, prediction.job.cluster.gpu)
    out = []
    for st, sh in zip(step.stages, shares):
        fwd, bwd = float(st.fwd_s), float(st.bwd_s) + float(st.recompute_s)
        comm_mb = float(st.tp_s) + float(st.cp_s) + float(st.ep_s) + float(st.fsdp_s)
        opt = float(st.optimizer_s)
        tensor = m * (fwd * sh["fwd"] + bwd * sh["bwd"])
        memory = m * (fwd * (1 - sh["fwd"]) + bwd * (1 - sh["bwd"])) + opt
        comm = m * comm_mb + b.get("dp_comm", 0.0) + b.get("pp_comm", 0.0)
        out.append({"tensor": tensor, "memory": memory, "comm": comm, "fwd": fwd, "bwd": bwd,
                    "fwd_tensor_share": sh["fwd"], "bwd_tensor_share": sh["bwd"], "comm_per_mb": comm_mb})
    return out


def estimate_energy(prediction) -> EnergyEstimate:
    """Energy and power of one step of ``prediction`` (a ``clustertwin.predict.Prediction``)."""
    job = prediction.job
    gpu = job.cluster.gpu
    step_time = prediction.step_time_s
    stages = []
    for w in stage_work(prediction):
        busy = w["tensor"] + w["memory"] + w["comm"]
        scale = min(1.0, step_time / busy) if busy > 0 else 1.0   # the critical path never exceeds the step
        segs = [Segment(k, w[k] * scale, pw.power(gpu, k, pw.clock(gpu, k))) for k in ("tensor", "memory", "comm")]
        segs.append(Segment("wait", max(0.0, step_time - busy * scale), pw.power(gpu, "wait", pw.clock(gpu, "wait"))))
        stages.append(segs)
    return EnergyEstimate(step_time_s=step_time, tokens_per_step=float(job.tokens_per_step),
                          gpus_per_stage=job.cluster.num_gpus / len(stages), stages=stages, cap_w=gpu.tdp_w)


def parse_power_flags(power_cap: str | None, clock: str | None) -> tuple[float | None, float | None]:
    """``--power-cap`` and ``--clock`` as W and Hz ("500W", "1410MHz"); a number without its unit is refused
    (is "300" watts or a fraction of TDP? is "1200" MHz or Hz?)."""
    from ..errors import UnitError
    from ..units import has_unit, parse_quantity
    for name, v, example in (("power-cap", power_cap, '"500W"'), ("clock", clock, '"1410MHz"')):
        if v is not None and not has_unit(v):
            raise UnitError(name, f"{v!r} has no unit", f"write it with one, e.g. {example}")
    cap = None if power_cap is None else parse_quantity(power_cap, "power", "power-cap")
    hz = None if clock is None else parse_quantity(clock, "frequency", "clock")
    return cap, hz


def job_with_power(job, cap_w: float | None = None, clock_hz: float | None = None):
    """``job`` on the same cluster with its GPUs under a power cap (W) and/or a locked SM clock (Hz)."""
    if cap_w is None and clock_hz is None:
        return job
    c = job.cluster
    gpu = pw.with_power(c.gpu, cap_w, clock_hz)
    cluster = c.model_copy(update={"node": c.node.model_copy(update={"gpu": gpu})})
    return job.model_copy(update={"cluster": cluster})
