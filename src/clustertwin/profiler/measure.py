"""Measured GEMMs of a trace as samples, and the clustertwin op that prices one."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from ..workload.ops import Op, OpKind, Phase
from .kineto import GemmShape, Kernel, Trace

_ELEM = {"fp8": 1, "fp4": 1, "fp32": 4, "tf32": 4}


@dataclass(frozen=True)
class GemmSample:
    shape: GemmShape
    seconds: float          # the launching op's kernels, summed (split-K reductions included)


def gemm_samples(traces: Iterable[Trace]) -> list[GemmSample]:
    """One sample per GEMM op instance inside a step whose shape is known."""
    out = []
    for t in traces:
        per_op: dict[int, list[Kernel]] = defaultdict(list)
        for k in t.kernels:
            if k.step >= 0 and k.category == "gemm" and k.gemm is not None and k.dur > 0:
                per_op[k.op_id].append(k)
        for ks in per_op.values():
            out.append(GemmSample(ks[0].gemm, sum(k.dur for k in ks) * 1e-6))  # type: ignore[arg-type]
    return out


def gemm_op(g: GemmShape):
    """A clustertwin GEMM op of a measured shape (a forward GEMM outside the layers: no TP chunking)."""
    eb = _ELEM.get(g.dtype, 2)
    nbytes = float(g.batch * (g.m * g.k + g.k * g.n + g.m * g.n) * eb)
    return Op(name="trace.gemm", kind=OpKind.GEMM, phase=Phase.FWD, flops=g.flops, bytes=nbytes,
              shape=(g.batch, g.m, g.n, g.k), dtype=g.dtype, layer="trace")
