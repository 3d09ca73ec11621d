"""ASTRA-sim's configuration files for a Chakra export: the network (yml), the system (json) and a
README with the command that runs them, matching clustertwin's own cluster model.

What ASTRA-sim reads (astra-sim 2.x, analytical network backend):
- network (``extern/network_backend/analytical/common/network-parser/NetworkParser.cpp``):
  ``topology``, ``npus_count``, ``bandwidth`` (GB/s, read as 2^30 bytes per second:
  ``bw_GBps_to_Bpns``) and ``latency`` (ns per hop) per dimension, innermost first. A ``Switch``
  dimension sends every message over 2 hops: ``2 x latency + bytes / bandwidth``.
- system (``astra-sim/system/Sys.cc`` initialize_sys): the collective algorithm per dimension,
  scheduling, chunking, ``endpoint-delay``, and the roofline (``roofline-enabled``, ``peak-perf`` in
  TFLOPS, ``local-mem-bw`` in GB/s of 1e9 bytes).

The congestion-unaware analytical backend takes any number of dimensions; the congestion-aware one
takes one only, so the README runs the congestion-unaware binary.
"""
from __future__ import annotations

import json

from ..constants import value
from ..cost.network import NetworkPricer
from ..cost.profile import HardwareProfile
from ..workload.graph import WorkloadGraph

GIB = float(1 << 30)


def _ring_step_latency_s(pricer: NetworkPricer, inter: bool, n: int) -> float:
    """NCCL's latency of one ring step with the Simple protocol on a tier (what large messages
    take), with the per-call base latency spread over the steps of an (n-1)-step ring, as
    clustertwin's NetworkPricer prices it."""
    base = value("nccl.latency.base.ring.simple")
    if inter:
        step = value("nccl.latency.net.ring.simple") + 2 * pricer.extra_inter
    else:
        step = value("nccl.latency.nvlink.ring.simple") + pricer.extra_intra
    steps = max(1, n - 1)
    return step + base / steps


def network_dims(graph: WorkloadGraph, profile: HardwareProfile) -> dict:
    """Dimensions of the cluster as ASTRA-sim's network file describes them: the GPUs of a node
    (NVLink), then the nodes (the NICs), each a Switch; bandwidths are clustertwin's bus bandwidths
    (link x its NCCL efficiency) per GPU."""
    cluster = graph.job.cluster
    pricer = NetworkPricer(cluster, profile)
    world = cluster.num_gpus
    g = min(cluster.gpus_per_node, world)
    # the node's scale-up bandwidth a rank gets in a group of g (on a full mesh, xGMI, only the g - 1
    # links joining the group: a job on part of a node does not get the whole node's bandwidth)
    dims = [("Switch", g, pricer.scaleup(g), _ring_step_latency_s(pricer, False, g))]
    if world > g:
        nodes = world // g
        dims.append(("Switch", nodes, pricer.nic_per_gpu, _ring_step_latency_s(pricer, True, nodes)))
    return {"topology": [d[0] for d in dims], "npus_count": [d[1] for d in dims],
            # GB/s as ASTRA-sim reads them: 2^30 bytes per second
            "bandwidth": [round(d[2] / GIB, 3) for d in dims],
            # a Switch message crosses 2 hops: half a ring step each
            "latency": [round(d[3] * 1e9 / 2, 1) for d in dims]}


def network_yaml(dims: dict, comment: str = "") -> str:
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    lines += [f"topology: [ {', '.join(dims['topology'])} ]",
              f"npus_count: [ {', '.join(str(n) for n in dims['npus_count'])} ]",
              f"bandwidth: [ {', '.join(f'{b:g}' for b in dims['bandwidth'])} ]  # GB/s (2^30 B/s) per GPU",
              f"latency: [ {', '.join(f'{x:g}' for x in dims['latency'])} ]  # ns per hop (a Switch message: 2 hops)"]
    return "\n".join(lines) + "\n"


def system_config(graph: WorkloadGraph, dims: int, roofline: bool) -> dict:
    """ASTRA-sim's system file: ring collectives on every dimension (what NCCL runs for large
    messages), one chunk per collective (``preferred-dataset-splits`` 1, one active chunk: the
    congestion-unaware backend does not share a link between concurrent chunks, so splitting a
    collective would multiply its bandwidth), FIFO scheduling, an endpoint delay of 1 ns (the ring
    step latency is in the network file), and the roofline of the GPU: its dense peak at the job's
    precision and its HBM bandwidth."""
    gpu = graph.job.cluster.gpu
    ring = ["ring"] * dims
    return {
        "scheduling-policy": "FIFO",
        # 1 ns, not 0: a 0 delay schedules an event at the current time, which the analytical
        # backend's event queue rejects (EventQueue::proceed asserts the next event is later)
        "endpoint-delay": 1,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "all-reduce-implementation": ring,
        "all-gather-implementation": ring,
        "reduce-scatter-implementation": ring,
        "all-to-all-implementation": ["direct"] * dims,
        "collective-optimization": "baseline",
        "local-mem-bw": round(gpu.hbm_bandwidth_bytes_per_s / 1e9, 3),
        "peak-perf": round(gpu.peak(graph.plan.precision) / 1e12, 3),
        "boost-mode": 0,
        "roofline-enabled": 1 if roofline else 0,
    }


REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


def readme(name: str, world: int, dims: dict, model: str, plan: str, compact: bool = False) -> str:
    binary = "AstraSim_Analytical_Congestion_Unaware"
    cmd = (f"{binary} --workload-configuration={name} --comm-group-configuration={name}.groups.json "
           f"--system-configuration={name}.system.json --network-configuration={name}.network.yml "
           f"--remote-memory-configuration={name}.remote_memory.json")
    expand = (f"""The traces are in the compact layout (one template per pipeline stage): write the per-rank
files first, `clustertwin trace-expand . --name {name}` (all ranks; ASTRA-sim reads every one).

""" if compact else "")
    return f"""# ASTRA-sim run of {model}, {plan}, {world:,} ranks (written by clustertwin trace --format chakra)

{expand}Run from this directory, with ASTRA-sim 2.x built with its analytical backend
(`./build/astra_analytical/build.sh`; the binary is in `build/astra_analytical/build/bin/`):

    {cmd}

Roofline mode (compute time from each node's `num_ops` and `tensor_size`): use
`--system-configuration={name}.system_roofline.json` instead.

| file | what |
|---|---|
| `{name}.<rank>.et` | one Chakra execution trace per rank |
| `{name}.groups.json` | the communicator groups (`pg_name` -> ranks) |
| `{name}.network.yml` | {len(dims['npus_count'])} dimension(s), {' x '.join(str(n) for n in dims['npus_count'])}: GPUs of a node, then nodes |
| `{name}.system.json` | ring collectives, one chunk, durations from the trace |
| `{name}.system_roofline.json` | the same with ASTRA-sim's roofline (GPU peak and HBM bandwidth) |
| `{name}.remote_memory.json` | no memory expansion |

The congestion-aware binary takes a 1-D network only; this network has
{len(dims['npus_count'])} dimension(s), so run the congestion-unaware one. What ASTRA-sim does with the
groups, and where its step differs from clustertwin's: see clustertwin's docs/trace.md (checked with
astra-sim commit 518bd51, 2026-03). Every rank's kernels are timed at the mean GPU speed: compare
ASTRA-sim's step with `clustertwin predict`'s step less its `stragglers` part (the expected wait for
the slowest GPU, which no rank of these traces runs).
"""


def write_astra_configs(graph: WorkloadGraph, profile: HardwareProfile, out, name: str,
                        compact: bool = False) -> dict[str, str]:
    """Write ``<name>.network.yml``, ``<name>.system.json``, ``<name>.system_roofline.json``,
    ``<name>.remote_memory.json`` and ``<name>.README.md`` into ``out``; returns kind -> file name."""
    from pathlib import Path
    out = Path(out)
    world = graph.job.cluster.num_gpus
    dims = network_dims(graph, profile)
    files = {
        "network": (f"{name}.network.yml", network_yaml(
            dims, f"clustertwin: {graph.job.cluster.name}, {graph.job.cluster.gpu.name}; bus bandwidths "
                  "(link x NCCL efficiency) and ring-step latencies of clustertwin's collective model")),
        "system": (f"{name}.system.json", json.dumps(system_config(graph, len(dims["npus_count"]), False),
                                                     indent=2) + "\n"),
        "system_roofline": (f"{name}.system_roofline.json",
                            json.dumps(system_config(graph, len(dims["npus_count"]), True), indent=2) + "\n"),
        "remote_memory": (f"{name}.remote_memory.json", json.dumps(REMOTE_MEMORY, indent=2) + "\n"),
        "readme": (f"{name}.README.md", readme(name, world, dims, graph.job.model.name, graph.plan.short(), compact)),
    }
    for fname, text in files.values():
        (out / fname).write_text(text, encoding="utf-8")
    return {k: v[0] for k, v in files.items()}


__all__ = ["network_dims", "network_yaml", "system_config", "write_astra_configs", "REMOTE_MEMORY"]
