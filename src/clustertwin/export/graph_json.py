"""The workload graph as JSON, for other tools: schema ``clustertwin.workload-graph``, version 1
(documented in docs/trace.md).

Ops are listed once in ``ops`` (an op shared by several blocks or stages appears once) and referred
to by id; each carries its priced duration on the job's cluster (``duration_s``, the same Pricer
``predict`` and ``sim`` use). Stages list their blocks (ops of one micro-batch, repeated ``repeat``
times), pipeline sends, once-per-iteration ops and FSDP per-micro-batch ops, and the virtual chunks
in model order.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..cost.profile import HardwareProfile
from ..calibrate.profile import profile_for
from ..errors import DataError
from ..schedule.step import Pricer
from ..sim.layout import chunk_segments
from ..workload.graph import WorkloadGraph
from ..workload.ops import Op

SCHEMA = "clustertwin.workload-graph"
VERSION = 1


def _schedule_kind(graph: WorkloadGraph) -> str:
    if graph.plan.pp == 1:
        return "no-pipelining"
    return "interleaved-1f1b" if graph.plan.vpp > 1 else "1f1b"


def graph_to_json(graph: WorkloadGraph, profile: HardwareProfile | None = None) -> dict[str, Any]:
    """The document (a dict ready for json.dump)."""
    pricer = Pricer(graph, profile or profile_for(graph.job.cluster.gpu))
    job, plan = graph.job, graph.plan
    ids: dict[Op, int] = {}
    ops: list[dict[str, Any]] = []

    def ref(op: Op) -> int:
        k = ids.get(op)
        if k is None:
            k = ids[op] = len(ops)
            d: dict[str, Any] = {"id": k, "name": op.name, "kind": op.kind.value, "phase": op.phase.value,
                                 "stream": op.stream.value, "layer": op.layer, "flops": op.flops, "bytes": op.bytes,
                                 "shape": list(op.shape), "dtype": op.dtype}
            if op.is_comm:
                d.update(collective=op.collective, group=op.group, comm_bytes=op.comm_bytes,
                         overlappable=op.overlappable)
            d["duration_s"] = pricer.time(op)
            ops.append(d)
        return k

    segments = chunk_segments(graph)
    stages = []
    for sg in graph.stages:
        stages.append({
            "stage": sg.stage,
            "chunk_layers": list(sg.chunk_layers),
            "layers_dense": sg.layers_dense,
            "layers_moe": sg.layers_moe,
            "params": {"dense": sg.params.dense, "expert": sg.params.expert, "embedding": sg.params.embedding},
            "blocks": [{"name": b.name, "repeat": b.repeat, "fwd": [ref(o) for o in b.fwd],
                        "bwd": [ref(o) for o in b.bwd], "recompute": [ref(o) for o in b.recompute]}
                       for b in sg.blocks],
            "chunks": [[{"block": s.block, "layer": s.layer} for s in segs] for segs in segments[sg.stage]],
            "p2p": [ref(o) for o in sg.p2p],
            "step_ops": [ref(o) for o in sg.step_ops],
            "microbatch_dp_ops": [ref(o) for o in sg.microbatch_dp_ops],
        })
    cluster = job.cluster
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "job": {
            "model": job.model.model_dump(),
            "cluster": {"name": cluster.name, "gpu": cluster.gpu.name, "num_gpus": cluster.num_gpus,
                        "gpus_per_node": cluster.gpus_per_node, "num_nodes": cluster.num_nodes},
            "seq_len": job.seq_len,
            "framework": graph.framework.name,
            "tokens_per_step": job.tokens_per_step,
        },
        "plan": plan.model_dump(),
        "num_microbatches": graph.num_microbatches,
        "schedule": _schedule_kind(graph),
        "rank_order": ["tp", "cp", "dp", "pp"],
        "groups": {name: {"size": pl.size, "ranks_per_node": pl.ranks_per_node, "nodes": pl.nodes,
                          "node_span": pl.node_span} for name, pl in pricer.groups.items()},
        "ops": ops,
        "stages": stages,
    }


def write_graph_json(graph: WorkloadGraph, path: str | Path, profile: HardwareProfile | None = None) -> dict:
    doc = graph_to_json(graph, profile)
    p = Path(path)
    if p.exists() and p.is_dir():
        raise DataError("out", f"{str(p)!r} is a directory", "give a file name ending in .json")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise DataError("out", f"cannot write {str(p)!r} ({e.strerror or e})", "choose a writable path") from None
    return doc


__all__ = ["graph_to_json", "write_graph_json", "SCHEMA", "VERSION"]
