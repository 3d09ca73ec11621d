"""predict: one iteration of a plan — step time with a breakdown that sums to it, memory per GPU,
tokens/s, MFU and HFU.

>>> from clustertwin import predict
>>> r = predict("gpt3-175b", gpu="a100-80gb", num_gpus=1024, plan="tp=8,pp=16,dp=8,sp=1,recompute=selective",
...             micro_batch=1, global_batch=1536, seq_len=2048)
>>> sorted(r.breakdown_s) == sorted(["compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
...                                  "dp_comm", "bubble", "optimizer", "other"])
True
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import cluster_for_gpu, load_cluster, load_model
from .cost.profile import HardwareProfile
from .errors import SpecError
from .schedule.memory import MemoryEstimate, estimate_memory
from .schedule.step import StepEstimate, estimate_step
from .specs import ClusterSpec, ModelSpec, Plan, TrainingJob, make_job, parse_plan
from .workload.graph import WorkloadGraph, build_graph

DEFAULT_MODEL = "llama3-8b"
DEFAULT_GPU = "h100-sxm"
DEFAULT_NUM_GPUS = 64
DEFAULT_PLAN = "tp=2,pp=1,dp=32,zero=1,recompute=none"
DEFAULT_SEQ_LEN = 8192
DEFAULT_MICRO_BATCH = 1
DEFAULT_GLOBAL_BATCH = 256


@dataclass
class Prediction:
    job: TrainingJob
    graph: WorkloadGraph
    step: StepEstimate
    memory: MemoryEstimate

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    @property
    def breakdown_s(self) -> dict[str, float]:
        return self.step.breakdown_s

    @property
    def tokens_per_s(self) -> float:
        return self.job.tokens_per_step / self.step_time_s

    @property
    def model_flops_per_step(self) -> float:
        """Model FLOPs (no recomputation, attention counted in full as Megatron/NVIDIA do)."""
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
    def peak_flops(self) -> float:
        return self.job.cluster.gpu.peak(self.job.plan.precision)

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu * 1e12 / self.peak_flops

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / self.step_time_s / self.job.cluster.num_gpus / self.peak_flops

    @property
    def fits(self) -> bool:
        return self.memory.fits

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
            "hfu": self.hfu,
            "breakdown_s": dict(self.breakdown_s),
            "memory_per_gpu_bytes": mem,
            "hbm_bytes": float(self.memory.capacity_bytes),
            "fits": self.fits,
            "num_microbatches": self.graph.num_microbatches,
            "bubble_fraction": self.step.breakdown_s["bubble"] / self.step_time_s,
            **({"moe": self.moe_routing()} if self.job.model.is_moe else {}),
            "inputs": {
                "model": job.model.model_dump(exclude_defaults=False),
                "cluster": {"name": job.cluster.name, "gpu": job.cluster.gpu.name, "num_gpus": job.cluster.num_gpus,
                            "gpus_per_node": job.cluster.gpus_per_node, "num_nodes": job.cluster.num_nodes,
                            "topology": job.cluster.topology, "oversubscription": job.cluster.oversubscription,
                            "nic_bandwidth_bytes_per_s_per_node": job.cluster.node.node_nic_bandwidth},
                "plan": self.graph.plan.model_dump(),
                "seq_len": job.seq_len,
                "framework": job.framework,
            },
        }


from .workload.ops import Phase as _Phase  # noqa: E402

_RECOMPUTE = _Phase.RECOMPUTE


def resolve_cluster(gpu: str | None = None, num_gpus: int | None = None, cluster: str | ClusterSpec | None = None,
                    gpus_per_node: int | None = None) -> ClusterSpec:
    """A cluster from a preset/file (optionally resized to ``num_gpus``) or from a GPU and a count."""
    if cluster is not None:
        c = load_cluster(cluster)
        if gpus_per_node and gpus_per_node != c.gpus_per_node:
            raise SpecError("gpus_per_node", f"{gpus_per_node} conflicts with cluster {c.name} ({c.gpus_per_node} per node)",
                            "drop --gpus-per-node or describe another cluster")
        return c.with_gpus(num_gpus) if num_gpus is not None else c
    return cluster_for_gpu(gpu or DEFAULT_GPU, DEFAULT_NUM_GPUS if num_gpus is None else num_gpus, gpus_per_node)


def make_training_job(model: str | Path | ModelSpec = DEFAULT_MODEL, *, gpu: str | None = None,
                      num_gpus: int | None = None, cluster: str | ClusterSpec | None = None,
                      gpus_per_node: int | None = None, plan: str | Plan | None = None,
                      micro_batch: int | None = None, global_batch: int | None = None,
                      seq_len: int | None = None, precision: str | None = None,
                      framework: str = "megatron", tokens: float | None = None) -> TrainingJob:
    m = load_model(model)
    c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node)
    overrides = {"micro_batch": micro_batch, "global_batch": global_batch, "precision": precision}
    if isinstance(plan, Plan):
        p = plan.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    else:
        p = parse_plan(plan if plan is not None else "", **overrides)
    from .specs.framework import get_framework
    fw = get_framework(framework).name
    return make_job(m, c, p, min(m.max_seq_len, DEFAULT_SEQ_LEN) if seq_len is None else seq_len, fw, tokens)


def resolve_profile(profile: HardwareProfile | str | Path | None, job: TrainingJob) -> HardwareProfile | None:
    """A HardwareProfile as given, or one read from a measured profile file (``clustertwin calibrate``)."""
    if profile is None or isinstance(profile, HardwareProfile):
        return profile
    from .calibrate.profile import load_profile
    return load_profile(profile).to_hardware_profile(job.cluster.gpu)


def predict_cli_job(model, *, gpu, num_gpus, cluster, gpus_per_node, plan, micro_batch, global_batch, seq_len,
                    precision, framework, profile=None) -> Prediction:
    """The prediction of a command line: with no model, GPU, cluster or plan given it is the built-in
    default job (Llama 3 8B on 64 H100s, the README's main job); otherwise what was given."""
    if model is None and plan is None and cluster is None and gpu is None and num_gpus is None:
        plan = DEFAULT_PLAN
        micro_batch = DEFAULT_MICRO_BATCH if micro_batch is None else micro_batch
        global_batch = DEFAULT_GLOBAL_BATCH if global_batch is None else global_batch
        seq_len = DEFAULT_SEQ_LEN if seq_len is None else seq_len
    return predict(model or DEFAULT_MODEL, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                   plan=plan, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                   precision=precision, framework=framework, profile=profile)


def predict_job(job: TrainingJob, profile: HardwareProfile | str | Path | None = None) -> Prediction:
    profile = resolve_profile(profile, job)
    graph = build_graph(job)
    return Prediction(job, graph, estimate_step(graph, profile), estimate_memory(graph))


def predict(model: str | Path | ModelSpec = DEFAULT_MODEL, *, gpu: str | None = None, num_gpus: int | None = None,
            cluster: str | ClusterSpec | None = None, gpus_per_node: int | None = None,
            plan: str | Plan | None = None, micro_batch: int | None = None, global_batch: int | None = None,
            seq_len: int | None = None, precision: str | None = None, framework: str = "megatron",
            profile: HardwareProfile | str | Path | None = None) -> Prediction:
    """Predict one training iteration. Every argument has a default (Llama 3 8B on 64 H100s).
    ``profile``: a HardwareProfile or a measured profile file; default: the GPU's shipped profile,
    else its architecture's defaults."""
    job = make_training_job(model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                            plan=plan, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                            precision=precision, framework=framework)
    return predict_job(job, profile)
