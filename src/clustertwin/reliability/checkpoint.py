"""Recovery model: checkpoint size from the plan, save and load times, and the restart after a failure.

Checkpoint contents: the 16-bit weights and the optimizer state (fp32 master weights, Adam m and v)
of every parameter once: 2 + 12 bytes per parameter in mixed precision with the master copy in the
optimizer (Megatron, DeepSpeed), 4 + 8 with fp32 weights (PyTorch AMP, FSDP2). Gradients are not
saved. The per-rank shard comes from the workload graph (``StageParams`` of each stage): dense
parameters are replicated over dp x cp, routed experts over (dp x cp) / ep.

Who writes:
- ``all`` (default; torch.distributed.checkpoint, Megatron-Core ``torch_dist`` with fully parallel
  save): replicated state is split across its replicas, so every GPU writes total / num_gpus.
- ``dp-rank-0`` (Megatron's legacy ``torch`` format): the ranks of data-parallel replica 0 write their
  whole (tp, pp) shard, the distributed optimizer's state gathered onto them first; the nodes of that
  replica carry the whole checkpoint.

The synchronous part of a checkpoint is what the GPU state passes through before training may go on:
a copy from GPU to host memory (into pageable memory at ~1.4 GB/s, as ``torch.save`` does, or into
pinned memory at PCIe bandwidth) and the serialisation of the host copy (``torch.save``, which
torch.distributed.checkpoint's file writer also uses per tensor) at a host rate per process. The rates
and their sources are the ``pageable_copy_bytes_per_s`` and ``serialize_bytes_per_s`` fields.

Modes:
- ``sync``: training stops until the checkpoint is on storage (Young/Daly's classical model): the pageable
  copy, then serialisation streamed to storage (the slower of the two sets the pace).
- ``async``: training stops only to copy the shard into pinned host memory over PCIe; serialisation and the
  write to storage run in the background and the checkpoint counts only once it is durable (PyTorch DCP
  async save: 7B checkpoint downtime from 148.8 s to 6.3 s, PyTorch blog 2024-06-12; CheckFreq (Mohan et
  al., FAST'21) sec. 4.2: the snapshot is the only part on the critical path, persist runs in the background).
- ``async-serialized``: training stops while each rank ``torch.save``s its shard to host memory or local
  disk (pageable copy + serialisation); only the upload to storage runs in the background (GEMINI's HighFreq
  baseline, SOSP'23: its artifact profiles ``torch.save()`` before sending at 80 s a checkpoint).
- ``in-memory``: GEMINI-style (Wang et al., SOSP'23): the state is copied to the node's own host memory
  and to a peer node's over the backend network; recovery reads it back from the peer instead of storage.
  The copy rides in the spans the step leaves the network idle (GEMINI's traffic interleaving): no stall
  when it fits, the remainder as a stall when it does not.

Restart after an unplanned failure = detection + rescheduling (only when a node must be replaced;
a hot spare makes it a swap) + initialisation + checkpoint load + warm-up steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from ..specs.model import Frozen
from ..parallel.layout import expert_dp, expert_tp

CheckpointMode = Literal["sync", "async", "async-serialized", "in-memory"]
Writers = Literal["all", "dp-rank-0"]


class CheckpointConfig(Frozen):
    mode: CheckpointMode = "sync"
    writers: Writers = "all"
    # Llama 3 (arXiv 2407.21783) sec. 3.3.1: the Tectonic storage fabric "supports a sustainable
    # throughput of 2 TB/s and a peak throughput of 7 TB/s"; checkpoints are bursts, the sustained figure is used.
    storage_write_bandwidth_bytes_per_s: float = Field(2e12, gt=0)
    storage_read_bandwidth_bytes_per_s: float = Field(2e12, gt=0)
    # DGX H100 datasheet: two dual-port ConnectX-7 (400 Gb/s) for storage and in-band management; one
    # card's 400 Gb/s = 50 GB/s per node towards storage.
    node_storage_bandwidth_bytes_per_s: float = Field(50e9, gt=0)
    # torch.save copies a GPU tensor into pageable host memory; PyTorch PR #138018 (github.com/pytorch/pytorch/pull/
    # 138018, A100): "~1.4GB/s for Memcpy DtoH (Device -> Pageable) vs ~12.6GB/s Memcpy DtoH (Device -> Pinned)".
    pageable_copy_bytes_per_s: float = Field(1.4e9, gt=0)
    # torch.save's serialisation of a host tensor to a file, one process: ServiceNow/Fast-LLM issue #26 (H100 node,
    # local NVMe "more than 2 GiB/s of write speed, but torch.save and safetensors.torch.save_file give less than a
    # third of that"): 2 GiB/s / 3 (an upper bound of the rate, so the stall it prices is a lower bound).
    serialize_bytes_per_s: float = Field(2.0 * 2**30 / 3.0, gt=0)
    # restart, seconds
    # MegaScale (arXiv 2402.15627) sec. 6.3: detection plus diagnostic tests take "less than 10 minutes";
    # Kokolis et al. 2025 run health checks every 5 minutes. Detection 5 min; diagnosis and replacing the
    # node the other 5 min.
    detection_s: float = Field(300.0, ge=0)
    # ASSUMPTION: stopping the survivors (NCCL abort, process teardown) falls inside MegaScale's detection
    # window, so it adds nothing by default; give it to price a slow teardown.
    stop_s: float = Field(0.0, ge=0)
    reschedule_s: float = Field(300.0, ge=0)
    # ASSUMPTION: swapping in an idle, health-checked hot spare takes a minute (no diagnosis wait).
    spare_swap_s: float = Field(60.0, ge=0)
    # MegaScale sec. 3.5 (initialisation): under 30 s on more than 10,000 GPUs after their optimisations
    # (stock Megatron-LM: ~1,047 s on 2,048 GPUs).
    init_s: float = Field(30.0, ge=0)
    # How initialisation grows with the ranks (recovery.init_time_s): "fixed" keeps init_s at any size (today's
    # default), "megascale" and "stock-megatron" scale linearly from MegaScale's two measurements.
    init_scaling: Literal["fixed", "megascale", "stock-megatron"] = "fixed"
    # ASSUMPTION: the first two steps after a restart are lost to warm-up (allocator, NCCL channels).
    warmup_steps: float = Field(2.0, ge=0)
    hot_spares: int = Field(0, ge=0, le=1_000_000, description="idle nodes kept ready to replace a failed one")
    # ASSUMPTION: a failed node is repaired or replaced in the spare pool within a day.
    repair_s: float = Field(86400.0, gt=0)


@dataclass(frozen=True)
class CheckpointCosts:
    bytes_total: float            # one checkpoint, all shards
    bytes_per_gpu_max: float      # the largest shard one GPU writes
    bytes_per_node_max: float     # the most a single node writes
    save_s: float                 # time to make one checkpoint durable on storage (or on the peer)
    blocking_s: float             # training stall per checkpoint (C in Young/Daly)
    persist_s: float              # background time after the stall until it is durable (0 for sync)
    load_s: float                 # reading it back after a failure
    mode: str
    writers: str


def state_bytes_per_param(prediction) -> float:
    """Bytes of checkpoint per parameter: weights + optimizer state, as the memory model holds them."""
    from ..specs.framework import get_framework
    fw = get_framework(prediction.job.framework)
    fp32 = prediction.graph.plan.precision == "fp32"
    if fw.master_in_optimizer and not fp32:
        return 2.0 + 12.0   # bf16/fp16 weights + fp32 master, Adam m, v
    return 4.0 + 8.0        # fp32 weights + Adam m, v


def checkpoint_costs(prediction, config: CheckpointConfig) -> CheckpointCosts:
    """Sizes and times of one checkpoint of ``prediction``'s plan."""
    job, graph = prediction.job, prediction.graph
    plan, cluster = graph.plan, job.cluster
    b = state_bytes_per_param(prediction)
    dp_cp = plan.dp * plan.cp
    etp = expert_tp(plan)                     # as the workload graph shards experts (StageParams.expert)
    # ranks of a stage holding the same expert shard: tp x dp x cp ranks over ep x etp distinct shards
    expert_replicas = expert_dp(plan)
    g = cluster.gpus_per_node
    total = 0.0
    per_gpu_max = 0.0
    per_node_max = 0.0
    for sg in graph.stages:
        dense = sg.params.dense + sg.params.embedding
        expert = sg.params.expert
        total += (plan.tp * dense + plan.ep * etp * expert) * b
        if config.writers == "all":
            shard = (dense / dp_cp + expert / expert_replicas) * b
            per_gpu_max = max(per_gpu_max, shard)
            per_node_max = max(per_node_max, shard * min(g, cluster.num_gpus))
        else:
            # replica 0 of each (tp, pp) rank writes its whole shard; its tp ranks share a node
            shard = (dense + expert) * b
            per_gpu_max = max(per_gpu_max, shard)
            per_node_max = max(per_node_max, shard * min(g, plan.tp * plan.cp))
    cfg = config
    to_storage = max(total / cfg.storage_write_bandwidth_bytes_per_s,
                     per_node_max / cfg.node_storage_bandwidth_bytes_per_s)
    from_storage = max(total / cfg.storage_read_bandwidth_bytes_per_s,
                       per_node_max / cfg.node_storage_bandwidth_bytes_per_s)
    pcie = cluster.gpu.pcie_bandwidth_bytes_per_s
    nic_per_gpu = cluster.node.nic_bandwidth_per_gpu
    snapshot = per_gpu_max / pcie                                  # into pinned host memory
    pageable = per_gpu_max / cfg.pageable_copy_bytes_per_s         # torch.save's copy into pageable memory
    serialize = per_gpu_max / cfg.serialize_bytes_per_s            # each rank serialises its shard in parallel
    if cfg.mode == "sync":
        blocking = pageable + max(serialize, to_storage)
        persist, save, load = 0.0, blocking, from_storage
    elif cfg.mode == "async":
        blocking, persist = snapshot, max(serialize, to_storage)
        save, load = snapshot + persist, from_storage
    elif cfg.mode == "async-serialized":
        blocking, persist = pageable + serialize, to_storage
        save, load = blocking + to_storage, from_storage
    else:  # in-memory: a copy in the node's own host memory and one in a peer node's, over the backend network
        peer = per_node_max / (nic_per_gpu * min(g, cluster.num_gpus))
        idle = network_idle_s(prediction)
        if peer <= idle:
            # GEMINI (Wang et al., SOSP'23) sec. 3.2: checkpoint traffic is cut into chunks sent from GPU memory
            # through a small GPU buffer in the spans when training leaves the network idle, so it checkpoints
            # every iteration without a stall (its Fig. 7: iteration time unchanged); durable by the step's end
            blocking, persist = 0.0, prediction.mean_gpu_step_time_s
        else:
            # what does not fit in the idle spans delays the step (sec. 3.2: it "prolong[s] the iteration time")
            blocking, persist = peer - idle, 0.0
        save, load = snapshot + peer, peer + snapshot
    return CheckpointCosts(bytes_total=total, bytes_per_gpu_max=per_gpu_max, bytes_per_node_max=per_node_max,
                           save_s=save, blocking_s=blocking, persist_s=persist, load_s=load,
                           mode=cfg.mode, writers=cfg.writers)


def network_idle_s(prediction) -> float:
    """Seconds per step the scale-out network is left idle by training: the step less its exposed
    communication on the network (data-, pipeline-, context- and expert-parallel; tensor-parallel only where
    a TP group spans nodes). Traffic hidden under compute is not in the breakdown, so this is the most idle
    time the step can have (GEMINI profiles the real spans; its Fig. 8 finds idle time left every iteration).
    The wait for the slowest GPU (``stragglers``) is not idle time here: the node of the slowest GPU, whose
    checkpoint must fit too, computes through it, so its idle time is that of the step at the mean speed."""
    b = prediction.breakdown_s
    plan, g = prediction.graph.plan, prediction.job.cluster.gpus_per_node
    keys = ["dp_comm", "pp_comm", "cp_comm", "ep_comm"] + (["tp_comm"] if plan.tp > g else [])
    return max(0.0, prediction.mean_gpu_step_time_s - sum(b.get(k, 0.0) for k in keys))


@dataclass(frozen=True)
class RestartModel:
    """Restart time after an unplanned failure as a discrete distribution (values_s, probabilities)."""

    values_s: tuple[float, ...]
    probs: tuple[float, ...]
    planned_s: float                      # after a planned interruption (no detection, no rescheduling)
    spare_available: float                # probability a hot spare is free when a node must be replaced
    replace_share: float                  # share of failures that need a node replaced

    @property
    def mean_s(self) -> float:
        return sum(v * p for v, p in zip(self.values_s, self.probs))


def poisson_cdf_below(k: int, mean: float) -> float:
    """P(Poisson(mean) < k)."""
    if k <= 0:
        return 0.0
    if mean <= 0:
        return 1.0
    term = math.exp(-mean)
    acc = term
    for i in range(1, k):
        term *= mean / i
        acc += term
        if acc >= 1.0:
            return 1.0
    return min(1.0, acc)


def restart_model(config: CheckpointConfig, costs: CheckpointCosts, step_time_s: float,
                  replace_rate_per_s: float, total_rate_per_s: float,
                  branches: "tuple[float, float, float] | None" = None) -> RestartModel:
    """Restart time: detection + (rescheduling | spare swap | nothing) + init + load + warm-up.

    Hardware failures (``replace_rate_per_s``) need their node replaced: with ``hot_spares`` idle nodes
    and failed nodes back after ``repair_s``, the number under repair is Poisson with mean
    rate x repair time (an M/G/inf queue), so a spare is free with probability P(Poisson < spares)."""
    common = config.detection_s + config.stop_s + config.init_s + costs.load_s + config.warmup_steps * step_time_s
    share = replace_rate_per_s / total_rate_per_s if total_rate_per_s > 0 else 0.0
    p_spare = poisson_cdf_below(config.hot_spares, replace_rate_per_s * config.repair_s)
    values = branches if branches is not None else (common, common + config.spare_swap_s, common + config.reschedule_s)
    probs = (1.0 - share, share * p_spare, share * (1.0 - p_spare))
    planned = config.init_s + costs.load_s + config.warmup_steps * step_time_s
    kept = [(v, p) for v, p in zip(values, probs) if p > 0]
    return RestartModel(values_s=tuple(v for v, _ in kept), probs=tuple(p for _, p in kept), planned_s=planned,
                        spare_available=p_spare, replace_share=share)
