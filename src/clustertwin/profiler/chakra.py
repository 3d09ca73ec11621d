"""Chakra host + device traces: the JSON ``chakra_trace_link`` writes from a PyTorch execution trace (the
Chakra host trace) and the Kineto trace of the same run (the Chakra device trace).

Format (mlcommons/chakra ``src/trace_link/trace_linker.py``, ``construct_et_plus_data`` and
``process_dependent_gpu_ops``; schema ``1.0.2-chakra.0.0.4`` and later): ``nodes`` of the host trace, the
CPU ops among them given ``ts``/``inclusive_dur``/``exclusive_dur`` from Kineto, and one node per GPU
operation, a copy of its launching CPU op (``inputs``/``outputs`` as ``{values, shapes, types}``, ``attrs``)
with ``cat`` (``kernel``, ``gpu_memcpy``, ...), the kernel's ``name``, ``ts``, ``inclusive_dur``,
``exclusive_dur``, ``stream``, ``ctrl_deps`` (the CPU op) and, for collectives, ``pg_name``. Times are
Kineto's microseconds. Steps are the ``ProfilerStep#N`` nodes; process groups come from the
``## process_group:init ##`` node where the trace has one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import DataError
from .classify import classify, family, nccl_kind
from .kineto import (ATTENTION_OPS, GEMM_OPS, GPU_CATS, Kernel, Step, Trace, _STEP_RE, _elementwise_bytes,
                     attention_shape, gemm_shape, is_backward)

_ELEM = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2, "long int": 8,
         "int": 4, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1}


def is_chakra(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and "schema" in doc


def _io(node: dict, key: str) -> tuple[list, list, list]:
    """(values, shapes, types) of a node's inputs or outputs, types without ``Tensor(...)``."""
    x = node.get(key)
    if isinstance(x, dict):
        vals, shapes, types = x.get("values") or [], x.get("shapes") or [], x.get("types") or []
    else:   # schema 1.0.1: inputs is the values, input_shapes/input_types beside it
        vals, shapes, types = x or [], node.get(key[:-1] + "_shapes") or [], node.get(key[:-1] + "_types") or []
    clean = [str(t)[7:-1] if str(t).startswith("Tensor(") and str(t).endswith(")") else str(t) for t in types]
    return list(vals), list(shapes), clean


def _tensor_bytes(vals: list, types: list) -> float:
    """Bytes of the tensors among a node's values: [tensor id, storage id, offset, numel, element bytes, device]
    (``types`` as ``_io`` gives them: a tensor's dtype alone, a list as ``GenericList[Tensor(...)]``)."""
    tot = 0.0
    for v, t in zip(vals, types):
        tensor = t.lower() in _ELEM or t.startswith("Tensor")
        items = v if t.startswith("GenericList[Tensor") and isinstance(v, list) else [v] if tensor else []
        for it in items:
            if isinstance(it, list) and len(it) >= 5 and all(isinstance(a, (int, float)) for a in it[3:5]):
                tot += float(it[3]) * float(it[4])
    return tot


def _op_name(node: dict) -> str:
    for a in node.get("attrs") or []:
        if isinstance(a, dict) and a.get("name") == "op_schema" and a.get("value"):
            return str(a["value"]).split("(", 1)[0].split(".", 1)[0]
    return str(node.get("op_schema") or "").split("(", 1)[0].split(".", 1)[0]


def _process_groups(nodes: list[dict]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for n in nodes:
        if "process_group:init" not in str(n.get("name", "")):
            continue
        vals, _, _ = _io(n, "inputs")
        for v in vals:
            try:
                cfg = json.loads(v) if isinstance(v, str) else v
            except ValueError:
                continue
            for g in cfg if isinstance(cfg, list) else []:
                if isinstance(g, dict) and "pg_name" in g and isinstance(g.get("ranks"), list):
                    out[str(g["pg_name"])] = tuple(int(r) for r in g["ranks"])
    return out


def read_chakra(path: Path, doc: dict) -> Trace:
    """A Trace from a Chakra host + device trace (``chakra_trace_link``'s output)."""
    nodes = [n for n in doc["nodes"] if isinstance(n, dict)]
    gpu = [n for n in nodes if str(n.get("cat") or "").lower() in GPU_CATS and n.get("ts") is not None]
    bad = f"trace {path.name}"
    if not any(str(n.get("cat")).lower() == "kernel" for n in gpu):
        raise DataError(bad, "a Chakra host trace without GPU operations",
                        "link it with its Kineto trace first (chakra_trace_link --chakra-host-trace ET.json "
                        "--chakra-device-trace KINETO.json --output-file linked.json), or give the Kineto trace")
    steps = sorted((Step(str(n["name"]), int(m.group(1)), float(n["ts"]), float(n["ts"]) + float(n.get("inclusive_dur") or 0))
                    for n in nodes if (m := _STEP_RE.match(str(n.get("name", "")))) and n.get("ts") is not None),
                   key=lambda s: s.start)
    if not steps:
        raise DataError(bad, "no ProfilerStep#N node with a time", "profile with torch.profiler and call prof.step() "
                        "once per step, then link the host and device traces")
    by_id = {n.get("id"): n for n in nodes}
    groups = _process_groups(nodes)
    kernels: list[Kernel] = []
    for n in gpu:
        name, cat = str(n.get("name") or ""), str(n.get("cat")).lower()
        category = classify(name) if cat == "kernel" else ("memcpy" if cat == "gpu_memcpy" else "memset")
        dur = float(n.get("inclusive_dur") or n.get("exclusive_dur") or 0.0)
        parent = by_id.get(n.get("ctrl_deps"))
        t_issue = float(parent["ts"]) if parent is not None and parent.get("ts") is not None else float(n["ts"])
        step = next((i for i, s in enumerate(steps) if s.start <= t_issue <= s.end), -1)
        stream = n.get("stream", 0)
        k = Kernel(name=name, ts=float(n["ts"]), dur=dur, stream=int(stream) if isinstance(stream, (int, float)) else 0,
                   category=category, family=family(name, category), step=step)
        op = (str(parent.get("name")) if parent is not None else "") or _op_name(n)
        k.op, k.op_id = op, int(n.get("ctrl_deps") or -1) if isinstance(n.get("ctrl_deps"), int) else -1
        if parent is not None:
            k.phase = "bwd" if is_backward([parent]) else "fwd"
        vals, shapes, types = _io(n, "inputs")
        if category == "gemm" and op in GEMM_OPS:
            k.gemm = gemm_shape(op, shapes, types, name)
        elif category == "attention" and op in ATTENTION_OPS:
            k.attention = attention_shape(op, shapes)
        elif category == "elementwise":
            k.bytes = _elementwise_bytes(shapes, types)
        elif category in ("collective", "p2p"):
            k.collective = nccl_kind(name)
            if k.collective == "send_recv":
                k.category = "p2p"
            ovals, _, otypes = _io(n, "outputs")
            k.comm_bytes = max(_tensor_bytes(vals, types), _tensor_bytes(ovals, otypes))
            ranks = groups.get(str(n.get("pg_name") or ""), ())
            k.group_ranks, k.group_size = ranks, len(ranks)
            k.group_name = str(n.get("pg_name") or "")
        kernels.append(k)
    kernels.sort(key=lambda k: k.ts)
    if not any(k.step >= 0 and k.category not in ("memcpy", "memset") for k in kernels):
        raise DataError(bad, "no GPU kernel was launched inside a ProfilerStep#N",
                        "profile whole steps (schedule with active >= 1) and call prof.step() each step")
    default = groups.get("0", ())
    return Trace(path=str(path), producer=f"Chakra host + device trace (chakra_trace_link), schema {doc.get('schema')}",
                 device_name="", rank=0, world_size=max(1, len(default)), steps=steps, kernels=kernels,
                 record_shapes=any(k.gemm is not None for k in kernels))
