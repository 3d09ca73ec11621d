"""predict: one iteration of a plan — step time with a breakdown that sums to it, memory per GPU,
tokens/s, MFU and HFU.

>>> from clustertwin import predict
>>> r = predict("gpt3-175b", gpu="a100-80gb", num_gpus=1024, plan="tp=8,pp=16,dp=8,sp=1,recompute=selective",
...             micro_batch=1, global_batch=1536, seq_len=2048)
>>> sorted(r.breakdown_s) == sorted(["compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "moe_imbalance",
...                                  "pp_comm", "dp_comm", "bubble", "optimizer", "other", "stragglers"])
True
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cost.profile import HardwareProfile, profile_assumption
from .jobs import (DEFAULT_GLOBAL_BATCH, DEFAULT_GPU, DEFAULT_MICRO_BATCH, DEFAULT_MODEL,  # noqa: F401 (re-exported)
                   DEFAULT_NUM_GPUS, DEFAULT_PLAN, DEFAULT_SEQ_LEN, JobOptions, job_from_options,
                   make_training_job, resolve_cluster)
from .schedule.batch import price_plan
from .schedule.memory import MemoryEstimate
from .schedule.step import StepEstimate
from .specs import ClusterSpec, ModelSpec, Plan, TrainingJob
from .workload.graph import WorkloadGraph, build_graph


@dataclass(frozen=True)
class Prediction:
    job: TrainingJob
    graph: WorkloadGraph
    step: StepEstimate
    memory: MemoryEstimate
    profile: HardwareProfile | None = field(default=None, compare=False, repr=False)   # what priced it

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    @property
    def breakdown_s(self) -> dict[str, float]:
        return self.step.breakdown_s

    @property
    def mean_gpu_step_time_s(self) -> float:
        """The step with every GPU at the mean speed: the step less its ``stragglers`` part (the expected
        wait for the slowest GPU). What the discrete-event replay (``sim``) and the trace exports time,
        and goodput's ideal step."""
        return self.step.step_time_s - self.step.breakdown_s.get("stragglers", 0.0)

    @property
    def tokens_per_s(self) -> float:
        return self.job.tokens_per_step / self.step_time_s

    @property
    def model_flops_per_step(self) -> float:
        """Model FLOPs of one step, the numerator of MFU: 6·N per token plus the attention a causal
        model needs, forward and backward (3x), with the scores counted over half the keys on
        average, the work the step time prices (flash kernels skip the masked half). No
        recomputation. So MFU never exceeds 1, however long the sequence."""
        return self.job.model.flops_per_token(self.job.seq_len, causal=True) * self.job.tokens_per_step

    @property
    def model_flops_per_step_full_attention(self) -> float:
        """Model FLOPs as published MFUs count them (PaLM, Chowdhery et al. 2022 App. B: 6·N + 12·L·H·Q·T
        per token; Megatron-LM, Narayanan et al. 2021 eq. 3; torchtitan's ``num_flops_per_token``):
        attention in full, no causal halving. At long sequences this exceeds the work done, and an
        MFU on it can exceed 1; ``validate`` compares published MFU and TFLOP/s figures on it."""
        return self.job.model.flops_per_token(self.job.seq_len) * self.job.tokens_per_step

    @property
    def hardware_flops_per_step(self) -> float:
        """Model FLOPs plus the forward work recomputation repeats."""
        extra = 0.0
        m = self.graph.num_microbatches
        n_ranks_per_stage = self.job.cluster.num_gpus / self.job.plan.pp
        for sg in self.graph.stages:
            extra += sum(op.flops * rep for op, rep in sg.ops(_RECOMPUTE)) * m * n_ranks_per_stage
        return self.model_flops_per_step + extra

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.job.cluster.num_gpus / 1e12

    @property
    def tflops_per_gpu_full_attention(self) -> float:
        """TFLOP/s per GPU as published figures count them (attention in full)."""
        return self.model_flops_per_step_full_attention / self.step_time_s / self.job.cluster.num_gpus / 1e12

    @property
    def peak_flops(self) -> float:
        return self.job.cluster.gpu.peak(self.job.plan.precision)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, causal attention counted as the time prices it (at most 1)."""
        return self.tflops_per_gpu * 1e12 / self.peak_flops

    @property
    def mfu_full_attention(self) -> float:
        """MFU in the published convention (attention in full, no causal halving): what papers and
        torchtitan quote; above ``mfu`` by the masked half of the attention, and above 1 possible at
        long sequences."""
        return self.tflops_per_gpu_full_attention * 1e12 / self.peak_flops

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / self.step_time_s / self.job.cluster.num_gpus / self.peak_flops

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def __str__(self) -> str:
        """A few lines: the job, step time, throughput and memory (to_json() holds everything)."""
        job, plan = self.job, self.graph.plan
        top = sorted(((k, v) for k, v in self.breakdown_s.items() if v > 0), key=lambda kv: -kv[1])[:3]
        return (f"Prediction: {job.model.name} on {job.cluster.num_gpus:,} x {job.cluster.gpu.name}, plan "
                f"{plan.short()}, global batch {plan.global_batch}, seq {job.seq_len}\n"
                f"  step {self.step_time_s:.4g} s ({', '.join(f'{k} {v / self.step_time_s * 100:.0f}%' for k, v in top)}); "
                f"{self.tokens_per_s:,.0f} tokens/s; MFU {self.mfu * 100:.1f}%\n"
                f"  memory {self.memory.total_bytes / 2**30:,.1f} of {self.memory.capacity_bytes / 2**30:,.1f} GiB "
                f"per GPU: {'fits' if self.fits else 'does NOT fit'}")

    def __repr__(self) -> str:
        job = self.job
        return (f"Prediction(model={job.model.name!r}, num_gpus={job.cluster.num_gpus}, gpu={job.cluster.gpu.name!r}, "
                f"plan={self.graph.plan.short()!r}, step_time_s={self.step_time_s:.4g}, mfu={self.mfu:.3f}, "
                f"fits={self.fits})")

    def moe_routing(self) -> dict[str, Any]:
        """Routing imbalance of the MoE layers: the busiest EP rank's load over the mean, tokens dropped."""
        from .workload.moe import load_factor
        plan, c = self.graph.plan, self.graph.context
        factor, dropped = (1.0, 0.0)
        if plan.ep > 1:
            factor, dropped = load_factor(plan.moe_routing, plan.moe_placement, c.num_experts, c.top_k, plan.ep,
                                          max(1, c.tokens // c.tp), plan.moe_capacity_factor)
        return {"routing": plan.moe_routing, "placement": plan.moe_placement, "load_factor": factor,
                "dropped_fraction": dropped, "imbalance_s": self.breakdown_s.get("moe_imbalance", 0.0)}

    @property
    def energy(self):
        """Energy and power of one step (``clustertwin.power.energy.EnergyEstimate``)."""
        from .power.energy import estimate_energy
        return estimate_energy(self)

    @property
    def assumptions(self) -> list[str]:
        """What the prediction assumes about the hardware: the unmeasured figures of a Blackwell
        profile (issue 16, regime 7), where the profile's figures are not measured; and the per-GPU
        speed variation the step's wait for its slowest GPU prices (``stragglers``)."""
        note = profile_assumption(self.job.cluster.gpu, self.profile)
        return ([note] if note else []) + [straggler_assumption(self)]

    @property
    def expected_error(self) -> dict[str, Any]:
        """The step-time error band of runs like this one, cross-validated (``calibrate/bands.py``)."""
        from .calibrate.bands import expected_error
        return expected_error(self.job.framework, self.job.cluster.gpu, self.job.cluster.num_gpus)

    def to_json(self) -> dict[str, Any]:
        mem = {k: float(v) for k, v in self.memory.breakdown_bytes.items()}
        mem["total"] = float(self.memory.total_bytes)
        job = self.job
        return {
            "schema": 1,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_full_attention": self.mfu_full_attention,
            "hfu": self.hfu,
            "breakdown_s": dict(self.breakdown_s),
            "memory_per_gpu_bytes": mem,
            "hbm_bytes": float(self.memory.capacity_bytes),
            "fits": self.fits,
            "num_microbatches": self.graph.num_microbatches,
            "bubble_fraction": self.step.breakdown_s["bubble"] / self.step_time_s,
            "expected_error": self.expected_error,
            "assumptions": self.assumptions,
            **self.energy.summary(),
            **({"moe": self.moe_routing()} if self.job.model.is_moe else {}),
            "inputs": {
                "model": job.model.model_dump(exclude_defaults=False),
                "cluster": {"name": job.cluster.name, "gpu": job.cluster.gpu.name, "num_gpus": job.cluster.num_gpus,
                            "gpus_per_node": job.cluster.gpus_per_node, "num_nodes": job.cluster.num_nodes,
                            "topology": job.cluster.topology, "oversubscription": job.cluster.oversubscription,
                            "nic_bandwidth_bytes_per_s_per_node": job.cluster.node.node_nic_bandwidth},
                "plan": self.graph.plan.model_dump(),
                "seq_len": job.seq_len,
                "global_batch_source": job.global_batch_source,
                "framework": job.framework,
            },
        }


def straggler_assumption(p: Prediction) -> str:
    """What the step assumes of per-GPU speed: the expected wait for the slowest GPU it prices."""
    c = p.job.cluster
    sm = c.stragglers
    wait = p.breakdown_s.get("stragglers", 0.0)
    if sm.off or wait <= 0:
        return ("every GPU at the mean speed: no wait for a slowest GPU priced"
                + (" (stragglers off)" if sm.off else f" ({c.num_gpus} GPU)" if c.num_gpus == 1 else ""))
    slow = (f", {sm.slow_node_fraction * 100:g}% of nodes {sm.slow_node_slowdown * 100:g}% slower"
            if sm.slow_node_fraction > 0 and sm.slow_node_slowdown > 0 else "")
    return (f"the slowest of {c.num_gpus:,} GPUs paces the step: +{wait / (p.step_time_s - wait) * 100:.1f}% "
            f"('stragglers': GPU speed cv {sm.gpu_speed_cv * 100:g}%, each node's hottest GPU "
            f"{sm.thermal_slowdown * 100:g}% slower{slow}); sim replays the mean GPU")


from .workload.ops import Phase as _Phase  # noqa: E402

_RECOMPUTE = _Phase.RECOMPUTE


def resolve_profile(profile: HardwareProfile | str | Path | None, job: TrainingJob) -> HardwareProfile:
    """A HardwareProfile as given, one read from a measured profile file (``clustertwin calibrate``), or
    with none given the GPU's shipped measured profile, else its architecture's defaults."""
    from .calibrate.profile import load_profile, profile_for
    if profile is None:
        return profile_for(job.cluster.gpu)
    if isinstance(profile, HardwareProfile):
        return profile
    return load_profile(profile).to_hardware_profile(job.cluster.gpu)


def predict_job(job: TrainingJob, profile: HardwareProfile | str | Path | None = None) -> Prediction:
    profile = resolve_profile(profile, job)
    graph = build_graph(job)
    step, memory = price_plan(graph.plan, job.model, job.cluster, job.seq_len, job.framework, profile)
    return Prediction(job, graph, step, memory, profile)


def predict(model: str | Path | ModelSpec | None = None, *, gpu: str | None = None, num_gpus: int | None = None,
            cluster: str | ClusterSpec | None = None, gpus_per_node: int | None = None,
            plan: str | Plan | None = None, micro_batch: int | None = None, global_batch: int | None = None,
            seq_len: int | None = None, precision: str | None = None, framework: str = "megatron",
            profile: HardwareProfile | str | Path | None = None, stragglers: Any = None) -> Prediction:
    """Predict one training iteration. Every argument has a default: with no model, plan, cluster,
    GPU or GPU count given it is the built-in default job that `clustertwin predict` runs (Llama 3 8B
    on 64 H100s, clustertwin.jobs); otherwise the model defaults to Llama 3 8B and the rest to what
    the job implies. ``profile``: a HardwareProfile or a measured profile file; default: the GPU's
    shipped profile, else its architecture's defaults. ``stragglers``: the fleet's per-GPU speed
    variation, what the step waits for in its ``stragglers`` part (``jobs.with_stragglers``): None the
    cluster's (the sourced defaults), False off (every GPU at the mean speed), or {field: value}."""
    args = (model, gpu, num_gpus, cluster, gpus_per_node, plan, micro_batch, global_batch, seq_len, precision,
            framework, stragglers)
    key = args if profile is None and all(_plain(a) for a in args) else None
    if key is not None and key in _BY_NAMES:
        return _BY_NAMES[key]
    job = job_from_options(JobOptions(model=model, gpu=gpu, num_gpus=num_gpus, cluster=cluster,
                                      gpus_per_node=gpus_per_node, plan=plan, micro_batch=micro_batch,
                                      global_batch=global_batch, seq_len=seq_len, precision=precision,
                                      framework=framework, stragglers=stragglers))
    pred = predict_job(job, profile)
    if key is not None:
        if len(_BY_NAMES) >= _BY_NAMES_MAX:
            _BY_NAMES.pop(next(iter(_BY_NAMES)))
        _BY_NAMES[key] = pred
    return pred


# predict() by names: the same names and numbers give the same prediction (specs, catalog presets
# and shipped profiles are immutable), so repeated calls are answered from memory. Files are never
# memoised (they may change between calls); neither are calls given spec objects or a profile.
_BY_NAMES: dict[tuple, Prediction] = {}
_BY_NAMES_MAX = 256


def _plain(arg: object) -> bool:
    if arg is None or isinstance(arg, (int, float)):
        return True
    if not isinstance(arg, str):
        return False
    return not (any(c in arg for c in "/\\") or arg.lower().endswith((".yaml", ".yml", ".json"))
                or os.path.exists(arg))
