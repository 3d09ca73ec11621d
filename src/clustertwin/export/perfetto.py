"""A Chrome/Perfetto trace-event timeline of one iteration, from the discrete-event replay.

One process per shown rank (by default one per pipeline stage), one thread per stream: compute, TP,
CP and EP communication (inside the layers), DP communication (gradient buckets, parameter gathers),
pipeline sends. Events are complete events (``"ph": "X"``) in microseconds, named by layer and op
(``L12 attn.qkv``; the embedding and head ops carry their own names), with the op's FLOPs and bytes
in ``args``. Open the file in https://ui.perfetto.dev (or chrome://tracing).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import DataError, PlanError
from ..sim.replay import MacroTask, SimRank, SimResult
from ..workload.ops import Phase

THREADS = ("compute", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "dp_rs", "pp_comm")
_THREAD_NAMES = {"compute": "compute", "tp_comm": "TP comm", "cp_comm": "CP comm", "ep_comm": "EP comm",
                 "dp_comm": "DP comm", "dp_rs": "DP comm (FSDP reduce-scatter)", "pp_comm": "pipeline p2p"}
DETAILS = ("op", "layer")


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _span(start: float, end: float) -> tuple[float, float]:
    """(ts, dur) in microseconds from rounded endpoints: slices back to back on a thread never overlap."""
    a, b = _us(start), _us(end)
    return a, round(max(0.0, b - a), 3)


def default_ranks(result: SimResult) -> list[int]:
    """One rank per pipeline stage: the replica holding the slow GPU (the GPU itself on its stage)."""
    shown = [r for r in result.ranks if r.replica in ("all", "slow")]
    return [r.rank for r in sorted(shown, key=lambda r: r.stage)]


def _phase_name(op_phase: Phase, pass_phase: str) -> str:
    if op_phase == Phase.RECOMPUTE:
        return "recompute"
    return "fwd" if pass_phase == "F" else "bwd"


def _compute_events(task: MacroTask, member: int, pid: int, tids: dict[str, int], detail: str) -> Iterable[dict]:
    t0 = task.start_s
    for seg, ph, mp in task.segments:
        if detail == "layer":
            steps = mp.program.steps
            ts, dur = _span(t0, t0 + mp.duration_s)
            yield {"name": f"{seg.label} {'fwd' if ph == 'F' else 'bwd'}", "cat": "compute", "ph": "X", "pid": pid,
                   "tid": tids["compute"], "ts": ts, "dur": dur,
                   "args": {"layer": seg.label, "microbatch": task.microbatch, "chunk": task.chunk,
                            "flops": sum(s.op.flops * s.fraction for s in steps if not s.is_comm),
                            "bytes": sum(s.op.bytes * s.fraction for s in steps if not s.is_comm),
                            "comm_bytes": sum(s.op.comm_bytes * s.fraction for s in steps if s.is_comm)}}
        else:
            for (k, start, end), st in zip(mp.events[member], mp.program.steps):
                op = st.op
                name = op.name if seg.layer < 0 else f"{seg.label} {op.name}"
                if op.phase == Phase.RECOMPUTE:
                    name += " (recompute)"
                args: dict[str, Any] = {"layer": seg.label, "microbatch": task.microbatch, "chunk": task.chunk,
                                        "phase": _phase_name(op.phase, ph)}
                if st.is_comm:
                    args.update(collective=op.collective, group=op.group, comm_bytes=op.comm_bytes * st.fraction)
                    if st.part:
                        args["part"] = st.part
                else:
                    args.update(kind=op.kind.value, flops=op.flops, bytes=op.bytes)
                    if op.shape:
                        args["shape"] = list(op.shape)
                tid = tids.get(st.stream.value, tids["compute"])
                ts, dur = _span(t0 + start, t0 + end)
                yield {"name": name, "cat": st.stream.value, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": args}
        t0 += mp.duration_s


def _other_event(task: MacroTask, pid: int, tids: dict[str, int], ranks_of_stage: dict[int, int]) -> dict:
    op = task.op
    args: dict[str, Any] = {}
    if task.microbatch >= 0:
        args["microbatch"] = task.microbatch
    if task.chunk >= 0:
        args["chunk"] = task.chunk
    if op is not None:
        if op.is_comm:
            args.update(collective=op.collective, group=op.group, comm_bytes=op.comm_bytes * task.fraction)
        else:   # a share of a stage-wide op (FSDP2's copies of one layer) carries its share
            args.update(kind=op.kind.value, flops=op.flops * task.fraction, bytes=op.bytes * task.fraction)
    if task.peer >= 0:
        args["dst_rank"] = ranks_of_stage.get(task.peer, -1)
    ts, dur = _span(task.start_s, task.end_s)
    return {"name": task.name, "cat": task.stream, "ph": "X", "pid": pid, "tid": tids[task.stream], "ts": ts,
            "dur": dur, "args": args}


def perfetto_trace(result: SimResult, ranks: list[int] | None = None, detail: str = "op") -> dict[str, Any]:
    """The trace-event document of ``result`` for the global ``ranks`` (default: one per stage)."""
    if detail not in DETAILS:
        raise PlanError("detail", f"unknown detail {detail!r}", f"use one of {', '.join(DETAILS)}")
    shown = default_ranks(result) if ranks is None else list(dict.fromkeys(ranks))
    plan = result.graph.plan
    stride = plan.tp * plan.cp * plan.dp
    events: list[dict] = []
    tids = {name: k + 1 for k, name in enumerate(THREADS)}
    for order, g in enumerate(shown):
        sim_rank, member = result.rank_for(g)
        pid = g
        label = f"rank {g} (stage{'s' if sim_rank.stages else ''} {sim_rank.stage_label}"
        if result.slow_rank is not None:
            label += ", slow GPU" if g == result.slow_rank else f", {sim_rank.replica} replica"
        label += ")"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": order}})
        for name in THREADS:
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[name],
                           "args": {"name": _THREAD_NAMES[name]}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tids[name],
                           "args": {"sort_index": tids[name]}})
        # pipeline peers: the rank at the same position of the destination stage
        base = g - sim_rank.stage * stride
        peers = {s: base + s * stride for s in range(plan.pp)}
        for task in sim_rank.tasks:
            if task.stream == "compute" and task.segments:
                events.extend(_compute_events(task, member, pid, tids, detail))
            else:
                events.append(_other_event(task, pid, tids, peers))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "clustertwin sim",
            "model": result.job.model.name,
            "plan": plan.short(),
            "gpus": result.job.cluster.num_gpus,
            "gpu": result.job.cluster.gpu.name,
            "step_time_s": result.step_time_s,
            "num_microbatches": result.num_microbatches,
            "slow_rank": result.slow_rank,
            "slowdown": result.slowdown,
            "detail": detail,
        },
    }


def dumps(doc: dict[str, Any]) -> str:
    """The document as JSON with one event per line (valid JSON, and diffs read event by event)."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    lines = ",\n".join(json.dumps(e, separators=(",", ":"), sort_keys=True) for e in doc["traceEvents"])
    return json.dumps(head, sort_keys=True)[:-1] + ',"traceEvents":[\n' + lines + "\n]}\n"


def write_perfetto(result: SimResult, path: str | Path, ranks: list[int] | None = None, detail: str = "op") -> int:
    """Write the timeline to ``path`` (JSON); returns the number of events."""
    doc = perfetto_trace(result, ranks, detail)
    p = Path(path)
    if p.exists() and p.is_dir():
        raise DataError("out", f"{str(p)!r} is a directory", "give a file name ending in .json")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", encoding="utf-8") as f:
            f.write(dumps(doc))
    except OSError as e:
        raise DataError("out", f"cannot write {str(p)!r} ({e.strerror or e})", "choose a writable path") from None
    return len(doc["traceEvents"])


__all__ = ["perfetto_trace", "write_perfetto", "dumps", "default_ranks", "SimRank", "DETAILS"]
